"""The history codec: every operation, record, response and check survives JSON, field for field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqspec.adapters.inprocess import EPOCH, InProcessTarget
from rmqspec.conformance.checker import check_history
from rmqspec.conformance.codec import (
    OP_KINDS,
    CodecError,
    check_from_json,
    check_to_json,
    event_op,
    op_arguments,
    op_from_json,
    op_kind,
    op_to_json,
    record_from_json,
    record_to_json,
    response_from_json,
    response_to_json,
)
from rmqspec.conformance.contract import CheckEvent, Response
from rmqspec.conformance.history import Event, HistoryError, RecordingTarget, load, save
from rmqspec.reference.batch import Batch, BatchEntry
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import TxAction
from rmqspec.reference.model import (
    ConsumerSendBack,
    EndTx,
    GetMaxOffset,
    Heartbeat,
    Model,
    Op,
    Pull,
    QueryUniqKey,
    Send,
    SendBatch,
    ViewMessage,
)
from rmqspec.reference.put import Message
from rmqspec.reference.records import Record, props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

ints = st.integers(-(2**63), 2**63 - 1)
small = st.integers(-5, 1000)
text = st.text(max_size=12)
opt_text = st.none() | text
properties = st.dictionaries(text, text, max_size=4).map(props)
hosts = st.tuples(st.sampled_from(["127.0.0.1", "10.0.0.7", "::1"]), st.integers(0, 65535))


def json_round_trip(d: object) -> object:
    """What a history file gives back: the value written as JSON Lines and read again."""
    return json.loads(json.dumps(d, ensure_ascii=False))


messages = st.builds(
    Message,
    topic=text,
    body=st.binary(max_size=16),
    properties=properties,
    queue_id=small,
    sys_flag=small,
    flag=ints,
    born_timestamp=st.none() | ints,
    born_host=hosts,
    producer_group=text,
    reconsume_times=st.none() | small,
    max_reconsume_times=st.none() | small,
    default_topic_queue_nums=small,
    version=small,
)
entries = st.builds(BatchEntry, st.binary(max_size=8), properties, ints, st.none() | text)
batches = st.builds(
    Batch,
    topic=text,
    entries=st.lists(entries, max_size=3).map(tuple),
    queue_id=small,
    sys_flag=small,
    properties=properties,
    born_timestamp=st.none() | ints,
    born_host=hosts,
    default_topic_queue_nums=small,
)
send_backs = st.builds(SendBack, text, ints, small, st.none() | small, opt_text, opt_text, small)
end_txs = st.builds(
    EndTransaction, text, ints, ints, st.sampled_from(TxAction), st.booleans(), opt_text, opt_text
)
operations: st.SearchStrategy[Op] = st.one_of(
    st.builds(Send, messages, small),
    st.builds(SendBatch, batches, small),
    st.builds(Pull, text, small, ints, small, text, hosts),
    st.builds(ConsumerSendBack, send_backs, small),
    st.builds(EndTx, end_txs),
    st.builds(Heartbeat, text, st.booleans()),
    st.builds(GetMaxOffset, text, small),
    st.builds(ViewMessage, ints),
    st.builds(QueryUniqKey, text, text),
)
records = st.builds(
    Record,
    commit_log_offset=st.integers(0, 2**63 - 1),
    size=small,
    topic=text,
    queue_id=small,
    queue_offset=ints,
    sys_flag=small,
    flag=ints,
    body=st.binary(max_size=16),
    properties=properties,
    born_timestamp=ints,
    store_timestamp=ints,
    born_host=hosts,
    store_host=st.tuples(st.sampled_from(["127.0.0.1", "10.0.0.7"]), st.integers(0, 65535)),
    reconsume_times=small,
    prepared_transaction_offset=ints,
)
field_values = st.one_of(st.none(), ints, text)
responses = st.builds(
    Response,
    code=small,
    remark=opt_text,
    fields=st.dictionaries(text, field_values, max_size=4),
    records=st.lists(records, max_size=2).map(tuple),
) | st.builds(Response, code=st.just(0), remark=opt_text, no_response=st.just(True))  # sent one-way


@given(responses.filter(lambda r: not r.no_response))
def test_a_one_way_request_has_no_answer_to_record(resp: Response) -> None:
    """history/judged-answers: ``no_response`` (sent one-way) goes with code 0, no fields, no records."""
    d = dict(response_to_json(resp), no_response=True)
    if resp.code == 0 and not resp.fields and not resp.records:
        assert response_from_json(d).no_response
    else:
        with pytest.raises(CodecError, match="sent one-way"):
            response_from_json(d)


@given(operations)
def test_every_operation_round_trips_through_json(op: Op) -> None:
    d = op_to_json(op)
    assert d["f"] == op_kind(op) and d["f"] in OP_KINDS
    assert op_from_json(json_round_trip(d)) == op  # type: ignore[arg-type]
    f, args = op_arguments(op)
    assert event_op(f, json_round_trip(args)) == op  # type: ignore[arg-type]


def test_every_operation_kind_is_drawn() -> None:
    """The property above covers every member of the ``Op`` union (and so every kind of the codec)."""
    kinds = {
        op_kind(op)
        for op in (
            Send(Message("T")),
            Send(Message("T", properties=props(TRAN_MSG="true"))),
            SendBatch(Batch("T", ())),
            Pull("T", 0, 0),
            ConsumerSendBack(SendBack("G", 0)),
            EndTx(EndTransaction("PG", 0, 0, TxAction.COMMIT)),
            Heartbeat("PG"),
            GetMaxOffset("T", 0),
            ViewMessage(0),
            QueryUniqKey("T", "K"),
        )
    }
    assert kinds == set(OP_KINDS)
    assert set(Op.__args__) == {
        Send,
        SendBatch,
        Pull,
        ConsumerSendBack,
        EndTx,
        Heartbeat,
        GetMaxOffset,
        ViewMessage,
        QueryUniqKey,
    }


@given(records)
def test_records_round_trip(r: Record) -> None:
    assert record_from_json(json_round_trip(record_to_json(r))) == r


@given(responses)
def test_responses_round_trip(resp: Response) -> None:
    back = response_from_json(json_round_trip(response_to_json(resp)))
    assert back == resp


@given(records, ints, small, st.integers(0, 2**63 - 1), text)
def test_checks_round_trip(message: Record, time: int, table: int, clo: int, group: str) -> None:
    c = CheckEvent(time, group, table, clo, message)
    assert check_from_json(json_round_trip(check_to_json(c)), time) == c


def test_a_body_that_is_not_utf8_is_kept_as_base64() -> None:
    d = op_to_json(Send(Message("T", b"\xff\x00a")))
    assert "body" not in d and d["body_base64"] == "/wBh"
    assert op_to_json(Send(Message("T", b"hi")))["body"] == "hi"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"f": "sned", "topic": "T"}, "unknown operation 'sned'"),
        ({"f": "pull", "queue": 0}, "pull: missing 'topic'"),
        ({"f": "send", "topic": "T", "colour": "red"}, "send: unknown field(s) colour"),
        ({"f": "send", "topic": "T", "flag": "1"}, "send: 'flag' must be a whole number, not '1'"),
        (
            {"f": "send", "topic": "T", "properties": {"A": 1}},
            "send: 'properties' must be an object of strings",
        ),
        (
            {"f": "end_tx", "group": "G", "table_offset": 0, "commit_log_offset": 0, "action": 3},
            "not 0, 8 or 12",
        ),
        ({"f": "send", "topic": "T", "body_base64": "%%"}, "'body_base64' is not base64"),
        ({"f": "heartbeat", "group": "G", "online": "yes"}, "'online' must be true or false"),
    ],
)
def test_bad_values_are_one_line_errors(value: dict[str, object], says: str) -> None:
    with pytest.raises(CodecError) as e:
        op_from_json(value)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_response_the_codec_cannot_read_is_named() -> None:
    with pytest.raises(CodecError, match="missing 'code'"):
        response_from_json({"fields": {}})
    with pytest.raises(CodecError, match="record 0: missing 'topic'"):
        response_from_json({"code": 0, "records": [{"queue_id": 0}]})


# --- what the recording writes --------------------------------------------------------------------------


def flagged_history(flag: int) -> list[Event]:
    t = RecordingTarget(InProcessTarget(Model(BrokerConfig("1s 2s"))))
    t.execute(Send(Message("T", b"x", props(UNIQ_KEY="F1"), flag=flag, born_timestamp=EPOCH - 5)))
    t.advance_to(EPOCH + 2000)
    t.execute(Pull("T", 0, 0))
    return t.events


def test_a_history_records_every_send_field_and_a_correct_broker_passes_with_a_flag() -> None:
    events = flagged_history(7)
    assert events[0].value["flag"] == 7 and events[0].value["born_timestamp"] == EPOCH - 5
    assert events[-1].value["records"][0]["flag"] == 7
    v = check_history(events, BrokerConfig("1s 2s"), epsilon_ms=100, check_phase_ms=0)
    assert v.status == "pass", v.anomalies
    # A broker that stores another flag than the one sent fails on the record, by the send's rule.
    events[-1].value["records"][0]["flag"] = 0
    v = check_history(events, BrokerConfig("1s 2s"), epsilon_ms=100, check_phase_ms=0)
    assert [(a.name, a.rule) for a in v.anomalies] == [("wrong-flag", "put/send-result")]


def test_histories_of_format_1_are_read(tmp_path: Path) -> None:
    """A format-1 history (no flag, born time or hosts recorded) reads with the codec's defaults."""
    v1 = tmp_path / "v1.jsonl"
    lines = [
        {"rmqspec_history": 1, "target": "reference"},
        {
            "index": 0,
            "process": 0,
            "type": "invoke",
            "f": "send",
            "time": EPOCH,
            "value": {
                "topic": "T",
                "queue": 0,
                "body": "x",
                "properties": {"UNIQ_KEY": "U1"},
                "sys_flag": 0,
                "group": "PG",
                "reconsume_times": None,
                "max_reconsume_times": None,
            },
        },
        {
            "index": 1,
            "process": 0,
            "type": "ok",
            "f": "send",
            "time": EPOCH,
            "value": {
                "code": 0,
                "remark": None,
                "records": [],
                "no_response": False,
                "fields": {"queue_id": 0, "queue_offset": 0, "msg_id": "7F00000100002AAF0000000000000000"},
            },
        },
    ]
    v1.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    meta, events = load(v1)
    assert meta["rmqspec_history"] == 1
    assert event_op(events[0].f, events[0].value) == Send(Message("T", b"x", props(UNIQ_KEY="U1")))
    assert check_history(events, BrokerConfig(), epsilon_ms=0, check_phase_ms=0).status == "pass"


def test_a_history_of_an_unknown_format_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "v9.jsonl"
    path.write_text(json.dumps({"rmqspec_history": 9}) + "\n", encoding="utf-8")
    with pytest.raises(HistoryError, match="history format 9 is not one this rmqspec reads"):
        load(path)


def test_save_then_load_gives_the_same_events(tmp_path: Path) -> None:
    events = flagged_history(3)
    save(events, tmp_path / "h.jsonl")
    meta, back = load(tmp_path / "h.jsonl")
    assert meta["rmqspec_history"] == 2
    assert back == events


def test_the_model_answers_as_the_in_process_target_does() -> None:
    """``response_of`` is the in-process target's translation (which should become a call of it)."""
    from rmqspec.adapters.inprocess import to_response
    from rmqspec.conformance.codec import response_of

    model = Model(BrokerConfig("1s 2s"))
    state = model.initial()
    ops: list[Op] = [
        Send(Message("T", b"a", props(UNIQ_KEY="A1"))),
        Send(Message("T", b"d", props(UNIQ_KEY="D1", DELAY="1"))),
        Send(Message("SCHEDULE_TOPIC_XXXX", b"x")),
        SendBatch(Batch("T", (BatchEntry(b"b", props(UNIQ_KEY="B1")),))),
        Pull("T", 0, 0),
        Pull("T", 0, 9),
        Pull("Nope", 0, 0),
        ConsumerSendBack(SendBack("CG", 0)),
        EndTx(EndTransaction("PG", 0, 10**6, TxAction.COMMIT)),
        EndTx(EndTransaction("PG", 0, 0, TxAction.UNKNOW)),
        Heartbeat("PG"),
        GetMaxOffset("T", 0),
        ViewMessage(0),
        QueryUniqKey("T", "A1"),
    ]
    for op in ops:
        state, obs = model.step(state, op, EPOCH)
        assert response_of(obs) == to_response(obs), op

"""Requests sent one-way (spec history/judged-answers): recorded with ``no_response`` and no answer, and
judged by their effects alone, whatever their kind. The END_TRANSACTION case (Apache's producer sends every
END_TRANSACTION one-way) is the history fixture lost-message--one-way-commit; here a send and a rollback."""

from __future__ import annotations

import copy

from rmqspec.adapters.inprocess import EPOCH, InProcessTarget
from rmqspec.conformance.checker import Verdict, check_history
from rmqspec.conformance.history import Event, RecordingTarget
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import TxAction
from rmqspec.reference.model import EndTx, Model, Pull, Send
from rmqspec.reference.put import Message
from rmqspec.reference.records import props
from rmqspec.reference.transaction import EndTransaction

CONFIG = BrokerConfig("1s 2s 3s")
ONE_WAY: dict[str, object] = {"code": 0, "remark": None, "fields": {}, "records": [], "no_response": True}
EMPTY = {"next_begin_offset": 0, "min_offset": 0, "max_offset": 0}


def judge(events: list[Event]) -> Verdict:
    return check_history(events, CONFIG, epsilon_ms=100)


def one_way(events: list[Event], f: str) -> list[Event]:
    """``events`` with the completion of the first ``f`` recorded as a request sent one-way."""
    out = copy.deepcopy(events)
    done = next(e for e in out if e.f == f and e.type != "invoke")
    out[done.index] = Event(done.index, done.process, "ok", f, dict(ONE_WAY), done.time)
    return out


def sent_then_pulled() -> list[Event]:
    t = RecordingTarget(InProcessTarget(Model(CONFIG)))
    t.execute(Send(Message("T", b"a", props(UNIQ_KEY="S1", WAIT="true"))))
    t.advance_to(EPOCH + 500)
    t.execute(Pull("T", 0, 0))
    return t.events


def test_a_one_way_send_is_judged_by_the_message_it_stored() -> None:
    good = one_way(sent_then_pulled(), "send")
    assert judge(good).status == "pass", [a.to_json() for a in judge(good).anomalies]
    lost = copy.deepcopy(good)
    lost[-1].value.update(code=19, records=[], fields=EMPTY)
    v = judge(lost)
    assert v.status == "fail" and [(r.name, r.rule) for r in v.root_causes] == [
        ("lost-message", "put/send-result")
    ]


def test_a_one_way_rollback_is_judged_by_the_message_staying_invisible() -> None:
    t = RecordingTarget(InProcessTarget(Model(CONFIG)))
    p = props(UNIQ_KEY="H1", TRAN_MSG="true", PGROUP="PG", WAIT="true")
    sent = t.execute(Send(Message("T", b"h", p, sys_flag=4, producer_group="PG")))
    offset = int(str(sent.fields["msg_id"])[-16:], 16)
    table = int(str(sent.fields["queue_offset"]))
    t.execute(EndTx(EndTransaction("PG", table, offset, TxAction.ROLLBACK, msg_id="H1", transaction_id="H1")))
    t.advance_to(EPOCH + 500)
    t.execute(Pull("T", 0, 0))
    good = one_way(t.events, "end_tx")
    assert judge(good).status == "pass", [a.to_json() for a in judge(good).anomalies]
    # The same one-way ROLLBACK, and yet the message became visible: its effect is wrong.
    visible = copy.deepcopy(good)
    shown = copy.deepcopy(sent_then_pulled()[-1].value["records"][0])
    shown["properties"] = {"UNIQ_KEY": "H1", "TRAN_MSG": "true", "PGROUP": "PG", "WAIT": "true"}
    visible[-1].value.update(
        code=0, records=[shown], fields={"next_begin_offset": 1, "min_offset": 0, "max_offset": 1}
    )
    v = judge(visible)
    assert v.status == "fail" and v.root_causes[0].name == "rollback-visible"


def test_a_one_way_request_with_an_answer_recorded_is_an_answer_the_checker_cannot_read() -> None:
    answered = one_way(sent_then_pulled(), "send")
    done = next(e for e in answered if e.f == "send" and e.type != "invoke")
    done.value.update(code=1)
    v = judge(answered)
    assert v.status == "fail"
    assert (v.root_causes[0].name, v.root_causes[0].rule) == ("unjudged-answer", "history/judged-answers")

"""Edges of the reference model that the spec examples do not pin down, each checked against the facts.

Every expected value below is written from /work/shared/rocketmq-facts.md (section named in each test) or
from the RocketMQ 4.9.x source the facts were read from, never from the model's own output: offsets,
sizes and message ids are worked out by hand with the facts' formulas (§8 record layout and offset
message id, §1.4 batch body). Some tests edit a state by hand to reach broker situations the public
operations cannot produce (a consume-queue entry whose record is gone, a schedule record without
REAL_QID); facts §3.4 says what the broker does then.
"""

from __future__ import annotations

from typing import TypeVar

import attrs
import pytest

from rmqspec.reference.batch import Batch, BatchEntry, client_check
from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import (
    HALF_TOPIC,
    OP_TOPIC,
    SCHEDULE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    Code,
    PullStatus,
    TxAction,
)
from rmqspec.reference.model import ConsumerSendBack, EndTx, Model, Send, SendBatch
from rmqspec.reference.observations import (
    BatchOk,
    CheckRequest,
    Delivered,
    Discarded,
    DroppedOnDelivery,
    EndTxOk,
    Found,
    NoResponse,
    PullResult,
    Rejected,
    SendBackOk,
    SendOk,
)
from rmqspec.reference.properties import decode_properties, encode_properties
from rmqspec.reference.put import Message
from rmqspec.reference.records import Props, Record, props
from rmqspec.reference.schedule import Empty, NotDue, Stuck, deliver_head
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.state import BrokerState
from rmqspec.reference.transaction import EndTransaction

T = TypeVar("T")

HOST = ("10.0.0.7", 10911)  # a broker store host other than the model's default
BORN_HOST = ("10.1.2.3", 4567)  # a producer address other than Message's default
TX = BrokerConfig(transaction_timeout_ms=3000, transaction_check_interval_ms=1000, store_host=HOST)


def is_a(value: object, cls: type[T]) -> T:
    assert isinstance(value, cls), value
    return value


def offset_id(host: tuple[str, int], commit_log_offset: int) -> str:
    """Facts §8: upper-case hex of the store IP (4 bytes), port (int32) and commit-log offset (int64)."""
    ip, port = host
    return "".join(f"{int(x):02X}" for x in ip.split(".")) + f"{port:08X}" + f"{commit_log_offset:016X}"


def props_len(*maps: dict[str, str]) -> int:
    """Facts §0: a properties string is key\\x01value pairs joined by \\x02; several strings joined by \\x02."""
    pairs = [len(k) + 1 + len(v) for m in maps for k, v in m.items()]
    return sum(pairs) + len(pairs) - 1 if pairs else 0


def half(key: str, topic: str = "TxT", queue_id: int = 0, born: int | None = None, **extra: str) -> Message:
    """A transactional half message as the 4.9.8 client sends it (facts §5.1): TRAN_MSG, PGROUP, PREPARED."""
    p = props(TRAN_MSG="true", PGROUP="PG", UNIQ_KEY=key, **extra)
    return Message(topic, b"t", p, queue_id=queue_id, sys_flag=4, born_timestamp=born)


def send(model: Model, state: BrokerState, msg: Message, now: int) -> tuple[BrokerState, SendOk]:
    state, out = model.send(state, msg, now)
    return state, is_a(out, SendOk)


def end(record: Record, action: TxAction, group: str = "PG") -> EndTransaction:
    return EndTransaction(group, record.queue_offset, record.commit_log_offset, action)


def pulled(model: Model, state: BrokerState, topic: str, queue_id: int = 0, offset: int = 0) -> list[Record]:
    return list(is_a(model.pull(state, topic, queue_id, offset), PullResult).records)


# --- transaction check (facts §5.4) -------------------------------------------------------------------------


def test_a_check_request_names_the_put_back_copy_and_restores_the_real_queue() -> None:
    """§5.4 step 9 and §10: the copy keeps body, sysFlag, born time and hosts; the request names its offsets;
    the body is the half message read from the queue (its store time) with REAL_* restored and WAIT=false."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")  # online by default
    msg = attrs.evolve(half("K1", queue_id=2, born=0), sys_flag=4 | 2, born_host=BORN_HOST)
    state, sent = send(model, state, msg, 0)
    assert (sent.record.topic, sent.record.queue_id, sent.record.sys_flag) == (HALF_TOPIC, 0, 2)  # §5.2
    state, events = model.check(state, 4000)
    req = is_a(events[0], CheckRequest)
    assert len(events) == 1
    assert (req.group, req.sent, req.transaction_id, req.at) == ("PG", True, "K1", 4000)
    copy_offset = sent.record.commit_log_offset + sent.record.size  # written right after the half record
    assert (req.tran_state_table_offset, req.commit_log_offset) == (1, copy_offset)
    assert req.offset_msg_id == offset_id(HOST, copy_offset)
    copy = is_a(model.view(state, copy_offset), Found).records[0]
    assert (copy.topic, copy.queue_id, copy.queue_offset, copy.sys_flag) == (HALF_TOPIC, 0, 1, 2)
    assert (copy.born_timestamp, copy.born_host, copy.store_host, copy.store_timestamp) == (
        0,
        BORN_HOST,
        HOST,
        4000,
    )
    assert copy.properties["TRANSACTION_CHECK_TIMES"] == "1"
    body = req.message
    assert (body.topic, body.queue_id, body.queue_offset, body.commit_log_offset) == (
        "TxT",
        2,
        1,
        copy_offset,
    )
    assert body.store_timestamp == sent.record.store_timestamp == 0
    assert body.properties["WAIT"] == "false" and body.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert body.born_host == BORN_HOST


def test_a_run_skips_a_resolved_record_then_checks_the_next_and_commits_its_offsets() -> None:
    """§5.4 step 3.1 (resolved: mark its op done, go on) and step 4 (commit half and op offsets)."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, a = send(model, state, half("KA", born=0), 0)
    state, _b = send(model, state, half("KB", born=0), 0)
    state, done = model.end_transaction(state, end(a.record, TxAction.COMMIT), 100)
    is_a(done, EndTxOk)
    state, events = model.check(state, 4000)  # one run
    assert [is_a(e, CheckRequest).transaction_id for e in events] == ["KB"]
    # a resolved, b checked (its copy at offset 2 was stored during this run: the run stops there)
    assert (state.tx_half_offset, state.tx_op_offset) == (2, 1)


def test_an_op_for_an_offset_the_check_already_passed_is_marked_done() -> None:
    """§5.4 step 2: an op whose half offset is below halfOffset goes to doneOpOffset; the op offset advances."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, h = send(model, state, half("KH", born=0), 0)
    state, first = model.check(state, 4000)
    assert len(first) == 1 and (state.tx_half_offset, state.tx_op_offset) == (1, 0)
    state, done = model.end_transaction(state, end(h.record, TxAction.COMMIT), 4500)  # names the original
    is_a(done, EndTxOk)
    state, second = model.check(state, 5000)
    assert state.tx_op_offset == 1
    # the op named the original only: the copy is checked again (spec transaction/check-resolved)
    assert [is_a(e, CheckRequest).message.properties["TRANSACTION_CHECK_TIMES"] for e in second] == ["2"]


def test_a_discard_keeps_the_record_and_the_run_goes_on() -> None:
    """§5.4 steps 3 and 5: TRANSACTION_CHECK_TIMES >= max is discarded unraised into the one-queue topic
    TRANS_CHECK_MAX_TIME_TOPIC (flag, sysFlag, born time and hosts, reconsumeTimes kept), then i+1."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    worn = attrs.evolve(
        half("KW", born=5, TRANSACTION_CHECK_TIMES="15"),
        sys_flag=4 | 2,
        flag=5,
        reconsume_times=2,
        born_host=BORN_HOST,
    )
    state, w = send(model, state, worn, 0)
    state, _fresh = send(model, state, half("KF", born=0), 0)
    state, events = model.check(state, 4000)
    assert len(events) == 2
    gone = is_a(events[0], Discarded)
    assert gone.reason == "max-checks" and gone.half.commit_log_offset == w.record.commit_log_offset
    c = gone.copy
    assert (c.topic, c.queue_id, c.sys_flag, c.flag, c.reconsume_times) == (
        TRANS_CHECK_MAX_TIME_TOPIC,
        0,
        2,
        5,
        2,
    )
    assert (c.born_timestamp, c.born_host, c.store_host) == (5, BORN_HOST, HOST)
    assert c.properties["TRANSACTION_CHECK_TIMES"] == "15"
    assert is_a(events[1], CheckRequest).transaction_id == "KF"
    assert [r.commit_log_offset for r in pulled(model, state, TRANS_CHECK_MAX_TIME_TOPIC)] == [
        c.commit_log_offset
    ]
    assert is_a(model.pull(state, TRANS_CHECK_MAX_TIME_TOPIC, 1, 0), Rejected).code == Code.SYSTEM_ERROR


@pytest.mark.parametrize(("age", "expired"), [(3_600_000, False), (3_600_001, True)])
def test_expiry_needs_an_age_strictly_above_file_reserved_time(age: int, expired: bool) -> None:
    """§5.4 step 4: needSkip is ``now - born > fileReservedTime × 3600000``; the discard carries the raise."""
    model = Model(attrs.evolve(TX, file_reserved_time_h=1))
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, half("KE", born=0), 0)
    state, events = model.check(state, age)
    assert len(events) == 1
    if expired:
        gone = is_a(events[0], Discarded)
        assert gone.reason == "expired" and gone.copy.properties["TRANSACTION_CHECK_TIMES"] == "1"
    else:
        is_a(events[0], CheckRequest)


def test_a_record_stored_at_the_start_of_the_run_waits_for_the_next_run() -> None:
    """§5.4 step 6: ``storeTimestamp >= startTime`` stops the run, even when the message is old enough."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, half("KS", born=0), 5000)
    state, events = model.check(state, 5000)
    assert events == [] and state.tx_half_offset == 0
    state, events = model.check(state, 5001)
    assert [is_a(e, CheckRequest).transaction_id for e in events] == ["KS"]


def test_a_message_born_one_millisecond_in_the_future_is_checked() -> None:
    """§5.4 step 8: ``age <= -1`` needs a check (clock skew)."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, half("KN", born=1001), 0)
    state, events = model.check(state, 1000)
    assert [is_a(e, CheckRequest).transaction_id for e in events] == ["KN"]


def test_a_zero_immunity_needs_an_age_above_zero() -> None:
    """§5.4 steps 7-8 (4.9.8 TransactionalMessageServiceImpl.check ~L207-236): immunity 0 s; at age 0 the
    record is neither immune (0 < 0) nor due (0 > 0): the loop reads the op queue until the clock moves and
    checks it in the same run, at age 1."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, half("KZ", born=1000, CHECK_IMMUNITY_TIME_IN_SECONDS="0"), 0)
    state, events = model.check(state, 1000)
    assert events == [] and state.tx_run is not None and state.tx_run.resume_at == 1001
    state, events = model.check(state, 1001)
    assert len(events) == 1 and is_a(events[0], CheckRequest).transaction_id == "KZ"
    assert is_a(events[0], CheckRequest).at == 1001 and state.tx_last_run_end == 1001


def test_an_immune_record_gets_a_copy_and_the_run_goes_on() -> None:
    """§5.4 step 7: age < immunity → an immunity copy with TRAN_PREPARED_QUEUE_OFFSET = its queue offset,
    then i+1; the half topic has one queue (§0)."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, _a = send(model, state, half("KI", born=0, CHECK_IMMUNITY_TIME_IN_SECONDS="60"), 0)
    state, _b = send(model, state, half("KJ", born=0), 0)
    state, events = model.check(state, 4000)
    assert [is_a(e, CheckRequest).transaction_id for e in events] == ["KJ"]
    copies = pulled(model, state, HALF_TOPIC, 0, 2)
    assert [(r.uniq_key, r.queue_offset) for r in copies] == [("KI", 2), ("KJ", 3)]
    assert copies[0].properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
    assert copies[0].properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert is_a(model.pull(state, HALF_TOPIC, 1, 0), Rejected).code == Code.SYSTEM_ERROR


def test_an_immune_copy_whose_original_offset_is_in_the_remove_map_is_resolved() -> None:
    """§5.4 step 7 (checkPrepareQueueOffset): TRAN_PREPARED_QUEUE_OFFSET found in removeMap → mark the op
    done, remove it from the map and skip the record without a copy. Here the property names the next
    record, which a rollback ended: that record is then no longer in the map and is checked."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    forged = half("KP", born=0, CHECK_IMMUNITY_TIME_IN_SECONDS="60", TRAN_PREPARED_QUEUE_OFFSET="1")
    state, _a = send(model, state, forged, 0)
    state, b = send(model, state, half("KQ", born=0), 0)
    state, done = model.end_transaction(state, end(b.record, TxAction.ROLLBACK), 100)
    is_a(done, EndTxOk)
    state, events = model.check(state, 4000)
    assert [is_a(e, CheckRequest).transaction_id for e in events] == ["KQ"]
    assert model.max_offset(state, HALF_TOPIC, 0).offset == 3  # a, b and b's check copy: no copy of a
    assert state.tx_op_offset == 1


def test_an_unparsable_prepared_queue_offset_writes_no_copy_and_waits() -> None:
    """§5.4 step 7 (4.9.8 checkPrepareQueueOffset ~L332): getLong gives -1 for a value that does not parse;
    checkPrepareQueueOffset then returns false, no copy is written, and the record, not yet past its
    immunity, is not due: the loop reads the op queue until its age passes 60 s, then checks it."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    odd = half("KX", born=0, CHECK_IMMUNITY_TIME_IN_SECONDS="60", TRAN_PREPARED_QUEUE_OFFSET="x")
    state, _h = send(model, state, odd, 0)
    state, events = model.check(state, 4000)
    assert events == []
    assert model.max_offset(state, HALF_TOPIC, 0).offset == 1 and state.tx_half_offset == 0
    assert state.tx_run is not None and state.tx_run.resume_at == 60_001
    state, events = model.check(state, 60_001)
    assert [is_a(e, CheckRequest).at for e in events] == [60_001]


@pytest.mark.parametrize(("immunity", "when"), [("1", 2000), ("2", 3000), ("-1", 4000)])
def test_five_x_immunity_is_the_value_even_below_the_timeout(immunity: str, when: int) -> None:
    """5.5.0 TransactionalMessageServiceImpl.getImmunityTime (as 4.9.8: value × 1000, -1 the timeout) and
    ``age <= immunity`` (5.4.0+): born 0, runs each second, timeout 3 s. max(value, timeout) is only
    END_TRANSACTION's (transaction/end-after-immunity)."""
    model = Model(attrs.evolve(TX, profile=Profile.V5))
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, half("K5", born=0, CHECK_IMMUNITY_TIME_IN_SECONDS=immunity), 0)
    state, events = model.advance(state, 0, when)
    assert [is_a(e, CheckRequest).at for e in events] == [when]


def test_a_producer_with_two_connections_stays_online_when_one_leaves() -> None:
    """§5.4 step 9: the check goes to any connected producer of the group."""
    model = Model(TX)
    state = model.heartbeat(model.heartbeat(model.initial(), "PG"), "PG", online=True)
    state = model.heartbeat(state, "PG", online=False)
    state, _h = send(model, state, half("KC", born=0), 0)
    state, events = model.check(state, 4000)
    assert is_a(events[0], CheckRequest).sent is True


def test_a_restart_drops_the_producer_connections() -> None:
    """A restarted broker has no client connections until the next heartbeat: its checks are skipped."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, half("KR", born=0), 0)
    state = model.restart(state)
    state, events = model.check(state, 4000)
    assert is_a(events[0], CheckRequest).sent is False


# --- END_TRANSACTION (facts §5.3, §10) ------------------------------------------------------------------------


def test_commit_writes_the_real_message_and_the_op() -> None:
    """§5.3 step 3: REAL_* queue, body, flag, born time and host, store host, reconsumeTimes copied;
    sysFlag = resetTransactionValue(flag, COMMIT); preparedTransactionOffset = the half's commit-log offset;
    the stored properties are the half's. The op: tag d, body = half queue offset, sysFlag 0, born now
    on the broker's own host (makeOpMessageInner). §10: the commit answer has no remark."""
    model = Model(TX)
    msg = attrs.evolve(
        half("KM", queue_id=1, born=100), sys_flag=4 | 2 | 1, flag=9, reconsume_times=3, born_host=BORN_HOST
    )
    state, _before = send(model, model.initial(), Message("Other", b"o"), 0)  # the half is not at offset 0
    state, sent = send(model, state, msg, 200)
    state, out = model.end_transaction(state, end(sent.record, TxAction.COMMIT), 300)
    ok = is_a(out, EndTxOk)
    assert ok.remark is None
    c = is_a(ok.committed, Record)
    assert (c.topic, c.queue_id, c.sys_flag, c.flag, c.reconsume_times) == ("TxT", 1, 0b1011, 9, 3)
    assert (c.born_timestamp, c.born_host, c.store_host, c.store_timestamp) == (100, BORN_HOST, HOST, 300)
    assert c.prepared_transaction_offset == sent.record.commit_log_offset
    assert (c.properties["TRAN_MSG"], c.properties["REAL_TOPIC"], c.properties["REAL_QID"]) == (
        "true",
        "TxT",
        "1",
    )
    assert [r.commit_log_offset for r in pulled(model, state, "TxT", 1)] == [c.commit_log_offset]
    op = is_a(ok.op, Record)
    assert (op.topic, op.queue_id, op.body, op.sys_flag, op.properties["TAGS"]) == (OP_TOPIC, 0, b"0", 0, "d")
    assert (op.store_timestamp, op.born_timestamp, op.born_host, op.store_host) == (300, 300, HOST, HOST)


def test_rollback_writes_only_the_op() -> None:
    """§5.3 rollback and §10: no real-topic message; remark "not set any response code"."""
    model = Model(TX)
    state, _first = send(model, model.initial(), half("K0"), 0)
    state, sent = send(model, state, half("K1"), 0)
    state, out = model.step(state, EndTx(end(sent.record, TxAction.ROLLBACK)), 700)
    ok = is_a(out, EndTxOk)
    assert ok.committed is None and ok.remark == "not set any response code"
    op = is_a(ok.op, Record)
    assert (op.body, op.store_timestamp) == (b"1", 700)
    assert is_a(model.pull(state, "TxT", 0, 0), PullResult).code == Code.PULL_NOT_FOUND


def test_commit_through_step_stores_at_the_request_time() -> None:
    model = Model(TX)
    state, sent = send(model, model.initial(), half("KT"), 0)
    state, out = model.step(state, EndTx(end(sent.record, TxAction.COMMIT)), 900)
    assert is_a(is_a(out, EndTxOk).committed, Record).store_timestamp == 900
    state, out = model.step(state, EndTx(end(sent.record, TxAction.UNKNOW)), 950)
    assert isinstance(out, NoResponse)


# --- consumer send-back (facts §4.1) ------------------------------------------------------------------------


def _failed(model: Model, state: BrokerState) -> tuple[BrokerState, SendOk]:
    msg = Message(
        "T", b"m", props(UNIQ_KEY="KU"), sys_flag=2, flag=5, born_timestamp=100, born_host=BORN_HOST
    )
    return send(model, state, msg, 150)


def test_a_send_back_copies_the_message_fields_and_picks_the_retry_queue() -> None:
    """§4.1 steps 4 and 10: queueId = choice % retryQueueNums; body, flag, sysFlag, born time and host and
    (4.9.8) the original store host are copied; reconsumeTimes + 1."""
    model = Model(attrs.evolve(TX, retry_queue_nums=2))
    state, sent = _failed(model, model.initial())
    state, out = model.send_back(state, SendBack("CG", sent.record.commit_log_offset), 1000)  # choice 0
    r = is_a(is_a(out, SendBackOk).record, Record)
    assert (r.topic, r.properties["REAL_TOPIC"], r.properties["REAL_QID"]) == (
        SCHEDULE_TOPIC,
        "%RETRY%CG",
        "0",
    )
    assert (r.flag, r.sys_flag, r.born_timestamp, r.born_host, r.store_host) == (5, 2, 100, BORN_HOST, HOST)
    assert r.reconsume_times == 1
    req = SendBack("CG", sent.record.commit_log_offset)
    state, stepped = model.step(state, ConsumerSendBack(req, queue_choice=3), 1100)
    assert is_a(is_a(stepped, SendBackOk).record, Record).properties["REAL_QID"] == "1"
    # the retry topic has retryQueueNums queues (§4.1 step 4; a send checks max(read, write), §1.1)
    assert is_a(model.pull(state, "%RETRY%CG", 2, 0), Rejected).code == Code.SYSTEM_ERROR
    state, ok = model.send(state, Message("%RETRY%CG", b"x", queue_id=1), 1200)
    is_a(ok, SendOk)
    state, bad = model.send(state, Message("%RETRY%CG", b"x", queue_id=2), 1300)
    assert is_a(bad, Rejected).code == Code.SYSTEM_ERROR


def test_the_dlq_has_one_queue() -> None:
    """§4.1 step 8: %DLQ%group, queue 0, created with 1 queue."""
    model = Model(TX)
    state, sent = _failed(model, model.initial())
    state, out = model.send_back(state, SendBack("CG", sent.record.commit_log_offset, delay_level=-1), 1000)
    r = is_a(is_a(out, SendBackOk).record, Record)
    assert (r.topic, r.queue_id) == ("%DLQ%CG", 0)
    assert [x.commit_log_offset for x in pulled(model, state, "%DLQ%CG")] == [r.commit_log_offset]
    assert is_a(model.pull(state, "%DLQ%CG", 1, 0), Rejected).code == Code.SYSTEM_ERROR


def test_the_header_max_counts_from_version_v3_4_9() -> None:
    """§4.1 step 7: the header's maxReconsumeTimes wins when request.version >= 121."""
    model = Model(TX)
    state, sent = _failed(model, model.initial())
    req = SendBack("CG", sent.record.commit_log_offset, max_reconsume_times=0, version=121)
    state, out = model.send_back(state, req, 1000)
    assert is_a(is_a(out, SendBackOk).record, Record).topic == "%DLQ%CG"


def test_send_back_on_a_read_only_broker_is_no_permission() -> None:
    """§4.1 step 2."""
    model = Model(attrs.evolve(TX, broker_writable=False))
    state, sent = _failed(model, model.initial())
    _state, out = model.send_back(state, SendBack("CG", sent.record.commit_log_offset), 1000)
    assert is_a(out, Rejected).code == Code.NO_PERMISSION


def test_send_back_without_retry_queues_succeeds_and_drops_the_message() -> None:
    """§4.1 step 3: retryQueueNums <= 0 → SUCCESS and nothing is written."""
    model = Model(attrs.evolve(TX, retry_queue_nums=0))
    state, sent = _failed(model, model.initial())
    state, out = model.send_back(state, SendBack("CG", sent.record.commit_log_offset), 1000)
    ok = is_a(out, SendBackOk)
    assert ok.record is None and ok.dropped is True and ok.code == Code.SUCCESS
    assert model.max_offset(state, SCHEDULE_TOPIC, 2).offset == 0


def test_a_send_back_whose_put_fails_is_a_system_error() -> None:
    """§4.1 step 11: any put status but PUT_OK → SYSTEM_ERROR. maxMessageSize limits the body (4.9.4+,
    put/message-illegal), so a retry copy that only grows in properties still fits; one whose properties
    string passes 32,767 characters does not (DefaultMessageStore.checkMessage)."""
    model = Model(attrs.evolve(TX, max_message_size=200))
    state, sent = _failed(model, model.initial())
    state, out = model.send_back(state, SendBack("CG", sent.record.commit_log_offset), 1000)
    assert (
        is_a(is_a(out, SendBackOk).record, Record).size > 200
    )  # RETRY_TOPIC, ORIGIN_MESSAGE_ID, REAL_* ...: accepted
    big = Message("T", b"m", props(UNIQ_KEY="KB", big="x" * 32_700))
    state, sent = send(model, state, big, 1000)
    _state, out = model.send_back(state, SendBack("CG", sent.record.commit_log_offset), 2000)
    bad = is_a(out, Rejected)
    assert bad.code == Code.SYSTEM_ERROR and bad.remark


# --- schedule delivery (facts §3.4, §3.5, §3.3) ---------------------------------------------------------------


def test_a_delivered_copy_keeps_the_message_fields() -> None:
    """§3.5: body, flag, sysFlag, bornTimestamp, bornHost, storeHost and reconsumeTimes are copied."""
    model = Model(attrs.evolve(TX, delay_levels="1s 2s 3s"))
    msg = Message(
        "D",
        b"d",
        props(DELAY="1"),
        sys_flag=2,
        flag=5,
        born_timestamp=100,
        born_host=BORN_HOST,
        reconsume_times=4,
    )
    state, _sent = send(model, model.initial(), msg, 0)
    state, events = model.advance(state, 0, 2000)
    c = is_a(events[0], Delivered).copy
    assert (c.topic, c.flag, c.sys_flag, c.reconsume_times, c.store_timestamp) == ("D", 5, 2, 4, 1000)
    assert (c.born_timestamp, c.born_host, c.store_host) == (100, BORN_HOST, HOST)


def test_a_delayed_half_message_is_dropped_on_delivery() -> None:
    """§5.2 (derived) and §3.4 step 4: a half message with DELAY goes through the schedule topic with
    REAL_TOPIC = the half topic, and the schedule service drops it."""
    model = Model(attrs.evolve(TX, delay_levels="1s 2s 3s"))
    state, sent = send(model, model.initial(), half("KD", DELAY="2"), 0)
    assert (sent.record.topic, sent.record.properties["REAL_TOPIC"]) == (SCHEDULE_TOPIC, HALF_TOPIC)
    state, events = model.deliver(state, 2000)
    dropped = is_a(events[0], DroppedOnDelivery)
    assert len(events) == 1
    assert (dropped.level, dropped.source.commit_log_offset) == (2, sent.record.commit_log_offset)
    state, again = model.deliver(state, 3000)
    assert again == [] and model.max_offset(state, HALF_TOPIC, 0).offset == 0


def _three_level_one(model: Model) -> tuple[BrokerState, list[SendOk]]:
    state = model.initial()
    sent = []
    for i in range(3):
        state, s = send(model, state, Message("D", str(i).encode(), props(DELAY="1")), 0)
        sent.append(s)
    return state, sent


def test_a_schedule_entry_whose_record_is_gone_is_skipped() -> None:
    """§3.4 step 2.3: a message missing from the commit log is skipped (continue)."""
    model = Model(attrs.evolve(TX, delay_levels="1s 2s 3s"))
    state, sent = _three_level_one(model)
    gone = sent[1].record.commit_log_offset
    state = attrs.evolve(state, store=attrs.evolve(state.store, index=state.store.index.delete(gone)))
    state, events = model.deliver(state, 1000)
    assert [is_a(e, Delivered).copy.body for e in events] == [b"0", b"2"]
    assert state.schedule_offsets[1] == 3


def test_a_schedule_record_without_real_qid_blocks_its_level() -> None:
    """§3.4 step 4 (derived): a message that can never be delivered (no REAL_QID) is retried forever at
    its offset, and the level's later messages wait behind it."""
    model = Model(attrs.evolve(TX, delay_levels="1s 2s 3s"))
    state, sent = _three_level_one(model)
    pos = state.store.index[sent[1].record.commit_log_offset]
    broken = state.store.records[pos]
    no_qid = attrs.evolve(broken, properties=broken.properties.delete("REAL_QID"))
    state = attrs.evolve(state, store=attrs.evolve(state.store, records=state.store.records.set(pos, no_qid)))
    state, events = model.deliver(state, 1000)
    assert [is_a(e, Delivered).copy.body for e in events] == [b"0"]
    assert state.schedule_offsets[1] == 1
    state, events = model.deliver(state, 60_000)
    assert events == [] and state.schedule_offsets[1] == 1
    _state, outcome = deliver_head(state, 1, 60_000, model.semantics)
    assert outcome == Stuck(1, 1)


def test_deliver_head_reports_not_due_and_empty_levels() -> None:
    """§3.4 step 2.2: a head not due blocks its level until storeTs + delay; an empty level has nothing."""
    model = Model(attrs.evolve(TX, delay_levels="1s 2s 3s"))
    state, _sent = send(model, model.initial(), Message("D", b"x", props(DELAY="2")), 100)
    _s, outcome = deliver_head(state, 2, 1000, model.semantics)
    assert outcome == NotDue(2, 2100)
    _s, outcome = deliver_head(state, 3, 1000, model.semantics)
    assert outcome == Empty(3)


def test_advance_delivers_every_level_at_its_deliver_time() -> None:
    """§3.4: each message is delivered when due (levels 1 and 3 of a three-level table)."""
    model = Model(attrs.evolve(TX, delay_levels="1s 2s 3s"))
    state = model.initial()
    state, _a = send(model, state, Message("D", b"a", props(DELAY="1")), 0)
    state, _b = send(model, state, Message("D", b"b", props(DELAY="1")), 500)
    state, _c = send(model, state, Message("D", b"c", props(DELAY="3")), 0)
    state, events = model.advance(state, 0, 10_000)
    times = {is_a(e, Delivered).copy.body: is_a(e, Delivered).copy.store_timestamp for e in events}
    assert times == {b"a": 1000, b"b": 1500, b"c": 3000}


def test_offsets_persisted_at_the_flush_tick_survive_a_restart() -> None:
    """§3.2-3.3: offsets are persisted every flushDelayOffsetInterval (10 s); a restart resumes from them."""
    model = Model(attrs.evolve(TX, delay_levels="1s 2s 3s"))
    state, _a = send(model, model.initial(), Message("D", b"a", props(DELAY="1")), 0)
    state, events = model.advance(state, 0, 15_000)
    assert len(events) == 1
    state, events = model.advance(model.restart(state), 15_000, 30_000)
    assert [e for e in events if isinstance(e, Delivered)] == []


def test_a_head_released_by_a_shortened_table_is_delivered_at_the_first_run_after_the_restart() -> None:
    """§3.5 correctDeliverTimestamp, §3.3 FIRST_DELAY_TIME: after a restart at 2,000 that makes level 3
    5 s, a head coded for 60,000 is released by the level's first run at 3,000, whatever the time a
    driver next looks (a service run at 3,000 exactly, not at the end of the span advanced)."""
    model = Model(attrs.evolve(TX, delay_levels="1s 5s 1m"))
    state, _m = send(model, model.initial(), Message("D", b"m", props(DELAY="3")), 0)
    state, events = model.advance(state, 0, 2_000)
    assert events == []
    shorter = attrs.evolve(model, config=attrs.evolve(model.config, delay_levels="1s 5s 5s"))
    state = shorter.restart(attrs.evolve(state, config=shorter.config), 2_000)
    state, events = shorter.advance(state, 2_000, 2_500)
    assert events == []  # the service has not started its levels yet
    state, events = shorter.advance(state, 2_500, 3_040)
    assert [(is_a(e, Delivered).copy.body, is_a(e, Delivered).copy.store_timestamp) for e in events] == [
        (b"m", 3_000)
    ]


# --- pull (facts §8 status table; DefaultMessageStore.getMessage) -------------------------------------------


def _queue_of_two(model: Model) -> BrokerState:
    state, _a = send(model, model.initial(), Message("P", b"a"), 0)
    state, _b = send(model, state, Message("P", b"b"), 0)
    return state


def test_pull_statuses_and_offsets() -> None:
    model = Model(TX)
    state = _queue_of_two(model)
    cases = {
        # findConsumeQueue creates a missing queue: NO_MESSAGE_IN_QUEUE, never NO_MATCHED_LOGIC_QUEUE
        (1, 0): (Code.PULL_NOT_FOUND, PullStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0),
        (1, 5): (Code.PULL_OFFSET_MOVED, PullStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0),
        (0, 0): (Code.SUCCESS, PullStatus.FOUND, 2, 0, 2),
        (0, 2): (Code.PULL_NOT_FOUND, PullStatus.OFFSET_OVERFLOW_ONE, 2, 0, 2),
        (0, 5): (Code.PULL_OFFSET_MOVED, PullStatus.OFFSET_OVERFLOW_BADLY, 2, 0, 2),  # next: maxOffset
        (0, -1): (Code.PULL_OFFSET_MOVED, PullStatus.OFFSET_TOO_SMALL, 0, 0, 2),
    }
    for (queue, offset), expected in cases.items():
        r = is_a(model.pull(state, "P", queue, offset), PullResult)
        assert (r.code, r.status, r.next_begin_offset, r.min_offset, r.max_offset) == expected, (
            queue,
            offset,
        )


def test_one_pull_returns_at_most_32_messages() -> None:
    """MessageStoreConfig.maxTransferCountOnMessageInMemory = 32 (spec pull/found)."""
    model = Model(TX)
    state = model.initial()
    for i in range(40):
        state, _s = send(model, state, Message("P", str(i).encode()), 0)
    r = is_a(model.pull(state, "P", 0, 0, max_msgs=64), PullResult)
    assert (len(r.records), r.next_begin_offset) == (32, 32)


def test_system_topics_of_a_fresh_broker() -> None:
    """§0: SCHEDULE_TOPIC_XXXX has 18 queues; the default topic TBW102 has 8 (defaultTopicQueueNums)."""
    model = Model(TX)
    state = model.initial()
    r = is_a(model.pull(state, SCHEDULE_TOPIC, 17, 0), PullResult)
    assert r.status == PullStatus.NO_MESSAGE_IN_QUEUE
    assert is_a(model.pull(state, SCHEDULE_TOPIC, 18, 0), Rejected).code == Code.SYSTEM_ERROR
    is_a(model.pull(state, "TBW102", 7, 0), PullResult)
    assert is_a(model.pull(state, "TBW102", 8, 0), Rejected).code == Code.SYSTEM_ERROR
    # a topic auto-created from TBW102 gets min(defaultTopicQueueNums of the request, TBW102's queues)
    state, ok = model.send(state, Message("Wide", b"x", queue_id=7, default_topic_queue_nums=16), 0)
    is_a(ok, SendOk)
    state, bad = model.send(state, Message("Wide", b"x", queue_id=8, default_topic_queue_nums=16), 0)
    assert is_a(bad, Rejected).code == Code.SYSTEM_ERROR


def test_query_by_uniq_key() -> None:
    """§8 QUERY_MESSAGE: every record of the topic with the key; nothing found → 22."""
    model = Model(TX)
    state, _x = send(model, model.initial(), Message("Q", b"no key"), 0)
    assert is_a(model.query(state, "Q", "NOPE"), Rejected).code == Code.QUERY_NOT_FOUND
    state, a = send(model, state, Message("Q", b"1", props(UNIQ_KEY="DUP")), 0)
    state, b = send(model, state, Message("Q", b"2", props(UNIQ_KEY="DUP")), 0)
    found = is_a(model.query(state, "Q", "DUP"), Found)
    assert [r.commit_log_offset for r in found.records] == [
        a.record.commit_log_offset,
        b.record.commit_log_offset,
    ]


# --- the put path (facts §1, §2, §8) ---------------------------------------------------------------------------


def test_record_size_offsets_and_offset_message_ids() -> None:
    """§8: size = 91 + body + topic + properties string; records laid end to end; the offset msgId."""
    model = Model()
    state, first = send(model, model.initial(), Message("T", b"hello", props(KEYS="k1")), 0)
    size = 91 + 5 + 1 + props_len({"KEYS": "k1", "CLUSTER": "DefaultCluster"})
    assert first.record.size == size == 127
    assert first.msg_id == "7F00000100002A9F0000000000000000"
    state, second = send(model, state, Message("T", b"", born_host=BORN_HOST), 0)
    assert second.record.commit_log_offset == 127 and second.msg_id == "7F00000100002A9F000000000000007F"
    assert second.record.born_host == BORN_HOST


def test_the_store_host_is_the_brokers() -> None:
    model = Model(TX)
    _state, sent = send(model, model.initial(), Message("T", b"x"), 0)
    assert sent.record.store_host == HOST and sent.msg_id == offset_id(HOST, 0)


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_the_properties_string_may_be_32767_long(extra: int, accepted: bool) -> None:
    """§1.1 step 6: a properties string longer than Short.MAX_VALUE → MESSAGE_ILLEGAL."""
    model = Model()
    value = "v" * (32767 - props_len({"KEYS": "", "CLUSTER": "DefaultCluster"}) + extra)
    _state, out = model.send(model.initial(), Message("T", b"x", props(KEYS=value)), 0)
    if accepted:
        assert len(encode_properties(is_a(out, SendOk).record.properties)) == 32767
    else:
        assert is_a(out, Rejected).code == Code.MESSAGE_ILLEGAL


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_max_message_size_limits_the_body(extra: int, accepted: bool) -> None:
    """put/message-illegal (4.9.5-4.9.8 MessageExtEncoder.encode): a body longer than maxMessageSize is
    MESSAGE_ILLEGAL; the whole record may be up to maxMessageSize + 64 KiB, so a body of exactly
    maxMessageSize is stored although its record is longer."""
    model = Model(BrokerConfig(max_message_size=200))
    _state, out = model.send(model.initial(), Message("T", b"b" * (200 + extra)), 0)
    if accepted:
        assert is_a(out, SendOk).record.size == 91 + 200 + 1 + props_len({"CLUSTER": "DefaultCluster"})
    else:
        assert is_a(out, Rejected).code == Code.MESSAGE_ILLEGAL


def test_a_delay_that_is_not_a_number_is_a_system_error() -> None:
    """§1.2 step 2: Integer.parseInt on DELAY; the exception is answered SYSTEM_ERROR."""
    model = Model()
    _state, out = model.send(model.initial(), Message("T", b"x", props(DELAY="soon")), 0)
    assert is_a(out, Rejected).code == Code.SYSTEM_ERROR


def test_a_negative_queue_id_is_the_brokers_pick_modulo_write_queues() -> None:
    """§1.1 step 2 (the pick is queue_choice, 0 by default)."""
    model = Model()
    state = model.initial()
    state, out = model.step(state, Send(Message("T", b"x", queue_id=-1), queue_choice=7), 0)
    assert is_a(out, SendOk).queue_id == 3  # 7 % 4 queues
    state, out = model.step(state, Send(Message("T", b"x", queue_id=0), queue_choice=7), 0)
    assert is_a(out, SendOk).queue_id == 0
    state, sent = send(model, state, Message("T", b"x", queue_id=-1), 0)
    assert sent.queue_id == 0


def test_consume_queue_tags_codes() -> None:
    """§2: tagsCode = Java String.hashCode of TAGS ("TagA" → 2598919), 0 without tags; a schedule entry's
    is storeTimestamp + delay."""
    model = Model(BrokerConfig("1s 5s"))
    state, _a = send(model, model.initial(), Message("T", b"x", props(TAGS="TagA")), 0)
    state, _b = send(model, state, Message("T", b"y"), 0)
    state, _c = send(model, state, Message("T", b"z", props(TAGS="TagA", DELAY="2")), 700)
    assert [e[2] for e in state.store.cq("T", 0)] == [2598919, 0]
    assert [e[2] for e in state.store.cq(SCHEDULE_TOPIC, 1)] == [5700]


# --- batch (facts §1.4) ---------------------------------------------------------------------------------------


def _entries() -> tuple[BatchEntry, ...]:
    return (BatchEntry(b"abc", props(KEYS="k", WAIT="true"), flag=3), BatchEntry(b"de", props()))


def test_batch_records_store_own_then_wrapper_properties() -> None:
    """§1.4: each inner message is a normal record; properties = its own, \\x02 if needed, the wrapper's
    (with CLUSTER); consecutive offsets; response msgId = the offset ids joined by commas."""
    model = Model(TX)
    batch = Batch("BT", _entries(), properties=props(WAIT="true"), born_timestamp=1234, born_host=BORN_HOST)
    state, out = model.send_batch(model.initial(), batch, 2000)
    ok = is_a(out, BatchOk)
    wrapper = {"WAIT": "true", "CLUSTER": "DefaultCluster"}
    sizes = [
        91 + 3 + 2 + props_len({"KEYS": "k", "WAIT": "true"}, wrapper),
        91 + 2 + 2 + props_len(wrapper),
    ]
    assert [r.size for r in ok.records] == sizes == [145, 127]
    assert [r.commit_log_offset for r in ok.records] == [0, 145]
    assert ok.msg_id == f"{offset_id(HOST, 0)},{offset_id(HOST, 145)}"
    assert (ok.queue_offset, [r.queue_offset for r in ok.records]) == (0, [0, 1])
    assert [r.flag for r in ok.records] == [3, 0]
    assert {(r.born_timestamp, r.born_host, r.store_host, r.store_timestamp) for r in ok.records} == {
        (1234, BORN_HOST, HOST, 2000)
    }
    assert len(pulled(model, state, "BT")) == 2


def test_batch_born_time_defaults_to_now_and_the_queue_to_the_pick() -> None:
    model = Model(TX)
    state, out = model.send_batch(model.initial(), Batch("BT", _entries(), queue_id=-1), 2000)
    ok = is_a(out, BatchOk)
    assert ok.queue_id == 0 and {r.born_timestamp for r in ok.records} == {2000}
    state, stepped = model.step(state, SendBatch(Batch("BT", _entries(), queue_id=-1), queue_choice=6), 2100)
    assert is_a(stepped, BatchOk).queue_id == 2  # 6 % 4


def test_batch_wrapper_delay_one_is_illegal() -> None:
    """§1.4: the batch wrapper's own DELAY > 0 → MESSAGE_ILLEGAL."""
    model = Model(TX)
    _state, out = model.send_batch(model.initial(), Batch("BT", _entries(), properties=props(DELAY="1")), 0)
    assert is_a(out, Rejected).code == Code.MESSAGE_ILLEGAL


@pytest.mark.parametrize(("limit", "accepted"), [(55, True), (54, False)])
def test_batch_body_size_limit(limit: int, accepted: bool) -> None:
    """§1.4: the encoded body (per message 20 + body + 2 + properties) longer than maxMessageSize is illegal."""
    entries = (BatchEntry(b"abc", props(KEYS="k")), BatchEntry(b"de", props()))
    assert (20 + 3 + 2 + props_len({"KEYS": "k"})) + (20 + 2 + 2) == 55
    model = Model(BrokerConfig(max_message_size=limit))
    _state, out = model.send_batch(model.initial(), Batch("BT", entries), 0)
    if accepted:
        is_a(out, BatchOk)
    else:
        assert is_a(out, Rejected).code == Code.MESSAGE_ILLEGAL


def test_batch_client_rules_at_their_limits() -> None:
    """§1.4 client rules: no DELAY > 0; body <= maxMessageSize."""
    assert client_check((BatchEntry(b"x", props(DELAY="1")),), "BT") is not None
    assert client_check((BatchEntry(b"x" * 10, props()),), "BT", max_message_size=10) is None
    assert client_check((BatchEntry(b"x" * 11, props()),), "BT", max_message_size=10) is not None


# --- properties (facts §0) -----------------------------------------------------------------------------------


def test_properties_encoding_and_lenient_decoding() -> None:
    pairs: list[tuple[str, str | None]] = [("a", "1"), ("b", None), ("c", "3")]
    assert encode_properties(pairs) == "a\x011\x02c\x013"
    assert decode_properties("\x01ab") == {}  # empty key
    assert decode_properties("abc\x02k\x01v") == {"k": "v"}  # no separator in the first segment
    stored: Props = props(k="v")
    assert decode_properties(encode_properties(stored)) == {"k": "v"}


# --- the check-service clock (spec transaction/check-interval, Model docstring) -------------------------


def test_check_ticks_follow_the_phase() -> None:
    model = Model(TX, check_phase_ms=300)
    assert [model.next_check_time(t) for t in (0, 299, 300, 1299)] == [300, 300, 1300, 1300]


@pytest.mark.parametrize(
    ("rounds", "after", "expected"),
    [
        ((1400,), 0, 1400),  # the known round replaces the tick at 1000 (within 500 ms)
        ((1500,), 0, 1500),  # exactly half an interval away still replaces it
        ((1600, 3200), 1700, 3200),  # 1600 stands for 2000, 3200 for 3000: the next is 3200
    ],
)
def test_known_check_rounds_replace_nearby_ticks(rounds: tuple[int, ...], after: int, expected: int) -> None:
    model = Model(TX, check_rounds=rounds)
    assert model.next_check_time(after) == expected


def test_a_send_back_the_store_refuses_answers_its_status_name() -> None:
    """Facts §4.1 step 11: any put status but PUT_OK is SYSTEM_ERROR with the status's name as remark.
    put/message-illegal (4.9.8): DefaultMessageStore.checkMessage refuses a properties string of more than
    32,767 UTF-16 units as it is before the delay rewrite (MESSAGE_ILLEGAL); the encoder refuses one of more
    than 32,767 UTF-8 bytes as it is written (PROPERTIES_SIZE_EXCEEDED)."""
    from rmqspec.reference.observations import Rejected, SendOk
    from rmqspec.reference.sendback import SendBack

    model = Model(BrokerConfig())
    state = model.initial()
    # Fits as sent; RETRY_TOPIC and ORIGIN_MESSAGE_ID push the copy's string past 32,767 characters.
    state, sent = model.send(state, Message("T", b"a", props(UNIQ_KEY="U1", big="x" * 32_700)), 0)
    assert isinstance(sent, SendOk)
    state, answer = model.send_back(state, SendBack("CG", sent.record.commit_log_offset), 10)
    assert isinstance(answer, Rejected)
    assert (answer.code, answer.remark) == (Code.SYSTEM_ERROR, "MESSAGE_ILLEGAL")
    # Two bytes per character: half as many characters, and REAL_TOPIC / REAL_QID of the delay rewrite
    # push the bytes past the limit only in the encoder.
    state, sent = model.send(state, Message("T", b"a", props(UNIQ_KEY="U2", big="\u00e9" * 16_340)), 20)
    assert isinstance(sent, SendOk)
    state, answer = model.send_back(state, SendBack("CG", sent.record.commit_log_offset), 30)
    assert isinstance(answer, Rejected)
    assert (answer.code, answer.remark) == (Code.SYSTEM_ERROR, "PROPERTIES_SIZE_EXCEEDED")


def test_a_check_count_that_is_not_an_integer_reads_as_minus_one() -> None:
    """TransactionalMessageServiceImpl.needDiscard (4.9.8): getInt gives -1 for a value Integer.parseInt
    refuses, and the count is raised from there, so the first check carries 0 (transaction/check-times)."""
    from rmqspec.reference.observations import CheckRequest

    cfg = BrokerConfig(transaction_check_interval_ms=5000, transaction_timeout_ms=3000)
    model = Model(cfg)
    state = model.heartbeat(model.initial(), "PG", online=True)
    half = props(UNIQ_KEY="U1", TRAN_MSG="true", PGROUP="PG", TRANSACTION_CHECK_TIMES="x")
    state, _ = model.send(state, Message("T", b"a", half, sys_flag=4), 0)
    state, events = model.advance(state, 0, 5000)
    checks = [e for e in events if isinstance(e, CheckRequest)]
    assert [c.message.properties.get("TRANSACTION_CHECK_TIMES") for c in checks] == ["0"]


def test_an_orderly_stop_writes_the_queued_op_entries_and_a_crash_loses_them() -> None:
    """5.x queues a resolution for its op batch service; from 5.1.4 the service's last run when it is stopped
    (``ServiceThread.shutdown`` waking it: ``onWaitEnd``, ``batchSendOpMessage``) writes the queue only when
    it is due (an interval after its list was made), and a crash loses it.
    rule: transaction/check-restart, transaction/op-batch"""
    from rmqspec.reference.config import BrokerConfig, Profile
    from rmqspec.reference.constants import OP_TOPIC, TxAction
    from rmqspec.reference.model import Model
    from rmqspec.reference.observations import SendOk
    from rmqspec.reference.put import Message
    from rmqspec.reference.records import props
    from rmqspec.reference.transaction import EndTransaction

    model = Model(BrokerConfig("1s 2s", profile=Profile.V5))
    state = model.initial()
    msg = Message(
        "T", b"h", props(UNIQ_KEY="U1", TRAN_MSG="true", PGROUP="PG"), sys_flag=4, producer_group="PG"
    )
    state, sent = model.send(state, msg, 1000)
    assert isinstance(sent, SendOk)
    half = sent.record
    req = EndTransaction(
        "PG", half.queue_offset, half.commit_log_offset, TxAction.COMMIT, transaction_id="U1"
    )
    state, _ = model.end_transaction(state, req, 1100)
    assert state.tx_op_pending and not state.store.cq(OP_TOPIC, 0)  # queued, not written yet
    early = model.dispatch(model.restart(state, 1200, orderly=True))  # 100 ms after the list: not due
    orderly = model.dispatch(model.restart(state, 4100, orderly=True))
    crash = model.dispatch(model.restart(state, 4100))
    assert not early.store.cq(OP_TOPIC, 0) and not early.tx_op_pending
    assert len(orderly.store.cq(OP_TOPIC, 0)) == 1 and not orderly.tx_op_pending
    assert not crash.store.cq(OP_TOPIC, 0) and not crash.tx_op_pending

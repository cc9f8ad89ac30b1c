"""Transaction edges the spec examples cannot express, each written from the RocketMQ source.

The expected values come from the code named in each docstring (4.9.8 for the default profile, 5.5.0 for
the 5.x profile; ``docs/audit/transaction.md`` gives the lines), never from the model's own output.
Several tests reach states a client cannot produce at 4.9.8 (an op message with a body the broker never
writes, 33 op messages pending at once, a run stopped mid-way) to pin the loop's order of operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import attrs
import pytest

from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import (
    HALF_TOPIC,
    OP_TOPIC,
    SCHEDULE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    Code,
    TxAction,
)
from rmqspec.reference.model import Model
from rmqspec.reference.observations import CheckRequest, Discarded, EndTxOk, PullResult, Rejected, SendOk
from rmqspec.reference.put import Message, append
from rmqspec.reference.records import Inner, Record, props
from rmqspec.reference.semantics import REFERENCE, check_immunity_ms, end_immunity_ms
from rmqspec.reference.state import BrokerState
from rmqspec.reference.transaction import OP_BATCH_INTERVAL_MS, EndTransaction

T = TypeVar("T")

TX = BrokerConfig(transaction_timeout_ms=3000, transaction_check_interval_ms=1000)
TX5 = attrs.evolve(TX, profile=Profile.V5)


def is_a(value: object, cls: type[T]) -> T:
    assert isinstance(value, cls), value
    return value


def half(key: str, born: int | None = None, **extra: str) -> Message:
    p = props(TRAN_MSG="true", PGROUP="PG", UNIQ_KEY=key, **extra)
    return Message("TxT", b"t", p, sys_flag=4, born_timestamp=born)


def send(model: Model, state: BrokerState, msg: Message, now: int) -> tuple[BrokerState, Record]:
    state, out = model.send(state, msg, now)
    return state, is_a(out, SendOk).record


def end(record: Record, action: TxAction, from_check: bool = False) -> EndTransaction:
    return EndTransaction("PG", record.queue_offset, record.commit_log_offset, action, from_check)


def checks(events: Sequence[object]) -> list[CheckRequest]:
    return [e for e in events if isinstance(e, CheckRequest)]


def ops(model: Model, state: BrokerState) -> list[Record]:
    return [r for r in state.store.records.values() if r.topic == OP_TOPIC]


# --- numbers the broker reads from strings -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 3000),
        ("-1", 3000),  # getImmunityTime: -1 means transactionTimeout
        (" 5", 3000),  # Long.parseLong refuses spaces: getLong's -1, so the timeout
        ("5_0", 3000),
        ("", 3000),
        ("+2", 2000),  # a sign is accepted
        ("٢", 2000),  # as are other Unicode decimal digits
        ("0", 0),
        ("-5", -5000),  # no floor in the check loop: a negative immunity is never reached
        ("9223372036854776", -9223372036854775616),  # the long product wraps (2^63 + 192 - 2^64)
        ("9223372036854775808", 3000),  # beyond Long: refused
    ],
)
def test_the_check_loops_immunity_reads_the_value_as_java_does(value: str | None, expected: int) -> None:
    """TransactionalMessageServiceImpl.getImmunityTime and getLong (4.9.8 ~L255, L393; 5.5.0 the same)."""
    assert check_immunity_ms(value, 3000) == expected


@pytest.mark.parametrize(("value", "expected"), [("1", 3000), ("4", 4000), ("x", 3000), ("-1", 3000)])
def test_the_end_transaction_immunity_is_at_least_the_timeout(value: str, expected: int) -> None:
    """TransactionalMessageUtil.getImmunityTime (5.1.1+): value × 1000, 0 when it does not parse, raised
    to transactionTimeout."""
    assert end_immunity_ms(value, 3000) == expected


@pytest.mark.parametrize(
    ("count", "discarded", "carried"),
    [("2", False, "3"), ("3", True, "3"), ("99999999999", False, "0"), ("+1", False, "2")],
)
def test_the_check_count_is_read_with_integer_parse_int(count: str, discarded: bool, carried: str) -> None:
    """needDiscard (4.9.8 ~L73): getInt = Integer.parseInt or -1; discard at >= transactionCheckMax (3),
    else raise by one. A value past the int range is refused (-1, raised to 0); "+1" is 1."""
    model = Model(attrs.evolve(TX, transaction_check_max=3))
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, half("K", born=0, TRANSACTION_CHECK_TIMES=count), 0)
    state, events = model.check(state, 5000)
    assert len(events) == 1
    if discarded:
        gone = is_a(events[0], Discarded)
        assert gone.copy.properties["TRANSACTION_CHECK_TIMES"] == carried
    else:
        assert is_a(events[0], CheckRequest).message.properties["TRANSACTION_CHECK_TIMES"] == carried


def _op(state: BrokerState, body: bytes, now: int, tags: str = "d") -> BrokerState:
    """An op message as the broker writes it (makeOpMessageInner), with any body."""
    stored = props(TAGS=tags, WAIT="true")
    inner = Inner(OP_TOPIC, 0, body, stored, stored, born_timestamp=now)
    state, _r = append(state, inner, now, REFERENCE)
    return state


@pytest.mark.parametrize("body", [b" 0", b"x", b"\xff", b""])
def test_an_op_whose_body_does_not_parse_is_done_at_once(body: bytes) -> None:
    """fillOpRemoveMap (4.9.8 ~L300): getLong of the body (UTF-8, bad bytes replaced) is -1 for these,
    below halfOffset, so the op goes to doneOpOffset and the op offset moves past it; it resolves nothing
    (Python's int(" 0") would have resolved offset 0)."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, half("K", born=0), 0)
    state = model.dispatch(_op(state, body, 100))
    state, events = model.check(state, 5000)
    assert len(checks(events)) == 1 and state.tx_op_offset == 1


def test_an_op_with_another_tag_is_never_done_on_4_9() -> None:
    """fillOpRemoveMap (4.9.8 ~L303-311): an op without tag d is logged, neither done nor in the map, so
    the op offset stays before it; 5.5.0 marks an op naming nothing done (its set is empty)."""
    for cfg, done, until in ((TX, 0, 5500), (TX5, 1, 6500)):  # 5.x sleeps 1 s after reading the op
        model = Model(cfg)
        state = model.heartbeat(model.initial(), "PG")
        state, _h = send(model, state, half("K", born=0), 0)
        state = model.dispatch(_op(state, b"0", 100, tags="x"))
        state, events = model.advance(state, 4500, until)
        assert [c.at for c in checks(events)] == [until - 500] and state.tx_run is None
        assert state.tx_op_offset == done


def test_a_real_queue_java_cannot_parse_answers_a_system_error() -> None:
    """EndTransactionProcessor.endMessageTransaction (4.9.8 ~L197): Integer.parseInt(REAL_QID) throws; the
    remoting layer answers SYSTEM_ERROR with the exception; nothing is written."""
    model = Model(TX)
    state, rec = send(
        model, model.initial(), Message("T", b"a", props(PGROUP="PG", REAL_TOPIC="T", REAL_QID="x")), 0
    )
    end_state, out = model.end_transaction(state, end(rec, TxAction.COMMIT), 10)
    bad = is_a(out, Rejected)
    assert bad.code == Code.SYSTEM_ERROR and bad.remark.startswith("java.lang.NumberFormatException")
    assert end_state.store.end == state.store.end


def test_a_record_without_pgroup_answers_the_null_pointer() -> None:
    """checkPrepareMessage (4.9.8 ~L168): pgroupRead.equals on null throws before any other test."""
    model = Model(TX)
    state, rec = send(model, model.initial(), Message("T", b"a", props(REAL_TOPIC="T", REAL_QID="0")), 0)
    _s, out = model.end_transaction(
        state, EndTransaction("PG", 99, rec.commit_log_offset, TxAction.ROLLBACK), 10
    )
    bad = is_a(out, Rejected)
    assert bad.code == Code.SYSTEM_ERROR and bad.remark.startswith("java.lang.NullPointerException")


# --- records the check writes --------------------------------------------------------------------------


def test_the_op_stores_only_tags_and_wait() -> None:
    """makeOpMessageInner (4.9.8 ~L275-290): the string is built from new Message(topic, "d", body) before
    setWaitStoreMsgOK(false) and setUniqID, so it holds TAGS=d and WAIT=true only."""
    model = Model(TX)
    state, rec = send(model, model.initial(), half("K"), 0)
    _s, out = model.end_transaction(state, end(rec, TxAction.ROLLBACK), 10)
    op = is_a(is_a(out, EndTxOk).op, Record)
    assert dict(op.properties) == {"TAGS": "d", "WAIT": "true"}


def test_copies_store_wait_as_their_code_builds_the_string() -> None:
    """renewHalfMessageInner (4.9.8 ~L267/L271) builds the string before WAIT=false: a check copy keeps the
    record's WAIT; renewImmunityHalfMessageInner (~L252) rebuilds it after: an immunity copy has
    WAIT=false. The check request's message is the map: WAIT=false."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, _a = send(model, state, half("KA", born=0, WAIT="true"), 0)
    state, _b = send(model, state, half("KB", born=0, WAIT="true", CHECK_IMMUNITY_TIME_IN_SECONDS="60"), 0)
    state, events = model.check(state, 5000)
    [req] = checks(events)
    assert req.message.properties["WAIT"] == "false"
    copies = is_a(model.pull(state, HALF_TOPIC, 0, 2), PullResult).records
    assert [(r.uniq_key, r.properties["WAIT"]) for r in copies] == [("KA", "true"), ("KB", "false")]


def test_the_check_body_is_the_record_read_not_the_copy() -> None:
    """sendCheckMessage (4.9.8 ~L58): the message sent is the msgExt read from the half queue, with the
    copy's offsets and msgId: its flag and reconsumeTimes are the record's (the copy has neither)."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, attrs.evolve(half("K", born=0), flag=7, reconsume_times=2), 0)
    state, events = model.check(state, 5000)
    [req] = checks(events)
    assert (req.message.flag, req.message.reconsume_times) == (7, 2)
    copy = state.store.lookup(req.commit_log_offset)
    assert copy is not None and (copy.flag, copy.reconsume_times) == (0, 0)
    assert (req.message.queue_offset, req.message.commit_log_offset) == (
        copy.queue_offset,
        copy.commit_log_offset,
    )


# --- the loop's order and its waits --------------------------------------------------------------------


def test_a_record_resolved_by_the_33rd_op_is_discarded_before_the_op_is_read() -> None:
    """check (4.9.8 ~L151, L166, L190, L232): the run reads 32 ops when it begins and more only at a record
    that is otherwise due; a record at the limit is discarded before that, even though a later op names it."""
    model = Model(attrs.evolve(TX, transaction_check_max=1))
    state = model.heartbeat(model.initial(), "PG")
    state, worn = send(model, state, half("W", born=0, TRANSACTION_CHECK_TIMES="1"), 0)
    recs = []
    for n in range(32):
        state, r = send(model, state, half(f"R{n}", born=0), 0)
        recs.append(r)
    for r in recs:  # ops 0..31 name half offsets 1..32
        state, _out = model.end_transaction(state, end(r, TxAction.ROLLBACK), 10)
    state, _out = model.end_transaction(state, end(worn, TxAction.ROLLBACK), 10)  # op 32 names offset 0
    state, events = model.check(state, 5000)
    assert [is_a(e, Discarded).half.uniq_key for e in events] == ["W"]
    assert (state.tx_half_offset, state.tx_op_offset) == (33, 32)


def test_the_same_record_is_skipped_when_its_op_is_among_the_first_32() -> None:
    model = Model(attrs.evolve(TX, transaction_check_max=1))
    state = model.heartbeat(model.initial(), "PG")
    state, worn = send(model, state, half("W", born=0, TRANSACTION_CHECK_TIMES="1"), 0)
    state, _out = model.end_transaction(state, end(worn, TxAction.ROLLBACK), 10)
    state, events = model.check(state, 5000)
    assert events == [] and state.tx_half_offset == 1


def test_a_run_waiting_at_the_timeout_sees_an_op_written_meanwhile() -> None:
    """check (4.9.8 ~L226-236): at age == timeout the loop reads the op queue again and again; an op
    written while it waits resolves the record at once and the run goes on."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    state, h = send(model, state, half("K", born=0), 0)
    state, events = model.check(state, 3000)
    assert events == [] and state.tx_run is not None and state.tx_run.resume_at == 3001
    state, _out = model.end_transaction(state, end(h, TxAction.COMMIT), 3000)
    assert state.tx_run is not None and state.tx_run.resume_at == 3000
    state, later = model.advance(state, 3000, 3000)
    assert later == [] and state.tx_run is None and state.tx_half_offset == 1


def test_a_run_never_lasts_past_its_time_limit() -> None:
    """check (4.9.8 ~L162): a run stops once it has lasted more than MAX_PROCESS_TIME_LIMIT (60 s): an immune
    record whose TRAN_PREPARED_QUEUE_OFFSET does not parse and whose immunity ends later holds it that long."""
    model = Model(TX)
    state = model.heartbeat(model.initial(), "PG")
    odd = half("K", born=0, CHECK_IMMUNITY_TIME_IN_SECONDS="100", TRAN_PREPARED_QUEUE_OFFSET="x")
    state, _h = send(model, state, odd, 0)
    state, events = model.advance(state, 0, 70_000)
    assert checks(events) == [] and state.tx_last_run_end == 1000 + 60_001
    assert model.next_check_time(61_001, state.tx_last_run_end) == 62_001


def test_next_check_time_counts_from_the_end_of_the_last_run() -> None:
    """TransactionalMessageCheckService.run (4.9.8): waitForRunning(interval) after each onWaitEnd."""
    model = Model(TX)
    assert [model.next_check_time(t) for t in (0, 999, 1000)] == [1000, 1000, 2000]
    assert [model.next_check_time(t, 3001) for t in (3001, 4000, 4001)] == [4001, 4001, 5001]


# --- 5.x (5.5.0) ----------------------------------------------------------------------------------------


def test_five_x_check_interval_defaults_to_30_s() -> None:
    """BrokerConfig.transactionCheckInterval: 60 s at 4.9.8, 30 s from 5.1.1 (5.5.0)."""
    assert BrokerConfig().transaction_check_interval_ms == 60_000
    assert BrokerConfig(profile=Profile.V5).transaction_check_interval_ms == 30_000


def test_five_x_ops_wait_for_the_batch_service() -> None:
    """TransactionalOpBatchService.run / batchSendOpMessage (5.1.0-5.3.3 read): the service wakes on its own
    ticks, transactionOpBatchInterval apart from its start, and at a tick skips a queue written (or whose
    list was created) less than an interval before. The first end creates the queue's context at its time,
    so its op waits for the first tick at least an interval later: between one and two intervals."""
    model = Model(attrs.evolve(TX5, release="5.4.0"))
    state = model.initial()  # the service starts at 0: ticks at 3000, 6000, 9000, ...
    recs = []
    for n in range(4):
        state, r = send(model, state, half(f"K{n}", born=0), 0)
        recs.append(r)
    state, out = model.end_transaction(state, end(recs[0], TxAction.COMMIT), 100)
    assert is_a(out, EndTxOk).op is None and state.tx_op_last_write == 100
    state, out = model.end_transaction(state, end(recs[2], TxAction.ROLLBACK), 200)
    # the tick at 3000 is less than an interval after the list was made (100): skipped
    state, _ = model.advance(state, 200, 2 * OP_BATCH_INTERVAL_MS - 1)
    assert ops(model, state) == []
    state, _ = model.advance(state, 2 * OP_BATCH_INTERVAL_MS - 1, 2 * OP_BATCH_INTERVAL_MS)
    [op] = ops(model, state)
    assert (op.body, op.store_timestamp, dict(op.properties)) == (
        b"0,2,",
        6000,
        {"TAGS": "d", "WAIT": "true"},
    )
    # an end one second after that write: due at 9000, the tick then writes it (two seconds after the end)
    state, out = model.end_transaction(state, end(recs[1], TxAction.ROLLBACK), 7000)
    assert is_a(out, EndTxOk).op is None
    state, _ = model.advance(state, 7000, 8999)
    assert len(ops(model, state)) == 1
    state, _ = model.advance(state, 8999, 9000)
    assert [o.body for o in ops(model, state)] == [b"0,2,", b"1,"]
    # idle long since that write: an end is written at the next tick, not at once
    state, out = model.end_transaction(state, end(recs[3], TxAction.ROLLBACK), 13_000)
    assert is_a(out, EndTxOk).op is None
    state, _ = model.advance(state, 13_000, 14_999)
    assert len(ops(model, state)) == 2
    state, _ = model.advance(state, 14_999, 15_000)
    assert ops(model, state)[-1].body == b"3,"


def test_five_five_ops_go_out_as_soon_as_the_queue_is_due() -> None:
    """batchSendOpMessage at 5.5.0 counts the last write of each queue it skips in its wake-up time, and an
    idle service polls without sleeping: the entries are written an interval after the queue's last write
    (or the END that created the list), or at once when that is past."""
    model = Model(TX5)  # 5.5.0
    state = model.initial()
    recs = []
    for n in range(3):
        state, r = send(model, state, half(f"K{n}", born=0), 0)
        recs.append(r)
    state, out = model.end_transaction(state, end(recs[0], TxAction.COMMIT), 100)
    assert is_a(out, EndTxOk).op is None and state.tx_op_last_write == 100
    state, out = model.end_transaction(state, end(recs[2], TxAction.ROLLBACK), 200)
    state, _ = model.advance(state, 200, 100 + OP_BATCH_INTERVAL_MS - 1)
    assert ops(model, state) == []
    state, _ = model.advance(state, 100 + OP_BATCH_INTERVAL_MS - 1, 100 + OP_BATCH_INTERVAL_MS)
    [op] = ops(model, state)
    assert (op.body, op.store_timestamp) == (b"0,2,", 3100)
    # idle for an interval since that write: the next end's op is written at once
    state, out = model.end_transaction(state, end(recs[1], TxAction.ROLLBACK), 6100)
    assert is_a(is_a(out, EndTxOk).op, Record).body == b"1,"


def test_five_x_the_ticks_count_from_the_restart() -> None:
    """The service's ticks start with it (``wakeupTimestamp = now + interval`` in ``run``): after a restart
    at 1000 they fall at 4000, 7000, ... (5.1.0-5.4.0)."""
    model = Model(attrs.evolve(TX5, release="5.4.0"))
    state, h = send(model, model.initial(), half("K", born=0), 0)
    state = model.restart(state, 1000)
    state, _out = model.end_transaction(state, end(h, TxAction.ROLLBACK), 1500)
    state, _ = model.advance(state, 1500, 6999)
    assert ops(model, state) == []
    state, _ = model.advance(state, 6999, 7000)
    assert [o.store_timestamp for o in ops(model, state)] == [7000]


@pytest.mark.parametrize(
    ("release", "at", "written"),
    [
        ("5.1.4", 3100, [b"0,"]),  # due at the stop (3000 ms after the list was made): written
        ("5.1.4", 3099, []),  # not yet due: the last run skips it, lost
        ("5.5.0", 3100, [b"0,"]),
        ("5.1.3", 3100, []),  # 5.1.0-5.1.3 never stop the service: nothing is written by the stop
    ],
)
def test_an_orderly_stop_writes_only_the_entries_already_due(
    release: str, at: int, written: list[bytes]
) -> None:
    """BrokerController.shutdownBasicService (5.1.4+) closes TransactionalMessageServiceImpl before the store:
    ServiceThread.shutdown wakes the op batch service for one last batchSendOpMessage, which writes a queue
    only when it was written an interval before (or is oversize). 5.1.0-5.1.3's close() is empty."""
    model = Model(attrs.evolve(TX5, release=release))
    state, h = send(model, model.initial(), half("K", born=0), 0)
    state, _out = model.end_transaction(state, end(h, TxAction.ROLLBACK), 100)
    state = model.restart(state, at, orderly=True)
    assert [o.body for o in ops(model, state)] == written and state.tx_op_pending == ()


def test_five_x_entries_beyond_the_max_size_are_written_at_once() -> None:
    """deletePrepareMessage wakes the service when the pending text exceeds transactionOpMsgMaxSize (4096);
    getOpMessage takes entries until the body reaches that size."""
    model = Model(TX5)
    state = model.initial()
    recs = []
    for n in range(1100):  # offsets 0..1099: 1100 entries, 4 or 5 characters each
        state, r = send(model, state, half(f"K{n}", born=0), 0)
        recs.append(r)
    for r in recs:
        state, _out = model.end_transaction(state, end(r, TxAction.ROLLBACK), 10)
    [op] = ops(model, state)
    text = op.body.decode()
    assert len(text) >= 4096 and len(text) - len(text.rstrip(",").split(",")[-1]) - 1 < 4096
    assert len(state.tx_op_pending) == 1100 - text.count(",")


def test_five_x_an_op_names_several_offsets_and_is_done_once_all_are_passed() -> None:
    """fillOpRemoveMap (5.5.0): body split on ","; offsets below halfOffset are skipped; the op is done
    once each of the others has been removed in the loop."""
    model = Model(TX5)
    state = model.heartbeat(model.initial(), "PG")
    state, a = send(model, state, half("KA", born=0), 0)
    state, b = send(model, state, half("KB", born=0), 0)
    state, _out = model.end_transaction(state, end(a, TxAction.ROLLBACK), 0)
    state, _out = model.end_transaction(state, end(b, TxAction.ROLLBACK), 0)
    state, _ = model.advance(state, 0, 3000)
    [op] = ops(model, state)
    assert op.body == b"0,1,"
    state, events = model.advance(state, 3000, 5000)
    assert checks(events) == [] and (state.tx_half_offset, state.tx_op_offset) == (2, 1)


def test_five_x_end_after_immunity_is_refused_before_the_group_test() -> None:
    """EndTransactionProcessor (5.5.0 ~L134, L220): rejectCommitOrRollback precedes checkPrepareMessage,
    skips a check's answer, and needs a non-empty value."""
    model = Model(TX5)
    state, h = send(model, model.initial(), half("K", born=0, CHECK_IMMUNITY_TIME_IN_SECONDS="1"), 0)
    wrong_group = EndTransaction("other", h.queue_offset, h.commit_log_offset, TxAction.COMMIT)
    _s, out = model.end_transaction(state, wrong_group, 3001)
    assert is_a(out, Rejected).code == Code.ILLEGAL_OPERATION
    _s, out = model.end_transaction(state, wrong_group, 3000)
    assert is_a(out, Rejected).remark == "The producer group wrong"
    _s, out = model.end_transaction(state, end(h, TxAction.COMMIT, from_check=True), 3001)
    assert isinstance(out, EndTxOk)
    state, e = send(model, state, half("KE", born=0, CHECK_IMMUNITY_TIME_IN_SECONDS=""), 0)
    _s, out = model.end_transaction(state, end(e, TxAction.COMMIT), 90_000)
    assert isinstance(out, EndTxOk)


def test_five_x_no_op_for_a_record_outside_the_half_topic() -> None:
    """EndTransactionProcessor.deletePrepareMessage (5.4.0+): an op only for RMQ_SYS_TRANS_HALF_TOPIC;
    4.9.8 writes one for any record it committed."""
    for cfg, written in ((TX, 1), (TX5, 0)):
        model = Model(cfg)
        msg = Message("T", b"a", props(PGROUP="PG", REAL_TOPIC="T", REAL_QID="0"))
        state, rec = send(model, model.initial(), msg, 0)
        state, out = model.end_transaction(state, end(rec, TxAction.COMMIT), 10)
        is_a(out, EndTxOk)
        state, _ = model.advance(state, 10, 10_000)
        assert len(ops(model, state)) == written


def test_five_x_a_half_with_reconsume_times_and_delay_is_an_ordinary_message() -> None:
    """SendMessageProcessor.sendMessage (5.0.0+): TRAN_MSG with reconsumeTimes > 0 and DELAY > 0 is put as
    an ordinary message; 4.9.8's asyncSendMessage makes it a half message."""
    msg = attrs.evolve(half("K", DELAY="1"), reconsume_times=1)
    _s, rec = send(Model(TX), Model(TX).initial(), msg, 0)  # a half record, NOT-typed: then delayed
    assert (rec.topic, rec.properties["REAL_TOPIC"]) == (SCHEDULE_TOPIC, HALF_TOPIC)
    _s, rec = send(Model(TX5), Model(TX5).initial(), msg, 0)  # PREPARED-typed, in its own topic
    assert (rec.topic, rec.sys_flag, rec.properties.get("REAL_TOPIC")) == ("TxT", 4, None)


def test_five_x_a_run_sleeps_each_second_while_the_prepared_offset_is_unreadable() -> None:
    """check (5.5.0 ~L311-327): a read of the op queue that finds nothing sleeps SLEEP_WHILE_NO_OP (1 s)."""
    model = Model(TX5)
    state = model.heartbeat(model.initial(), "PG")
    odd = half("K", born=500, CHECK_IMMUNITY_TIME_IN_SECONDS="5", TRAN_PREPARED_QUEUE_OFFSET="x")
    state, _h = send(model, state, odd, 500)
    state, events = model.advance(state, 500, 6999)  # the run of 1000 sleeps until the age is past 5000
    assert [(c.at, c.message.properties["TRANSACTION_CHECK_TIMES"]) for c in checks(events)] == [(6000, "1")]


def test_discards_are_not_done_twice_nor_checked() -> None:
    """A discarded record is never considered again (newOffset = i + 1)."""
    model = Model(attrs.evolve(TX, transaction_check_max=1))
    state = model.heartbeat(model.initial(), "PG")
    state, _h = send(model, state, half("K", born=500), 500)
    state, events = model.advance(state, 500, 20_000)
    assert [type(e).__name__ for e in events] == ["CheckRequest", "Discarded"]
    assert len(is_a(model.pull(state, TRANS_CHECK_MAX_TIME_TOPIC, 0, 0), PullResult).records) == 1


def test_a_run_names_the_copies_it_would_discard_had_they_been_dispatched_in_time() -> None:
    """The discard test comes before the stop at a record stored during the run (check ~L189 before L195 at
    4.9.7): a run that reaches its own copy with the last count discards it at once. The model's run
    stops where nothing was dispatched when it looked, and names what it would have discarded: the copy
    with the last count, not one that will be checked again, nor what follows a record that stops it."""
    model = Model(attrs.evolve(TX, transaction_check_max=2))
    state = model.heartbeat(model.initial(), "PG")
    state, _a = send(model, state, half("A", born=500), 500)
    state, _b = send(model, state, half("B", born=600), 600)
    state, events = model.advance(state, 600, 4_000)  # the run at 4000 checks both: counts 1
    assert [c.message.properties["TRANSACTION_CHECK_TIMES"] for c in checks(events)] == ["1", "1"]
    assert state.tx_discardable == frozenset()
    state, events = model.advance(state, 4_000, 5_000)  # counts 2: both copies carry the last count
    assert [c.message.properties["TRANSACTION_CHECK_TIMES"] for c in checks(events)] == ["2", "2"]
    assert state.tx_discardable == frozenset({"A", "B"})
    state, events = model.advance(state, 5_000, 6_000)  # the next run discards them, as the model does
    assert [type(e).__name__ for e in events] == ["Discarded", "Discarded"]
    assert state.tx_discardable == frozenset()


def test_a_copy_with_a_lower_count_stops_the_walk_over_the_runs_own_copies() -> None:
    """Copies are reached in the order they were written: one that will be checked again is a record stored
    during the run (``Fresh stored``: break), and the copies after it are not reached."""
    model = Model(attrs.evolve(TX, transaction_check_max=2))
    state = model.heartbeat(model.initial(), "PG")
    state, _a = send(model, state, half("A", born=500), 500)
    state, _b = send(model, state, half("B", born=1_500), 1_500)
    state, events = model.advance(state, 1_500, 4_000)  # A checked (count 1); B, not due, stops the run
    assert [c.transaction_id for c in checks(events)] == ["A"]
    # the run at 5000: B (count 1), then A's copy (count 2): B's copy comes first and stops the walk
    state, events = model.advance(state, 4_000, 5_000)
    assert [(c.transaction_id, c.message.properties["TRANSACTION_CHECK_TIMES"]) for c in checks(events)] == [
        ("B", "1"),
        ("A", "2"),
    ]
    assert state.tx_discardable == frozenset()
    state, events = model.advance(state, 5_000, 6_000)  # B's copy checked again; A's copy discarded
    assert [type(e).__name__ for e in events] == ["CheckRequest", "Discarded"]
    assert state.tx_discardable == frozenset({"B"})

"""Transactions: END_TRANSACTION (facts §5.3) and the broker's check of half messages (facts §5.4).

Read in Apache RocketMQ 4.9.8 (the default profile) and 5.5.0 (the 5.x profile); the ``Semantics`` switches
name each place where the two differ. Numbers the broker reads from strings are parsed as Java does
(``reference/javanum.py``): ``TRANSACTION_CHECK_TIMES`` with ``Integer.parseInt`` (``getInt``: -1 when it
does not parse), ``CHECK_IMMUNITY_TIME_IN_SECONDS``, ``TRAN_PREPARED_QUEUE_OFFSET`` and op bodies with
``Long.parseLong`` (``getLong``: -1), ``REAL_QID`` with ``Integer.parseInt`` (a refusal is an exception).
"""

from __future__ import annotations

import attrs
import immutables

from .config import BrokerConfig
from .constants import (
    HALF_TOPIC,
    OP_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    Code,
    Prop,
    TxAction,
)
from .javanum import parse_int, parse_long
from .observations import CheckRequest, Discarded, EndTxOk, NoResponse, Rejected
from .put import append, ensure_topic, store_put
from .records import Inner, Props, Record, props
from .semantics import Semantics
from .state import BrokerState, with_props

REMOVE_TAG = "d"
OP_PULL_NUMS = 32  # fillOpRemoveMap pulls 32 op messages at a time
MAX_PROCESS_TIME_MS = 60_000  # a run stops once it has lasted longer than this (MAX_PROCESS_TIME_LIMIT)
OP_BATCH_INTERVAL_MS = 3000  # 5.x: transactionOpBatchInterval (default)
OP_MSG_MAX_SIZE = 4096  # 5.x: transactionOpMsgMaxSize (default)
# Consumer offsets (the check service's progress among them) are written every flushConsumerOffsetInterval,
# the first time 10 s after the broker started, and in an orderly shutdown. rule: transaction/check-restart
OFFSET_FLUSH_INTERVAL_MS = 5000
FIRST_OFFSET_FLUSH_MS = 10_000


@attrs.frozen
class EndTransaction:
    """The END_TRANSACTION request header."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    action: TxAction
    from_check: bool = False
    msg_id: str | None = None
    transaction_id: str | None = None


def _exception(name: str, message: str | None) -> str:
    """The start of the remark the remoting layer answers for an exception (``RemotingHelper
    .exceptionSimpleDesc``: ``e.toString()``, then the first stack frame, which depends on the JDK)."""
    return f"java.lang.{name}" if message is None else f"java.lang.{name}: {message}"


def end_transaction(
    state: BrokerState, req: EndTransaction, now: int, sem: Semantics
) -> tuple[BrokerState, EndTxOk | Rejected | NoResponse]:
    """Commit or roll back a half message; UNKNOW writes nothing and answers nothing.

    4.9.x keeps no transaction state: while the half record is in the commit log, a second commit, or a
    commit after a rollback, is applied again. rule: transaction/not-idempotent
    """
    action = req.action
    if action == TxAction.UNKNOW:
        unknown = sem.on_unknown()
        if unknown == "nothing":
            return state, NoResponse("transaction/unknown")  # rule: transaction/unknown
        action = TxAction.COMMIT if unknown == "commit" else TxAction.ROLLBACK
    half = state.store.lookup(req.commit_log_offset)
    if half is None:
        # rule: transaction/commit-lookup
        miss = sem.commit_miss(
            Rejected(
                Code.SYSTEM_ERROR, "Find prepared transaction message failed", "transaction/commit-lookup"
            )
        )
        return state, EndTxOk(committed=None, op=None) if miss is None else miss
    if not req.from_check and sem.rejects_end_after_immunity():
        # rule: transaction/end-after-immunity (5.1.1+: rejectCommitOrRollback, before checkPrepareMessage)
        raw = half.properties.get(Prop.CHECK_IMMUNITY_TIME_IN_SECONDS)
        if raw and now - half.born_timestamp > sem.end_immunity_ms(raw, state.config.transaction_timeout_ms):
            return state, Rejected(
                Code.ILLEGAL_OPERATION, "not set any response code", "transaction/end-after-immunity"
            )
    bad = check_prepare_message(half, req, sem)
    if bad is not None:
        return state, bad
    if sem.end_tx_idempotent() and named_by_op(state, half, sem):  # rule: transaction/not-idempotent
        return state, EndTxOk(committed=None, op=None)
    committed: Record | None = None
    if sem.commit_writes_message() if action == TxAction.COMMIT else sem.rollback_writes_message():
        final = committed_message(half, sem)
        if isinstance(final, Rejected):
            return state, final
        result = store_put(state, final, now, sem)
        if isinstance(result, Rejected):
            return state, result
        state, committed = result
    op: Record | None = None
    if sem.writes_op_for(half.topic):
        state, op = delete_prepare_message(state, half, now, sem)
    remark = None if action == TxAction.COMMIT else "not set any response code"
    return state, EndTxOk(committed=committed, op=op, remark=remark)  # rule: transaction/rollback


def named_by_op(state: BrokerState, half: Record, sem: Semantics) -> bool:
    """Whether an op message written so far names the half record ``half`` (a run that reads the op
    queue to its end skips it; a broker that keeps transaction state would refuse to end it again).
    rule: transaction/check-resolved"""
    for clo, _size, _tags in state.store.cq(OP_TOPIC, 0):
        op = state.store.lookup(clo)
        offsets = None if op is None else _op_offsets(op, sem)
        if offsets and (
            half.queue_offset in offsets if sem.batched_ops() else offsets[0] == half.queue_offset
        ):
            return True
    return False


def checked_on_rereading(state: BrokerState, half: Record, now: int, sem: Semantics) -> bool:
    """Whether a run that reads the half record ``half`` again at ``now`` (after a crash, from the last
    written offset) checks it: no op names it, its count is below ``transactionCheckMax``, it is not
    past the reserved time, and it is due (no immunity holds it). rule: transaction/check-restart"""
    cfg = state.config
    raw_times = half.properties.get(Prop.TRANSACTION_CHECK_TIMES)
    if raw_times is not None:
        seen = parse_int(raw_times)
        if sem.must_discard(-1 if seen is None else seen, cfg.transaction_check_max):
            return False
    if sem.expired(now - half.born_timestamp, cfg.file_reserved_time_h * 3_600_000):
        return False
    timeout = cfg.transaction_timeout_ms
    raw_immunity = half.properties.get(Prop.CHECK_IMMUNITY_TIME_IN_SECONDS)
    immunity = timeout if raw_immunity is None else sem.check_immunity_ms(raw_immunity, timeout)
    if not sem.check_due(now - half.born_timestamp, immunity):
        return False
    return not named_by_op(state, half, sem)


def check_prepare_message(half: Record, req: EndTransaction, sem: Semantics) -> Rejected | None:
    """checkPrepareMessage: producer group, table offset, commit-log offset. rule: transaction/commit-checks

    ``pgroupRead.equals(...)`` on a record without ``PGROUP`` throws a NullPointerException, which the
    remoting layer answers with SYSTEM_ERROR and the exception's description.
    """
    group = half.properties.get(Prop.PGROUP)
    if sem.checks_producer_group():
        if group is None:
            return Rejected(
                Code.SYSTEM_ERROR, _exception("NullPointerException", None), "transaction/commit-checks"
            )
        if group != req.producer_group:
            return Rejected(Code.SYSTEM_ERROR, "The producer group wrong", "transaction/commit-checks")
    if half.queue_offset != req.tran_state_table_offset:
        return Rejected(
            Code.SYSTEM_ERROR, "The transaction state table offset wrong", "transaction/commit-checks"
        )
    if half.commit_log_offset != req.commit_log_offset:
        return Rejected(Code.SYSTEM_ERROR, "The commit log offset wrong", "transaction/commit-checks")
    return None


def committed_message(half: Record, sem: Semantics) -> Inner | Rejected:
    """endMessageTransaction: the real-topic message. rule: transaction/committed-message

    Topic ``REAL_TOPIC``, queue ``Integer.parseInt(REAL_QID)``: a queue id Java cannot parse (or none)
    throws a NumberFormatException and a missing topic a NullPointerException when the store reads it;
    either is answered SYSTEM_ERROR and nothing is written. The stored properties are the half record's
    own on 4.9.8 (still TRAN_MSG, PGROUP, REAL_TOPIC, REAL_QID); the map loses REAL_* and TRAN_MSG;
    sysFlag becomes COMMIT; preparedTransactionOffset is the half record's commit-log offset.
    """
    p = half.properties
    raw_qid = p.get(Prop.REAL_QID)
    queue_id = parse_int(raw_qid)
    if queue_id is None:
        what = "null" if raw_qid is None else f'For input string: "{raw_qid}"'
        return Rejected(
            Code.SYSTEM_ERROR, _exception("NumberFormatException", what), "transaction/committed-message"
        )
    topic = p.get(Prop.REAL_TOPIC)
    if topic is None:
        return Rejected(
            Code.SYSTEM_ERROR, _exception("NullPointerException", None), "transaction/committed-message"
        )
    return Inner(
        topic=topic,
        queue_id=queue_id,
        body=half.body,
        properties=with_props(p, REAL_TOPIC=None, REAL_QID=None, TRAN_MSG=None),
        stored=sem.committed_stored(p),
        sys_flag=sem.committed_sys_flag(half.sys_flag),
        flag=half.flag,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        store_host=half.store_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=sem.prepared_offset(half.commit_log_offset),
    )


# --- op messages ---------------------------------------------------------------------------------------


def delete_prepare_message(
    state: BrokerState, half: Record, now: int, sem: Semantics
) -> tuple[BrokerState, Record | None]:
    """deletePrepareMessage: record the resolution as an op. rule: transaction/op-message

    4.9.8 writes one op at once (body = the half record's queue offset). 5.x (5.1.0+) queues ``"<offset>,"``
    for the op batch service (transaction/op-batch), which writes it later: then no op record yet.
    A spinning 4.9.8 check run reads op messages again and again, so it sees this one at once.
    """
    body = sem.op_body(half.queue_offset, half.commit_log_offset)
    run = state.tx_run
    if sem.batched_ops():
        last = now if state.tx_op_last_write is None else state.tx_op_last_write
        state = attrs.evolve(state, tx_op_pending=(*state.tx_op_pending, body + ","), tx_op_last_write=last)
        if state.config.since("5.5.0"):
            # 5.5.0's service, idle, polls without sleeping: a queue is written as soon as it is due
            before = state.store.end
            state = op_service(state, now, sem)
            return state, (state.store.lookup(before) if state.store.end > before else None)
        if sum(len(e) for e in state.tx_op_pending) <= OP_MSG_MAX_SIZE:
            return state, None  # written at a later tick of the op batch service (next_op_write)
        # deletePrepareMessage wakes the service when the list exceeds transactionOpMsgMaxSize: it runs at
        # once, and its next tick is one interval after this run (TransactionalOpBatchService.run)
        before = state.store.end
        state = attrs.evolve(op_service(state, now, sem), tx_op_anchor=now)
        written = state.store.lookup(before) if state.store.end > before else None
        return state, written
    state, op = write_op(state, half.queue_id, body, now, sem)
    if run is not None and run.repull and run.resume_at > now:
        state = attrs.evolve(state, tx_run=attrs.evolve(run, resume_at=now))
    return state, op


def write_op(
    state: BrokerState, queue_id: int, body: str, now: int, sem: Semantics
) -> tuple[BrokerState, Record]:
    """makeOpMessageInner + putMessage: tag ``d``. rule: transaction/op-message

    The message is ``new Message(opTopic, "d", body)``, whose properties are TAGS and WAIT=true; the
    properties string is built from them before the broker sets WAIT=false and a UNIQ_KEY in the map,
    so the stored op carries TAGS=d and WAIT=true only.
    """
    stored = props(TAGS=REMOVE_TAG, WAIT="true")
    inner = Inner(
        topic=OP_TOPIC,
        queue_id=queue_id,
        body=body.encode(),
        properties=with_props(stored, WAIT="false"),
        stored=stored,
        born_timestamp=now,
        born_host=state.config.store_host,
        store_host=state.config.store_host,
    )
    return append(state, inner, now, sem)


def op_write_window_ms(config: BrokerConfig) -> int:
    """How long after its END_TRANSACTION a 5.x op may be written, at most (see ``next_op_write``): two
    intervals for 5.1.0-5.4.0 (the first tick an interval after the queue's last write, or the next one),
    one for 5.5.0 (as soon as the queue is due). rule: transaction/op-batch"""
    return OP_BATCH_INTERVAL_MS if config.since("5.5.0") else 2 * OP_BATCH_INTERVAL_MS


def next_op_write(state: BrokerState, after: int) -> int | None:
    """When, strictly after ``after``, the 5.x op batch service writes the pending entries (None: nothing
    pending).

    5.1.0-5.4.0: the service (``TransactionalOpBatchService.run``) wakes on its own ticks,
    ``transactionOpBatchInterval`` apart from its start (``batchSendOpMessage`` returns ``startTime +
    interval`` when it wrote nothing oversize), and at a tick skips a queue written (or whose list was
    created) less than an interval before. So the entries go out at the first tick at least an interval
    after the queue's last write: up to an interval after the END when the queue was last written long ago,
    between one and two intervals after an END that created the list. This is the earliest tick; the broker
    sets the last write time after the tick's start time (``getOpMessage``), so the tick one interval after
    a write may find it a few ms short of the interval and leave the entries to the next tick: the checker
    allows that one tick more (``op_write_window_ms``).

    5.5.0: ``batchSendOpMessage`` also counts the last write of every queue it skips in its wake-up time,
    so it wakes when a skipped queue becomes due, and once a queue has been idle an interval it returns 0
    and the service polls without sleeping: the entries go out as soon as the queue is due, an interval
    after its last write (the END that created the list: an interval after it), or at once.
    rule: transaction/op-batch
    """
    if not state.tx_op_pending or state.tx_op_last_write is None:
        return None
    if state.config.since("5.5.0"):
        return max(state.tx_op_last_write + OP_BATCH_INTERVAL_MS, after + 1)
    anchor = state.tx_op_anchor if state.tx_op_anchor is not None else (state.started_at or 0)
    earliest = max(state.tx_op_last_write + OP_BATCH_INTERVAL_MS, after + 1)
    k = max(1, -(-(earliest - anchor) // OP_BATCH_INTERVAL_MS))  # ceil: the first tick at or after it
    return anchor + k * OP_BATCH_INTERVAL_MS


def op_service(state: BrokerState, now: int, sem: Semantics) -> BrokerState:
    """TransactionalOpBatchService.batchSendOpMessage at ``now`` (5.x): the queue's pending entries are
    written as one op once ``transactionOpBatchInterval`` has passed since the last write (or since the
    first end created the queue's context), or at once when they exceed ``transactionOpMsgMaxSize``
    characters (``getOpMessage`` then takes entries until the body reaches that size).

    rule: transaction/op-batch
    """
    while state.tx_op_pending:
        last = now if state.tx_op_last_write is None else state.tx_op_last_write
        size = sum(len(e) for e in state.tx_op_pending)
        if size < OP_MSG_MAX_SIZE and now - last < OP_BATCH_INTERVAL_MS:
            break
        taken: list[str] = []
        length = 0
        for entry in state.tx_op_pending:
            if length >= OP_MSG_MAX_SIZE:
                break
            taken.append(entry)
            length += len(entry)
        rest = state.tx_op_pending[len(taken) :]
        state = attrs.evolve(state, tx_op_pending=rest, tx_op_last_write=now)
        state, _op = write_op(state, 0, "".join(taken), now, sem)
        if sum(len(e) for e in rest) < OP_MSG_MAX_SIZE:
            break
    return state


def _op_offsets(op: Record, sem: Semantics) -> list[int] | None:
    """The half offsets an op names, parsed as fillOpRemoveMap does; None for an op without tag ``d``.

    4.9.8: the body is one offset (``getLong``: -1 when it does not parse). 5.x: ``body.split(",")``
    (Java's split: trailing empty strings dropped), each ``getLong``.
    """
    if op.properties.get(Prop.TAGS) != REMOVE_TAG:
        return None
    text = op.body.decode("utf-8", errors="replace")
    parts = _java_split(text, ",") if sem.batched_ops() else [text]
    out = []
    for part in parts:
        value = parse_long(part)
        out.append(-1 if value is None else value)
    return out


def _java_split(text: str, sep: str) -> list[str]:
    """``String.split(sep)`` for a one-character separator: trailing empty strings are removed, and a
    string without the separator is returned whole (so ``""`` gives one empty string)."""
    if sep not in text:
        return [text]
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


# --- the check service -----------------------------------------------------------------------------------


@attrs.frozen
class CheckRun:
    """One run of TransactionalMessageServiceImpl.check on half queue 0, between two of its steps.

    A run is instantaneous on the logical clock except where the broker's loop waits: 4.9.8 reads the op
    queue again and again until the clock moves (a record whose age equals its timeout, or an immune
    record whose ``TRAN_PREPARED_QUEUE_OFFSET`` does not parse); 5.x sleeps 1 s whenever a read of the op
    queue finds nothing new. The run is then suspended and goes on at ``resume_at``.
    """

    start: int  # startTime: records stored at or after it were written during this run
    resume_at: int
    i: int
    new_off: int
    half_off: int  # halfOffset, the committed half offset when the run began (miniOffset of the op reads)
    op_off: int  # opOffset
    op_pull: int  # where the next read of the op queue begins (pullResult.getNextBeginOffset())
    last_op_born: int | None  # born time of the last op the latest read found; None: it found none
    remove_map: immutables.Map[int, int]  # half offset -> op queue offset
    op_sets: immutables.Map[int, frozenset[int]]  # 5.x: op queue offset -> half offsets it still names
    done_ops: tuple[int, ...]  # doneOpOffset (a list: 5.x may add one op twice)
    repull: bool = False  # 4.9.8's wait: read the op queue again when going on
    # A run whose checks a history shows (Model.check_rounds): its sleeps are behind it, so it reads the op
    # queue to its end and checks what is due without sleeping again (5.x; the checker places it there).
    known: bool = False


def check(
    state: BrokerState, now: int, sem: Semantics, known: bool = False
) -> tuple[BrokerState, list[CheckRequest | Discarded]]:
    """The check service at ``now``: start a run, or go on with the suspended one once it is due.

    rule: transaction/check-resolved, transaction/check-timeout, transaction/check-times,
    transaction/check-discard, transaction/check-skip-expired, transaction/check-no-producer
    """
    run = state.tx_run
    if run is None:
        run = CheckRun(
            start=now,
            resume_at=now,
            i=state.tx_half_offset,
            new_off=state.tx_half_offset,
            half_off=state.tx_half_offset,
            op_off=state.tx_op_offset,
            op_pull=state.tx_op_offset,
            last_op_born=None,
            remove_map=immutables.Map(),
            op_sets=immutables.Map(),
            done_ops=(),
            known=known,
        )
        run = _fill(state, run, sem)
    elif now < run.resume_at:
        return state, []
    return _go(attrs.evolve(state, tx_run=None), run, sem)


def _fill(state: BrokerState, run: CheckRun, sem: Semantics) -> CheckRun:
    """fillOpRemoveMap: read up to 32 op messages from ``run.op_pull``.

    An op naming a half offset below halfOffset is done at once; one naming a later offset goes into the
    remove map. 4.9.8 leaves an op without tag ``d`` alone; 5.x marks an op that names no offset at or
    above halfOffset done (op-message batches, transaction/op-batch).
    """
    op_cq = state.store.cq(OP_TOPIC, 0)
    batch = op_cq[run.op_pull : run.op_pull + OP_PULL_NUMS]
    if not batch:
        return attrs.evolve(run, last_op_born=None)
    remove_map = run.remove_map.mutate()
    op_sets = run.op_sets.mutate()
    done = list(run.done_ops)
    last_born = 0
    for n, entry in enumerate(batch):
        op_offset = run.op_pull + n
        op = state.store.lookup(entry[0])
        if op is None:
            continue
        last_born = op.born_timestamp
        offsets = _op_offsets(op, sem)
        if not sem.batched_ops():
            if offsets is None:
                continue  # "Found a illegal tag": neither done nor in the map
            if offsets[0] < run.half_off:
                done.append(op_offset)
            else:
                remove_map[offsets[0]] = op_offset
            continue
        named: set[int] = set()
        for q in offsets or []:
            if q >= run.half_off:
                remove_map[q] = op_offset
                named.add(q)
        if named:
            op_sets[op_offset] = frozenset(named)
        else:
            done.append(op_offset)
    return attrs.evolve(
        run,
        op_pull=run.op_pull + len(batch),
        last_op_born=last_born,
        remove_map=remove_map.finish(),
        op_sets=op_sets.finish(),
        done_ops=tuple(done),
    )


def _go(
    state: BrokerState, run: CheckRun, sem: Semantics
) -> tuple[BrokerState, list[CheckRequest | Discarded]]:
    """The loop of TransactionalMessageServiceImpl.check from ``run.i`` at ``run.resume_at``."""
    cfg = state.config
    timeout = cfg.transaction_timeout_ms
    clock = run.resume_at
    if run.repull:
        run = _fill(state, attrs.evolve(run, repull=False), sem)
    half_cq = state.store.cq(HALF_TOPIC, 0)  # what is dispatched now: copies of this run come later
    events: list[CheckRequest | Discarded] = []
    i, new_off = run.i, run.new_off
    while True:
        if clock - run.start > MAX_PROCESS_TIME_MS:
            break
        if i in run.remove_map and sem.honours_ops():  # resolved by an op
            run = _resolved(run, i)
            new_off = i = i + 1
            continue
        if i in state.tx_checked_aside:  # checked outside the model's runs: the broker's run passed it
            new_off = i = i + 1
            continue
        if i >= len(half_cq):
            # NO_NEW_MSG: nothing (yet) at this offset. The broker may find its own copies there instead.
            return _finish(
                state, run, new_off, clock, _own_copies_discardable(state, run, i, clock, sem)
            ), events
        half = state.store.lookup(half_cq[i][0])
        if half is None:
            break
        # needDiscard: getInt of TRANSACTION_CHECK_TIMES (-1 when it does not parse), raised in memory
        raw_times = half.properties.get(Prop.TRANSACTION_CHECK_TIMES)
        discard = False
        times = 1
        if raw_times is not None:
            seen = parse_int(raw_times)
            seen = -1 if seen is None else seen
            discard = sem.must_discard(seen, cfg.transaction_check_max)
            times = sem.next_check_times(seen)
        msg_props = (
            half.properties if discard else with_props(half.properties, TRANSACTION_CHECK_TIMES=str(times))
        )
        expired = sem.expired(clock - half.born_timestamp, cfg.file_reserved_time_h * 3_600_000)
        if discard or expired:
            state, copy = _discard(state, half, msg_props, clock, sem)
            events.append(Discarded(half, copy, "max-checks" if discard else "expired"))
            new_off = i = i + 1
            continue
        if half.store_timestamp >= run.start:  # stored during this run
            break
        age = clock - half.born_timestamp
        immunity = timeout
        raw_immunity = half.properties.get(Prop.CHECK_IMMUNITY_TIME_IN_SECONDS)
        if raw_immunity is not None:
            immunity = sem.check_immunity_ms(raw_immunity, timeout)
            if sem.check_immune(age, immunity):  # rule: transaction/check-immunity
                handled, state, run = _check_prepare_queue_offset(state, run, half, msg_props, clock, sem)
                if handled:
                    new_off = i = i + 1
                    continue
        elif sem.check_holds(age, immunity):
            break  # not yet due: the run stops here
        if run.last_op_born is None:
            need = sem.check_due(age, immunity)
        else:  # op messages were found by the latest read: read on first, unless ...
            need = run.last_op_born - run.start > timeout or (age <= -1 and sem.check_due(age, immunity))
        if (
            need
            and not sem.checks_without_producer()
            and not state.producers.get(half.properties.get(Prop.PGROUP, ""), 0)
        ):
            break  # rule: transaction/check-no-producer
        if need and may_be_held(state, i, half, clock, sem):
            break  # a record the model does not see may stop the run before this one
        if need:
            state, copy = _put_back(state, half, msg_props, clock, sem)
            events.append(_check_request(state, copy, half))
            new_off = i = i + 1
            continue
        had_ops = run.last_op_born is not None
        run = _fill(state, run, sem)
        if run.last_op_born is not None:
            continue  # more op messages: look at this record again
        wait = None if run.known else sem.check_op_wait_ms()
        if wait is not None:  # 5.x: Thread.sleep(SLEEP_WHILE_NO_OP)
            return _suspend(state, run, i, new_off, clock + wait, False, events)
        if had_ops:
            continue  # the op queue is read to its end: look at this record again, now
        # 4.9.8: read the op queue again until the clock moves; the record is due once its age passes
        # the immunity (or the run has lasted MAX_PROCESS_TIME_LIMIT)
        limit = run.start + MAX_PROCESS_TIME_MS + 1
        due = half.born_timestamp + immunity + 1
        return _suspend(state, run, i, new_off, min(due, limit) if due > clock else limit, True, events)
    return _finish(state, run, new_off, clock), events


def may_be_held(state: BrokerState, i: int, half: Record, clock: int, sem: Semantics) -> bool:
    """Whether, on a broker other producers share, a record the model does not see MAY stop a run at
    ``clock`` before the due record ``half`` at half offset ``i``.

    Such a record lies before ``half`` in the half queue, so it was stored before it and born no later
    than that (its producer's clock is the broker's): born at the latest when ``half`` was stored (or when
    the run began, if earlier). Without CHECK_IMMUNITY_TIME_IN_SECONDS, and still younger than the timeout,
    it stops the run (TransactionalMessageServiceImpl.check: ``break`` on ``0 <= age < timeout``, at
    4.9.0-4.9.8 and 5.x). The run MAY also pass it: no such record may be there. A broker the model sees
    whole (``tx_hidden_producers`` False) is never held so. rule: transaction/check-timeout
    """
    if not state.tx_hidden_producers:
        return False
    stored = min(state.tx_stored_by.get(i, half.store_timestamp), clock)
    return sem.check_holds(clock - stored, state.config.transaction_timeout_ms)


def _suspend(
    state: BrokerState,
    run: CheckRun,
    i: int,
    new_off: int,
    resume_at: int,
    repull: bool,
    events: list[CheckRequest | Discarded],
) -> tuple[BrokerState, list[CheckRequest | Discarded]]:
    run = attrs.evolve(run, i=i, new_off=new_off, resume_at=resume_at, repull=repull)
    return attrs.evolve(state, tx_run=run), events


def _own_copies_discardable(
    state: BrokerState, run: CheckRun, i: int, clock: int, sem: Semantics
) -> frozenset[str]:
    """The copies a run that stopped at ``i`` (nothing dispatched there when it looked) would have
    discarded, had the records written from ``i`` on been dispatched in time: the loop goes on through the
    records stored during the run while each is resolved or discarded, and stops at the first other one
    (stored after the run began). rule: transaction/check-discard
    """
    out: set[str] = set()
    store = state.store
    half_cq = store.cq(HALF_TOPIC, 0)
    dispatched = [store.lookup(entry[0]) for entry in half_cq[i:]]
    later = sorted(
        (
            r
            for r in (store.records[pos] for pos in range(store.reput, len(store.records)))
            if r.topic == HALF_TOPIC and r.queue_id == 0
        ),
        key=lambda r: r.queue_offset,
    )
    limit = state.config.file_reserved_time_h * 3_600_000
    for rec in [*dispatched, *later]:
        if rec is None:
            break
        if rec.queue_offset in run.remove_map and sem.honours_ops():
            continue
        raw = rec.properties.get(Prop.TRANSACTION_CHECK_TIMES)
        seen = -1 if raw is None else parse_int(raw)
        discard = raw is not None and sem.must_discard(
            -1 if seen is None else seen, state.config.transaction_check_max
        )
        if not (discard or sem.expired(clock - rec.born_timestamp, limit)):
            break
        if rec.uniq_key is not None:
            out.add(rec.uniq_key)
    return frozenset(out)


def _finish(
    state: BrokerState, run: CheckRun, new_off: int, clock: int, discardable: frozenset[str] = frozenset()
) -> BrokerState:
    """Commit the half offset and the op offset, advanced past a contiguous run of done ops
    (calculateOpOffset: sorted, and stopped at the first that is not the next)."""
    op_next = run.op_off
    for d in sorted(run.done_ops):
        if d != op_next:
            break
        op_next += 1
    return attrs.evolve(
        state,
        tx_half_offset=new_off,
        tx_op_offset=op_next,
        tx_run=None,
        tx_last_run_end=clock,
        tx_discardable=discardable,
    )


def _resolved(run: CheckRun, i: int) -> CheckRun:
    """A half offset found in the remove map: its op is done (5.x: once every offset it names is)."""
    op = run.remove_map[i]
    remove_map = run.remove_map.delete(i)
    named = run.op_sets.get(op)
    if named is None:
        return attrs.evolve(run, remove_map=remove_map, done_ops=(*run.done_ops, op))
    left = named - {i}
    if left:
        return attrs.evolve(run, remove_map=remove_map, op_sets=run.op_sets.set(op, left))
    return attrs.evolve(
        run, remove_map=remove_map, op_sets=run.op_sets.delete(op), done_ops=(*run.done_ops, op)
    )


def _check_prepare_queue_offset(
    state: BrokerState, run: CheckRun, half: Record, msg_props: Props, now: int, sem: Semantics
) -> tuple[bool, BrokerState, CheckRun]:
    """checkPrepareQueueOffset for an immune record: True when the run skips it (a copy was written, or
    the original it names was resolved); False (look at it as if not immune) when its
    ``TRAN_PREPARED_QUEUE_OFFSET`` does not parse. rule: transaction/check-immunity
    """
    prepared = half.properties.get(Prop.TRAN_PREPARED_QUEUE_OFFSET)
    if prepared is not None:
        original = parse_long(prepared)
        if original is None or original == -1:
            return False, state, run
        if original in run.remove_map:
            op = run.remove_map[original]
            run = attrs.evolve(run, remove_map=run.remove_map.delete(original), done_ops=(*run.done_ops, op))
            return True, state, run
    # renewImmunityHalfMessageInner: the properties string is rebuilt after WAIT=false is set
    copy_props = with_props(
        msg_props,
        TRAN_PREPARED_QUEUE_OFFSET=str(half.queue_offset) if prepared is None else prepared,
        WAIT="false",
    )
    state, _copy = _put_back(state, half, copy_props, now, sem)
    return True, state, run


def check_now(state: BrokerState, half: Record, now: int, sem: Semantics) -> tuple[BrokerState, CheckRequest]:
    """``half`` checked at ``now`` by a run the model did not make: its count raised, the copy put back, the
    request made, as a run that reaches it does. For a checker following a broker whose runs it cannot
    place (a shared 5.x broker's runs spin on other clients' op messages and may check a record whose op
    they have not read yet). rule: transaction/check-times
    """
    raw = half.properties.get(Prop.TRANSACTION_CHECK_TIMES)
    seen = None if raw is None else parse_int(raw)
    times = 1 if raw is None else sem.next_check_times(-1 if seen is None else seen)
    state, copy = _put_back(
        state, half, with_props(half.properties, TRANSACTION_CHECK_TIMES=str(times)), now, sem
    )
    state = attrs.evolve(state, tx_checked_aside=state.tx_checked_aside | {half.queue_offset})
    return state, _check_request(state, copy, half)


def _put_back(
    state: BrokerState, half: Record, stored: Props, now: int, sem: Semantics
) -> tuple[BrokerState, Record]:
    """renewHalfMessageInner + putMessage: a copy at the end of the half queue, new offsets.

    The properties string is built before ``setWaitStoreMsgOK(false)``: the copy stores WAIT as the
    record read had it. rule: transaction/check-times
    """
    inner = Inner(
        topic=HALF_TOPIC,
        queue_id=half.queue_id,
        body=half.body,
        properties=with_props(stored, WAIT="false"),
        stored=stored,
        sys_flag=half.sys_flag,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        store_host=half.store_host,
    )
    return append(state, inner, now, sem)


def _check_request(state: BrokerState, copy: Record, half: Record) -> CheckRequest:
    """CHECK_TRANSACTION_STATE for a put-back copy. rule: transaction/check-no-producer

    The body is the half message as the run read it (its flag, reconsumeTimes and store time: observed
    on 4.9.4, facts §5.4 step 9), updated with the copy's offsets and the raised count, with WAIT=false,
    topic and queue restored to REAL_*. The queue is ``Integer.parseInt(REAL_QID)``: should that throw
    (no half record the broker wrote lacks a valid one), sendCheckMessage fails before sending, as when
    no producer is online.
    """
    p = copy.properties
    group = p.get(Prop.PGROUP, "")
    real_qid = parse_int(p.get(Prop.REAL_QID))
    message = attrs.evolve(
        half,
        topic=p.get(Prop.REAL_TOPIC, half.topic),
        queue_id=half.queue_id if real_qid is None else real_qid,
        queue_offset=copy.queue_offset,
        commit_log_offset=copy.commit_log_offset,
        properties=with_props(p, WAIT="false"),
    )
    return CheckRequest(
        group=group,
        tran_state_table_offset=copy.queue_offset,
        commit_log_offset=copy.commit_log_offset,
        offset_msg_id=copy.msg_id,
        transaction_id=p.get(Prop.UNIQ_KEY),
        message=message,
        sent=real_qid is not None and Prop.REAL_TOPIC in p and state.producers.get(group, 0) > 0,
        at=copy.store_timestamp,
    )


def _discard(
    state: BrokerState, half: Record, msg_props: Props, now: int, sem: Semantics
) -> tuple[BrokerState, Record]:
    """resolveDiscardMsg: copy to TRANS_CHECK_MAX_TIME_TOPIC queue 0. rule: transaction/check-discard"""
    state = ensure_topic(state, TRANS_CHECK_MAX_TIME_TOPIC, 1)
    inner = Inner(
        topic=TRANS_CHECK_MAX_TIME_TOPIC,
        queue_id=0,
        body=half.body,
        properties=msg_props,
        sys_flag=half.sys_flag,
        flag=half.flag,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        store_host=half.store_host,
        reconsume_times=half.reconsume_times,
    )
    return append(state, inner, now, sem)

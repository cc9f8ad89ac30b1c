"""Transactions: END_TRANSACTION (facts §5.3) and the broker's check of half messages (facts §5.4)."""

from __future__ import annotations

import attrs

from .constants import (
    HALF_TOPIC,
    OP_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    Code,
    Prop,
    TxAction,
)
from .observations import CheckRequest, Discarded, EndTxOk, NoResponse, Rejected
from .put import append, ensure_topic, store_put
from .records import Inner, Props, Record, props
from .semantics import Semantics
from .state import BrokerState, with_props

REMOVE_TAG = "d"


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
    bad = check_prepare_message(half, req, sem)
    if bad is not None:
        return state, bad
    if sem.end_tx_idempotent() and _ended(state, half):  # rule: transaction/not-idempotent
        return state, EndTxOk(committed=None, op=None)
    committed: Record | None = None
    if action == TxAction.COMMIT or sem.rollback_writes_message():
        final = committed_message(half, sem)
        if final is None:
            return state, Rejected(
                Code.SYSTEM_ERROR, "REAL_TOPIC or REAL_QID missing", "transaction/committed-message"
            )
        result = store_put(state, final, now, sem)
        if isinstance(result, Rejected):
            return state, result
        state, committed = result
    state, op = write_op(state, half, now, sem)
    remark = None if action == TxAction.COMMIT else "not set any response code"
    return state, EndTxOk(committed=committed, op=op, remark=remark)  # rule: transaction/rollback


def _ended(state: BrokerState, half: Record) -> bool:
    """Whether an op message already names ``half`` (only a broker that keeps that state asks)."""
    for clo, _size, _tags in state.store.cq(OP_TOPIC, half.queue_id):
        op = state.store.lookup(clo)
        if op is not None and op.body == str(half.queue_offset).encode():
            return True
    return False


def check_prepare_message(half: Record, req: EndTransaction, sem: Semantics) -> Rejected | None:
    """checkPrepareMessage: producer group, table offset, commit-log offset. rule: transaction/commit-checks"""
    if sem.checks_producer_group() and half.properties.get(Prop.PGROUP) != req.producer_group:
        return Rejected(Code.SYSTEM_ERROR, "The producer group wrong", "transaction/commit-checks")
    if half.queue_offset != req.tran_state_table_offset:
        return Rejected(
            Code.SYSTEM_ERROR, "The transaction state table offset wrong", "transaction/commit-checks"
        )
    if half.commit_log_offset != req.commit_log_offset:
        return Rejected(Code.SYSTEM_ERROR, "The commit log offset wrong", "transaction/commit-checks")
    return None


def committed_message(half: Record, sem: Semantics) -> Inner | None:
    """endMessageTransaction: the real-topic message. rule: transaction/committed-message

    Its stored properties are the half record's own (still TRAN_MSG, PGROUP, REAL_TOPIC, REAL_QID on
    4.9.x); the map loses REAL_* and TRAN_MSG; sysFlag becomes COMMIT; preparedTransactionOffset is the
    half record's commit-log offset.
    """
    p = half.properties
    topic, qid = p.get(Prop.REAL_TOPIC), p.get(Prop.REAL_QID)
    if topic is None or qid is None:
        return None
    try:
        queue_id = int(qid)
    except ValueError:
        return None
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


def write_op(state: BrokerState, half: Record, now: int, sem: Semantics) -> tuple[BrokerState, Record]:
    """The op message: tag ``d``, body = the half record's queue offset. rule: transaction/op-message"""
    body = sem.op_body(half.queue_offset, half.commit_log_offset).encode()
    op_props = props(TAGS=REMOVE_TAG, WAIT="true", UNIQ_KEY=f"OP{state.store.end:030X}")
    inner = Inner(
        topic=OP_TOPIC,
        queue_id=half.queue_id,
        body=body,
        properties=op_props,
        born_timestamp=now,
        born_host=state.config.store_host,
        store_host=state.config.store_host,
    )
    return append(state, inner, now, sem)


# --- the check service ---------------------------------------------------------------------------------


def check(state: BrokerState, now: int, sem: Semantics) -> tuple[BrokerState, list[CheckRequest | Discarded]]:
    """One run of TransactionalMessageServiceImpl.check at ``now`` (facts §5.4).

    rule: transaction/check-resolved, transaction/check-timeout, transaction/check-times,
    transaction/check-discard, transaction/check-skip-expired, transaction/check-no-producer
    """
    cfg = state.config
    store = state.store
    half_cq = store.cq(HALF_TOPIC, 0)
    op_cq = store.cq(OP_TOPIC, 0)
    half_off, op_off = state.tx_half_offset, state.tx_op_offset
    remove_map: dict[int, int] = {}
    done_ops: set[int] = set()
    for j in range(op_off, len(op_cq)):
        op = store.lookup(op_cq[j][0])
        if op is None or op.properties.get(Prop.TAGS) != REMOVE_TAG:
            continue
        try:
            q = int(op.body.decode())
        except ValueError:
            continue
        if q < half_off:
            done_ops.add(j)
        else:
            remove_map[q] = j
    events: list[CheckRequest | Discarded] = []
    new_off = half_off
    i = half_off
    while i < len(half_cq):
        if i in remove_map and sem.honours_ops():  # resolved by an op
            done_ops.add(remove_map.pop(i))
            new_off = i = i + 1
            continue
        half = state.store.lookup(half_cq[i][0])
        if half is None:
            break
        raw_times = half.properties.get(Prop.TRANSACTION_CHECK_TIMES)
        discard = False
        times = 1
        if raw_times is not None:
            try:
                seen = int(raw_times)
            except ValueError:
                seen = -1  # getInt: -1 for what Integer.parseInt refuses, so the raised count is 0
            discard = sem.must_discard(seen, cfg.transaction_check_max)
            times = sem.next_check_times(seen)
        msg_props = (
            half.properties if discard else with_props(half.properties, TRANSACTION_CHECK_TIMES=str(times))
        )
        expired = sem.expired(now - half.born_timestamp, cfg.file_reserved_time_h * 3_600_000)
        if discard or expired:
            state, copy = _discard(state, half, msg_props, now, sem)
            events.append(Discarded(half, copy, "max-checks" if discard else "expired"))
            new_off = i = i + 1
            continue
        if half.store_timestamp >= now:  # stored during this run
            break
        age = now - half.born_timestamp
        immunity = cfg.transaction_timeout_ms
        raw_immunity = half.properties.get(Prop.CHECK_IMMUNITY_TIME_IN_SECONDS)
        if raw_immunity is not None:
            immunity = sem.check_immunity_ms(raw_immunity, cfg.transaction_timeout_ms)
            if age < immunity:  # rule: transaction/check-immunity
                prepared = half.properties.get(Prop.TRAN_PREPARED_QUEUE_OFFSET)
                original = half.queue_offset if prepared is None else _int_or(prepared, -1)
                if original != -1:
                    if prepared is not None and original in remove_map:
                        done_ops.add(remove_map.pop(original))
                    else:
                        copy_props = with_props(msg_props, TRAN_PREPARED_QUEUE_OFFSET=str(original))
                        state, _copy = _put_back(state, half, copy_props, now, sem)
                    new_off = i = i + 1
                    continue
        elif 0 <= age < immunity:
            break
        if not sem.check_due(age, immunity):
            break
        if not sem.checks_without_producer() and not state.producers.get(
            half.properties.get(Prop.PGROUP, ""), 0
        ):
            break  # rule: transaction/check-no-producer
        state, copy = _put_back(state, half, msg_props, now, sem)
        events.append(_check_request(state, copy, half.store_timestamp))
        new_off = i = i + 1
    op_next = op_off
    while op_next in done_ops:
        op_next += 1
    state = attrs.evolve(state, tx_half_offset=new_off, tx_op_offset=op_next)
    return state, events


def _int_or(raw: str, default: int) -> int:
    try:
        return int(raw)
    except ValueError:
        return default


def _put_back(
    state: BrokerState, half: Record, stored: Props, now: int, sem: Semantics
) -> tuple[BrokerState, Record]:
    """renewHalfMessageInner + putMessage: a copy at the end of the half queue, new offsets.

    rule: transaction/check-times
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


def _check_request(state: BrokerState, copy: Record, half_stored: int) -> CheckRequest:
    """CHECK_TRANSACTION_STATE for a put-back copy. rule: transaction/check-no-producer

    The body is the half message as read from the half queue, updated with the copy's offsets (so its
    store time is the half message's, not the copy's: observed on 4.9.4, facts §5.4 step 9).
    """
    p = copy.properties
    group = p.get(Prop.PGROUP, "")
    topic = p.get(Prop.REAL_TOPIC, copy.topic)
    queue_id = _int_or(p.get(Prop.REAL_QID, str(copy.queue_id)), copy.queue_id)
    message = attrs.evolve(
        copy,
        topic=topic,
        queue_id=queue_id,
        properties=with_props(p, WAIT="false"),
        store_timestamp=half_stored,
    )
    return CheckRequest(
        group=group,
        tran_state_table_offset=copy.queue_offset,
        commit_log_offset=copy.commit_log_offset,
        offset_msg_id=copy.msg_id,
        transaction_id=p.get(Prop.UNIQ_KEY),
        message=message,
        sent=state.producers.get(group, 0) > 0,
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

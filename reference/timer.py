"""The 5.x timer: messages delivered at a time of their own, not at a delay level (5.5.0).

The put hook (``HookUtils.handleScheduleMessage``: ``checkIfTimerMessage``, ``transformTimerMessage``)
rewrites a timer message into the timer topic ``rmq_sys_wheel_timer``; the ``TimerMessageStore`` reads that
queue into its wheel (``enqueue``/``doEnqueue``: one slot per ``timerPrecisionMs``, or a roll entry for a
time beyond the roll window), and once its write time has passed a slot it reads the slot (``dequeue``)
and puts each message back into its real topic (``convert``/``convertMessage``, ``doPut``), or into the
timer topic again when the entry was a roll. The checkpoint it flushes every ``timerFlushIntervalMs`` is
what a restart comes back to.

The model reads the timer queue at the moment a record is put (the broker's enqueue service reads it
within a poll of 100 ms) and reads a slot at the first instant the write time has passed it (the broker's
dequeue service within a poll of 100 ms): the earliest times the spec allows.
"""

from __future__ import annotations

import attrs

from .config import BrokerConfig
from .constants import LONG_MAX, TIMER_TOPIC, Code, Prop
from .javanum import parse_int, parse_long
from .observations import Rejected, TimerDelivered, TimerDropped, TimerRolled
from .records import Inner, Record
from .semantics import Semantics
from .state import BrokerState, TimerState, WheelEntry, with_props

TimerEvent = TimerDelivered | TimerRolled | TimerDropped

_TIMER_PROPS = (Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS)


def illegal(max_delay_sec: int, rule: str) -> Rejected:
    """``WHEEL_TIMER_MSG_ILLEGAL`` as the send processor answers it. rule: timer/deliver-time, timer/max-delay"""
    return Rejected(
        Code.MESSAGE_ILLEGAL,
        "timer message illegal, the delay time should not be bigger than the max delay "
        f"{max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than the current time",
        rule,
        "WHEEL_TIMER_MSG_ILLEGAL",
    )


# SendMessageProcessor.diskUtil(): "CL: %5.2f CQ: %5.2f INDEX: %5.2f" of the broker's disk partitions, which
# the model does not have; its remark says so in their place.
DISK_UTIL_UNKNOWN = "CL: ? CQ: ? INDEX: ?"


def not_enabled(config: BrokerConfig) -> Rejected:
    """``WHEEL_TIMER_NOT_ENABLE``: the timer is off. From 5.1.1 ``handlePutMessageResult`` answers it
    SYSTEM_ERROR; 5.0.0-5.1.0 have no ``break`` after that case, so it falls through to SERVICE_NOT_AVAILABLE's,
    which sets code 14 and its own remark. rule: timer/disabled
    """
    if not config.since("5.1.1"):
        return Rejected(
            Code.SERVICE_NOT_AVAILABLE,
            "service not available now. It may be caused by one of the following reasons: the broker's disk "
            f"is full [{DISK_UTIL_UNKNOWN}], messages are put to the slave, message store has been shut down, "
            "etc.",
            "timer/disabled",
            "WHEEL_TIMER_NOT_ENABLE",
        )
    return Rejected(
        Code.SYSTEM_ERROR,
        "accurate timer message is not enabled, timerWheelEnable is false",
        "timer/disabled",
        "WHEEL_TIMER_NOT_ENABLE",
    )


def put_hook(inner: Inner, now: int, sem: Semantics, config_state: BrokerState) -> Inner | Rejected:
    """The timer part of ``handleScheduleMessage`` for a NOT or COMMIT message with no ``DELAY`` > 0 that is
    not in the timer topic already: ``checkIfTimerMessage``, then ``transformTimerMessage``.

    rule: timer/timer-message, timer/disabled, timer/deliver-time, timer/past-deliver-time,
    timer/max-delay, timer/precision, timer/rewrite
    """
    cfg = config_state.config
    props = inner.properties
    if not sem.timer_message(props):
        return inner
    if not sem.timer_enabled(cfg.timer_wheel_enable):
        return not_enabled(cfg)
    deliver = sem.timer_deliver_ms(props, now)
    if deliver is None:
        return illegal(cfg.timer_max_delay_sec, "timer/deliver-time")
    if sem.timer_past(deliver, now):
        # rule: timer/past-deliver-time: stored as it is, at once; a cancel marker must be in the future
        if Prop.TIMER_DEL_UNIQKEY in props:
            return illegal(cfg.timer_max_delay_sec, "timer/past-deliver-time")
        return inner
    if sem.timer_too_far(deliver, now, cfg.timer_max_delay_sec):
        return illegal(cfg.timer_max_delay_sec, "timer/max-delay")
    out_ms = sem.timer_round(deliver, cfg.timer_precision_ms)
    # WHEEL_TIMER_FLOW_CONTROL (isReject) needs more than timerCongestNumEachSlot (Integer.MAX_VALUE by
    # default, not a setting of the model) entries in one slot: never here.
    real_topic, real_qid = sem.timer_real(props, inner.topic, inner.queue_id)
    return attrs.evolve(
        inner,
        topic=TIMER_TOPIC,
        queue_id=sem.timer_queue(inner.queue_id),
        properties=with_props(props, TIMER_OUT_MS=str(out_ms), REAL_TOPIC=real_topic, REAL_QID=real_qid),
        stored=None,  # the properties string is rebuilt from the map
        props_bytes=None,
    )


# --- the TimerMessageStore -------------------------------------------------------------------------------


def _slot(time_ms: int, precision: int) -> int:
    """The wheel slot of a time: ``timeMs / precisionMs * precisionMs`` (Java division, toward zero)."""
    q = abs(time_ms) // precision
    return (q if time_ms >= 0 else -q) * precision


def write_time(now: int, precision: int) -> int:
    """``currWriteTimeMs``: the clock floored to the precision (``formatTimeMs``)."""
    return _slot(now, precision)


def enqueue(state: BrokerState, now: int, sem: Semantics) -> tuple[BrokerState, list[TimerEvent]]:
    """``TimerEnqueueGetService``/``TimerEnqueuePutService``: read the timer queue from where the timer
    left off into the wheel. A record whose ``TIMER_OUT_MS`` is already behind the write time is put at
    once (``TIMER_ENQUEUE_MS`` Long.MAX_VALUE). A record whose ``TIMER_OUT_MS`` Java cannot read stops the
    reading there for good (the enqueue throws before it moves on). rule: timer/due-time, timer/roll,
    timer/stuck
    """
    timer = state.timer
    cq = state.store.cq(TIMER_TOPIC, 0)
    if timer.enqueued >= len(cq):
        return state, []
    cfg = state.config
    precision = cfg.timer_precision_ms
    write = write_time(now, precision)
    wheel = timer.wheel.mutate()
    events: list[TimerEvent] = []
    direct: list[Record] = []
    offset = timer.enqueued
    while offset < len(cq):
        record = state.store.lookup(cq[offset][0])
        if record is None:  # not readable in the commit log: skipped (enqueue_get_miss)
            offset += 1
            continue
        out_ms = parse_long(record.properties.get(Prop.TIMER_OUT_MS))
        if out_ms is None:
            if sem.timer_skips_unreadable():
                offset += 1
                continue
            break  # rule: timer/stuck: the timer reads no further, now or later
        offset += 1
        if out_ms < write:
            direct.append(record)  # already due: straight to the put service
            continue
        at, roll = sem.timer_roll_target(out_ms, write, cfg.timer_roll_slots, precision)
        entry = WheelEntry(
            record.commit_log_offset, write, roll, record.properties.get(Prop.TIMER_DEL_UNIQKEY) is not None
        )
        key = _slot(at, precision)
        wheel[key] = (*wheel.get(key, ()), entry)
    state = attrs.evolve(state, timer=attrs.evolve(timer, enqueued=offset, wheel=wheel.finish()))
    for record in direct:
        entry = WheelEntry(record.commit_log_offset, LONG_MAX)
        out_ms = parse_long(record.properties.get(Prop.TIMER_OUT_MS)) or 0
        state, event = _put_back(state, record, entry, now, sem, _slot(out_ms, precision))
        events.append(event)
    return state, events


def dequeue(state: BrokerState, now: int, sem: Semantics) -> tuple[BrokerState, list[TimerEvent]]:
    """``TimerDequeueGetService.dequeue``: read, in time order, every slot the write time has passed.

    In a slot the cancel markers are read first; a message whose UNIQ_KEY one of them names is not put;
    the others are put back in the order they were written (their real topic, or the timer topic again
    for a roll entry). rule: timer/due-time, timer/order, timer/cancel, timer/roll
    """
    events: list[TimerEvent] = []
    precision = state.config.timer_precision_ms
    while True:
        due = [s for s in state.timer.wheel if sem.timer_slot_due(s, now, precision)]
        if not due:
            return state, events
        slot = min(due)
        entries = state.timer.wheel[slot]
        state = attrs.evolve(state, timer=attrs.evolve(state.timer, wheel=state.timer.wheel.delete(slot)))
        markers = [e for e in entries if e.delete and not e.roll]
        cancelled: set[str] = set()
        for e in markers:
            marker = state.store.lookup(e.commit_log_offset)
            if marker is not None and (key := marker.properties.get(Prop.TIMER_DEL_UNIQKEY)) is not None:
                cancelled.add(key)
        for e in entries:
            if e.delete and not e.roll:
                continue
            record = state.store.lookup(e.commit_log_offset)
            if record is None:
                continue
            if sem.timer_cancelled(record.uniq_key, cancelled):
                events.append(TimerDropped(record, "timer/cancel", "cancelled"))
                continue
            state, event = _put_back(state, record, e, now, sem, slot)
            events.append(event)
        # a roll put the message into the timer queue again: the timer reads it at once
        state, more = enqueue(state, now, sem)
        events.extend(more)


def _put_back(
    state: BrokerState, record: Record, entry: WheelEntry, now: int, sem: Semantics, slot: int
) -> tuple[BrokerState, TimerEvent]:
    """``convert`` and ``doPut``: the delivered copy (or, for a roll entry, the timer record again)."""
    from .put import dispatch, store_put  # the put path imports this module

    if not entry.roll and Prop.TIMER_DEL_UNIQKEY in record.properties:
        return state, TimerDropped(record, "timer/cancel", "cancel-marker")  # doPut: PUT_NO_RETRY
    inner = timer_copy(record, entry, now, sem)
    if inner is None:
        return state, TimerDropped(record, "timer/delivered-copy", "no real topic")
    result = store_put(state, inner, now, sem)
    if isinstance(result, Rejected):
        return state, TimerDropped(record, "timer/delivered-copy", f"refused: {result.code.name}")
    state, copy = result
    state = dispatch(state, sem)
    if entry.roll:
        return state, TimerRolled(record, copy)
    return state, TimerDelivered(record, copy, slot)


def timer_copy(record: Record, entry: WheelEntry, now: int, sem: Semantics) -> Inner | None:
    """``convert``/``convertMessage``: the message the timer puts back.

    ``TIMER_ENQUEUE_MS``, ``TIMER_ROLL_TIMES`` (a roll) and ``TIMER_DEQUEUE_MS`` are added, and the
    properties string is built from that map; only then are ``REAL_TOPIC`` and ``REAL_QID`` removed from the
    map (not from the string), and ``WAIT`` set to false in the map. A roll keeps the timer topic and queue.
    rule: timer/delivered-copy, timer/roll
    """
    p = record.properties
    changes: dict[str, str] = {Prop.TIMER_ENQUEUE_MS: str(entry.enqueue_ms)}
    if entry.roll:
        rolls = parse_int(p.get(Prop.TIMER_ROLL_TIMES)) if Prop.TIMER_ROLL_TIMES in p else 0
        changes[Prop.TIMER_ROLL_TIMES] = str((rolls or 0) + 1)
    changes[Prop.TIMER_DEQUEUE_MS] = str(now)
    stored = sem.timer_copy_props(p.update(changes))
    if entry.roll:
        topic, queue_id = record.topic, record.queue_id
        in_memory = stored
    else:
        topic_p, qid = stored.get(Prop.REAL_TOPIC), parse_int(stored.get(Prop.REAL_QID))
        if topic_p is None or qid is None:
            return None
        topic, queue_id = topic_p, qid
        in_memory = with_props(stored, REAL_TOPIC=None, REAL_QID=None)
    return Inner(
        topic=topic,
        queue_id=queue_id,
        body=record.body,
        properties=with_props(in_memory, WAIT="false"),
        stored=stored,
        sys_flag=record.sys_flag,
        flag=record.flag,
        born_timestamp=record.born_timestamp,
        born_host=record.born_host,
        store_host=record.store_host,
        reconsume_times=record.reconsume_times,
    )


def run(state: BrokerState, now: int, sem: Semantics) -> tuple[BrokerState, list[TimerEvent]]:
    """The timer's services at ``now``: read the timer queue, then every slot that is due."""
    if not sem.has_timer():
        return state, []
    state, events = enqueue(state, now, sem)
    state, more = dequeue(state, now, sem)
    return state, events + more


def next_due(state: BrokerState, sem: Semantics) -> int | None:
    """The first instant a slot of the wheel can be read (for logical-clock drivers)."""
    wheel = state.timer.wheel
    if not wheel:
        return None
    precision = state.config.timer_precision_ms
    return sem.timer_slot_readable_at(min(wheel), precision)


def pending(state: BrokerState) -> bool:
    """Whether the timer queue has records the timer has not read."""
    return state.timer.enqueued < len(state.store.cq(TIMER_TOPIC, 0))


def dirty(state: BrokerState) -> bool:
    """Whether the timer changed since its last flush."""
    t = state.timer
    cp = t.checkpoint
    if cp is None:
        return t.enqueued > 0 or bool(t.wheel)
    return cp.enqueued != t.enqueued or cp.wheel is not t.wheel


def flush(state: BrokerState) -> BrokerState:
    """``TimerFlushService``: save the checkpoint (read position, wheel). rule: timer/restart"""
    return attrs.evolve(state, timer=attrs.evolve(state.timer, checkpoint=state.timer.saved()))


def restart(state: BrokerState, sem: Semantics) -> BrokerState:
    """A restart: the timer comes back to its last flush. What it read from the timer queue after that is
    read again, and the slots it read after that are read again: their messages may be delivered twice.
    rule: timer/restart
    """
    cp = state.timer.checkpoint
    back = sem.timer_after_restart(cp if cp is not None else TimerState(), state.timer)
    return attrs.evolve(state, timer=attrs.evolve(back, checkpoint=back.saved()))


def stuck(state: BrokerState) -> bool:
    """Whether the timer's reading of its queue is stopped at a record it cannot read."""
    cq = state.store.cq(TIMER_TOPIC, 0)
    offset = state.timer.enqueued
    if offset >= len(cq):
        return False
    record = state.store.lookup(cq[offset][0])
    return record is not None and parse_long(record.properties.get(Prop.TIMER_OUT_MS)) is None


__all__ = [
    "TimerEvent",
    "dequeue",
    "enqueue",
    "flush",
    "next_due",
    "put_hook",
    "restart",
    "run",
    "timer_copy",
]

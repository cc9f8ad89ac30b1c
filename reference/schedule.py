"""ScheduleMessageService (4.9.3-4.9.8; 5.0.0-5.5.0 under the 5.x profile): per-level, in-order delivery."""

from __future__ import annotations

import attrs
import immutables

from .constants import HALF_TOPIC, SCHEDULE_TOPIC, Prop
from .javanum import parse_int
from .observations import Delivered, DroppedOnDelivery
from .put import append
from .records import Inner, Record
from .semantics import Semantics
from .state import BrokerState, with_props


@attrs.frozen
class NotDue:
    """The head of a level is not due: it blocks the rest of its level until ``deliver_ts``."""

    level: int
    deliver_ts: int


@attrs.frozen
class Empty:
    level: int


@attrs.frozen
class Stuck:
    """The head's copy cannot be built (no REAL_QID): retried forever at the same offset (4.9.3-4.9.8)."""

    level: int
    offset: int


HeadOutcome = Delivered | DroppedOnDelivery | NotDue | Empty | Stuck


def schedule_offset(state: BrokerState, level: int) -> int:
    return state.schedule_offsets.get(level, 0)


def deliver_head(state: BrokerState, level: int, now: int, sem: Semantics) -> tuple[BrokerState, HeadOutcome]:
    """One step of ``executeOnTimeup`` for one level: deliver the entry at the level's offset if due.

    rule: schedule/fifo-per-level, schedule/due-time, schedule/deliver-clamp
    """
    cfg = state.config
    offset = schedule_offset(state, level)
    cq = state.store.cq(SCHEDULE_TOPIC, sem.schedule_queue_id(level))
    while offset < len(cq):
        clo, _size, tags = cq[offset]
        delay = sem.delay_ms_for(cfg.delay_levels, level)
        deliver_ts = sem.correct_deliver_timestamp(now, tags, delay if delay is not None else 1000)
        if not sem.is_due(deliver_ts, now):
            return state, NotDue(level, deliver_ts)
        source = state.store.lookup(clo)
        if source is None:  # missing in the commit log: skipped
            offset += 1
            continue
        timeup = message_timeup(source, sem)
        if timeup is None:  # messageTimeup threw (rule: schedule/fifo-per-level)
            if sem.undeliverable_head_blocks():  # 4.9.3-4.9.8: the next poll starts at this entry
                return _set_offset(state, level, offset), Stuck(level, offset)
            offset += 1  # 5.0.0-5.5.0: nextOffset = currOffset + 1 was set before the copy was built
            continue
        state = _set_offset(state, level, offset + 1)
        if timeup.topic == HALF_TOPIC and sem.drops_half_topic_copy():
            # rule: schedule/drop-half-topic
            return state, DroppedOnDelivery(level, source, "schedule/drop-half-topic")
        state, copy = append(state, timeup, now, sem)
        return state, Delivered(level, source, copy)
    return _set_offset(state, level, offset), Empty(level)


def _set_offset(state: BrokerState, level: int, offset: int) -> BrokerState:
    if state.schedule_offsets.get(level, 0) == offset:
        return state
    return attrs.evolve(state, schedule_offsets=state.schedule_offsets.set(level, offset))


def message_timeup(source: Record, sem: Semantics) -> Inner | None:
    """messageTimeup: the delivered copy. rule: schedule/delivered-copy

    The properties string is built before DELAY leaves the map, so the stored copy still shows DELAY,
    REAL_TOPIC and REAL_QID (4.9.x); WAIT=false and no DELAY in the map, so the put does not rewrite it
    again. Topic and queue come from REAL_TOPIC / REAL_QID; sysFlag and reconsumeTimes are kept.
    """
    p = source.properties
    real_topic = p.get(Prop.REAL_TOPIC)
    queue_id = parse_int(p.get(Prop.REAL_QID))  # Integer.parseInt: a missing or bad REAL_QID throws
    if real_topic is None or queue_id is None:  # a null topic fails the put (an exception as well)
        return None
    return Inner(
        topic=real_topic,
        queue_id=queue_id,
        body=source.body,
        properties=with_props(p, WAIT="false", DELAY=None),
        stored=sem.delivered_stored(p),
        sys_flag=source.sys_flag,
        flag=source.flag,
        born_timestamp=source.born_timestamp,
        born_host=source.born_host,
        store_host=source.store_host,
        reconsume_times=source.reconsume_times,
    )


def deliver_due(
    state: BrokerState, now: int, sem: Semantics
) -> tuple[BrokerState, list[Delivered | DroppedOnDelivery]]:
    """Run every level's task at ``now``: each delivers what is due, in order, stopping at the first not due.

    rule: schedule/levels-independent
    """
    events: list[Delivered | DroppedOnDelivery] = []
    for level in range(1, state.config.max_delay_level + 1):
        if schedule_offset(state, level) >= len(state.store.cq(SCHEDULE_TOPIC, sem.schedule_queue_id(level))):
            continue  # nothing at or after the offset: deliver_head would find the level empty, unchanged
        while True:
            state, out = deliver_head(state, level, now, sem)
            if isinstance(out, Delivered | DroppedOnDelivery):
                events.append(out)
                continue
            break
    return state, events


def next_due(state: BrokerState, sem: Semantics, now: int | None = None) -> int | None:
    """The earliest deliver time among the heads of all levels (for logical-clock drivers). With ``now``,
    each head's deliver time as a run at ``now`` corrects it: a head whose code lies further ahead than
    its level's delay (a table shortened by a restart) is due at once (rule: schedule/deliver-clamp), so
    a driver visits the service's first run after a restart rather than the head's old code."""
    best: int | None = None
    for level in range(1, state.config.max_delay_level + 1):
        cq = state.store.cq(SCHEDULE_TOPIC, sem.schedule_queue_id(level))
        offset = schedule_offset(state, level)
        if offset < len(cq):
            tags = cq[offset][2]
            if now is not None:
                delay = sem.delay_ms_for(state.config.delay_levels, level)
                tags = sem.correct_deliver_timestamp(now, tags, delay if delay is not None else 1000)
            if best is None or tags < best:
                best = tags
    return best


def persist_offsets(state: BrokerState) -> BrokerState:
    """Flush the offset table to delayOffset.json (every flushDelayOffsetInterval). rule: schedule/restart-redelivery"""
    return attrs.evolve(state, persisted_schedule_offsets=state.schedule_offsets)


def restart(state: BrokerState, sem: Semantics) -> BrokerState:
    """Restart: the offset table comes back from the last persist, clamped into each schedule queue.

    What was delivered after that persist is delivered again (at-least-once). Producer connections are
    gone. rule: schedule/restart-redelivery
    """
    corrected: dict[int, int] = {}
    for level in range(1, state.config.max_delay_level + 1):
        cq_len = len(state.store.cq(SCHEDULE_TOPIC, sem.schedule_queue_id(level)))
        corrected[level] = sem.restart_offset(state.persisted_schedule_offsets.get(level, 0), cq_len)
    return attrs.evolve(state, schedule_offsets=immutables.Map(corrected), producers=immutables.Map())

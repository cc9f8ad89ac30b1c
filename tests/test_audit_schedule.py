"""Schedule-service edges the spec examples cannot reach, each written from ScheduleMessageService's source.

The expected values come from apache/rocketmq at the releases named in each test (see docs/audit/schedule.md),
never from the model's output. Some tests edit a state by hand to reach what no client operation can make:
a schedule record whose REAL_QID is not a number, or an offset table that points past its queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import attrs
import immutables
import pytest

from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import SCHEDULE_TOPIC
from rmqspec.reference.model import Model
from rmqspec.reference.observations import Delivered, PullResult, SendOk
from rmqspec.reference.put import Message
from rmqspec.reference.records import props
from rmqspec.reference.schedule import Stuck, deliver_head
from rmqspec.reference.state import BrokerState

T = TypeVar("T")

LEVELS = "1s 2s 3s"


def is_a(value: object, cls: type[T]) -> T:
    assert isinstance(value, cls), value
    return value


def model(profile: Profile = Profile.V4_9) -> Model:
    return Model(BrokerConfig(delay_levels=LEVELS, profile=profile))


def three_of_level_one(m: Model, at: int = 0) -> tuple[BrokerState, list[SendOk]]:
    state = m.initial()
    sent = []
    for i in range(3):
        state, out = m.send(state, Message("D", str(i).encode(), props(DELAY="1"), queue_id=1), at)
        sent.append(is_a(out, SendOk))
    return state, sent


def with_real_qid(state: BrokerState, sent: SendOk, value: str | None) -> BrokerState:
    """The schedule record of ``sent`` with REAL_QID set to ``value`` (None: removed)."""
    pos = state.store.index[sent.record.commit_log_offset]
    rec = state.store.records[pos]
    p = rec.properties.delete("REAL_QID") if value is None else rec.properties.set("REAL_QID", value)
    return attrs.evolve(
        state,
        store=attrs.evolve(
            state.store, records=state.store.records.set(pos, attrs.evolve(rec, properties=p))
        ),
    )


def bodies(events: Sequence[object]) -> list[bytes]:
    return [is_a(e, Delivered).copy.body for e in events]


# --- schedule/fifo-per-level: a head whose copy cannot be built ---------------------------------------------


@pytest.mark.parametrize("bad", [None, "", " 1", "1 ", "x", "2147483648", "1_0"])
def test_on_4_9_8_a_head_whose_real_qid_java_cannot_parse_blocks_its_level(bad: str | None) -> None:
    """4.9.3-4.9.8 executeOnTimeup: Integer.parseInt(REAL_QID) throws inside the loop's try; the catch
    logs and the finally-path schedules the next poll at nextOffset, the failing entry's own offset."""
    m = model()
    state, sent = three_of_level_one(m)
    state = with_real_qid(state, sent[1], bad)
    state, events = m.deliver(state, 1000)
    assert bodies(events) == [b"0"]
    state, events = m.deliver(state, 60_000)
    assert events == [] and state.schedule_offsets[1] == 1
    assert deliver_head(state, 1, 60_000, m.semantics)[1] == Stuck(1, 1)


@pytest.mark.parametrize("bad", [None, " 1", "x"])
def test_on_5_5_0_a_head_whose_real_qid_java_cannot_parse_is_skipped(bad: str | None) -> None:
    """5.0.0-5.5.0 executeOnTimeUp: nextOffset = currOffset + 1 is set before messageTimeUp throws; the
    catch logs and the next poll starts at nextOffset, so the entry is skipped and the level goes on."""
    m = model(Profile.V5)
    state, sent = three_of_level_one(m)
    state = with_real_qid(state, sent[1], bad)
    state, events = m.deliver(state, 1000)
    assert bodies(events) == [b"0", b"2"]
    assert state.schedule_offsets[1] == 3


def test_real_qid_is_read_as_integer_parse_int_does() -> None:
    """messageTimeup: queueId = Integer.parseInt(REAL_QID); Java accepts a sign and any Unicode decimal
    digit, so "+1" and "\u0661" (ARABIC-INDIC DIGIT ONE) are queue 1."""
    m = model()
    state, sent = three_of_level_one(m)
    state = with_real_qid(state, sent[0], "+1")
    state = with_real_qid(state, sent[1], "\u0661")
    state, events = m.deliver(state, 1000)
    assert [is_a(e, Delivered).copy.queue_id for e in events] == [1, 1, 1]
    assert [r.body for r in is_a(m.pull(state, "D", 1, 0), PullResult).records] == [b"0", b"1", b"2"]


# --- schedule/restart-redelivery: correctDelayOffset on load -------------------------------------------------


def test_a_flushed_offset_past_its_queue_is_clamped_to_the_queue_end_on_load() -> None:
    """4.9.2-4.9.8 and 5.0.0-5.5.0 correctDelayOffset: an offset above cqMaxOffset becomes cqMaxOffset, so a
    message stored after the restart is delivered. (4.9.0-4.9.1 have no such correction: the level polls
    offset 5 until its queue grows past it and entries 2-4 are never delivered.)"""
    m = model()
    state, _sent = three_of_level_one(m)
    state, events = m.deliver(state, 1000)
    assert len(events) == 3
    # as if the consume queue had lost entries in a crash
    state = attrs.evolve(state, persisted_schedule_offsets=immutables.Map({1: 5}))
    state = m.restart(state)
    assert state.schedule_offsets[1] == 3  # len of level 1's schedule queue
    state, out = m.send(state, Message("D", b"after", props(DELAY="1"), queue_id=1), 2000)
    is_a(out, SendOk)
    state, events = m.deliver(state, 3000)
    assert bodies(events) == [b"after"]


def test_a_level_missing_from_the_file_starts_at_zero_and_an_unknown_level_is_ignored() -> None:
    """start(): offsetTable.get(level) null -> 0; correctDelayOffset and the tasks only visit the levels of
    the current table, so an entry for a level the table no longer has is kept but never used."""
    m = model()
    state, _sent = three_of_level_one(m)
    state = attrs.evolve(state, persisted_schedule_offsets=immutables.Map({7: 4}))
    state = m.restart(state)
    assert state.schedule_offsets.get(1, 0) == 0
    state, events = m.deliver(state, 1000)
    assert bodies(events) == [b"0", b"1", b"2"]
    assert state.store.max_offset(SCHEDULE_TOPIC, 0) == 3

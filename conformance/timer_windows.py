"""What the history checker needs to judge a 5.x timer delivery two-sided (spec/timer.md), as pure functions.

The history checker (``conformance/checker``) replays a history on the model; for a timer message the model
answers with a ``TimerDelivered`` event at the earliest moment the spec allows. These helpers turn such an
event into what a wall-clock broker may show, so that the checker can accept exactly that and no more:

* the **window** of the delivered copy's store time: from ``TIMER_OUT_MS + precision`` (never earlier:
  timer/due-time) to that plus epsilon, after the send that wrote the timer record completed;
* the copy's **timer properties**, which a real broker sets from its own clock: ``TIMER_ENQUEUE_MS`` is the
  timer's write time when it read the record (a multiple of the precision, at or after the put, at most the
  delivery) or ``Long.MAX_VALUE`` (read when already due); ``TIMER_DEQUEUE_MS`` lies between the due time and
  the copy's store time; every other property is the model's exactly (timer/delivered-copy);
* the **order**: only copies from different slots are ordered (timer/order).

rule: timer/due-time, timer/delivered-copy, timer/order
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from rmqspec.reference.constants import LONG_MAX, Prop
from rmqspec.reference.observations import TimerDelivered

# Properties of a delivered timer copy that the broker sets from its own clock: judged by
# ``timer_property_problems``, not compared with the model's values.
TIMER_CLOCK_PROPERTIES = frozenset({Prop.TIMER_ENQUEUE_MS, Prop.TIMER_DEQUEUE_MS})


@attrs.frozen
class TimerWindow:
    """When a timer message's delivered copy may be stored (epoch ms, both ends included)."""

    due: int  # TIMER_OUT_MS + precision: the first moment it may be there
    latest: int  # due + epsilon (plus the writing send's own duration, which the checker adds)
    slot: int


def timer_window(event: TimerDelivered, precision: int, epsilon_ms: int) -> TimerWindow:
    """The window of ``event``'s copy. rule: timer/due-time"""
    due = event.slot + precision
    return TimerWindow(due, due + epsilon_ms, event.slot)


def timer_property_problems(
    got: Mapping[str, str], put_at: tuple[int, int], due: int, store_ts: int, precision: int
) -> list[str]:
    """What is wrong with a delivered timer copy's clock properties (empty: nothing).

    ``put_at`` is when the send that wrote the timer record began and completed (the put happened in
    between); ``due`` the copy's due time; ``store_ts`` its store time. rule: timer/delivered-copy
    """
    out = []
    enq = got.get(Prop.TIMER_ENQUEUE_MS)
    if enq is None or not enq.lstrip("-").isdigit():
        out.append(f"TIMER_ENQUEUE_MS {enq!r} is not a time")
    elif int(enq) != LONG_MAX:
        e = int(enq)
        first = put_at[0] // precision * precision
        if e % precision or not first <= e <= store_ts:
            out.append(
                f"TIMER_ENQUEUE_MS {e} is not the timer's write time between the put "
                f"({first}) and the delivery ({store_ts})"
            )
    deq = got.get(Prop.TIMER_DEQUEUE_MS)
    if deq is None or not deq.lstrip("-").isdigit():
        out.append(f"TIMER_DEQUEUE_MS {deq!r} is not a time")
    elif not due <= int(deq) <= store_ts:
        out.append(f"TIMER_DEQUEUE_MS {deq} is outside [{due}, {store_ts}]")
    return out


def out_of_slot_order(a_slot: int, a_store: int, b_slot: int, b_store: int) -> bool:
    """Whether two delivered timer copies (of one broker, no restart between them) break timer/order: the
    one from the later slot was stored strictly before the one from the earlier slot."""
    return (a_slot < b_slot and b_store < a_store) or (b_slot < a_slot and a_store < b_store)

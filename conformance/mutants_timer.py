"""Mutants of the 5.x timer: one timer decision of the reference changed each (spec/timer.md).

They override ``Semantics`` decisions that only the timer reaches (``has_timer``), so on the 4.9 profile
each behaves as the reference does; on the 5.x profile (a scenario's ``profile: "5.x"``) the change shows.
Registered into ``MUTANTS`` on import (``conformance.mutants`` imports this module at its end).
"""

from __future__ import annotations

from rmqspec.reference.records import Props
from rmqspec.reference.semantics import V5Semantics
from rmqspec.reference.state import TimerState, with_props

from .mutants import mutant

# Each mutant subclasses V5Semantics: the timer exists only there.


@mutant(
    "timer-ignored", "timer/timer-message", "timer properties are user properties: stored at once (as 4.9)"
)
class TimerIgnored(V5Semantics):
    def timer_message(self, props: Props) -> bool:
        return False


@mutant("timer-always-on", "timer/disabled", "timerWheelEnable=false is not honoured")
class TimerAlwaysOn(V5Semantics):
    def timer_enabled(self, timer_wheel_enable: bool) -> bool:
        return True


@mutant("timer-ms-first", "timer/deliver-time", "TIMER_DELAY_MS is read before TIMER_DELAY_SEC")
class TimerMsFirst(V5Semantics):
    def timer_deliver_ms(self, props: Props, now: int) -> int | None:
        if "TIMER_DELAY_MS" in props:
            return super().timer_deliver_ms(with_props(props, TIMER_DELAY_SEC=None), now)
        return super().timer_deliver_ms(props, now)


@mutant("timer-max-inclusive", "timer/max-delay", "a deliver time exactly timerMaxDelaySec away is refused")
class TimerMaxInclusive(V5Semantics):
    def timer_too_far(self, deliver: int, now: int, max_delay_sec: int) -> bool:
        return deliver - now >= max_delay_sec * 1000


@mutant(
    "timer-no-round-down", "timer/precision", "TIMER_OUT_MS is the deliver time floored, even on a multiple"
)
class TimerNoRoundDown(V5Semantics):
    def timer_round(self, deliver: int, precision: int) -> int:
        return deliver // precision * precision


@mutant(
    "timer-one-slot-early", "timer/due-time", "a slot is read when the clock reaches it, one precision early"
)
class TimerOneSlotEarly(V5Semantics):
    def timer_slot_due(self, slot: int, now: int, precision: int) -> bool:
        return slot <= now

    def timer_slot_readable_at(self, slot: int, precision: int) -> int:
        return slot


@mutant(
    "timer-copy-cleaned",
    "timer/delivered-copy",
    "the delivered copy loses REAL_TOPIC, REAL_QID, TIMER_OUT_MS",
)
class TimerCopyCleaned(V5Semantics):
    def timer_copy_props(self, props: Props) -> Props:
        return with_props(props, REAL_TOPIC=None, REAL_QID=None, TIMER_OUT_MS=None)


@mutant("timer-never-rolls", "timer/roll", "a message beyond the roll window goes straight to its slot")
class TimerNeverRolls(V5Semantics):
    def timer_roll_target(self, out_ms: int, write: int, slots: int, precision: int) -> tuple[int, bool]:
        return out_ms, False


@mutant("timer-cancel-ignored", "timer/cancel", "a cancel marker cancels nothing")
class TimerCancelIgnored(V5Semantics):
    def timer_cancelled(self, uniq_key: str | None, cancelled: set[str]) -> bool:
        return False


@mutant(
    "timer-past-inclusive", "timer/past-deliver-time", "a deliver time equal to now is still a timer message"
)
class TimerPastInclusive(V5Semantics):
    def timer_past(self, deliver: int, now: int) -> bool:
        return deliver < now


@mutant("timer-queue-kept", "timer/rewrite", "the timer record keeps the message's queue id")
class TimerQueueKept(V5Semantics):
    def timer_queue(self, queue_id: int) -> int:
        return queue_id


@mutant(
    "timer-half-keeps-real-topic",
    "timer/transactional",
    "a REAL_TOPIC the message carries is kept: a timer half message goes to its own topic",
)
class TimerHalfKeepsRealTopic(V5Semantics):
    def timer_real(self, props: Props, topic: str, queue_id: int) -> tuple[str, str]:
        return props.get("REAL_TOPIC", topic), props.get("REAL_QID", str(queue_id))


@mutant("timer-restart-forgets", "timer/restart", "a restart empties the wheel: what waited is lost")
class TimerRestartForgets(V5Semantics):
    def timer_after_restart(self, checkpoint: TimerState, current: TimerState) -> TimerState:
        return TimerState(enqueued=current.enqueued)


@mutant("timer-skips-unreadable", "timer/stuck", "a timer record without TIMER_OUT_MS is skipped")
class TimerSkipsUnreadable(V5Semantics):
    def timer_skips_unreadable(self) -> bool:
        return True

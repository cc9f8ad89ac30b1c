"""An expectation: something the model says must become visible, and the window in which it may."""

from __future__ import annotations

import attrs

from rmqspec.reference.records import Record


@attrs.define
class Expectation:
    """The model stored ``model`` (a record of ``uniq`` in ``topic``); the target must show it to a pull
    no earlier than ``earliest`` and, once the operation it follows from (``writer``) has completed, no
    later than ``closes`` plus that operation's width (``Checker.latest``)."""

    uniq: str
    topic: str
    queue_id: int
    earliest: int
    closes: int  # earliest + epsilon (later after a restart); Checker.latest adds the writer's width
    model: Record
    rule: str
    source: int  # the invoke index of the operation that created it; -1: a broker service
    level: int | None = None  # the delay level, for a delivered copy
    order: int = 0  # its schedule entry's position in its level (FIFO checks)
    seen_at: int | None = None  # the store time of the record the target showed for it
    optional: bool = False  # may or may not come (an operation with unknown outcome, a redelivery)
    # The operation whose completion bounds when the target stored what this follows from (the send,
    # send-back or END_TRANSACTION; for a delivered copy, the one that wrote its schedule entry): the
    # window stays open until that operation completes, and then closes its width later.
    writer: int | None = None
    epoch: int = 0  # restarts before the expectation was made
    timer_slot: int | None = None  # a 5.x timer copy: the wheel slot it was read from (timer/order)
    # The model's own copy delivered again after the restart of this index (schedule/restart-redelivery):
    # it takes that restart's one copy of its schedule entry (``Checker.redelivered``).
    again: int | None = None
    unstretched: int | None = None  # ``closes`` before a restart stretched it (restart-stretched-window)

    @property
    def queue(self) -> tuple[str, int]:
        return (self.topic, self.queue_id)

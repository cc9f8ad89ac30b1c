"""Per-level order (rule: schedule/fifo-per-level): a later entry of a level never delivered first.

Two delivered copies of one level are compared when their schedule entries' order is known: both
delayed sends' results name their entries' offsets, or the operation that wrote one completed before the
one that wrote the other began. Entries written by overlapping operations may be in either order;
copies delivered on either side of a restart are not compared.
"""

from __future__ import annotations

from ..history import Event
from .expectation import Expectation
from .windows import WindowsMixin


class OrderMixin(WindowsMixin):
    def precedes(self, a: Expectation, b: Expectation) -> bool:
        """Whether ``a``'s schedule entry is ahead of ``b``'s in their level's queue."""
        if a.writer is None or b.writer is None:
            return not self.shared and a.order < b.order
        oa, ob = self.schedule_entry_offset.get(a.writer), self.schedule_entry_offset.get(b.writer)
        if oa is not None and ob is not None:
            return oa < ob
        done = self.completed.get(a.writer)
        return done is not None and done[0] < b.writer

    def fifo(self, x: Expectation, e: Event) -> None:
        """``x`` was just seen: compare it with every other seen copy of its level and epoch."""
        assert x.seen_at is not None
        for others in self.expectations.values():
            for o in others:
                if o is x or o.level != x.level or o.seen_at is None or o.epoch != x.epoch:
                    continue
                lo, hi = sorted((o.seen_at, x.seen_at))
                if any(lo <= r <= hi for r, _ in self.restarts):
                    continue
                self.count("order")
                first, then = (o, x) if o.seen_at < x.seen_at else (x, o)
                if first.seen_at != then.seen_at and self.precedes(then, first):
                    self.report(
                        "fifo-violation",
                        "schedule/fifo-per-level",
                        e.index,
                        f"{first.uniq} delivered at {first.seen_at} before {then.uniq} at {then.seen_at}, "
                        f"whose schedule entry is ahead of it in level {x.level}",
                        also=[first.uniq, then.uniq],
                    )

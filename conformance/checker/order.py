"""Per-level order (rule: schedule/fifo-per-level): a later entry of a level never delivered first.

Two delivered copies of one level are compared when their schedule entries' order is known: both
delayed sends' results name their entries' offsets, or the operation that wrote one completed before the
one that wrote the other began. Entries written by overlapping operations may be in either order;
copies delivered on either side of a restart are not compared.
"""

from __future__ import annotations

import bisect

from ..history import Event
from .expectation import Expectation
from .index import LevelSeen
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
        assert x.seen_at is not None and x.level is not None
        if not self.indexed:
            self.fifo_exhaustive(x, e)
            return
        key = (x.level, x.epoch)
        level = self.seen_by_level.get(key)
        if level is None:
            level = self.seen_by_level[key] = LevelSeen()
        if self.fifo_may_fail(level, x):
            self.fifo_exhaustive(x, e)
        else:  # no pair fails: count the pairs the exhaustive walk would have compared
            if self.restarts or self.restarting is not None:
                n = sum(1 for o in level.items if not self.restart_between(o.seen_at, x.seen_at))
            else:
                n = len(level.items)
            if n:
                self.count("order", n)
        level.add(x, self.schedule_entry_offset.get(x.writer) if x.writer is not None else None)

    def restart_between(self, a: int | None, b: int) -> bool:
        assert a is not None
        lo, hi = (a, b) if a <= b else (b, a)
        return any(lo <= r <= hi for r in self.restart_invokes())

    def restart_invokes(self) -> list[int]:
        """When each restart was asked for, one still in flight included (the broker may answer again
        before the suite's restart completes)."""
        out = [r for r, _ in self.restarts]
        return out if self.restarting is None else [*out, self.restarting]

    def fifo_may_fail(self, level: LevelSeen, x: Expectation) -> bool:
        """False only if no seen copy of ``x``'s level makes a FIFO violation with ``x`` (sound: True
        when in doubt). A copy seen earlier fails with ``x`` if ``x``'s entry precedes it; the bounds of
        ``precedes`` over all of them are the prefix maxima of ``level``. A copy seen later (few: copies
        are mostly read in store order) is compared one by one."""
        assert x.seen_at is not None
        level.resolve(self.schedule_entry_offset.get, self.completed)
        keys = level.keys
        below = bisect.bisect_left(keys, x.seen_at)
        no_writer_order, any_order, max_offset, max_writer = level.maxima_below(below)
        if x.writer is None:
            if not self.shared and x.order < any_order:
                return True
        else:
            if not self.shared and x.order < no_writer_order:
                return True
            offset = self.schedule_entry_offset.get(x.writer)
            if offset is not None and offset < max_offset:
                return True
            done = self.completed.get(x.writer)
            if done is not None and done[0] < max_writer:
                return True
        above = bisect.bisect_right(keys, x.seen_at)
        return any(self.precedes(o, x) for o in level.items[above:])

    def fifo_exhaustive(self, x: Expectation, e: Event) -> None:
        assert x.seen_at is not None
        for others in self.expectations.values():
            for o in others:
                if o is x or o.level != x.level or o.seen_at is None or o.epoch != x.epoch:
                    continue
                lo, hi = sorted((o.seen_at, x.seen_at))
                if any(lo <= r <= hi for r in self.restart_invokes()):
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

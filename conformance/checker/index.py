"""Indexes that keep the checker's cost per event flat as a history grows (issue 15).

Without them three checks walked everything the history had made so far, once per event that needed
them: the per-level FIFO check compared each delivered copy with every other copy of its level
(``order.fifo``), and a pull's floor and a read-to-end walked every expectation of the queue, seen or
not (``pulls.floor``, ``windows.missing_in``). On a history of 30,000 events that was most of the
growth of the cost per event (cProfile, docs/performance.md).

The indexes only ever prove that the exhaustive walk would find nothing; whenever one cannot, the
exhaustive walk runs, so verdicts (anomalies, their order, the counts of checks) are the same with and
without them. ``Checker(indexed=False)`` turns them off, and tests/test_checker_indexed.py compares
both ways on the reference's and every mutant's histories.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Container
from itertools import accumulate

from .expectation import Expectation

NEG = -(1 << 62)  # below any order, offset or event index


class LevelSeen:
    """The delivered copies seen so far of one (delay level, epoch), sorted by the store time they were
    seen with, and prefix maxima of what ``precedes`` compares: a copy seen with an earlier store time
    whose schedule entry may be behind the new copy's is found without visiting the others."""

    __slots__ = ("dirty", "items", "keys", "pmax", "unresolved", "vals")

    def __init__(self) -> None:
        self.keys: list[int] = []  # seen_at, ascending
        self.items: list[Expectation] = []
        # per item: (order if no writer, order, entry offset if known and a writer, writer or NEG)
        self.vals: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        self.pmax: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        self.dirty = 0  # pmax is right below this position
        self.unresolved: list[Expectation] = []  # written by a send whose entry offset was not known yet

    def _values(self, x: Expectation, offset: int | None) -> tuple[int, int, int, int]:
        if x.writer is None:
            return (x.order, x.order, NEG, NEG)
        return (NEG, x.order, NEG if offset is None else offset, x.writer)

    def _position(self, x: Expectation) -> int:
        i = bisect.bisect_left(self.keys, x.seen_at if x.seen_at is not None else NEG)
        while self.items[i] is not x:
            i += 1
        return i

    def add(self, x: Expectation, offset: int | None) -> None:
        assert x.seen_at is not None
        i = bisect.bisect_right(self.keys, x.seen_at)
        self.keys.insert(i, x.seen_at)
        self.items.insert(i, x)
        for col, v in zip(self.vals, self._values(x, offset), strict=True):
            col.insert(i, v)
        self.dirty = min(self.dirty, i)
        if x.writer is not None and offset is None:
            self.unresolved.append(x)

    def remove(self, x: Expectation) -> None:
        i = self._position(x)
        del self.keys[i], self.items[i]
        for col in self.vals:
            del col[i]
        self.dirty = min(self.dirty, i)
        self.unresolved = [o for o in self.unresolved if o is not x]

    def resolve(self, offset_of: Callable[[int], int | None], completed: Container[int]) -> None:
        """Entry offsets that became known since their copies were seen (their sends completed; a send
        that completed without one never gets one: ``send_result`` sets it at the completion)."""
        still = []
        for x in self.unresolved:
            assert x.writer is not None
            off = offset_of(x.writer)
            if off is None:
                if x.writer not in completed:
                    still.append(x)
                continue
            i = self._position(x)
            self.vals[2][i] = off
            self.dirty = min(self.dirty, i)
        self.unresolved = still

    def maxima_below(self, i: int) -> tuple[int, int, int, int]:
        """The maxima of the values of items ``[0, i)``."""
        if i == 0:
            return (NEG, NEG, NEG, NEG)
        if self.dirty < len(self.keys):
            d = self.dirty
            for col, p in zip(self.vals, self.pmax, strict=True):
                del p[d:]
                p.extend(accumulate(col[d:], max, initial=p[d - 1] if d else NEG))
                del p[d]  # the initial value
            self.dirty = len(self.keys)
        return (self.pmax[0][i - 1], self.pmax[1][i - 1], self.pmax[2][i - 1], self.pmax[3][i - 1])


class QueueSeen:
    """One queue's expectations: how many were seen, and the ones not seen yet, in the order they were
    made (pruned lazily: an expectation is seen once, and never unseen)."""

    __slots__ = ("seen", "unseen")

    def __init__(self) -> None:
        self.seen = 0
        self.unseen: list[Expectation] = []

    def drop(self, x: Expectation) -> None:
        self.unseen = [o for o in self.unseen if o is not x]

    def waiting(self) -> list[Expectation]:
        if any(x.seen_at is not None for x in self.unseen):
            self.unseen = [x for x in self.unseen if x.seen_at is None]
        return self.unseen

"""Transaction checks: the broker's CHECK_TRANSACTION_STATE requests against the model's.

The model's check service runs at ``phase + k × transactionCheckInterval`` (or at the rounds the
history shows, ``infer_check_rounds``). Each check the target sent is matched to one the model sends,
by UNIQ_KEY and TRANSACTION_CHECK_TIMES; a check the model does not send then is early, one the model
sends that never came (within epsilon) is missing. The message a check carries is compared with the
model's like a pulled record.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence

import attrs

from rmqspec.reference.constants import HALF_TOPIC, Prop
from rmqspec.reference.javanum import parse_int
from rmqspec.reference.observations import CheckRequest
from rmqspec.reference.records import Record
from rmqspec.reference.transaction import (
    FIRST_OFFSET_FLUSH_MS,
    OFFSET_FLUSH_INTERVAL_MS,
    OP_BATCH_INTERVAL_MS,
    checked_on_rereading,
    may_be_held,
    op_write_window_ms,
)

from ..contract import CheckEvent
from ..history import Event
from .records import RecordsMixin
from .verdict import Anomaly


class TransactionsMixin(RecordsMixin):
    def on_check(self, c: CheckEvent, e: Event) -> None:
        msg = c.message
        uniq = msg.properties.get(Prop.UNIQ_KEY, "")
        times = msg.properties.get(Prop.TRANSACTION_CHECK_TIMES)
        # The broker holds the half message, unresolved: its next checks are owed again.
        self.unsure_halves.discard(uniq)
        self.tx_maybe_discarded.pop(uniq, None)  # not discarded by a stop's runs either
        for n, (t, req) in enumerate(self.expected_checks):
            if (
                req.transaction_id == uniq
                and req.message.properties.get(Prop.TRANSACTION_CHECK_TIMES) == times
            ):
                if self.tx_stop is not None and self.stale_across_restart(t, req, c, e, uniq):
                    return  # (its expectations, this one with them, are dropped)
                self.count("checks")
                if e.time < t:
                    self.report(
                        "early-check",
                        "transaction/check-interval",
                        e.index,
                        f"check of {uniq} {t - e.time} ms early",
                        uniq=uniq,
                    )
                self.bind(c.commit_log_offset, req.commit_log_offset)
                self.half_table_target_to_model[c.tran_state_table_offset] = req.tran_state_table_offset
                del self.expected_checks[n]
                self.compare_check_message(msg, req.message, e)
                return
        if self.tx_stop is not None and self.resynced_after_restart(c, e, uniq, times):
            return
        # An END_TRANSACTION whose outcome is unknown may never have reached the broker, which then checks
        # the transaction as before: the model checks it too (rule: transaction/check-resolved).
        if (
            uniq in self.unsure_ends
            and (half := self.latest_half(uniq)) is not None
            and self.check_aside(c, e, half, times)
        ):
            return
        if (
            uniq in self.resolved
            and (
                self.run_slack_ms
                or (
                    self.model.semantics.batched_ops()
                    and op_write_window_ms(self.model.config) > OP_BATCH_INTERVAL_MS
                )
            )
            and self.checked_before_its_op(c, e, uniq, times)
        ):
            return
        if uniq in self.resolved:
            self.report(
                "check-after-resolution",
                "transaction/check-resolved",
                e.index,
                f"{uniq} checked after it was {self.resolved[uniq]}ed",
                uniq=uniq,
            )
        elif any(r.transaction_id == uniq for _t, r in self.expected_checks):
            self.report(
                "wrong-check-times",
                "transaction/check-times",
                e.index,
                f"check of {uniq} with TRANSACTION_CHECK_TIMES={times}",
                uniq=uniq,
            )
        elif (self.run_slack_ms and self.checked_in_a_longer_run(c, e, uniq, times)) or (
            self.state.tx_hidden_producers and self.checked_past_hidden_records(c, e, uniq, times)
        ):
            return
        else:
            self.report(
                "early-check",
                "transaction/check-timeout",
                e.index,
                f"check of {uniq} (TRANSACTION_CHECK_TIMES={times}) the model does not send now",
                uniq=uniq,
            )

    # -- across restarts ---------------------------------------------------------------------------------

    def note_restart_for_checks(self, invoked: int, done: int, orderly: bool) -> None:
        """What a restart may change in the checks that follow it. rule: transaction/check-restart

        The broker's written progress: in an orderly stop, what its runs had reached (up to a run under
        way, ``eps`` and the run slack before the stop); after a crash, what its last periodic write had
        (one write interval before the crash, if it had been up long enough to have written at all: the
        first write comes 10 s after the start), else what it started from. The half records the model's
        runs passed since then may be read again by the broker's first run. An orderly stop may also have
        made runs that no producer heard: as many as fit between the invoke and the completion, plus the
        run the check service makes when it is stopped (5.4.0+)."""
        slack = self.eps + self.run_slack_ms
        up = self.tx_up_since if self.tx_up_since is not None else invoked
        written_at: int | None
        if orderly:
            written_at = invoked - slack
        elif invoked - up >= FIRST_OFFSET_FLUSH_MS + OFFSET_FLUSH_INTERVAL_MS + slack:
            written_at = invoked - OFFSET_FLUSH_INTERVAL_MS - slack
        else:
            written_at = None
        if written_at is not None:
            self.tx_floor = max(self.tx_floor, self.half_offset_at(written_at, since=up))
        # what the model's runs passed up to the stop, and, in an orderly stop, the runs it made during it
        # (a 4.9.x run then may end after the shutdown wrote the offsets: its progress is not kept)
        top = self.half_offset_at(done if orderly else invoked, since=None)
        self.tx_aside_at_stop = self.state.tx_checked_aside
        self.tx_reread = (self.tx_floor, top)
        self.tx_reread_done = set()
        runs = 0
        if orderly:
            interval = self.model.config.transaction_check_interval_ms
            runs = (done - invoked) // interval + 1 + (1 if self.model.semantics.check_run_at_stop() else 0)
        self.tx_stop = (invoked, done, runs)
        if runs:
            self.note_maybe_discarded(invoked, done, runs)
        self.tx_resynced = set()
        self.tx_up_since = done
        if self.model.semantics.batched_ops():
            # 5.x writes ops on its op batch service's own 3 s ticks, 5.1.0-5.4.0 at the first tick at least
            # an interval after the queue's last write or the tick after that, 5.5.0 as soon as the queue is
            # due (transaction/op-batch): an op is written within op_write_window_ms of its END. A
            # transaction ended less than that before a crash may have its op written or lost; in an
            # orderly stop the service goes on until it is stopped (5.1.4+: then one last run writes only
            # entries already due; 5.1.0-5.1.3 never stop it), so the same holds. It may be checked again
            # or not (the model, which writes only what was due at the invoke, expects the check of the
            # rest; the broker may not make it).
            since = invoked - op_write_window_ms(self.model.config) - self.eps
            lost = {u for u, t in self.resolved_at.items() if since <= t <= invoked}
            self.unsure_ends |= lost
            for u in lost:  # the check of the record the end named (the latest then) may not come
                latest = self.latest_half(u)
                if latest is not None:
                    self.tx_optional.add((u, _count(latest) + 1))

    def note_maybe_discarded(self, invoked: int, done: int, runs: int) -> None:
        """The transactions the ``runs`` of an orderly stop from ``invoked`` may have raised to
        transactionCheckMax unheard, so that the broker discarded them (transaction/check-discard): only a
        half message the broker held when the stop began (stored before ``invoked``), unresolved, whose
        count then was at most ``runs`` below the max. rule: transaction/check-restart"""
        most = self.model.config.transaction_check_max
        store = self.state.store
        for uniq in self.half_uniqs:
            if uniq in self.resolved and uniq not in self.unsure_ends:
                continue
            at_stop = [
                r
                for r in (store.lookup(clo) for clo in store.uniq.get(uniq, ()))
                if r is not None and r.topic == HALF_TOPIC and r.store_timestamp < invoked
            ]
            if at_stop and _count(at_stop[-1]) + runs >= most:
                self.tx_maybe_discarded[uniq] = (invoked, runs)

    def half_offset_at(self, t: int, since: int | None) -> int:
        """The model's committed half offset at ``t``; with ``since``, from a run that ended after it
        (else ``tx_floor``)."""
        best: int | None = None
        for when, offset in reversed(self.tx_progress):
            if when <= t:
                if since is None or when > since:
                    best = offset
                break
        if best is None:
            return self.tx_floor if since is not None else 0
        return best

    def resynced_after_restart(self, c: CheckEvent, e: Event, uniq: str, times: str | None) -> bool:
        """A check after a restart whose count is not the next one of the model's latest record of ``uniq``:
        allowed, and followed (the model checks what the broker checked), when

        * it carries the next count of an earlier record the broker read again: one in the crash's
          window (a copy the model made of it unheard may be the broker's too: its checks are allowed,
          not owed), or one the model's runs checked while the broker stopped, unheard, in runs the broker
          did not make (those copies of the model's are then not the broker's: dropped with what the model
          made from them);
        * or it carries a count higher than the next one by at most the runs the stop may have made
          beyond the model's, each of which raised the count unheard.

        rule: transaction/check-restart"""
        assert self.tx_stop is not None
        invoked, done, runs = self.tx_stop
        n = parse_int(times) if times is not None else None
        # The first run after the start (an interval after it) reads again and meets the raised counts;
        # a later run sees nothing a restart explains.
        interval = self.model.config.transaction_check_interval_ms
        if n is None or not invoked <= e.time <= done + 2 * interval + self.eps + self.run_slack_ms:
            return False
        halves = self.halves_of(uniq)
        if not halves:
            return False
        sem = self.model.semantics
        for k in range(len(halves) - 1, -1, -1):
            r = halves[k]
            if _count(r) + 1 != n:
                continue
            later = halves[k + 1 :]
            # the crash's window: records the model's runs passed, or that it checked as the broker did
            # outside them (check_aside), since the broker's progress was last written
            lo, hi = self.tx_reread or (0, 0)
            q = r.queue_offset
            passed = q < hi or (q in self.tx_aside_at_stop)
            reread = self.tx_reread is not None and lo <= q and passed and q not in self.tx_reread_done
            # the model's copy of it (the next count) was written while the broker stopped
            unheard_copy = next(
                (
                    x
                    for x in later
                    if _count(x) == n
                    and (invoked <= x.store_timestamp <= done or x.commit_log_offset in self.tx_unheard)
                ),
                None,
            )
            if not (reread or unheard_copy is not None) or not checked_on_rereading(
                self.state, r, e.time, sem
            ):
                continue
            if reread:
                self.tx_reread_done.add(r.queue_offset)
            if unheard_copy is not None and reread:
                # read again and checked unheard before: the broker may hold that copy too (its run in
                # the stop wrote it, its progress was not kept), or not: its check is allowed, not owed
                self.tx_optional.add((uniq, n + 1))
            elif unheard_copy is not None:  # not read again: the broker never made that run
                self.drop_chain(uniq, unheard_copy)
            self.follow_check(c, e, r)
            return True
        latest = halves[-1]
        m = _count(latest)
        if n <= m and any(_count(x) + 1 == n for x in halves):
            self.report(
                "repeated-check",
                "transaction/check-restart",
                e.index,
                f"{uniq} checked again with TRANSACTION_CHECK_TIMES={n} after the restart at {invoked}: "
                "no run the broker made since it last wrote its progress passed a record of it with that count",
                uniq=uniq,
            )
            return True
        # Raised by the runs of the stop the model did not make: at most ``runs - made`` above the count the
        # model checks next (which is ``m`` itself when the model's run has already made that check and
        # awaits it: the broker's check stands for it).
        made = sum(1 for x in halves if invoked <= x.store_timestamp <= done)
        awaited = any(r.transaction_id == uniq for _t, r in self.expected_checks)
        top = m + (0 if awaited else 1) + runs - made
        if uniq in self.tx_resynced or n <= m + (0 if awaited else 1):
            return False
        if n > top:
            self.report(
                "wrong-check-times",
                "transaction/check-restart",
                e.index,
                f"check of {uniq} with TRANSACTION_CHECK_TIMES={n} after a stop of {done - invoked} ms: its runs "
                f"raise the count to {top} at most",
                uniq=uniq,
            )
            return True
        if not checked_on_rereading(self.state, latest, e.time, sem):
            return False
        self.tx_resynced.add(uniq)
        self.pass_over(uniq, [])
        half = latest
        for _ in range(n - 1 - m):  # the stop's runs the model did not make: copies, counts raised
            self.state, req = self.model.check_now(self.state, half, self.model_time or e.time)
            self.note_parent(req, half)
            copy = self.state.store.lookup(req.commit_log_offset)
            if copy is None:
                return False
            half = copy
        self.follow_check(c, e, half)
        return True

    def stale_across_restart(self, t: int, req: CheckRequest, c: CheckEvent, e: Event, uniq: str) -> bool:
        """A check the model expected before a restart, made by the broker only after it (it was down, or
        its run fell after the kill), when the model's runs since have gone on from the copy that check
        made: the broker's check is a fresh one of the record the model checked then; the model's copy may
        be the broker's too (made before the crash, its check unheard) or not, so the checks made from it
        are allowed, not owed. rule: transaction/check-restart"""
        assert self.tx_stop is not None
        invoked, _done, _runs = self.tx_stop
        if not t < invoked <= e.time:
            return False
        copy = self.state.store.lookup(req.commit_log_offset)
        if copy is None:
            return False
        k = _count(copy)
        halves = self.halves_of(uniq)
        after = [x for x in halves if x.store_timestamp >= copy.store_timestamp and _count(x) >= k]
        if not any(_count(x) > k for x in after):
            return False  # the model has not gone on from it: the check is simply late
        parent = next(
            (x for x in reversed(halves) if _count(x) == k - 1 and x.store_timestamp <= copy.store_timestamp),
            None,
        )
        if parent is None:
            return False
        # the model's copy may be the broker's too (made before the crash, its check unheard) or not: the
        # checks from it are allowed, not owed
        self.tx_optional.add((uniq, k + 1))
        self.follow_check(c, e, parent)
        return True

    def halves_of(self, uniq: str) -> list[Record]:
        store = self.state.store
        halves = [r for r in (store.lookup(clo) for clo in store.uniq.get(uniq, ())) if r is not None]
        return [r for r in halves if r.topic == HALF_TOPIC]

    def pass_over(self, uniq: str, copies: Sequence[Record]) -> None:
        """The model's copies of ``uniq`` the broker does not hold: its runs skip them, and the checks it
        expects of ``uniq`` are dropped (the check just seen replaces them)."""
        if copies:
            aside = self.state.tx_checked_aside | {x.queue_offset for x in copies}
            self.state = attrs.evolve(self.state, tx_checked_aside=aside)
        self.expected_checks = [(t, r) for t, r in self.expected_checks if r.transaction_id != uniq]

    def drop_chain(self, uniq: str, copy: Record) -> None:
        """The model's ``copy`` of ``uniq`` and what its runs made from it since (its descendants) are not
        the broker's: its runs skip them, and the checks they made are not owed."""
        offsets = {copy.commit_log_offset}
        grew = True
        while grew:  # the copy's descendants: copies made by checking it, and so on
            more = {c for c, parent in self.tx_parent.items() if parent in offsets}
            grew = not more <= offsets
            offsets |= more
        chain = [x for x in self.halves_of(uniq) if x.commit_log_offset in offsets]
        aside = self.state.tx_checked_aside | {x.queue_offset for x in chain}
        self.state = attrs.evolve(self.state, tx_checked_aside=aside)
        self.tx_dropped |= offsets
        self.expected_checks = [(t, r) for t, r in self.expected_checks if r.commit_log_offset not in offsets]

    def note_parent(self, req: CheckRequest, half: Record | None = None) -> None:
        """Which record a check of the model's checked: the copy it made is that record's child. The
        request carries the record as read (its store time), with the copy's offsets and the next count."""
        if half is None:
            k = _count(req.message) - 1
            half = next(
                (
                    x
                    for x in reversed(self.halves_of(req.transaction_id or ""))
                    if x.store_timestamp == req.message.store_timestamp and _count(x) == k
                ),
                None,
            )
        if half is not None:
            self.tx_parent[req.commit_log_offset] = half.commit_log_offset

    def follow_check(self, c: CheckEvent, e: Event, half: Record) -> None:
        """The model checks ``half`` now, as the broker did."""
        self.state, req = self.model.check_now(self.state, half, self.model_time or e.time)
        self.note_parent(req, half)
        self.count("checks")
        self.bind(c.commit_log_offset, req.commit_log_offset)
        self.half_table_target_to_model[c.tran_state_table_offset] = req.tran_state_table_offset
        self.compare_check_message(c.message, req.message, e)

    def unheard_or_discarded(self, when: int, req: CheckRequest) -> str | None:
        """A check the model expects that a restart may have taken away: due while the broker stopped or
        was down (its remoting server closes first), or one of a message whose count the stop's runs may
        have raised to the discard: the allowance that excuses it, None if none does.
        rule: transaction/check-restart"""
        slack = self.eps + self.run_slack_ms
        spans = list(self.restarts)
        if self.restarting is not None:  # one in flight: down from its invoke on
            spans.append((self.restarting, sys.maxsize))
        if any(start - slack <= when <= end for start, end in spans):
            return "restart-unheard-check"
        stop = self.tx_maybe_discarded.get(req.transaction_id or "")
        if stop is None:
            return None
        invoked, runs = stop
        k = parse_int(req.message.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0")) or 0
        if when >= invoked and k - 1 + runs >= self.model.config.transaction_check_max:
            return "restart-stop-discard"
        return None

    def checked_before_its_op(self, c: CheckEvent, e: Event, uniq: str, times: str | None) -> bool:
        """A 5.1.0-5.4.0 run may check a message already ended before its op is written: the model writes
        the op at the earliest tick the op batch service can, the broker may write it one tick later
        (transaction/op-batch: the tick one interval after the queue's last write can find it a few ms
        short). On a shared 5.x broker, too, a run spins on other clients' op messages and may reach the
        record before it has read the op that resolves it (the op queue is read 32 at a time). Allowed when
        the check
        carries the next count of the model's latest half record of ``uniq``; the model then checks it
        too, and follows the broker from there (the copy is not resolved by the original's op).
        The op was written at most ``op_write_window_ms`` after the END_TRANSACTION (5.1.0-5.4.0: two
        intervals, the first tick at least an interval after the queue's last write or the next one; 5.5.0:
        one interval; transaction/op-batch); a run that began after that, reading ops from before it, is
        judged as the model's runs are.
        rule: transaction/check-resolved"""
        written_by = self.resolved_at.get(uniq, e.time) + op_write_window_ms(self.model.config)
        if written_by < e.time - self.run_slack_ms - self.eps:
            return False
        half = self.latest_half(uniq)
        return half is not None and self.check_aside(c, e, half, times)

    def checked_in_a_longer_run(self, c: CheckEvent, e: Event, uniq: str, times: str | None) -> bool:
        """On a shared 5.x broker a run spins on other clients' op messages and checks records as they
        become due while it lasts, later than the moment the model gives the run: a check of a message
        due by then (older than its immunity, or the timeout) with the next count is allowed, and the
        model checks it too. rule: transaction/check-timeout"""
        half = self.latest_half(uniq)
        if half is None:
            return False
        timeout = self.model.config.transaction_timeout_ms
        raw = half.properties.get(Prop.CHECK_IMMUNITY_TIME_IN_SECONDS)
        immunity = self.model.semantics.check_immunity_ms(raw, timeout) if raw is not None else timeout
        if e.time - half.born_timestamp <= immunity:
            return False
        return self.check_aside(c, e, half, times)

    def checked_past_hidden_records(self, c: CheckEvent, e: Event, uniq: str, times: str | None) -> bool:
        """On a shared broker the model's run stopped before a due record because another producer's
        record, stored just before it and born after it, MAY have been there, still younger than the
        timeout (transaction.may_be_held). The broker's run passed: no such record was there. Allowed when
        the record is due, a run that began within epsilon before the request could have been held so,
        and the check carries the next count; the model then checks it too. rule: transaction/check-timeout
        """
        half = self.latest_half(uniq)
        if half is None or half.queue_offset in self.state.tx_checked_aside:
            return False
        timeout = self.model.config.transaction_timeout_ms
        raw = half.properties.get(Prop.CHECK_IMMUNITY_TIME_IN_SECONDS)
        immunity = self.model.semantics.check_immunity_ms(raw, timeout) if raw is not None else timeout
        if not self.model.semantics.check_due(e.time - half.born_timestamp, immunity):
            return False
        if not may_be_held(self.state, half.queue_offset, half, e.time - self.eps, self.model.semantics):
            return False
        return self.check_aside(c, e, half, times)

    def latest_half(self, uniq: str) -> Record | None:
        store = self.state.store
        halves = [r for r in (store.lookup(clo) for clo in store.uniq.get(uniq, ())) if r is not None]
        halves = [r for r in halves if r.topic == HALF_TOPIC]
        return halves[-1] if halves else None

    def check_aside(self, c: CheckEvent, e: Event, half: Record, times: str | None) -> bool:
        """The model checks ``half`` now, as the broker did, when the check carries its next count."""
        prev = half.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0")
        if times is None or not times.isdigit() or not prev.isdigit() or int(prev) + 1 != int(times):
            return False
        self.follow_check(c, e, half)
        return True

    def compare_check_message(self, got: Record, want: Record, e: Event) -> None:
        """The message a check carries: the half message under its real topic and queue, body and
        properties as stored (rule: wire/check-request)."""
        diffs = [
            f"{what} {g!r}, expected {w!r}"
            for what, g, w in (
                ("topic", got.topic, want.topic),
                ("queue", got.queue_id, want.queue_id),
                ("body", got.body, want.body),
            )
            if g != w
        ]
        diffs += [
            f"{k}={g!r}, expected {w!r}" for k, w, g in self.property_diffs(want.properties, got.properties)
        ]
        if diffs:
            self.report(
                "wrong-check-message",
                "wire/check-request",
                e.index,
                f"check of {want.uniq_key}: {'; '.join(diffs)}",
                uniq=want.uniq_key,
            )

    def overdue_checks(self, t: int) -> None:
        """Report the checks due by ``t`` that never came. An absence is evidence only while the broker is
        known to answer: a check is judged missing once something the broker did after its window (an
        answer, a check request) shows that it was still working, never from silence alone."""
        keep = []
        t = min(t, self.last_answered)
        for when, req in list(self.expected_checks):
            if req.commit_log_offset in self.tx_dropped:
                continue  # made from a copy found not to be the broker's (drop_chain)
            if when + self.eps + self.run_slack_ms < t:
                self.count("checks")
                count = parse_int(req.message.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0")) or 0
                uniq = req.transaction_id or ""
                if uniq in self.unsure_halves or (uniq, count) in self.tx_optional:
                    # The half message may never have been stored, or its op may have been written: the
                    # check may not come, and the copy it made is not the broker's (the model's runs skip it).
                    copy = self.state.store.lookup(req.commit_log_offset)
                    if copy is not None:
                        self.drop_chain(uniq, copy)
                    continue
                if (self.restarts or self.restarting is not None) and (
                    allowance := self.unheard_or_discarded(when, req)
                ):
                    self.allow(allowance)
                    self.tx_unheard.add(req.commit_log_offset)  # the model's copy the broker may not have
                    continue
                self.report(
                    "missing-check",
                    "transaction/check-timeout",
                    -1,
                    f"no check of {req.transaction_id} (TRANSACTION_CHECK_TIMES="
                    f"{req.message.properties.get(Prop.TRANSACTION_CHECK_TIMES)}) by {when + self.eps + self.run_slack_ms}",
                    uniq=req.transaction_id,
                )
            else:
                keep.append((when, req))
        self.expected_checks = keep


# --- when the check service ran, from the history -------------------------------------------------------


def _count(r: Record) -> int:
    """A half record's TRANSACTION_CHECK_TIMES (0 before its first check)."""
    raw = r.properties.get(Prop.TRANSACTION_CHECK_TIMES)
    n = 0 if raw is None else parse_int(raw)
    return -1 if n is None else n


def infer_check_phase(events: Sequence[Event], interval_ms: int) -> int:
    """The check service's phase: the earliest arrival within a round, over every check in the history.

    A check request arrives a little after its round starts (the time to put the copy back and send);
    the round that shows the least delay is the best estimate of the phase. Arrivals are compared on a
    circle of ``interval_ms``, so a round straddling a multiple of the interval is not split.
    """
    times = [e.time for e in events if e.f == "check"]
    if not times:
        return 0
    base = times[0] % interval_ms
    earliest = min(((t - base + interval_ms // 2) % interval_ms) - interval_ms // 2 for t in times)
    return (base + earliest) % interval_ms


def _check_props(e: Event) -> dict[str, object]:
    msg = e.value.get("message") if isinstance(e.value, dict) else None
    p = msg.get("properties") if isinstance(msg, dict) else None
    return p if isinstance(p, dict) else {}


def infer_check_rounds(
    events: Sequence[Event], interval_ms: int, timeout_ms: int = 0, latency_ms: int = 0
) -> tuple[int, ...]:
    """When each check round ran, from the check requests the history shows.

    A round's requests arrive together, the first one ``A`` at most ``latency_ms`` after the round began
    (a real broker's rounds also drift: each waits the interval after the last one ended). The round
    began no later than ``A``, no earlier than ``A - latency_ms``, and late enough that every message it
    checked for the first time was old enough (sent at least ``timeout_ms`` before): the earliest time
    consistent with all of that (the model checks a message older than the timeout, strictly) is the
    round's time in the model.
    """
    sent: dict[str, int] = {}
    for e in events:
        if e.type == "invoke" and e.f == "send_half" and isinstance(e.value, dict):
            props = e.value.get("properties") or {}
            if isinstance(props, dict) and "CHECK_IMMUNITY_TIME_IN_SECONDS" not in props:
                sent.setdefault(str(props.get("UNIQ_KEY", "")), e.time)
    rounds: list[int] = []
    checked: set[str] = set()
    for group in _check_rounds(events, interval_ms):
        first_at = group[0].time
        at = first_at - latency_ms
        for e in group:
            uniq = str(_check_props(e).get("UNIQ_KEY"))
            # A message's first check (its count is 1, or 0 after a count Java cannot parse)
            if uniq in sent and uniq not in checked:
                at = min(first_at, max(at, sent[uniq] + timeout_ms + 1))
            checked.add(uniq)
        rounds.append(at)
    return tuple(rounds)


def _check_rounds(events: Sequence[Event], interval_ms: int) -> list[list[Event]]:
    """The check requests grouped by round, in arrival order: a round's requests arrive together, and a
    request more than half an interval after its round's first one opens the next round."""
    groups: list[list[Event]] = []
    for e in sorted((e for e in events if e.f == "check"), key=lambda e: (e.time, e.index)):
        if not groups or e.time - groups[-1][0].time > interval_ms // 2:
            groups.append([])
        groups[-1].append(e)
    return groups


def check_round_spacing(events: Sequence[Event], interval_ms: int, latency_ms: int) -> list[Anomaly]:
    """Check rounds at least an interval apart (rule: transaction/check-interval).

    Each round waits the interval after the previous one ended, so the first requests of two rounds
    arrive at least ``interval_ms - latency_ms`` apart, ``latency_ms`` bounding how late a round's first
    request may arrive after the round began.
    """
    firsts = [group[0] for group in _check_rounds(events, interval_ms)]
    return [
        Anomaly(
            "early-check",
            "transaction/check-interval",
            b.index,
            f"a check round {b.time - a.time} ms after the previous one; the interval is {interval_ms} ms",
        )
        for a, b in itertools.pairwise(firsts)
        if b.time - a.time < interval_ms - latency_ms
    ]

"""Transaction checks: the broker's CHECK_TRANSACTION_STATE requests against the model's.

The model's check service runs at ``phase + k × transactionCheckInterval`` (or at the rounds the
history shows, ``infer_check_rounds``). Each check the target sent is matched to one the model sends,
by UNIQ_KEY and TRANSACTION_CHECK_TIMES; a check the model does not send then is early, one the model
sends that never came (within epsilon) is missing. The message a check carries is compared with the
model's like a pulled record.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from rmqspec.reference.constants import HALF_TOPIC, Prop
from rmqspec.reference.records import Record
from rmqspec.reference.transaction import OP_BATCH_INTERVAL_MS, may_be_held

from ..contract import CheckEvent
from ..history import Event
from .records import RecordsMixin
from .verdict import Anomaly


class TransactionsMixin(RecordsMixin):
    def on_check(self, c: CheckEvent, e: Event) -> None:
        msg = c.message
        uniq = msg.properties.get(Prop.UNIQ_KEY, "")
        times = msg.properties.get(Prop.TRANSACTION_CHECK_TIMES)
        for n, (t, req) in enumerate(self.expected_checks):
            if (
                req.transaction_id == uniq
                and req.message.properties.get(Prop.TRANSACTION_CHECK_TIMES) == times
            ):
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
        if uniq in self.resolved and self.run_slack_ms and self.checked_before_its_op(c, e, uniq, times):
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

    def checked_before_its_op(self, c: CheckEvent, e: Event, uniq: str, times: str | None) -> bool:
        """On a shared 5.x broker a run may check a message already ended: it spins on other clients' op
        messages and may reach the record before it has read the op that resolves it (the op queue is
        read 32 at a time, and 5.x writes ops in batches: transaction/op-batch). Allowed when the check
        carries the next count of the model's latest half record of ``uniq``; the model then checks it
        too, and follows the broker from there (the copy is not resolved by the original's op).
        The op was written at most one op-batch interval after the END_TRANSACTION; a run that began
        after that, reading ops from before it, is judged as the model's runs are.
        rule: transaction/check-resolved"""
        written_by = self.resolved_at.get(uniq, e.time) + OP_BATCH_INTERVAL_MS
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
        self.state, req = self.model.check_now(self.state, half, self.model_time or e.time)
        self.count("checks")
        self.bind(c.commit_log_offset, req.commit_log_offset)
        self.half_table_target_to_model[c.tran_state_table_offset] = req.tran_state_table_offset
        self.compare_check_message(c.message, req.message, e)
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
        for when, req in self.expected_checks:
            if when + self.eps + self.run_slack_ms < t:
                self.count("checks")
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

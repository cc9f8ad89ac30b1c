"""The history checker: replay a history against the reference model; a verdict with named anomalies.

The model replays every client operation at its invoke time. Broker-internal work (schedule delivery,
transaction checks) runs in the model at the earliest time the spec allows, and each thing the model
says must become visible turns into an *expectation*: a (UNIQ_KEY, topic) with a window
``[earliest, latest]`` and the record the model would store. Pulled records are matched against
expectations; checks against the model's check requests; every answer against the model's. Timing is
two-sided: a record stored before its window opens is early, one stored after it closes (by more than
``epsilon_ms``) is late, and one never seen although the queue was read past its window is lost.
Inconsistency is a value: every anomaly names its rule and the event that shows it, and anomalies that
follow from an earlier divergence are linked to it as consequences (docs/checker.md).

The package is split by job: ``verdict`` (anomalies, root causes, the verdict), ``windows`` (timing
windows and the model's services), ``records`` (matching and comparing records), ``order`` (per-level
FIFO), ``transactions`` (check requests and check rounds), ``pulls`` (reads against the model's
queues), ``operations`` (client operations, following the target where it diverges), ``core`` (reading
a history).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from rmqspec.reference.config import BrokerConfig

from ..history import Event
from .allowances import ALLOWANCES, Allowance, allowance_table
from .base import DEFAULT_EPSILON_MS
from .core import Checker
from .expectation import Expectation
from .records import PROP_RULES, UNCOMPARED_PROPS, prop_diffs
from .transactions import check_round_spacing, infer_check_phase, infer_check_rounds
from .verdict import ANOMALIES, CHECK_ANOMALIES, CHECK_KINDS, Anomaly, RootCause, Verdict, root_causes

__all__ = [
    "ALLOWANCES",
    "ANOMALIES",
    "CHECK_ANOMALIES",
    "CHECK_KINDS",
    "DEFAULT_EPSILON_MS",
    "PROP_RULES",
    "UNCOMPARED_PROPS",
    "Allowance",
    "Anomaly",
    "Checker",
    "Expectation",
    "RootCause",
    "Verdict",
    "allowance_table",
    "check_history",
    "check_round_spacing",
    "infer_check_phase",
    "infer_check_rounds",
    "prop_diffs",
    "queue_hints",
    "root_causes",
]


def queue_hints(events: Sequence[Event]) -> dict[int, int]:
    """For each send (or batch) with a queue id below 0, the queue its response names: the broker's
    random pick (rule: put/queue-id-range). The model makes the same pick, and judges its range."""
    invoked: dict[int, Event] = {}
    hints: dict[int, int] = {}
    for e in events:
        if e.f not in ("send", "send_half", "send_batch") or not isinstance(e.value, dict):
            continue
        if e.type == "invoke":
            invoked[e.process] = e
            continue
        inv = invoked.pop(e.process, None)
        fields = e.value.get("fields")
        queue_id = fields.get("queue_id") if isinstance(fields, dict) else None
        queue = inv.value.get("queue", 0) if inv is not None else 0
        if (
            isinstance(queue, int)
            and queue < 0
            and isinstance(queue_id, int)
            and not isinstance(queue_id, bool)
        ):
            assert inv is not None
            hints[inv.index] = queue_id
    return hints


def check_history(
    events: Sequence[Event],
    config: BrokerConfig,
    *,
    epsilon_ms: int = DEFAULT_EPSILON_MS,
    check_phase_ms: int | None = None,
    expected_total: int | None = None,
    shared: bool = False,
    indexed: bool = True,
) -> Verdict:
    """Check a complete history. ``check_phase_ms`` None: the check rounds are inferred from the history.
    ``indexed`` False: without the indexes that keep the cost per event flat (the same verdict, slower;
    for the differential tests)."""
    rounds: tuple[int, ...] = ()
    spacing: list[Anomaly] = []
    phase_known = check_phase_ms is not None or any(e.f == "check" for e in events)
    if check_phase_ms is None:
        check_phase_ms = infer_check_phase(events, config.transaction_check_interval_ms)
        # Half the epsilon for the arrival latency, so that a check expected at a round's time still has
        # the other half to arrive: checks of one round arrive over some milliseconds. A known round reads
        # the op queue to its end and checks at once (5.x: its sleeps are behind it).
        latency = epsilon_ms // 2
        rounds = infer_check_rounds(
            events, config.transaction_check_interval_ms, config.transaction_timeout_ms, latency
        )
        # Two rounds' first requests: each arrives up to epsilon after its round began (a real 4.9.7's
        # first round after a restart reached the client 776 ms after the run that sent it, which its log
        # shows 5020 ms before the next), so arrivals closer than the interval by more than that are early.
        spacing = check_round_spacing(events, config.transaction_check_interval_ms, epsilon_ms)
    hints = queue_hints(events)

    def judge(rounds: tuple[int, ...]) -> Verdict:
        checker = Checker(
            config,
            epsilon_ms=epsilon_ms,
            check_phase_ms=check_phase_ms,
            shared=shared,
            check_rounds=rounds,
            queue_hints=hints,
            check_phase_known=phase_known,
            indexed=indexed,
        )
        for a in spacing:
            checker.report(a.name, a.rule, a.event, a.message)
        for ev in sorted(events, key=lambda x: (x.time, x.index)):
            checker.feed(ev)
        return checker.finish()

    verdict = judge(rounds)
    if verdict.status == "fail" and rounds:
        # A round's time is only known to lie between its earliest possible start and its first request's
        # arrival; which side of a send it fell on decides the half queue's order (a copy put back ahead
        # of a younger message, or behind it). The earliest reading failed: the history passes if the
        # reading with every round at its arrival does (the spec allows any phase, and no latency).
        latest = infer_check_rounds(
            events, config.transaction_check_interval_ms, config.transaction_timeout_ms
        )
        if latest != rounds and (other := judge(latest)).status != "fail":
            verdict = other

    if expected_total is not None and verdict.total != expected_total and verdict.status == "pass":
        return attrs.evolve(
            verdict, status="unknown", reason=f"history has {verdict.total} events, {expected_total} expected"
        )
    return verdict

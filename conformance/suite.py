"""Running the whole suite on a target, and its report: the library behind ``rmqspec conform``.

Two shapes of target:

* **logical** (the reference, a mutant, any in-process model): each scenario gets a fresh target made
  for its settings; then the Hypothesis state machine, with the history checker after every step;
* **wall-clock** (a broker reached over TCP: ``remoting://``, ``served``, ``apache:VERSION``): a
  :class:`WallTarget` opens :class:`Deployment` s, brokers with given settings. The scenarios that fit
  the main broker run on it concurrently, each in its own namespace; a scenario that needs other
  settings runs on a broker opened with them (when the target can start one: ``served``, ``apache:``),
  or is skipped with what to change; a scenario that restarts the broker runs alone on a broker of its
  own, and one marked ``alone`` runs after the others on its broker, one at a time. Then the concurrent
  workload, judged as one history at the end (with ``chaos``: broker restarts
  during it).

Nothing here imports the command line or the adapters: targets are passed in.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol
from xml.etree import ElementTree as ET

import attrs

from rmqspec.reference.config import BrokerConfig, conf_keys
from rmqspec.reference.constants import Code

from .checker import CHECK_ANOMALIES
from .contract import Feature, Target, TargetError
from .history import Event, save
from .scenario_run import ScenarioResult, StepFailure, dry_run, run_scenario
from .scenarios import Scenario
from .wireprobe import Diagnosis, ProbeResult

TargetFactory = Callable[[BrokerConfig], Target]

# Behaviours the spec allows but users should know about: reported, never failed.
HAZARDS = {
    "transaction/not-idempotent": "a second END_TRANSACTION (or a commit after a rollback) is applied again "
    "while the half record exists: duplicate delivery is possible (4.9.x; apache/rocketmq #1517, #4436)",
}

# Exit codes of ``rmqspec conform`` (docs/guides/test-your-broker.md).
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3


class CannotDeploy(Exception):
    """A target that cannot have a broker with the settings asked for; the message says why and what to do."""


class Deployment(Protocol):
    """One broker on the wall clock, with fixed settings."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def can_restart(self) -> bool: ...

    def target(self) -> Target:
        """A fresh client of this broker (its own namespace, connections and producer groups)."""
        ...

    def restart_broker(self, graceful: bool) -> bool | None:
        """Stop the broker (SIGTERM when ``graceful``, else SIGKILL) and start it again on the same store;
        returns once it answers: whether the broker's own shutdown ran (a SIGTERM it did not honour in
        time ends in a SIGKILL), None when not known. Raises TargetError when it cannot be restarted."""
        ...

    def close(self) -> None: ...


class WallTarget(Protocol):
    """A wall-clock target: the broker(s) the suite talks to over the wire."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> BrokerConfig:
        """The main broker's settings (the profile)."""
        ...

    @property
    def epsilon_ms(self) -> int: ...

    @property
    def features(self) -> frozenset[Feature]: ...

    def open(self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False) -> Deployment:
        """A broker with ``config``. ``exclusive``: one nobody else uses (a scenario that restarts it).
        ``skewable``: one whose clock its target can step (``skew_clock``; feature clock-skew).
        Raises CannotDeploy when this target cannot have those settings, TargetError when the broker
        could not be started or reached."""
        ...


@attrs.frozen
class WorkloadSummary:
    operations: int
    verdict: str  # pass / fail / unknown
    anomalies: tuple[dict[str, Any], ...] = ()  # the verdict's root causes, each with its consequences
    reason: str = ""
    summary: str = ""  # the verdict's paragraph for a broker's author
    history: str | None = None  # where its history was saved
    restarts: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicates_allowed: int = 0
    seconds: float = 0.0
    # Operations whose outcome is unknown (no answer, a lost connection), by kind.
    unknown_operations: dict[str, int] = attrs.field(factory=dict)
    plots: tuple[str, ...] = ()  # PNG files drawn from its history (conformance/plots.py)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


# The operations (a scenario step's, a history event's) that each request code of the wire serves: what a
# protocol failure of that request makes fail.
REQUEST_OPERATIONS: dict[int, frozenset[str]] = {
    10: frozenset({"send", "send_half"}),
    310: frozenset({"send", "send_half"}),
    320: frozenset({"send_batch"}),
    11: frozenset({"pull"}),
    12: frozenset({"query"}),
    30: frozenset({"max_offset"}),
    33: frozenset({"view"}),
    34: frozenset({"heartbeat", "offline"}),
    36: frozenset({"send_back"}),
    37: frozenset({"end_tx"}),
    39: frozenset({"checks", "check"}),
}


# The capability each request code serves: a protocol failure of a request the target declares it lacks is
# no cause (its scenarios are skipped, not failed).
REQUEST_FEATURES: dict[int, Feature] = {
    320: Feature.BATCH,
    12: Feature.QUERY,
    33: Feature.VIEW,
    34: Feature.HEARTBEAT,
    36: Feature.SENDBACK,
    37: Feature.TRANSACTION,
    39: Feature.TRANSACTION_CHECK,
}


def diagnosis_covers(d: Diagnosis, operation: str, rule: str) -> bool:
    """Whether a failure of ``operation`` (naming ``rule``) follows from the protocol failure ``d``: it
    concerns every request, or the request that operation makes, or it names the same rule."""
    if rule == d.rule or d.every_request:
        return True
    return any(operation in REQUEST_OPERATIONS.get(code, ()) for code in d.codes)


@attrs.frozen
class Showing:
    """Where a run-level root cause showed: the first failure of one scenario (or of the workload, or a
    finding of the wire probe)."""

    source: str  # a scenario id, "workload" or "wire probe"
    rule: str
    operation: str  # the step's operation, the history event's kind, or "probe"
    where: str  # "step 3 (pull)", "event 12", "probe"
    message: str
    frame: str | None = None
    time: int | None = None  # epoch ms (None: unknown, ordered last)
    consequences: int = 0  # the later failures of the same source
    symptom: str | None = None  # the general rule the failure is an instance of (StepFailure.symptom)
    # The rules the failure may be a failure of: the one it names, else the source's rules (a scenario
    # about several rules does not say which of its steps checks which), the most likely first.
    candidates: tuple[str, ...] = ()
    blocked: int = 0  # the source's steps that never ran because it stopped at this failure
    order: int = 0  # the source's place in the run (the catalogue's order): first occurrence on a tie
    named: bool = True  # the failure names its rule itself (the checker's, the wire's, a shared symptom)
    event: int | None = None  # the index of the source's history event where it showed (None: unknown)

    @property
    def signature(self) -> str:
        """What went wrong, without what differs from one scenario to the next (values, numbers, names
        of messages, remarks): the same wrong answer to the same kind of step has the same signature,
        whatever the scenario is about. A failure that names its rule keeps it: the history checker's
        anomalies are their rule (the checker already names the rule an answer breaks and counts what
        follows under it; the kinds it showed as are listed with the cause, ``kinds``), a symptom shared
        by several rules' scenarios is that symptom's rule on that kind of step, a wire rule's failure
        keeps its message."""
        if self.checker:
            return f"{self.rule}|checker"
        if self.named and self.symptom is not None and self.rule == self.symptom:
            return f"{self.rule}|{self.operation}"
        return f"{self.rule if self.named else ''}|{self.operation}|{symptom_text(self.message)}"

    @property
    def checker(self) -> bool:
        """An anomaly of the history checker (a scenario's history, or the workload's)."""
        return self.named and (self.where.startswith("history event") or self.source == "workload")

    @property
    def kind(self) -> str:
        """How it showed: the checker's anomaly name, else the symptom without particulars."""
        return self.message.split(":", 1)[0] if self.checker else symptom_text(self.message)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self) | {"signature": self.signature}


def symptom_text(message: str) -> str:
    """A failure's message with what is particular to one scenario taken out: remarks in parentheses,
    quoted values, lists of message names and numbers (``None`` stays: missing is not wrong)."""
    text = re.sub(r"\([^()]*\)", "", message)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\[[^\]]*\]", "[…]", text)
    text = re.sub(r"\b[0-9A-Fa-f]{16,}\b", "ID", text)  # message ids, unique keys
    text = re.sub(r"[+-]?\b\d+\b", "N", text)
    return re.sub(r"\s+", " ", text).strip()


@attrs.frozen
class RunRootCause:
    """One root cause of a run: one wrong answer (a symptom) and the rule it breaks, where it showed
    first, every source whose first failure it is, and what it blocks: the sources whose failure (or
    unknown outcome) follows from it, and their steps and failures after it."""

    rule: str
    first: Showing
    showings: tuple[Showing, ...]  # the sources whose first failure is this cause, in order
    followers: tuple[str, ...] = ()  # sources whose failure (or unknown outcome) follows from it
    protocol: bool = False  # named by the wire probe: a failure of the protocol itself

    @property
    def consequences(self) -> int:
        return sum(x.consequences for x in self.showings) + len(self.followers)

    @property
    def reach(self) -> tuple[int, int]:
        """What it blocks: the scenarios (or workload) that could not be judged past it, and their
        operations (steps never run, failures after it)."""
        sources = {x.source for x in self.showings if x.source != "wire probe"} | set(self.followers)
        return len(sources), sum(x.blocked + x.consequences for x in self.showings)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The distinct ways it showed (the history checker's anomaly kinds of one rule), first first."""
        return tuple(dict.fromkeys(x.kind for x in self.showings))

    @property
    def rules(self) -> tuple[str, ...]:
        """The rules its sources' first failures were named by before grouping (the cause's first)."""
        return tuple(dict.fromkeys((self.rule, *(x.rule for x in self.showings))))

    def line(self) -> str:
        f = self.first
        scenarios, _ = self.reach
        many = f" ({len(self.showings)} sources first fail here)" if len(self.showings) > 1 else ""
        follow = f"; {self.consequences} consequences" if self.consequences else ""
        where = "wire probe" if self.protocol else f"{f.source}, {f.where}"
        blocks = f"; blocks {scenarios} scenario{'s' if scenarios != 1 else ''}" if self.protocol else ""
        also = f"; also shows as {', '.join(self.kinds[1:4])}" if len(self.kinds) > 1 else ""
        return f"{self.rule}: {f.message} [{where}]{many}{follow}{blocks}{also}"

    def to_json(self) -> dict[str, Any]:
        scenarios, operations = self.reach
        return {
            "rule": self.rule,
            "protocol": self.protocol,
            "first": self.first.to_json(),
            "occurrences": len(self.showings),
            "consequence_count": self.consequences,
            "blocks": {"scenarios": scenarios, "operations": operations},
            "rules_shown": list(self.rules),
            "kinds": list(self.kinds),
            "sources": [x.source for x in self.showings],
            "followers": list(self.followers),
        }


def _root_key(f: StepFailure) -> tuple[int, int]:
    """Order of a scenario's failures by where they showed: the history event; a step's failure before
    any event first, a history anomaly of the history as a whole last; on one event, the history
    checker's anomaly (it names the rule the answer breaks) before the step's expectation."""
    if f.event is None:
        return (-1 if f.step else 1 << 62, 0)
    return (f.event, 0 if f.step == 0 else 1)


def scenario_showing(r: ScenarioResult, order: int = 0) -> Showing | None:
    """The first failure of a failed scenario, as a run-level showing; None for other outcomes."""
    if r.outcome != "fail" or not r.failures:
        return None
    root = min(r.failures, key=_root_key)
    event = r.history[root.event] if root.event is not None and 0 <= root.event < len(r.history) else None
    operation = event.f if root.step == 0 and event is not None else root.operation
    if root.step == 0 and root.message.split(" ", 1)[0] in CHECK_ANOMALIES:
        operation = "check"  # about a check request, whatever event it was reported at
    where = f"step {root.step} ({root.operation})" if root.step else f"history event {root.event}"
    message = root.message
    if root.step == 0:  # a history anomaly: "NAME at event N (...): message": its name is its symptom
        message = re.sub(r" at (event \d+ \(.*?\)|history): ", ": ", message, count=1)
    candidates = (root.rule,) if root.rule else (r.scenario.rules or (r.scenario.id,))
    return Showing(
        r.scenario.id,
        candidates[0],
        operation,
        where,
        message,
        root.frame,
        event.time if event is not None else (r.history[0].time if r.history else None),
        len(r.failures) - 1,
        root.symptom,
        candidates,
        len(r.scenario.steps) - r.stopped_at if r.stopped_at is not None else 0,
        order,
        root.rule is not None,
        root.event,
    )


def shared_symptoms(showings: Sequence[Showing]) -> list[Showing]:
    """The showings with each symptom that the first failures of several rules share named by the
    symptom's rule: a broker that sends no check requests fails the first checks step of scenarios about
    immunity, intervals, counts and resolution alike, and that is one root cause (transaction/
    check-timeout), not one per rule. A symptom that only one rule's scenarios show keeps that rule: the
    more precise diagnosis."""
    rules: dict[str, set[str]] = {}
    for x in showings:
        if x.symptom is not None:
            rules.setdefault(x.symptom, set()).add(x.rule)
    named = {x.rule for x in showings}
    shared = {s for s, rs in rules.items() if len(rs | ({s} & named)) > 1}
    return [
        attrs.evolve(x, rule=x.symptom, candidates=(x.symptom,), named=True)
        if x.symptom in shared and x.symptom
        else x
        for x in showings
    ]


def group_causes(showings: Sequence[Showing], failing: Mapping[str, float]) -> list[RunRootCause]:
    """The showings grouped by causality: those with one signature (the same wrong answer to the same
    kind of step) are one cause, whatever rules their scenarios are about; distinct signatures are
    distinct causes, under one rule too. Each cause is named by the rule that best explains it: the rule
    its sources are about (a scenario's own rule in full, the others it names by half), weighed by how
    consistently that rule's scenarios failed in the run (``failing``: a rule whose scenarios merely pass
    through the broken behaviour fails less often than the broken rule: a DELAY above the table fails the
    delay-table examples that send one and every clamp example), then the most sources, then the first
    named."""
    groups: dict[str, list[Showing]] = {}
    for x in shared_symptoms(showings):
        groups.setdefault(x.signature, []).append(x)
    out = []
    for xs in groups.values():
        xs.sort(key=lambda x: (x.time is None, x.time or 0, x.order))
        # A failure that does not name its rule counts for its scenario's own rule (the one the spec
        # files the example under) in full, for the other rules it names by half.
        weight: dict[str, float] = {}
        carried: dict[str, int] = {}
        for x in xs:
            for n, rule in enumerate(x.candidates or (x.rule,)):
                weight[rule] = weight.get(rule, 0.0) + (1.0 if n == 0 else 0.5)
                carried[rule] = carried.get(rule, 0) + 1
        first_named = {rule: n for n, rule in enumerate(dict.fromkeys(x.rule for x in xs))}
        rule = max(
            weight,
            key=lambda r: (
                round(weight[r] * failing.get(r, 1.0), 9),
                carried[r],
                -first_named.get(r, len(weight)),
            ),
        )
        out.append(RunRootCause(rule, attrs.evolve(xs[0], rule=rule), tuple(xs)))
    return out


# Requests whose refusal (any answer but a stored one) leaves nothing for the scenario's later steps, and
# the codes that say "stored" (facts §8).
_WRITES = frozenset({"send", "send_half", "send_batch", "send_back", "end_tx"})
_STORED = frozenset({0, 10, 11, 12})
_CODE_SYMPTOM = re.compile(r"code: expected \w+, got (\w+)")


def refusal(c: RunRootCause) -> tuple[str, int] | None:
    """The wrong answer a cause is, when it is a write refused (``send_half`` answered NO_PERMISSION):
    its operation and code; None for any other cause."""
    m = _CODE_SYMPTOM.match(c.first.message)
    if c.protocol or m is None or c.first.operation not in _WRITES:
        return None
    try:
        code = int(Code[m.group(1)])
    except KeyError:
        return None
    return None if code in _STORED else (c.first.operation, code)


def fold_upstream(
    causes: Sequence[RunRootCause], results: Mapping[str, ScenarioResult]
) -> list[RunRootCause]:
    """A write refused is upstream of what a scenario that did not expect its refusal shows later: a half
    message answered NO_PERMISSION by a step that expects nothing shows only as the check that never came.
    A showing whose source had the same kind of write refused the same way, before the failure, follows
    from the cause that names that refusal (where some scenario expected the write to succeed), and is
    counted as its follower, not as a cause of its own."""
    upstream = [(n, wrong) for n, c in enumerate(causes) if (wrong := refusal(c)) is not None]
    if not upstream:
        return list(causes)
    gained: dict[int, list[str]] = defaultdict(list)
    kept: dict[int, list[Showing]] = {}
    refusals = {u for u, _ in upstream}
    for n, c in enumerate(causes):
        kept[n] = []
        for x in c.showings if n not in refusals else ():
            res = results.get(x.source)
            history = res.history if res is not None else ()
            until = x.event if x.event is not None else len(history) - 1
            owner = next(
                (
                    u
                    for u, (op, code) in upstream
                    if u != n
                    and any(
                        e.f == op and e.type == "fail" and e.value.get("code") == code
                        for e in history[: until + 1]
                    )
                ),
                None,
            )
            if owner is None:
                kept[n].append(x)
            else:
                gained[owner].append(x.source)
        if n in refusals:  # a refusal is a cause of its own, never folded into another
            kept[n] = list(c.showings)
    return [
        attrs.evolve(
            c,
            first=attrs.evolve(kept[n][0], rule=c.rule),
            showings=tuple(kept[n]),
            followers=tuple(dict.fromkeys((*c.followers, *gained[n]))),
        )
        for n, c in enumerate(causes)
        if kept[n]
    ]


def by_reach(causes: Sequence[RunRootCause]) -> list[RunRootCause]:
    """Causes ordered by what they block (scenarios, then operations), then by their first occurrence."""
    return sorted(
        causes,
        key=lambda c: (
            -c.reach[0],
            -c.reach[1],
            c.first.time is None,
            c.first.time or 0,
            c.first.order,
        ),
    )


def unknown_operation(r: ScenarioResult) -> str | None:
    """The operation whose outcome a scenario that ended unknown could not learn."""
    for e in reversed(r.history):
        if e.type == "info":
            return e.f
    return None


@attrs.frozen
class Report:
    target: str
    scenarios: tuple[ScenarioResult, ...]
    machine: str | None  # None: the state machine (or, on a wall clock, the workload) passed
    machine_examples: int
    seconds: float
    mode: str = "state machine"  # or "workload" (wall-clock targets: Jepsen-style, checked at the end)
    workload: WorkloadSummary | None = None
    settings: dict[str, Any] = attrs.field(factory=dict)
    probe: ProbeResult | None = None  # the wire probe (remoting targets), run at the start
    lacks: frozenset[str] = frozenset()  # capabilities the target declares it does not offer (Feature values)
    # What to do about the scenarios skipped for their settings: said once per run, not on every skip.
    hints: tuple[str, ...] = ()

    @property
    def protocol(self) -> tuple[Diagnosis, ...]:
        """Failures of the protocol itself, each named once (the wire probe's findings by rule); a finding
        only about requests of a capability the target declares lacking (``lacks: [batch]``) is none."""
        if self.probe is None:
            return ()
        return tuple(d for d in self.probe.diagnoses() if not self.declared_lacking(d))

    def declared_lacking(self, d: Diagnosis) -> bool:
        """Whether ``d`` concerns only requests that serve a capability the target declares lacking."""
        return bool(d.codes) and all(
            (f := REQUEST_FEATURES.get(code)) is not None and f.value in self.lacks for code in d.codes
        )

    @property
    def root_causes(self) -> tuple[RunRootCause, ...]:
        """The run's root causes: each protocol failure the probe named, and the first failures of the
        failed scenarios and of the workload grouped by causality (``group_causes``), ordered by what
        they block, then by first occurrence (``by_reach``). A first failure (or an unknown outcome) that
        follows from a protocol failure counts as its consequence."""
        protocol = self.protocol
        started = self.probe.started_ms if self.probe is not None else 0
        followers: dict[int, list[str]] = {i: [] for i in range(len(protocol))}
        showings: list[Showing] = []

        def follows(source: str, operation: str, rule: str) -> bool:
            for i, d in enumerate(protocol):
                if diagnosis_covers(d, operation, rule):
                    followers[i].append(source)
                    return True
            return False

        for n, r in enumerate(self.scenarios):
            shown = scenario_showing(r, n)
            if shown is not None:
                if not follows(shown.source, shown.operation, shown.rule):
                    showings.append(shown)
            elif r.outcome == "unknown" and (op := unknown_operation(r)) is not None:
                follows(r.scenario.id, op, "")
        w = self.workload
        if w is not None and w.verdict == "fail" and w.anomalies:
            a = w.anomalies[0]
            rest = sum(int(x.get("occurrences", 1)) + int(x.get("consequence_count", 0)) for x in w.anomalies)
            shown = Showing(
                "workload",
                str(a["rule"]),
                "check" if a["name"] in CHECK_ANOMALIES else str(a.get("f") or "history"),
                f"event {a['event']}",
                f"{a['name']}: {a['message']}",
                a.get("frame"),
                a.get("time"),
                rest - 1,
                candidates=(str(a["rule"]),),
                order=len(self.scenarios),
            )
            if not follows("workload", shown.operation, shown.rule):
                showings.append(shown)
        elif w is not None and w.verdict == "unknown":
            for op in w.unknown_operations:
                if follows("workload", op, ""):
                    break
        out = [
            RunRootCause(
                d.rule,
                Showing("wire probe", d.rule, "probe", "probe", d.line, d.frame, started, order=-1),
                (Showing("wire probe", d.rule, "probe", "probe", d.line, d.frame, started, d.findings - 1),),
                tuple(dict.fromkeys(followers[i])),
                protocol=True,
            )
            for i, d in enumerate(protocol)
        ]
        causes = group_causes(showings, self.failing_share())
        out += fold_upstream(causes, {r.scenario.id: r for r in self.scenarios})
        return tuple(by_reach(out))

    def failing_share(self) -> dict[str, float]:
        """Rule -> how consistently the scenarios that judged it (passed, failed or not reached it)
        failed it, smoothed so that one scenario is weak evidence: (failed + 1) / (judged + 2)."""
        out = {}
        for rule, counts in self.by_rule().items():
            judged = counts.get("pass", 0) + counts.get("fail", 0) + counts.get("not reached", 0)
            out[rule] = (counts.get("fail", 0) + 1) / (judged + 2)
        return out

    @property
    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "skip": 0, "unknown": 0}
        for r in self.scenarios:
            out[r.outcome] = out.get(r.outcome, 0) + 1
        return out

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_PASS

    @property
    def exit_code(self) -> int:
        c = self.counts
        if (
            c["fail"]
            or (self.machine is not None and not self.machine.startswith("unknown"))
            or self.protocol
        ):
            return EXIT_FAIL
        stopped = self.probe is not None and self.probe.stopped is not None
        if (
            c["unknown"]
            or (self.machine is not None)
            or (c["pass"] == 0 and self.machine_examples == 0)
            or stopped
        ):
            return EXIT_UNKNOWN
        return EXIT_PASS

    @property
    def unjudged(self) -> list[str]:
        """What could not be judged, one line each (the reason an exit is 3)."""
        out = []
        if self.probe is not None and self.probe.stopped is not None:
            out.append(f"wire probe: {self.probe.stopped}")
        unknown = [r for r in self.scenarios if r.outcome == "unknown"]
        if unknown:
            out.append(
                f"{len(unknown)} scenario(s) ended with an unknown outcome, first {unknown[0].scenario.id}: "
                f"{unknown[0].reason}"
            )
        if self.machine is not None and self.machine.startswith("unknown"):
            out.append(self.machine.splitlines()[0])
        return out

    def summary(self) -> str:
        """One paragraph for a broker's author: the root causes first (a protocol failure named once, then
        by rule in the order they showed), then what was judged."""
        c = self.counts
        parts: list[str] = []
        roots = self.root_causes
        if roots:
            first = roots[0]
            kind = "protocol failure" if first.protocol else "root cause"
            blocks = first.reach[0]
            parts.append(
                f"{len(roots)} root cause{'s' if len(roots) != 1 else ''}. Fix {first.rule} first "
                f"({kind}, it blocks {blocks} scenario{'s' if blocks != 1 else ''}): {first.first.message}"
                + (f" ({first.consequences} failures follow from it)." if first.consequences else ".")
            )
            if len(roots) > 1:
                rest = "; ".join(f"{r.rule} (blocks {r.reach[0]})" for r in roots[1:6])
                more = f" and {len(roots) - 6} more" if len(roots) > 6 else ""
                parts.append(f"Other root causes: {rest}{more}.")
        parts.append(
            f"{self.target}: {len(self.scenarios)} scenarios, {c['pass']} passed, {c['fail']} failed, "
            f"{c['skip']} skipped, {c['unknown']} unknown, in {self.seconds:.0f} s."
        )
        rc = self.rule_counts()
        parts.append(
            f"Rules: {rc['pass']} passed, {rc['fail']} failed, {rc['not reached']} not reached (their "
            f"scenarios stopped before the steps that check them), {rc['skip']} skipped, {rc['unknown']} unknown."
        )
        for line in self.unjudged:
            parts.append(f"Not judged: {line}.")
        failed = [r for r in self.scenarios if r.outcome == "fail"]
        if failed:
            rules: dict[str, int] = {}
            for r in failed:
                for rule in r.failed_rules:
                    rules[rule] = rules.get(rule, 0) + 1
            top = ", ".join(
                f"{rule} ({n})" for rule, n in sorted(rules.items(), key=lambda x: (-x[1], x[0]))[:5]
            )
            first_failed = failed[0]
            f0 = first_failed.failures[0] if first_failed.failures else None
            parts.append(f"Rules broken, by scenarios: {top}.")
            if f0 is not None:
                parts.append(
                    f"First: {first_failed.scenario.id}, step {f0.step} ({f0.operation}): {f0.message}"
                )
        if c["skip"]:
            reasons: dict[str, int] = {}
            for r in self.scenarios:
                if r.outcome == "skip":
                    key = r.reason.split(":")[0].split("(")[0].strip()
                    reasons[key] = reasons.get(key, 0) + 1
            common = "; ".join(f"{n}× {why}" for why, n in sorted(reasons.items(), key=lambda x: -x[1])[:3])
            parts.append(f"Skipped: {common}.")
        if self.mode == "workload":
            w = self.workload
            if w is not None:
                parts.append(f"Workload of {w.operations} operations: {w.verdict}.")
        elif self.machine_examples:
            parts.append(
                f"State machine ({self.machine_examples} runs): {'pass' if self.machine is None else 'fail'}."
            )
        return " ".join(parts)

    @property
    def hazards(self) -> dict[str, str]:
        """Hazard rules whose scenarios passed: the target shows the allowed but risky behaviour."""
        shown = {rule for r in self.scenarios if r.outcome == "pass" for rule in r.rules if rule in HAZARDS}
        return {rule: HAZARDS[rule] for rule in sorted(shown)}

    def by_rule(self) -> dict[str, dict[str, int]]:
        """Rule -> how many scenarios passed it, failed it, did not reach it (stopped before its steps),
        skipped it, or ended unknown (``ScenarioResult.rule_outcomes``)."""
        table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in self.scenarios:
            for rule, outcome in r.rule_outcomes.items():
                table[rule][outcome] += 1
        return {k: dict(v) for k, v in sorted(table.items())}

    def rule_counts(self) -> dict[str, int]:
        """The rules by what the run concludes of each, as the rules table shows them: failed where a
        scenario failed it, else passed where one passed it, else not reached, skipped or unknown."""
        out = {"pass": 0, "fail": 0, "not reached": 0, "skip": 0, "unknown": 0}
        for counts in self.by_rule().values():
            state = next(
                (k for k in ("fail", "pass", "not reached", "unknown", "skip") if counts.get(k)), "skip"
            )
            out[state] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        roots = self.root_causes
        return {
            "target": self.target,
            "passed": self.passed,
            "exit_code": self.exit_code,
            # Root causes first: a protocol failure named once in one line, then each rule by where it
            # first showed, with the count of what follows from it.
            "protocol_failure": next((r.line() for r in roots if r.protocol), None),
            "root_causes": [r.to_json() for r in roots],
            "unjudged": self.unjudged,
            "counts": self.counts,
            "rule_counts": self.rule_counts(),
            "summary": self.summary(),
            "protocol": [d.to_json() for d in self.protocol],
            # Protocol findings about requests the target declares it lacks: reported, never a cause.
            "declared_lacking": [
                d.to_json()
                for d in (self.probe.diagnoses() if self.probe else ())
                if self.declared_lacking(d)
            ],
            "probe": None if self.probe is None else self.probe.to_json(),
            "seconds": round(self.seconds, 3),
            "settings": self.settings,
            "machine": {"mode": self.mode, "examples": self.machine_examples, "failure": self.machine},
            "workload": None if self.workload is None else self.workload.to_json(),
            "rules": self.by_rule(),
            "hazards": self.hazards,
            "hints": list(self.hints),
            "scenarios": [
                {
                    "id": r.scenario.id,
                    "rules": list(r.rules),
                    "outcome": r.outcome,
                    "reason": r.reason,
                    "checked": r.checked,
                    "stopped_at": r.stopped_at,
                    "rule_outcomes": r.rule_outcomes,
                    "seconds": round(r.seconds, 3),
                    "failures": [attrs.asdict(f) for f in r.failures],
                    "first_failure": None if (x := scenario_showing(r, n)) is None else x.to_json(),
                }
                for n, r in enumerate(self.scenarios)
            ],
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    def write_junit(self, path: Path) -> None:
        suite = ET.Element(
            "testsuite",
            name=f"rmqspec:{self.target}",
            tests=str(len(self.scenarios) + 1),
            failures=str(self.counts["fail"] + (self.machine is not None)),
            skipped=str(self.counts["skip"] + self.counts["unknown"]),
            time=f"{self.seconds:.3f}",
        )
        for r in self.scenarios:
            rule, _, name = r.scenario.id.partition("#")
            case = ET.SubElement(
                suite,
                "testcase",
                classname=rule.replace("/", ".") if name else "catalogue",
                name=name or r.scenario.id,
            )
            if r.outcome == "fail":
                f = ET.SubElement(case, "failure", message=f"{len(r.failures)} step(s) failed")
                f.text = "\n".join(f"step {x.step} ({x.operation}): {x.message}" for x in r.failures)
            elif r.outcome in ("skip", "unknown"):
                ET.SubElement(case, "skipped", message=f"{r.outcome}: {r.reason}")
        name = "workload" if self.mode == "workload" else "history-checker"
        case = ET.SubElement(suite, "testcase", classname="rmqspec.machine", name=name)
        if self.machine is not None:
            ET.SubElement(case, "failure", message="anomalies").text = self.machine
        path.parent.mkdir(parents=True, exist_ok=True)
        ET.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)


Progress = Callable[[int, int, str], None]


def run_logical(
    target: str,
    factory: TargetFactory,
    scenarios: Sequence[Scenario],
    *,
    base: BrokerConfig | None = None,
    machine: Callable[[], str | None] | None = None,
    examples: int = 0,
    progress: Progress | None = None,
) -> Report:
    """Every scenario on a fresh logical-clock target made for its settings (its ``config`` over
    ``base``), then ``machine`` (the state machine run; None when it passed)."""
    start = time.perf_counter()
    results = []
    total = len(scenarios) + 1
    for n, s in enumerate(scenarios):
        if progress:
            progress(n, total, s.id)
        results.append(run_scenario(s, factory, base=base, salt="conform"))
    if progress:
        progress(len(scenarios), total, "state machine")
    failure = machine() if machine is not None else None
    if progress:
        progress(total, total, "done")
    return Report(target, tuple(results), failure, examples, time.perf_counter() - start)


@attrs.frozen
class WallOptions:
    epsilon_ms: int | None = None  # None: the target's
    max_wait_ms: int = 60_000
    concurrency: int = 16
    workload_seconds: float = 30.0
    seed: int = 0
    save_dir: Path | None = None
    chaos: bool = False
    plots_dir: Path | None = None  # draw the workload's plots here
    deployments: int = 3  # brokers running scenarios at once (the main one, other settings, own brokers)


def run_wall(
    wt: WallTarget,
    scenarios: Sequence[Scenario],
    reference: TargetFactory,
    options: WallOptions,
    *,
    progress: Progress | None = None,
    workload: Callable[[Deployment, int], WorkloadSummary] | None = None,
    probe: Callable[[Deployment], ProbeResult] | None = None,
) -> Report:
    """The suite on a wall-clock target; ``reference`` makes logical-clock model targets (dry runs).
    ``probe``: the wire probe of the main broker, run beside the scenarios from the start."""
    start = time.perf_counter()
    eps = wt.epsilon_ms if options.epsilon_ms is None else options.epsilon_ms
    total = len(scenarios) + 1
    done = [0]
    lock = threading.Lock()
    results: dict[str, ScenarioResult] = {}

    def finished(r: ScenarioResult) -> None:
        if r.outcome == "fail" and r.history and options.save_dir is not None:
            # A failed scenario's history, to re-check or read: its broker settings go with it.
            meta = {
                "target": wt.name,
                "scenario": r.scenario.id,
                "epsilon_ms": eps,
                "broker": broker_settings(r.scenario.broker_config(wt.config)),
            }
            save_history(
                r.history, options.save_dir, r.scenario.id.replace("/", "_").replace("#", "--"), meta
            )
        with lock:
            results[r.scenario.id] = r
            done[0] += 1
            if progress:
                progress(done[0], total, r.scenario.id)

    # A target that fast-forwards a broker of its own runs there what would wait longer than --max-wait.
    fast = Feature.FAST_FORWARD in wt.features

    def longer_than(s: Scenario, cfg: BrokerConfig, limit: int | None) -> bool:
        return limit is not None and dry_run(s, cfg, reference).span_ms > limit

    groups: dict[BrokerConfig, list[Scenario]] = defaultdict(list)
    exclusive: list[tuple[Scenario, BrokerConfig]] = []
    for s in scenarios:
        if s.profile is not None and s.profile != wt.config.profile.value:
            finished(
                ScenarioResult(
                    s,
                    "skip",
                    f"written for profile {s.profile} (the target's profile is {wt.config.profile.value})",
                )
            )
            continue
        reason = s.release_skip(wt.config)
        if reason is not None:  # a broker of one release outside the scenario's
            finished(ScenarioResult(s, "skip", reason))
            continue
        missing = s.features - wt.features - {Feature.RESTART}
        if missing:
            finished(
                ScenarioResult(s, "skip", "the target lacks " + ", ".join(sorted(f.value for f in missing)))
            )
            continue
        try:
            cfg = s.broker_config(wt.config)
        except ValueError as e:
            finished(ScenarioResult(s, "skip", str(e)))
            continue
        if s.features & {Feature.RESTART, Feature.OWN_BROKER, Feature.CLOCK_SKEW} or (
            fast and longer_than(s, cfg, options.max_wait_ms)
        ):
            exclusive.append((s, cfg))
        else:
            groups[cfg].append(s)

    def run_batch(dep: Deployment, batch: Sequence[Scenario]) -> None:
        """The batch's scenarios at once, then those that must run alone, one after another: a run of
        the check service stops at another scenario's young half message (transaction/check-interval)."""
        run_on(dep, [s for s in batch if Feature.ALONE not in s.features], options.concurrency)
        run_on(dep, [s for s in batch if Feature.ALONE in s.features], 1)

    def run_on(dep: Deployment, batch: Sequence[Scenario], workers: int, *, jumps: bool = False) -> None:
        """``jumps``: the broker is the scenario's own and fast-forwards, so no wait is too long."""

        def one(s: Scenario) -> ScenarioResult:
            return run_scenario(
                s,
                lambda _cfg: dep.target(),
                config=dep.config,
                epsilon_ms=eps,
                salt=f"conform{time.time_ns()}",
                reference=reference,
                max_wait_ms=None if jumps else options.max_wait_ms,
            )

        if workers <= 1:
            for s in batch:
                finished(one(s))
            return
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rmqspec-scenario") as pool:
            for r in pool.map(one, batch):
                finished(r)

    main: Deployment | None = None
    summary: WorkloadSummary | None = None

    def each(batch: Sequence[Scenario], outcome: str, reason: str) -> None:
        for s in batch:
            finished(ScenarioResult(s, outcome, reason))

    hints: dict[str, None] = {}  # what the target says about settings it cannot have, once each

    def cannot_deploy(batch: Sequence[Scenario], e: CannotDeploy) -> None:
        """Each skip says what its scenario needs; what to do about it is said once (Report.hints)."""
        for s in batch:
            need = s.unmet_settings(wt.config)
            if need is None:
                finished(ScenarioResult(s, "skip", str(e)))
            else:
                with lock:
                    hints.setdefault(str(e))
                finished(ScenarioResult(s, "skip", need))

    def other_group(cfg: BrokerConfig, batch: Sequence[Scenario]) -> None:
        try:
            other = wt.open(cfg)
        except CannotDeploy as e:
            cannot_deploy(batch, e)
            return
        except TargetError as e:
            each(batch, "unknown", f"a broker with these settings could not be started: {e}")
            return
        try:
            run_batch(other, batch)
        finally:
            other.close()

    def own_broker(s: Scenario, cfg: BrokerConfig) -> None:
        try:
            dep = wt.open(cfg, exclusive=True, skewable=Feature.CLOCK_SKEW in s.features)
        except CannotDeploy as e:
            cannot_deploy([s], e)
            return
        except TargetError as e:
            each([s], "unknown", f"a broker of its own could not be started: {e}")
            return
        try:
            if Feature.RESTART in s.features and not dep.can_restart:
                each(
                    [s],
                    "skip",
                    "needs a broker the suite can restart: run it on an apache:VERSION or served target",
                )
            else:
                run_on(dep, [s], 1, jumps=fast)
        finally:
            dep.close()

    probed: list[ProbeResult] = []
    probing: threading.Thread | None = None
    try:
        try:
            main = wt.open(wt.config)
        except CannotDeploy as e:
            raise TargetError(f"{wt.name}: {e}") from None
        if probe is not None:
            on = main

            def run_probe() -> None:
                started = int(time.time() * 1000)
                try:
                    probed.append(probe(on))
                except Exception as e:  # the probe's own bug: said, never a crash
                    probed.append(
                        ProbeResult((), 0, 0, started, stopped=f"rmqspec error {type(e).__name__}: {e}")
                    )

            probing = threading.Thread(target=run_probe, name="rmqspec-wire-probe", daemon=True)
            probing.start()
        opened = main
        # The deployments are independent brokers: the main one's scenarios, each other group of settings
        # and each scenario that needs a broker of its own run side by side, ``options.deployments`` at once.
        jobs: list[Callable[[], None]] = []
        for cfg, batch in groups.items():
            if cfg == wt.config:
                jobs.append(functools.partial(run_batch, opened, batch))
            else:
                jobs.append(functools.partial(other_group, cfg, batch))
        jobs += [functools.partial(own_broker, s, cfg) for s, cfg in exclusive]
        with ThreadPoolExecutor(
            max_workers=max(1, options.deployments), thread_name_prefix="rmqspec-broker"
        ) as pool:
            for job in [pool.submit(j) for j in jobs]:
                job.result()
        if progress:
            progress(done[0], total, f"workload ({options.workload_seconds:.0f} s)")
        if workload is not None and options.workload_seconds > 0:
            try:
                summary = workload(main, eps)
            except TargetError as e:  # the broker stopped answering: nothing of the workload is judged
                summary = WorkloadSummary(0, "unknown", reason=f"the workload could not run: {e}")
            except Exception as e:  # the suite's own bug: said, with where, never a crash
                where = traceback.extract_tb(e.__traceback__)[-1]
                summary = WorkloadSummary(
                    0,
                    "unknown",
                    reason=f"rmqspec error {type(e).__name__}: {e} (at {where.filename}:{where.lineno}); "
                    "please report it",
                )
        if probing is not None:
            if progress:
                progress(done[0], total, "wire probe")
            probing.join()
    finally:
        if main is not None:
            main.close()
    failure = None
    if summary is not None and summary.verdict != "pass":
        lines = [f"{summary.verdict}: workload of {summary.operations} operations {summary.reason}".rstrip()]
        if summary.summary:
            lines.append(summary.summary)
        lines += [
            f"{a['name']} [{a['rule']}] at event {a['event']}: {a['message']}"
            + (f" ({a['consequence_count']} consequences)" if a.get("consequence_count") else "")
            for a in summary.anomalies[:20]
        ]
        if summary.history:
            lines.append(f"history saved to {summary.history}")
        failure = "\n".join(lines)
    if progress:
        progress(total, total, "done")
    ordered = tuple(results[s.id] for s in scenarios if s.id in results)
    return Report(
        wt.name,
        ordered,
        failure,
        summary.operations if summary else 0,
        time.perf_counter() - start,
        mode="workload",
        workload=summary,
        probe=probed[0] if probed else None,
        lacks=frozenset(f.value for f in REQUEST_FEATURES.values() if f not in wt.features),
        hints=tuple(hints),
        settings={
            "epsilon_ms": eps,
            "max_wait_ms": options.max_wait_ms,
            "concurrency": options.concurrency,
            "workload_seconds": options.workload_seconds,
            "chaos": options.chaos,
            "broker": broker_settings(wt.config),
        },
    )


def broker_settings(cfg: BrokerConfig) -> dict[str, Any]:
    """The settings by their broker.conf names, as a report shows them."""
    out: dict[str, Any] = {"profile": cfg.profile.value}
    for key, field in conf_keys(cfg.profile).items():
        value = getattr(cfg, field)
        out[key] = cfg.describe() if field == "delay_levels" else value
    return out


def save_history(
    events: Sequence[Event], save_dir: Path | None, name: str, meta: dict[str, Any]
) -> str | None:
    """Save a history under ``save_dir`` (None: do not); the path written."""
    if save_dir is None:
        return None
    save_dir.mkdir(parents=True, exist_ok=True)
    path = save_dir / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.jsonl"
    save(events, path, meta)
    return str(path)


@contextlib.contextmanager
def closing_target(target: Target) -> Iterator[Target]:
    try:
        yield target
    finally:
        target.close()

"""The kill matrix: the suite run against every mutant, and whether it fails each for the right reason.

A mutant is **killed** only by a failure that names its rule (or one of the symptoms it declares):

* a scenario's failure names the rules its failures name (``ScenarioResult.failed_rules``): a failed
  expectation the scenario's rules, a failure that names a rule of its own (an answer breaking a wire
  rule) that rule only, and on a wall clock each root cause of the history checker's verdict its rule;
* the state machine's failure names the rules of the root causes its verdict reports;
* the wire probe's findings name wire rules.

A mutant some failure catches, but none for its rule, is **killed for the wrong reason** (the report
says what caught it); one nothing catches **survived**. The suite breaking on a mutant (a scenario that
ends ``unknown``: the runner raised, the target could not be made; the state machine raising something
other than a checker's verdict) is no failure of the mutant's and kills nothing: the row lists it under
``errors``. Semantic and configuration mutants run the
scenario catalogue and the state machine on the in-process target; wire mutants run the wire probe
against the reference served over TCP through the mutant's fault (``served`` only).

``conformance`` makes no target itself: the caller passes ``KillTargets`` (the command line passes
the in-process target and ``rmqspec serve``'s background server). ``workers`` > 1 runs mutants in
that many processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import AbstractContextManager
from typing import Any, Protocol

import attrs

from rmqspec.reference.config import BrokerConfig

from .checker import Verdict
from .contract import Target
from .machine import run_machine
from .mutants import MUTANTS, Mutant
from .scenario_run import run_scenario
from .scenarios import Scenario, catalogue
from .wireprobe import PROBE_CONFIG, FaultProxy, probe


class KillTargets(Protocol):
    """Where the kill matrix gets its targets (an instance must pickle, for ``workers`` > 1)."""

    def in_process(self, mutant: Mutant, config: BrokerConfig) -> Target:
        """The mutant's model as a target on a logical clock."""
        ...

    def serve(self, config: BrokerConfig) -> AbstractContextManager[tuple[str, int]]:
        """The reference with ``config`` served over TCP (``rmqspec serve``): yields (host, port)."""
        ...


@attrs.frozen
class Failure:
    """One part of the suite that failed on a mutant, and the rules it names."""

    source: str  # a scenario id, "state machine" or "wire probe"
    rules: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "rules": list(self.rules)}


@attrs.frozen
class KillRow:
    mutant: str
    rule: str
    outcome: str  # "killed", "wrong-reason" or "survived"
    failures: tuple[Failure, ...]  # everything that failed
    symptoms: tuple[str, ...] = ()
    path: str = "in-process"  # or "served" (wire mutants)
    seconds: float = 0.0
    errors: tuple[str, ...] = ()  # where the suite broke on the mutant (no kill): source and reason

    @property
    def rules(self) -> tuple[str, ...]:
        return (self.rule, *self.symptoms)

    @property
    def killed(self) -> bool:
        return self.outcome == "killed"

    @property
    def killed_by(self) -> tuple[str, ...]:
        """The failures that name the mutant's rule (or a symptom): what killed it."""
        return tuple(f.source for f in self.failures if set(f.rules) & set(self.rules))

    @property
    def wrong(self) -> tuple[Failure, ...]:
        """The failures that name only other rules."""
        return tuple(f for f in self.failures if not set(f.rules) & set(self.rules))

    @property
    def machine(self) -> bool:
        """The state machine (the history checker) killed it for its rule."""
        return "state machine" in self.killed_by

    def to_json(self) -> dict[str, Any]:
        return {
            "mutant": self.mutant,
            "rule": self.rule,
            "symptoms": list(self.symptoms),
            "outcome": self.outcome,
            "killed": self.killed,
            "killed_by": list(self.killed_by),
            "wrong_reason": [f.to_json() for f in self.wrong],
            "checker": self.machine,
            "errors": list(self.errors),
            "path": self.path,
            "seconds": round(self.seconds, 2),
        }


def outcome(failures: Sequence[Failure], rules: Sequence[str]) -> str:
    if any(set(f.rules) & set(rules) for f in failures):
        return "killed"
    return "wrong-reason" if failures else "survived"


def machine_failure(targets: KillTargets, m: Mutant, examples: int) -> Failure | str | None:
    """The state machine on the mutant; its failure names the root causes of the failing verdict. A str:
    the machine raised something other than a verdict (an error, not a failure of the mutant's)."""
    failing: list[Verdict] = []

    def seen(v: Verdict, _ops: int) -> None:
        if v.anomalies:
            failing.append(v)

    try:
        message = run_machine(
            lambda cfg: targets.in_process(m, cfg),
            BrokerConfig(),
            max_examples=examples,
            shrink=False,
            on_verdict=seen,
        )
    except Exception as e:  # the machine broke on what the mutant answered: reported, not a kill
        return f"state machine: raised {type(e).__name__}: {e}"
    if message is None:
        return None
    rules = tuple(dict.fromkeys(r.rule for v in failing[-1:] for r in v.root_causes))
    return Failure("state machine", rules or ("?",))


def kill_one(targets: KillTargets, m: Mutant, scenarios: Sequence[Scenario], examples: int) -> KillRow:
    start = time.perf_counter()
    failures: list[Failure] = []
    errors: list[str] = []
    if m.served_only:
        assert m.wire is not None
        with targets.serve(PROBE_CONFIG) as (host, port), FaultProxy(host, port, m.wire) as (phost, pport):
            result = probe(phost, pport)
        if result.findings:
            failures.append(Failure("wire probe", result.rules))
        path = "served"
    else:
        for s in scenarios:
            try:
                r = run_scenario(s, lambda cfg: targets.in_process(m, cfg), salt="kill")
            except Exception as e:  # run_scenario never raises; should it, that is the suite's bug
                errors.append(f"{s.id}: the scenario runner raised {type(e).__name__}: {e}")
                continue
            if r.outcome == "fail":
                failures.append(Failure(s.id, r.failed_rules))
            elif r.outcome == "unknown":  # no verdict on the mutant either way (an rmqspec error, say)
                errors.append(f"{s.id}: unknown: {r.reason}")
        if examples > 0:
            f = machine_failure(targets, m, examples)
            if isinstance(f, str):
                errors.append(f)
            elif f is not None:
                failures.append(f)
        path = "in-process"
    return KillRow(
        m.name,
        m.rule,
        outcome(failures, m.rules),
        tuple(failures),
        m.symptoms,
        path,
        time.perf_counter() - start,
        tuple(errors),
    )


def _kill_job(job: tuple[KillTargets, str, Sequence[Scenario], int]) -> KillRow:
    targets, name, scenarios, examples = job
    return kill_one(targets, MUTANTS[name], scenarios, examples)


def kill_matrix(
    targets: KillTargets,
    *,
    examples: int = 30,
    names: Sequence[str] | None = None,
    scenarios: Sequence[Scenario] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    workers: int = 1,
) -> list[KillRow]:
    """One row per mutant (``names``, default all), in name order."""
    chosen = sorted(names or MUTANTS)
    unknown = [n for n in chosen if n not in MUTANTS]
    if unknown:
        raise KeyError(f"unknown mutant(s): {', '.join(unknown)}")
    scenarios = list(scenarios) if scenarios is not None else catalogue()
    jobs: list[tuple[KillTargets, str, Sequence[Scenario], int]] = [
        (targets, name, scenarios, examples) for name in chosen
    ]
    rows: dict[str, KillRow] = {}
    for done, row in enumerate(_run(jobs, workers)):
        rows[row.mutant] = row
        if progress:
            progress(done + 1, len(chosen), row.mutant)
    return [rows[n] for n in chosen]


def _run(jobs: Sequence[tuple[KillTargets, str, Sequence[Scenario], int]], workers: int) -> Iterator[KillRow]:
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield _kill_job(job)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_kill_job, job) for job in jobs]
        for f in as_completed(futures):
            yield f.result()


def summary(rows: Sequence[KillRow]) -> dict[str, int]:
    """How many mutants had each outcome, and (``errors``) how many rows the suite broke on somewhere."""
    counts = {"killed": 0, "wrong-reason": 0, "survived": 0}
    for r in rows:
        counts[r.outcome] += 1
    counts["errors"] = sum(1 for r in rows if r.errors)
    return counts

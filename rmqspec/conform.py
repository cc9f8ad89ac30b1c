"""``rmqspec conform`` and ``rmqspec mutants``: run the suite on a target and report per rule.

The suite is the scenario catalogue (the spec's examples and more) plus the Hypothesis state machine
checked by the history checker. A target is ``reference``, ``mutant:NAME`` or ``remoting://HOST:PORT``.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import attrs

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.contract import Target
from rmqspec.conformance.machine import run_machine
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.scenarios import Scenario, ScenarioResult, catalogue, run_scenario
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

TargetFactory = Callable[[BrokerConfig], Target]

# Behaviours the spec allows but users should know about: reported, never failed.
HAZARDS = {
    "transaction/not-idempotent": "a second END_TRANSACTION (or a commit after a rollback) is applied again "
    "while the half record exists: duplicate delivery is possible (4.9.x; apache/rocketmq #1517, #4436)",
}


class TargetSpecError(ValueError):
    """A --target value that names no known target."""


def target_factory(spec: str) -> TargetFactory:
    if spec == "reference":
        return lambda cfg: InProcessTarget(Model(cfg), name="reference")
    if spec.startswith("mutant:"):
        name = spec.removeprefix("mutant:")
        if name not in MUTANTS:
            raise TargetSpecError(
                f"unknown mutant {name!r}; `rmqspec mutants --list` shows the {len(MUTANTS)} names"
            )
        m = MUTANTS[name]
        return lambda cfg: InProcessTarget(m.model(cfg), name=spec)
    if spec.startswith("remoting://"):
        raise TargetSpecError(
            f"{spec}: the remoting adapter is not built yet (only its codec is); "
            "targets available now: reference, mutant:NAME"
        )
    raise TargetSpecError(f"unknown target {spec!r} (use reference, mutant:NAME or remoting://HOST:PORT)")


@attrs.frozen
class Report:
    target: str
    scenarios: tuple[ScenarioResult, ...]
    machine: str | None  # None: the state machine passed
    machine_examples: int
    seconds: float

    @property
    def passed(self) -> bool:
        return self.machine is None and all(r.outcome in ("pass", "skip") for r in self.scenarios)

    @property
    def hazards(self) -> dict[str, str]:
        """Hazard rules whose scenarios passed: the target shows the allowed but risky behaviour."""
        shown = {rule for r in self.scenarios if r.outcome == "pass" for rule in r.rules if rule in HAZARDS}
        return {rule: HAZARDS[rule] for rule in sorted(shown)}

    def by_rule(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in self.scenarios:
            for rule in r.rules:
                table[rule][r.outcome] += 1
        return {k: dict(v) for k, v in sorted(table.items())}

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "machine": {"examples": self.machine_examples, "failure": self.machine},
            "rules": self.by_rule(),
            "hazards": self.hazards,
            "scenarios": [
                {
                    "id": r.scenario.id,
                    "rules": list(r.rules),
                    "outcome": r.outcome,
                    "reason": r.reason,
                    "failures": [attrs.asdict(f) for f in r.failures],
                }
                for r in self.scenarios
            ],
        }

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    def write_junit(self, path: Path) -> None:
        suite = ET.Element(
            "testsuite",
            name=f"rmqspec:{self.target}",
            tests=str(len(self.scenarios) + 1),
            failures=str(sum(r.outcome == "fail" for r in self.scenarios) + (self.machine is not None)),
            skipped=str(sum(r.outcome in ("skip", "unknown") for r in self.scenarios)),
            time=f"{self.seconds:.3f}",
        )
        for r in self.scenarios:
            case = ET.SubElement(
                suite, "testcase", classname=r.rules[0] if r.rules else "catalogue", name=r.scenario.id
            )
            if r.outcome == "fail":
                f = ET.SubElement(case, "failure", message=f"{len(r.failures)} step(s) failed")
                f.text = "\n".join(f"step {x.step} ({x.operation}): {x.message}" for x in r.failures)
            elif r.outcome in ("skip", "unknown"):
                ET.SubElement(case, "skipped", message=r.reason)
        case = ET.SubElement(suite, "testcase", classname="state-machine", name="history-checker")
        if self.machine is not None:
            ET.SubElement(case, "failure", message="anomalies").text = self.machine
        ET.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)


def conform(
    target: str,
    *,
    scenarios: list[Scenario] | None = None,
    examples: int = 50,
    steps: int = 30,
    epsilon_ms: int = 0,
    save_dir: Path | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    seed: int | None = 0,
    shrink: bool = True,
) -> Report:
    factory = target_factory(target)
    scenarios = scenarios if scenarios is not None else catalogue()
    start = time.perf_counter()
    results = []
    total = len(scenarios) + 1
    for n, s in enumerate(scenarios):
        if progress:
            progress(n, total, s.id)
        results.append(run_scenario(s, factory, epsilon_ms=max(epsilon_ms, 500), salt="conform"))
    if progress:
        progress(len(scenarios), total, "state machine")
    failure = None
    if examples > 0:
        failure = run_machine(
            factory,
            BrokerConfig(),
            max_examples=examples,
            stateful_step_count=steps,
            epsilon_ms=epsilon_ms,
            save_dir=save_dir,
            seed=seed,
        )
    if progress:
        progress(total, total, "done")
    return Report(target, tuple(results), failure, examples, time.perf_counter() - start)


@attrs.frozen
class KillRow:
    mutant: str
    rule: str
    killed: bool
    killed_by: tuple[str, ...]
    machine: bool


def kill_matrix(
    *,
    examples: int = 50,
    names: list[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    scenarios: list[Scenario] | None = None,
) -> list[KillRow]:
    scenarios = scenarios if scenarios is not None else catalogue()
    rows = []
    chosen = names or sorted(MUTANTS)
    for n, name in enumerate(chosen):
        if progress:
            progress(n, len(chosen), name)
        rep = conform(f"mutant:{name}", scenarios=scenarios, examples=examples, shrink=False)
        killers = tuple(r.scenario.id for r in rep.scenarios if r.outcome == "fail")
        rows.append(
            KillRow(
                name,
                MUTANTS[name].rule,
                bool(killers) or rep.machine is not None,
                killers,
                rep.machine is not None,
            )
        )
    if progress:
        progress(len(chosen), len(chosen), "done")
    return rows

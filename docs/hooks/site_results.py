"""Per-rule results on each verified target, for the rule pages and the results page.

Not a hook itself: ``spec_pages.py`` imports it (mkdocs puts a hook's folder on ``sys.path`` while it
loads the hook). Every cell comes from a real run or says "not run":

* **reference**: ``rmqspec.conform.conform("reference", examples=0)`` run at build time (every scenario
  of the catalogue, the spec's examples among them, on the in-process reference model);
* **served reference**: the report ``docs/results/served-reference.json`` when present (written by
  ``rmqspec conform --target remoting://HOST:PORT --report ...`` against ``rmqspec serve``), else not run;
* **mutants**: the kill matrix run at build time on the scenarios of the 4.9 profile (the mutants are
  4.9 semantics), then, for a mutant no scenario kills, the Hypothesis state machine
  (:data:`MACHINE_EXAMPLES` runs);
* **Apache RocketMQ 4.9.4**: the report ``docs/results/rocketmq-4.9.4.json`` when present, else not run.

``RMQSPEC_SITE_RUN=0`` skips the build-time runs (the cells then say so), for quick local previews.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from mkdocs.exceptions import PluginError

if TYPE_CHECKING:
    from rmqspec.conformance.scenarios import Scenario

RESULTS_DIR = "docs/results"  # relative to the project root (the folder of mkdocs.yml)
SERVED_FILE = "served-reference.json"
ROCKETMQ_FILE = "rocketmq-4.9.4.json"
RUN_ENV = "RMQSPEC_SITE_RUN"
MACHINE_EXAMPLES = 30
MUTANT_PROFILE = "4.9"


@attrs.frozen
class RuleOutcome:
    """What one target did on the scenarios covering one rule."""

    counts: Mapping[str, int]  # outcome ("pass", "fail", "skip", "unknown") -> scenarios
    notes: tuple[tuple[str, str, str], ...] = ()  # (scenario id, outcome, why) for every non-pass

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        n = self.total
        passed = self.counts.get("pass", 0)
        bad = {k: v for k, v in self.counts.items() if k != "pass" and v}
        if not bad:
            return f"pass {passed}/{n}"
        if self.counts.get("fail"):
            return f"**FAIL** {self.counts['fail']}/{n}"
        return ", ".join(f"{k} {v}/{n}" for k, v in sorted(bad.items())) + f", pass {passed}/{n}"


@attrs.frozen
class TargetResults:
    key: str
    title: str
    ran: bool
    provenance: str  # Markdown: how the results were obtained, or why there are none
    rules: Mapping[str, RuleOutcome] = attrs.field(factory=dict)
    scenarios: int = 0
    passed: int = 0

    def cell(self, rule_id: str) -> str:
        if not self.ran:
            return "not run"
        got = self.rules.get(rule_id)
        return "no scenario" if got is None else got.summary()


@attrs.frozen
class MutantOutcome:
    name: str
    rule: str
    description: str
    killed: bool
    killed_by: tuple[str, ...]  # scenario IDs that failed on the mutant
    machine: bool | None  # the state machine killed it; None: not run (a scenario killed it first)


@attrs.frozen
class MutantResults:
    ran: bool
    provenance: str
    mutants: tuple[MutantOutcome, ...] = ()

    def breaking(self, rule_id: str) -> list[MutantOutcome]:
        return [m for m in self.mutants if m.rule == rule_id]

    def killed_by_rule(self, scenario_ids: set[str]) -> list[MutantOutcome]:
        return [m for m in self.mutants if scenario_ids & set(m.killed_by)]

    def cell(self, rule_id: str) -> str:
        if not self.ran:
            return "not run"
        mine = self.breaking(rule_id)
        if not mine:
            return "—"
        killed = sum(m.killed for m in mine)
        text = f"{killed}/{len(mine)} killed"
        return text if killed == len(mine) else f"**{text}**"


@attrs.frozen
class Results:
    reference: TargetResults
    served: TargetResults
    mutants: MutantResults
    rocketmq: TargetResults
    scenario_rules: Mapping[str, tuple[str, ...]]  # rule -> scenario IDs of the catalogue covering it
    seconds: float

    def targets(self) -> tuple[TargetResults, ...]:
        return (self.reference, self.served, self.rocketmq)

    def to_json(self) -> dict[str, Any]:
        def target(t: TargetResults) -> dict[str, Any]:
            return {
                "title": t.title,
                "ran": t.ran,
                "provenance": t.provenance,
                "scenarios": t.scenarios,
                "passed": t.passed,
                "rules": {
                    rule: {"counts": dict(o.counts), "notes": [list(n) for n in o.notes]}
                    for rule, o in sorted(t.rules.items())
                },
            }

        return {
            "rmqspec_site_results": 1,
            "targets": {t.key: target(t) for t in self.targets()},
            "mutants": {
                "ran": self.mutants.ran,
                "provenance": self.mutants.provenance,
                "mutants": [attrs.asdict(m) for m in self.mutants.mutants],
            },
        }


# --- collecting -----------------------------------------------------------------------------------------


def _from_report(data: Mapping[str, Any]) -> tuple[dict[str, RuleOutcome], int, int]:
    """Per-rule outcomes from a ``Report.to_json()`` document (``rmqspec conform --report``)."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    notes: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    scenarios = data.get("scenarios")
    if not isinstance(scenarios, list):
        raise ValueError("no 'scenarios' list (expected the JSON of rmqspec conform --report)")
    passed = 0
    for s in scenarios:
        outcome = str(s["outcome"])
        passed += outcome == "pass"
        why = str(s.get("reason") or "")
        failures = s.get("failures") or []
        if failures:
            f = failures[0]
            why = f"step {f.get('step')} ({f.get('operation')}): {f.get('message')}"
        for rule in s.get("rules") or []:
            counts[rule][outcome] += 1
            if outcome != "pass":
                notes[rule].append((str(s["id"]), outcome, why))
    rules = {r: RuleOutcome(dict(c), tuple(notes[r])) for r, c in counts.items()}
    return rules, len(scenarios), passed


def _file_target(root: Path, key: str, title: str, name: str, how: str) -> TargetResults:
    path = root / RESULTS_DIR / name
    rel = f"{RESULTS_DIR}/{name}"
    if not path.is_file():
        return TargetResults(key, title, False, f"Not run: no `{rel}`. {how}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rules, total, passed = _from_report(data)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PluginError(f"site_results: {rel} is not a conform report: {e}") from None
    machine = data.get("machine") or {}
    runs = machine.get("examples", 0)
    verdict = "passed" if machine.get("failure") is None else "**failed**"
    if machine.get("mode") == "workload":
        extra = f"; workload: {runs} operations, history {verdict}" if runs else ""
    else:
        extra = f"; state machine: {runs} runs, {verdict}" if runs else ""
    skipped = (
        total
        - passed
        - sum(
            1 for s in data.get("scenarios", []) if s.get("outcome") != "skip" and s.get("outcome") != "pass"
        )
    )
    if skipped:
        extra += f"; {skipped} scenarios skipped (each says why in the report: mostly settings the broker does not have)"
    prov = (
        f"From `{rel}` (target `{data.get('target', '?')}`): {passed}/{total} scenarios passed{extra}. {how}"
    )
    return TargetResults(key, title, True, prov, rules, total, passed)


def _run_reference(scenarios: list[Scenario]) -> TargetResults:
    from rmqspec.conform import conform

    start = time.perf_counter()
    rep = conform("reference", scenarios=scenarios, examples=0)
    rules, total, passed = _from_report(rep.to_json())
    prov = (
        f'Run at build time: `rmqspec.conform.conform("reference", examples=0)`, every scenario of the '
        f"catalogue on the in-process reference model; {passed}/{total} passed in "
        f"{time.perf_counter() - start:.1f} s."
    )
    return TargetResults("reference", "reference", True, prov, rules, total, passed)


def _run_mutants(catalogue: list[Scenario]) -> MutantResults:
    from rmqspec.conform import kill_matrix, target_factory
    from rmqspec.conformance.machine import run_machine
    from rmqspec.conformance.mutants import MUTANTS
    from rmqspec.reference.config import BrokerConfig

    start = time.perf_counter()
    scenarios = [s for s in catalogue if (s.profile or MUTANT_PROFILE) == MUTANT_PROFILE]
    rows = {r.mutant: r for r in kill_matrix(examples=0, scenarios=scenarios)}
    machine: dict[str, bool] = {}
    for name in (name for name, r in rows.items() if not r.killed):
        failure = run_machine(
            target_factory(f"mutant:{name}"), BrokerConfig(), max_examples=MACHINE_EXAMPLES, shrink=False
        )
        machine[name] = failure is not None
    out = tuple(
        MutantOutcome(
            name,
            MUTANTS[name].rule,
            MUTANTS[name].description,
            r.killed or machine.get(name, False),
            r.killed_by,
            machine.get(name),
        )
        for name, r in sorted(rows.items())
    )
    killed = sum(m.killed for m in out)
    prov = (
        f"Run at build time: the kill matrix of the {len(out)} mutants on the {len(scenarios)} scenarios "
        f"of the {MUTANT_PROFILE} profile (the mutants change 4.9 semantics), then "
        f"{MACHINE_EXAMPLES} state-machine runs for each mutant no scenario killed; {killed}/{len(out)} "
        f"killed in {time.perf_counter() - start:.1f} s."
    )
    return MutantResults(True, prov, out)


def collect(root: Path) -> Results:
    """Run what runs at build time and read the results files of ``root``."""
    start = time.perf_counter()
    from rmqspec.conformance.scenarios import catalogue

    scenarios = catalogue()
    by_rule: dict[str, list[str]] = defaultdict(list)
    for s in scenarios:
        for rule in s.rules:
            by_rule[rule].append(s.id)
    if os.environ.get(RUN_ENV, "1") == "0":
        why = f"Not run: `{RUN_ENV}=0` (a quick preview build)."
        reference = TargetResults("reference", "reference", False, why)
        mutants = MutantResults(False, why)
    else:
        reference = _run_reference(scenarios)
        mutants = _run_mutants(scenarios)
    served = _file_target(
        root,
        "served",
        "served reference (TCP)",
        SERVED_FILE,
        "The reference model behind `rmqspec serve --profile profiles/short-levels.yaml`, driven over the "
        "remoting protocol: `rmqspec conform --target remoting://127.0.0.1:PORT --profile "
        f"profiles/short-levels.yaml --workload-seconds 60 --report {RESULTS_DIR}/{SERVED_FILE}`.",
    )
    rocketmq = _file_target(
        root,
        "rocketmq-4.9.4",
        "Apache RocketMQ 4.9.4",
        ROCKETMQ_FILE,
        "A real broker, started with the settings of `profiles/short-levels.yaml`: `rmqspec conform "
        "--target remoting://HOST:10911 --profile profiles/short-levels.yaml --workload-seconds 60 "
        f"--report {RESULTS_DIR}/{ROCKETMQ_FILE}` (see the guide *Test your broker*).",
    )
    return Results(
        reference,
        served,
        mutants,
        rocketmq,
        {k: tuple(v) for k, v in by_rule.items()},
        time.perf_counter() - start,
    )


# --- rendering ------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _scenario_list(ids: list[str], limit: int = 3) -> str:
    shown = ", ".join(f"`{i}`" for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def render_rule_results(results: Results, rule_id: str, results_page: str) -> list[str]:
    """The results table of one rule page (Markdown lines); ``results_page`` is the link to the matrix."""
    out = [
        f"**Results** ([all rules and targets]({results_page}))",
        "",
        "| target | result | details |",
        "|---|---|---|",
    ]
    for t in (results.reference, results.served):
        out.append(_target_row(t, rule_id))
    out.append(_mutant_row(results, rule_id))
    out.append(_target_row(results.rocketmq, rule_id))
    out.append("")
    return out


def _target_row(t: TargetResults, rule_id: str) -> str:
    if not t.ran:
        return f"| {t.title} | not run | |"
    got = t.rules.get(rule_id)
    if got is None:
        return f"| {t.title} | no scenario | no scenario of the run covers this rule |"
    details = "; ".join(
        f"`{sid}` {outcome}: {why}" if why else f"`{sid}` {outcome}" for sid, outcome, why in got.notes
    )
    return f"| {t.title} | {got.summary()} | {_cell(details)} |"


def _mutant_row(results: Results, rule_id: str) -> str:
    m = results.mutants
    if not m.ran:
        return "| mutants | not run | |"
    parts = []
    for mut in m.breaking(rule_id):
        if mut.killed_by:
            how = f"killed by {_scenario_list(list(mut.killed_by))}"
        elif mut.machine:
            how = f"killed by the state machine ({MACHINE_EXAMPLES} runs); no scenario kills it"
        else:
            how = f"**survived** the scenarios and {MACHINE_EXAMPLES} state-machine runs"
        parts.append(f"`{mut.name}` ({mut.description}): {how}")
    own = set(results.scenario_rules.get(rule_id, ()))
    others = [x.name for x in m.killed_by_rule(own) if x.rule != rule_id]
    if others:
        parts.append("this rule's scenarios also kill " + ", ".join(f"`{n}`" for n in others))
    if not parts:
        return "| mutants | — | no mutant breaks this rule |"
    return f"| mutants | {m.cell(rule_id)} | {_cell('; '.join(parts))} |"


def render_results_page(results: Results, rules: list[tuple[str, str]], link: Any) -> str:
    """The matrix of every rule on every target, like Bowtie's table. ``rules``: (rule ID, title)."""
    out = [
        "# Results by target",
        "",
        "Each rule of the spec, and how each verified target did on the scenarios that cover it: the "
        "spec's own examples and the catalogue. Every cell comes from a real run or says *not run*. "
        "The rule pages show the same row with details; the data is also in [results.json](results.json).",
        "",
        "| target | how the results were obtained |",
        "|---|---|",
        f"| reference | {_cell(results.reference.provenance)} |",
        f"| served reference (TCP) | {_cell(results.served.provenance)} |",
        f"| mutants | {_cell(results.mutants.provenance)} |",
        f"| Apache RocketMQ 4.9.4 | {_cell(results.rocketmq.provenance)} |",
        "",
        "A cell reads *pass n/n* (every scenario covering the rule passed), ***FAIL** k/n*, *skip* (the "
        "target lacks a feature or profile the scenario needs) or *no scenario*. The mutants column counts "
        "the mutants that break the rule and how many of them the suite killed (— when no mutant breaks it).",
        "",
        "| rule | reference | served reference | mutants | Apache RocketMQ 4.9.4 |",
        "|---|---|---|---|---|",
    ]
    for rule_id, _title in rules:
        out.append(
            f"| {link(rule_id)} | {results.reference.cell(rule_id)} | {results.served.cell(rule_id)} "
            f"| {results.mutants.cell(rule_id)} | {results.rocketmq.cell(rule_id)} |"
        )
    survivors = [m for m in results.mutants.mutants if not m.killed]
    if survivors:
        out += ["", "## Mutants that survived", ""]
        out += [f"- `{m.name}` breaks {link(m.rule)}: {m.description}" for m in survivors]
    out.append("")
    return "\n".join(out)

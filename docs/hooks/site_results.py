"""Per-rule results on each verified target, for the rule pages and the results page.

Not a hook itself: ``spec_pages.py`` imports it (mkdocs puts a hook's folder on ``sys.path`` while it
loads the hook). Every cell comes from a real run or says "not run":

* **reference**: ``rmqspec.conform.conform("reference", examples=0)`` run at build time (every scenario
  of the catalogue, the spec's examples among them, on the in-process reference model);
* **mutants**: the kill matrix run at build time (``rmqspec.conform.kill_matrix``): a mutant counts as
  killed only by a failure that names its own rule;
* **every report in ``docs/results/``**: the JSON of ``rmqspec conform --report`` (``make results`` copies
  the latest ``make conform-real`` reports there). :data:`KNOWN` gives titles and the order of the
  columns; a report it does not name is shown after them under its target's name. A report marked
  as history (:data:`HISTORY`) is an earlier hand run, kept and labelled as such.

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
RUN_ENV = "RMQSPEC_SITE_RUN"
MATRIX_JSON = "matrix.json"
# Report files, in the order of the columns, with their titles.
KNOWN = (
    ("apache-4.9.7.json", "Apache RocketMQ 4.9.7"),
    ("apache-5.5.0.json", "Apache RocketMQ 5.5.0"),
    ("apache-proxy-5.5.0.json", "Apache RocketMQ 5.5.0 proxy (gRPC)"),
    ("served-reference.json", "served reference (TCP)"),
    ("rocketmq-4.9.4.json", "Apache RocketMQ 4.9.4 (hand run)"),
)
HISTORY = {
    "rocketmq-4.9.4.json": "history: a hand run of a 4.9.4 broker (2026-11-22, before rmqspec could start "
    "brokers itself), with the suite of that day; kept as it was"
}


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
    facts: Mapping[str, str] = attrs.field(factory=dict)  # date, settings, workload, chaos, time
    plots: tuple[str, ...] = ()  # PNG files in docs/results/plots/<key>/ (the workload's plots)

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
    outcome: str  # killed, wrong-reason, survived
    killed_by: tuple[str, ...]  # what failed naming the mutant's rule

    @property
    def killed(self) -> bool:
        return self.outcome == "killed"


@attrs.frozen
class MutantResults:
    ran: bool
    provenance: str
    mutants: tuple[MutantOutcome, ...] = ()

    def breaking(self, rule_id: str) -> list[MutantOutcome]:
        return [m for m in self.mutants if m.rule == rule_id]

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
    mutants: MutantResults
    reports: tuple[TargetResults, ...]
    scenario_rules: Mapping[str, tuple[str, ...]]  # rule -> scenario IDs of the catalogue covering it
    seconds: float

    def targets(self) -> tuple[TargetResults, ...]:
        return (self.reference, *self.reports)

    def to_json(self) -> dict[str, Any]:
        def target(t: TargetResults) -> dict[str, Any]:
            return {
                "title": t.title,
                "ran": t.ran,
                "provenance": t.provenance,
                "facts": dict(t.facts),
                "scenarios": t.scenarios,
                "passed": t.passed,
                "rules": {
                    rule: {"counts": dict(o.counts), "notes": [list(n) for n in o.notes]}
                    for rule, o in sorted(t.rules.items())
                },
            }

        return {
            "rmqspec_site_results": 2,
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


def _facts(data: Mapping[str, Any]) -> dict[str, str]:
    """Date, settings, counts, workload, chaos and run time of a report, as the results page shows them."""
    settings = data.get("settings") or {}
    broker = settings.get("broker") or {}
    counts = data.get("counts") or {}
    out: dict[str, str] = {}
    if settings.get("date"):
        out["date"] = str(settings["date"])
    if settings.get("profile") or broker:
        levels = broker.get("messageDelayLevel")
        checks = (
            f"transactionTimeOut {broker.get('transactionTimeOut')} ms, transactionCheckInterval "
            f"{broker.get('transactionCheckInterval')} ms, transactionCheckMax {broker.get('transactionCheckMax')}"
            if broker
            else ""
        )
        out["settings"] = "; ".join(
            x
            for x in (
                f"profile `{settings['profile']}`" if settings.get("profile") else "",
                f"levels `{levels}`" if levels else "",
                checks,
                f"epsilon {settings['epsilon_ms']} ms" if "epsilon_ms" in settings else "",
            )
            if x
        )
    if counts:
        out["scenarios"] = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("pass", "fail", "skip", "unknown"))
    workload = data.get("workload") or {}
    machine = data.get("machine") or {}
    if workload:
        out["workload"] = (
            f"{workload.get('operations', 0)} operations in {float(workload.get('seconds', 0)):.0f} s, "
            f"verdict {workload.get('verdict')}"
        )
        if workload.get("restarts"):
            out["chaos"] = (
                f"{workload['restarts']} broker restarts, {workload.get('acknowledged', 0)} messages "
                f"acknowledged, {workload.get('lost', 0)} lost, {workload.get('duplicates_allowed', 0)} "
                "duplicates (allowed by schedule/restart-redelivery)"
            )
    elif machine.get("examples"):
        out["state machine"] = (
            f"{machine['examples']} runs, {'passed' if machine.get('failure') is None else 'failed'}"
        )
    if "seconds" in data:
        out["run time"] = f"{float(data['seconds']):.0f} s"
    return out


def _report_target(path: Path, title: str) -> TargetResults:
    rel = f"{RESULTS_DIR}/{path.name}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if "error" in data and "scenarios" not in data:
            return TargetResults(path.stem, title, False, f"`{rel}`: the run did not start: {data['error']}")
        rules, total, passed = _from_report(data)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PluginError(f"site_results: {rel} is not a conform report: {e}") from None
    facts = _facts(data)
    how = f"From `{rel}` (target `{data.get('target', '?')}`): {passed}/{total} scenarios passed."
    if path.name in HISTORY:
        how = f"{HISTORY[path.name]}. {how}"
    plot_dir = path.parent / "plots" / path.stem
    plots = tuple(sorted(p.name for p in plot_dir.glob("*.png"))) if plot_dir.is_dir() else ()
    return TargetResults(path.stem, title, True, how, rules, total, passed, facts, plots)


def _reports(root: Path) -> tuple[TargetResults, ...]:
    folder = root / RESULTS_DIR
    known = dict(KNOWN)
    # matrix.json is the release matrix (rmqspec/matrix.py, its own page docs/release-matrix.md), not a report
    files = sorted(p for p in folder.glob("*.json") if p.name != MATRIX_JSON) if folder.is_dir() else []
    order = {name: i for i, (name, _title) in enumerate(KNOWN)}
    files.sort(key=lambda p: (order.get(p.name, len(order)), p.name))
    out = []
    for path in files:
        title = known.get(path.name)
        if title is None:
            try:
                title = str(json.loads(path.read_text(encoding="utf-8")).get("target") or path.stem)
            except (OSError, ValueError):
                title = path.stem
        out.append(_report_target(path, title))
    return tuple(out)


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
    from rmqspec.conform import kill_matrix
    from rmqspec.conformance.mutants import MUTANTS

    start = time.perf_counter()
    rows = kill_matrix(examples=0, scenarios=catalogue, workers=2)
    out = tuple(
        MutantOutcome(r.mutant, r.rule, MUTANTS[r.mutant].description, r.outcome, r.killed_by)
        for r in sorted(rows, key=lambda r: r.mutant)
    )
    killed = sum(m.killed for m in out)
    prov = (
        f"Run at build time: the kill matrix of the {len(out)} mutants on the {len(catalogue)} scenarios "
        f"(a mutant is its one change on top of the profile a scenario asks for, and counts as killed only "
        f"by a failure that names its rule); {killed}/{len(out)} killed in {time.perf_counter() - start:.1f} s."
    )
    return MutantResults(True, prov, out)


def collect(root: Path) -> Results:
    """Run what runs at build time and read the reports of ``root``."""
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
    return Results(
        reference,
        mutants,
        _reports(root),
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
        _target_row(results.reference, rule_id),
        _mutant_row(results, rule_id),
    ]
    out += [_target_row(t, rule_id) for t in results.reports]
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
        if mut.killed:
            how = f"killed by {_scenario_list(list(mut.killed_by))}"
        elif mut.outcome == "wrong-reason":
            how = "**killed for the wrong reason** (no failure names this rule)"
        else:
            how = "**survived**"
        parts.append(f"`{mut.name}` ({mut.description}): {how}")
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
        "The rule pages show the same row with details; the data is also in [results.json](results.json). "
        "The real brokers' runs are `make conform-real` (rmqspec starts each pinned Apache RocketMQ "
        "release from Maven Central, runs the whole suite on it and stops it); `make results` copies their "
        "reports here.",
        "",
        "| target | how the results were obtained |",
        "|---|---|",
        f"| reference | {_cell(results.reference.provenance)} |",
        f"| mutants | {_cell(results.mutants.provenance)} |",
    ]
    out += [f"| {t.title} | {_cell(t.provenance)} |" for t in results.reports]
    for t in results.reports:
        if t.facts:
            out += ["", f"## {t.title}", "", "| | |", "|---|---|"]
            out += [f"| {k} | {_cell(v)} |" for k, v in t.facts.items()]
        for png in t.plots:
            out += ["", f"![{png} of {t.title}](results/plots/{t.key}/{png})"]
    out += [
        "",
        "## Per rule",
        "",
        "A cell reads *pass n/n* (every scenario covering the rule passed), ***FAIL** k/n*, *skip* (the "
        "target lacks a feature, a setting or the time the scenario needs; each report says which) or "
        "*no scenario*. The mutants column counts the mutants that break the rule and how many of them "
        "the suite killed for that rule (— when no mutant breaks it).",
        "",
        "| rule | " + " | ".join(["reference", "mutants", *[t.title for t in results.reports]]) + " |",
        "|---|" + "---|" * (2 + len(results.reports)),
    ]
    for rule_id, _title in rules:
        cells = [results.reference.cell(rule_id), results.mutants.cell(rule_id)]
        cells += [t.cell(rule_id) for t in results.reports]
        out.append(f"| {link(rule_id)} | " + " | ".join(cells) + " |")
    not_killed = [m for m in results.mutants.mutants if not m.killed]
    if not_killed:
        out += ["", "## Mutants not killed for their own rule", ""]
        out += [f"- `{m.name}` ({m.outcome}) breaks {link(m.rule)}: {m.description}" for m in not_killed]
    out.append("")
    return "\n".join(out)

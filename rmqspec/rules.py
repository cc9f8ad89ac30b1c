"""Traceability between the spec's rules and the code: ``rmqspec rules``.

Code cites a rule by writing its ID in a comment or a string (``rule: <area>/<case>``, or a value such
as ``rule="<area>/<case>"``). Any token ``<area>/<case>`` whose area is one of the spec's files counts:

* implemented-by: citations in ``reference/**/*.py`` (and in ``adapters/**/*.py`` for the ``wire`` area,
  in ``conformance/**/*.py`` for the ``history`` area, whose rules the suite's checker itself enforces);
* covered-by: citations in ``conformance/**/*.py``, plus the spec's own examples (an example covers its
  rule and the rules of its ``also`` list; the examples run as conformance scenarios);
* unknown: a token of a known area whose ID no spec file defines, an error with file:line.

Citations in ``adapters/`` of other areas are checked for unknown IDs but do not count.
"""

from __future__ import annotations

import ast
import os
import re
from collections import defaultdict
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from rmqspec.conformance.specdoc import Rule, Spec, load_spec

__all__ = [
    "ADAPTERS_DIR",
    "ADAPTER_AREAS",
    "COVERING_DIR",
    "IMPLEMENTING_DIR",
    "SPEC_DIR",
    "SUITE_AREAS",
    "Citation",
    "Location",
    "RuleTrace",
    "Traceability",
    "default_root",
    "find_citations",
    "scan",
]

IMPLEMENTING_DIR = "reference"
COVERING_DIR = "conformance"
ADAPTERS_DIR = "adapters"
ADAPTER_AREAS = frozenset({"wire"})  # areas whose citations in adapters/ count as implemented-by
SUITE_AREAS = frozenset({"history"})  # areas about the suite itself: citations in conformance/ implement them
SPEC_DIR = "spec"


@attrs.frozen(order=True)
class Location:
    path: str  # relative to the scanned root, with forward slashes
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@attrs.frozen(order=True)
class Citation:
    rule_id: str
    location: Location


@attrs.frozen
class RuleTrace:
    rule: Rule
    implemented_by: tuple[Location, ...]
    # Checks that can fail for the rule: the rule's ID as a value in conformance code (an anomaly's or a
    # scenario's rule), not in a comment or a docstring.
    covered_by: tuple[Location, ...]
    examples: tuple[str, ...]  # scenario IDs of the spec examples that cover the rule
    scenarios: tuple[str, ...] = ()  # catalogue scenarios (conformance/catalogue/*.yaml) that name it
    mutants: tuple[Location, ...] = ()  # mutants that break it (conformance/mutants*.py)
    fixtures: tuple[Location, ...] = ()  # bad history fixtures whose expected causes name it
    contracts: tuple[Location, ...] = ()  # CrossHair contracts (rmqspec/contracts_check.py)

    @property
    def id(self) -> str:
        return self.rule.id

    @property
    def implemented(self) -> bool:
        return bool(self.implemented_by)

    @property
    def covered(self) -> bool:
        return bool(self.covered_by or self.examples or self.scenarios)

    @property
    def coverage_count(self) -> int:
        return len(self.covered_by) + len(self.examples) + len(self.scenarios)

    def details(self) -> dict[str, Any]:
        """Everything about the rule, with file:line: ``rmqspec rules ID``."""
        r = self.rule
        return {
            "id": r.id,
            "file": f"{r.file}:{r.line}",
            "versions": r.versions,
            "source": r.source,
            "facts": r.facts,
            "statement": r.statement_markdown,
            "implemented_by": [str(x) for x in self.implemented_by],
            "checks": {
                "examples": list(self.examples),
                "scenarios": list(self.scenarios),
                "checker_and_suite": [str(x) for x in self.covered_by],
                "mutants": [str(x) for x in self.mutants],
                "fixtures": [str(x) for x in self.fixtures],
                "contracts": [str(x) for x in self.contracts],
            },
        }

    def problems(self) -> list[str]:
        out = []
        where = f"{self.rule.file}:{self.rule.line}"
        if not self.implemented:
            dirs = f"{IMPLEMENTING_DIR}/**/*.py"
            if self.rule.area in ADAPTER_AREAS:
                dirs += f" or {ADAPTERS_DIR}/**/*.py"
            if self.rule.area in SUITE_AREAS:
                dirs += f" or {COVERING_DIR}/**/*.py"
            out.append(f"{self.id} ({where}): not implemented: no citation in {dirs}")
        if not self.covered:
            out.append(
                f"{self.id} ({where}): not covered: no example in the spec and no citation in "
                f"{COVERING_DIR}/**/*.py"
            )
        return out


@attrs.frozen
class Traceability:
    root: Path
    spec: Spec
    rules: tuple[RuleTrace, ...]
    unknown: tuple[Citation, ...]  # code citing an ID no spec file defines: an error
    dangling: tuple[Citation, ...] = ()  # spec text naming an ID no spec file defines: a warning

    @property
    def ok(self) -> bool:
        return not self.problems()

    def trace(self, rule_id: str) -> RuleTrace:
        for t in self.rules:
            if t.id == rule_id:
                return t
        raise KeyError(rule_id)

    def problems(self, require_sources: bool | None = None) -> list[str]:
        """Everything ``rmqspec rules --check`` fails on, one line each."""
        out = [p for t in self.rules for p in t.problems()]
        out += [f"{c.location}: unknown rule {c.rule_id} (no spec file defines it)" for c in self.unknown]
        if REQUIRE_SOURCES if require_sources is None else require_sources:
            out += self.source_problems()
        return out

    def source_problems(self) -> list[str]:
        return [p for t in self.rules for p in t.rule.source_problems()]

    def warnings(self) -> list[str]:
        out = [f"{c.location}: the spec names {c.rule_id}, which no spec file defines" for c in self.dangling]
        if not REQUIRE_SOURCES:
            missing = self.source_problems()
            if missing:
                out.append(f"{len(missing)} source problem(s) (`rmqspec rules --check --sources` lists them)")
        return out

    def summary(self) -> dict[str, int]:
        return {
            "rules": len(self.rules),
            "implemented": sum(t.implemented for t in self.rules),
            "covered": sum(t.covered for t in self.rules),
            "examples": sum(len(r.examples) for r in self.spec.rules),
            "unknown_citations": len(self.unknown),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "ok": self.ok,
            "summary": self.summary(),
            "rules": [
                {
                    "id": t.id,
                    "area": t.rule.area,
                    "title": t.rule.title,
                    "versions": t.rule.versions,
                    "facts": t.rule.facts,
                    "source": t.rule.source,
                    "sources": [
                        {
                            "versions": [list(v) for v in c.versions],
                            "path": c.path,
                            "methods": list(c.methods),
                        }
                        for c in t.rule.sources
                    ],
                    "observed": t.rule.observed,
                    "file": t.rule.file,
                    "line": t.rule.line,
                    "implemented_by": [str(loc) for loc in t.implemented_by],
                    "covered_by": [str(loc) for loc in t.covered_by],
                    "examples": list(t.examples),
                }
                for t in self.rules
            ],
            "unknown": [{"rule": c.rule_id, "location": str(c.location)} for c in self.unknown],
            "dangling": [{"rule": c.rule_id, "location": str(c.location)} for c in self.dangling],
            "problems": self.problems(),
            "warnings": self.warnings(),
        }


def default_root() -> Path:
    """The package folder: it holds ``spec``, ``reference``, ``conformance`` and ``adapters``.

    In the source tree these are symlinks to the top-level folders, so the locations reported
    (``reference/put.py:12``) read the same either way.
    """
    return Path(str(resources.files("rmqspec")))


def _python_files(base: Path) -> Iterator[tuple[Path, str]]:
    """``*.py`` under ``base`` (which may be a symlink), as (path, display path relative to its parent)."""
    if not base.is_dir():
        return
    real = base.resolve()
    for dirpath, dirnames, filenames in os.walk(real):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = Path(dirpath) / name
                yield path, f"{base.name}/{path.relative_to(real).as_posix()}"


def find_citations(text: str, pattern: re.Pattern[str], display: str) -> Iterator[Citation]:
    """Every rule-ID token in ``text``, once per (ID, line)."""
    for n, line in enumerate(text.splitlines(), start=1):
        for rule_id in dict.fromkeys(m.group(0) for m in pattern.finditer(line)):
            yield Citation(rule_id, Location(display, n))


def value_citations(text: str, pattern: re.Pattern[str], display: str) -> Iterator[Citation]:
    """Rule IDs in the string values of Python code, not in comments or docstrings: the citations that
    can make a check fail (``Anomaly(..., rule="schedule/due-time")``, a scenario's rules)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    seen: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            for m in pattern.finditer(node.value):
                key = (m.group(0), node.lineno)
                if key not in seen:
                    seen.add(key)
                    yield Citation(m.group(0), Location(display, node.lineno))


def _catalogue_rules(root: Path, known: frozenset[str]) -> dict[str, list[str]]:
    """Rule -> the catalogue scenarios (conformance/catalogue/*.yaml) that name it."""
    out: dict[str, list[str]] = defaultdict(list)
    folder = root / COVERING_DIR / "catalogue"
    if not folder.is_dir():
        return out
    import yaml

    for path in sorted(folder.resolve().glob("*.yaml")):
        try:
            docs = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        except (OSError, yaml.YAMLError):
            continue
        for doc in docs if isinstance(docs, list) else []:
            if isinstance(doc, dict):
                for rule in doc.get("rules") or []:
                    if rule in known:
                        out[rule].append(f"catalogue/{doc.get('name')}")
    return out


def _fixture_causes(root: Path, pattern: re.Pattern[str], known: frozenset[str]) -> dict[str, list[Location]]:
    """Rule -> the bad history fixtures whose header expects a cause of it (tests/fixtures/histories)."""
    out: dict[str, list[Location]] = defaultdict(list)
    folder = root.resolve().parent / "tests" / "fixtures" / "histories" / "bad"
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        try:
            header = path.read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError):
            continue
        for rule in dict.fromkeys(m.group(0) for m in pattern.finditer(header)):
            if rule in known:
                out[rule].append(Location(f"tests/fixtures/histories/bad/{path.name}", 1))
    return out


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


# Files whose citations must name known rules but are not checks: a mutant names the rule it breaks.
NOT_CHECKS = frozenset({"mutants.py"})
# Whether ``rules --check`` fails on a rule whose **Source:** line is missing or does not cover its
# Versions line (docs/spec-format.md). Reported as warnings until every rule carries sources.
REQUIRE_SOURCES = True


def scan(root: Path, spec: Spec | None = None) -> Traceability:
    """Load ``root/spec`` (unless ``spec`` is given) and trace every rule through ``root``'s code.

    Raises :class:`~rmqspec.conformance.specdoc.SpecError` for a missing or malformed spec.
    """
    root = Path(root)
    spec = load_spec(root / SPEC_DIR) if spec is None else spec
    pattern = spec.citation_pattern()
    known = spec.ids

    implemented: dict[str, list[Location]] = defaultdict(list)
    covered: dict[str, list[Location]] = defaultdict(list)
    unknown: list[Citation] = []

    mutants: dict[str, list[Location]] = defaultdict(list)

    def collect(
        dirname: str, sink: dict[str, list[Location]], areas: frozenset[str] | None, values_only: bool = False
    ) -> None:
        for path, display in _python_files(root / dirname):
            counts = path.name not in NOT_CHECKS and not path.name.startswith("mutants")
            text = _read(path)
            for c in find_citations(text, pattern, display):
                if c.rule_id not in known:
                    unknown.append(c)
            if path.name.startswith("mutants") and dirname == COVERING_DIR and sink is covered:
                for c in value_citations(text, pattern, display):
                    mutants[c.rule_id].append(c.location)
                continue
            cited = (
                value_citations(text, pattern, display)
                if values_only
                else find_citations(text, pattern, display)
            )
            for c in cited:
                if c.rule_id in known and counts and (areas is None or c.rule_id.split("/")[0] in areas):
                    sink[c.rule_id].append(c.location)

    collect(IMPLEMENTING_DIR, implemented, None)
    collect(ADAPTERS_DIR, implemented, ADAPTER_AREAS)
    collect(COVERING_DIR, implemented, SUITE_AREAS)
    collect(COVERING_DIR, covered, None, values_only=True)
    scenarios = _catalogue_rules(root, known)
    fixtures = _fixture_causes(root, pattern, known)
    contracts: dict[str, list[Location]] = defaultdict(list)
    contracts_file = root / "contracts_check.py"
    if contracts_file.is_file():
        for c in find_citations(_read(contracts_file), pattern, "rmqspec/contracts_check.py"):
            if c.rule_id in known:
                contracts[c.rule_id].append(c.location)

    by_example: dict[str, list[str]] = defaultdict(list)
    for ex in spec.examples():
        for rule_id in ex.rules:
            by_example[rule_id].append(ex.id)

    dangling: list[Citation] = []
    for f in spec.files:
        try:
            text = _read(f.path)
        except OSError:
            continue
        dangling += [c for c in find_citations(text, pattern, f.file) if c.rule_id not in known]

    traces = tuple(
        RuleTrace(
            rule=r,
            implemented_by=tuple(sorted(set(implemented[r.id]))),
            covered_by=tuple(sorted(set(covered[r.id]))),
            examples=tuple(by_example[r.id]),
            scenarios=tuple(scenarios.get(r.id, ())),
            mutants=tuple(sorted(set(mutants[r.id]))),
            fixtures=tuple(sorted(set(fixtures.get(r.id, ())))),
            contracts=tuple(sorted(set(contracts[r.id]))),
        )
        for r in spec.rules
    )
    return Traceability(
        root=root,
        spec=spec,
        rules=traces,
        unknown=tuple(sorted(set(unknown), key=lambda c: (c.location, c.rule_id))),
        dangling=tuple(dangling),
    )

"""Run CrossHair over the reference model's contracts within a time budget (``make crosshair``).

The contracts are PEP 316 ``pre:`` / ``post:`` conditions in the docstrings of the pure decision
functions of ``reference/`` (today all in ``reference/semantics.py``). With no PATH, every module of
``rmqspec.reference`` that carries such a condition is checked, so a contract added to another module is
picked up without touching this file. This runner lives in the command-line layer, not in ``reference/``,
because it reads files and starts a subprocess; the model itself stays free of I/O.

    python -m rmqspec.contracts_check [--budget SECONDS] [--per-condition SECONDS] [PATH ...]

It runs ``python -m crosshair check --analysis_kind=PEP316 --report_all ...`` (the CrossHair of the
running interpreter) and prints one line per analysed condition, naming its function.

Exit status:
  0  no counterexample: every function with a contract was analysed, each condition confirmed over all
     paths or not refuted within its time limit ("not confirmed");
  1  CrossHair found a counterexample, or a contract that cannot be evaluated (it raises, bad syntax);
  2  nothing was checked: CrossHair could not run or import a module, the overall budget ran out, a
     PATH is missing or holds no contract, or a function with a contract was never analysed.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_BUDGET_S = 60.0
DEFAULT_PER_CONDITION_S = 4.0

# PEP 316 condition lines in a docstring ("post[self.x]:" names the mutated fields).
_CONDITION = re.compile(r"^\s*(pre|post|inv)(\[[^\]]*\])?:")
# CrossHair's machine-readable lines: "<file>:<line>: <severity>: <message>".
_REPORT = re.compile(r"^(?P<file>.+?):(?P<line>\d+): (?P<severity>error|warning|info): (?P<message>.*)$")


@dataclass(frozen=True)
class Contracted:
    """A function (or method) whose docstring carries PEP 316 conditions."""

    file: Path
    qualname: str
    first_line: int  # the ``def`` line, decorators excluded
    last_line: int
    preconditions: int
    postconditions: int


@dataclass(frozen=True)
class Finding:
    """One line of CrossHair's report, attributed to the function that holds the reported line."""

    file: Path
    line: int
    severity: str
    message: str
    function: str | None

    @property
    def outcome(self) -> str:
        if self.severity == "error":
            return "counterexample" if " when calling " in self.message else "error"
        if self.message.startswith("Confirmed"):
            return "confirmed"
        if self.message.startswith("Unable to meet precondition"):
            return "vacuous"
        return "not confirmed"


@dataclass
class Report:
    """What one run checked and found; ``status`` is the exit status described in the module docstring."""

    targets: list[Path]
    contracted: list[Contracted]
    findings: list[Finding] = field(default_factory=list)
    other_output: list[str] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    seconds: float = 0.0

    def count(self, outcome: str) -> int:
        return sum(1 for f in self.findings if f.outcome == outcome)

    @property
    def violations(self) -> list[Finding]:
        return [f for f in self.findings if f.outcome in ("counterexample", "error")]

    @property
    def unanalysed(self) -> list[Contracted]:
        seen = {(f.file, f.function) for f in self.findings}
        return [c for c in self.contracted if (c.file, c.qualname) not in seen]

    @property
    def status(self) -> int:
        if self.violations:
            return 1
        if self.timed_out or self.returncode != 0 or not self.findings or self.unanalysed:
            return 2
        return 0


# --- finding the contracts ---------------------------------------------------------------------------------


def contracted_functions(path: Path) -> list[Contracted]:
    """Functions and methods of ``path`` whose docstring holds ``pre:`` / ``post:`` / ``inv:`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Contracted] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(child, clean=False) or ""
                kinds = [m[1] for m in map(_CONDITION.match, doc.splitlines()) if m]
                if kinds:
                    end = child.end_lineno or child.lineno
                    pre, post = kinds.count("pre"), kinds.count("post")
                    found.append(Contracted(path, prefix + child.name, child.lineno, end, pre, post))

    walk(tree, "")
    return found


def has_class_invariant(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            doc = ast.get_docstring(node, clean=False) or ""
            if any(_CONDITION.match(line) for line in doc.splitlines()):
                return True
    return False


def reference_dir() -> Path:
    """The directory of the ``rmqspec.reference`` package (importing it does no I/O)."""
    import rmqspec.reference as reference

    return Path(reference.__file__).resolve().parent


def default_targets() -> list[Path]:
    """Every module of ``rmqspec.reference`` with at least one contract."""
    return [
        p for p in sorted(reference_dir().glob("*.py")) if contracted_functions(p) or has_class_invariant(p)
    ]


def _function_at(contracted: list[Contracted], file: Path, line: int) -> str | None:
    """The innermost contracted function of ``file`` whose lines include ``line``."""
    best: Contracted | None = None
    for c in contracted:
        inside = c.file == file and c.first_line <= line <= c.last_line
        if inside and (best is None or c.first_line >= best.first_line):
            best = c
    return None if best is None else best.qualname


def _short(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# --- running CrossHair -------------------------------------------------------------------------------------


def crosshair_command(targets: list[Path], per_condition: float, per_path: float) -> list[str]:
    return [
        sys.executable,
        "-m",
        "crosshair",
        "check",
        "--analysis_kind=PEP316",
        "--report_all",
        f"--per_condition_timeout={per_condition:g}",
        f"--per_path_timeout={per_path:g}",
        *map(str, targets),
    ]


def check(
    targets: list[Path],
    budget: float = DEFAULT_BUDGET_S,
    per_condition: float = DEFAULT_PER_CONDITION_S,
    per_path: float | None = None,
    echo: bool = True,
) -> Report:
    """Run CrossHair over ``targets`` (resolved files with contracts), stopping it after ``budget`` s."""
    targets = [t.resolve() for t in targets]
    contracted = [c for t in targets for c in contracted_functions(t)]
    report = Report(targets, contracted)
    path_limit = per_path if per_path is not None else max(0.5, per_condition / 2)
    cmd = crosshair_command(targets, per_condition, path_limit)
    out = sys.stdout

    def say(text: str) -> None:
        if echo:
            print(text, file=out, flush=True)

    say(
        f"crosshair: {len(contracted)} functions with {sum(c.postconditions for c in contracted)} "
        f"postconditions and {sum(c.preconditions for c in contracted)} preconditions in "
        f"{', '.join(_short(t) for t in targets)}"
    )
    say(f"crosshair: python {' '.join(cmd[1:])}  (budget {budget:g} s)")

    def handle(raw: str) -> None:
        line = raw.rstrip("\n")
        m = _REPORT.match(line)
        if m is None:
            if line.strip():
                report.other_output.append(line)
                say(f"  | {line}")
            return
        file = Path(m["file"]).resolve()
        lineno = int(m["line"])
        finding = Finding(file, lineno, m["severity"], m["message"], _function_at(contracted, file, lineno))
        report.findings.append(finding)
        where = f"{_short(file)}:{lineno}"
        name = finding.function or "?"
        text = finding.message if finding.severity == "error" else finding.outcome
        mark = {"counterexample": "FAIL", "error": "FAIL", "vacuous": "warn"}.get(finding.outcome, "ok")
        say(f"  {mark:4} {where:32} {name:28} {text}")

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
    except OSError as e:
        report.other_output.append(f"cannot start CrossHair: {e}")
        say(f"crosshair: cannot start: {e}")
        return report

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            handle(raw)

    reader = threading.Thread(target=pump, name="crosshair-output", daemon=True)
    reader.start()
    try:
        report.returncode = proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        report.timed_out = True
        proc.kill()
        report.returncode = proc.wait()
    reader.join()
    report.seconds = time.perf_counter() - start
    for line in summary(report, budget):
        say(line)
    return report


def summary(report: Report, budget: float) -> list[str]:
    """The closing lines: counts, then why the run failed, if it did."""
    lines = [
        f"crosshair: {len(report.findings)} conditions analysed in {report.seconds:.1f} s: "
        f"{report.count('confirmed')} confirmed over all paths, {report.count('not confirmed')} not confirmed "
        f"(no counterexample within the time limit), {report.count('vacuous')} with an unmeetable "
        f"precondition, {report.count('counterexample')} counterexamples, {report.count('error')} errors"
    ]
    for f in report.violations:
        lines.append(f"crosshair: VIOLATION in {f.function or '?'} ({_short(f.file)}:{f.line}): {f.message}")
    if report.timed_out:
        lines.append(
            f"crosshair: the {budget:g} s budget ran out before CrossHair finished; it reports only at the "
            "end, so nothing is known (raise --budget or lower --per-condition)"
        )
    elif report.returncode not in (0, 1) or (report.returncode == 1 and not report.violations):
        lines.append(f"crosshair: CrossHair failed (exit status {report.returncode}); its output is above")
    elif not report.findings:
        lines.append("crosshair: CrossHair reported nothing: no condition was analysed")
    if not report.timed_out:
        for c in report.unanalysed:
            lines.append(
                f"crosshair: {c.qualname} ({_short(c.file)}:{c.first_line}) has a contract but was not analysed"
            )
    verdict = {0: "contracts hold", 1: "contract violated", 2: "check incomplete"}[report.status]
    lines.append(f"crosshair: {verdict} (exit {report.status})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rmqspec.contracts_check",
        description="Check the PEP 316 contracts of reference/ with CrossHair within a time budget.",
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="Python files to check (default: every module of rmqspec.reference with a contract)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"overall wall-clock budget in seconds; CrossHair is stopped when it runs out (default {DEFAULT_BUDGET_S:g})",
    )
    parser.add_argument(
        "--per-condition",
        type=float,
        default=DEFAULT_PER_CONDITION_S,
        help=f"CPU seconds CrossHair spends on one condition (default {DEFAULT_PER_CONDITION_S:g})",
    )
    parser.add_argument(
        "--per-path",
        type=float,
        default=None,
        help="CPU seconds CrossHair spends on one execution path (default: half of --per-condition, at least 0.5)",
    )
    args = parser.parse_args(argv)
    if args.budget <= 0 or args.per_condition <= 0 or (args.per_path is not None and args.per_path <= 0):
        parser.error("--budget, --per-condition and --per-path must be positive")
    targets: list[Path] = args.paths or default_targets()
    missing = [t for t in targets if not t.is_file()]
    if missing:
        print(f"crosshair: no such file: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    empty = [t for t in targets if not contracted_functions(t) and not has_class_invariant(t)]
    if not targets or empty:
        what = ", ".join(map(str, empty)) if empty else "reference/"
        print(
            f"crosshair: no PEP 316 contract (pre:/post:/inv:) in {what}: nothing to check", file=sys.stderr
        )
        return 2
    return check(targets, args.budget, args.per_condition, args.per_path).status


if __name__ == "__main__":
    sys.exit(main())

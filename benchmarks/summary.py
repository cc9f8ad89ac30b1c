"""The one table ``make bench`` ends with: every measure of issue 15 beside its goal, "met" or "NOT met".

Each benchmark ``record``s its lines as it measures; ``table`` prints them (``python -m benchmarks``
prints it last, and ``--markdown FILE`` writes it for docs/performance.md). A goal that was not
measured in this run (``--only``, ``--quick``) says so instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    measure: str
    value: str
    goal: str
    met: bool | None  # None: not measured in this run
    note: str = ""
    full_size: bool = True  # measured at the size the goal names

    @property
    def status(self) -> str:
        if self.met is None:
            return "—"
        if not self.met:
            return "NOT met"
        return "met" if self.full_size else "met at the smaller size only"


LINES: list[Line] = []

# The table, in its order: the key of each line and its goal, so that a line not measured in a
# run still shows in the table.
GOALS: dict[str, tuple[str, str]] = {
    "keyed": ("keyed trace checker, one process", "≥ 1 M rows/s per core"),
    "whole": ("whole-history checker, one process", "≥ 100 k rows/s per core"),
    "growth": ("one long history, whole mode: cost per event vs 10^3 events", "≤ 1.5× (at 10^6 events)"),
    "spark-keyed": (
        "Spark keyed: local[2] vs local[1]; vs one process",
        "≥ 1.7× local[1] and > 1× one process (at ≥ 20 M rows)",
    ),
    "spark-whole": ("Spark whole: local[2] vs local[1]", "≥ 1.7× (at ≥ 20 M rows)"),
    "cluster": (
        "Spark standalone cluster (1 master, 1 worker, loopback)",
        "rows read = checked, verdict = local run's",
    ),
    "model": ("model cycle at 10^6 stored vs 10^3", "≤ 1.5×"),
    "machine": ("state machine vs raw Hypothesis", "≥ 5,000 steps/s and ≥ 0.5 of raw"),
    "shrink": ("shrunk counterexample, median over killed mutants", "≤ 10 operations"),
    "adversary": (
        "adversary: perturbed reference histories (issue 23)",
        "every one rejected naming its rule, ≥ 10,000 a run",
    ),
    "faultgen": (
        "generated brokers: diagnosis fully right (issue 25)",
        "≥ 95 % of 200 combinations, seeds 1-3",
    ),
}
_BY_KEY: dict[str, Line] = {}


def record(key: str, value: str, met: bool | None, note: str = "", full_size: bool = True) -> None:
    measure, goal = GOALS[key]
    line = Line(measure, value, goal, met, note, full_size)
    _BY_KEY[key] = line
    LINES.append(line)


def lines() -> list[Line]:
    return [_BY_KEY.get(k) or Line(m, "not measured in this run", g, None) for k, (m, g) in GOALS.items()]


def table(markdown: bool = False) -> str:
    rows = [(ln.measure, ln.value, ln.goal, ln.status) for ln in lines()]
    notes = [f"{ln.measure}: {ln.note}" for ln in lines() if ln.note]
    if markdown:
        out = ["| measure | measured | goal | |", "|---|---|---|---|"]
        out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
        return "\n".join(out + ([""] + [f"- {n}" for n in notes] if notes else []))
    widths = [max(len(r[i]) for r in [("measure", "measured", "goal", ""), *rows]) for i in range(4)]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    out = [fmt.format("measure", "measured", "goal", ""), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*r).rstrip() for r in rows]
    return "\n".join(out + [f"  note: {n}" for n in notes])

"""Diagnosis of generated brokers (issue 25): ``rmqspec faults --random N --seed S`` for three seeds, the
share of combinations whose diagnosis is fully right (every fault named, no false cause, the most
blocking first), and the ones it gets wrong, listed. Each combination is the whole suite over TCP against
the served model with 1-3 faults, mostly waiting on the wall clock: several run at once."""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks import summary
from rmqspec.conform import ComboRunner, combo_matrix
from rmqspec.conformance.faultgen import score

PROFILE = Path(__file__).resolve().parents[1] / "profiles" / "short-levels.yaml"
SEEDS = (1, 2, 3)
GOAL = 0.95


def main(quick: bool) -> None:
    n = 3 if quick else 200
    seeds = SEEDS[:1] if quick else SEEDS
    print(f"== fault generator: {n} combinations for each of seeds {', '.join(map(str, seeds))} ==")
    runner = ComboRunner(profile=PROFILE, workload_seconds=5.0)
    specs = [f"{s}:{i}" for s in seeds for i in range(n)]
    t0 = time.perf_counter()
    grades = combo_matrix(runner, specs, workers=6)
    took = time.perf_counter() - t0
    sc = score(grades)
    for g in grades:
        if not g.right:
            why = g.error or (f"missed {', '.join(g.missed)}" if g.missed else "") + (
                f" false {', '.join(g.false_causes)}" if g.false_causes else ""
            ) + ("" if g.first_ok else f" first {g.first_rule}")
            print(f"  wrong: {g.combination}: {why.strip()}")
    share = float(sc["share"])
    print(f"fully right: {sc['right']}/{sc['combinations']} ({100 * share:.1f} %) in {took:.0f} s")
    summary.record(
        "faultgen",
        f"{100 * share:.1f} % of {sc['combinations']} fully right",
        share >= GOAL,
        full_size=not quick,
    )

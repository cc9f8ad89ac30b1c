"""The adversary (issue 23): perturbations of accepted histories, the rejection rate by kind, and the
checker's speed on them against the unperturbed histories (the baseline, measured in the same run).

Sources are the reference's own histories (seeded, on a logical clock), so the run is reproducible.
"""

from __future__ import annotations

import collections
import random
import time

from benchmarks import summary
from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.adversary import KINDS, perturb
from rmqspec.conformance.checker import check_history
from rmqspec.conformance.trace_gen import TRACE_CONFIG, generate_history

SEEDS = range(8)
EVENTS = 150


def main(quick: bool) -> None:
    total = 1_000 if quick else 10_000
    print(f"== adversary: {total} perturbations of the reference's histories ==")
    sources = [generate_history(s, EVENTS, make_target=InProcessTarget) for s in SEEDS]
    t0 = time.perf_counter()
    for ev in sources:
        check_history(ev, TRACE_CONFIG, epsilon_ms=100)
    base = sum(len(ev) for ev in sources) / (time.perf_counter() - t0)
    kinds = sorted(KINDS)
    counts: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in kinds}
    rows = 0
    n = seed = 0
    t1 = time.perf_counter()
    while n < total:
        ev = sources[seed % len(sources)]
        kind = kinds[(seed // len(sources)) % len(kinds)]
        got = perturb(ev, kind, random.Random(seed))
        seed += 1
        if got is None:
            continue
        n += 1
        events, _ = got
        rows += len(events)
        v = check_history(events, TRACE_CONFIG, epsilon_ms=100)
        named = {a.rule for a in v.anomalies}
        counts[kind]["right" if named & set(KINDS[kind].rules) else "other" if named else "accepted"] += 1
    speed = rows / (time.perf_counter() - t1)
    print(f"{'kind':20} {'n':>6} {'rejected, its rule':>19} {'another rule':>13} {'accepted':>9}")
    for k in kinds:
        c = counts[k]
        m = sum(c.values())
        print(f"{k:20} {m:6} {100 * c['right'] / max(m, 1):18.1f}% {c['other']:13} {c['accepted']:9}")
    right = sum(c["right"] for c in counts.values())
    accepted = sum(c["accepted"] for c in counts.values())
    print(
        f"rejected naming the rule: {right}/{n} ({100 * right / n:.2f} %); accepted: {accepted}; checker "
        f"{speed:,.0f} rows/s on perturbed histories, {speed / base:.2f}x its speed on the unperturbed ones"
    )
    summary.record(
        "adversary",
        f"{100 * right / n:.2f} % of {n} rejected naming the rule, {accepted} accepted",
        right == n,
        full_size=not quick,
    )

"""Conformance throughput and counterexample size (issue 4).

- steps/s of the state machine against the in-process reference, history checker included, beside the
  raw rate of Hypothesis driving a machine with the same shape whose rules do nothing (same run);
- the median number of operations in the shrunk counterexample of each mutant the state machine kills.
"""

from __future__ import annotations

import statistics
import time

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from benchmarks.summary import record
from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.checker import Verdict
from rmqspec.conformance.machine import run_machine
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model


class _Raw(RuleBasedStateMachine):
    """Hypothesis' own overhead: the same number of rules and draws, doing nothing."""

    steps = 0

    @rule(a=st.sampled_from(range(6)), b=st.integers(0, 1), c=st.sampled_from("abc"))
    def r1(self, a: int, b: int, c: str) -> None:
        _Raw.steps += 1

    @rule(a=st.integers(0, 1), b=st.sampled_from(range(8)))
    def r2(self, a: int, b: int) -> None:
        _Raw.steps += 1

    @rule(a=st.sampled_from(range(10)))
    def r3(self, a: int) -> None:
        _Raw.steps += 1

    @rule(d=st.data())
    def r4(self, d: st.DataObject) -> None:
        d.draw(st.integers(0, 3))
        _Raw.steps += 1


def _settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def steps_per_second(examples: int = 200, steps: int = 50) -> tuple[float, float, int]:
    counted = [0]

    def note(v: Verdict, invokes: int) -> None:
        counted[0] += invokes

    t = time.perf_counter()
    failure = run_machine(
        lambda c: InProcessTarget(Model(c)),
        BrokerConfig(),
        max_examples=examples,
        stateful_step_count=steps,
        on_verdict=note,
        seed=1,
    )
    suite = time.perf_counter() - t
    assert failure is None, failure
    _Raw.steps = 0
    t = time.perf_counter()
    run_state_machine_as_test(_Raw, settings=_settings(examples, steps))
    raw = time.perf_counter() - t
    return counted[0] / suite, _Raw.steps / raw, counted[0]


def _shrunk_length(name: str, examples: int) -> int | None:
    """Operations in the shrunk counterexample of one mutant, or None when the machine does not kill it."""
    mutant = MUTANTS[name]
    last = [0]

    def note(v: Verdict, invokes: int) -> None:
        if v.status == "fail" or v.anomalies:
            last[0] = invokes

    def target(cfg: BrokerConfig) -> InProcessTarget:
        return InProcessTarget(mutant.model(cfg))

    failure = run_machine(
        target,
        BrokerConfig(),
        max_examples=examples,
        stateful_step_count=50,
        on_verdict=note,
        seed=1,
        shrink=True,
    )
    return None if failure is None else last[0]


def shrunk_lengths(names: list[str] | None = None, examples: int = 100) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in names or sorted(MUTANTS):
        length = _shrunk_length(name, examples)
        if length is not None:
            out[name] = length
    return out


def main(quick: bool = False) -> None:
    sps, raw, n = steps_per_second(60 if quick else 200)
    print("== conformance state machine vs raw Hypothesis (same run) ==")
    print(f"suite: {sps:10.0f} steps/s  ({n} operations, history checker after every step)")
    print(f"raw:   {raw:10.0f} steps/s  (a machine of the same shape doing nothing)")
    print(f"ratio: {sps / raw:10.2f}   (goal: >= 5000 steps/s and >= 0.5 of raw)")
    record("machine", f"{sps:,.0f} vs {raw:,.0f} steps/s ({sps / raw:.2f})", sps >= 5000 and sps / raw >= 0.5)
    t = time.perf_counter()
    names = sorted(MUTANTS)[:8] if quick else None
    lengths = shrunk_lengths(names)
    print(
        f"== shrunk counterexamples ({len(lengths)} mutants killed by the state machine, "
        f"{time.perf_counter() - t:.0f} s) =="
    )
    for name, length in sorted(lengths.items(), key=lambda kv: kv[1]):
        print(f"  {name:32} {length:4d} operations")
    if lengths:
        median = statistics.median(lengths.values())
        print(f"median: {median} operations (goal: <= 10)")
        of = f" (the first {len(names)} mutants)" if names else ""
        record(
            "shrink", f"{median:g} operations, {len(lengths)} mutants{of}", median <= 10, full_size=not names
        )


if __name__ == "__main__":
    main()

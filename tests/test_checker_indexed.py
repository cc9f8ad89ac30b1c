"""The checker's indexes (conformance/checker/index.py) change its speed, never its verdict.

A differential test: every history is judged twice, with the indexes and with the exhaustive walks they
replace (``indexed=False``), and the two verdicts must be equal in full (validity, every anomaly with
its rule, event, message and cause, the hazards and the counts of checks). The histories: the
reference's traces, every mutant's traces, longer histories where the FIFO index has long levels to
search, and every history fixture (good and bad).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.checker import Verdict, check_history
from rmqspec.conformance.history import Event, load
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.trace_gen import TRACE_CONFIG, generate_history
from rmqspec.reference.config import BrokerConfig

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "histories").glob("*/*.jsonl"))


def both(
    events: list[Event], config: BrokerConfig = TRACE_CONFIG, eps: int = 0, phase: int | None = None
) -> Verdict:
    """The verdict with the indexes, after checking it equals the one without."""
    fast = check_history(events, config, epsilon_ms=eps, check_phase_ms=phase, indexed=True)
    slow = check_history(events, config, epsilon_ms=eps, check_phase_ms=phase, indexed=False)
    assert fast == slow
    return fast


@pytest.mark.parametrize("seed", range(4))
def test_reference_traces(seed: int) -> None:
    v = both(generate_history(seed, 400, make_target=InProcessTarget))
    assert v.status == "pass"
    assert v.checked["order"] > 0  # the FIFO check ran


@pytest.mark.slow
def test_long_reference_history() -> None:
    """Levels with thousands of copies: the index, not the walk, decides almost every FIFO check."""
    v = both(generate_history(99, 6000, make_target=InProcessTarget))
    assert v.status == "pass" and v.checked["order"] > 10_000


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_traces(mutant: str) -> None:
    for seed in range(2):
        both(generate_history(seed, 250, mutant=mutant, make_target=InProcessTarget))


def test_a_fifo_violation_is_found_the_same_way() -> None:
    """Mutants that break per-level order: the index must hand those copies to the exhaustive walk."""
    found = 0
    for mutant in ("dispatch-reversed", "level-ordered-by-deliver-time", "fifo-across-levels"):
        for seed in range(4):
            v = both(generate_history(seed, 400, mutant=mutant, make_target=InProcessTarget))
            found += sum(a.name == "fifo-violation" for a in v.anomalies)
    assert found > 0


@pytest.mark.parametrize("path", FIXTURES, ids=[f"{p.parent.name}-{p.stem}" for p in FIXTURES])
def test_history_fixtures(path: Path) -> None:
    meta, events = load(path)
    both(events, BrokerConfig(**meta.get("config", {})), meta["epsilon_ms"], meta.get("check_phase_ms", 0))

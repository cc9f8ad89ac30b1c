"""The wall-clock workload (Jepsen style): concurrent clients, one timeline, the whole history checked."""

from __future__ import annotations

import pytest

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.workload import run_workload
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

# The short configuration of facts §10: level n = n seconds, checks every 5 s after 3 s, at most 3.
SHORT = BrokerConfig(
    " ".join(f"{i}s" for i in range(1, 19)),
    transaction_timeout_ms=3000,
    transaction_check_interval_ms=5000,
    transaction_check_max=3,
)


@pytest.mark.slow
def test_served_reference_passes_a_concurrent_workload() -> None:
    result = run_workload(WallClockTarget(Model(SHORT)), seconds=6, epsilon_ms=500)
    assert result.verdict.status == "pass", result.verdict.anomalies[:5]
    assert result.operations > 50
    assert result.verdict.consumed == result.verdict.total == len(result.events)


@pytest.mark.slow
def test_late_mutant_fails_the_workload() -> None:
    result = run_workload(WallClockTarget(MUTANTS["one-tick-late"].model(SHORT)), seconds=4, epsilon_ms=50)
    assert result.verdict.status == "fail"
    assert {a.name for a in result.verdict.anomalies} >= {"late-delivery"}

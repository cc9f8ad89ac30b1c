"""The spec's examples are tests: each one runs against the reference model (CommonMark-style)."""

from __future__ import annotations

import pytest

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.scenario_run import run_scenario
from rmqspec.conformance.scenarios import Scenario, spec_scenarios
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

SCENARIOS = spec_scenarios()


def _target(cfg: BrokerConfig) -> InProcessTarget:
    return InProcessTarget(Model(cfg))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_spec_example(scenario: Scenario) -> None:
    result = run_scenario(scenario, _target, salt="spec")
    assert result.outcome == "pass", (
        "\n".join(f"step {f.step} ({f.operation}): {f.message}" for f in result.failures) or result.reason
    )


def test_spec_has_examples() -> None:
    assert len(SCENARIOS) >= 30

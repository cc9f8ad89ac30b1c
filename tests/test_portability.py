"""Every scenario runs on any declared configuration (issue 12 item 4), checked on the reference model.

A real broker has its own settings and its own phase: the transaction check service starts when the
broker started, not at a multiple of the interval. So every scenario of the catalogue must hold on the
model under each profile of profiles/ and at several check-service phases, with the moments of checks
judged as on a wall clock (not against the phase of the logical clock). A scenario that fails here would
fail on a correct broker: a portability bug of the scenario, not of the broker.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from rmqspec.adapters.inprocess import EPOCH, InProcessTarget
from rmqspec.adapters.remoting.profile import load_profile
from rmqspec.conformance.contract import Feature
from rmqspec.conformance.scenario_run import _Runner
from rmqspec.conformance.scenarios import Scenario, catalogue
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

PROFILES = sorted((Path(__file__).resolve().parents[1] / "profiles").glob("*.yaml"))
SCENARIOS = catalogue()


def _config(path: Path) -> BrokerConfig:
    return load_profile(path, "127.0.0.1:10911").config


def run_at_phase(scenario: Scenario, base: BrokerConfig, phase: int) -> list[str]:
    """The problems of ``scenario`` on the model under ``base`` with the check service's first run
    ``phase`` ms after the scenario starts (empty: it holds)."""
    cfg = scenario.broker_config(base)
    target = InProcessTarget(attrs.evolve(Model(cfg), check_phase_ms=EPOCH + phase))
    runner = _Runner(
        scenario,
        target,
        0,
        "portability",
        None,
        exact_check_times=phase == 0 and cfg == scenario.broker_config(),
    )
    result = runner.run()
    if result.outcome == "skip":
        return []
    return [f"step {f.step} ({f.operation}): {f.message}" for f in result.failures] + (
        [result.reason] if result.outcome not in ("pass", "fail") else []
    )


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_every_scenario_holds_under_every_profile_and_phase(profile: Path) -> None:
    base = _config(profile)
    broken: dict[str, list[str]] = {}
    for s in SCENARIOS:
        cfg = s.broker_config(base)
        interval = cfg.transaction_check_interval_ms
        phases = (
            [0] if Feature.CHECK_PHASE in s.features else [0, interval // 3, 2 * interval // 3, interval - 1]
        )
        for phase in phases:
            problems = run_at_phase(s, base, phase)
            if problems:
                broken.setdefault(s.id, []).append(f"phase {phase}: {problems[0]}")
    assert not broken, "\n".join(f"{sid}: {'; '.join(ps)}" for sid, ps in sorted(broken.items()))

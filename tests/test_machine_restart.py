"""The state machine restarts its target, an orderly stop or a crash, and the checker judges the history
across each restart (rule: transaction/check-restart, schedule/restart-redelivery, timer/restart)."""

from __future__ import annotations

import collections

import pytest

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conform import CommandLineTargets
from rmqspec.conformance.checker import Verdict
from rmqspec.conformance.contract import restart_ways
from rmqspec.conformance.history import RecordingTarget
from rmqspec.conformance.kill import kill_one
from rmqspec.conformance.machine import run_machine
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.scenarios import catalogue
from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.model import Model

RESTART_SCENARIO = "transaction/check-restart#a-record-passed-before-the-last-write-is-not-checked-again"


def test_a_recorded_restart_says_how_the_broker_stopped() -> None:
    target = RecordingTarget(InProcessTarget())
    assert restart_ways(target.target)
    target.restart(graceful=True)
    target.restart(graceful=False)
    target.restart()
    assert [(e.type, e.value) for e in target.events] == [
        ("invoke", {"graceful": True}),
        ("ok", {"graceful": True}),
        ("invoke", {"graceful": False}),
        ("ok", {"graceful": False}),
        ("invoke", {}),
        ("ok", {}),
    ]


@pytest.mark.parametrize("profile", [Profile.V4_9, Profile.V5])
def test_the_reference_passes_the_machine_across_orderly_and_crash_restarts(profile: Profile) -> None:
    ways: collections.Counter[str] = collections.Counter()
    verdicts: list[Verdict] = []

    class Counting(InProcessTarget):
        def restart(self, config: BrokerConfig | None = None, graceful: bool = False) -> None:
            ways["orderly" if graceful else "crash"] += 1
            super().restart(config, graceful)

    message = run_machine(
        lambda c: Counting(Model(c), config=c),
        BrokerConfig(profile=profile),
        max_examples=100,
        seed=1,
        on_verdict=lambda v, _ops: verdicts.append(v),
    )
    assert message is None, message
    assert ways["orderly"] > 0 and ways["crash"] > 0, ways
    assert verdicts and all(v.passed for v in verdicts)


def test_a_broker_that_never_writes_its_check_progress_is_killed_for_check_restart() -> None:
    """The mutant reads the half queue from its start after a restart: the checked record of a transaction
    ended by its check's answer is checked again, which the example's no-check-after-the-restart fails."""
    scenarios = [s for s in catalogue() if s.id == RESTART_SCENARIO]
    assert scenarios and scenarios[0].rules == ("transaction/check-restart",)
    row = kill_one(CommandLineTargets(), MUTANTS["check-progress-not-written"], scenarios, examples=0)
    assert (row.outcome, row.killed_by) == ("killed", (RESTART_SCENARIO,))

"""The kill matrix judges why a mutant failed: killed for its own rule, for the wrong reason, or not at all."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conform import CommandLineTargets, TargetSpecError, target_factory
from rmqspec.conformance.contract import Response, Target
from rmqspec.conformance.kill import Failure, kill_one, outcome, summary
from rmqspec.conformance.mutants import EXEMPT, MUTANTS, Mutant
from rmqspec.conformance.scenarios import catalogue
from rmqspec.conformance.specdoc import load_spec
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Op, Send

DOCS = Path(__file__).resolve().parents[1] / "docs" / "mutation.md"


def test_a_kill_counts_only_when_a_failure_names_the_rule_or_a_declared_symptom() -> None:
    rules = ("put/delay-clamp", "schedule/due-time")
    assert (
        outcome([Failure("s1", ("put/queue-offset",)), Failure("s2", ("put/delay-clamp",))], rules)
        == "killed"
    )
    assert outcome([Failure("state machine", ("schedule/due-time",))], rules) == "killed"
    assert outcome([Failure("s1", ("put/queue-offset",))], rules) == "wrong-reason"
    assert outcome([], rules) == "survived"


def test_a_mutant_caught_only_by_other_rules_is_killed_for_the_wrong_reason() -> None:
    """The no-clamp bug labelled with a rule none of its failures names: caught, but not for that rule."""
    real = MUTANTS["no-clamp"]
    mislabelled = Mutant("mislabelled", "sendback/ladder", real.description, real.semantics)
    scenarios = [s for s in catalogue() if s.id.startswith("put/delay-clamp")]
    row = kill_one(CommandLineTargets(), mislabelled, scenarios, examples=0)
    assert row.outcome == "wrong-reason"
    assert row.killed_by == () and {f.rules[0] for f in row.wrong} == {"put/delay-clamp"}
    right = kill_one(CommandLineTargets(), real, scenarios, examples=0)
    assert right.outcome == "killed" and right.killed_by


class _NoQueueOffset(InProcessTarget):
    """The reference, its send answers without queueOffset (wire/send-headers)."""

    def execute(self, op: Op) -> Response:
        r = super().execute(op)
        if isinstance(op, Send):
            r = attrs.evolve(r, fields={k: v for k, v in r.fields.items() if k != "queue_offset"})
        return r


class _Raising(InProcessTarget):
    """A target whose every operation raises what no target may: the suite breaks on it."""

    def execute(self, op: Op) -> Response:
        raise RuntimeError("boom")


class _Targets(CommandLineTargets):
    def __init__(self, kind: type[InProcessTarget]) -> None:
        self.kind = kind

    def in_process(self, mutant: Mutant, config: BrokerConfig) -> Target:
        return self.kind(mutant.model(config), name=f"mutant:{mutant.name}", config=config)


def test_a_scenario_failure_credits_only_the_rules_its_failures_name() -> None:
    """The scenario's rules are transaction/not-idempotent and transaction/check-times, but it fails on
    a send answer without queueOffset, which names wire/send-headers only: no kill for its own rules."""
    sid = "transaction/not-idempotent#checked-copy-and-late-original-both-commit"
    scenarios = [s for s in catalogue() if s.id == sid]
    assert scenarios[0].rules == ("transaction/not-idempotent", "transaction/check-times")
    labelled = Mutant("no-queue-offset", "transaction/not-idempotent", "sends answer without queueOffset")
    row = kill_one(_Targets(_NoQueueOffset), labelled, scenarios, examples=0)
    assert row.outcome == "wrong-reason"
    assert [(f.source, f.rules) for f in row.wrong] == [(sid, ("wire/send-headers",))]
    wire = Mutant("no-queue-offset", "wire/send-headers", "sends answer without queueOffset")
    assert kill_one(_Targets(_NoQueueOffset), wire, scenarios, examples=0).killed_by == (sid,)


def test_the_suite_breaking_on_a_mutant_is_reported_and_kills_nothing() -> None:
    """A scenario the runner could not judge (it ends unknown: the target raised) and a state machine
    that raised are errors of the row, not failures naming the mutant's rule."""
    scenarios = [s for s in catalogue() if s.id.startswith("put/delay-clamp")][:1]
    rule = scenarios[0].rules[0]
    m = Mutant("raising", rule, "every operation raises")
    row = kill_one(_Targets(_Raising), m, scenarios, examples=1)
    assert (row.outcome, row.failures) == ("survived", ())
    assert len(row.errors) == 2
    assert row.errors[0].startswith(f"{scenarios[0].id}: unknown: rmqspec error RuntimeError: boom")
    assert row.errors[1] == "state machine: raised RuntimeError: boom"
    assert row.to_json()["errors"] == list(row.errors)
    assert summary([row]) == {"killed": 0, "wrong-reason": 0, "survived": 1, "errors": 1}


def test_every_rule_a_broker_can_break_has_a_mutant_and_the_rest_are_exempt_with_a_reason() -> None:
    ids = {r.id for r in load_spec().rules}
    covered = {m.rule for m in MUTANTS.values()}
    assert covered <= ids
    assert ids - covered == set(EXEMPT), ids - covered - set(EXEMPT)
    assert all(reason.strip() for reason in EXEMPT.values())
    doc = DOCS.read_text(encoding="utf-8")
    assert all(f"`{rule}`" in doc for rule in EXEMPT), "docs/mutation.md lists every exempt rule"
    assert all(set(m.symptoms) <= ids for m in MUTANTS.values())


def test_wire_mutants_run_only_where_the_wire_is() -> None:
    wire = [m for m in MUTANTS.values() if m.served_only]
    assert {m.rule for m in wire} == {r.id for r in load_spec().rules if r.id.startswith("wire/")}
    with pytest.raises(TargetSpecError, match="served:mutant:msg-id-lower-case"):
        target_factory("mutant:msg-id-lower-case")


def test_a_wire_mutant_is_killed_through_the_served_wire() -> None:
    row = kill_one(CommandLineTargets(), MUTANTS["msg-id-lower-case"], [], examples=0)
    assert (row.outcome, row.path, row.killed_by) == ("killed", "served", ("wire probe",))


def test_a_configuration_mutant_reports_the_settings_it_was_given() -> None:
    """It misreads them; a scenario written against the settings must see the ones the broker was set up
    with, or it would follow the misreading (a check every half interval would look like the interval)."""
    mutant = MUTANTS["check-interval-halved"]
    given = BrokerConfig(transaction_check_interval_ms=5000, transaction_timeout_ms=3000)
    target = CommandLineTargets().in_process(mutant, given)
    assert target.info.config == given
    assert mutant.model(given).config.transaction_check_interval_ms == 2500
    scenarios = [
        s for s in catalogue() if s.id == "transaction/check-interval#checks-come-one-interval-apart"
    ]
    row = kill_one(CommandLineTargets(), mutant, scenarios, examples=0)
    assert row.outcome == "killed" and row.killed_by == (scenarios[0].id,)


def test_every_in_process_mutant_builds_on_both_profiles() -> None:
    """A configuration mutant (no semantic change of its own) runs the 5.x scenarios on 5.x semantics;
    before, building it raised, and the 5.x scenarios ended unknown, silently skipped by the matrix."""
    from rmqspec.reference.config import Profile
    from rmqspec.reference.semantics import V5Semantics

    for m in MUTANTS.values():
        if m.served_only:
            continue
        m.model(BrokerConfig())
        assert isinstance(m.model(BrokerConfig(profile=Profile.V5)).semantics, V5Semantics), m.name

"""A run's root causes, grouped by causality and ranked by reach; rules judged, not reached or passed; and
scenarios that expect only what the target's profile states (conformance/suite.py, scenario_run.py,
scenarios.py; issue 25 items 2, 3 and 6)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conform import target_factory
from rmqspec.conformance.history import Event
from rmqspec.conformance.scenario_expr import Env, ExprError, resolve
from rmqspec.conformance.scenario_run import ScenarioResult, StepFailure, run_scenario
from rmqspec.conformance.scenarios import Scenario, catalogue, make_scenario, portability_problems
from rmqspec.conformance.suite import Report, run_logical, symptom_text
from rmqspec.conformance.wirecheck import WireFinding
from rmqspec.conformance.wireprobe import ProbeResult
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model


def _scenario(name: str, rules: tuple[str, ...], steps: int = 3) -> Scenario:
    return Scenario(f"{rules[0]}#{name}", rules, tuple({"wait": {}} for _ in range(steps)))


def _failed(
    s: Scenario, message: str, *, op: str = "send", rule: str | None = None, stopped: int | None = None
) -> ScenarioResult:
    return ScenarioResult(s, "fail", "", (StepFailure(1, op, message, rule),), (), 1, stopped_at=stopped)


def _passed(s: Scenario) -> ScenarioResult:
    return ScenarioResult(s, "pass", "", (), (), 1)


def _report(results: list[ScenarioResult], **kw: Any) -> Report:
    return Report("t", tuple(results), None, 0, 1.0, mode="workload", **kw)


NOT_EXIST = "code: expected SUCCESS, got TOPIC_NOT_EXIST (topic[{}] not exist, apply first please!)"


def test_one_wrong_answer_to_one_kind_of_step_is_one_cause_whatever_the_scenarios_are_about() -> None:
    """Every send answered TOPIC_NOT_EXIST (its headers were not decoded): nine rules' scenarios, one cause."""
    rules = [f"area/rule-{n}" for n in range(9)]
    results = [_failed(_scenario("x", (r,)), NOT_EXIST.format(f"T{n}")) for n, r in enumerate(rules)]
    roots = _report(results).root_causes
    assert len(roots) == 1
    assert roots[0].reach == (9, 0) and len(roots[0].showings) == 9
    assert roots[0].first.source == "area/rule-0#x" and roots[0].first.where == "step 1 (send)"


def test_distinct_wrong_answers_under_one_rule_are_distinct_causes() -> None:
    """put/commit-log-lookup: a remark difference and extra records are two bugs, not one."""
    rule = ("put/commit-log-lookup",)
    results = [
        _failed(_scenario("a", rule), "remark: expected 'x', got 'y'", op="query"),
        _failed(_scenario("b", rule), "messages: expected 1, got 3 ['m1', 'm2', 'm3']", op="query"),
    ]
    roots = _report(results).root_causes
    assert [(r.rule, r.first.source) for r in roots] == [
        ("put/commit-log-lookup", "put/commit-log-lookup#a"),
        ("put/commit-log-lookup", "put/commit-log-lookup#b"),
    ]


def test_what_differs_between_scenarios_is_not_part_of_a_symptom() -> None:
    assert symptom_text("message 0: queue_id: expected 17, got 98") == symptom_text(
        "message 2: queue_id: expected 3, got 4"
    )
    assert symptom_text(NOT_EXIST.format("A")) == symptom_text(NOT_EXIST.format("B"))
    # Missing is not wrong: a property absent and one with another value are two symptoms.
    assert symptom_text("message 0: property DELAY: expected '3', got None") != symptom_text(
        "message 0: property DELAY: expected '3', got '5'"
    )
    assert symptom_text("code: expected SUCCESS, got SYSTEM_ERROR") != symptom_text(
        "code: expected SUCCESS, got TOPIC_NOT_EXIST"
    )


def test_causes_are_ranked_by_what_they_block_then_by_first_occurrence() -> None:
    early = _failed(_scenario("early", ("a/early",)), "remark: expected 'x', got 'y'", op="pull")
    wide = [_failed(_scenario(str(n), (f"b/wide-{n}",)), NOT_EXIST.format(n)) for n in range(3)]
    deep = _failed(
        _scenario("deep", ("c/deep",), steps=9), "expected 1 check request(s), got 0 []", stopped=1
    )
    roots = _report([early, deep, *wide]).root_causes
    # Three scenarios blocked first; then one scenario with 8 steps never run; then one that ran to its end.
    assert [r.first.source for r in roots] == ["b/wide-0#0", "c/deep#deep", "a/early#early"]
    assert [r.reach for r in roots] == [(3, 0), (1, 8), (1, 0)]
    summary = _report([early, deep, *wide]).summary()
    assert summary.startswith("3 root causes. Fix b/wide-0 first (root cause, it blocks 3 scenarios)")


def test_a_cause_is_named_by_the_rule_whose_scenarios_fail_most_consistently() -> None:
    """A DELAY above the table is stored unclamped: the delay-table examples that send one fail as the clamp
    examples do, but most delay-table examples pass: put/delay-clamp is the cause's rule."""
    table, clamp = "config/delay-level-table", "put/delay-clamp"
    wrong = "message 0: queue_id: expected 17, got 18"
    results = [
        _failed(_scenario("t1", (table,)), wrong, op="view"),
        _failed(_scenario("t2", (table, clamp)), wrong, op="view"),
        _failed(_scenario("c1", (clamp,)), wrong, op="view"),
        _failed(_scenario("c2", (clamp,)), "queue_offset: expected 1, got 0"),
        *[_passed(_scenario(f"p{n}", (table,))) for n in range(4)],
    ]
    roots = _report(results).root_causes
    assert [r.rule for r in roots] == [clamp, clamp]
    assert set(roots[0].rules) == {clamp, table}  # the rules its sources first failed by, kept in the JSON


def test_what_follows_from_a_refused_write_is_counted_under_the_refusal() -> None:
    """Every half message answered NO_PERMISSION: the scenarios that expect the send to succeed say so;
    those whose send_half expects nothing show only the check that never came, and follow from it."""
    refused = [
        Event(0, 0, "invoke", "send_half", {}, 0),
        Event(1, 0, "fail", "send_half", {"code": 16, "remark": "forbidden"}, 1),
    ]
    first = _failed(
        _scenario("a", ("config/defaults",)), "code: expected SUCCESS, got NO_PERMISSION (x)", op="send_half"
    )
    first = attrs.evolve(first, failures=(attrs.evolve(first.failures[0], event=1),), history=tuple(refused))
    later = [
        ScenarioResult(
            _scenario(str(n), (f"transaction/check-{n}",)),
            "fail",
            "",
            (
                StepFailure(
                    3,
                    "checks",
                    "expected 1 check request(s), got 0 []",
                    None,
                    None,
                    1,
                    "transaction/check-timeout",
                ),
            ),
            tuple(refused),
            1,
        )
        for n in range(3)
    ]
    elsewhere = _failed(_scenario("b", ("put/other",)), "remark: expected 'x', got 'y'", op="pull")
    roots = _report([first, *later, elsewhere]).root_causes
    assert [r.rule for r in roots] == ["config/defaults", "put/other"]
    assert roots[0].followers == ("transaction/check-0#0", "transaction/check-1#1", "transaction/check-2#2")
    assert roots[0].reach == (4, 0)
    # Without a scenario that expected the write to succeed, nothing names the refusal: no folding.
    alone = _report(later).root_causes
    assert [r.rule for r in alone] == ["transaction/check-timeout"] and alone[0].reach == (3, 0)


def test_the_history_checker_s_anomalies_of_one_rule_are_one_cause_listing_each_kind() -> None:
    """DELAY ignored: the checker names put/delay-eligibility as early deliveries in some scenarios and as
    lookups of another topic in others; its rule is its diagnosis, the kinds are listed, none concealed."""
    rule = "put/delay-eligibility"
    results = [
        ScenarioResult(
            _scenario(str(n), ("x/y",)),
            "fail",
            "",
            (
                StepFailure(
                    0, "history", f"{kind} at event 3 (pull ok at +9 ms): ID{n} visible early", rule, None, 3
                ),
            ),
            (),
            1,
        )
        for n, kind in enumerate(["early-delivery", "wrong-lookup-result", "early-delivery"])
    ]
    (cause,) = _report(results).root_causes
    assert cause.rule == rule and cause.reach == (3, 0)
    assert cause.kinds == ("early-delivery", "wrong-lookup-result")
    assert cause.line().endswith("also shows as wrong-lookup-result")


def test_a_failure_that_names_its_rule_keeps_it() -> None:
    results = [
        _failed(_scenario("a", ("x/a",)), "broke it", rule="wire/send-headers"),
        _failed(_scenario("b", ("x/b",)), "broke it", rule="wire/offset-msg-id"),
    ]
    assert [r.rule for r in _report(results).root_causes] == ["wire/send-headers", "wire/offset-msg-id"]


def test_a_capability_the_profile_declares_lacking_is_never_a_cause() -> None:
    batch = WireFinding("wire/frame", "request code 320 (batch) no answer", code=320)
    probe = ProbeResult((batch,), 13, 1, 0)
    results = [_passed(_scenario("a", ("x/a",)))]
    lacking = _report(results, probe=probe, lacks=frozenset({"batch"}))
    assert lacking.root_causes == () and lacking.protocol == () and lacking.exit_code == 0
    assert lacking.to_json()["declared_lacking"][0]["line"].startswith("request code 320")
    offered = _report(results, probe=probe)
    assert [r.rule for r in offered.root_causes] == ["wire/frame"] and offered.exit_code == 1


def test_rules_past_a_stop_are_not_reached_and_the_table_and_summary_agree() -> None:
    """An empty msgId stops every scenario at its first step: the rules those scenarios are about were
    never judged, so they are not reached, not passed."""
    own = ("put/delay-eligibility",)
    stopped = _failed(
        _scenario("a", own, steps=4), "msgId '' is not an offset id", rule="wire/offset-msg-id", stopped=1
    )
    ran = _failed(_scenario("b", ("sendback/through-schedule",)), "broke", rule="wire/x")
    rep = _report([stopped, ran])
    assert stopped.rule_outcomes == {"put/delay-eligibility": "not reached", "wire/offset-msg-id": "fail"}
    assert ran.rule_outcomes == {"sendback/through-schedule": "pass", "wire/x": "fail"}
    table = rep.by_rule()
    assert table["put/delay-eligibility"] == {"not reached": 1}
    assert rep.rule_counts() == {"pass": 1, "fail": 2, "not reached": 1, "skip": 0, "unknown": 0}
    assert "Rules: 1 passed, 2 failed, 1 not reached" in rep.summary()
    assert rep.to_json()["scenarios"][0]["stopped_at"] == 1


def test_the_runner_marks_where_a_scenario_stopped() -> None:
    steps = [
        {"send": {"topic": "T", "body": "a"}, "as": "m1", "expect": {"code": "SUCCESS"}},
        {"end_tx": {"ref": "nobody"}},
        {"pull": {"topic": "T"}, "expect": {"code": "SUCCESS"}},
    ]
    s = make_scenario({"name": "t", "steps": steps}, "put/send-result", "test")
    r = run_scenario(s, lambda cfg: InProcessTarget(Model(cfg)))
    assert (r.outcome, r.stopped_at) == ("fail", 2)
    assert r.rule_outcomes == {"put/send-result": "fail"}
    whole = make_scenario({"name": "t", "steps": steps[:1]}, "put/send-result", "test")
    assert run_scenario(whole, lambda cfg: InProcessTarget(Model(cfg))).stopped_at is None


def test_the_planted_rule_of_no_clamp_comes_first() -> None:
    """Issue 27 item 4: the config/delay-level-table examples fail too (they send a DELAY above the table),
    but the cause they show is put/delay-clamp's."""
    rep = run_logical("mutant:no-clamp", target_factory("mutant:no-clamp"), catalogue())
    roots = rep.root_causes
    assert roots[0].rule == "put/delay-clamp"
    assert {r.rule for r in roots} == {"put/delay-clamp"}


# --- portable scenarios -----------------------------------------------------------------------------------


def test_no_scenario_of_the_catalogue_expects_a_value_its_profile_does_not_state() -> None:
    problems = [p for s in catalogue() for p in portability_problems(s)]
    assert not problems, "\n".join(problems)


def _expecting(props: dict[str, Any], config: dict[str, Any] | None = None) -> Scenario:
    steps = [
        {"send": {"topic": "T", "body": "a"}, "as": "m1"},
        {"pull": {"topic": "T"}, "expect": {"messages": [{"ref": "m1", "props": props}]}},
    ]
    return make_scenario({"name": "t", "steps": steps, "config": config or {}}, "put/stored-properties", "t")


@pytest.mark.parametrize(
    ("props", "found"),
    [
        ({"CLUSTER": "DefaultCluster"}, "expects CLUSTER 'DefaultCluster', one broker's brokerClusterName"),
        ({"CLUSTER": "OtherCluster"}, "expects CLUSTER 'OtherCluster'"),
        ({"MSG_REGION": "DefaultRegion"}, "one broker's regionId: write '=region'"),
        ({"REAL_TOPIC": "TBW102"}, "'TBW102' at expect.messages[0].props.REAL_TOPIC"),
    ],
)
def test_a_literal_of_one_broker_s_settings_is_found(props: dict[str, Any], found: str) -> None:
    (problem,) = portability_problems(_expecting(props))
    assert problem.startswith("put/stored-properties#t step 2: ") and found in problem


def test_a_value_read_from_the_profile_or_pinned_by_the_scenario_is_portable() -> None:
    assert portability_problems(_expecting({"CLUSTER": "=cluster", "MSG_REGION": "=region"})) == []
    assert portability_problems(_expecting({"CLUSTER": None})) == []
    pinned = _expecting({"CLUSTER": "MyCluster"}, {"brokerClusterName": "MyCluster"})
    assert portability_problems(pinned) == []


def test_cluster_and_region_are_the_target_s_own() -> None:
    cfg = BrokerConfig(cluster_name="GoCluster", region_id="Moon")
    env = Env(cfg)
    assert resolve({"CLUSTER": "=cluster", "R": "{=region}-1"}, env) == {
        "CLUSTER": "GoCluster",
        "R": "Moon-1",
    }
    with pytest.raises(ExprError, match="'cluster' is text"):
        resolve("=cluster + 1", env)
    # A broker with another cluster name passes the scenario that reads it.
    s = _expecting({"CLUSTER": "=cluster"})
    r = run_scenario(s, lambda c: InProcessTarget(Model(c)), base=cfg)
    assert r.outcome == "pass", r.failures

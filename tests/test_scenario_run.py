"""The scenario runner's waits and check expectations (conformance/scenario_run.py, docs/scenarios.md)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.contract import Clock
from rmqspec.conformance.scenario_run import _Runner, dry_run
from rmqspec.conformance.scenarios import ScenarioError, make_scenario
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

# One run every second from the start; a half message sent at 0 is checked at 3001 (its age equals the
# timeout at the run at 3000: 4.9.x reads on until the clock moves), then at 4001, 5001, ...
CFG = BrokerConfig(transaction_timeout_ms=3000, transaction_check_interval_ms=1000, transaction_check_max=3)


class _WallLike(InProcessTarget):
    """The model on a logical clock that calls itself a wall clock: the runner's wall-clock rules, fast."""

    def __init__(self, model: Model) -> None:
        super().__init__(model)
        self._info = attrs.evolve(self._info, clock=Clock.WALL)


def _run(steps: list[dict[str, Any]], *, wall: bool = False, eps: int = 0, **extra: Any) -> Any:
    scenario = make_scenario({"name": "t", "steps": steps, **extra}, "transaction/check-times", "test")
    target = _WallLike(Model(CFG)) if wall else InProcessTarget(Model(CFG))
    runner = _Runner(scenario, target, eps, "t", None)
    result = runner.run()
    return result, runner


def _messages(result: Any) -> list[str]:
    return [f.message for f in result.failures if f.operation != "history"]


CHECKED_AT_3001: list[dict[str, Any]] = [
    {"heartbeat": {"group": "PG"}},
    {"send_half": {"topic": "T", "body": "x"}, "as": "h"},
]


def test_until_waits_for_the_expectation_and_no_longer_than_its_deadline() -> None:
    result, runner = _run(
        [*CHECKED_AT_3001, {"checks": {}, "until": "=at(h) + timeout + 1", "expect": [{"ref": "h"}]}]
    )
    assert result.outcome == "pass"
    assert runner.checks_at["h"] == [3001]
    result, _ = _run(
        [*CHECKED_AT_3001, {"checks": {}, "until": "=at(h) + timeout", "expect": [{"ref": "h"}]}]
    )
    assert _messages(result) == ["expected 1 check request(s), got 0 []"]


def test_until_on_a_wall_clock_allows_epsilon_of_lateness() -> None:
    """A broker MAY be late by the checker's epsilon (transaction/check-interval): the deadline moves by it."""
    steps: list[dict[str, Any]] = [
        *CHECKED_AT_3001,
        {"checks": {}, "until": "=at(h) + timeout", "expect": [{"ref": "h"}]},
    ]
    result, _ = _run(steps, wall=True, eps=10)
    assert not _messages(result)
    result, _ = _run(steps, wall=True, eps=0)
    assert _messages(result) == ["expected 1 check request(s), got 0 []"]


def test_a_check_within_epsilon_of_a_steps_moment_is_judged_by_the_next_checks_step() -> None:
    steps: list[dict[str, Any]] = [
        *CHECKED_AT_3001,
        {"at": 3200, "checks": {}, "expect": []},  # the check came at 3001: 199 ms before this moment
        {"checks": {}, "until": 5000, "expect": [{"ref": "h", "check_times": 1}]},
    ]
    result, _ = _run(steps)  # a logical clock knows: the check came before 3200
    assert _messages(result)[0] == "expected 0 check request(s), got 1 ['h']"
    result, _ = _run(steps, wall=True, eps=500)  # a wall clock knows 3200 within 500 ms only
    assert not _messages(result)
    result, _ = _run(steps, wall=True, eps=100)  # ... or within 100 ms: then 3001 was before it
    assert _messages(result)[0] == "expected 0 check request(s), got 1 ['h']"


def test_a_repeated_check_item_stands_for_that_many_requests_with_rising_counts() -> None:
    steps: list[dict[str, Any]] = [
        *CHECKED_AT_3001,
        {"checks": {}, "until": 3100, "expect": [{"ref": "h", "check_times": 1}]},
        {
            "checks": {},
            "until": "=check(h, 1) + (check_max - 1) * interval",
            "expect": [{"ref": "h", "check_times": 2, "repeat": "=check_max - 1"}],
        },
    ]
    result, runner = _run(steps)
    assert result.outcome == "pass", _messages(result)
    assert runner.checks_at["h"] == [3001, 4001, 5001]
    steps[-1]["expect"] = [{"ref": "h", "check_times": 1, "repeat": 2}]
    result, _ = _run(steps)
    assert "TRANSACTION_CHECK_TIMES expected 1, got 2" in _messages(result)[0]


def test_a_need_the_settings_do_not_meet_skips_the_scenario_and_names_the_settings() -> None:
    result, _ = _run(CHECKED_AT_3001, needs=["interval > timeout"])
    assert result.outcome == "skip"
    assert "interval > timeout" in result.reason
    assert "transactionCheckInterval 1000" in result.reason and "transactionTimeOut 3000" in result.reason
    result, _ = _run(CHECKED_AT_3001, needs=["check_max >= 3", "timeout > interval"])
    assert result.outcome == "pass"
    scenario = make_scenario({"name": "t", "steps": CHECKED_AT_3001, "needs": ["check_max > 3"]}, None, "t")
    plan = dry_run(scenario, CFG, lambda cfg: InProcessTarget(Model(cfg)))
    assert plan.needs is not None and "check_max > 3" in plan.needs.what


@pytest.mark.parametrize("needs", [["interval"], ["1 < interval < 2"], "interval > timeout", ["interval >"]])
def test_a_need_is_one_comparison(needs: Any) -> None:
    with pytest.raises(ScenarioError):
        make_scenario({"name": "t", "steps": CHECKED_AT_3001, "needs": needs}, None, "t")


def test_a_maybe_message_may_be_missing_but_must_match_where_present() -> None:
    sends = [
        {"send": {"topic": "T", "body": "a"}, "as": "a"},
        {"send": {"topic": "T", "body": "b"}, "as": "b"},
    ]
    maybe_b = {"ref": "b", "queue_offset": 1, "maybe": True}
    result, _ = _run([*sends, {"pull": {"topic": "T"}, "expect": {"messages": [{"ref": "a"}, maybe_b]}}])
    assert result.outcome == "pass", _messages(result)
    result, _ = _run([sends[0], {"pull": {"topic": "T"}, "expect": {"messages": [{"ref": "a"}, maybe_b]}}])
    assert result.outcome == "pass", _messages(result)
    wrong = {"ref": "b", "queue_offset": 2, "maybe": True}
    result, _ = _run([*sends, {"pull": {"topic": "T"}, "expect": {"messages": [{"ref": "a"}, wrong]}}])
    assert _messages(result) == ["message 1: queue_offset: expected 2, got 1"]
    result, _ = _run([*sends, {"pull": {"topic": "T"}, "expect": {"messages": [maybe_b]}}])
    assert _messages(result) == ["messages: expected 0 to 1, got 2 ['a', 'b']"]


def test_as_on_a_restart_names_the_moment_the_broker_is_back() -> None:
    steps: list[dict[str, Any]] = [
        {"at": 1234, "restart": {}, "as": "up"},
        {"at": "=at(up) + 1", "send": {"topic": "T", "body": "a"}, "as": "m"},
    ]
    result, runner = _run(steps)
    assert result.outcome == "pass", _messages(result)
    assert runner.sent_at == {"up": 1234, "m": 1235}


def test_a_queue_offset_placeholder_is_the_offset_the_send_answered() -> None:
    steps: list[dict[str, Any]] = [
        {"send_half": {"topic": "T", "body": "first"}},
        {"send_half": {"topic": "T", "body": "second"}, "as": "h"},
        {"send": {"topic": "U", "body": "c", "props": {"K": "$queue_offset:h"}}, "as": "c"},
        {"pull": {"topic": "U"}, "expect": {"messages": [{"ref": "c", "props": {"K": "1"}}]}},
    ]
    result, _ = _run(steps)
    assert result.outcome == "pass", _messages(result)


def test_a_wall_clock_runs_checks_are_paired_by_message_and_count_not_by_arrival() -> None:
    """A run hands each check to a thread pool (AbstractTransactionalMessageCheckListener.resolveHalfMsg):
    on a wall clock the requests of one run may arrive in any order; a missing one is still missing."""
    steps: list[dict[str, Any]] = [
        {"heartbeat": {"group": "PG"}},
        {"send_half": {"topic": "T", "body": "a"}, "as": "a"},
        {"send_half": {"topic": "T", "body": "b"}, "as": "b"},
        {
            "checks": {},
            "until": 3100,
            "expect": [{"ref": "a", "check_times": 1}, {"ref": "b", "check_times": 1}],
        },
    ]
    seen: list[Any] = []
    take = _Runner.take_checks

    def keep(self: _Runner, got: Any) -> None:
        got = list(got)
        seen.extend(got)
        take(self, got)

    _Runner.take_checks = keep  # type: ignore[method-assign]
    try:
        result, runner = _run(steps, wall=True, eps=10)
    finally:
        _Runner.take_checks = take  # type: ignore[method-assign]
    assert result.outcome == "pass", _messages(result)
    a, b = seen
    want = runner.expected_checks(steps[-1]["expect"], 3)
    assert runner.in_expected_order([b, a], want, 3) == [a, b]
    only_b = runner.expected_checks([{"ref": "b", "check_times": 1}, {"ref": "b", "check_times": 1}], 3)
    assert runner.in_expected_order([a, b], only_b, 3) == [b, a]  # a unpaired: judged (and failed) in place


class _SlowStore(_WallLike):
    """A wall-clock-like broker that stores each send ``delay`` ms after the client asked (a cold broker,
    a loaded machine): the store time a delay counts from lies anywhere in the send's interval."""

    def __init__(self, model: Model, delay: int, late: int = 0) -> None:
        super().__init__(model)
        self.delay = delay
        self.late = late  # and delivers this much after the due time (schedule service lateness)

    def execute(self, op: Any) -> Any:
        from rmqspec.reference.model import Send

        if isinstance(op, Send):
            self.advance_to(self.now() + self.delay)
        return super().execute(op)


DELAYED: list[dict[str, Any]] = [
    {"at": 0, "send": {"topic": "T", "body": "x", "props": {"DELAY": "1"}}, "as": "m"},
    {"at": "=at(m) + 999", "pull": {"topic": "T"}, "expect": {"code": "PULL_NOT_FOUND"}},
    {
        "at": "=at(m) + 1000",
        "pull": {"topic": "T"},
        "expect": {"code": "SUCCESS", "messages": [{"ref": "m", "store_at": "=at(m) + 1000"}]},
    },
]


def _run_on(target: InProcessTarget, steps: list[dict[str, Any]], eps: int) -> Any:
    scenario = make_scenario({"name": "t", "steps": steps}, "schedule/due-time", "test")
    runner = _Runner(scenario, target, eps, "t", None)
    return runner.run(), runner


def test_a_wall_deadline_counts_from_the_end_of_a_slow_send() -> None:
    """at(m) is the send's invoke; the broker stored m (and counts its delay from there) up to the send's
    answer: 600 ms later here. Due at +1600 is within [1000, 1000 + epsilon + 600], and the runner says
    why it allowed it; the lower bound does not move."""
    result, runner = _run_on(_SlowStore(Model(CFG), delay=600), DELAYED, eps=100)
    assert result.outcome == "pass", _messages(result)
    assert runner.lag == 600


def test_a_wall_deadline_past_the_slow_send_still_fails() -> None:
    """Later than epsilon after the end of the slowest timed write: a failure that names both parts."""
    steps = [dict(s) for s in DELAYED]
    steps[2] = dict(
        steps[2], expect={"code": "SUCCESS", "messages": [{"ref": "m", "store_at": "=at(m) + 800"}]}
    )
    result, _ = _run_on(_SlowStore(Model(CFG), delay=600), steps, eps=100)
    want = "message 0: stored at +1600 ms, allowed [800, 1500] (epsilon 100 + 600 ms a write took)"
    assert any(want in m for m in _messages(result)), _messages(result)

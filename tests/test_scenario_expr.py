"""Scenario values written against the configuration (conformance/scenario_expr.py)."""

from __future__ import annotations

import re

import attrs
import pytest

from rmqspec.conformance.scenario_expr import Env, ExprError, Needs, evaluate, resolve
from rmqspec.reference.config import BrokerConfig, Profile

SHORT = BrokerConfig(
    "1s 2s 3s", transaction_timeout_ms=3000, transaction_check_interval_ms=5000, transaction_check_max=3
)


def test_names_are_the_targets_settings() -> None:
    env = Env(SHORT, {"m": 250}, {"h": (4000, 9000)}, now=1234)
    assert evaluate("=delay(3) - 1", env) == 2999
    assert evaluate("=levels + 1", env) == 4
    assert evaluate("=at(m) + delay(2)", env) == 2250
    assert evaluate("=timeout + 2 * interval", env) == 13000
    assert evaluate("=check(h, 2) - check(h, 1)", env) == 5000
    assert evaluate("=max(now, 2000) // 1000 % 7", env) == 2
    assert evaluate("=check_max", env) == 3
    assert evaluate("=flush", env) == 10000
    assert evaluate("=op_sleep", env) == 0  # 4.9.x reads the op queue again at once
    assert evaluate("=op_sleep", Env(attrs.evolve(SHORT, profile=Profile.V5))) == 1000  # SLEEP_WHILE_NO_OP
    # the default table: level 18 is two hours
    assert evaluate("=delay(levels)", Env(BrokerConfig())) == 7_200_000


def test_values_are_resolved_at_any_depth_and_templates_format_numbers() -> None:
    env = Env(SHORT)
    step = {
        "send": {"props": {"DELAY": "=levels + 1", "K": "0{=levels}", "L": "==x", "M": "plain"}},
        "at": "=delay(1)",
    }
    assert resolve(step, env) == {
        "send": {"props": {"DELAY": 4, "K": "03", "L": "=x", "M": "plain"}},
        "at": 1000,
    }
    assert resolve([{"x": "=levels"}], env) == [{"x": 3}]


def test_a_level_the_table_lacks_is_a_need_not_an_error() -> None:
    with pytest.raises(Needs) as e:
        evaluate("=delay(5)", Env(SHORT))
    assert "at least 5 levels" in e.value.what and "3" in e.value.what


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("=delay(", "is not an expression"),
        ("=levelz", "unknown name 'levelz'"),
        ("=foo(1)", "unknown function 'foo'"),
        ("=1 / 2", "only whole numbers"),
        ("=levels // 0", "division by zero"),
        ("=True", "booleans"),
        ("=at(nobody)", "no step sent a message named 'nobody'"),
        ("=check(m, 1)", "only 0 check request(s)"),
        ("='a'", "only whole numbers"),
    ],
)
def test_authoring_mistakes_are_named(text: str, problem: str) -> None:
    with pytest.raises(ExprError, match=re.escape(problem)):
        evaluate(text, Env(SHORT))

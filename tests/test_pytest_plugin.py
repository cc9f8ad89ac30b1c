"""The pytest plugin: ``pytest --rmq-target=...`` runs the suite in a user's own project."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def test_plugin_passes_reference(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--rmq-target=reference", "--rmq-examples=3", "-q")
    assert result.ret == 0
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 60


def test_plugin_fails_a_mutant(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--rmq-target=mutant:no-clamp", "--rmq-examples=3", "-q")
    assert result.ret == 1
    assert result.parseoutcomes().get("failed", 0) >= 1


def test_plugin_inert_without_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    assert True\n")
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=1)

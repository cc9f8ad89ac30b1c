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


def test_a_failing_scenario_reports_its_diff_not_pytest_internals(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--rmq-target=mutant:no-clamp", "--rmq-scenario=put/delay-clamp#delay-99-becomes-18", "-q"
    )
    assert result.ret == 1
    text = result.stdout.str()
    assert "put/delay-clamp#delay-99-becomes-18" in text and "queue_id: expected" in text
    assert "runtest" not in text and "_pytest" not in text  # no frames of pytest's own code
    result.assert_outcomes(failed=1)


def test_node_ids_select_one_scenario_and_counts_are_true(pytester: pytest.Pytester) -> None:
    listed = pytester.runpytest(
        "--rmq-target=reference", "--rmq-scenario=put/delay-clamp", "--collect-only", "-q"
    )
    ids = [line for line in listed.stdout.lines if line.startswith("rmqspec::")]
    # every scenario that covers the rule: its own examples and others that name it too
    assert any(i.startswith("rmqspec::put/delay-clamp::") for i in ids)
    assert f"{len(ids)} tests collected" in listed.stdout.str()
    one = pytester.runpytest(
        "--rmq-target=reference", "--rmq-scenario=put/delay-clamp#delay-99-becomes-18", "-q"
    )
    one.assert_outcomes(passed=1)


def test_an_unreachable_target_is_one_failing_line(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--rmq-target=remoting://127.0.0.1:1", "-q")
    assert result.ret == 1
    result.assert_outcomes(failed=1)
    assert "cannot connect to 127.0.0.1:1" in result.stdout.str()
    assert len(result.stdout.lines) < 20


def test_junit_names_the_rule_and_the_example(pytester: pytest.Pytester) -> None:
    from xml.etree import ElementTree as ET

    xml = pytester.path / "j.xml"
    pytester.runpytest("--rmq-target=reference", "--rmq-scenario=put/delay-clamp", f"--junitxml={xml}", "-q")
    cases = ET.parse(xml).getroot().iter("testcase")
    names = {(c.get("classname"), c.get("name")) for c in cases}
    assert ("rmqspec.put/delay-clamp", "delay-99-becomes-18") in names, names

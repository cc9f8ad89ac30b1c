"""pytest plugin: ``pytest --rmq-target=TARGET`` runs the rmqspec conformance suite in a user's own CI.

Every scenario of the catalogue becomes a test item (skipped when the target lacks a feature), plus
one item for the state machine checked by the history checker. Installed with rmqspec (entry point
``pytest11``); inert unless ``--rmq-target`` is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rmqspec")
    group.addoption(
        "--rmq-target",
        action="store",
        default=None,
        help="run the rmqspec conformance suite against this target (reference, mutant:NAME, remoting://H:P)",
    )
    group.addoption("--rmq-examples", action="store", type=int, default=30, help="state-machine runs")


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    target = config.getoption("--rmq-target")
    if not target:
        return
    items.extend(_items(session, target, int(config.getoption("--rmq-examples"))))


def _items(session: pytest.Session, target: str, examples: int) -> Iterator[pytest.Item]:
    from rmqspec.conformance.scenarios import catalogue

    parent = RmqCollector.from_parent(session, name=f"rmqspec[{target}]")
    for s in catalogue():
        yield ScenarioItem.from_parent(parent, name=s.id, scenario=s, target=target)
    yield MachineItem.from_parent(parent, name="state-machine", target=target, examples=examples)


class RmqCollector(pytest.Collector):
    def collect(self) -> list[pytest.Item]:
        return []


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario: Any, target: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.scenario = scenario
        self.target = target

    def runtest(self) -> None:
        from rmqspec.conform import target_factory
        from rmqspec.conformance.scenarios import run_scenario

        result = run_scenario(self.scenario, target_factory(self.target), salt="pytest")
        if result.outcome == "skip":
            pytest.skip(result.reason)
        if result.outcome != "pass":
            raise AssertionError(
                "\n".join(f"step {f.step} ({f.operation}): {f.message}" for f in result.failures)
                or result.reason
            )

    def reportinfo(self) -> tuple[str, int, str]:
        return self.scenario.source, 0, f"rmqspec scenario {self.scenario.id}"


class MachineItem(pytest.Item):
    def __init__(self, *, target: str, examples: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.target = target
        self.examples = examples

    def runtest(self) -> None:
        from rmqspec.conform import target_factory
        from rmqspec.conformance.machine import run_machine
        from rmqspec.reference.config import BrokerConfig

        failure = run_machine(target_factory(self.target), BrokerConfig(), max_examples=self.examples)
        if failure is not None:
            raise AssertionError(failure)

    def reportinfo(self) -> tuple[str, int, str]:
        return "rmqspec", 0, "rmqspec state machine + history checker"

"""pytest plugin: ``pytest --rmq-target=TARGET`` runs the rmqspec conformance suite in a user's own CI.

Every scenario of the catalogue becomes a test item (skipped when the target lacks a feature), plus
one item for the state machine checked by the history checker. Installed with rmqspec (entry point
``pytest11``); inert unless ``--rmq-target`` is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
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
    group.addoption(
        "--rmq-profile", action="store", default=None, help="target profile (YAML) of a remoting:// target"
    )
    group.addoption(
        "--rmq-workload-seconds",
        action="store",
        type=float,
        default=30.0,
        help="wall-clock targets: seconds of concurrent workload",
    )


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    target = config.getoption("--rmq-target")
    if not target:
        return
    profile = config.getoption("--rmq-profile")
    opts = {
        "examples": int(config.getoption("--rmq-examples")),
        "seconds": float(config.getoption("--rmq-workload-seconds")),
        "profile": None if profile is None else Path(profile),
    }
    items.extend(_items(session, target, opts))


def _items(session: pytest.Session, target: str, opts: dict[str, Any]) -> Iterator[pytest.Item]:
    from rmqspec.conformance.scenarios import catalogue

    parent = RmqCollector.from_parent(session, name=f"rmqspec[{target}]")
    for s in catalogue():
        yield ScenarioItem.from_parent(parent, name=s.id, scenario=s, target=target, profile=opts["profile"])
    name = "workload" if target.startswith("remoting://") else "state-machine"
    yield MachineItem.from_parent(parent, name=name, target=target, opts=opts)


class RmqCollector(pytest.Collector):
    def collect(self) -> list[pytest.Item]:
        return []


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario: Any, target: str, profile: Path | None, **kw: Any) -> None:
        super().__init__(**kw)
        self.scenario = scenario
        self.target = target
        self.profile = profile

    def runtest(self) -> None:
        from rmqspec.conform import run_one

        result = run_one(self.target, self.scenario, self.profile)
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
    def __init__(self, *, target: str, opts: dict[str, Any], **kw: Any) -> None:
        super().__init__(**kw)
        self.target = target
        self.opts = opts

    def runtest(self) -> None:
        from rmqspec.conform import run_checked_workload

        failure = run_checked_workload(
            self.target, self.opts["profile"], examples=self.opts["examples"], seconds=self.opts["seconds"]
        )
        if failure is not None:
            raise AssertionError(failure)

    def reportinfo(self) -> tuple[str, int, str]:
        return "rmqspec", 0, "rmqspec state machine + history checker"

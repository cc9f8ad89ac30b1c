"""pytest plugin: ``pytest --rmq-target=TARGET`` runs the rmqspec conformance suite in a user's own CI.

Every scenario of the catalogue becomes a test item (skipped when the target lacks a feature), plus
one item for the state machine checked by the history checker (the wall-clock workload on a broker
reached over the wire). Installed with rmqspec (entry point ``pytest11``); inert unless ``--rmq-target``
is given.

- ``--rmq-scenario ID`` (repeatable) runs only the scenarios with that id, rule or id prefix; node ids
  are ``rmqspec::<rule>::<example>`` (``rmqspec::put/delay-clamp::delay-99-becomes-18``), and ``-k``
  selects by the example's name.
- A failing scenario reports its diff (step, operation, what was expected, what came), not pytest's
  internals; a target that cannot be reached is one failing item with one line, not one per scenario.
- JUnit XML: the class name of an item is ``rmqspec.<rule>``, its name the example's name.
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
        help="run the rmqspec conformance suite against this target (reference, mutant:NAME, served, "
        "remoting://H:P, apache:VERSION)",
    )
    group.addoption("--rmq-examples", action="store", type=int, default=30, help="state-machine runs")
    group.addoption(
        "--rmq-profile", action="store", default=None, help="target profile (YAML): the broker's settings"
    )
    group.addoption(
        "--rmq-workload-seconds",
        action="store",
        type=float,
        default=30.0,
        help="wall-clock targets: seconds of concurrent workload",
    )
    group.addoption(
        "--rmq-scenario",
        action="append",
        default=None,
        help="run only this scenario (an id, a rule id or an id prefix such as put/); repeatable",
    )


class ScenarioFailed(AssertionError):
    """A scenario's steps did not do what the spec says: its text is the whole diff."""


class TargetUnreachable(AssertionError):
    """The target could not be used at all: one line says why."""


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
        "scenarios": config.getoption("--rmq-scenario"),
    }
    ours = list(_items(session, target, opts))
    items.extend(ours)
    # The terminal's "collected N items" counts collect reports: report ours, so the count is true.
    report = pytest.CollectReport("rmqspec", "passed", None, list[pytest.Item | pytest.Collector](ours))
    config.hook.pytest_collectreport(report=report)


def _unreachable(target: str, profile: Path | None) -> str | None:
    """Why a wall-clock target cannot be used (one line), or None."""
    from rmqspec.conform import TargetSpecError, probe, remoting_profile, target_factory, wall_target

    if not target.startswith("remoting://"):
        try:  # a name the command line does not know is one line too
            if target in ("served",) or target.startswith(("served:", "apache:", "grpc://", "apache-proxy:")):
                wall_target(target, profile)
            else:
                target_factory(target)
        except TargetSpecError as e:
            return str(e)
        return None
    try:
        tp = remoting_profile(target, profile)
        probe(tp, target)
    except TargetSpecError as e:
        return str(e)
    return None


def _items(session: pytest.Session, target: str, opts: dict[str, Any]) -> Iterator[pytest.Item]:
    from rmqspec.conformance.scenarios import catalogue

    # Node ids rmqspec::<rule>::<example>: in JUnit XML the class is rmqspec.<rule>, the test the example.
    parent = RmqCollector.from_parent(session, name="rmqspec", nodeid="rmqspec")
    why = _unreachable(target, opts["profile"])
    if why is not None:
        yield UnreachableItem.from_parent(parent, name="target", why=why)
        return
    wanted = opts["scenarios"]
    rules: dict[str, RmqCollector] = {}
    for s in catalogue():
        if wanted and not any(s.id == w or s.id.startswith(w) or w in s.rules for w in wanted):
            continue
        rule, _, example = s.id.partition("#")
        group = rules.get(rule) or rules.setdefault(rule, RmqCollector.from_parent(parent, name=rule))
        yield ScenarioItem.from_parent(
            group, name=example or rule, scenario=s, target=target, profile=opts["profile"]
        )
    if not wanted:
        name = "workload" if target.startswith(("remoting://", "served", "apache:")) else "state-machine"
        yield MachineItem.from_parent(parent, name=name, target=target, opts=opts)


class RmqCollector(pytest.Collector):
    def collect(self) -> list[pytest.Item]:
        return []


class _RmqItem(pytest.Item):
    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed | TargetUnreachable):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))


class UnreachableItem(_RmqItem):
    def __init__(self, *, why: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.why = why

    def runtest(self) -> None:
        raise TargetUnreachable(self.why)

    def reportinfo(self) -> tuple[str, int, str]:
        return "rmqspec", 0, "rmqspec target"


class ScenarioItem(_RmqItem):
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
            lines = [f"{self.scenario.id} ({self.scenario.source}): {result.outcome}"]
            for f in result.failures:
                where = f"step {f.step} ({f.operation})" if f.step else f.operation
                lines.append(f"  {where}{f' [{f.rule}]' if f.rule else ''}: {f.message}")
            if not result.failures and result.reason:
                lines.append(f"  {result.reason}")
            raise ScenarioFailed("\n".join(lines))

    def reportinfo(self) -> tuple[str, int, str]:
        return self.scenario.source, 0, f"rmqspec scenario {self.scenario.id}"


class MachineItem(_RmqItem):
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
            raise ScenarioFailed(failure)

    def reportinfo(self) -> tuple[str, int, str]:
        return "rmqspec", 0, "rmqspec state machine + history checker"

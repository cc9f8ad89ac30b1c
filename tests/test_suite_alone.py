"""A wall-clock suite runs scenarios marked `alone` after the others, one at a time (conformance/suite.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import attrs

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.contract import ALL_FEATURES, Clock, Feature
from rmqspec.conformance.scenarios import make_scenario
from rmqspec.conformance.suite import WallOptions, run_wall
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model


class _Timed(InProcessTarget):
    """The model, calling itself a wall clock; each operation takes a little real time, and the moments
    the target was opened and closed are recorded under the scenario's name."""

    def __init__(self, log: dict[str, list[float]], lock: threading.Lock) -> None:
        super().__init__(Model(BrokerConfig()))
        self._info = attrs.evolve(self._info, clock=Clock.WALL)
        self.log, self.lock, self.name = log, lock, ""

    def execute(self, op: Any) -> Any:
        topic = getattr(getattr(op, "message", None), "topic", "")
        if topic and not self.name:
            self.name = topic
            with self.lock:
                self.log[topic] = [time.perf_counter()]
        time.sleep(0.02)
        return super().execute(op)

    def close(self) -> None:
        with self.lock:
            self.log[self.name].append(time.perf_counter())


@attrs.define
class _Deployment:
    config: BrokerConfig
    log: dict[str, list[float]]
    lock: threading.Lock
    can_restart: bool = False

    def target(self) -> _Timed:
        return _Timed(self.log, self.lock)

    def restart_broker(self, graceful: bool) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


@attrs.define
class _Wall:
    log: dict[str, list[float]] = attrs.field(factory=dict)
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    name: str = "fake"
    config: BrokerConfig = attrs.field(factory=BrokerConfig)
    epsilon_ms: int = 0
    features: frozenset[Feature] = ALL_FEATURES

    def open(self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False) -> _Deployment:
        return _Deployment(config, self.log, self.lock)


def test_scenarios_marked_alone_run_after_the_others_one_at_a_time() -> None:
    def scenario(name: str, alone: bool) -> Any:
        steps = [{"send": {"topic": name, "body": "x"}} for _ in range(5)]
        doc = {"name": name, "steps": steps, "features": ["alone"] if alone else []}
        return make_scenario(doc, None, "test")

    together = [scenario(f"Together{n}", False) for n in range(6)]
    alone = [scenario(f"Alone{n}", True) for n in range(3)]
    wall = _Wall()
    report = run_wall(
        wall,
        [alone[0], *together[:3], alone[1], *together[3:], alone[2]],
        lambda cfg: InProcessTarget(Model(cfg)),
        WallOptions(concurrency=4, workload_seconds=0),
    )
    assert {r.outcome for r in report.scenarios} == {"pass"}
    spans = wall.log
    last_together = max(spans[s.id.split("/")[-1]][1] for s in together)
    for a in alone:
        start, end = spans[a.id.split("/")[-1]]
        assert start >= last_together
        others = [v for k, v in spans.items() if k != a.id.split("/")[-1]]
        assert all(end <= s or e <= start for s, e in others), f"{a.id} overlapped another scenario"

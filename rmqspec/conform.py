"""``rmqspec conform`` and ``rmqspec mutants``: run the suite on a target and report per rule.

The suite is the scenario catalogue (the spec's examples and more) plus the Hypothesis state machine
checked by the history checker. A target is ``reference``, ``mutant:NAME`` or ``remoting://HOST:PORT``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import attrs

from rmqspec.adapters.inprocess import InProcessTarget, WallClockTarget
from rmqspec.adapters.remoting.profile import ProfileError, TargetProfile, load_profile
from rmqspec.adapters.remoting.server import BackgroundServer
from rmqspec.adapters.remoting.target import RemotingTarget
from rmqspec.conformance.contract import Target, TargetError
from rmqspec.conformance.kill import KillRow
from rmqspec.conformance.kill import kill_matrix as run_kill_matrix
from rmqspec.conformance.machine import run_machine
from rmqspec.conformance.mutants import MUTANTS, Mutant
from rmqspec.conformance.scenarios import Scenario, ScenarioResult, catalogue, run_scenario
from rmqspec.conformance.wireprobe import FaultProxy
from rmqspec.conformance.workload import run_workload
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import NOT_ALLOWED_SEND_TOPICS, TRANS_CHECK_MAX_TIME_TOPIC
from rmqspec.reference.model import Model

TargetFactory = Callable[[BrokerConfig], Target]

# Behaviours the spec allows but users should know about: reported, never failed.
HAZARDS = {
    "transaction/not-idempotent": "a second END_TRANSACTION (or a commit after a rollback) is applied again "
    "while the half record exists: duplicate delivery is possible (4.9.x; apache/rocketmq #1517, #4436)",
}


class TargetSpecError(ValueError):
    """A --target value that names no known target."""


def remoting_profile(spec: str, profile: Path | None = None) -> TargetProfile:
    """The profile of a ``remoting://HOST:PORT`` target (the address in ``spec`` wins over the file's)."""
    address = spec.removeprefix("remoting://").strip("/") or None
    try:
        return load_profile(profile, address)
    except ProfileError as e:
        raise TargetSpecError(str(e)) from None


def target_factory(spec: str, profile: Path | None = None) -> TargetFactory:
    if spec == "reference":
        return lambda cfg: InProcessTarget(Model(cfg), name="reference")
    if spec.startswith("mutant:"):
        name = spec.removeprefix("mutant:")
        if name not in MUTANTS:
            raise TargetSpecError(
                f"unknown mutant {name!r}; `rmqspec mutants --list` shows the {len(MUTANTS)} names"
            )
        m = MUTANTS[name]
        if m.served_only:
            raise TargetSpecError(
                f"mutant {name!r} is a fault on the served wire: use --target served:mutant:{name}"
            )
        return lambda cfg: InProcessTarget(m.model(cfg), name=spec)
    if spec.startswith("remoting://"):
        tp = remoting_profile(spec, profile)
        return lambda cfg: RemotingTarget(tp, name=spec)
    raise TargetSpecError(
        f"unknown target {spec!r} (use reference, mutant:NAME, served[:mutant:NAME] or remoting://HOST:PORT)"
    )


def scenario_span_ms(s: Scenario) -> int:
    """How long a scenario runs on a wall clock: its last ``at``."""
    return max((int(step["at"]) for step in s.steps if "at" in step), default=0)


_ALWAYS_COMPARED = (
    "profile",
    "auto_create_topic",
    "auto_create_subscription_group",
    "max_message_size",
    "default_topic_queue_nums",
    "reject_transaction_message",
    "broker_writable",
    "retry_queue_nums",
    "retry_max_times",
)
_TX_FIELDS = ("transaction_timeout_ms", "transaction_check_interval_ms", "transaction_check_max")


def wall_skip_reason(s: Scenario, target: BrokerConfig, max_wait_ms: int) -> str | None:
    """Why a scenario cannot run on a wall-clock target with a fixed configuration (None: it can).

    A real broker's settings cannot be changed by the suite, so a scenario runs only when the settings it
    depends on are the broker's: always the ones that decide put and pull, the level table when it delays
    or retries anything, the transaction timings when it sends half messages. And it must end within
    ``max_wait_ms`` of wall time.
    """
    try:
        want = s.broker_config()
    except ValueError as e:
        return f"bad scenario config: {e}"
    text = json.dumps([dict(step) for step in s.steps])
    fields = list(_ALWAYS_COMPARED)
    if any(k in text for k in ("DELAY", "send_back", "%RETRY%", "%DLQ%")):
        fields.append("delay_levels")
    span = scenario_span_ms(s)
    if '"checks"' in text or TRANS_CHECK_MAX_TIME_TOPIC in text:
        fields.extend(_TX_FIELDS)
    elif "send_half" in text and span >= min(want.transaction_timeout_ms, target.transaction_timeout_ms):
        # Half messages left long enough to be checked: the check settings decide what is seen. A
        # scenario that ends sooner never meets the check service (its rounds see nothing old enough).
        fields.extend(_TX_FIELDS)
    for f in fields:
        a, b = getattr(want, f), getattr(target, f)
        if a != b:
            shown = want.describe() if f == "delay_levels" else a
            has = target.describe() if f == "delay_levels" else b
            return f"needs {f} = {shown} (the target has {has})"
    if any(op in text for op in ('"restart"', '"skew"')):
        return "needs restart or clock skew (not on a wall-clock target)"
    if '"checks"' in text or TRANS_CHECK_MAX_TIME_TOPIC in text:
        # Which check round falls before a given step depends on the check service's phase, which
        # the suite fixes on a logical clock only; the workload checks check timing two-sided instead.
        return "its check times assume the check service's phase (logical clocks only)"
    for system in sorted(NOT_ALLOWED_SEND_TOPICS):
        if f'"pull": {{"topic": "{system}"' in text:
            return f"reads {system}, which a shared broker fills with every client's messages"
    if span > max_wait_ms:
        return f"runs {span / 1000:.0f} s of wall time (limit {max_wait_ms / 1000:.0f} s: --max-wait)"
    return None


@attrs.frozen
class Report:
    target: str
    scenarios: tuple[ScenarioResult, ...]
    machine: str | None  # None: the state machine (or, on a wall clock, the workload) passed
    machine_examples: int
    seconds: float
    mode: str = "state machine"  # or "workload" (wall-clock targets: Jepsen-style, checked at the end)

    @property
    def passed(self) -> bool:
        return self.machine is None and all(r.outcome in ("pass", "skip") for r in self.scenarios)

    @property
    def hazards(self) -> dict[str, str]:
        """Hazard rules whose scenarios passed: the target shows the allowed but risky behaviour."""
        shown = {rule for r in self.scenarios if r.outcome == "pass" for rule in r.rules if rule in HAZARDS}
        return {rule: HAZARDS[rule] for rule in sorted(shown)}

    def by_rule(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in self.scenarios:
            for rule in r.rules:
                table[rule][r.outcome] += 1
        return {k: dict(v) for k, v in sorted(table.items())}

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "machine": {"mode": self.mode, "examples": self.machine_examples, "failure": self.machine},
            "rules": self.by_rule(),
            "hazards": self.hazards,
            "scenarios": [
                {
                    "id": r.scenario.id,
                    "rules": list(r.rules),
                    "outcome": r.outcome,
                    "reason": r.reason,
                    "failures": [attrs.asdict(f) for f in r.failures],
                }
                for r in self.scenarios
            ],
        }

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    def write_junit(self, path: Path) -> None:
        suite = ET.Element(
            "testsuite",
            name=f"rmqspec:{self.target}",
            tests=str(len(self.scenarios) + 1),
            failures=str(sum(r.outcome == "fail" for r in self.scenarios) + (self.machine is not None)),
            skipped=str(sum(r.outcome in ("skip", "unknown") for r in self.scenarios)),
            time=f"{self.seconds:.3f}",
        )
        for r in self.scenarios:
            case = ET.SubElement(
                suite, "testcase", classname=r.rules[0] if r.rules else "catalogue", name=r.scenario.id
            )
            if r.outcome == "fail":
                f = ET.SubElement(case, "failure", message=f"{len(r.failures)} step(s) failed")
                f.text = "\n".join(f"step {x.step} ({x.operation}): {x.message}" for x in r.failures)
            elif r.outcome in ("skip", "unknown"):
                ET.SubElement(case, "skipped", message=r.reason)
        case = ET.SubElement(suite, "testcase", classname="state-machine", name="history-checker")
        if self.machine is not None:
            ET.SubElement(case, "failure", message="anomalies").text = self.machine
        ET.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)


def conform(
    target: str,
    *,
    scenarios: list[Scenario] | None = None,
    examples: int = 50,
    steps: int = 30,
    epsilon_ms: int = 0,
    save_dir: Path | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    seed: int | None = 0,
    shrink: bool = True,
    profile: Path | None = None,
    workload_seconds: float = 30.0,
    max_wait_ms: int = 30_000,
) -> Report:
    """Run the suite on ``target``. On a wall-clock target (``remoting://``) the scenarios that fit its
    configuration run, then the concurrent workload (``workload_seconds``) instead of the state machine."""
    if target == "served" or target.startswith("served:"):
        return _conform_served(
            target,
            profile,
            scenarios if scenarios is not None else catalogue(),
            epsilon_ms=epsilon_ms,
            progress=progress,
            seed=seed or 0,
            workload_seconds=workload_seconds,
            max_wait_ms=max_wait_ms,
        )
    if target.startswith("remoting://"):
        return _conform_wall(
            target,
            remoting_profile(target, profile),
            scenarios if scenarios is not None else catalogue(),
            epsilon_ms=epsilon_ms,
            progress=progress,
            seed=seed or 0,
            workload_seconds=workload_seconds,
            max_wait_ms=max_wait_ms,
        )
    factory = target_factory(target)
    scenarios = scenarios if scenarios is not None else catalogue()
    start = time.perf_counter()
    results = []
    total = len(scenarios) + 1
    for n, s in enumerate(scenarios):
        if progress:
            progress(n, total, s.id)
        results.append(run_scenario(s, factory, epsilon_ms=max(epsilon_ms, 500), salt="conform"))
    if progress:
        progress(len(scenarios), total, "state machine")
    failure = None
    if examples > 0:
        failure = run_machine(
            factory,
            BrokerConfig(),
            max_examples=examples,
            stateful_step_count=steps,
            epsilon_ms=epsilon_ms,
            save_dir=save_dir,
            seed=seed,
        )
    if progress:
        progress(total, total, "done")
    return Report(target, tuple(results), failure, examples, time.perf_counter() - start)


def _conform_served(
    target: str,
    profile: Path | None,
    scenarios: list[Scenario],
    **kw: Any,
) -> Report:
    """``served`` / ``served:mutant:NAME``: ``rmqspec serve`` in this process on a free loopback port,
    judged over TCP exactly as a remote broker is."""
    inner = target.removeprefix("served").removeprefix(":") or "reference"
    tp = remoting_profile("remoting://127.0.0.1:1", profile)
    mutant: Mutant | None = None
    if inner == "reference":
        model = Model(tp.config)
    elif inner.startswith("mutant:") and inner.removeprefix("mutant:") in MUTANTS:
        mutant = MUTANTS[inner.removeprefix("mutant:")]
        model = mutant.model(tp.config)
    else:
        raise TargetSpecError(f"cannot serve {inner!r}: use served, served:reference or served:mutant:NAME")
    with _served(model, inner, mutant) as (host, port):
        address = f"remoting://{host}:{port}"
        rep = _conform_wall(address, attrs.evolve(tp, host=host, port=port), scenarios, **kw)
    return attrs.evolve(rep, target=target)


@contextlib.contextmanager
def _served(model: Model, name: str, mutant: Mutant | None) -> Iterator[tuple[str, int]]:
    """The model over TCP; a wire mutant's fault between it and the client."""
    with BackgroundServer(WallClockTarget(model, name=f"{name}@wall")) as (host, port):
        if mutant is None or mutant.wire is None:
            yield host, port
            return
        with FaultProxy(host, port, mutant.wire) as (proxy_host, proxy_port):
            yield proxy_host, proxy_port


def _conform_wall(
    target: str,
    tp: TargetProfile,
    scenarios: list[Scenario],
    *,
    epsilon_ms: int,
    progress: Callable[[int, int, str], None] | None,
    seed: int,
    workload_seconds: float,
    max_wait_ms: int,
) -> Report:
    eps = epsilon_ms or tp.epsilon_ms
    try:  # fail fast, with the address, when nothing listens there
        RemotingTarget(tp, name=target).close()
    except TargetError as e:
        raise TargetSpecError(str(e)) from None
    features = frozenset(RemotingTarget.features_of(tp))
    start = time.perf_counter()
    results: list[ScenarioResult] = []
    total = len(scenarios) + 1
    for n, s in enumerate(scenarios):
        if progress:
            progress(n, total, s.id)
        reason = wall_skip_reason(s, tp.config, max_wait_ms)
        if reason is not None:
            results.append(ScenarioResult(s, "skip", reason))
            continue
        results.append(
            run_scenario(
                s,
                lambda cfg: RemotingTarget(tp, name=target),
                features=features,
                profile=tp.config.profile,
                epsilon_ms=eps,
                salt=f"conform{time.time_ns()}",
            )
        )
    if progress:
        progress(len(scenarios), total, f"workload ({workload_seconds:.0f} s)")
    failure: str | None = None
    operations = 0
    if workload_seconds > 0:
        wt = RemotingTarget(tp, name=target)
        try:
            result = run_workload(wt, seconds=workload_seconds, seed=seed, epsilon_ms=eps, levels=3)
        finally:
            wt.close()
        operations = result.operations
        v = result.verdict
        if v.valid != "pass":
            lines = [
                f"workload verdict {v.valid} ({v.consumed}/{v.total} events consumed) {v.reason}".rstrip()
            ]
            lines += [f"{a.name} [{a.rule}] at event {a.event}: {a.message}" for a in v.anomalies[:20]]
            failure = "\n".join(lines)
    if progress:
        progress(total, total, "done")
    return Report(target, tuple(results), failure, operations, time.perf_counter() - start, mode="workload")


def run_one(target: str, scenario: Scenario, profile: Path | None = None) -> ScenarioResult:
    """One scenario on ``target`` as ``conform`` runs it (the pytest plugin's scenario items)."""
    if target.startswith("remoting://"):
        tp = remoting_profile(target, profile)
        reason = wall_skip_reason(scenario, tp.config, 30_000)
        if reason is not None:
            return ScenarioResult(scenario, "skip", reason)
        return run_scenario(
            scenario,
            lambda cfg: RemotingTarget(tp, name=target),
            features=RemotingTarget.features_of(tp),
            profile=tp.config.profile,
            epsilon_ms=tp.epsilon_ms,
            salt=f"pytest{time.time_ns()}",
        )
    return run_scenario(scenario, target_factory(target), salt="pytest")


def run_checked_workload(target: str, profile: Path | None, *, examples: int, seconds: float) -> str | None:
    """The history-checked part of the suite: the state machine in process, the workload on a wall
    clock. None when it passed, else the failure."""
    if target.startswith("remoting://"):
        rep = _conform_wall(
            target,
            remoting_profile(target, profile),
            [],
            epsilon_ms=0,
            progress=None,
            seed=0,
            workload_seconds=seconds,
            max_wait_ms=0,
        )
        return rep.machine
    return run_machine(target_factory(target), BrokerConfig(), max_examples=examples)


class CommandLineTargets:
    """The kill matrix's targets: a mutant's model in process, the reference served over TCP."""

    def in_process(self, mutant: Mutant, config: BrokerConfig) -> Target:
        return InProcessTarget(mutant.model(config), name=f"mutant:{mutant.name}")

    def serve(self, config: BrokerConfig) -> AbstractContextManager[tuple[str, int]]:
        return BackgroundServer(WallClockTarget(Model(config), name="reference@wall"))


def kill_matrix(
    *,
    examples: int = 30,
    names: list[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    scenarios: list[Scenario] | None = None,
    workers: int = 1,
) -> list[KillRow]:
    """``conformance.kill.kill_matrix`` with the command line's targets."""
    return run_kill_matrix(
        CommandLineTargets(),
        examples=examples,
        names=names,
        progress=progress,
        scenarios=scenarios,
        workers=workers,
    )

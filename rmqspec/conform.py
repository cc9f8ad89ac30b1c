"""``rmqspec conform``: resolve a ``--target`` to a target and run the suite on it (conformance/suite.py).

Targets: ``reference``, ``mutant:NAME`` (logical clock), ``served[:mutant:NAME]`` (the model served over
TCP in this process), ``remoting://HOST:PORT`` (any broker, settings from ``--profile``), and
``apache:VERSION`` (a real Apache RocketMQ broker that rmqspec starts, judges and stops).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import attrs

from rmqspec.adapters.inprocess import InProcessTarget, WallClockTarget
from rmqspec.adapters.remoting.deploy import FixedRemoting, RemotingDeployment, Served
from rmqspec.adapters.remoting.profile import ProfileError, TargetProfile, load_profile
from rmqspec.adapters.remoting.server import BackgroundServer
from rmqspec.adapters.remoting.target import RemotingTarget
from rmqspec.conformance.contract import Feature, ProtocolFailure, Target, TargetError
from rmqspec.conformance.faultgen import Grade, combination, grade
from rmqspec.conformance.faultgen import crashed as grade_crashed
from rmqspec.conformance.faults import FaultRow, crashed, fault, judge
from rmqspec.conformance.faults import fault_matrix as run_fault_matrix
from rmqspec.conformance.history import save
from rmqspec.conformance.kill import KillRow
from rmqspec.conformance.kill import kill_matrix as run_kill_matrix
from rmqspec.conformance.machine import run_machine
from rmqspec.conformance.mutants import MUTANTS, Mutant
from rmqspec.conformance.scenario_run import ScenarioResult, run_scenario
from rmqspec.conformance.scenarios import Scenario, catalogue
from rmqspec.conformance.suite import (
    HAZARDS,
    Deployment,
    Report,
    WallOptions,
    WallTarget,
    WorkloadSummary,
    run_logical,
    run_wall,
)
from rmqspec.conformance.wireprobe import FaultProxy, Faulty, ProbeResult
from rmqspec.conformance.wireprobe import probe as wire_probe
from rmqspec.conformance.workload import Chaos, run_workload
from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.model import Model

__all__ = [
    "HAZARDS",
    "Report",
    "TargetSpecError",
    "conform",
    "run_checked_workload",
    "run_one",
    "target_factory",
]

TargetFactory = Callable[[BrokerConfig], Target]


# Every form --target takes: the option's help and the unknown-target error both say it
# (tests/test_doc_numbers.py holds them to the forms wall_target and target_factory accept).
TARGET_FORMS = (
    "reference, mutant:NAME, served[:mutant:NAME|:fault:NAME] (the model served over TCP here), "
    "remoting://HOST:PORT (any broker), apache:VERSION (a real Apache RocketMQ that rmqspec starts), "
    "grpc://HOST:PORT[?admin=HOST:PORT] (a 5.x proxy) or apache-proxy:VERSION (the real proxy that rmqspec starts)"
)


class TargetSpecError(ValueError):
    """A --target (or --profile) value that cannot be used; the message names which and why."""


def reference_factory(cfg: BrokerConfig) -> Target:
    return InProcessTarget(Model(cfg), name="reference")


def remoting_profile(spec: str, profile: Path | None = None) -> TargetProfile:
    """The profile of a ``remoting://HOST:PORT`` target (the address in ``spec`` wins over the file's)."""
    address = spec.removeprefix("remoting://").strip("/")
    if spec.startswith("remoting://"):
        _check_address(address, spec)
    try:
        return load_profile(profile, address or None)
    except ProfileError as e:
        raise TargetSpecError(str(e)) from None


def _check_address(address: str, spec: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TargetSpecError(
            f"--target {spec!r}: the address must be remoting://HOST:PORT with a port from 1 to 65535 "
            "(RocketMQ's default is 10911)"
        )


def _profile_config(profile: Path | None) -> BrokerConfig | None:
    if profile is None:
        return None
    return remoting_profile("remoting://127.0.0.1:1", profile).config


def target_factory(spec: str, profile: Path | None = None) -> TargetFactory:
    """A logical-clock target factory for ``reference`` or ``mutant:NAME``."""
    if spec == "reference":
        return reference_factory
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
        return lambda cfg: InProcessTarget(m.model(cfg), name=spec, config=cfg)
    raise TargetSpecError(f"unknown target {spec!r} (use {TARGET_FORMS})")


def wall_target(spec: str, profile: Path | None) -> WallTarget:
    """The wall-clock target a ``--target`` names (served, remoting://, apache:)."""
    if spec == "served" or spec.startswith("served:"):
        inner = spec.removeprefix("served").removeprefix(":") or "reference"
        tp = remoting_profile("remoting://127.0.0.1:1", profile)
        if inner == "reference":
            return Served(tp, spec, lambda cfg: Model(cfg))
        name = inner.removeprefix("mutant:")
        if inner.startswith("mutant:") and name in MUTANTS:
            return _served(Served(tp, spec, MUTANTS[name].model), MUTANTS[name].wire)
        try:
            if inner.startswith("combo:"):
                combo = combination(inner.removeprefix("combo:"))
                return _served(Served(tp, spec, combo.model), combo.wire_fault())
            if inner.startswith("fault:"):
                f = fault(inner.removeprefix("fault:"))
                return _served(Served(tp, spec, f.model), f.wire_fault())
        except KeyError as e:
            raise TargetSpecError(str(e.args[0])) from None
        raise TargetSpecError(
            f"cannot serve {inner!r}: use served, served:reference, served:mutant:NAME, served:fault:NAME or "
            "served:combo:SEED:INDEX|NAME"
        )
    if spec.startswith("remoting://"):
        tp = remoting_profile(spec, profile)
        probe(tp, spec)
        return FixedRemoting(tp, spec)
    if spec.startswith("apache:"):
        from rmqspec.adapters.apache.suite import apache_target

        try:
            return apache_target(spec.removeprefix("apache:"), profile)
        except (ValueError, OSError) as e:
            raise TargetSpecError(str(e)) from None
    if spec.startswith(("grpc://", "apache-proxy:")):
        return grpc_wall_target(spec, profile)
    raise TargetSpecError(f"unknown target {spec!r} (use {TARGET_FORMS})")


def _served(served: Served, wire: Faulty | None) -> WallTarget:
    """The served model, its frames through ``wire`` when there is one."""
    return served if wire is None else FaultServed(served, wire)


def grpc_wall_target(spec: str, profile: Path | None) -> WallTarget:
    """``grpc://HOST:PORT[?admin=HOST:PORT]`` or ``apache-proxy:VERSION``: a 5.x broker behind its proxy."""
    try:
        from rmqspec.adapters.grpc.deploy import ApacheProxyTarget, FixedGrpc, GrpcSpecError, parse_grpc
        from rmqspec.adapters.grpc.target import GrpcProfile
    except ImportError as e:
        raise TargetSpecError(
            f"--target {spec!r} needs the gRPC extra (grpcio, protobuf, rocketmq-python-client: "
            f"pip install '.[grpc]' in a checkout): {e}"
        ) from None
    tp = remoting_profile("remoting://127.0.0.1:1", profile)
    if tp.config.profile is not Profile.V5:
        raise TargetSpecError(
            f'--target {spec!r} is a 5.x broker behind the gRPC proxy: give a profile with profile: "5.x"'
        )
    if spec.startswith("apache-proxy:"):
        from rmqspec.adapters.apache.versions import UnknownVersion, pinned

        try:
            row = pinned(spec.removeprefix("apache-proxy:"))
        except UnknownVersion as e:
            raise TargetSpecError(str(e)) from None
        if not row.proxy:
            raise TargetSpecError(f"Apache RocketMQ {row.version} has no gRPC proxy (a 5.x artifact)")
        gp = GrpcProfile("127.0.0.1", 8081, tp.config, None, spec, tp.timeout_s, tp.epsilon_ms)
        return ApacheProxyTarget(row.version, gp, spec)
    try:
        host, port, admin = parse_grpc(spec)
    except GrpcSpecError as e:
        raise TargetSpecError(str(e)) from None
    return FixedGrpc(GrpcProfile(host, port, tp.config, admin, spec, tp.timeout_s, tp.epsilon_ms), spec)


def probe(tp: TargetProfile, spec: str) -> None:
    """Fail fast, with the address, when nothing there answers as a RocketMQ broker within the timeout."""
    try:
        t = RemotingTarget(tp, name=spec)
    except TargetError as e:
        raise TargetSpecError(str(e)) from None
    try:
        from rmqspec.reference.model import GetMaxOffset

        t.execute(GetMaxOffset("rmqspec_probe", 0))
    except ProtocolFailure as e:
        what = "an HTTP server" if _looks_like_http(e.frame) else "something that does not speak it"
        raise TargetSpecError(
            f"{tp.host}:{tp.port} is not a RocketMQ remoting endpoint: it answered with bytes that are not a "
            f"remoting frame ({e.rule}), as {what} does; frame: {e.frame}"
        ) from None
    except TargetError as e:
        raise TargetSpecError(
            f"no RocketMQ reply from {tp.host}:{tp.port} within {tp.timeout_s:g} s: is it a RocketMQ remoting "
            f"endpoint? ({e})"
        ) from None
    finally:
        t.close()


def _looks_like_http(frame: str | None) -> bool:
    """Whether the bytes a MalformedFrame shows ("N bytes: HEX") begin an HTTP response."""
    hexed = (frame or "").partition(": ")[2]
    return hexed.startswith(b"HTTP/".hex())


def probe_deployment(dep: Deployment) -> ProbeResult:
    """The wire probe of a broker over the remoting protocol, with its settings: the check of the probe's
    half message is awaited for transactionTimeOut + one transactionCheckInterval + epsilon."""
    profile = getattr(dep, "profile", None)
    tp = profile() if callable(profile) else profile
    if not isinstance(tp, TargetProfile):
        raise TypeError(f"{type(dep).__name__} is not a broker over the remoting protocol")
    cfg = tp.config
    wait = (cfg.transaction_timeout_ms + cfg.transaction_check_interval_ms + tp.epsilon_ms) / 1000
    return wire_probe(tp.host, tp.port, timeout_s=tp.timeout_s, check_wait_s=wait)


def is_wall(spec: str) -> bool:
    return spec == "served" or spec.startswith(
        ("served:", "remoting://", "apache:", "grpc://", "apache-proxy:")
    )


def is_grpc(spec: str) -> bool:
    return spec.startswith(("grpc://", "apache-proxy:"))


def conform(
    target: str,
    *,
    scenarios: list[Scenario] | None = None,
    examples: int = 50,
    steps: int = 30,
    epsilon_ms: int | None = None,
    save_dir: Path | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    seed: int | None = 0,
    shrink: bool = True,
    profile: Path | None = None,
    workload_seconds: float = 30.0,
    max_wait_ms: int = 60_000,
    concurrency: int = 16,
    chaos: bool = False,
    probe: bool = True,
    plots: Path | None = None,
    brokers: int = 3,
) -> Report:
    """Run the suite on ``target``. Logical targets: every scenario (under ``profile``'s settings when
    one is given) and the state machine. Wall-clock targets: the scenarios that fit, concurrently, then
    the workload; over the remoting protocol, the wire probe beside them from the start (``probe``).
    Raises TargetSpecError for a target or profile that cannot be used."""
    scenarios = scenarios if scenarios is not None else catalogue()
    scenarios, unclaimed = _claimed(target, scenarios)
    stamp = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "profile": None if profile is None else str(profile),
        "rmqspec": _version(),
    }
    rep = _conform(
        target,
        scenarios,
        examples=examples,
        steps=steps,
        epsilon_ms=epsilon_ms,
        save_dir=save_dir,
        progress=progress,
        seed=seed,
        shrink=shrink,
        profile=profile,
        workload_seconds=workload_seconds,
        max_wait_ms=max_wait_ms,
        concurrency=concurrency,
        chaos=chaos,
        probe=probe,
        plots=plots,
        brokers=brokers,
    )
    if unclaimed:
        rep = attrs.evolve(rep, scenarios=rep.scenarios + tuple(unclaimed))
    return attrs.evolve(rep, settings={**stamp, **rep.settings})


def _claimed(target: str, scenarios: list[Scenario]) -> tuple[list[Scenario], list[ScenarioResult]]:
    """On a real broker of one release (apache:V, apache-proxy:V), the scenarios whose expected answers hold
    on V (their own releases, else what their rules' Versions lines claim: rmqspec/matrix.py), and a skip
    saying "read, not run" for each of the others: a release that a Versions line says behaves otherwise
    than the line's model profile is not judged by that profile."""
    release = next(
        (target.removeprefix(p) for p in ("apache:", "apache-proxy:") if target.startswith(p)), None
    )
    if release is None:
        return scenarios, []
    from rmqspec.conformance.specdoc import load_spec

    from . import matrix

    try:
        line = matrix.line_of(release)
    except matrix.MatrixError:
        return scenarios, []  # not a release: apache_target says so
    versions = {r.id: r.versions for r in load_spec().rules}
    keep: list[Scenario] = []
    off: list[ScenarioResult] = []
    for s in scenarios:
        if line is None or (s.profile is not None and s.profile != line.value):
            keep.append(s)  # another line's scenario: the suite skips it, saying so
            continue
        c = matrix.claim(s, versions)
        if c.covers(release):
            keep.append(s)
        else:
            where = ", ".join(a if a == b else f"{a}–{b}" for a, b in c.ranges) or "no release"
            what = "its releases are" if c.source == "scenario" else "its rules' Versions lines claim it on"
            off.append(ScenarioResult(s, "skip", f"{matrix.READ_NOT_RUN} on {release}: {what} {where}"))
    return keep, off


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rmqspec")
    except PackageNotFoundError:
        return "unknown"


def _conform(
    target: str,
    scenarios: list[Scenario],
    *,
    examples: int,
    steps: int,
    epsilon_ms: int | None,
    save_dir: Path | None,
    progress: Callable[[int, int, str], None] | None,
    seed: int | None,
    shrink: bool,
    profile: Path | None,
    workload_seconds: float,
    max_wait_ms: int,
    concurrency: int,
    chaos: bool,
    probe: bool,
    plots: Path | None = None,
    brokers: int = 3,
) -> Report:
    if is_wall(target):
        if chaos and not (target == "served" or target.startswith(("served:", "apache:"))):
            raise TargetSpecError(
                "--chaos restarts the broker: it needs a target rmqspec starts (apache:VERSION or served)"
            )
        wt = wall_target(target, profile)
        options = WallOptions(
            epsilon_ms=epsilon_ms or None,
            max_wait_ms=max_wait_ms,
            concurrency=concurrency,
            # the workload reads queues by offset and sends with the broker's own properties: remoting only
            workload_seconds=0 if is_grpc(target) else workload_seconds,
            seed=seed or 0,
            save_dir=save_dir,
            chaos=chaos,
            plots_dir=plots,
            deployments=brokers,
        )
        try:
            return run_wall(
                wt,
                scenarios,
                reference_factory,
                options,
                progress=progress,
                workload=lambda dep, eps: _workload(dep, eps, options, target),
                probe=probe_deployment if probe and not is_grpc(target) else None,
            )
        except TargetError as e:
            raise TargetSpecError(str(e)) from None
    factory = target_factory(target)
    base = _profile_config(profile)

    def machine() -> str | None:
        if examples <= 0:
            return None
        return run_machine(
            factory,
            base or BrokerConfig(),
            max_examples=examples,
            stateful_step_count=steps,
            epsilon_ms=epsilon_ms or 0,
            save_dir=save_dir,
            seed=seed,
            shrink=shrink,
        )

    return run_logical(
        target, factory, scenarios, base=base, machine=machine, examples=examples, progress=progress
    )


def _workload(dep: Deployment, eps: int, options: WallOptions, name: str) -> WorkloadSummary:
    target = dep.target()
    chaos = Chaos(dep.restart_broker) if options.chaos else None
    try:
        result = run_workload(
            target, seconds=options.workload_seconds, seed=options.seed, epsilon_ms=eps, levels=3, chaos=chaos
        )
    finally:
        target.close()
    v = result.verdict
    history = None
    if options.save_dir is not None and (v.status != "pass" or options.chaos):
        options.save_dir.mkdir(parents=True, exist_ok=True)
        path = options.save_dir / f"workload-{time.strftime('%Y%m%dT%H%M%S')}.jsonl"
        save(result.events, path, {"target": name, "epsilon_ms": eps, "verdict": v.status})
        history = str(path)
    lost = sum(a.name == "lost-message" and a.cause is None for a in v.anomalies)
    roots = []
    for root in v.to_json()["root_causes"]:
        i = root["event"]
        event = result.events[i] if 0 <= i < len(result.events) else None
        if event is not None:  # where it showed: the operation, its time and (a protocol failure) its frame
            root = {**root, "f": event.f, "time": event.time, "frame": event.value.get("frame")}
        roots.append(root)
    unknown: dict[str, int] = {}
    for e in result.events:
        if e.type == "info":
            unknown[e.f] = unknown.get(e.f, 0) + 1
    plots: tuple[str, ...] = ()
    if options.plots_dir is not None:
        try:
            from rmqspec.conformance.plots import plot_history

            drawn = plot_history(result.events, dep.config, eps, options.plots_dir, title=name)
            plots = tuple(str(d.path) for d in drawn)
        except ModuleNotFoundError:  # matplotlib comes with the [spark] extra
            plots = ()
    return WorkloadSummary(
        operations=result.operations,
        verdict=v.status,
        unknown_operations=unknown,
        anomalies=tuple(roots),
        summary=v.summary(),
        reason=v.reason,
        history=history,
        restarts=result.restarts,
        acknowledged=result.acknowledged(),
        lost=lost,
        duplicates_allowed=result.duplicates() if v.status == "pass" else 0,
        seconds=result.seconds,
        plots=plots,
    )


def run_one(target: str, scenario: Scenario, profile: Path | None = None) -> ScenarioResult:
    """One scenario on ``target`` as ``conform`` runs it (the pytest plugin's scenario items)."""
    if is_wall(target):
        rep = conform(
            target,
            scenarios=[scenario],
            profile=profile,
            workload_seconds=0,
            examples=0,
            concurrency=1,
            probe=False,
        )
        return rep.scenarios[0]
    return run_scenario(scenario, target_factory(target), base=_profile_config(profile), salt="pytest")


def run_checked_workload(target: str, profile: Path | None, *, examples: int, seconds: float) -> str | None:
    """The history-checked part of the suite: the state machine in process, the workload on a wall
    clock. None when it passed, else the failure."""
    if is_wall(target):
        return conform(target, scenarios=[], profile=profile, workload_seconds=seconds, probe=False).machine
    return run_machine(
        target_factory(target), _profile_config(profile) or BrokerConfig(), max_examples=examples
    )


@attrs.frozen
class FaultServed:
    """``served:mutant:NAME`` for a wire mutant, ``served:fault:NAME``: the model served, its frames through
    the fault (one for the whole run: every broker it opens shares it)."""

    served: Served
    wire: Faulty

    @property
    def name(self) -> str:
        return self.served.name

    @property
    def config(self) -> BrokerConfig:
        return self.served.config

    @property
    def epsilon_ms(self) -> int:
        return self.served.epsilon_ms

    @property
    def features(self) -> frozenset[Feature]:
        return self.served.features

    def open(
        self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False
    ) -> RemotingDeployment:
        dep = self.served.open(config, exclusive=exclusive, skewable=skewable)
        proxy = FaultProxy(dep.profile.host, dep.profile.port, self.wire)
        host, port = proxy.__enter__()

        def close() -> None:
            proxy.__exit__(None, None, None)
            dep.close()

        return RemotingDeployment(
            attrs.evolve(dep.profile, host=host, port=port),
            dep.name,
            restarter=dep.restarter,
            closer=close,
            skewer=dep.skewer,
            clock=dep.clock,
            fast=dep.fast,
            isolated=dep.isolated,
        )


class CommandLineTargets:
    """The kill matrix's targets: a mutant's model in process, the reference served over TCP."""

    def in_process(self, mutant: Mutant, config: BrokerConfig) -> Target:
        return InProcessTarget(mutant.model(config), name=f"mutant:{mutant.name}", config=config)

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


@attrs.frozen
class FaultRunner:
    """The faults matrix's run of one fault: the whole suite over TCP against ``served:fault:NAME`` with
    ``profile``'s settings, its report written to ``report_dir/NAME.json`` (and its failing histories
    under ``report_dir/NAME/``) when given. Pickles, for ``workers`` > 1."""

    profile: Path | None = None
    workload_seconds: float = 10.0
    report_dir: Path | None = None
    max_wait_ms: int = 60_000
    brokers: int = 2  # brokers of one run at once (several runs go on beside it)

    def __call__(self, name: str) -> FaultRow:
        f = fault(name)
        start = time.perf_counter()
        try:
            rep = conform(
                f"served:fault:{name}",
                profile=self.profile,
                workload_seconds=self.workload_seconds,
                max_wait_ms=self.max_wait_ms,
                save_dir=None if self.report_dir is None else self.report_dir / name,
                brokers=self.brokers,
            )
        except Exception as e:  # a crash is a row of the matrix, never the matrix's end
            return crashed(f, e, seconds=time.perf_counter() - start)
        path = None
        if self.report_dir is not None:
            path = self.report_dir / f"{name}.json"
            rep.write_json(path)
        return judge(f, rep, seconds=time.perf_counter() - start, report=None if path is None else str(path))


def fault_matrix(
    runner: FaultRunner,
    names: list[str] | None = None,
    *,
    workers: int = 1,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[FaultRow]:
    """``conformance.faults.fault_matrix`` with the command line's runner."""
    return run_fault_matrix(runner, names, workers=workers, progress=progress)


@attrs.frozen
class ComboRunner:
    """One generated (or named) combination of faults: the suite over TCP against ``served:combo:SPEC``,
    its diagnosis graded against the combination's truth. Pickles, for ``workers`` > 1."""

    profile: Path | None = None
    workload_seconds: float = 10.0
    report_dir: Path | None = None
    max_wait_ms: int = 60_000
    brokers: int = 2

    def __call__(self, spec: str) -> Grade:
        combo = combination(spec)
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", combo.name)
        try:
            rep = conform(
                f"served:combo:{spec}",
                profile=self.profile,
                workload_seconds=self.workload_seconds,
                max_wait_ms=self.max_wait_ms,
                save_dir=None if self.report_dir is None else self.report_dir / safe,
                brokers=self.brokers,
            )
        except Exception as e:  # a crash is a graded row, never the end of the run
            return grade_crashed(combo, f"{type(e).__name__}: {e}")
        if self.report_dir is not None:
            rep.write_json(self.report_dir / f"{safe}.json")
        return grade(combo, [r.rule for r in rep.root_causes], rep.exit_code)


def combo_matrix(
    runner: ComboRunner,
    specs: list[str],
    *,
    workers: int = 1,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[Grade]:
    """``runner`` over every spec, ``workers`` at once (processes), in the order given."""
    done: dict[str, Grade] = {}

    def finish(spec: str, g: Grade) -> None:
        done[spec] = g
        if progress is not None:
            progress(len(done), len(specs), g.combination)

    if workers <= 1:
        for s in specs:
            finish(s, runner(s))
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=min(workers, len(specs))) as pool:
            futures = {pool.submit(runner, s): s for s in specs}
            for fut in as_completed(futures):
                s = futures[fut]
                try:
                    finish(s, fut.result())
                except Exception as e:
                    finish(s, grade_crashed(combination(s), f"{type(e).__name__}: {e}"))
    return [done[s] for s in specs]

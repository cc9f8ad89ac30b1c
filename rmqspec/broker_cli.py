"""``rmqspec broker``: fetch, start, stop and inspect real Apache RocketMQ brokers (docs/guides/real-brokers.md)."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from rmqspec.console import make_console

if TYPE_CHECKING:
    from rmqspec.adapters.apache.launcher import Isolation

console = make_console()
err = make_console(stderr=True)
broker_app = typer.Typer(
    help="Real Apache RocketMQ brokers from Maven Central: fetch, start, stop, status, record.",
    no_args_is_help=True,
)

VersionOpt = Annotated[
    str | None, typer.Option("--version", help="a pinned version (`rmqspec broker versions`)")
]
StoreOpt = Annotated[
    Path | None, typer.Option("--store", help="the broker's directory (store, logs, broker.conf)")
]
IsolationOpt = Annotated[
    str, typer.Option("--isolation", help="auto (a network namespace when root on Linux), netns or host")
]


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(2)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """While the command waits on a broker, SIGTERM and SIGHUP interrupt it like Ctrl-C, so the broker it was
    starting is stopped on the way out instead of being left running."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _version(version: str | None) -> str:
    from rmqspec.adapters.apache.versions import DEFAULT_VERSION, UnknownVersion, pinned

    try:
        return pinned(version or DEFAULT_VERSION).version
    except UnknownVersion as e:
        raise _fail(str(e)) from None


def _isolation(value: str) -> Isolation:
    if value == "auto":
        return "auto"
    if value == "netns":
        return "netns"
    if value == "host":
        return "host"
    raise _fail(f"--isolation {value!r}: use auto, netns or host")


@broker_app.command("versions")
def versions_cmd() -> None:
    """The pinned Apache RocketMQ versions and whether each is in the cache."""
    from rmqspec.adapters.apache.maven import cached, version_dir
    from rmqspec.adapters.apache.versions import DEFAULT_VERSION, PINNED

    for v, row in PINNED.items():
        have = all(cached(v, a) is not None for a in row.artifacts)
        mark = " (default)" if v == DEFAULT_VERSION else ""
        state = f"cached in {version_dir(v)}" if have else "not fetched"
        console.print(f"{v}{mark}: spec profile {row.line.value}, {', '.join(row.artifacts)}; {state}")
        console.print(f"  {escape(row.notes)}")


@broker_app.command("fetch")
def fetch_cmd(
    version: Annotated[
        list[str] | None,
        typer.Option("--version", help="a pinned version (repeat; default: every pinned one)"),
    ] = None,
) -> None:
    """Resolve pinned versions from Maven Central into the cache (offline afterwards)."""
    from rmqspec.adapters.apache.maven import ResolveError, fetch, version_dir
    from rmqspec.adapters.apache.versions import PINNED

    wanted = [_version(v) for v in version] if version else list(PINNED)
    for v in wanted:
        try:
            got = fetch(v)
        except ResolveError as e:
            raise _fail(str(e)) from None
        jars = ", ".join(f"{cp.artifact} {len(cp.jars)} jars" for cp in got.classpaths)
        how = "already cached" if got.from_cache else f"resolved in {got.seconds:.1f} s"
        console.print(f"Apache RocketMQ {v}: {jars}; {how}; {version_dir(v)}")


@broker_app.command("start")
def start_cmd(
    version: VersionOpt = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile",
            help="target profile (a YAML file, or a shipped one by name: short-levels) whose broker settings become broker.conf",
        ),
    ] = None,
    store: StoreOpt = None,
    port: Annotated[
        int, typer.Option("--port", help="the broker's listen port (it also uses port-2 and port+1)")
    ] = 10911,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="wipe --store first (only a directory rmqspec made)")
    ] = False,
    isolation: IsolationOpt = "auto",
    timeout: Annotated[
        float, typer.Option("--timeout", help="seconds to wait for the broker to answer")
    ] = 60.0,
    proxy: Annotated[
        bool,
        typer.Option(
            "--proxy", help="5.x: run rocketmq-proxy in local mode (it embeds the broker) and serve gRPC too"
        ),
    ] = False,
    grpc_port: Annotated[
        int, typer.Option("--grpc-port", help="the proxy's gRPC port (with --proxy)")
    ] = 8081,
) -> None:
    """Start a broker with a fresh store and a broker.conf generated from the profile; wait until it answers."""
    from rmqspec.adapters.apache.launcher import ApacheBroker, BrokerError
    from rmqspec.adapters.remoting.profile import ProfileError, load_profile

    v = _version(version)
    iso = _isolation(isolation)
    if not 3 <= port <= 65534:
        raise _fail(f"--port {port}: the broker also listens on port-2 and port+1, so use 3-65534")
    if timeout <= 0:
        raise _fail(f"--timeout {timeout}: must be > 0 seconds")
    try:
        config = load_profile(profile, f"127.0.0.1:{port}").config
    except ProfileError as e:
        raise _fail(str(e)) from None
    if not 1 <= grpc_port <= 65535:
        raise _fail(f"--grpc-port {grpc_port}: use 1-65535")
    from rmqspec.adapters.apache.config import group_settings

    groups = group_settings(config)
    if groups:
        raise _fail(
            f"{', '.join(groups)} cannot be given to a real broker: a subscription group setting "
            "(SubscriptionGroupConfig), not a broker.conf key; `rmqspec conform --target apache:VERSION` "
            "creates its groups with it, a broker started alone gives every group the defaults"
        )
    try:
        broker = ApacheBroker(
            v,
            config,
            store,
            port,
            isolation=iso,
            fresh=fresh,
            boot_timeout=timeout,
            proxy=proxy,
            grpc_port=grpc_port,
        )
    except BrokerError as e:
        raise _fail(str(e)) from None
    try:
        with _interruptible():
            host, bound = broker.start()
    except BrokerError as e:
        raise _fail(str(e)) from None
    except KeyboardInterrupt:
        err.print(f"interrupted: broker {v} {broker.last_stop or 'was not running yet'}; nothing of it runs")
        raise typer.Exit(130) from None
    broker.detach()
    console.print(
        f"broker {v} answers on {host}:{bound} (pid {broker.pid}, up in {broker.boot_seconds or 0:.1f} s)"
    )
    if proxy:
        console.print(
            f"  gRPC:  the proxy (local mode) serves {host}:{grpc_port}: "
            f"rmqspec conform --target 'grpc://{host}:{grpc_port}?admin={host}:{bound}' --profile FILE"
        )
    console.print(f"  store: {broker.dir}")
    console.print(f"  log:   {broker.log_path}")
    if broker.netns is not None:
        console.print(
            f"  isolation: network namespace {broker.netns.name} (this host reaches it at {host}; host side "
            f"{broker.netns.host_ip})"
        )
    else:
        console.print(
            f"  isolation: none: it binds all interfaces on ports {bound}, {bound - 2} (VIP channel) and "
            f"{bound + 1} (HA)"
        )
    console.print(f"  stop it: rmqspec broker stop --store {broker.dir}")


def _pick(version: str | None, store: Path | None) -> Path | None:
    """The directory of the broker a stop or status is about (None: none runs)."""
    from rmqspec.adapters.apache.launcher import running

    if store is not None:
        return store
    found = [s for s in running() if version is None or s.version == version]
    if not found:
        return None
    if len(found) > 1:
        listing = "; ".join(f"{s.version} pid {s.pid} --store {s.dir}" for s in found)
        raise _fail(f"{len(found)} brokers run, name one with --store: {listing}")
    return Path(found[0].dir)


@broker_app.command("stop")
def stop_cmd(
    version: VersionOpt = None,
    store: StoreOpt = None,
    kill: Annotated[bool, typer.Option("--kill", help="SIGKILL at once instead of SIGTERM")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds after SIGTERM before SIGKILL")] = 60.0,
) -> None:
    """Stop a broker started by `rmqspec broker start` (SIGTERM, SIGKILL after --timeout) and clean up."""
    from rmqspec.adapters.apache.launcher import ApacheBroker, BrokerError

    v = None if version is None else _version(version)
    d = _pick(v, store)
    if d is None:
        console.print("no broker started by rmqspec is running" + (f" for version {v}" if v else ""))
        return
    try:
        broker = ApacheBroker.attach(d)
    except BrokerError as e:
        raise _fail(str(e)) from None
    broker.stop_timeout = timeout
    where = f"{broker.host}:{broker.port}"
    pid = broker._pid
    ns = broker.netns.name if broker.netns is not None else None
    try:
        with _interruptible():
            how = broker.stop(graceful=not kill)
    except BrokerError as e:
        raise _fail(str(e)) from None
    extra = f"; namespace {ns} removed" if ns else ""
    console.print(f"broker {broker.version} (pid {pid}) on {where} {how}{extra}; its log: {broker.log_path}")


@broker_app.command("status")
def status_cmd(
    version: VersionOpt = None,
    store: StoreOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Is a broker running: pid, address, version, store, log. Exit 0 when one runs, 1 when none does."""
    from rmqspec.adapters.apache.launcher import BrokerState, running, sweep

    v = None if version is None else _version(version)
    cleaned = sweep()
    for line in cleaned:
        err.print(f"note: {escape(line)}")
    if store is not None:
        state = BrokerState.read(store.expanduser().resolve())
        states = [state] if state is not None and state.alive else []
    else:
        states = [s for s in running() if v is None or s.version == v]
    if as_json:
        typer.echo(json.dumps([{**s.to_json(), "log": str(s.log)} for s in states], indent=2))
    elif not states:
        console.print("not running" + (f": no broker in {store}" if store else ""))
    for s in [] if as_json else states:
        up = time.time() - s.started
        iso = f"namespace {s.netns}" if s.netns else "no namespace (binds all interfaces)"
        owner = "detached" if s.owner_pid is None else f"managed by pid {s.owner_pid}"
        console.print(
            f"running: broker {s.version}, pid {s.pid}, {s.host}:{s.port}, up {up:.0f} s, {iso}, {owner}"
        )
        console.print(f"  store: {s.dir}")
        console.print(f"  log:   {s.log}")
    raise typer.Exit(0 if states else 1)


@broker_app.command("record")
def record_cmd(
    out: Annotated[Path, typer.Option("--out", help="the JSON Lines file to write")],
    version: VersionOpt = None,
    profile: Annotated[
        Path | None,
        typer.Option("--profile", help="target profile (default: profiles/short-levels.yaml's settings)"),
    ] = None,
    isolation: IsolationOpt = "auto",
) -> None:
    """Start a broker on a fresh store, record the wire-vector script against it, stop it."""
    from rmqspec.adapters.apache.launcher import ApacheBroker, BrokerError
    from rmqspec.adapters.remoting.profile import ProfileError, load_profile
    from rmqspec.adapters.remoting.record import RecordError, record, write_jsonl
    from rmqspec.reference.config import BrokerConfig

    v = _version(version)
    iso = _isolation(isolation)
    if out.exists() and out.is_dir():
        raise _fail(f"--out {out} is a directory")
    try:
        config = (
            load_profile(profile, "127.0.0.1:10911").config
            if profile is not None
            else BrokerConfig(
                " ".join(f"{n}s" for n in range(1, 19)),
                transaction_timeout_ms=3000,
                transaction_check_interval_ms=5000,
                transaction_check_max=3,
            )
        )
    except ProfileError as e:
        raise _fail(str(e)) from None
    t0 = time.monotonic()
    try:
        with _interruptible(), ApacheBroker(v, config, isolation=iso) as broker:
            host, port = broker.start()
            vectors = record(host, port, version=broker.row.mq_version)
    except (BrokerError, RecordError) as e:
        raise _fail(str(e)) from None
    except KeyboardInterrupt:
        err.print("interrupted: the broker was stopped")
        raise typer.Exit(130) from None
    write_jsonl(vectors, out)
    console.print(
        f"{len(vectors)} frames from Apache RocketMQ {v} written to {out} in {time.monotonic() - t0:.0f} s "
        f"(broker stopped: {broker.last_stop})"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(broker_app, name="broker")

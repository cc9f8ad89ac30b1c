"""Start, stop, restart and inspect a real Apache RocketMQ broker: one pinned version on one store.

``ApacheBroker`` is what the suite uses::

    with ApacheBroker("4.9.7", config) as broker:
        host, port = broker.start()      # resolves the jars if needed, waits until it answers on the wire
        ...                              # RemotingTarget(broker.target_profile()) or a RemotingClient
        broker.restart(graceful=False)   # SIGKILL, then start again on the same store (same address)
    # leaving the block stops it (SIGTERM, SIGKILL after stop_timeout) and removes its namespace

A broker's directory (the "store" a user names; a temporary one under the cache when none is given)::

    .rmqspec-store        marker: made by rmqspec, so ``fresh=True`` may wipe it
    broker.conf           generated from the BrokerConfig (config.py)
    rmqspec-broker.json   the running broker's state: pid, address, version, namespace (while it runs)
    store/                storePathRootDir (commitlog/ inside)
    home/                 rocketmq.home.dir and user.home; home/conf holds our logging config
    logs/broker.log       the broker's log; stats.log; console.log (the JVM's stdout and stderr)

Isolation: as root on Linux each broker runs in a network namespace of its own (netns.py) and answers on
``10.213.<n>.2:<port>``; elsewhere it runs directly, with brokerIP1 127.0.0.1, and binds every interface on
``port``, ``port-2`` and ``port+1``. Every error names the broker's log.

Brokers are registered under ``<cache>/running``; ``sweep`` (run by every start and status) cleans up after a
crash: the namespace of a broker that is gone, and a broker whose managing process is gone.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

import attrs

from rmqspec.reference.config import BrokerConfig

from ..remoting.client import RemotingClient, RemotingError
from ..remoting.codec import ProtocolError, RemotingCommand
from ..remoting.profile import TargetProfile
from . import clock, logconfig, netns
from .config import BrokerConfError, broker_conf, check_logged, model_keys, parse_properties_text, render
from .maven import ResolveError, cache_root, resolve
from .versions import DEFAULT_VERSION, ApacheVersion, UnknownVersion, pinned

T = TypeVar("T")
Isolation = Literal["auto", "netns", "host"]
MAIN_CLASS = "org.apache.rocketmq.broker.BrokerStartup"
# The 5.x proxy in local mode: one JVM running the gRPC (and its remoting) server and the broker it embeds,
# built by BrokerStartup from the same broker.conf (``ProxyStartup.createBrokerController``).
PROXY_MAIN_CLASS = "org.apache.rocketmq.proxy.ProxyStartup"
PROXY_CONF = "rmq-proxy.json"
DEFAULT_GRPC_PORT = 8081
STATE_FILE = "rmqspec-broker.json"
MARKER = ".rmqspec-store"
DEFAULT_PORT = 10911
GET_BROKER_CONFIG = (
    26  # RequestCode.GET_BROKER_CONFIG: the body is the broker's whole config, key=value lines
)
# Java's flags for every version: modest memory, and no TLS (the broker would otherwise spend 3-4 s making a
# self-signed certificate at start; clients of rmqspec speak plain TCP).
JAVA_OPTS = ("-Xms128m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m", "-Dtls.server.mode=disabled")


_OUR_LINE = "=== rmqspec:"  # how console.log marks each start (the java command), left out of error messages


class BrokerError(RuntimeError):
    """A broker could not be started, stopped or found; the message names the broker's log."""


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerError(
            "java is not on PATH (rmqspec starts brokers with Java 17: apt-get install openjdk-17-jdk)"
        )
    return found


def _tail(path: Path, lines: int = 4, width: int = 600) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    kept = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(_OUR_LINE)][-lines:]
    out = " | ".join(kept)
    return out if len(out) <= width else "..." + out[-width:]


def _proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def pid_alive(pid: int, start: int | None = None) -> bool:
    """The process exists, is not a zombie, and (where known) started at ``start`` (not a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (not Linux): kill(0) is all we know; on Linux, it has just exited
        return not sys.platform.startswith("linux")
    if stat[stat.rindex(")") + 2 :].startswith("Z"):
        return False
    return start is None or _proc_start(pid) == start


@attrs.frozen
class BrokerState:
    """What ``rmqspec-broker.json`` holds about a running broker."""

    version: str
    pid: int
    pid_start: int | None
    host: str
    port: int
    netns: str | None
    dir: str
    owner_pid: int | None  # the process that manages it (None: started by `rmqspec broker start`, detached)
    owner_start: int | None
    started: float
    temporary: bool

    @property
    def log(self) -> Path:
        return Path(self.dir) / "logs" / "broker.log"

    @property
    def alive(self) -> bool:
        return pid_alive(self.pid, self.pid_start)

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)

    @staticmethod
    def read(directory: Path) -> BrokerState | None:
        try:
            data = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
            return BrokerState(**data)
        except (OSError, ValueError, TypeError):
            return None


def _write_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _registry(cache: Path | None) -> Path:
    return (cache or cache_root()) / "running"


def _run_async(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from synchronous code (in a thread of its own if a loop is running)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    result: list[T] = []
    error: list[BaseException] = []

    def work() -> None:
        try:
            result.append(asyncio.run(factory()))
        except BaseException as e:
            error.append(e)

    t = threading.Thread(target=work, name="rmqspec-broker-probe")
    t.start()
    t.join()
    if error:
        raise error[0]
    return result[0]


def _booted(console_log: Path, offset: int) -> bool:
    """Whether BrokerStartup printed its "boot success" line since ``offset``: BrokerController.start has
    returned. 5.x starts the schedule and transaction check services (changeSpecialServiceStatus) after
    the remoting server, so a broker that answers on the wire may not deliver yet; from this line on it
    does (BrokerStartup.start at 4.9.7 and 5.5.0)."""
    try:
        with console_log.open("rb") as f:
            f.seek(offset)
            return b"boot success" in f.read()
    except OSError:
        return False


async def _answers(host: str, port: int, timeout: float) -> bool:
    """One GET_MAX_OFFSET over a fresh connection: does the broker answer on the wire?"""
    client = RemotingClient(timeout=timeout)
    try:
        await client.connect(host, port, timeout=timeout)
        await client.get_max_offset("TBW102", 0, timeout=timeout)
        return True
    except (RemotingError, ProtocolError, OSError):
        return False
    finally:
        await client.close()


async def _listens(host: str, port: int, timeout: float) -> bool:
    """Whether something accepts TCP connections on host:port (the proxy's gRPC server)."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _broker_config(host: str, port: int, timeout: float) -> dict[str, str]:
    """The configuration the broker reports over the wire (GET_BROKER_CONFIG), empty if it does not answer."""
    client = RemotingClient(timeout=timeout)
    try:
        await client.connect(host, port, timeout=timeout)
        answer = await client.invoke(RemotingCommand(code=GET_BROKER_CONFIG), timeout)
    except (RemotingError, ProtocolError, OSError):
        return {}
    finally:
        await client.close()
    if answer.code != 0:
        return {}
    return parse_properties_text(answer.body.decode("utf-8", "replace"))


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


_LIVE: weakref.WeakSet[ApacheBroker] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """At interpreter exit, kill every broker this process still manages (detached ones stay up)."""
    for broker in list(_LIVE):
        with contextlib.suppress(Exception):
            broker.stop(graceful=False)


class ApacheBroker:
    """One real broker of a pinned version, its store and (as root on Linux) its network namespace.

    ``config`` is the model's ``BrokerConfig`` the broker.conf is generated from (default: the defaults).
    ``store_dir``: its directory (see the module docstring); None makes a temporary one under the cache, whose
    store is deleted when the broker stops (its logs are kept). An existing non-empty ``store_dir`` is refused
    unless ``fresh`` (then it is wiped, if rmqspec made it). ``isolation``: auto (a namespace when possible),
    netns, or host.
    """

    def __init__(
        self,
        version: str = DEFAULT_VERSION,
        config: BrokerConfig | None = None,
        store_dir: Path | str | None = None,
        port: int = DEFAULT_PORT,
        *,
        isolation: Isolation = "auto",
        fresh: bool = False,
        boot_timeout: float = 60.0,
        stop_timeout: float = 60.0,
        cache: Path | None = None,
        proxy: bool = False,
        grpc_port: int = DEFAULT_GRPC_PORT,
        skewable: bool = False,
    ) -> None:
        self.row: ApacheVersion = pinned(version)
        # skewable: its JVM runs under libfaketime, so that skew_clock can step its clock (clock.py)
        self.faketime: Path | None = None
        if skewable:
            try:
                self.faketime = clock.libfaketime()
            except clock.ClockError as e:
                raise BrokerError(str(e)) from None
            if self.faketime is None:
                raise BrokerError(
                    "a broker whose clock rmqspec steps needs libfaketime (Linux: apt-get install libfaketime, "
                    f"or name the library in {clock.ENV})"
                )
        self.skew_ms = 0
        if proxy and not self.row.proxy:
            raise BrokerError(f"Apache RocketMQ {version} has no proxy (rocketmq-proxy is a 5.x artifact)")
        # proxy: run rocketmq-proxy in local mode, which embeds this broker and serves gRPC on grpc_port
        self.proxy = proxy
        self.grpc_port = grpc_port
        self.config = config if config is not None else BrokerConfig()
        self.port = port
        self.isolation: Isolation = isolation
        self.fresh = fresh
        self.boot_timeout = boot_timeout
        self.stop_timeout = stop_timeout
        self.cache = cache
        self.dir: Path | None = None if store_dir is None else Path(store_dir).expanduser().resolve()
        self.temporary = store_dir is None
        self.host: str | None = None
        self.netns: netns.Netns | None = None
        self._hold: netns.Hold | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._pid_start: int | None = None
        self._detached = False
        self._prepared = False
        self.boot_seconds: float | None = None
        self.last_stop: str | None = None
        # whether the last stop let the broker run its shutdown (SIGTERM honoured); None: it was not running
        self.last_stop_orderly: bool | None = None

    # --- what it is -----------------------------------------------------------------------------------

    @property
    def version(self) -> str:
        return self.row.version

    @property
    def address(self) -> tuple[str, int] | None:
        return None if self.host is None else (self.host, self.port)

    @property
    def log_path(self) -> Path | None:
        return None if self.dir is None else self.dir / "logs" / "broker.log"

    @property
    def console_path(self) -> Path | None:
        return None if self.dir is None else self.dir / "logs" / "console.log"

    @property
    def conf_path(self) -> Path | None:
        return None if self.dir is None else self.dir / "broker.conf"

    @property
    def pid(self) -> int | None:
        return self._pid if self.alive else None

    @property
    def alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self._pid is not None and pid_alive(self._pid, self._pid_start)

    @property
    def effective_config(self) -> BrokerConfig:
        """The config the model should judge this broker by: its store host and its release line."""
        host = self.host or "127.0.0.1"
        return attrs.evolve(
            self.config, store_host=(host, self.port), profile=self.row.line, release=self.row.version
        )

    def target_profile(self, *, timeout_s: float = 5.0, epsilon_ms: int = 1000) -> TargetProfile:
        """A profile for ``RemotingTarget``: the broker's address and the config it runs with."""
        if self.host is None:
            raise BrokerError(f"broker {self.version} has not been started")
        return TargetProfile(
            self.host,
            self.port,
            self.effective_config,
            name=f"apache-rocketmq-{self.version}",
            timeout_s=timeout_s,
            epsilon_ms=epsilon_ms,
        )

    def _where(self) -> str:
        return f"its log: {self.log_path}"

    def _fail(self, what: str) -> BrokerError:
        log = self.log_path
        console = self.console_path
        tail = ""
        said = _tail(console) if console is not None else ""
        if said and said != "(no log)":
            tail = f"; the JVM's output ({console}): {said}"
        if log is not None:
            tail = f" (last lines: {_tail(log) or '(empty)'}){tail}"
        return BrokerError(f"broker {self.version} {what}; {self._where()}{tail}")

    # --- start ----------------------------------------------------------------------------------------

    def _prepare_dir(self) -> Path:
        if self.dir is None:
            base = (self.cache or cache_root()) / "brokers"
            base.mkdir(parents=True, exist_ok=True)
            _prune_temporary(base)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            self.dir = base / f"{self.version}-{stamp}-{os.urandom(3).hex()}"
            self.dir.mkdir()
        else:
            d = self.dir
            if d.exists() and not d.is_dir():
                raise BrokerError(f"store {d} exists and is not a directory")
            state = BrokerState.read(d) if d.is_dir() else None
            if state is not None and state.alive:
                raise BrokerError(
                    f"a broker {state.version} (pid {state.pid}) already runs on store {d}; stop it first "
                    f"(rmqspec broker stop --store {d})"
                )
            if state is not None:
                _cleanup(state, self.cache)
            if d.is_dir() and any(d.iterdir()):
                if not self.fresh:
                    raise BrokerError(
                        f"store {d} is not empty; give an empty or new directory, or --fresh to wipe it"
                    )
                if not (d / MARKER).exists():
                    raise BrokerError(
                        f"will not wipe {d}: it was not made by rmqspec broker (no {MARKER} in it)"
                    )
                for child in d.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
            d.mkdir(parents=True, exist_ok=True)
        (self.dir / MARKER).write_text("made by rmqspec broker\n", encoding="utf-8")
        self._prepared = True
        return self.dir

    def _network(self) -> str:
        if self.netns is not None and netns.exists(self.netns):
            return self.netns.ns_ip
        mode = self.isolation
        why = netns.unavailable() if mode in ("auto", "netns") else "asked for"
        if mode == "netns" and why is not None:
            raise BrokerError(f"cannot give broker {self.version} a network namespace: {why}")
        if why is None:
            try:
                self.netns = netns.create()
            except netns.NetnsError as e:
                raise BrokerError(f"cannot give broker {self.version} a network namespace: {e}") from None
            self._hold = netns.Hold(self.netns)
            return self.netns.ns_ip
        ports = (self.port, self.port - 2, self.port + 1)
        busy = [p for p in ports if not _port_free(p)]
        if busy:
            raise BrokerError(
                f"port {busy[0]} is in use: broker {self.version} without a namespace binds all interfaces on "
                f"ports {ports[0]}, {ports[1]} and {ports[2]} (give another --port)"
            )
        return "127.0.0.1"

    def _command(self, classpath: str, d: Path) -> list[str]:
        home = d / "home"
        flags = logconfig.install(self.row, home, d / "logs")
        main = [PROXY_MAIN_CLASS, "-pm", "local", "-bc", str(d / "broker.conf"), "-pc", str(d / PROXY_CONF)]
        cmd = [
            _java(),
            *JAVA_OPTS,
            *self.row.java_opts,
            f"-Drocketmq.home.dir={home}",
            f"-Duser.home={home}",
            f"-Djava.io.tmpdir={home}",
            *flags,
            "-cp",
            classpath,
            *(main if self.proxy else [MAIN_CLASS, "-c", str(d / "broker.conf")]),
        ]
        return (self.netns.exec_prefix() if self.netns is not None else []) + cmd

    def _proxy_conf(self) -> dict[str, object]:
        """rmq-proxy.json: local mode, the gRPC port, the proxy's own remoting port one below the broker's
        VIP channel, a name server address nobody answers on, and no check of a topic's message type (one
        topic takes every type, as a broker reached over remoting does), and receives that may come back
        empty after 100 ms."""
        return {
            "rocketMQClusterName": self.config.cluster_name,
            "proxyMode": "local",
            # Local mode insists on a name server address (MQClientAPIFactory); none runs there. The proxy
            # serves what rmqspec asks of it without one (routes come from the embedded broker's topics).
            "namesrvAddr": "127.0.0.1:9876",
            "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.port - 3,
            "enableTopicMessageTypeCheck": False,
            # a receive that finds nothing answers after this long (default 5 s): the suite polls
            "grpcClientConsumerMinLongPollingTimeoutMillis": 100,
        }

    @property
    def grpc_address(self) -> tuple[str, int] | None:
        """Where the proxy serves gRPC (None: no proxy, or not running)."""
        return (self.host, self.grpc_port) if self.proxy and self.host is not None and self.alive else None

    def start(self) -> tuple[str, int]:
        """Start the broker and wait until it answers on the wire; its (host, port).

        Resolves the version's jars first if they are not cached. A ``BrokerError`` (naming the log) when it
        does not come up; then nothing of it is left running.
        """
        if self.alive:
            raise BrokerError(
                f"broker {self.version} already runs (pid {self._pid}) on {self.host}:{self.port}"
            )
        sweep(self.cache)
        try:
            try:
                model_keys(
                    self.config
                )  # a config no broker can take, and a bad store, are refused before Maven runs
            except BrokerConfError as e:
                raise BrokerError(f"broker {self.version}: {e}") from None
            if not self._prepared:
                self._prepare_dir()
            try:
                artifact = "rocketmq-proxy" if self.proxy else "rocketmq-broker"
                cp = resolve(self.version, artifact, cache=self.cache)
            except (ResolveError, UnknownVersion) as e:
                raise BrokerError(str(e)) from None
            return self._start(cp.java_arg())
        except BaseException:
            self._abort()
            raise

    def _start(self, classpath: str) -> tuple[str, int]:
        d = self.dir if self._prepared and self.dir is not None else self._prepare_dir()
        self.host = self._network()
        try:
            conf = broker_conf(
                self.config, version=self.row, host=self.host, port=self.port, store=d / "store"
            )
        except BrokerConfError as e:
            raise BrokerError(f"broker {self.version}: {e}") from None
        header = (
            f"Generated by rmqspec for Apache RocketMQ {self.version} ({time.strftime('%Y-%m-%d %H:%M:%S')}).\n"
            "The model's settings first (reference.config.BROKER_CONF_KEYS), then rmqspec's fixed keys."
        )
        (d / "broker.conf").write_text(render(conf, header), encoding="utf-8")
        if self.proxy:
            _write_json(d / PROXY_CONF, self._proxy_conf())
        cmd = self._command(classpath, d)
        log = d / "logs" / "broker.log"
        offset = log.stat().st_size if log.exists() else 0
        env = {k: v for k, v in os.environ.items() if k not in ("ROCKETMQ_HOME", "RMQ_PROXY_HOME")}
        if self.proxy and self.row.logging == "4.9":
            env["RMQ_PROXY_HOME"] = str(d / "home")  # 5.0.0's proxy reads its home from the environment only
        if self.faketime is not None:
            offset_file = d / clock.OFFSET_FILE
            if not offset_file.exists():
                clock.write_offset(offset_file, self.skew_ms)
            env.update(clock.environment(self.faketime, offset_file))
        t0 = time.monotonic()
        console_log = d / "logs" / "console.log"
        console_offset = console_log.stat().st_size if console_log.exists() else 0
        with console_log.open("ab") as console:
            console.write(f"\n{_OUR_LINE} starting {self.version}: {' '.join(cmd)}\n".encode())
            console.flush()
            try:
                self._proc = subprocess.Popen(
                    cmd,
                    cwd=d,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as e:
                raise BrokerError(f"cannot run {cmd[0]} for broker {self.version}: {e}") from None
        self._pid = self._proc.pid
        self._pid_start = _proc_start(self._pid)
        self._write_state()
        _LIVE.add(self)
        deadline = t0 + self.boot_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise self._fail(f"exited with code {code} while starting")
            if (
                (self.proxy or _booted(console_log, console_offset))
                and _run_async(lambda: _answers(self.host or "", self.port, 1.0))
                and (not self.proxy or _run_async(lambda: _listens(self.host or "", self.grpc_port, 1.0)))
            ):
                break
            if time.monotonic() > deadline:
                raise self._fail(f"did not answer on {self.host}:{self.port} within {self.boot_timeout:g} s")
            time.sleep(0.2)
        self.boot_seconds = time.monotonic() - t0
        try:
            with log.open("rb") as f:
                f.seek(offset)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            text = ""
        wire = _run_async(lambda: _broker_config(self.host or "", self.port, 5.0))
        problems = check_logged(conf, text, wire)
        if problems:
            raise self._fail(
                f"does not run with the configuration rmqspec wrote to {d / 'broker.conf'}: "
                + "; ".join(problems)
            )
        return self.host, self.port

    def skew_clock(self, ms: int) -> None:
        """Step the broker's clock by ``ms`` (negative: back, as NTP may); it reads the new offset at its
        next reading of the clock. Only a broker started ``skewable``."""
        if self.faketime is None or self.dir is None:
            raise BrokerError(f"broker {self.version} was not started with a clock rmqspec can step")
        self.skew_ms += ms
        clock.write_offset(self.dir / clock.OFFSET_FILE, self.skew_ms)

    def _write_state(self) -> None:
        assert self.dir is not None and self._pid is not None and self.host is not None
        state = BrokerState(
            version=self.version,
            pid=self._pid,
            pid_start=self._pid_start,
            host=self.host,
            port=self.port,
            netns=None if self.netns is None else self.netns.name,
            dir=str(self.dir),
            owner_pid=None if self._detached else os.getpid(),
            owner_start=None if self._detached else _proc_start(os.getpid()),
            started=time.time(),
            temporary=self.temporary,
        )
        _write_json(self.dir / STATE_FILE, state.to_json())
        reg = _registry(self.cache)
        reg.mkdir(parents=True, exist_ok=True)
        _write_json(reg / f"{self._pid}.json", {"dir": str(self.dir)})

    def _abort(self) -> None:
        """After a failed start: nothing of the broker left running; its directory (and log) kept, unless it is
        a temporary one the broker never ran in."""
        with contextlib.suppress(Exception):
            self.last_stop = self._kill_process(graceful=False)
        self._release()
        if self.temporary and self.dir is not None and not (self.dir / "logs").exists():
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
            self._prepared = False

    # --- stop -----------------------------------------------------------------------------------------

    def _wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        while self._pid is not None and pid_alive(self._pid, self._pid_start):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _signal(self, sig: signal.Signals) -> None:
        if self._pid is not None and self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, sig)

    def _kill_process(self, graceful: bool) -> str:
        """Stop the JVM only (the namespace and directory stay): how it went, in words. Sets
        ``last_stop_orderly``: whether the broker's own shutdown ran (it persists its offsets there)."""
        self.last_stop_orderly = None
        if not self.alive:
            return "was not running"
        t0 = time.monotonic()
        if graceful:
            self._signal(signal.SIGTERM)
            if self._wait_exit(self.stop_timeout):
                self.last_stop_orderly = True
                return f"stopped by SIGTERM in {time.monotonic() - t0:.1f} s"
            self._signal(signal.SIGKILL)
            if not self._wait_exit(10):
                raise self._fail(f"(pid {self._pid}) survived SIGKILL")
            self.last_stop_orderly = False
            return f"did not stop within {self.stop_timeout:.0f} s of SIGTERM: killed (SIGKILL)"
        self._signal(signal.SIGKILL)
        if not self._wait_exit(10):
            raise self._fail(f"(pid {self._pid}) survived SIGKILL")
        self.last_stop_orderly = False
        return f"killed (SIGKILL) in {time.monotonic() - t0:.1f} s"

    def _release(self) -> None:
        """Forget our process: its state file and registry entry (never another broker's), our namespace."""
        d = self.dir
        state = None if d is None else BrokerState.read(d)
        if d is not None and state is not None and self._pid is not None and state.pid == self._pid:
            with contextlib.suppress(OSError):
                (d / STATE_FILE).unlink()
        if self._pid is not None:
            with contextlib.suppress(OSError):
                (_registry(self.cache) / f"{self._pid}.json").unlink()
        if self.netns is not None:
            netns.delete(self.netns)
            self.netns = None
        if self._hold is not None:
            self._hold.release()
            self._hold = None
        self._proc = None
        _LIVE.discard(self)

    def stop(self, graceful: bool = True) -> str:
        """Stop the broker (SIGTERM, SIGKILL after ``stop_timeout``; only SIGKILL when not ``graceful``) and
        remove its namespace; a temporary store is deleted, its logs kept. Says what happened."""
        how = self._kill_process(graceful)
        self._release()
        if self.temporary and self.dir is not None:
            for sub in ("store", "home"):
                shutil.rmtree(self.dir / sub, ignore_errors=True)
        self.last_stop = how
        return how

    def restart(self, config: BrokerConfig | None = None, graceful: bool = True) -> tuple[str, int]:
        """Stop (SIGTERM, or SIGKILL when not ``graceful``) and start again on the same store and address.

        ``config`` replaces the broker's config (broker.conf is rewritten), e.g. another delay table.
        """
        if self.dir is None or not self._prepared:
            raise BrokerError(f"broker {self.version} was never started: nothing to restart")
        old_pid = self._pid
        self.last_stop = self._kill_process(graceful)
        if old_pid is not None:
            with contextlib.suppress(OSError):
                (_registry(self.cache) / f"{old_pid}.json").unlink()
        if config is not None:
            self.config = config
        try:
            cp = resolve(self.version, cache=self.cache, offline=True)
        except ResolveError as e:
            raise BrokerError(str(e)) from None
        try:
            return self._start(cp.java_arg())
        except BaseException:
            self._abort()
            raise

    def detach(self) -> None:
        """Leave the broker running when this process exits (``rmqspec broker start``); stop it with
        ``rmqspec broker stop`` or ``ApacheBroker.attach(dir).stop()``."""
        self._detached = True
        if self.alive:
            self._write_state()
        _LIVE.discard(self)
        if self._hold is not None:
            self._hold.release()
            self._hold = None
        self._proc = None  # not waited for: it outlives us

    @classmethod
    def attach(cls, directory: Path | str, cache: Path | None = None) -> ApacheBroker:
        """The broker whose state is in ``directory`` (started by this or another process)."""
        d = Path(directory).expanduser().resolve()
        state = BrokerState.read(d)
        if state is None:
            raise BrokerError(f"no broker state in {d} (no {STATE_FILE}): nothing rmqspec started runs there")
        try:
            broker = cls(state.version, store_dir=d, port=state.port, cache=cache)
        except UnknownVersion as e:
            raise BrokerError(f"{d / STATE_FILE}: {e}") from None
        broker.temporary = state.temporary
        broker.host = state.host
        broker._pid = state.pid
        broker._pid_start = state.pid_start
        broker._prepared = True
        broker._detached = state.owner_pid is None
        broker.netns = None if state.netns is None else netns.Netns.named(state.netns)
        return broker

    def __enter__(self) -> ApacheBroker:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.alive or self.netns is not None:
            self.stop(graceful=exc_type is None)

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self.host else "not started"
        return f"ApacheBroker({self.version}, {where}, dir={self.dir})"


def _cleanup(state: BrokerState, cache: Path | None) -> None:
    """Remove what a broker that is gone left behind: its namespace (unless a process still holds it: a
    restart between its stop and its start), state file and registry entry."""
    if state.netns is not None:
        ns = netns.Netns.named(state.netns)
        if ns is not None and netns.exists(ns) and not netns.pids(ns) and not netns.held(ns):
            netns.delete(ns)
    with contextlib.suppress(OSError):
        (Path(state.dir) / STATE_FILE).unlink()
    with contextlib.suppress(OSError):
        (_registry(cache) / f"{state.pid}.json").unlink()


def running(cache: Path | None = None) -> list[BrokerState]:
    """The brokers rmqspec started that still run (registered under ``<cache>/running``)."""
    out = []
    reg = _registry(cache)
    for entry in sorted(reg.glob("*.json")) if reg.is_dir() else []:
        try:
            d = Path(json.loads(entry.read_text(encoding="utf-8"))["dir"])
        except (OSError, ValueError, KeyError, TypeError):
            entry.unlink(missing_ok=True)
            continue
        state = BrokerState.read(d)
        if state is None or str(state.pid) != entry.stem:
            entry.unlink(missing_ok=True)
        elif state.alive:
            out.append(state)
    return out


def sweep(cache: Path | None = None) -> list[str]:
    """Clean up after crashes; what was done, one line each.

    A registered broker that is gone: its namespace and state are removed. A broker whose managing process
    is gone (not a detached one): it is killed and removed. Then our namespaces with nothing in them and
    nobody holding them (older than a minute) are deleted.
    """
    done = []
    reg = _registry(cache)
    for entry in sorted(reg.glob("*.json")) if reg.is_dir() else []:
        try:
            d = Path(json.loads(entry.read_text(encoding="utf-8"))["dir"])
        except (OSError, ValueError, KeyError, TypeError):
            entry.unlink(missing_ok=True)
            continue
        state = BrokerState.read(d)
        if state is None or str(state.pid) != entry.stem:
            entry.unlink(missing_ok=True)
            continue
        if not state.alive:
            if state.owner_pid is not None and pid_alive(state.owner_pid, state.owner_start):
                # Its managing process lives: a restart between the stop and the unregistering (another
                # suite's sweep must not take its namespace, whose address a new broker would then get).
                continue
            _cleanup(state, cache)
            done.append(f"cleaned up after broker {state.version} (pid {state.pid}, gone) in {d}")
        elif state.owner_pid is not None and not pid_alive(state.owner_pid, state.owner_start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(state.pid, signal.SIGKILL)
            for _ in range(100):
                if not pid_alive(state.pid, state.pid_start):
                    break
                time.sleep(0.1)
            _cleanup(state, cache)
            done.append(
                f"killed broker {state.version} (pid {state.pid}) whose owner {state.owner_pid} is gone"
            )
    if netns.unavailable() is None:
        done += [f"deleted stale namespace {name}" for name in netns.sweep()]
    return done


def _prune_temporary(base: Path, max_age_s: float = 86_400) -> None:
    """Delete temporary broker directories of brokers that stopped more than a day ago."""
    now = time.time()
    for d in base.iterdir():
        if not d.is_dir() or (d / STATE_FILE).exists():
            continue
        with contextlib.suppress(OSError):
            if now - d.stat().st_mtime > max_age_s:
                shutil.rmtree(d, ignore_errors=True)

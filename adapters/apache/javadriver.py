"""The wall-clock workload run by Apache RocketMQ's own Java client, recorded as an rmqspec history.

The driver's Java source lives in ``javadriver/src`` (package ``io.rmqspec.javadriver``). ``build(version)``
resolves ``org.apache.rocketmq:rocketmq-client`` at the broker's version from Maven Central into rmqspec's
cache (``maven.resolve``), compiles the source with ``javac`` against it and keeps the classes in the cache
under ``apache-rocketmq-<v>/javadriver-<hash of the source>``: the same source and version never compile
twice. ``java_workload`` starts a broker of that version (``ApacheBroker``), runs the driver against it,
stops the broker and judges the history with ``check_history``.

What the driver records, and how, is in ``WireRecorder.java``: every request and answer as it went over
the wire, read by the client's RPC hook, and the broker's check requests on their way in.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from rmqspec.conformance.checker import Verdict, check_history
from rmqspec.conformance.history import Event, HistoryError, load
from rmqspec.conformance.history import save as save_history
from rmqspec.conformance.suite import broker_settings
from rmqspec.reference.config import BrokerConfig, Profile

from .config import BROKER_NAME, COMMIT_LOG_FILE_SIZE
from .launcher import ApacheBroker, BrokerError, _java
from .maven import CLIENT_ARTIFACT, ResolveError, _locked, resolve, version_dir
from .versions import UnknownVersion, pinned

SOURCE = Path(__file__).resolve().parent / "javadriver" / "src"
MAIN = "io.rmqspec.javadriver.Driver"
# How long the driver may run past its workload and settle time (the read-back, the client's shutdown)
EXTRA_S = 300


class JavaDriverError(RuntimeError):
    """The driver could not be built or did not run to its end; the message names the cause."""


def source_hash() -> str:
    """A hash of the driver's Java source (every file's path and bytes): the key of its compiled classes."""
    h = hashlib.sha256()
    for p in sorted(SOURCE.rglob("*.java")):
        h.update(p.relative_to(SOURCE).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@attrs.frozen
class Built:
    version: str
    classes: Path
    classpath: str  # the classes, then the client's jars

    def command(self, args: dict[str, str]) -> list[str]:
        row = pinned(self.version)
        return [
            _java(),
            *row.java_opts,
            "-Xmx256m",
            "-cp",
            self.classpath,
            MAIN,
            *(f"{k}={v}" for k, v in args.items()),
        ]


def build(version: str, *, cache: Path | None = None) -> Built:
    """The driver compiled against ``rocketmq-client`` at ``version`` (resolved and compiled once)."""
    try:
        cp = resolve(version, CLIENT_ARTIFACT, cache=cache)
    except (ResolveError, UnknownVersion) as e:
        raise JavaDriverError(str(e)) from None
    out = version_dir(version, cache) / f"javadriver-{source_hash()}"
    classes = out / "classes"
    if not (out / "built").is_file():
        javac = shutil.which("javac")
        if javac is None:
            raise JavaDriverError("cannot build the Java-client driver: javac (a JDK) is not on PATH")
        with _locked(out.parent / ".javadriver.lock"):
            if not (out / "built").is_file():
                out.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(prefix="classes-", dir=out) as tmp:
                    sources = [str(p) for p in sorted(SOURCE.rglob("*.java"))]
                    cmd = [javac, "-nowarn", "-encoding", "UTF-8", "-d", tmp, "-cp", cp.java_arg(), *sources]
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
                    if proc.returncode != 0:
                        first = (proc.stderr.strip().splitlines() or ["no output"])[0]
                        raise JavaDriverError(
                            f"javac failed on the Java-client driver for {version}: {first}"
                        )
                    if classes.exists():
                        shutil.rmtree(classes)
                    os.replace(tmp, classes)
                    (out / "built").write_text(source_hash() + "\n", encoding="utf-8")
                    Path(tmp).mkdir()  # TemporaryDirectory removes it on the way out
    return Built(version, classes, os.pathsep.join([str(classes), cp.java_arg()]))


def workload_config(profile: Profile) -> BrokerConfig:
    """The broker's settings for the Java workload: short delay levels and transaction timings, so that
    deliveries, retries, checks and discards all happen within a short run (defaults otherwise)."""
    return BrokerConfig(
        profile=profile,
        delay_levels=(1000, 2000, 3000, 4000, 5000, 6000),
        transaction_timeout_ms=3000,
        transaction_check_interval_ms=5000,
        transaction_check_max=3,
    )


@attrs.frozen
class JavaWorkloadResult:
    version: str
    verdict: Verdict
    events: tuple[Event, ...]
    history: Path
    seconds: float
    log: str  # the driver's own summary lines


def run_driver(
    built: Built,
    broker: ApacheBroker,
    out: Path,
    *,
    seconds: float,
    settle: float,
    seed: int = 0,
    levels: tuple[int, ...] = (1, 2),
    poll_ms: int = 500,
) -> str:
    """Run the driver against a started broker; its summary lines (stderr). The history is at ``out``."""
    addr = broker.address
    if addr is None:
        raise JavaDriverError("the broker is not running")
    args = {
        "broker": f"{addr[0]}:{addr[1]}",
        "brokerName": BROKER_NAME,
        "cluster": broker.config.cluster_name,
        "seconds": str(seconds),
        "settle": str(settle),
        "seed": str(seed),
        "levels": ",".join(map(str, levels)),
        "pollMs": str(poll_ms),
        "commitLogFileSize": str(COMMIT_LOG_FILE_SIZE),
        "client": f"org.apache.rocketmq:{CLIENT_ARTIFACT}:{built.version}",
        "out": str(out.resolve()),  # the driver runs in a directory of its own
    }
    with tempfile.TemporaryDirectory(prefix="rmqspec-javadriver-") as home:
        try:
            proc = subprocess.run(
                built.command(args),
                capture_output=True,
                text=True,
                timeout=seconds + settle + EXTRA_S,
                check=False,
                cwd=home,
                env={**os.environ, "HOME": home},  # the client's logs go under its user.home
            )
        except subprocess.TimeoutExpired:
            raise JavaDriverError(
                f"the Java-client driver ran over {seconds + settle + EXTRA_S:.0f} s"
            ) from None
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rmqspec-javadriver:")]
    if proc.returncode != 0 or not out.is_file():
        tail = "; ".join(lines[-3:] or proc.stderr.strip().splitlines()[-3:])
        raise JavaDriverError(f"the Java-client driver exited {proc.returncode}: {tail}")
    return "\n".join(lines)


def java_workload(
    version: str,
    *,
    seconds: float = 30.0,
    seed: int = 0,
    save: Path | None = None,
    epsilon_ms: int = 1000,
    progress: Callable[[str], None] | None = None,
    cache: Path | None = None,
) -> JavaWorkloadResult:
    """Start a broker of ``version``, run the Java-client workload on it for ``seconds``, stop the broker,
    and judge the history (saved at ``save``, else in a temporary file that is removed)."""
    say = progress or (lambda _s: None)
    row = pinned(version)
    built = build(version, cache=cache)
    config = workload_config(row.line)
    # deliveries (levels 1-2, retries at 3-4 twice), checks (transactionCheckMax rounds) and a round more
    settle = max(
        sum(config.delay_levels[:4]) / 1000 + 5,
        (
            config.transaction_timeout_ms
            + config.transaction_check_interval_ms * (config.transaction_check_max + 2)
        )
        / 1000,
    )
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if save is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rmqspec-jw-")))
            path = tmp / "history.jsonl"
        else:
            path = save
        try:
            broker = ApacheBroker(version, config, cache=cache)
        except BrokerError as e:
            raise JavaDriverError(str(e)) from None
        try:
            say(f"starting Apache RocketMQ {version}")
            broker.start()
            judged_by = broker.effective_config
            say(f"running the Java-client workload for {seconds:g} s (+{settle:g} s settling)")
            log = run_driver(built, broker, path, seconds=seconds, settle=settle, seed=seed)
        except BrokerError as e:
            raise JavaDriverError(str(e)) from None
        finally:
            broker.stop()
        try:
            meta, events = load(path)
        except HistoryError as e:
            raise JavaDriverError(str(e)) from None
        # the header of a saved scenario history (conformance/suite.py): enough to judge it again alone
        meta |= {
            "target": f"apache:{version}",
            "epsilon_ms": epsilon_ms,
            "broker": broker_settings(judged_by),
            "seconds": seconds,
            "seed": seed,
        }
        save_history(events, path, {k: v for k, v in meta.items() if k != "rmqspec_history"})
        say(f"checking {len(events)} events")
        verdict = check_history(events, judged_by, epsilon_ms=epsilon_ms, shared=True)
        return JavaWorkloadResult(version, verdict, tuple(events), path, time.perf_counter() - t0, log)

"""Real Apache RocketMQ brokers, every pinned version: start, answer, restart on the same store, stop.

One broker per version for the whole module (a module-scoped fixture; its finalizer stops it whatever
happens). Needs Java 17 and Maven (or the versions already in the cache: `make rocketmq`); CI has both and
fails here when they are missing, elsewhere these tests skip.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from rmqspec.adapters.apache import netns
from rmqspec.adapters.apache.launcher import STATE_FILE, ApacheBroker, BrokerState, pid_alive
from rmqspec.adapters.apache.maven import cached
from rmqspec.adapters.apache.versions import SUITE
from rmqspec.adapters.remoting.client import RemotingClient
from rmqspec.adapters.remoting.profile import load_profile
from rmqspec.adapters.remoting.target import RemotingTarget
from rmqspec.reference.model import Pull, Send
from rmqspec.reference.put import Message
from rmqspec.reference.records import props

pytestmark = [pytest.mark.slow, pytest.mark.real_broker, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[1]
CONFIG = load_profile(REPO / "profiles" / "short-levels.yaml", "127.0.0.1:10911").config
TOPIC = "RealBrokerTopic"


def need(tool: str, why: str) -> None:
    if shutil.which(tool) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is required in CI ({why}) and was not found")
        pytest.skip(f"{tool} not found ({why})")


@pytest.fixture(scope="module", params=list(SUITE))
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApacheBroker]:
    version: str = request.param
    need("java", "it runs the broker")
    if cached(version) is None:
        need("mvn", f"Apache RocketMQ {version} is not in the cache yet")
    b = ApacheBroker(version, CONFIG, tmp_path_factory.mktemp(f"broker-{version}") / "b")
    try:
        b.start()
        yield b
    finally:
        if b.alive or b.netns is not None:
            b.stop(graceful=False)


def send(broker: ApacheBroker, body: str) -> int:
    """SEND_MESSAGE_V2 of ``body`` to TOPIC over a fresh connection; the response code."""
    assert broker.address is not None
    host, port = broker.address

    async def main() -> int:
        async with RemotingClient(timeout=5, version=broker.row.mq_version) as c:
            await c.connect(host, port)
            return (await c.send_message("PG_real", TOPIC, body.encode())).code

    return asyncio.run(main())


def bodies(broker: ApacheBroker, count: int) -> list[str]:
    """Every body in TOPIC queue 0, pulled once the consume queue shows ``count`` (or after 10 s)."""
    assert broker.address is not None
    host, port = broker.address

    async def main() -> list[str]:
        async with RemotingClient(timeout=5, version=broker.row.mq_version) as c:
            await c.connect(host, port)
            deadline = time.monotonic() + 10
            while True:
                r = await c.pull("CG_real", TOPIC, 0, 0)
                if len(r.records) >= count or time.monotonic() > deadline:
                    return [rec.body.decode() for rec in r.records]
                await asyncio.sleep(0.1)

    return asyncio.run(main())


def test_it_answers_a_send_and_a_pull_through_the_remoting_target(broker: ApacheBroker) -> None:
    assert broker.alive and broker.address is not None
    if netns.unavailable() is None:
        assert broker.netns is not None and broker.address[0] == broker.netns.ns_ip
    target = RemotingTarget(broker.target_profile())
    try:
        sent = target.execute(Send(Message("T", b"hello", props(KEYS="k1"))))
        assert sent.code == 0 and sent.fields["queue_offset"] == 0
        queue = int(str(sent.fields["queue_id"]))
        deadline = time.monotonic() + 10
        while not (pulled := target.execute(Pull("T", queue, 0))).records and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pulled.code == 0 and [r.body for r in pulled.records] == [b"hello"]
        assert pulled.records[0].topic == "T" and pulled.records[0].properties["KEYS"] == "k1"
    finally:
        target.close()
    assert broker.effective_config.store_host == broker.address
    assert broker.effective_config.profile is broker.row.line


def test_a_sigterm_restart_keeps_the_store_and_the_address(broker: ApacheBroker) -> None:
    assert send(broker, "before-sigterm") == 0
    assert bodies(broker, 1) == ["before-sigterm"]
    address, pid = broker.address, broker.pid
    assert broker.restart(graceful=True) == address
    assert broker.last_stop is not None and broker.last_stop.startswith("stopped by SIGTERM"), (
        broker.last_stop
    )
    assert broker.pid != pid and pid is not None and not pid_alive(pid)
    assert bodies(broker, 1) == ["before-sigterm"]


def test_a_sigkill_restart_keeps_every_acknowledged_message(broker: ApacheBroker) -> None:
    assert send(broker, "before-sigkill") == 0
    address = broker.address
    assert broker.restart(graceful=False) == address
    assert broker.last_stop is not None and broker.last_stop.startswith("killed (SIGKILL)"), broker.last_stop
    assert bodies(broker, 2) == ["before-sigterm", "before-sigkill"]


def test_a_restart_with_another_config_rewrites_broker_conf(broker: ApacheBroker) -> None:
    assert broker.conf_path is not None
    other = attrs.evolve(CONFIG, delay_levels="2s 4s 6s", transaction_check_interval_ms=7000)
    broker.restart(config=other, graceful=False)  # start() checks the broker runs with the new file
    text = broker.conf_path.read_text()
    assert "messageDelayLevel=2s 4s 6s\n" in text and "transactionCheckInterval=7000\n" in text
    assert broker.config == other
    assert bodies(broker, 2) == ["before-sigterm", "before-sigkill"]


def test_stop_leaves_nothing_running(broker: ApacheBroker) -> None:
    pid, ns, directory = broker.pid, broker.netns, broker.dir
    assert pid is not None and directory is not None
    how = broker.stop()
    assert how.startswith("stopped by SIGTERM"), how
    assert not broker.alive and not pid_alive(pid)
    assert not (directory / STATE_FILE).exists()
    assert ns is None or not netns.exists(ns)
    assert (directory / "logs" / "broker.log").stat().st_size > 0  # the log stays


def rmqspec(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rmqspec", "broker", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture
def cli_store(tmp_path: Path) -> Iterator[Path]:
    """A store for a broker the CLI starts detached; whatever the test did, nothing runs there afterwards."""
    store = tmp_path / "cli-broker"
    try:
        yield store
    finally:
        state = BrokerState.read(store)
        if state is not None and state.alive:
            ApacheBroker.attach(store).stop(graceful=False)


def test_the_cli_starts_a_broker_that_outlives_it_and_stops_it(cli_store: Path) -> None:
    need("java", "it runs the broker")
    if cached("4.9.7") is None:
        need("mvn", "Apache RocketMQ 4.9.7 is not in the cache yet")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    store = cli_store
    started = rmqspec("start", "--version", "4.9.7", "--store", str(store), env=env)
    try:
        assert started.returncode == 0, started.stderr
        assert (
            "broker 4.9.7 answers on " in started.stdout
            and f"stop it: rmqspec broker stop --store {store}" in started.stdout
        )
        status = rmqspec("status", "--store", str(store), env=env)
        assert status.returncode == 0 and "running: broker 4.9.7" in status.stdout, (
            status.stdout + status.stderr
        )
        again = rmqspec("start", "--store", str(store), env=env)
        assert again.returncode == 2 and "already runs on store" in again.stderr
    finally:
        stopped = rmqspec("stop", "--store", str(store), env=env)
    assert stopped.returncode == 0 and "stopped by SIGTERM" in stopped.stdout, stopped.stdout + stopped.stderr
    status = rmqspec("status", "--store", str(store), env=env)
    assert status.returncode == 1 and "not running" in status.stdout
    fresh = rmqspec("start", "--store", str(store), env=env)
    assert fresh.returncode == 2 and "is not empty" in fresh.stderr

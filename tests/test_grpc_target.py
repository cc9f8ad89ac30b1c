"""The gRPC targets: addresses, what a received message shows, the command line's errors, and (slow, real
broker) the Apache RocketMQ 5.5.0 proxy in local mode running the stories every target runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rmqspec.adapters.grpc.client import make_message
from rmqspec.adapters.grpc.deploy import GrpcSpecError, parse_grpc
from rmqspec.adapters.grpc.target import GRPC_FEATURES, to_record
from rmqspec.cli import app
from rmqspec.conformance.contract import Feature

REPO = Path(__file__).resolve().parents[1]
PROFILE5 = REPO / "profiles" / "short-levels-5.yaml"


def test_grpc_addresses() -> None:
    assert parse_grpc("grpc://10.0.0.2:8081") == ("10.0.0.2", 8081, None)
    assert parse_grpc("grpc://h:8081?admin=h:10911") == ("h", 8081, ("h", 10911))
    for bad in ("grpc://h", "grpc://h:0", "grpc://h:8081?x=1", "grpc://h:8081?admin=h"):
        with pytest.raises(GrpcSpecError):
            parse_grpc(bad)


def test_the_grpc_target_lacks_what_only_remoting_has() -> None:
    for f in (
        Feature.QUEUE_CHOICE,
        Feature.PULL_OFFSET,
        Feature.REMOTING_DETAIL,
        Feature.BATCH,
        Feature.VIEW,
    ):
        assert f not in GRPC_FEATURES
    assert {Feature.SEND, Feature.TRANSACTION, Feature.TRANSACTION_CHECK, Feature.HEARTBEAT} <= GRPC_FEATURES


def test_a_received_message_shows_user_properties_tag_keys_and_id() -> None:
    m = make_message(
        "T",
        b"hi",
        message_id="U1",
        tag="TagA",
        keys=["k1", "k2"],
        user_properties={"USER": "u"},
        delivery_ms=1_700_000_003_000,
        transactional=False,
        born_ms=1_700_000_000_123,
    )
    m.system_properties.queue_id = 0
    m.system_properties.queue_offset = 4
    rec = to_record(m)
    assert rec.topic == "T" and rec.body == b"hi" and rec.queue_offset == 4
    assert dict(rec.properties) == {"USER": "u", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}
    assert rec.born_timestamp == 1_700_000_000_123


def test_cli_grpc_errors_are_one_line() -> None:
    runner = CliRunner()
    four = runner.invoke(app, ["conform", "--target", "grpc://127.0.0.1:1"])
    assert four.exit_code == 2 and "5.x" in four.output and "Traceback" not in four.output
    bad = runner.invoke(app, ["conform", "--target", "grpc://nope", "--profile", str(PROFILE5)])
    assert bad.exit_code == 2 and "HOST:PORT" in bad.output and "Traceback" not in bad.output
    old = runner.invoke(app, ["conform", "--target", "apache-proxy:4.9.7", "--profile", str(PROFILE5)])
    assert old.exit_code == 2 and "no gRPC proxy" in old.output


@pytest.mark.slow
@pytest.mark.real_broker
@pytest.mark.timeout(600)
def test_the_apache_proxy_runs_the_grpc_stories() -> None:
    from rmqspec.adapters.apache.maven import ResolveError, cached, fetch
    from rmqspec.conform import conform
    from rmqspec.conformance.scenarios import catalogue

    missing = None
    if shutil.which("java") is None:
        missing = "java is required (it runs the proxy)"
    elif cached("5.5.0", "rocketmq-proxy") is None:
        # Like the broker tests, fetch what is missing rather than rely on an earlier step's cache: a
        # cache left on the machine once hid that nothing before this test fetched the proxy's jars.
        if shutil.which("mvn") is None:
            missing = "the 5.5.0 proxy jars are not cached and Maven is missing (make rocketmq)"
        else:
            try:
                fetch("5.5.0")
            except ResolveError as e:
                missing = f"the 5.5.0 proxy jars could not be resolved: {e}"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}; required in CI")
        pytest.skip(missing)
    stories = [s for s in catalogue() if s.id.startswith("catalogue/grpc-")]
    rep = conform("apache-proxy:5.5.0", scenarios=stories, profile=PROFILE5, concurrency=5)
    assert rep.counts["pass"] == len(stories), rep.summary()

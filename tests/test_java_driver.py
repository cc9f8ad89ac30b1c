"""Histories recorded with Apache RocketMQ's own Java client (adapters/apache/javadriver, issue 24).

The fixtures under fixtures/real/java-client were recorded by `rmqspec java-workload --target apache:V
--seconds S` on real 4.9.7 (8 s) and 5.5.0 (5 s) brokers. Today's checker rejects them for reasons issue 24 lists
(one-way COMMIT and ROLLBACK, lookups that take the first match, op messages without keys) and one it
does not (a consumer's heartbeat creates its retry topic): they are not in fixtures/real, whose histories
must pass. What is asserted here is what the recording itself must be, whatever the verdict: every event
reads with the codec, every request kind of the workload is there, END_TRANSACTION is one-way, the
read-back walks the whole commit log record by record, and the checker finds nothing wrong with the
history as a history.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rmqspec.conformance.checker import Verdict, check_history
from rmqspec.conformance.codec import event_op, record_from_json, response_from_json
from rmqspec.conformance.history import Event, load
from rmqspec.reference.config import Profile, config_from_broker_conf

HERE = Path(__file__).parent / "fixtures" / "real" / "java-client"
FIXTURES = sorted(HERE.glob("*.jsonl"))
KINDS = {"send", "send_half", "end_tx", "pull", "send_back", "heartbeat", "check", "view"}


def judge(meta: dict[str, Any], events: Sequence[Event]) -> Verdict:
    broker: dict[str, Any] = dict(meta["broker"])
    config = config_from_broker_conf(broker, Profile(broker.pop("profile")))
    return check_history(events, config, epsilon_ms=meta["epsilon_ms"], shared=True)


def assert_recorded_right(meta: dict[str, Any], events: Sequence[Event]) -> None:
    assert {e.f for e in events} >= KINDS
    for e in events:
        if e.type == "invoke":
            event_op(e.f, e.value)
        elif e.f == "check":
            record_from_json(e.value["message"])
        elif e.type in ("ok", "fail"):
            response_from_json(e.value)
    # END_TRANSACTION goes one-way: an invoke and at once an answer that never came
    ends = [e for e in events if e.f == "end_tx" and e.type != "invoke"]
    assert ends and all(e.value["no_response"] for e in ends)
    assert {e.value["action"] for e in events if e.f == "end_tx" and e.type == "invoke"} == {0, 8, 12}
    # the read-back: VIEW at 0, then each next offset the last one plus its size, every one answered
    views = [e for e in events if e.f == "view"]
    asked = [e.value["offset"] for e in views if e.type == "invoke"]
    found = [e.value["records"][0] for e in views if e.type == "ok" and e.value["code"] == 0]
    assert asked[0] == 0 and len(found) == len(asked)
    assert [r["commit_log_offset"] for r in found] == asked
    assert all(a + r["size"] == b for a, r, b in zip(asked, found, asked[1:], strict=False))
    topics = {r["topic"] for r in found}
    assert {"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"} <= topics
    assert any(t.startswith("%RETRY%") for t in topics) and any(t.startswith("%DLQ%") for t in topics)
    v = judge(meta, events)
    assert v.consumed == v.total == len(events)
    assert not [a for a in v.anomalies if a.rule.startswith("history/")], v.summary()
    assert v.checked_total > 0


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_a_java_client_history_is_recorded_right(path: Path) -> None:
    meta, events = load(path)
    assert meta["client"].startswith("org.apache.rocketmq:rocketmq-client:")
    assert_recorded_right(meta, events)


def test_there_is_a_java_client_history_per_suite_version() -> None:
    """One per release `make test` runs real brokers of (SUITE); the release matrix pins more."""
    from rmqspec.adapters.apache.versions import SUITE

    assert {p.name.split("--")[0] for p in FIXTURES} == {f"apache-{v}" for v in SUITE}


@pytest.mark.slow
@pytest.mark.real_broker
@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", ["4.9.7", "5.5.0"])
def test_the_java_client_workload_runs_on_a_real_broker(version: str, tmp_path: Path) -> None:
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            if os.environ.get("CI"):
                pytest.fail(f"{tool} is required in CI (the Java-client workload) and was not found")
            pytest.skip(f"{tool} not found (the Java-client workload)")
    from rmqspec.adapters.apache.javadriver import java_workload

    res = java_workload(version, seconds=3, save=tmp_path / "h.jsonl")
    meta, events = load(res.history)
    assert meta["target"] == f"apache:{version}"
    assert_recorded_right(meta, events)


def test_the_client_is_resolved_like_the_broker_and_the_driver_compiled_once_per_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmqspec.adapters.apache import javadriver, maven

    # the client's classpath in the cache, as `maven.resolve` leaves it: no Maven runs
    vdir = maven.version_dir("4.9.7", tmp_path)
    (vdir / "lib").mkdir(parents=True)
    (vdir / "lib" / "rocketmq-client-4.9.7.jar").write_bytes(b"PK")
    (vdir / "classpath-rocketmq-client.txt").write_text("rocketmq-client-4.9.7.jar\n")
    assert maven.resolve("4.9.7", "rocketmq-client", cache=tmp_path, offline=True).jars
    calls: list[list[str]] = []
    javac = tmp_path / "bin" / "javac"
    javac.parent.mkdir()
    javac.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\n')
    javac.chmod(0o755)
    monkeypatch.setenv("PATH", f"{javac.parent}{os.pathsep}{os.environ['PATH']}")
    first = javadriver.build("4.9.7", cache=tmp_path)
    second = javadriver.build("4.9.7", cache=tmp_path)
    calls = [ln.split() for ln in (javac.parent / "calls").read_text().splitlines()]
    assert len(calls) == 1 and first == second  # cached, keyed by the source's hash
    assert first.classes.parent.name == f"javadriver-{javadriver.source_hash()}"
    assert str(vdir / "lib" / "rocketmq-client-4.9.7.jar") in first.classpath
    assert any(c.endswith("WireRecorder.java") for c in calls[0])


def test_a_driver_that_does_not_compile_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rmqspec.adapters.apache import javadriver, maven

    vdir = maven.version_dir("5.5.0", tmp_path)
    (vdir / "lib").mkdir(parents=True)
    (vdir / "lib" / "rocketmq-client-5.5.0.jar").write_bytes(b"PK")
    (vdir / "classpath-rocketmq-client.txt").write_text("rocketmq-client-5.5.0.jar\n")
    javac = tmp_path / "bin" / "javac"
    javac.parent.mkdir()
    javac.write_text("#!/bin/sh\necho 'Driver.java:1: error: cannot find symbol' >&2\nexit 1\n")
    javac.chmod(0o755)
    monkeypatch.setenv("PATH", f"{javac.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(
        javadriver.JavaDriverError, match=r"^javac failed .* for 5\.5\.0: Driver\.java:1: error"
    ):
        javadriver.build("5.5.0", cache=tmp_path)

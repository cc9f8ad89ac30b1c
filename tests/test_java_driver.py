"""Histories recorded with Apache RocketMQ's own Java client (adapters/apache/javadriver, issue 24).

The fixtures under fixtures/real/java-client were recorded by `rmqspec java-workload --target apache:V
--seconds 5` on real 4.9.7 and 5.5.0 brokers. Today's checker rejects them for reasons issue 24 lists
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


def test_there_is_a_java_client_history_per_pinned_version() -> None:
    from rmqspec.adapters.apache.versions import PINNED

    assert {p.name.split("--")[0] for p in FIXTURES} == {f"apache-{v}" for v in PINNED}


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

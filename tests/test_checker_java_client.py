"""Histories recorded with Apache's own Java client (tests/fixtures/real/java-client/, issue 24), and what
they taught the checker: op messages named by their half offsets (4.9.x one per END, 5.x batched by the
batch service's timing), and a 4.9.x producer's END_TRANSACTION that names no transactionId."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from test_real_histories import judge

from rmqspec.conformance.history import Event, load

HERE = Path(__file__).parent / "fixtures" / "real" / "java-client"
V497 = HERE / "apache-4.9.7--java-client-workload.jsonl"
V550 = HERE / "apache-5.5.0--java-client-workload.jsonl"


def _op_views(events: list[Event]) -> list[int]:
    return [
        i
        for i, e in enumerate(events)
        if e.f == "view"
        and e.type == "ok"
        and e.value.get("records")
        and e.value["records"][0]["topic"] == "RMQ_SYS_TRANS_OP_HALF_TOPIC"
    ]


@pytest.mark.parametrize("path", [V497, V550], ids=["4.9.7", "5.5.0"])
def test_a_correct_brokers_java_client_history_passes(path: Path) -> None:
    """Recorded by `rmqspec java-workload` on real Apache RocketMQ: one-way END_TRANSACTION, consumers'
    heartbeats (which create the retry topic), send-backs, checks answered, the whole commit log viewed."""
    v = judge(path)
    assert v.passed, [a.to_json() for a in v.anomalies[:5]]
    _, events = load(path)
    assert any(e.f == "heartbeat" and e.value.get("consumer") for e in events)
    assert len(_op_views(events)) > 0


@pytest.mark.parametrize("path", [V497, V550], ids=["4.9.7", "5.5.0"])
def test_op_messages_are_judged_by_the_halves_they_name(path: Path) -> None:
    v = judge(path)
    assert not [a for a in v.anomalies if a.rule == "put/commit-log-lookup"], [a.message for a in v.anomalies]

    # an op message naming a half offset no transaction ended is not the model's
    def wrong(events: list[Event]) -> list[Event]:
        i = _op_views(events)[0]
        value = json.loads(json.dumps(events[i].value))
        value["records"][0]["body"] = "999999"
        events[i] = attrs.evolve(events[i], value=value)
        return events

    bad = judge(path, wrong)
    assert any(a.name == "wrong-lookup-result" for a in bad.anomalies)


def test_a_4_9_producer_that_names_no_transaction_id_ends_each_transaction_once() -> None:
    """The 4.9.7 client's END_TRANSACTION outside a check carries no transactionId; transactions are told
    apart by the half record they name, not all called "" (which made every second one a hazard)."""
    _, events = load(V497)
    assert any(e.f == "end_tx" and e.type == "invoke" and not e.value.get("transaction_id") for e in events)
    assert judge(V497).hazards == ()

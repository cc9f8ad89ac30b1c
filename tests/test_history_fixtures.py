"""Every history fixture judged (Knossos/Elle style): the good ones pass, the bad ones fail with exactly
the root causes their header names, and every anomaly the checker can report has a bad fixture.

The fixtures are files (tests/fixtures/histories/{good,bad}/*.jsonl, written by make.py there); the
header line of each holds the checker settings and the expected verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rmqspec.conformance.checker import ANOMALIES, Verdict, check_history
from rmqspec.conformance.history import load
from rmqspec.reference.config import BrokerConfig

HERE = Path(__file__).parent / "fixtures" / "histories"
GOOD = sorted((HERE / "good").glob("*.jsonl"))
BAD = sorted((HERE / "bad").glob("*.jsonl"))


def judge(path: Path) -> tuple[dict[str, Any], Verdict]:
    meta, events = load(path)
    verdict = check_history(
        events,
        BrokerConfig(**meta.get("config", {})),
        epsilon_ms=meta["epsilon_ms"],
        check_phase_ms=meta.get("check_phase_ms", 0),
    )
    return meta, verdict


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_good_history_passes(path: Path) -> None:
    meta, v = judge(path)
    assert meta["expect"] == {"valid": "pass"}
    assert v.status == "pass", [a.to_json() for a in v.anomalies]
    assert v.checked_total > 0


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_history_fails_with_its_root_causes(path: Path) -> None:
    meta, v = judge(path)
    assert meta["expect"]["valid"] == "fail"
    assert v.status == "fail"
    want = [tuple(c) for c in meta["expect"]["causes"]]
    got = [(r.name, r.rule) for r in v.root_causes]
    assert got == want, [a.to_json() for a in v.anomalies]
    # The file's name is the anomaly it shows.
    assert path.stem.split("--")[0] == want[0][0]


def test_every_anomaly_kind_has_a_good_and_a_bad_fixture() -> None:
    kinds = {p.stem.split("--")[0] for p in BAD}
    assert kinds == set(ANOMALIES), set(ANOMALIES) ^ kinds
    assert {p.stem for p in GOOD} == {p.stem for p in BAD}


def test_a_refused_delayed_send_is_one_root_cause_and_nothing_more_about_that_message() -> None:
    """The target refused a delayed send the model accepts: the refusal is the one root cause, and the
    checker, following the target, expects nothing of that message (no late delivery, no loss)."""
    _, v = judge(HERE / "bad" / "wrong-response.jsonl")
    assert [(r.name, r.rule, r.event) for r in v.root_causes] == [("wrong-response", "put/send-result", 3)]
    assert [a.name for a in v.anomalies] == ["wrong-response"]
    doc = v.to_json()
    assert doc["root_causes"][0]["consequence_count"] == 0
    assert "Fix put/send-result first" in doc["summary"]


def test_consequences_are_grouped_under_their_root() -> None:
    """A lost message also makes the pull's answer wrong: one root cause, the answer listed under it."""
    _, v = judge(HERE / "bad" / "lost-message.jsonl")
    (root,) = v.root_causes
    assert (root.name, root.rule) == ("lost-message", "put/send-result")
    assert [v.anomalies[i].name for i in root.consequences] == ["wrong-pull-status"]
    doc = v.to_json()
    assert [c["name"] for c in doc["root_causes"][0]["consequences"]] == ["wrong-pull-status"]
    assert len(doc["anomalies"]) == len(v.anomalies)  # every anomaly, none cut

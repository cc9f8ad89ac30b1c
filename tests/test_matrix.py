"""The release matrix's planning and table building (rmqspec/matrix.py) and the pinned release table; no broker."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from rmqspec import matrix as mx
from rmqspec.adapters.apache.versions import NOT_PINNED, PINNED, SUITE, mq_version, pinned
from rmqspec.conformance.scenarios import Scenario, catalogue
from rmqspec.conformance.specdoc import load_spec
from rmqspec.reference.config import Profile

ROOT = Path(__file__).resolve().parent.parent

# Versions lines as the spec writes them (spec/put.md, config.md, batch.md, pull.md, timer.md, history.md).
PUT_TOPIC = (
    "4.9.0–4.9.8 (default profile). 5.0.0–5.3.1: the same. 5.3.2–5.5.0: the answer is `INVALID_PARAMETER` "
    "(29) instead of `SYSTEM_ERROR`; 5.4.0–5.5.0: a `%RETRY%` or `%DLQ%` name may be 255 characters long."
)
DEFAULTS = (
    "4.9.0–4.9.8 (default profile). 5.0.0–5.5.0: the same defaults, except `transactionCheckInterval`, "
    "which is 30 000 ms from 5.1.1 (60 000 ms in 5.0.0–5.1.0); the model's second profile follows 5.5.0."
)
BATCH_CLIENT = (
    "4.9.0–4.9.8 client (default profile). 5.0.0–5.4.0 client: the same; 5.5.0 client: timer-delayed "
    "messages are refused too."
)
PULL_CODES = (
    "4.9.4–4.9.8 (default profile). 4.9.0–4.9.3: the same codes; OFFSET_OVERFLOW_BADLY answers "
    "`nextBeginOffset` = `minOffset` while it is 0. 5.0.0–5.5.0: as 4.9.4–4.9.8, except that "
    "PULL_OFFSET_MOVED writes no OffsetMovedEvent."
)
PROPS = (
    "4.9.1–4.9.8 (default profile). 4.9.0 writes a separator after the last entry as well. 5.0.0–5.1.4: "
    "the same as 4.9.8; 5.2.0–5.5.0: a separator after every entry, the last one too."
)
TIMER = "5.2.0–5.5.0 (the model follows 5.5.0)."
ALL = "all versions (a property of the suite's history format, not of RocketMQ)."


@pytest.mark.parametrize(
    ("text", "line", "want"),
    [
        (PUT_TOPIC, Profile.V5, ("5.4.0", "5.5.0")),  # 255-character names only from 5.4.0
        (PUT_TOPIC, Profile.V4_9, ("4.9.0", "4.9.8")),
        (DEFAULTS, Profile.V5, ("5.1.1", "5.5.0")),  # "from 5.1.1", and after "5.0.0–5.1.0"
        (BATCH_CLIENT, Profile.V5, ("5.4.1", "5.5.0")),  # after a range that ends before 5.5.0
        (PULL_CODES, Profile.V4_9, ("4.9.4", "4.9.8")),
        (PULL_CODES, Profile.V5, ("5.0.0", "5.5.0")),
        (PROPS, Profile.V4_9, ("4.9.1", "4.9.8")),  # 4.9.0 named alone: it behaves otherwise
        (PROPS, Profile.V5, ("5.2.0", "5.5.0")),
        (TIMER, Profile.V5, ("5.2.0", "5.5.0")),
        (TIMER, Profile.V4_9, None),  # no 4.9 release named: no claim
        (ALL, Profile.V4_9, ("4.9.0", "4.9.8")),
        (ALL, Profile.V5, ("5.0.0", "5.5.0")),
    ],
)
def test_a_versions_line_claims_the_line_release_from_its_latest_boundary(
    text: str, line: Profile, want: tuple[str, str] | None
) -> None:
    assert mx.line_claim(text, line) == want


def test_a_boundary_is_a_release_named_inside_a_line() -> None:
    assert mx.has_boundary(PUT_TOPIC) and mx.has_boundary(PULL_CODES) and mx.has_boundary(TIMER)
    assert not mx.has_boundary("4.9.0–4.9.8 (default profile). 5.0.0–5.5.0: the same.")
    assert not mx.has_boundary(ALL)


def test_a_release_is_x_y_z_and_of_a_line() -> None:
    assert mx.line_of("4.9.3") is Profile.V4_9 and mx.line_of("5.1.1") is Profile.V5
    assert mx.line_of("4.8.0") is None
    with pytest.raises(mx.MatrixError, match=r"'5\.1' is not a release"):
        mx.key("5.1")


def scenario(sid: str, rules: tuple[str, ...], profile: str | None = None) -> Scenario:
    return Scenario(sid, rules, ({"send": {"topic": "T"}},), profile=profile)


@attrs.frozen
class Ranged(Scenario):
    """A scenario naming its own releases (the ``releases:`` key of the scenario format)."""

    releases: tuple[tuple[str, str], ...] = ()


VERSIONS = {
    "put/a": PUT_TOPIC,
    "config/d": DEFAULTS,
    "timer/t": TIMER,
    "dispatch/x": "4.9.0–4.9.8. 5.0.0–5.5.0: the same.",
}


def test_a_scenario_holds_where_its_own_releases_say_else_where_all_its_rules_claim() -> None:
    both = scenario("put/a#x", ("put/a", "config/d"))
    c = mx.claim(both, VERSIONS)
    assert c.source == "versions" and c.ranges == (("4.9.0", "4.9.8"), ("5.4.0", "5.5.0"))
    assert c.covers("4.9.3") and c.covers("5.5.0") and not c.covers("5.3.3") and not c.covers("5.5.1")
    own = Ranged(
        "timer/t#old",
        ("timer/t",),
        ({"send": {"topic": "T"}},),
        profile="5.x",
        releases=(("5.0.0", "5.1.0"),),
    )
    c = mx.claim(own, VERSIONS)
    assert c.source == "scenario" and c.covers("5.1.0") and not c.covers("5.1.1")
    timer = scenario("timer/t#new", ("timer/t",), "5.x")
    assert mx.claim(timer, VERSIONS).ranges == (("5.2.0", "5.5.0"),)


def test_the_plan_of_a_release_runs_what_is_claimed_there_and_says_why_not_for_the_rest() -> None:
    scenarios = [
        scenario("put/a#x", ("put/a",)),
        scenario("timer/t#new", ("timer/t",), "5.x"),
        scenario("dispatch/x#y", ("dispatch/x",)),
    ]
    sel = mx.Selection(tuple(scenarios), {s.id: "boundary" for s in scenarios})
    run, off = mx.plan(sel, VERSIONS, "5.1.1")
    assert [s.id for s in run] == ["dispatch/x#y"]
    assert off["put/a#x"] == "read, not run: its rules' Versions lines claim it on 4.9.0–4.9.8, 5.4.0–5.5.0"
    assert off["timer/t#new"].startswith("read, not run: ") and "5.2.0–5.5.0" in off["timer/t#new"]
    run, off = mx.plan(sel, VERSIONS, "4.9.7")
    assert [s.id for s in run] == ["put/a#x", "dispatch/x#y"] and off == {
        "timer/t#new": "written for the 5.x line"
    }
    with pytest.raises(mx.MatrixError, match="of no line"):
        mx.plan(sel, VERSIONS, "4.8.0")


def test_the_selection_takes_every_boundary_scenario_and_a_few_quick_ones_per_area() -> None:
    spec = load_spec()
    sel = mx.select(catalogue(spec), spec, smoke_per_area=2)
    boundary = {r.id for r in spec.rules if mx.has_boundary(r.versions)}
    assert boundary and all(set(s.rules) & boundary for s in sel.scenarios if sel.why[s.id] == "boundary")
    area = {r.id: r.area for r in spec.rules}
    smoke = [s for s in sel.scenarios if sel.why[s.id] == "smoke"]
    per: dict[str, int] = {}
    for s in smoke:
        assert not s.config and not set(s.rules) & boundary
        per[area[s.rules[0]]] = per.get(area[s.rules[0]], 0) + 1
    assert per and max(per.values()) <= 2


def out(sid: str, rules: tuple[str, ...], outcome: str, failed: tuple[str, ...] = ()) -> mx.Outcome:
    return mx.Outcome(sid, rules, outcome, "why" if outcome != "pass" else "", failed)


def test_the_table_says_fail_pass_skip_or_read_not_run_per_rule_and_release() -> None:
    a = mx.ReleaseRun(
        "5.1.1",
        "ran",
        (
            out("r1#a", ("r1",), "pass"),
            out("r1#b", ("r1", "r2"), "fail", ("r2",)),  # the failure names r2: r1 is not contradicted
            out("r3#a", ("r3",), mx.READ_NOT_RUN),
            out("r4#a", ("r4",), "skip"),
        ),
    )
    b = mx.ReleaseRun("5.0.0", "does not boot: broker exited")
    t = mx.build_table([a, b], ["r1", "r2", "r3", "r4", "r5"])
    assert t.rules == ("r1", "r2", "r3", "r4")  # r5: no scenario anywhere
    assert t.cells["r1"] == {"5.1.1": "pass", "5.0.0": "not run"}
    assert t.cells["r2"]["5.1.1"] == "fail" and t.cells["r3"]["5.1.1"] == mx.READ_NOT_RUN
    assert t.cells["r4"]["5.1.1"] == "skip"
    assert t.contradictions == (("r2", "5.1.1", "r1#b"),) and not t.ok
    clean = mx.build_table([mx.ReleaseRun("4.9.7", "ran", (out("r1#a", ("r1",), "pass"),))], ["r1"])
    assert clean.ok and clean.cells == {"r1": {"4.9.7": "pass"}}


def test_the_page_is_made_from_the_json_alone_and_names_every_contradiction() -> None:
    spec = load_spec()
    rule = spec.rules[0].id
    runs = [
        mx.ReleaseRun(
            "4.9.7", "ran", (out(f"{rule}#a", (rule,), "fail"),), 12.0, "profiles/short-levels.yaml"
        ),
        mx.ReleaseRun("5.0.0", "does not boot: exit 1"),
    ]
    doc = mx.document(runs, mx.Selection((), {}), spec, "abc")
    doc = json.loads(json.dumps(doc))
    assert doc["contradictions"] == [[rule, "4.9.7", f"{rule}#a"]]
    page = mx.render_markdown(doc)
    assert f"| `{rule}` | 4.9.7 | `{rule}#a` |" in page
    assert "| 5.0.0 | - | does not boot: exit 1 |" in page
    assert mx.ReleaseRun.from_json(doc["releases"][0]) == runs[0]
    # a row kept from an earlier run without a commit of its own takes its document's
    older = {k: v for k, v in doc["releases"][1].items() if k not in ("commit", "date")}
    row = mx.ReleaseRun.from_json(older, "c0ffee", "2026-11-27T10:00:00Z")
    assert (row.commit, row.date) == ("c0ffee", "2026-11-27T10:00:00Z")
    assert "| 2026-11-27T10:00:00Z `c0ffee` |" in mx.render_markdown({**doc, "releases": [row.to_json()]})


def test_the_committed_page_is_the_committed_json_rendered() -> None:
    data = ROOT / "docs" / "results" / "matrix.json"
    if not data.is_file():
        pytest.skip("no matrix results committed yet")
    doc = json.loads(data.read_text(encoding="utf-8"))
    assert (ROOT / "docs" / "release-matrix.md").read_text(encoding="utf-8") == mx.render_markdown(doc)


def test_the_pinned_table_is_consistent() -> None:
    assert set(SUITE) <= set(PINNED) and not set(NOT_PINNED) & set(PINNED)
    assert mq_version("4.9.7") == 407 and mq_version("5.5.0") == 513  # MQVersion ordinals
    assert mq_version("4.9.0") == 393 and mq_version("5.1.1") == 435
    for v, row in PINNED.items():
        assert row.version == v and row.line is mx.line_of(v) and row.mq_version == mq_version(v)
        assert (not row.proxy or row.line is Profile.V5) and row.logging in ("4.9", "5")
        assert row.line is Profile.V5 or row.logging == "4.9"
        assert row.java_opts == (() if v == "5.5.0" else pinned("4.9.7").java_opts)
    assert pinned("5.5.0").artifacts == ("rocketmq-broker", "rocketmq-proxy")


def test_a_failure_on_a_release_its_rule_sets_apart_is_no_contradiction() -> None:
    versions = {"wire/c": "4.9.0–4.9.8. 5.0.0–5.2.0: same; 5.3.0–5.5.0: the header adds `topic`.", "s/d": ALL}
    run = mx.ReleaseRun(
        "5.0.0",
        "ran",
        (
            out("t#a", ("t",), "fail", ("wire/c",)),  # wire/c claims 5.3.0-5.5.0 only: set apart
            out("s#b", ("s/d",), "fail"),  # s/d claims every release: a contradiction
        ),
    )
    t = mx.build_table([run], ["wire/c", "s/d", "t"], versions)
    assert t.set_apart == (("wire/c", "5.0.0", "t#a"),)
    assert t.contradictions == (("s/d", "5.0.0", "s#b"),)
    assert t.cells["s/d"]["5.0.0"] == "fail" and t.cells["wire/c"]["5.0.0"] == mx.DIFFERS
    on_530 = mx.build_table([attrs.evolve(run, release="5.3.0")], ["wire/c"], versions)
    assert ("wire/c", "5.3.0", "t#a") in on_530.contradictions  # inside its claim: contradicted
    assert mx.claims(versions, "wire/c", "5.2.0") is False and mx.claims(None, "wire/c", "5.2.0") is True

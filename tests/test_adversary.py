"""Issue 23, the adversary: histories a correct broker made, changed the way a broken broker would
(conformance/adversary.py), must be rejected by the history checker, naming the rule the change breaks.

* every source history passes as it is (else a rejection would say nothing);
* a fixed corpus (tests/fixtures/adversary/, one perturbation of each kind on each kind of source, made
  by its make_corpus.py) is replayed on every run;
* a Hypothesis search over sources, kinds and places (slow mark, still run in CI), and a seeded sweep of
  at least ``SWEEP`` perturbations that counts each kind, so a kind that stops finding places fails.
Restarts are out of scope here: a history is perturbed only before its first restart (the restart
allowances are bounded and tested at their bounds in tests/test_checker_restart_bounds.py).
"""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path

import pytest
from adversary_sources import Source, sources
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqspec.conformance.adversary import KINDS, perturb
from rmqspec.conformance.checker import Verdict, check_history
from rmqspec.conformance.history import load
from rmqspec.reference.config import BrokerConfig, Profile, config_from_broker_conf

CORPUS = Path(__file__).parent / "fixtures" / "adversary"
SWEEP = 10_000
# Holes the adversary found that the checker does not close yet: (kind, source family, target) -> why.
HOLES: dict[tuple[str, str, str], str] = {
    (h["kind"], h["source"], h["target"]): h["reason"]
    for h in json.loads((CORPUS / "holes.json").read_text(encoding="utf-8"))["holes"]
}


def family(source: str) -> str:
    """reference-3 -> reference, real/x -> real."""
    return source.split("/", 1)[0].split("-", 1)[0]


def _hole(kind: str, source: str, target: str) -> tuple[str, str, str] | None:
    key = (kind, family(source), target)
    return key if key in HOLES else None


def _rejected_for(v: Verdict, kind: str) -> tuple[bool, list[str]]:
    rules = sorted({a.rule for a in v.anomalies})
    return bool(v.anomalies) and bool(set(rules) & set(KINDS[kind].rules)), rules


def test_every_source_passes_as_it_is() -> None:
    for s in sources():
        v = s.judge(s.events)
        assert not v.anomalies, (s.name, [a.to_json() for a in v.anomalies[:3]])


def test_every_kind_finds_a_place_in_some_source() -> None:
    for kind in KINDS:
        assert any(perturb(s.events, kind, random.Random(0)) for s in sources()), kind


def _corpus() -> list[Path]:
    return sorted(CORPUS.glob("*.jsonl"))


def test_the_corpus_has_every_kind() -> None:
    kinds = {
        json.loads(p.read_text(encoding="utf-8").splitlines()[0])["adversary"]["kind"] for p in _corpus()
    }
    assert kinds == set(KINDS)


def _corpus_params() -> list[object]:
    out: list[object] = []
    for p in _corpus():
        meta = json.loads(p.read_text(encoding="utf-8").splitlines()[0])["adversary"]
        hole = _hole(meta["kind"], meta["source"], meta.get("target", ""))
        # make_corpus.py recorded how the checker judged it when the corpus was written: a hole stays a strict
        # expected failure until the checker closes it (then make_corpus.py is run again)
        marks = []
        if meta["expect"] == "hole":
            assert hole is not None, f"{p.name}: a hole not in holes.json"
            marks = [pytest.mark.xfail(strict=True, reason=f"checker hole: {HOLES[hole]}")]
        out.append(pytest.param(p, id=p.stem, marks=marks))
    return out


@pytest.mark.parametrize("path", _corpus_params())
def test_the_corpus_is_rejected_by_the_rule_it_breaks(path: Path) -> None:
    meta, events = load(path)
    kind = meta["adversary"]["kind"]
    if "broker" in meta:
        broker = dict(meta["broker"])
        config = config_from_broker_conf(broker, Profile(broker.pop("profile")))
        v = check_history(events, config, epsilon_ms=meta["epsilon_ms"], shared=True)
    else:
        v = check_history(
            events,
            BrokerConfig(**meta.get("config", {})),
            epsilon_ms=meta["epsilon_ms"],
            check_phase_ms=meta.get("check_phase_ms"),
        )
    ok, rules = _rejected_for(v, kind)
    assert ok, f"{path.name}: {kind} ({meta['adversary']['detail']}) gave {rules or 'a pass'}"


def _one(source: Source, kind: str, seed: int) -> tuple[str, list[str], str] | None:
    """None when the kind has no place here; else 'right', 'other' or 'accepted', the rules named, and
    what was changed."""
    got = perturb(source.events, kind, random.Random(seed))
    if got is None:
        return None
    events, where = got
    ok, rules = _rejected_for(source.judge(events), kind)
    return ("right" if ok else "other" if rules else "accepted"), rules, where.target


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_perturbation_anywhere_is_rejected_by_its_rule(data: st.DataObject) -> None:
    all_sources = sources()
    source = all_sources[data.draw(st.integers(0, len(all_sources) - 1), label="source")]
    kind = data.draw(st.sampled_from(sorted(KINDS)), label="kind")
    seed = data.draw(st.integers(0, 2**32 - 1), label="place")
    outcome = _one(source, kind, seed)
    if outcome is not None and _hole(kind, source.name, outcome[2]) is None:
        assert outcome[0] == "right", f"{source.name}: {kind} at seed {seed}: {outcome}"


@pytest.mark.slow
def test_a_sweep_of_ten_thousand_perturbations_is_all_rejected_by_its_rule() -> None:
    """Seeded, so a run is reproducible; every kind counted, each on every source it finds a place in.
    The generated reference histories carry most of it (they are short: the checker's cost per event)."""
    all_sources = sources()
    kinds = sorted(KINDS)
    counts: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in kinds}
    wrong: list[str] = []
    holes_seen: set[tuple[str, str, str]] = set()
    n = seed = 0
    while n < SWEEP:
        source = all_sources[seed % len(all_sources)]
        kind = kinds[(seed // len(all_sources)) % len(kinds)]
        outcome = _one(source, kind, seed)
        seed += 1
        if outcome is None:
            continue
        n += 1
        counts[kind][outcome[0]] += 1
        if outcome[0] == "right":
            continue
        hole = _hole(kind, source.name, outcome[2])
        if hole is not None:
            holes_seen.add(hole)
        elif len(wrong) < 10:
            wrong.append(f"{source.name}: {kind} at seed {seed - 1}: {outcome}")
    assert not wrong, wrong
    # a hole that no longer shows is fixed: take it out of holes.json
    missing = set(HOLES) - holes_seen
    assert not missing, f"holes that no longer show (fixed? remove them from holes.json): {sorted(missing)}"
    assert all(sum(c.values()) >= SWEEP // (4 * len(kinds)) for c in counts.values()), counts

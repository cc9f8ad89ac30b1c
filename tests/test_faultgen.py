"""Generated brokers (conformance/faultgen.py): atoms rewrite the frames they say they do, combinations are
drawn the same from the same seed and never combine atoms that touch one thing, the wire faults chain, a
combination's model carries every atom's decision, and a diagnosis is graded against the truth on each
side of every criterion (all faults named, no false cause, the most blocking first)."""

from __future__ import annotations

import functools
import json
import random
import struct
from typing import Any

import pytest
from typer.testing import CliRunner

from rmqspec.cli import app
from rmqspec.conformance import faultgen as g
from rmqspec.conformance.wirecheck import WireFinding, parse_frame
from rmqspec.conformance.wireprobe import WireFault, encode
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Send
from rmqspec.reference.observations import PullResult
from rmqspec.reference.put import Message
from rmqspec.reference.records import props


def _header(frame: bytes) -> dict[str, Any]:
    parsed = parse_frame(frame)
    assert not isinstance(parsed, WireFinding)
    return dict(parsed.header)


def _response(code: int, opaque: int, ext: dict[str, str], body: bytes = b"") -> bytes:
    header = {"code": code, "language": "JAVA", "version": 409, "opaque": opaque, "flag": 1, "extFields": ext}
    raw = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


SEND_V2 = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "-1", "f": "0", "g": "1", "h": "0", "i": ""}


def _factory(f: object) -> WireFault:
    assert callable(f)
    made = f()
    assert isinstance(made, WireFault)
    return made


def test_partial_upper_camel_loses_the_topic_of_every_v2_send_and_answers_topic_not_exist() -> None:
    fault = _factory(g.partial_upper_camel(random.Random(1)))
    onward, back = fault.to_broker(encode(310, SEND_V2, b"x", opaque=7))
    assert onward is None and back is not None
    h = _header(back)
    assert h["code"] == 17 and h["opaque"] == 7 and h["flag"] == 1
    # a one-way send gets no answer at all
    assert fault.to_broker(encode(310, SEND_V2, b"x", opaque=8, flag=2)) == (None, None)


def test_partial_upper_camel_stops_at_the_first_unknown_key_in_its_map_order() -> None:
    fault = _factory(g.partial_upper_camel(random.Random(2)))
    ext = {"topic": "T", "queueId": "0", "bornTimestamp": "1", "producerGroup": "PG", "flag": "0"}
    seen_topic = lost_topic = 0
    for i in range(40):
        onward, back = fault.to_broker(encode(10, ext, b"x", opaque=i))
        if onward is None:
            lost_topic += 1
            assert back is not None and _header(back)["code"] == 17
            continue
        seen_topic += 1
        kept = _header(onward)["extFields"]
        assert "bornTimestamp" not in kept and set(kept) <= set(ext) and "topic" in kept
    assert seen_topic and lost_topic  # the order decides, both ways occur
    # in UpperCamel, a-c keys are read (as RocketMQ names them), the others end the decoding
    onward, _ = fault.to_broker(encode(10, {"BornTimestamp": "1", "topic": "T"}, opaque=99))
    assert onward is not None and _header(onward)["extFields"] == {"bornTimestamp": "1", "topic": "T"}
    onward, back = fault.to_broker(encode(10, {"Topic": "T"}, opaque=100))
    assert onward is None and back is not None and _header(back)["code"] == 17


def test_unknown_codes_are_never_answered_known_ones_pass() -> None:
    fault = g.unknown_codes_unanswered(random.Random(0))
    assert fault.to_broker(encode(320, {}, opaque=1)) == (None, None)
    frame = encode(11, {"topic": "T"}, opaque=2)
    assert fault.to_broker(frame) == (frame, None)


def test_a_refused_send_is_not_answered_an_accepted_one_is() -> None:
    fault = _factory(g.refused_send_unanswered(random.Random(0)))
    fault.to_broker(encode(310, SEND_V2, opaque=1))
    fault.to_broker(encode(310, SEND_V2, opaque=2))
    assert fault.to_client(_response(17, 1, {})) is None
    ok = _response(0, 2, {"msgId": "X"})
    assert fault.to_client(ok) == ok


def test_query_answers_each_record_twice() -> None:
    fault = _factory(g.query_extra_records(random.Random(0)))
    fault.to_broker(encode(12, {"topic": "T", "key": "k"}, opaque=5))
    out = fault.to_client(_response(0, 5, {}, b"REC"))
    assert out is not None
    parsed = parse_frame(out)
    assert not isinstance(parsed, WireFinding) and parsed.body == b"RECREC"
    other = _response(0, 6, {}, b"REC")
    assert fault.to_client(other) == other  # not an answer to a query


def test_chain_runs_to_broker_in_order_and_answers_back_through_the_earlier_faults() -> None:
    log: list[str] = []

    def tag(name: str) -> WireFault:
        def to_broker(frame: bytes) -> tuple[bytes | None, bytes | None]:
            log.append(f"{name}>")
            return frame, None

        def to_client(frame: bytes) -> bytes | None:
            log.append(f"<{name}")
            return frame

        return WireFault(to_client=to_client, to_broker=to_broker)

    answering = WireFault(to_broker=lambda f: (None, f))
    chained = g.chain([tag("a"), answering, tag("c")])
    onward, back = chained.to_broker(b"frame")
    assert onward is None and back == b"frame"
    assert log == ["a>", "<a"]  # c never saw it; the answer went back through a
    log.clear()
    g.chain([tag("a"), tag("b")]).to_client(b"f")
    assert log == ["<b", "<a"]


def test_combinations_are_the_same_for_a_seed_and_never_clash() -> None:
    first = g.combinations(60, 7)
    assert [c.name for c in first] == [c.name for c in g.combinations(60, 7)]
    assert [c.name for c in first] != [c.name for c in g.combinations(60, 8)]
    sizes = {len(c.atoms) for c in first}
    assert sizes == {1, 2, 3}
    for c in first:
        assert g.compatible(c.atoms)
        assert len({a.rule for a in c.atoms}) == len(c.atoms)
    assert g.combination("7:3").name == first[3].name


def test_clashes_name_the_shared_thing() -> None:
    a = g.ATOMS
    assert "send-response" in (a["send-msg-id-empty"].clashes(a["queue-offset-off-by-one"]) or "")
    assert a["delay-ignored"].clashes(a["commit-invisible"]) is None
    assert "wire/send-headers" in (a["header-keys-partial"].clashes(a["send-msg-id-empty"]) or "")
    assert a["header-keys-partial"].clashes(a["send-msg-id-empty"], same_rule=True) is None


def test_a_combination_model_carries_every_atom_decision() -> None:
    combo = g.Combination("t", (g.ATOMS["delay-ignored"], g.ATOMS["no-clamp"]))
    model = combo.model(BrokerConfig("1s 2s"))
    sem = model.semantics
    assert sem.delay_eligible(0, 1) is False  # delay-ignored
    assert sem.clamp_delay_level(9, 2) == 9  # no-clamp
    state = model.initial()
    state, _ = model.step(state, Send(Message("T", b"x", props(DELAY="1"))), 0)
    pulled = model.pull(state, "T", 0, 0)
    assert isinstance(pulled, PullResult) and pulled.records  # delay ignored: visible at once


def test_grading_on_each_side_of_each_criterion() -> None:
    combo = g.Combination("t", (g.ATOMS["send-msg-id-empty"], g.ATOMS["delay-ignored"]))
    right = g.grade(combo, ["wire/send-headers", "put/delay-eligibility"], 1)
    assert right.right
    missed = g.grade(combo, ["wire/send-headers"], 1)
    assert not missed.right and missed.missed == ("delay-ignored",)
    false = g.grade(combo, ["wire/send-headers", "put/delay-eligibility", "pull/found"], 1)
    assert not false.right and false.false_causes == ("pull/found",)
    # the answers-on-the-wire layer blocks more than a behaviour: it must come first
    late = g.grade(combo, ["put/delay-eligibility", "wire/send-headers"], 1)
    assert not late.right and not late.first_ok
    # a symptom rule the atom declares names it too
    assert g.grade(combo, ["wire/offset-msg-id", "put/delay-eligibility"], 1).right
    # nothing named at all
    assert not g.grade(combo, [], 0).right


def test_two_atoms_of_one_rule_need_two_causes() -> None:
    combo = g.NAMED["go-broker"]
    assert combo.required == (g.ATOMS["header-keys-partial"],)  # it blocks everything else, said why
    assert all(
        "blocked by header-keys-partial" in e for e in g.grade(combo, ["wire/send-headers"], 1).excused
    )
    translated = g.NAMED["go-broker-translated"]
    causes = [
        "wire/send-headers",
        "wire/request-response",
        "put/delay-eligibility",
        "sendback/through-schedule",
        "transaction/committed-message",
        "transaction/check-timeout",
    ]
    assert g.grade(translated, causes, 1).right
    assert not g.grade(translated, causes[1:], 1).right
    pair = g.Combination("p", (g.ATOMS["header-keys-upper-camel"], g.ATOMS["refused-send-unanswered"]), 0)
    assert pair.required == (g.ATOMS["header-keys-upper-camel"],)


def test_score_counts_each_way_of_being_wrong() -> None:
    combo = g.Combination("t", (g.ATOMS["delay-ignored"],))
    grades = [
        g.grade(combo, ["put/delay-eligibility"], 1),
        g.grade(combo, [], 0),
        g.crashed(combo, "boom"),
    ]
    sc = g.score(grades)
    assert sc["right"] == 1 and sc["combinations"] == 3 and sc["crashed"] == 1 and sc["missed_fault"] == 2


def test_the_command_line_refuses_a_bad_combination_in_one_line() -> None:
    out = CliRunner().invoke(app, ["faults", "--combo", "no-such-broker"])
    assert out.exit_code == 2 and "unknown combination" in out.output and "Traceback" not in out.output
    neg = CliRunner().invoke(app, ["faults", "--random", "-1"])
    assert neg.exit_code == 2


@functools.cache
def _rule_ids() -> frozenset[str]:
    from rmqspec.conformance.specdoc import load_spec

    return frozenset(r.id for r in load_spec().rules)


@pytest.mark.parametrize("name", sorted(g.ATOMS))
def test_every_atom_changes_something_and_has_a_rule_of_the_spec(name: str) -> None:
    atom = g.ATOMS[name]
    ids = _rule_ids()
    assert atom.rule in ids and all(s in ids for s in atom.symptoms)
    assert atom.semantics is not None or atom.configure is not None or atom.wire is not None
    if g.ALL in atom.blocks:
        assert atom.why_blocks, f"{name} blocks everything without saying why"

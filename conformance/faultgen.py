"""Faults generated at random, each combination knowing its own truth, and the grade of a diagnosis.

The zoo (``faults.py``) holds hand-written broken brokers, each with one thing wrong. A broker nobody here
wrote has several at once, in forms nobody planned for. This module builds such brokers from **atoms**:
one fault each, on the wire (a header key spelled otherwise, a field emptied in an answer, a request code
left unanswered, a refused send left unanswered, extra records in an answer, ...) or in behaviour (a
decision of the model changed: a mutant's ``Semantics``, or its broker settings read wrongly). A seeded
draw combines one, two or three atoms that do not touch the same thing (``combinations``); served over
TCP, the suite runs against the combination, and ``grade`` compares its diagnosis with the truth:

* every atom present is named as a root cause (its rule, or a symptom rule it declares), unless another
  atom of the combination blocks its area (declared with the reason: a broker that decodes no request
  header shows nothing of its schedule service);
* no root cause is named that no atom explains;
* the first root cause is an atom of the most blocking layer present (``LAYERS``).

``rmqspec faults --random N --seed S`` runs N combinations and prints the score; ``make bench`` records it.
Named combinations (``NAMED``) stand for brokers seen in the wild, e.g. ``go-broker``.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import attrs

from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.model import Model
from rmqspec.reference.semantics import Semantics, V5Semantics

from .faults import FAULTS, Answered, Fault, frame_header, is_response
from .mutants import MUTANTS
from .wireprobe import Faulty, WireFault, rewrite_body, rewrite_header

# How much an atom blocks, most first: a broker that cannot read requests shows nothing else; one that
# answers wrongly shows its behaviour only through what it stored; a behaviour fault blocks the least.
LAYERS: Final = {0: "request decoding", 1: "answers on the wire", 2: "behaviour"}
ALL: Final = "*"  # an atom that blocks every area

# The areas of the spec (a rule's prefix) a suite judges; an atom's area is its rule's.
AREAS: Final = (
    "put",
    "dispatch",
    "schedule",
    "sendback",
    "transaction",
    "pull",
    "batch",
    "config",
    "properties",
    "wire",
    "timer",
)


@attrs.frozen
class Atom:
    """One fault a generated broker may have."""

    name: str
    rule: str
    description: str
    layer: int  # a key of LAYERS
    symptoms: tuple[str, ...] = ()  # further rules that name it (where it shows first), as in the zoo
    semantics: type[Semantics] | None = None
    configure: Callable[[BrokerConfig], BrokerConfig] | None = None
    # A fresh wire fault for each run: a WireFault (shared by its connections) or a factory of one per
    # connection; given the combination's random source, for faults whose effect depends on an order.
    wire: Callable[[random.Random], Faulty] | None = None
    touches: frozenset[str] = (
        frozenset()
    )  # what it changes on the wire: atoms touching one thing never combine
    blocks: frozenset[str] = frozenset()  # areas whose behaviour it leaves unjudgeable (ALL: every one)
    why_blocks: str = ""

    @property
    def rules(self) -> tuple[str, ...]:
        return (self.rule, *self.symptoms)

    @property
    def area(self) -> str:
        return self.rule.split("/", 1)[0]

    def overrides(self) -> frozenset[str]:
        """The model decisions it changes (a semantic atom's overridden methods)."""
        if self.semantics is None:
            return frozenset()
        own: set[str] = set()
        for cls in self.semantics.__mro__:
            if cls in (Semantics, V5Semantics, object):
                break
            own |= {k for k, v in vars(cls).items() if callable(v) and not k.startswith("__")}
        return frozenset(own)

    def clashes(self, other: Atom, *, same_rule: bool = False) -> str | None:
        """Why the two cannot be one broker's faults (the same decision, the same frames, the same rule;
        ``same_rule``: two faults of one rule may go together, told apart by their symptoms)."""
        if self.name == other.name:
            return "the same atom"
        if self.rule == other.rule and not same_rule:
            return f"both break {self.rule}: a diagnosis could not tell them apart"
        if self.overrides() & other.overrides():
            return f"both change {sorted(self.overrides() & other.overrides())[0]}"
        if self.touches & other.touches:
            return f"both rewrite {sorted(self.touches & other.touches)[0]}"
        if self.configure is not None and other.configure is not None:
            return "both read the broker settings"
        return None


ATOMS: dict[str, Atom] = {}


def _add(a: Atom) -> None:
    if a.name in ATOMS:
        raise ValueError(f"two atoms named {a.name}")
    if a.layer not in LAYERS:
        raise ValueError(f"atom {a.name}: no layer {a.layer}")
    if a.semantics is None and a.configure is None and a.wire is None:
        raise ValueError(f"atom {a.name} changes nothing")
    ATOMS[a.name] = a


# --- frame helpers ------------------------------------------------------------------------------------


def _two_way(h: dict[str, Any]) -> bool:
    return not int(h.get("flag", 0)) & 3


def answer_frame(h: dict[str, Any], code: int, remark: str) -> bytes:
    """A response of ``code`` to the request ``h`` heads, with ``remark``, no extFields and no body."""
    header = {
        "code": code,
        "language": "GO",
        "version": h.get("version", 0),
        "opaque": int(h.get("opaque", 0)),
        "flag": 1,
        "remark": remark,
        "serializeTypeCurrentRPC": "JSON",
    }
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return struct.pack(">ii", 4 + len(raw), len(raw)) + raw


SEND_CODES: Final = frozenset({10, 310, 320})
# The request codes an independent broker of the 5.x remoting family typically implements: sends, pull,
# heartbeat and unregister, send-back, END_TRANSACTION, GET_MAX_OFFSET, VIEW and QUERY.
KNOWN_CODES: Final = frozenset({10, 310, 11, 34, 35, 36, 37, 30, 33, 12})


# --- wire atoms -----------------------------------------------------------------------------------------


def partial_upper_camel(rng: random.Random) -> Callable[[], WireFault]:
    """Header keys whose first letter is a-c are read only in UpperCamel (the others as RocketMQ names
    them), and the decoder walks the keys in its map's (random) order and stops at the first it does not
    know: what a client spells as RocketMQ does (``a``, ``bornTimestamp``, ``consumerGroup``) ends the
    decoding, and every key after it is lost.
    A send whose topic was lost is answered TOPIC_NOT_EXIST, as such a broker answers an empty topic."""
    seed = rng.randrange(2**32)

    def per_connection() -> WireFault:
        order = random.Random(seed)

        def to_broker(frame: bytes) -> tuple[bytes | None, bytes | None]:
            h = frame_header(frame)
            if h is None or is_response(h):
                return frame, None
            ext = h.get("extFields")
            if not isinstance(ext, dict) or not ext:
                return frame, None
            keys = list(ext)
            order.shuffle(keys)
            kept: dict[str, Any] = {}
            for k in keys:
                first = k[:1]
                if first in ("A", "B", "C"):  # read in UpperCamel: the model reads it by RocketMQ's name
                    kept[first.lower() + k[1:]] = ext[k]
                elif first.isupper() or first in ("a", "b", "c"):
                    break  # a key it does not know ends the decoding
                else:
                    kept[k] = ext[k]
            code = int(h.get("code", -1))
            if code in SEND_CODES and "b" not in kept and "topic" not in kept:
                return None, (
                    answer_frame(h, 17, "topic[] not exist, apply first please!") if _two_way(h) else None
                )

            def change(header: dict[str, Any]) -> None:
                header["extFields"] = kept

            return rewrite_header(frame, change), None

        return WireFault(to_broker=to_broker)

    return per_connection


def unknown_codes_unanswered(_: random.Random) -> WireFault:
    """A request whose code the broker does not implement is read and never answered."""

    def to_broker(frame: bytes) -> tuple[bytes | None, bytes | None]:
        h = frame_header(frame)
        if h is not None and not is_response(h) and int(h.get("code", -1)) not in KNOWN_CODES:
            return None, None
        return frame, None

    return WireFault(to_broker=to_broker)


def _rewrite_answers(
    codes: frozenset[int], change: Callable[[dict[str, Any], bytes], bytes | None]
) -> Callable[[], WireFault]:
    """Per connection: the answers to the two-way requests of ``codes`` pass through ``change`` (given the
    answer's header and frame; None: the answer never reaches the client)."""

    def per_connection() -> WireFault:
        kept = Answered(codes)

        def to_client(frame: bytes) -> bytes | None:
            h = frame_header(frame)
            return change(h, frame) if h is not None and kept.answers(h) else frame

        return WireFault(to_client=to_client, to_broker=kept.to_broker)

    return per_connection


def refused_send_unanswered(_: random.Random) -> Callable[[], WireFault]:
    """A send the broker refuses (any answer but SUCCESS) is never answered."""
    return _rewrite_answers(SEND_CODES, lambda h, frame: None if int(h.get("code", 0)) != 0 else frame)


def query_extra_records(_: random.Random) -> Callable[[], WireFault]:
    """QUERY_MESSAGE answers each record it found twice (an index walked past its own entry)."""

    def doubled(h: dict[str, Any], frame: bytes) -> bytes | None:
        if int(h.get("code", -1)) != 0:
            return frame
        return rewrite_body(frame, lambda _h, body: body + body)

    return _rewrite_answers(frozenset({12}), doubled)


def _zoo_wire(f: Fault) -> Callable[[random.Random], Faulty]:
    make = f.wire
    assert make is not None, f.name
    return lambda _rng: make()


# --- the atoms ------------------------------------------------------------------------------------------

_add(
    Atom(
        "header-keys-partial",
        "wire/send-headers",
        "header keys starting a-c are read only in UpperCamel; decoding stops at the first unknown key, in "
        "random map order (a send whose topic is lost: TOPIC_NOT_EXIST)",
        0,
        wire=lambda rng: partial_upper_camel(rng),
        touches=frozenset({"request-headers"}),
        blocks=frozenset({ALL}),
        why_blocks="no request is read whole: no message is stored, nothing behind a send can be judged",
    )
)
_add(
    Atom(
        "unknown-codes-unanswered",
        "wire/request-response",
        "a request of a code the broker does not implement is never answered",
        1,
        wire=unknown_codes_unanswered,
        touches=frozenset({"unknown-codes"}),
    )
)
_add(
    Atom(
        "refused-send-unanswered",
        "wire/request-response",
        "a send the broker refuses is never answered",
        1,
        symptoms=("put/send-result",),
        wire=lambda rng: refused_send_unanswered(rng),
        touches=frozenset({"send-response"}),
    )
)
_add(
    Atom(
        "query-extra-records",
        "put/commit-log-lookup",
        "QUERY_MESSAGE answers each record it found twice",
        2,
        wire=lambda rng: query_extra_records(rng),
        touches=frozenset({"query-response"}),
    )
)

# The zoo's single faults, as atoms (a hang is no atom: it leaves no verdict to grade).
_ZOO_WIRE: Final = {
    "header-keys-upper-camel": (0, frozenset({"request-headers"}), frozenset({ALL})),
    "send-msg-id-empty": (1, frozenset({"send-response"}), frozenset()),
    "end-tx-never-answered": (1, frozenset({"end-tx-response"}), frozenset()),
    "no-check-requests": (1, frozenset({"check-requests"}), frozenset()),
    "pull-always-error": (1, frozenset({"pull-response"}), frozenset({ALL})),
    "queue-offset-off-by-one": (1, frozenset({"send-response"}), frozenset()),
    "property-names-lower-case": (1, frozenset({"records"}), frozenset()),
    "pull-without-max-offset": (1, frozenset({"pull-response"}), frozenset()),
    "heartbeat-refused": (1, frozenset({"heartbeat-response"}), frozenset()),
}
_WHY: Final = {
    "header-keys-upper-camel": "no request header is read: no message is stored, nothing behind a send shows",
    "pull-always-error": "no pull answers: what a broker stored and delivered is never seen",
}
for _name, (_layer, _touches, _blocks) in _ZOO_WIRE.items():
    _f = FAULTS[_name]
    _add(
        Atom(
            _name,
            _f.rule,
            _f.description,
            _layer,
            symptoms=_f.symptoms,
            semantics=None if _f.mutant is None else MUTANTS[_f.mutant].semantics,
            wire=_zoo_wire(_f),
            touches=_touches,
            blocks=_blocks,
            why_blocks=_WHY.get(_name, ""),
        )
    )

# Behaviour faults: mutants of the model, one decision each, in every area of the spec.
_BEHAVIOUR: Final = (
    "delay-ignored",
    "retry-not-scheduled",
    "commit-invisible",
    "no-clamp",
    "queue-equals-level",
    "half-visible",
    "no-check",
    "check-count-stuck",
    "reconsume-not-incremented",
    "dlq-at-max-plus-one",
    "forbidden-topic-allowed",
    "delivered-copy-cleaned",
    "immunity-ignored",
    "found-next-begin-unmoved",
    "origin-id-overwritten",
    "queue-offset-frozen",
)
for _name in _BEHAVIOUR:
    _m = MUTANTS[_name]
    _add(
        Atom(
            _name,
            _m.rule,
            _m.description,
            2,
            symptoms=_m.symptoms,
            semantics=None if _m.configure is not None else _m.semantics,
            configure=_m.configure,
        )
    )


# --- combinations ---------------------------------------------------------------------------------------


@attrs.frozen
class Combination:
    """A broker with ``atoms`` wrong at once, drawn from ``seed`` (or named)."""

    name: str
    atoms: tuple[Atom, ...]
    seed: int = 0

    @property
    def truth(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.atoms)

    def blocked(self, atom: Atom) -> Atom | None:
        """Another atom of the combination that leaves ``atom``'s area unjudgeable, if any."""
        for other in self.atoms:
            reaches = ALL in other.blocks or atom.area in other.blocks
            above = other.layer < atom.layer or (other.layer == atom.layer and ALL in other.blocks)
            if other is not atom and reaches and above:
                return other
        return None

    @property
    def required(self) -> tuple[Atom, ...]:
        """The atoms a diagnosis must name: those no other atom blocks."""
        return tuple(a for a in self.atoms if self.blocked(a) is None)

    @property
    def first(self) -> tuple[Atom, ...]:
        """The atoms that may come first: the most blocking layer present among the required ones."""
        req = self.required
        top = min(a.layer for a in req)
        return tuple(a for a in req if a.layer == top)

    def model(self, config: BrokerConfig) -> Model:
        for a in self.atoms:
            if a.configure is not None:
                config = a.configure(config)
        base: type[Semantics] = V5Semantics if config.profile is Profile.V5 else Semantics
        parts = [a.semantics for a in self.atoms if a.semantics is not None]
        if not parts:
            return Model(config, base())
        sem = type(f"Combination_{self.name}", (*parts, base), {})
        return Model(config, sem())

    def wire_fault(self) -> Faulty | None:
        """The atoms' wire faults chained (the first atom nearest the client), fresh for one run."""
        rng = random.Random(f"{self.seed}:{self.name}")
        faults = [a.wire(rng) for a in self.atoms if a.wire is not None]
        if not faults:
            return None
        if all(isinstance(f, WireFault) for f in faults):
            return chain([f for f in faults if isinstance(f, WireFault)])
        return lambda: chain([f if isinstance(f, WireFault) else f() for f in faults])


def chain(faults: Sequence[WireFault]) -> WireFault:
    """One wire fault made of several: a frame to the broker passes each in turn (an answer one of them
    gives at once goes back through those before it), a frame to the client passes them in reverse."""

    def to_client_from(i: int, frame: bytes | None) -> bytes | None:
        for f in reversed(faults[:i]):
            if frame is None:
                return None
            frame = f.to_client(frame)
        return frame

    def to_broker(frame: bytes) -> tuple[bytes | None, bytes | None]:
        onward: bytes | None = frame
        for i, f in enumerate(faults):
            if onward is None:
                break
            onward, back = f.to_broker(onward)
            if back is not None:
                return onward, to_client_from(i, back)
        return onward, None

    def to_client(frame: bytes) -> bytes | None:
        return to_client_from(len(faults), frame)

    return WireFault(to_client=to_client, to_broker=to_broker)


def compatible(atoms: Iterable[Atom], *, same_rule: bool = False) -> bool:
    chosen = list(atoms)
    return all(
        a.clashes(b, same_rule=same_rule) is None for i, a in enumerate(chosen) for b in chosen[i + 1 :]
    )


def combinations(n: int, seed: int, *, pool: Sequence[str] | None = None) -> list[Combination]:
    """``n`` combinations of one, two or three compatible atoms, drawn from ``seed`` (the same every time)."""
    names = sorted(pool if pool is not None else ATOMS)
    rng = random.Random(seed)
    out: list[Combination] = []
    while len(out) < n:
        size = rng.choice((1, 2, 2, 3, 3))
        picked = [ATOMS[x] for x in rng.sample(names, size)]
        if not compatible(picked):
            continue
        out.append(
            Combination(f"s{seed}-{len(out)}:" + "+".join(a.name for a in picked), tuple(picked), seed)
        )
    return out


NAMED: dict[str, Combination] = {}


def _named(name: str, atoms: Sequence[str]) -> None:
    got = tuple(ATOMS[a] for a in atoms)
    if not compatible(got, same_rule=True):
        raise ValueError(f"named combination {name}: its atoms clash")
    NAMED[name] = Combination(name, got)


# An independent Go broker seen in the wild: six defects together, in the messier forms it had.
_named(
    "go-broker",
    (
        "header-keys-partial",
        "send-msg-id-empty",
        "delay-ignored",
        "retry-not-scheduled",
        "commit-invisible",
        "no-check-requests",
        "unknown-codes-unanswered",
    ),
)


# The same broker with its header keys translated by a proxy in front (as it was tried): the other six
# defects must each be a root cause of their own, the empty msgId (it blocks nothing stored) not hiding
# the behaviour behind it.
_named(
    "go-broker-translated",
    (
        "send-msg-id-empty",
        "delay-ignored",
        "retry-not-scheduled",
        "commit-invisible",
        "no-check-requests",
        "unknown-codes-unanswered",
    ),
)


def combination(spec: str) -> Combination:
    """``NAME`` (a named combination) or ``SEED:INDEX`` (the INDEX-th of ``combinations(INDEX + 1, SEED)``)."""
    if spec in NAMED:
        return NAMED[spec]
    seed, sep, index = spec.partition(":")
    if sep and seed.lstrip("-").isdigit() and index.isdigit():
        return combinations(int(index) + 1, int(seed))[int(index)]
    raise KeyError(f"unknown combination {spec!r}: give SEED:INDEX or one of {', '.join(sorted(NAMED))}")


# --- the grade ------------------------------------------------------------------------------------------


@attrs.frozen
class Grade:
    """How a diagnosis compares with a combination's truth."""

    combination: str
    truth: tuple[str, ...]
    named: tuple[str, ...]  # the required atoms the diagnosis named
    missed: tuple[str, ...]  # required atoms it did not name
    excused: tuple[str, ...]  # atoms blocked by another (not required), with the blocker
    false_causes: tuple[str, ...]  # root-cause rules no atom explains
    first_rule: str | None
    first_ok: bool
    exit_code: int | None
    error: str | None = None

    @property
    def right(self) -> bool:
        return self.error is None and not self.missed and not self.false_causes and self.first_ok

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "right": self.right}


def _match(atoms: Sequence[Atom], causes: Sequence[str]) -> dict[int, int]:
    """A largest matching of atoms to root causes (atom index -> cause index), each cause naming at most
    one atom and each atom named by at most one cause whose rule is one of the atom's."""
    owner: dict[int, int] = {}  # cause -> atom

    def place(i: int, seen: set[int]) -> bool:
        for j, rule in enumerate(causes):
            if rule in atoms[i].rules and j not in seen:
                seen.add(j)
                if j not in owner or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(atoms)):
        place(i, set())
    return {i: j for j, i in owner.items()}


def grade(combo: Combination, causes: Sequence[str], exit_code: int | None) -> Grade:
    """The grade of a run whose root causes name ``causes`` (their rules, first first). Two atoms of one
    rule need two causes of that rule (distinct symptoms are distinct causes)."""
    required = combo.required
    matched = _match(required, causes)
    named = tuple(a.name for i, a in enumerate(required) if i in matched)
    missed = tuple(a.name for i, a in enumerate(required) if i not in matched)
    excused = tuple(
        f"{a.name} (blocked by {b.name})" for a in combo.atoms if (b := combo.blocked(a)) is not None
    )
    explained = {r for a in combo.atoms for r in a.rules}
    false_causes = tuple(dict.fromkeys(r for r in causes if r not in explained))
    first_rule = causes[0] if causes else None
    first_ok = first_rule is not None and any(first_rule in a.rules for a in combo.first)
    return Grade(
        combo.name, combo.truth, named, missed, excused, false_causes, first_rule, first_ok, exit_code
    )


def crashed(combo: Combination, error: str) -> Grade:
    return Grade(
        combo.name, combo.truth, (), tuple(a.name for a in combo.required), (), (), None, False, None, error
    )


def score(grades: Sequence[Grade]) -> dict[str, float | int]:
    right = sum(g.right for g in grades)
    return {
        "combinations": len(grades),
        "right": right,
        "share": round(right / len(grades), 4) if grades else 0.0,
        "missed_fault": sum(bool(g.missed) for g in grades),
        "false_cause": sum(bool(g.false_causes) for g in grades),
        "wrong_first": sum(not g.first_ok for g in grades),
        "crashed": sum(g.error is not None for g in grades),
    }

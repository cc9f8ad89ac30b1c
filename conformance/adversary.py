"""The adversary: what a broken broker could do, applied to histories a correct one made.

Each ``Kind`` is one row: a name, the rules a history checker must name when it sees it (the rule the
perturbation breaks, then where it may show first, said in ``why``), and a pure function that changes
one place of an accepted history so that the result is a history no correct broker can make. Every
perturbation here is chosen to be a violation whatever the broker's nondeterminism (a field the broker
must copy unchanged, an offset a queue cannot have, a delivery outside its window by more than epsilon),
so a checker that accepts one has a hole. Restarts are left out: a history with a restart event is
perturbed only before the first one (the allowances a restart grants are bounded in the checker, and
tested at their bounds there).

``perturb(events, kind, rng)`` gives the perturbed history and where it changed it, or None when the
kind has no place in that history. ``KINDS`` is the table; ``applicable`` says which kinds a history
offers. Pure: nothing here runs a checker.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from .codec import RESTART
from .history import Event


@attrs.frozen
class Perturbation:
    kind: str
    index: int  # the event changed (or the first event removed or added)
    detail: str
    target: str = ""  # what it changed: a record's class (``record_class``), "pull", "send" or "check"

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


Change = Callable[[list[Event], random.Random, int], Perturbation | None]


@attrs.frozen
class Kind:
    name: str
    rules: tuple[str, ...]  # the rule broken first, then the rules where it may show first
    what: str
    why: str  # why it is a violation whatever the broker's nondeterminism (and why the other rules)
    change: Change


# --- places ---------------------------------------------------------------------------------------------


def _horizon(events: Sequence[Event]) -> int:
    """Events before the first restart: the part of a history perturbed."""
    for i, e in enumerate(events):
        if e.f == RESTART:
            return i
    return len(events)


def _found_pulls(events: Sequence[Event], horizon: int) -> list[int]:
    return [
        i
        for i, e in enumerate(events[:horizon])
        if e.f == "pull" and e.type == "ok" and e.value.get("code") == 0 and e.value.get("records")
    ]


def _own(events: Sequence[Event]) -> tuple[frozenset[str], frozenset[str]]:
    """The UNIQ_KEYs this history's sends carried and the topics only they write to (its own topics, not
    a system topic every producer of a shared broker appends to): what it alone can judge."""
    uniq: set[str] = set()
    topics: set[str] = set()
    for e in events:
        if e.type == "invoke" and e.f in ("send", "send_half"):
            key = e.value.get("properties", {}).get("UNIQ_KEY")
            if key is not None:
                uniq.add(str(key))
            topic = str(e.value.get("topic", ""))
            if not topic.startswith(SHARED_PREFIXES):
                topics.add(topic)
    return frozenset(uniq), frozenset(topics)


# Topics every producer of a shared broker may write to (system topics, retry and DLQ topics).
SHARED_PREFIXES: Final = ("%", "RMQ_SYS_", "SCHEDULE_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "TBW102")


def _pull_topic(events: Sequence[Event], ok: int) -> str | None:
    inv = _invoke_of(events, ok)
    return None if inv is None else str(inv.value.get("topic"))


def _own_pulls(events: Sequence[Event], horizon: int) -> list[int]:
    """FOUND answers of a topic only this history writes to."""
    _, topics = _own(events)
    return [i for i in _found_pulls(events, horizon) if _pull_topic(events, i) in topics]


def _records(
    events: Sequence[Event], horizon: int, pred: Callable[[dict[str, Any]], bool]
) -> list[tuple[int, int]]:
    """Records of this history's own messages (by UNIQ_KEY) that ``pred`` takes."""
    uniq, _ = _own(events)
    return [
        (i, j)
        for i in _found_pulls(events, horizon)
        for j, r in enumerate(events[i].value["records"])
        if str(r.get("properties", {}).get("UNIQ_KEY")) in uniq and pred(r)
    ]


def record_class(r: dict[str, Any]) -> str:
    """What a record is: a discard copy, a retry or DLQ copy, a delivered delayed copy, a committed
    message, a half message, or a plain one."""
    topic = str(r.get("topic", ""))
    props = r.get("properties", {})
    if topic == "TRANS_CHECK_MAX_TIME_TOPIC":
        return "discard-copy"
    if topic.startswith(("%RETRY%", "%DLQ%")):
        return "retry-copy"
    if "DELAY" in props and "REAL_TOPIC" in props:
        return "delayed-copy"
    if props.get("TRAN_MSG") == "true":
        return "committed" if int(r.get("sys_flag", 0)) & 0xC == 8 else "half"
    return "plain"


def _edit(events: list[Event], i: int, value: dict[str, Any], *, time: int | None = None) -> None:
    e = events[i]
    events[i] = attrs.evolve(e, value=value, time=e.time if time is None else time)


def _first_seen(events: Sequence[Event], horizon: int) -> dict[tuple[str, int, int], int]:
    """The first pull event that showed each (topic, queue, offset)."""
    seen: dict[tuple[str, int, int], int] = {}
    for i in _found_pulls(events, horizon):
        for r in events[i].value["records"]:
            seen.setdefault((r["topic"], r["queue_id"], r["queue_offset"]), i)
    return seen


def _pick(rng: random.Random, places: Sequence[Any]) -> Any:
    return places[rng.randrange(len(places))] if places else None


def _plain(r: dict[str, Any]) -> bool:
    """A record whose body, flag and user properties the broker must keep as sent."""
    return isinstance(r.get("body"), str)


# --- the kinds ------------------------------------------------------------------------------------------


def _one_record(
    kind: str,
    detail: str,
    pred: Callable[[dict[str, Any]], bool],
    change: Callable[[dict[str, Any]], None],
) -> Change:
    """A kind that changes one field of one of the history's own delivered records in place."""

    def perturb_one(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
        place = _pick(rng, _records(events, horizon, pred))
        if place is None:
            return None
        i, j = place
        cls = record_class(events[i].value["records"][j])
        value = copy.deepcopy(events[i].value)
        change(value["records"][j])
        _edit(events, i, value)
        return Perturbation(kind, i, detail.format(j=j), cls)

    return perturb_one


def _add_byte(r: dict[str, Any]) -> None:
    r["body"] += "~"


def _add_property(r: dict[str, Any]) -> None:
    r["properties"]["RMQSPEC_ADVERSARY"] = "1"


def _flip_flag(r: dict[str, Any]) -> None:
    r["flag"] = int(r["flag"]) ^ 0x40


def _raise_reconsume(r: dict[str, Any]) -> None:
    r["reconsume_times"] = int(r["reconsume_times"]) + 3


_corrupt_body = _one_record("corrupt-body", "record {j}'s body gained a byte", _plain, _add_byte)
_extra_property = _one_record(
    "extra-property", "record {j} carries a property nobody set", lambda r: True, _add_property
)
_corrupt_flag = _one_record("corrupt-flag", "record {j}'s flag changed", lambda r: True, _flip_flag)
_reconsume_times = _one_record(
    "reconsume-times",
    "record {j}'s reconsumeTimes three too high",
    lambda r: str(r.get("topic", "")).startswith(("%RETRY%", "%DLQ%")),
    _raise_reconsume,
)


def _drop_record(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    """A record taken out of a FOUND answer whose next offset still moves past it: the consumer never sees
    a message the queue holds (one that no other pull shows)."""
    seen: dict[tuple[str, int, int], int] = {}
    for i in _found_pulls(events, horizon):
        for r in events[i].value["records"]:
            key = (r["topic"], r["queue_id"], r["queue_offset"])
            seen[key] = seen.get(key, 0) + 1
    places = [
        (i, j)
        for i in _own_pulls(events, horizon)
        if len(events[i].value["records"]) > 1
        for j, r in enumerate(events[i].value["records"])
        if seen[(r["topic"], r["queue_id"], r["queue_offset"])] == 1
    ]
    place = _pick(rng, places)
    if place is None:
        return None
    i, j = place
    cls = record_class(events[i].value["records"][j])
    value = copy.deepcopy(events[i].value)
    del value["records"][j]
    _edit(events, i, value)
    return Perturbation("drop-record", i, f"record {j} removed from a FOUND answer", cls)


def _duplicate_record(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    place = _pick(rng, _records(events, horizon, lambda r: True))
    if place is None:
        return None
    i, j = place
    cls = record_class(events[i].value["records"][j])
    value = copy.deepcopy(events[i].value)
    value["records"].insert(j + 1, copy.deepcopy(value["records"][j]))
    _edit(events, i, value)
    return Perturbation("duplicate-record", i, f"record {j} answered twice in one pull", cls)


def _swap_records(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    places = [
        (i, j)
        for i in _own_pulls(events, horizon)
        for j in range(len(events[i].value["records"]) - 1)
        if events[i].value["records"][j]["queue_offset"] != events[i].value["records"][j + 1]["queue_offset"]
    ]
    place = _pick(rng, places)
    if place is None:
        return None
    i, j = place
    value = copy.deepcopy(events[i].value)
    rs = value["records"]
    rs[j], rs[j + 1] = rs[j + 1], rs[j]
    _edit(events, i, value)
    return Perturbation("swap-records", i, f"records {j} and {j + 1} answered out of queue order", "pull")


def _shift_queue_offset(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    """A record read at another queue offset than the one it sits at (one past the queue's end)."""
    place = _pick(rng, _records(events, horizon, lambda r: True))
    if place is None:
        return None
    i, j = place
    cls = record_class(events[i].value["records"][j])
    value = copy.deepcopy(events[i].value)
    top = int(value["fields"].get("max_offset", 0))
    value["records"][j]["queue_offset"] = max(top, int(value["records"][j]["queue_offset"])) + 7
    _edit(events, i, value)
    return Perturbation("shift-queue-offset", i, f"record {j} read at an offset past the queue's end", cls)


def _pull_next_offset(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    place = _pick(rng, _own_pulls(events, horizon))
    if place is None:
        return None
    i = place
    value = copy.deepcopy(events[i].value)
    value["fields"]["next_begin_offset"] = int(value["fields"]["next_begin_offset"]) + 1
    _edit(events, i, value)
    return Perturbation(
        "pull-next-offset", i, "a FOUND answer's nextBeginOffset one past what it read", "pull"
    )


def _pull_max_offset(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    place = _pick(rng, _own_pulls(events, horizon))
    if place is None:
        return None
    i = place
    value = copy.deepcopy(events[i].value)
    value["fields"]["max_offset"] = int(value["fields"]["max_offset"]) + 5
    _edit(events, i, value)
    return Perturbation("pull-max-offset", i, "a pull answer's maxOffset past the queue's", "pull")


def _send_code(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    """A send the broker stored answered with a failure (the message is then seen all the same)."""
    places = [
        i
        for i, e in enumerate(events[:horizon])
        if e.f == "send" and e.type == "ok" and e.value.get("code") == 0
    ]
    i = _pick(rng, places)
    if i is None:
        return None
    value = copy.deepcopy(events[i].value)
    value["code"] = 14
    value["remark"] = "service not available now"
    value["fields"] = {}
    _edit(events, i, value)
    return Perturbation("send-refused", i, "a send answered SERVICE_NOT_AVAILABLE", "send")


def _send_queue_offset(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    """A send result naming a queue offset the message was not stored at (the next one), in a topic only
    the client writes to (no delayed or checked message is delivered into it)."""
    written_by_services = {
        r["topic"]
        for i in _found_pulls(events, horizon)
        for r in events[i].value["records"]
        if "REAL_TOPIC" in r.get("properties", {})
    }
    places = [
        i
        for i, e in enumerate(events[:horizon])
        if e.f == "send"
        and e.type == "ok"
        and e.value.get("code") == 0
        and "queue_offset" in e.value.get("fields", {})
        and _send_topic(events, i) not in written_by_services
        and not str(_send_topic(events, i)).startswith("%")
    ]
    i = _pick(rng, places)
    if i is None:
        return None
    value = copy.deepcopy(events[i].value)
    value["fields"]["queue_offset"] = int(value["fields"]["queue_offset"]) + 1
    _edit(events, i, value)
    return Perturbation(
        "send-queue-offset", i, "a send result's queueOffset one past where it was stored", "send"
    )


def _send_topic(events: Sequence[Event], ok: int) -> str | None:
    proc = events[ok].process
    for k in range(ok - 1, -1, -1):
        e = events[k]
        if e.process == proc and e.type == "invoke":
            return str(e.value.get("topic")) if e.f == "send" else None
    return None


def _early_store(events: list[Event], rng: random.Random, horizon: int, eps: int) -> Perturbation | None:
    """A delivered delayed copy whose store time is before its message was even sent, by more than
    epsilon: delivered early whatever its level."""
    sent: dict[str, int] = {}
    for e in events[:horizon]:
        if e.f == "send" and e.type == "invoke" and "DELAY" in e.value.get("properties", {}):
            sent.setdefault(str(e.value["properties"].get("UNIQ_KEY")), e.time)
    places = _records(
        events,
        horizon,
        lambda r: (
            "REAL_TOPIC" in r.get("properties", {})
            and r["properties"].get("UNIQ_KEY") in sent
            and r["topic"] == r["properties"]["REAL_TOPIC"]
            and int(r.get("reconsume_times", 0)) == 0
        ),
    )
    place = _pick(rng, places)
    if place is None:
        return None
    i, j = place
    cls = record_class(events[i].value["records"][j])
    value = copy.deepcopy(events[i].value)
    rec = value["records"][j]
    rec["store_timestamp"] = sent[rec["properties"]["UNIQ_KEY"]] - eps - 1
    _edit(events, i, value)
    return Perturbation("early-delivery", i, f"record {j} stored {eps + 1} ms before its send", cls)


def _drop_check(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    """A check request the broker owed never came (and so nothing answered it)."""
    places = [i for i, e in enumerate(events[:horizon]) if e.f == "check" and e.process == -1]
    i = _pick(rng, places)
    if i is None:
        return None
    check = events[i]
    uniq = check.value.get("message", {}).get("properties", {}).get("UNIQ_KEY")
    # the producer's answer to it: END_TRANSACTION from the check, naming the same message
    drop = {i}
    for k in range(i + 1, len(events)):
        e = events[k]
        if (
            e.f == "end_tx"
            and e.type == "invoke"
            and e.value.get("from_check")
            and e.value.get("transaction_id") == uniq
            and e.value.get("commit_log_offset") == check.value.get("commit_log_offset")
        ):
            drop.add(k)
            for m in range(k + 1, len(events)):
                if events[m].process == e.process and events[m].type != "invoke" and events[m].f == "end_tx":
                    drop.add(m)
                    break
            break
    kept = [e for k, e in enumerate(events) if k not in drop]
    events[:] = [attrs.evolve(e, index=n) for n, e in enumerate(kept)]
    return Perturbation("drop-check", i, f"the check request at event {i} (and its answer) removed", "check")


def _extra_check(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    """The same check request sent a second time at once, in the same round (with a count one higher)."""
    places = [i for i, e in enumerate(events[:horizon]) if e.f == "check" and e.process == -1]
    i = _pick(rng, places)
    if i is None:
        return None
    extra = copy.deepcopy(events[i].value)
    props = extra["message"]["properties"]
    props["TRANSACTION_CHECK_TIMES"] = str(int(props.get("TRANSACTION_CHECK_TIMES", "0")) + 1)
    events.insert(i + 1, attrs.evolve(events[i], value=extra))
    events[:] = [attrs.evolve(e, index=n) for n, e in enumerate(events)]
    return Perturbation("extra-check", i + 1, "a check request repeated in the same round", "check")


def _check_times(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    places = [i for i, e in enumerate(events[:horizon]) if e.f == "check" and e.process == -1]
    i = _pick(rng, places)
    if i is None:
        return None
    value = copy.deepcopy(events[i].value)
    props = value["message"]["properties"]
    props["TRANSACTION_CHECK_TIMES"] = str(int(props.get("TRANSACTION_CHECK_TIMES", "0")) + 5)
    _edit(events, i, value)
    return Perturbation("check-times", i, "a check request's TRANSACTION_CHECK_TIMES five too high", "check")


def _half_visible(events: list[Event], rng: random.Random, horizon: int) -> Perturbation | None:
    """A half message shown in its real topic right after it was stored, before anything ended it."""
    halves = [
        (i, k)
        for i, e in enumerate(events[:horizon])
        if e.f == "send_half" and e.type == "invoke"
        for k in range(i + 1, horizon)
        if events[k].process == e.process
        and events[k].type == "ok"
        and events[k].f == "send_half"
        and events[k].value.get("code") == 0
    ]
    halves = [
        (i, k) for i, k in halves if _later_found_pull(events, k, horizon, str(events[i].value["topic"]))
    ]
    place = _pick(rng, halves)
    if place is None:
        return None
    i, k = place
    pull = _later_found_pull(events, k, horizon, str(events[i].value["topic"]))
    assert pull is not None
    half = events[i].value
    value = copy.deepcopy(events[pull].value)
    template = copy.deepcopy(value["records"][-1])
    template.update(
        {
            "body": half["body"] if isinstance(half.get("body"), str) else "h",
            "properties": dict(half["properties"]),
            "sys_flag": 4,
            "queue_offset": int(value["fields"]["next_begin_offset"]),
        }
    )
    template.pop("body_base64", None)
    value["records"].append(template)
    value["fields"]["next_begin_offset"] = int(value["fields"]["next_begin_offset"]) + 1
    value["fields"]["max_offset"] = max(int(value["fields"]["max_offset"]), template["queue_offset"] + 1)
    _edit(events, pull, value)
    return Perturbation("half-visible", pull, "a half message answered in its real topic", "pull")


def _later_found_pull(events: Sequence[Event], after: int, horizon: int, topic: str) -> int | None:
    for i in _own_pulls(events, horizon):
        if i > after:
            inv = _invoke_of(events, i)
            if inv is not None and inv.value.get("topic") == topic:
                return i
    return None


def _invoke_of(events: Sequence[Event], ok: int) -> Event | None:
    proc = events[ok].process
    for k in range(ok - 1, -1, -1):
        if events[k].process == proc and events[k].type == "invoke":
            return events[k]
    return None


def _with_eps(f: Callable[[list[Event], random.Random, int, int], Perturbation | None]) -> Change:
    """Kinds that need epsilon read it from the history's own settings at perturb time."""
    return lambda events, rng, horizon: f(events, rng, horizon, EPSILON_FOR_KINDS)


# Epsilon the early-delivery kind moves beyond (the largest any profile in the repo uses: the served and
# real-broker profiles allow 1000 ms; logical histories 100 ms).
EPSILON_FOR_KINDS: Final = 5000

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "corrupt-body",
            ("put/send-result", "transaction/committed-message", "sendback/through-schedule"),
            "one byte added to a delivered record's body",
            "a broker stores and delivers the body as sent (CommitLog appends the bytes it was given), and "
            "every copy it makes keeps it: a committed message's (transaction/committed-message), a retry "
            "copy's (sendback/through-schedule: put like any message)",
            _corrupt_body,
        ),
        Kind(
            "extra-property",
            ("put/stored-properties",),
            "a property nobody set on a delivered record",
            "the stored properties are the client's plus the broker's own, named by put/stored-properties",
            _extra_property,
        ),
        Kind(
            "corrupt-flag",
            ("put/send-result", "transaction/committed-message", "sendback/through-schedule"),
            "a delivered record's flag changed",
            "the flag is stored as sent, and every copy keeps it (the rule that makes the copy is named)",
            _corrupt_flag,
        ),
        Kind(
            "drop-record",
            ("pull/found", "put/send-result", "dispatch/in-order"),
            "a record left out of a FOUND answer that moves past it",
            "a FOUND answer holds every entry from the offset read to nextBeginOffset (pull/found); a "
            "message no pull ever shows is lost (put/send-result); a gap between the offsets of one "
            "answer is a queue whose entries are not consecutive (dispatch/in-order)",
            _drop_record,
        ),
        Kind(
            "duplicate-record",
            ("pull/found", "put/send-result", "dispatch/in-order"),
            "one record answered twice in one pull",
            "a queue offset holds one entry; an answer lists each entry once, in order",
            _duplicate_record,
        ),
        Kind(
            "swap-records",
            ("pull/found", "dispatch/in-order", "put/queue-offset", "schedule/fifo-per-level"),
            "two records of a pull answered out of queue order",
            "an answer lists entries in queue-offset order; read at the other's offset, each record is "
            "also at the wrong offset (put/queue-offset) or its level's order broken",
            _swap_records,
        ),
        Kind(
            "shift-queue-offset",
            ("pull/found", "put/queue-offset", "dispatch/in-order"),
            "a record read at an offset past its queue's end",
            "no entry lies past the queue's max offset",
            _shift_queue_offset,
        ),
        Kind(
            "pull-next-offset",
            ("pull/found", "pull/status-codes"),
            "nextBeginOffset one past the entries a FOUND answer read",
            "nextBeginOffset is the offset after the last entry the answer holds (or scanned)",
            _pull_next_offset,
        ),
        Kind(
            "pull-max-offset",
            ("pull/status-codes", "pull/found", "dispatch/max-offset"),
            "a pull answer's maxOffset past the queue's",
            "maxOffset is the queue's max offset at the answer",
            _pull_max_offset,
        ),
        Kind(
            "send-refused",
            ("put/send-result",),
            "a send the model stores answered SERVICE_NOT_AVAILABLE",
            "a writable broker with room stores the message and answers SUCCESS",
            _send_code,
        ),
        Kind(
            "send-queue-offset",
            ("put/send-result", "put/queue-offset"),
            "a send result naming the queue offset after the message's",
            "the send result names the offset the message's entry got, in a queue only the client writes",
            _send_queue_offset,
        ),
        Kind(
            "early-delivery",
            ("schedule/due-time", "put/delay-eligibility"),
            "a delayed copy stored before its message was sent",
            "a delayed message is delivered no earlier than its store time plus its level's delay",
            _with_eps(_early_store),
        ),
        Kind(
            "drop-check",
            ("transaction/check-timeout", "transaction/check-times", "transaction/check-discard"),
            "a check request the broker owed never came",
            "a half message unresolved past transactionTimeOut is checked at the next run; without that "
            "check, the later checks' counts (check-times) and the discard (check-discard) come early",
            _drop_check,
        ),
        Kind(
            "extra-check",
            ("transaction/check-timeout", "transaction/check-times", "transaction/check-interval"),
            "a check request repeated in the same round",
            "one run checks each half record once",
            _extra_check,
        ),
        Kind(
            "check-times",
            ("transaction/check-times",),
            "a check request's TRANSACTION_CHECK_TIMES five too high",
            "each check raises the count by one",
            _check_times,
        ),
        Kind(
            "reconsume-times",
            ("sendback/reconsume-times", "sendback/dlq-route"),
            "a retry or DLQ copy's reconsumeTimes three too high",
            "the copy's reconsumeTimes is the consumer's count plus one",
            _reconsume_times,
        ),
        Kind(
            "half-visible",
            ("transaction/half-message", "pull/found", "put/send-result"),
            "a half message answered in its real topic",
            "a half message is stored in RMQ_SYS_TRANS_HALF_TOPIC until a commit",
            _half_visible,
        ),
    )
}


def applicable(events: Sequence[Event], rng_seed: int = 0) -> list[str]:
    """The kinds that find a place in ``events``."""
    return [k for k in KINDS if perturb(events, k, random.Random(rng_seed)) is not None]


def perturb(
    events: Sequence[Event], kind: str, rng: random.Random
) -> tuple[list[Event], Perturbation] | None:
    """``events`` with one perturbation of ``kind`` applied (before the first restart), and where."""
    out = list(events)
    done = KINDS[kind].change(out, rng, _horizon(events))
    return None if done is None else (out, done)

"""Histories recorded from real Apache RocketMQ brokers (4.9.7 and 5.5.0, started by `rmqspec conform
--target apache:V`, scenario histories saved with --save-dir): the checker must accept each as the broker
produced it, on a shared broker, with the settings in its header; and it must reject the same history
changed the way a broken broker would show it.

Each one once failed the checker although the broker was right, and the checker was fixed from the
source: a run that discards its own copy (transaction/check-discard), 5.x runs that spin on other
clients' op messages (transaction/check-interval), timer deliveries (timer/due-time).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmqspec.conformance.checker import Verdict, check_history
from rmqspec.conformance.history import Event, load
from rmqspec.reference.config import Profile, config_from_broker_conf

HERE = Path(__file__).parent / "fixtures" / "real"
REAL = sorted(HERE.glob("*.jsonl"))


def judge(path: Path, change: Callable[[list[Event]], list[Event]] | None = None) -> Verdict:
    meta, events = load(path)
    broker: dict[str, Any] = dict(meta["broker"])
    config = config_from_broker_conf(broker, Profile(broker.pop("profile")))
    if change is not None:
        events = change(copy.deepcopy(events))
    return check_history(events, config, epsilon_ms=meta["epsilon_ms"], shared=True)


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_a_real_brokers_history_passes(path: Path) -> None:
    v = judge(path)
    assert v.status == "pass", [a.to_json() for a in v.anomalies]
    assert v.checked_total > 0


def _causes(v: Verdict) -> list[tuple[str, str]]:
    return [(r.name, r.rule) for r in v.root_causes]


def test_a_check_before_the_message_is_due_is_early_on_a_shared_5x_broker() -> None:
    path = HERE / "apache-5.5.0--transaction_check-resolved--resolved-messages-are-not-checked.jsonl"

    def early(events: list[Event]) -> list[Event]:
        (check,) = [e for e in events if e.f == "check"]
        sent = next(e for e in events if e.f == "send_half" and e.type == "ok")
        moved = Event(check.index, check.process, check.type, check.f, check.value, sent.time + 1000)
        return sorted([e for e in events if e is not check] + [moved], key=lambda e: (e.time, e.index))

    assert _causes(judge(path, early))[0] == ("early-check", "transaction/check-timeout")


def test_a_round_that_never_came_is_found_on_a_shared_5x_broker() -> None:
    path = (
        HERE
        / "apache-5.5.0--transaction_check-resolved--ending-the-original-after-a-check-does-not-stop-the-checks.jsonl"
    )

    def drop_second(events: list[Event]) -> list[Event]:
        second = [e for e in events if e.f == "check"][1]
        return [e for e in events if e is not second]

    # (The last check cannot be dropped to the same effect: the history ends before a run after the last
    # known one must have come, so the checker cannot say it never came.)
    causes = _causes(judge(path, drop_second))
    assert causes and causes[0][1] in {"transaction/check-timeout", "transaction/check-times"}, causes


def test_a_timer_copy_stored_before_its_slot_is_early() -> None:
    path = HERE / "apache-5.5.0--timer_due-time--delivered-when-its-slot-has-passed.jsonl"

    def early(events: list[Event]) -> list[Event]:
        for e in events:
            for r in e.value.get("records", []) if isinstance(e.value, dict) and e.type == "ok" else []:
                if r["topic"] == "TimerDueT":
                    r["store_timestamp"] -= 1500
        return events

    assert _causes(judge(path, early))[0] == ("early-delivery", "timer/due-time")


def test_a_discard_before_the_last_check_is_early_on_4_9() -> None:
    """4.9.7 discarded the copy in the run that wrote it (allowed); with one check more allowed, that
    copy must be checked again first."""
    path = HERE / "apache-4.9.7--transaction_check-discard--discarded-after-the-15th-check.jsonl"
    meta, events = load(path)
    broker: dict[str, Any] = dict(meta["broker"], transactionCheckMax=4)
    config = config_from_broker_conf(broker, Profile(broker.pop("profile")))
    v = check_history(events, config, epsilon_ms=meta["epsilon_ms"], shared=True)
    assert ("early-discard", "transaction/check-discard") in _causes(v)


def test_a_check_long_after_the_message_was_ended_is_after_its_resolution_on_a_shared_5x_broker() -> None:
    """A busy 5.x run may check a message whose op it has not read yet (an op written within the run's
    reach); `c` was rolled back 8 s before this check, so the run had its op: a check after resolution."""
    path = HERE / "apache-5.5.0--transaction_check-resolved--resolved-messages-are-not-checked.jsonl"

    def check_c(events: list[Event]) -> list[Event]:
        (check,) = [e for e in events if e.f == "check"]
        sent_c = [e for e in events if e.f == "send_half" and e.type == "invoke"][2]
        value = copy.deepcopy(check.value)
        value["message"]["body"] = sent_c.value["body"]
        value["message"]["properties"]["UNIQ_KEY"] = sent_c.value["properties"]["UNIQ_KEY"]
        extra = Event(len(events), check.process, "ok", "check", value, check.time + 1)
        return [*events, extra]

    assert _causes(judge(path, check_c))[0] == ("check-after-resolution", "transaction/check-resolved")

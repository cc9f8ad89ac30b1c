"""Every allowance the checker makes for a restart, at its bound: just inside passes, just outside fails.

The allowances (docs/checker.md, "Restarts"): a scheduled copy delivered again (schedule/restart-redelivery:
which copies, when, how often, what it holds, how long the queue may grow), the window of a copy due while
the broker was stopping or down (schedule/restart-redelivery), and the checks an orderly stop's runs may
have made the broker discard (transaction/check-restart). Issue 23 found each accepting broken brokers
without a bound; the histories here are the reference's own, changed at the edge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rmqspec.adapters.inprocess import EPOCH, InProcessTarget
from rmqspec.conformance.checker import ALLOWANCES, allowance_table, check_history
from rmqspec.conformance.history import Event, RecordingTarget
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import GetMaxOffset, Heartbeat, Model, Pull, Send
from rmqspec.reference.put import Message
from rmqspec.reference.records import props

CFG = BrokerConfig("1s 2s 3s")
EPS = 100
FLUSH = 10_000  # flushDelayOffsetInterval
FIRST_DELAY = 1000  # the schedule service's first run after it starts


def causes(events: list[Event], cfg: BrokerConfig = CFG) -> list[tuple[str, str]]:
    v = check_history(events, cfg, epsilon_ms=EPS, check_phase_ms=0)
    assert v.consumed == v.total
    return [(r.name, r.rule) for r in v.root_causes]


def target(cfg: BrokerConfig = CFG) -> RecordingTarget:
    return RecordingTarget(InProcessTarget(Model(cfg)))


def restarted(t: RecordingTarget, at: int, done: int, graceful: bool | None = None) -> None:
    """The broker restarted at ``at`` (a crash unless ``graceful``), back at ``done``."""
    t.advance_to(EPOCH + at)
    t.restart()
    inv, ok = t.events[-2], t.events[-1]
    if graceful is not None:
        inv.value["graceful"] = ok.value["graceful"] = graceful
    t.events[-1] = Event(ok.index, ok.process, ok.type, ok.f, ok.value, EPOCH + done)
    t.advance_to(EPOCH + done)


def again(first: dict[str, Any], n: int, stored_at: int, **changes: Any) -> dict[str, Any]:
    """The ``n``-th copy of ``first`` delivered again: a new record at the next offset."""
    out: dict[str, Any] = json.loads(json.dumps(first))
    out.update(
        queue_offset=first["queue_offset"] + n,
        commit_log_offset=first["commit_log_offset"] + 1000 * n,
        store_timestamp=EPOCH + stored_at,
        **changes,
    )
    return out


def redelivered(restart_at: int, stored_at: list[int], down_ms: int = 500) -> list[Event]:
    """D1 (level 1) sent at 0, delivered at 1000 and pulled; a crash at ``restart_at``, back ``down_ms``
    later; a pull after that shows D1 delivered again at each of ``stored_at``."""
    t = target()
    t.execute(Send(Message("T", b"d", props(UNIQ_KEY="D1", DELAY="1"))))
    t.advance_to(EPOCH + 1500)
    t.execute(Pull("T", 0, 0))
    first = t.events[-1].value["records"][0]
    restarted(t, restart_at, restart_at + down_ms)
    t.advance_to(EPOCH + max([restart_at + down_ms + 3000, *stored_at]) + 1)
    t.execute(Pull("T", 0, 1))
    copies = [again(first, n + 1, at) for n, at in enumerate(stored_at)]
    n = len(copies)
    if n:
        t.events[-1].value.update(
            code=0, records=copies, fields={"next_begin_offset": 1 + n, "min_offset": 0, "max_offset": 1 + n}
        )
    return t.events


DUPLICATE = [("duplicate-delivery", "schedule/restart-redelivery")]


# --- schedule/restart-redelivery: which copies -----------------------------------------------------------


def test_a_copy_first_delivered_one_flush_interval_before_the_restart_may_come_again() -> None:
    """D1 first delivered at 1000: a crash up to flushDelayOffsetInterval + epsilon later may repeat it."""
    edge = 1000 + FLUSH + EPS
    assert causes(redelivered(edge, [edge + 1000])) == []
    assert causes(redelivered(edge + 1, [edge + 1001])) == DUPLICATE


# --- schedule/restart-redelivery: when ------------------------------------------------------------------


def test_a_copy_delivered_again_comes_by_the_first_run_after_the_broker_is_back() -> None:
    """Crash at 11 000, back at 11 500: the copy comes after the crash, by 11 500 + FIRST_DELAY_TIME + eps."""
    last = 11_500 + FIRST_DELAY + EPS
    assert causes(redelivered(11_000, [last])) == []
    assert causes(redelivered(11_000, [last + 1])) == DUPLICATE
    assert causes(redelivered(11_000, [11_001])) == []
    # not after the restart began: no restart explains it
    assert causes(redelivered(11_000, [11_000])) == [("duplicate-delivery", "schedule/due-time")]


# --- schedule/restart-redelivery: how often ---------------------------------------------------------------


def test_one_restart_repeats_a_delivery_once() -> None:
    assert causes(redelivered(11_000, [12_000])) == []
    assert causes(redelivered(11_000, [12_000, 12_001])) == DUPLICATE


def test_the_models_own_copy_delivered_again_takes_the_restarts_once() -> None:
    """A crash before the model's first offset write (10 s): the model delivers D1 again itself (allowed,
    not owed). That copy is the restart's one; a second copy beside it is a duplicate."""
    assert causes(redelivered(5000, [6000])) == []
    assert causes(redelivered(5000, [])) == []
    assert causes(redelivered(5000, [6000, 6001])) == DUPLICATE


# --- schedule/restart-redelivery: what the copy holds ------------------------------------------------------


def test_a_copy_delivered_again_is_the_same_message() -> None:
    """Every field the broker does not set anew on delivery is the first copy's: one field off is outside."""
    events = redelivered(11_000, [12_000])
    assert causes(events) == []
    pulled = events[-1].value["records"][0]
    for change, want in (
        ({"body": "x"}, ("wrong-body", "schedule/restart-redelivery")),
        ({"flag": 1}, ("wrong-flag", "schedule/restart-redelivery")),
        ({"sys_flag": 2}, ("wrong-sys-flag", "schedule/restart-redelivery")),
        ({"queue_id": 1}, ("wrong-queue", "schedule/restart-redelivery")),
        (
            {"properties": {**pulled["properties"], "DELAY": "2"}},
            ("wrong-properties", "schedule/delivered-copy"),
        ),
        ({"properties": {**pulled["properties"], "k": "v"}}, ("wrong-properties", "put/stored-properties")),
    ):
        bad = [
            Event(e.index, e.process, e.type, e.f, json.loads(json.dumps(e.value)), e.time) for e in events
        ]
        bad[-1].value["records"][0].update(change)
        got = causes(bad)
        assert want in got, (change, got)


# --- schedule/restart-redelivery: how long a delivery queue may grow ----------------------------------------


def max_offset_after_restart(restart_at: int, answer: int) -> list[Event]:
    t = target()
    t.execute(Send(Message("T", b"d", props(UNIQ_KEY="D1", DELAY="1"))))
    t.advance_to(EPOCH + 1500)
    t.execute(Pull("T", 0, 0))
    restarted(t, restart_at, restart_at + 500)
    t.advance_to(EPOCH + restart_at + 3000)
    t.execute(GetMaxOffset("T", 0))
    t.events[-1].value["fields"]["offset"] = answer
    return t.events


def test_a_delivery_queue_grows_by_one_entry_per_copy_a_restart_may_repeat() -> None:
    # the model wrote its offsets after the delivery: the broker may hold one copy more, no more
    assert causes(max_offset_after_restart(11_000, 1)) == []
    assert causes(max_offset_after_restart(11_000, 2)) == []
    assert causes(max_offset_after_restart(11_000, 3)) == [("wrong-max-offset", "dispatch/max-offset")]
    # the delivery was written long before the crash: nothing may come again
    assert causes(max_offset_after_restart(40_000, 2)) == [("wrong-max-offset", "dispatch/max-offset")]
    # the model delivers again itself (a crash before its first write): its own copy is the one more
    assert causes(max_offset_after_restart(5000, 2)) == []
    assert causes(max_offset_after_restart(5000, 3)) == [("wrong-max-offset", "dispatch/max-offset")]


# --- schedule/restart-redelivery: the window of a copy due across the stop ---------------------------------


def due_across_restart(sent_at: int, stored_at: int) -> list[Event]:
    """D1 (level 1) sent at ``sent_at``; a crash at 61 000, back at 61 500; D1 stored at ``stored_at``."""
    t = target()
    t.advance_to(EPOCH + sent_at)
    t.execute(Send(Message("T", b"d", props(UNIQ_KEY="D1", DELAY="1"))))
    restarted(t, 61_000, 61_500)
    t.advance_to(EPOCH + 63_000)
    t.execute(Pull("T", 0, 0))
    t.events[-1].value["records"][0]["store_timestamp"] = EPOCH + stored_at
    return t.events


def test_only_a_window_still_open_when_the_stop_began_is_stretched() -> None:
    """Due at sent + 1000, its window closes eps later: open at the crash (61 000) when sent at 59 900."""
    stretched = 61_500 + FIRST_DELAY + EPS
    assert causes(due_across_restart(59_900, stretched)) == []
    assert causes(due_across_restart(59_899, stretched)) == [("late-delivery", "schedule/due-time")]
    # and stretched to the first run after the broker is back, no further
    assert causes(due_across_restart(59_900, stretched + 1)) == [("late-delivery", "schedule/due-time")]


# --- transaction/check-restart: checks an orderly stop may have made the broker discard ----------------------

TX_CFG = BrokerConfig(
    "1s 2s 3s", transaction_check_interval_ms=5000, transaction_timeout_ms=3000, transaction_check_max=2
)


def through_orderly_stop(sent_at: int, keep: set[str], cfg: BrokerConfig = TX_CFG) -> list[Event]:
    """H1 sent at ``sent_at``; an orderly stop at 6000 (back at once: one run of the stop); the model's
    checks of H1 with a count in ``keep`` are kept; the producer answers at 29 000."""
    t = target(cfg)
    t.execute(Heartbeat("PG"))
    p = props(UNIQ_KEY="H1", TRAN_MSG="true", PGROUP="PG", WAIT="true")
    send = Send(Message("T", b"h", p, sys_flag=4, producer_group="PG"))
    if sent_at > 6000:
        restarted(t, 6000, 6000, graceful=True)
        t.execute(Heartbeat("PG"))  # the producer registers again with the broker that restarted
    t.advance_to(EPOCH + sent_at)
    t.execute(send)
    if sent_at <= 6000:
        restarted(t, 6000, 6000, graceful=True)
        t.execute(Heartbeat("PG"))
    t.advance_to(EPOCH + 29_000)
    t.execute(Heartbeat("PG"))  # the broker answers: a check owed before now that never came is missing
    assert any(e.f == "check" for e in t.events), "the model checks H1"
    kept = [
        e
        for e in t.events
        if e.f != "check" or e.value["message"]["properties"]["TRANSACTION_CHECK_TIMES"] in keep
    ]
    return [Event(i, e.process, e.type, e.f, e.value, e.time) for i, e in enumerate(kept)]


MISSING = [("missing-check", "transaction/check-timeout")]


def test_a_stop_excuses_the_checks_of_a_message_the_broker_held_when_it_began() -> None:
    """H1 checked at 5000 (count 1); the stop's run may raise it to 2 (the max) unheard, and the broker
    then discards it: its count-2 check is not owed. A message sent after the stop began was never in
    a run of the stop: its last check is owed."""
    assert causes(through_orderly_stop(0, {"1"}), TX_CFG) == []
    assert causes(through_orderly_stop(0, {"1", "2"}), TX_CFG) == []
    assert causes(through_orderly_stop(7000, {"1"}), TX_CFG) == MISSING
    assert causes(through_orderly_stop(7000, {"1", "2"}), TX_CFG) == []
    # at the edge, with transactionCheckMax 1 (the stop's one run may reach it from count 0): sent just
    # before the stop began, its check may never come; just after, it is owed
    cfg = BrokerConfig(
        "1s 2s 3s", transaction_check_interval_ms=5000, transaction_timeout_ms=3000, transaction_check_max=1
    )
    assert causes(through_orderly_stop(5999, {"1"}, cfg), cfg) == []
    assert causes(through_orderly_stop(5999, set(), cfg), cfg) == []
    assert causes(through_orderly_stop(6001, {"1"}, cfg), cfg) == []
    assert causes(through_orderly_stop(6001, set(), cfg), cfg) == MISSING


def test_a_stop_excuses_only_the_counts_its_runs_reach() -> None:
    """With transactionCheckMax 3, one run of the stop raises H1's count from 1 to 2 at most, short of the
    max: the broker still holds it and its checks after the stop are owed."""
    cfg = BrokerConfig(
        "1s 2s 3s", transaction_check_interval_ms=5000, transaction_timeout_ms=3000, transaction_check_max=3
    )
    assert causes(through_orderly_stop(0, {"1", "2", "3"}, cfg), cfg) == []
    assert causes(through_orderly_stop(0, {"1"}, cfg), cfg) == MISSING


# --- schedule/restart-redelivery across two restarts ------------------------------------------------------


def twice_restarted(second_at: int, again_after_first: bool) -> list[Event]:
    """D1 (level 1) delivered at 1000; a crash at 11 000, back at 11 500, after which D1 comes again at
    12 000 (``again_after_first``) or not; a second crash at ``second_at``, back 500 ms later, after which
    D1 comes once more, a second after the crash."""
    t = target()
    t.execute(Send(Message("T", b"d", props(UNIQ_KEY="D1", DELAY="1"))))
    t.advance_to(EPOCH + 1500)
    t.execute(Pull("T", 0, 0))
    first = t.events[-1].value["records"][0]
    restarted(t, 11_000, 11_500)
    copies = [again(first, 1, 12_000)] if again_after_first else []
    restarted(t, second_at, second_at + 500)
    copies.append(again(first, len(copies) + 1, second_at + 1000))
    t.advance_to(EPOCH + second_at + 3000)
    t.execute(Pull("T", 0, 1))
    n = len(copies)
    t.events[-1].value.update(
        code=0, records=copies, fields={"next_begin_offset": 1 + n, "min_offset": 0, "max_offset": 1 + n}
    )
    return t.events


def test_a_copy_delivered_again_may_come_again_after_the_next_restart() -> None:
    """The copy delivered again at 12 000 is a delivery like any: a crash up to a persist interval (plus
    eps) after it, the broker up long enough to have written since, may repeat it once more."""
    edge = 12_000 + FLUSH + EPS
    assert causes(twice_restarted(edge, True)) == []
    assert causes(twice_restarted(edge + 1, True)) == DUPLICATE


def test_a_broker_up_less_than_its_first_offset_write_may_repeat_what_came_before_its_start() -> None:
    """Back at 11 500, the broker writes its offsets first 10 s after its start: a crash before 21 500
    finds nothing written since the crash before, so the delivery of 1000 may come again; at 21 500 it
    had written."""
    assert causes(twice_restarted(21_499, False)) == []
    assert causes(twice_restarted(21_500, False)) == DUPLICATE


# --- allowances as data -------------------------------------------------------------------------------------


def used(events: list[Event], cfg: BrokerConfig = CFG) -> dict[str, int]:
    v = check_history(events, cfg, epsilon_ms=EPS, check_phase_ms=0)
    assert v.status == "pass", [a.to_json() for a in v.anomalies]
    return dict(v.allowances)


def test_the_verdict_counts_the_allowances_it_used() -> None:
    # a copy delivered again, in a queue one entry longer than the model's
    assert used(redelivered(11_000, [12_000])) == {"restart-redelivery": 1, "restart-queue-growth": 1}
    assert used(redelivered(11_000, [])) == {}  # allowed, not used
    assert used(max_offset_after_restart(11_000, 2)) == {"restart-queue-growth": 1}
    assert used(max_offset_after_restart(11_000, 1)) == {}
    # on time only because the restart stretched its window; a copy on time anyway uses nothing
    # (the model delivered D1 at 60 900, before the crash, and again after it: the target shows that copy)
    assert used(due_across_restart(59_900, 61_500 + FIRST_DELAY + EPS)) == {
        "restart-redelivery": 1,
        "restart-stretched-window": 1,
    }
    assert used(due_across_restart(59_900, 61_000)) == {"restart-redelivery": 1}
    # the count-2 check of a message an orderly stop may have taken to the discard
    assert used(through_orderly_stop(0, {"1"}), TX_CFG) == {"restart-stop-discard": 1}
    assert used(through_orderly_stop(0, {"1", "2"}), TX_CFG) == {}
    v = check_history(redelivered(11_000, [12_000]), CFG, epsilon_ms=EPS, check_phase_ms=0)
    assert v.to_json()["allowances"] == {"restart-queue-growth": 1, "restart-redelivery": 1}
    assert "Allowances used: restart-queue-growth 1×, restart-redelivery 1×." in v.summary()


def test_every_allowance_names_a_rule_of_the_spec_and_the_docs_show_the_table() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in (Path(__file__).parents[1] / "spec").glob("*.md"))
    for a in ALLOWANCES.values():
        assert f"## {a.rule}\n" in text, a.rule
        assert a.source and a.window and a.how_often, a.name
    docs = (Path(__file__).parents[1] / "docs" / "checker.md").read_text(encoding="utf-8")
    assert allowance_table() in docs, "docs/checker.md: paste allowance_table() into the Restarts section"

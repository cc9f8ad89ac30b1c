"""The checker's verdicts on hand-made histories: good and bad histories kept as fixtures (Knossos/Elle style)."""

from __future__ import annotations

import attrs

from rmqspec.adapters.inprocess import EPOCH, InProcessTarget
from rmqspec.conformance.checker import Checker, Verdict, check_history
from rmqspec.conformance.history import Event, RecordingTarget
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model, Pull, Send
from rmqspec.reference.put import Message
from rmqspec.reference.records import props

CFG = BrokerConfig("1s 2s 3s")


def delayed_history(model: Model, pull_after_ms: int) -> list[Event]:
    t = RecordingTarget(InProcessTarget(model))
    t.execute(Send(Message("T", b"x", props(UNIQ_KEY="U1", DELAY="2"))))
    t.advance_to(EPOCH + pull_after_ms)
    t.execute(Pull("T", 0, 0))
    return t.events


def verdict(events: list[Event], eps: int = 100) -> Verdict:
    return check_history(events, CFG, epsilon_ms=eps, check_phase_ms=0)


def test_reference_history_passes() -> None:
    v = verdict(delayed_history(Model(CFG), 2000))
    assert v.status == "pass", v
    assert v.consumed == v.total == 4


def test_delivery_one_ms_early_fails() -> None:
    events = delayed_history(Model(CFG), 2000)
    pulled = events[-1].value["records"][0]
    pulled["store_timestamp"] -= 1  # the broker stored the delivered copy 1 ms before its deliver time
    v = verdict(events)
    assert v.status == "fail"
    assert [a.name for a in v.anomalies] == ["early-delivery"]
    assert v.anomalies[0].rule == "schedule/due-time"


def test_pull_seen_before_due_fails() -> None:
    model = MUTANTS["one-ms-early"].model(CFG)
    v = verdict(delayed_history(model, 1999))
    assert v.status == "fail"
    assert "early-delivery" in {a.name for a in v.anomalies}


def test_delivery_after_epsilon_fails_and_within_passes() -> None:
    events = delayed_history(Model(CFG), 2500)
    events[-1].value["records"][0]["store_timestamp"] += 100  # at the edge of epsilon: allowed
    assert verdict(events, eps=100).status == "pass"
    events[-1].value["records"][0]["store_timestamp"] += 1  # 1 ms past epsilon
    v = verdict(events, eps=100)
    assert v.status == "fail"
    assert [a.name for a in v.anomalies] == ["late-delivery"]


def test_not_visible_by_deadline_is_late() -> None:
    model = MUTANTS["one-tick-late"].model(CFG)
    t = RecordingTarget(InProcessTarget(model))
    t.execute(Send(Message("T", b"x", props(UNIQ_KEY="U1", DELAY="1"))))
    t.advance_to(EPOCH + 1050)
    t.execute(Pull("T", 0, 0))  # a correct broker has delivered by 1000 + epsilon (20)
    v = check_history(t.events, CFG, epsilon_ms=20, check_phase_ms=0)
    assert v.status == "fail"
    assert v.anomalies[0].name == "late-delivery"


def test_verdict_truth_value_is_its_pass() -> None:
    """``assert verdict`` holds only on a pass: a failure and an unknown verdict are false."""
    good = verdict(delayed_history(Model(CFG), 2000))
    bad = verdict(delayed_history(MUTANTS["one-ms-early"].model(CFG), 1999))
    unknown = verdict(delayed_history(Model(CFG), 2000)[:-1])
    assert (good.status, bad.status, unknown.status) == ("pass", "fail", "unknown")
    assert [bool(v) for v in (good, bad, unknown)] == [True, False, False]
    assert [v.passed for v in (good, bad, unknown)] == [True, False, False]
    assert not hasattr(bad, "valid")  # the old string field is gone: `assert v.valid` cannot pass silently
    assert (bad.to_json()["status"], bad.to_json()["passed"]) == ("fail", False)


def test_history_that_stops_early_is_not_a_pass() -> None:
    events = delayed_history(Model(CFG), 2000)
    truncated = events[:-1]  # the pull's completion is missing: its outcome is unknown
    v = verdict(truncated)
    assert v.status == "unknown"
    assert "unknown outcome" in v.reason
    v2 = check_history(events, CFG, epsilon_ms=100, check_phase_ms=0, expected_total=len(events) + 3)
    assert v2.status == "unknown"


def test_lost_message_named() -> None:
    t = RecordingTarget(InProcessTarget(Model(CFG)))
    t.execute(Send(Message("T", b"x", props(UNIQ_KEY="U1"))))
    t.advance_to(EPOCH + 101)  # past epsilon: a plain message must be visible by now
    t.execute(Pull("T", 0, 0))
    events = t.events
    events[-1].value["records"].clear()
    events[-1].value["code"] = 19
    events[-1].value["fields"].update(next_begin_offset=0, max_offset=0)  # the queue is empty
    v = verdict(events)
    assert v.status == "fail"
    assert [(r.name, r.rule) for r in v.root_causes] == [("lost-message", "put/send-result")]
    # The empty answer follows from the loss: listed under it, not as a cause of its own.
    assert {a.name for a in v.anomalies if not a.is_cause} == {"wrong-pull-status"}
    # An empty answer while the response's own max offset says the entry is there (OFFSET_FOUND_NULL):
    # 4.9.8 answers it only when the entry's consume-queue file is gone (DefaultMessageStore.getMessage,
    # getIndexBuffer is null) and then sends the consumer past it; the model deletes nothing, so the
    # entry the model holds must be FOUND.
    events[-1].value["fields"].update(next_begin_offset=0, max_offset=1)
    assert [a.name for a in verdict(events).anomalies] == ["wrong-pull-status"]
    events[-1].value["code"] = 21
    assert [a.name for a in verdict(events).anomalies] == ["wrong-pull-status"]


def test_incremental_checker_matches_batch() -> None:
    events = delayed_history(Model(CFG), 2000)
    c = Checker(CFG, epsilon_ms=100)
    for e in events:
        c.feed(e)
    assert c.finish().status == verdict(events).status == "pass"


def test_known_check_rounds_replace_the_periodic_ticks_near_them() -> None:
    from rmqspec.conformance.checker import infer_check_rounds
    from rmqspec.conformance.history import Event
    from rmqspec.reference.model import Model

    cfg = BrokerConfig(transaction_check_interval_ms=5000)
    periodic = Model(cfg)
    assert [periodic.next_check_time(t) for t in (0, 4999, 5000)] == [5000, 5000, 10000]
    drifted = Model(cfg, check_rounds=(5040, 10090))  # each round a little later than the last
    assert drifted.next_check_time(0) == 5040
    assert drifted.next_check_time(5040) == 10090
    assert drifted.next_check_time(10090) == 15000  # no round known: the periodic tick
    checks = [Event(i, -1, "ok", "check", {}, t) for i, t in enumerate((5040, 5041, 5070, 10090, 10093))]
    assert infer_check_rounds(checks, 5000) == (5040, 10090)
    # with arrival latency up to 100 ms, a round began between A - 100 and A, and no earlier than the
    # first check of a message sent at 1980 with a 3000 ms timeout allows
    half = Event(0, 1, "invoke", "send_half", {"properties": {"UNIQ_KEY": "U"}}, 1980)
    first = {"message": {"properties": {"UNIQ_KEY": "U", "TRANSACTION_CHECK_TIMES": "1"}}}
    seen = [half, Event(1, -1, "ok", "check", first, 5040), Event(2, -1, "ok", "check", {}, 10090)]
    assert infer_check_rounds(seen, 5000, 3000, 100) == (4981, 9990)
    seen[1] = Event(1, -1, "ok", "check", first, 5000)
    assert infer_check_rounds(seen, 5000, 3000, 100) == (4981, 9990)


def test_a_verdict_says_what_it_compared_and_nothing_compared_is_no_pass() -> None:
    v = verdict(delayed_history(Model(CFG), 2000))
    assert v.status == "pass"
    assert (v.checked["responses"], v.checked["records"], v.checked["pulls"]) == (1, 1, 1)
    assert v.checked_total == sum(v.checked.values()) == 3
    assert "compared with the model: responses 1, records 1, pulls 1" in v.summary()
    empty = verdict([])
    assert (empty.status, empty.reason) == (
        "unknown",
        "nothing was checked: the history holds no answer the model could be compared with",
    )
    assert "not a pass" in empty.summary()
    # Only invokes whose outcome never came: unknown, with the reason.
    sends = delayed_history(Model(CFG), 2000)[:1]
    assert verdict(sends).status == "unknown"


def test_a_shared_brokers_system_topic_may_exist_because_of_other_clients() -> None:
    """A pull of TRANS_CHECK_MAX_TIME_TOPIC on a broker other scenarios share: the model (which has seen
    nothing discarded) says TOPIC_NOT_EXIST, the broker answers PULL_NOT_FOUND because someone else's
    discard made the topic. Allowed on a shared broker, a wrong status on an isolated one."""
    from rmqspec.conformance.checker import check_history
    from rmqspec.conformance.codec import op_arguments, response_to_json
    from rmqspec.conformance.contract import Response
    from rmqspec.conformance.history import Event
    from rmqspec.reference.config import BrokerConfig
    from rmqspec.reference.model import Pull

    f, args = op_arguments(Pull("TRANS_CHECK_MAX_TIME_TOPIC", 0, 0, 32, "CG"))
    answer = response_to_json(
        Response(19, "NO_MESSAGE_IN_QUEUE", {"next_begin_offset": 0, "min_offset": 0, "max_offset": 0})
    )
    events = [Event(0, 0, "invoke", f, args, 1_000), Event(1, 0, "ok", f, answer, 1_005)]
    assert check_history(events, BrokerConfig(), shared=True).status != "fail"
    isolated = check_history(events, BrokerConfig(), shared=False)
    assert isolated.status == "fail" and isolated.anomalies[0].name == "wrong-pull-status"


def test_a_round_may_have_begun_at_its_first_request_when_the_earliest_reading_fails() -> None:
    """The served reference, a-younger-half-message-holds-up-the-next-check (transaction/check-interval):
    `a`'s first check arrived 481 ms after `b` was sent. Read at its earliest (half an epsilon before
    the arrival, but not before `a` was old enough) the round ran before `b` was stored, so `a`'s copy
    would stand ahead of `b` and be checked a round later; read at its arrival, the copy stands behind
    young `b` and waits for `b`'s check, as the broker did. Either reading is one the spec allows, so the
    history passes; with `a`'s second check three seconds later it fails under both."""
    from pathlib import Path

    import attrs

    from rmqspec.conformance.history import load

    path = (
        Path(__file__).parent / "fixtures" / "served" / "a-younger-half-message-holds-up-the-next-check.jsonl"
    )
    meta, events = load(path)
    config = BrokerConfig(transaction_timeout_ms=3000, transaction_check_interval_ms=1000)
    assert check_history(events, config, epsilon_ms=meta["epsilon_ms"], shared=True).status == "pass"
    last = events[-1]
    late = [*events[:-1], attrs.evolve(last, time=last.time + 3000)]
    assert check_history(late, config, epsilon_ms=1000, shared=True).status == "fail"


def _held_up_history(other_producer: bool) -> tuple[list[Event], BrokerConfig]:
    """One client's history on a broker another producer shares (logical clock, phase 4200 + 5000 k).

    `H` is born at +1000 and its send is answered at +1400; the other producer's `Y`, born at +1300, is
    stored before `H` (``other_producer``). At the run at +4200 `H` is due (3200 ms old) and `Y` is not
    (2900 ms): the run stops at `Y` (TransactionalMessageServiceImpl.check's ``break``), and `H` is checked
    by the run at +9200. Without `Y` the run at +4200 checks it. The history holds `H`'s client only."""
    from rmqspec.reference.model import Heartbeat

    cfg = BrokerConfig(transaction_timeout_ms=3000, transaction_check_interval_ms=5000)
    broker = InProcessTarget(Model(cfg, check_phase_ms=(EPOCH + 4200) % 5000))
    mine = RecordingTarget(broker)
    mine.execute(Heartbeat("PG"))
    broker.execute(Heartbeat("OG"))
    if other_producer:
        broker.advance_to(EPOCH + 1350)
        y = Message(
            "TxY", b"y", props(UNIQ_KEY="Y", TRAN_MSG="true", PGROUP="OG"), born_timestamp=EPOCH + 1300
        )
        broker.execute(Send(y))
    mine.advance_to(EPOCH + 1400)
    h = Message("TxH", b"h", props(UNIQ_KEY="H", TRAN_MSG="true", PGROUP="PG"), born_timestamp=EPOCH + 1000)
    mine.execute(Send(h))
    mine.advance_to(EPOCH + 9300)
    events = [e for e in mine.events if e.f != "check" or e.value["message"]["properties"]["UNIQ_KEY"] == "H"]
    invoke = next(i for i, e in enumerate(events) if e.f == "send_half")
    events[invoke] = attrs.evolve(events[invoke], time=EPOCH + 1000)  # sent when born, answered at +1400
    return [attrs.evolve(e, index=i) for i, e in enumerate(events)], cfg


def test_another_producers_younger_record_may_hold_up_a_check_on_a_shared_broker() -> None:
    """transaction/check-timeout on a shared broker: a record the history does not show may stop a run
    before a due one, until that one's store time plus the timeout; the checker accepts the check at
    either run, and only on a shared broker."""
    held, cfg = _held_up_history(other_producer=True)
    passed, _ = _held_up_history(other_producer=False)
    assert [e.time - EPOCH for e in held if e.f == "check"] == [9200]
    assert [e.time - EPOCH for e in passed if e.f == "check"] == [4200, 9200]
    for events in (held, passed):
        v = check_history(events, cfg, epsilon_ms=100, shared=True)
        assert v.status == "pass", v.summary()
    # A broker of its own has no other producer: the run at +4200 must check H.
    alone = check_history(held, cfg, epsilon_ms=100, shared=False)
    assert alone.status == "fail" and "missing-check" in {a.name for a in alone.anomalies}, alone.summary()
    # Held longer than a record stored before H's answer can hold it: a run later still is missing one.
    late = [attrs.evolve(e, time=e.time + 5000) if e.f == "check" else e for e in held]
    v = check_history(late, cfg, epsilon_ms=100, shared=True)
    assert v.status == "fail" and "missing-check" in {a.name for a in v.anomalies}, v.summary()

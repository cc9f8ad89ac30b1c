"""The 5.x timer in the model (spec/timer.md), its settings, its scenario expressions and its mutants."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from rmqspec.adapters.inprocess import EPOCH, InProcessTarget
from rmqspec.conformance.contract import Feature
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.scenario_expr import Env, evaluate
from rmqspec.conformance.scenario_run import run_scenario
from rmqspec.conformance.scenarios import Scenario, ScenarioError, broker_config, catalogue, wire_features
from rmqspec.reference.config import BrokerConfig, ConfigError, Profile, config_from_broker_conf
from rmqspec.reference.constants import LONG_MAX, TIMER_TOPIC, Code, Prop
from rmqspec.reference.model import Model
from rmqspec.reference.observations import Rejected, SendOk, TimerDelivered, TimerDropped, TimerRolled
from rmqspec.reference.put import Message
from rmqspec.reference.records import props
from rmqspec.reference.semantics import timer_deliver_ms, timer_round, timer_slot_due
from rmqspec.reference.state import BrokerState

FIVE = BrokerConfig("1s 2s", profile=Profile.V5)


@functools.cache
def _catalogue() -> tuple[Scenario, ...]:
    return tuple(catalogue())


def send(model: Model, state: BrokerState, now: int, **p: str) -> tuple[BrokerState, SendOk | Rejected]:
    return model.send(state, Message("T", b"x", props(UNIQ_KEY=p.pop("UNIQ_KEY", "u"), **p)), now)


def test_rounding_floors_and_steps_back_on_a_multiple() -> None:
    assert timer_round(2500, 1000) == 2000
    assert timer_round(2000, 1000) == 1000
    assert timer_round(2001, 1000) == 2000
    assert timer_round(2001, 500) == 2000
    assert timer_slot_due(1000, 1999, 1000) is False
    assert timer_slot_due(1000, 2000, 1000) is True


def test_deliver_time_precedence_and_java_long_arithmetic() -> None:
    assert timer_deliver_ms("3", "5000", "1", 100) == 3100
    assert timer_deliver_ms(None, "5000", "1", 100) == 5100
    assert timer_deliver_ms(None, None, "7", 100) == 7
    assert timer_deliver_ms("x", "5000", None, 100) is None  # seconds first, even unreadable
    assert timer_deliver_ms(None, " 5", None, 100) is None
    wrapped = timer_deliver_ms("9223372036854775", None, None, 1_800_000_000_000)
    assert wrapped is not None and wrapped < 0  # wraps: in the past


def test_a_timer_message_goes_to_the_timer_topic_and_is_delivered_one_slot_after_its_out_ms() -> None:
    model = Model(FIVE)
    state = model.initial()
    state, sent = send(model, state, EPOCH + 300, TIMER_DELAY_MS="2500")
    assert isinstance(sent, SendOk) and sent.record.topic == TIMER_TOPIC and sent.record.queue_id == 0
    assert sent.record.properties[Prop.TIMER_OUT_MS] == str(EPOCH + 2000)
    assert sent.record.properties[Prop.REAL_TOPIC] == "T"
    state, events = model.advance(state, EPOCH + 300, EPOCH + 2999)
    assert not [e for e in events if isinstance(e, TimerDelivered)]
    state, events = model.advance(state, EPOCH + 2999, EPOCH + 3000)
    (d,) = [e for e in events if isinstance(e, TimerDelivered)]
    assert d.copy.topic == "T" and d.copy.store_timestamp == EPOCH + 3000
    assert d.copy.properties[Prop.TIMER_ENQUEUE_MS] == str(EPOCH)
    assert d.copy.properties[Prop.TIMER_DEQUEUE_MS] == str(EPOCH + 3000)
    assert d.copy.properties[Prop.REAL_TOPIC] == "T"  # the stored string keeps it


def test_the_maximum_delay_is_inclusive_and_the_remark_names_it() -> None:
    model = Model(attrs_evolve(FIVE, timer_max_delay_sec=10))
    state = model.initial()
    state, ok = send(model, state, EPOCH, TIMER_DELAY_SEC="10")
    assert isinstance(ok, SendOk)
    state, bad = send(model, state, EPOCH, TIMER_DELAY_MS="10001")
    assert (
        isinstance(bad, Rejected) and bad.code == Code.MESSAGE_ILLEGAL and "max delay 10000ms" in bad.remark
    )


def test_past_deliver_times_are_stored_at_once_unless_a_cancel_marker() -> None:
    model = Model(FIVE)
    state = model.initial()
    state, now = send(model, state, EPOCH, TIMER_DELAY_MS="0")
    assert (
        isinstance(now, SendOk) and now.record.topic == "T" and Prop.TIMER_OUT_MS not in now.record.properties
    )
    state, marker = send(model, state, EPOCH, TIMER_DELAY_MS="0", TIMER_DEL_UNIQKEY="k")
    assert isinstance(marker, Rejected) and marker.code == Code.MESSAGE_ILLEGAL


def test_timer_disabled_refuses_every_timer_message() -> None:
    model = Model(attrs_evolve(FIVE, timer_wheel_enable=False))
    state = model.initial()
    state, r = send(model, state, EPOCH, TIMER_DELIVER_MS="1")
    assert isinstance(r, Rejected) and r.code == Code.SYSTEM_ERROR and r.rule == "timer/disabled"
    assert TIMER_TOPIC not in state.topics


def test_a_roll_puts_the_message_back_and_keeps_its_time() -> None:
    model = Model(attrs_evolve(FIVE, timer_roll_window_slot=3))
    state = model.initial()
    state, _ = send(model, state, EPOCH + 100, TIMER_DELIVER_MS=str(EPOCH + 6000))
    state, events = model.advance(state, EPOCH + 100, EPOCH + 10_000)
    rolls = [e for e in events if isinstance(e, TimerRolled)]
    (d,) = [e for e in events if isinstance(e, TimerDelivered)]
    assert (
        rolls
        and rolls[0].copy.topic == TIMER_TOPIC
        and rolls[0].copy.properties[Prop.TIMER_ROLL_TIMES] == "1"
    )
    assert d.copy.store_timestamp == EPOCH + 6000
    assert d.copy.properties[Prop.TIMER_ROLL_TIMES] == str(len(rolls))


def test_a_cancel_marker_drops_its_message_in_the_same_slot_only() -> None:
    model = Model(FIVE)
    state = model.initial()
    state, _ = send(model, state, EPOCH, UNIQ_KEY="gone", TIMER_DELIVER_MS=str(EPOCH + 3000))
    state, _ = send(model, state, EPOCH, UNIQ_KEY="kept", TIMER_DELIVER_MS=str(EPOCH + 4000))
    state, _ = send(
        model, state, EPOCH, UNIQ_KEY="m1", TIMER_DELIVER_MS=str(EPOCH + 2999), TIMER_DEL_UNIQKEY="gone"
    )
    state, _ = send(
        model, state, EPOCH, UNIQ_KEY="m2", TIMER_DELIVER_MS=str(EPOCH + 3000), TIMER_DEL_UNIQKEY="kept"
    )
    state, events = model.advance(state, EPOCH, EPOCH + 10_000)
    delivered = [e.copy.uniq_key for e in events if isinstance(e, TimerDelivered)]
    dropped = {(e.source.uniq_key, e.reason) for e in events if isinstance(e, TimerDropped)}
    assert delivered == ["kept"]
    assert ("gone", "cancelled") in dropped


def test_an_unreadable_timer_record_stops_the_timer_for_good() -> None:
    model = Model(FIVE)
    state = model.initial()
    state, _ = send(model, state, EPOCH, UNIQ_KEY="first", TIMER_DELIVER_MS=str(EPOCH + 2000))
    state, poison = model.send(state, Message(TIMER_TOPIC, b"p", props(UNIQ_KEY="p")), EPOCH)
    assert isinstance(poison, SendOk) and poison.record.topic == TIMER_TOPIC  # not a timer transform
    state, _ = send(model, state, EPOCH, UNIQ_KEY="second", TIMER_DELIVER_MS=str(EPOCH + 2000))
    state, events = model.advance(state, EPOCH, EPOCH + 60_000)
    assert [e.copy.uniq_key for e in events if isinstance(e, TimerDelivered)] == ["first"]


def test_a_restart_comes_back_to_the_last_flush_and_loses_nothing() -> None:
    model = Model(FIVE)
    state = model.initial()
    state, _ = send(model, state, EPOCH, UNIQ_KEY="a", TIMER_DELIVER_MS=str(EPOCH + 2000))
    state, _ = send(model, state, EPOCH, UNIQ_KEY="b", TIMER_DELIVER_MS=str(EPOCH + 9000))
    state, events = model.advance(state, EPOCH, EPOCH + 2500)  # a delivered at 2000; flush at 2000
    assert [e.copy.uniq_key for e in events if isinstance(e, TimerDelivered)] == ["a"]
    state = model.restart(state)
    state, events = model.advance(state, EPOCH + 2500, EPOCH + 20_000)
    assert [e.copy.uniq_key for e in events if isinstance(e, TimerDelivered)] == ["b"]


def test_the_direct_path_marks_the_enqueue_time_long_max() -> None:
    model = Model(attrs_evolve(FIVE, timer_roll_window_slot=2))
    state = model.initial()
    state, _ = send(model, state, EPOCH + 300, TIMER_DELAY_MS="2500")
    state, events = model.advance(state, EPOCH + 300, EPOCH + 10_000)
    (d,) = [e for e in events if isinstance(e, TimerDelivered)]
    assert d.copy.properties[Prop.TIMER_ENQUEUE_MS] == str(LONG_MAX)


def test_four_nine_has_no_timer() -> None:
    model = Model(BrokerConfig("1s"))
    state = model.initial()
    state, r = model.send(state, Message("T", b"x", props(UNIQ_KEY="u", TIMER_DELAY_SEC="3")), EPOCH)
    assert isinstance(r, SendOk) and r.record.topic == "T"


def test_timer_settings_are_five_only_and_the_precision_snaps_as_the_setter_does() -> None:
    assert BrokerConfig(profile=Profile.V5, timer_precision_ms=300).timer_precision_ms == 200
    assert BrokerConfig(profile=Profile.V5, timer_precision_ms=5000).timer_precision_ms == 1000
    assert BrokerConfig(profile=Profile.V5, timer_precision_ms=0).timer_precision_ms == 100
    assert BrokerConfig(profile=Profile.V5, timer_roll_window_slot=1).timer_roll_slots == 7 * 86400 - 60
    with pytest.raises(ConfigError, match=r"5\.x setting"):
        config_from_broker_conf({"timerWheelEnable": "false"})
    assert not config_from_broker_conf({"timerWheelEnable": "false"}, Profile.V5).timer_wheel_enable
    with pytest.raises(ScenarioError, match=r"5\.x setting"):
        broker_config({"timerPrecisionMs": 500})


def test_timer_expressions_count_on_the_targets_clock() -> None:
    env = Env(FIVE, {"t1": 250}, {}, 0, t0=1_000_000_000_700)
    assert evaluate("=epoch(at(t1) + 1000)", env) == 1_000_000_001_950
    assert evaluate("=timer_due(at(t1) + 1000)", env) == 2000 - 700  # rounded up on the broker's clock
    assert evaluate("=precision + timer_max // 1000", env) == 1000 + 259200


def test_grpc_features_come_from_the_steps() -> None:
    assert wire_features("send", {"send": {"topic": "T", "queue": 2}}) == {Feature.QUEUE_CHOICE}
    assert wire_features("send", {"send": {"topic": "T", "props": {"DELAY": "1"}}}) == {
        Feature.REMOTING_DETAIL
    }
    assert (
        wire_features("send", {"send": {"topic": "T", "props": {"TIMER_DELIVER_MS": "1", "U": "v"}}}) == set()
    )
    assert wire_features("pull", {"pull": {"topic": "T", "offset": 1}}) == {Feature.PULL_OFFSET}
    assert wire_features(
        "pull", {"pull": {"topic": "T"}, "expect": {"messages": [{"props": {"REAL_TOPIC": None}}]}}
    ) == {Feature.REMOTING_DETAIL}


@pytest.mark.parametrize("name", sorted(n for n in MUTANTS if n.startswith("timer-")))
def test_each_timer_mutant_is_killed_by_an_example_of_its_rule(name: str) -> None:
    m = MUTANTS[name]
    mine = [s for s in _catalogue() if m.rule in s.rules and s.profile == "5.x"]
    assert mine, f"no 5.x example covers {m.rule}"
    outcomes = [
        run_scenario(s, lambda cfg: InProcessTarget(m.model(cfg), name), salt="t").outcome for s in mine
    ]
    assert "fail" in outcomes, f"{name} survives every example of {m.rule}"


def attrs_evolve(cfg: BrokerConfig, **changes: Any) -> BrokerConfig:
    import attrs

    return attrs.evolve(cfg, **changes)


def test_what_the_checker_needs_to_judge_a_timer_copy() -> None:
    from rmqspec.conformance.timer_windows import out_of_slot_order, timer_property_problems, timer_window

    model = Model(FIVE)
    state = model.initial()
    state, _ = send(model, state, EPOCH + 300, TIMER_DELAY_MS="2500")
    state, events = model.advance(state, EPOCH + 300, EPOCH + 5000)
    (d,) = [e for e in events if isinstance(e, TimerDelivered)]
    w = timer_window(d, 1000, 500)
    assert (w.due, w.latest) == (EPOCH + 3000, EPOCH + 3500)
    ok = {"TIMER_ENQUEUE_MS": str(EPOCH + 1000), "TIMER_DEQUEUE_MS": str(EPOCH + 3040)}
    assert timer_property_problems(ok, (EPOCH + 300, EPOCH + 320), w.due, EPOCH + 3050, 1000) == []
    direct = dict(ok, TIMER_ENQUEUE_MS=str(LONG_MAX))
    assert timer_property_problems(direct, (EPOCH + 300, EPOCH + 320), w.due, EPOCH + 3050, 1000) == []
    early = dict(ok, TIMER_DEQUEUE_MS=str(EPOCH + 2999))
    assert timer_property_problems(early, (EPOCH + 300, EPOCH + 320), w.due, EPOCH + 3050, 1000)
    odd = dict(ok, TIMER_ENQUEUE_MS=str(EPOCH + 1234))
    assert timer_property_problems(odd, (EPOCH + 300, EPOCH + 320), w.due, EPOCH + 3050, 1000)
    assert out_of_slot_order(EPOCH + 1000, EPOCH + 3000, EPOCH + 2000, EPOCH + 2990)
    assert not out_of_slot_order(
        EPOCH + 1000, EPOCH + 2000, EPOCH + 1000, EPOCH + 1990
    )  # one slot: any order


def _timer_history() -> list[Any]:
    """A timer message sent at +300 with a delay of 2500 ms (slot +2000, due +3000), read at +3200."""
    from rmqspec.conformance.history import RecordingTarget
    from rmqspec.reference.model import Pull, Send

    t = RecordingTarget(InProcessTarget(Model(FIVE)))
    t.advance_to(EPOCH + 300)
    t.execute(Send(Message("TimerT", b"x", props(UNIQ_KEY="U1", TIMER_DELAY_MS="2500"))))
    t.advance_to(EPOCH + 3200)
    t.execute(Pull("TimerT", 0, 0))
    return list(t.events)


def _judged(events: list[Any], change: Any = None) -> list[tuple[str, str]]:
    import copy

    from rmqspec.conformance.checker import check_history

    events = copy.deepcopy(events)
    if change is not None:
        change(events[-1].value["records"][0])
    verdict = check_history(events, FIVE, epsilon_ms=100)
    return [(a.name, a.rule) for a in verdict.anomalies]


def test_the_history_checker_judges_a_timer_copy_two_sided_and_its_clock_properties() -> None:
    """timer/due-time: not before a precision after the slot, nor later than epsilon after that;
    timer/delivered-copy: TIMER_DEQUEUE_MS between the due time and the store time."""
    events = _timer_history()
    (rec,) = events[-1].value["records"]
    assert rec["store_timestamp"] == EPOCH + 3000
    assert _judged(events) == []
    assert _judged(events, lambda r: r.update(store_timestamp=EPOCH + 3080)) == []  # within epsilon

    def early(r: dict[str, Any]) -> None:
        r.update(store_timestamp=EPOCH + 2999)
        r["properties"]["TIMER_DEQUEUE_MS"] = str(EPOCH + 2999)

    assert ("early-delivery", "timer/due-time") in _judged(events, early)
    assert ("late-delivery", "timer/due-time") in _judged(
        events, lambda r: r.update(store_timestamp=EPOCH + 3101)
    )
    assert _judged(events, lambda r: r["properties"].update(TIMER_DEQUEUE_MS=str(EPOCH + 2500))) == [
        ("wrong-properties", "timer/delivered-copy")
    ]
    assert _judged(events, lambda r: r["properties"].update(TIMER_OUT_MS=str(EPOCH + 1000))) == [
        ("wrong-properties", "put/stored-properties")
    ]

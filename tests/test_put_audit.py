"""Boundaries of the put path found in the audit of put, batch and properties (docs/audit/), each checked
against numbers taken from the RocketMQ source, never from the model's own output."""

from __future__ import annotations

from typing import TypeVar

import pytest

from rmqspec.reference.batch import Batch, BatchEntry, client_check
from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import Code
from rmqspec.reference.model import Model
from rmqspec.reference.observations import BatchOk, Rejected, SendOk
from rmqspec.reference.put import Message
from rmqspec.reference.records import props

T = TypeVar("T")
V5 = BrokerConfig(profile=Profile.V5)


def is_a(value: object, cls: type[T]) -> T:
    assert isinstance(value, cls), value
    return value


def props_len(*maps: dict[str, str]) -> int:
    """A properties string: key\\x01value pairs joined by \\x02, no separator after the last (4.9.1-5.1.4)."""
    pairs = [len(k) + 1 + len(v) for m in maps for k, v in m.items()]
    return sum(pairs) + len(pairs) - 1 if pairs else 0


# --- put/message-illegal ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_a_delay_is_measured_before_its_rewrite(extra: int, accepted: bool) -> None:
    """4.9.8 DefaultMessageStore.checkMessage counts the UTF-16 length of the string the send processor
    built (UNIQ_KEY, DELAY, CLUSTER) before CommitLog clamps DELAY "000...099" to "18": 32,767 passes,
    32,768 is MESSAGE_ILLEGAL although the rewritten string would be short."""
    fixed = props_len({"UNIQ_KEY": "U1", "DELAY": "99", "CLUSTER": "DefaultCluster"})
    delay = "0" * (32767 - fixed + extra) + "99"
    msg = Message("T", b"x", props(UNIQ_KEY="U1", DELAY=delay))
    _state, out = Model().send(Model().initial(), msg, 0)
    if accepted:
        assert is_a(out, SendOk).record.properties["DELAY"] == "18"
    else:
        assert is_a(out, Rejected).code == Code.MESSAGE_ILLEGAL


def test_five_x_has_no_check_before_the_rewrite() -> None:
    """5.x has no checkMessage: the same message is clamped and stored."""
    fixed = props_len({"UNIQ_KEY": "U1", "DELAY": "99", "CLUSTER": "DefaultCluster"})
    delay = "0" * (32767 - fixed + 1) + "99"
    model = Model(V5)
    _state, out = model.send(model.initial(), Message("T", b"x", props(UNIQ_KEY="U1", DELAY=delay)), 0)
    assert is_a(out, SendOk).record.topic == "SCHEDULE_TOPIC_XXXX"


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_five_x_counts_the_separator_after_the_last_property(extra: int, accepted: bool) -> None:
    """5.2.0+ messageProperties2String ends every entry with \\x02, so the string written is one byte longer
    than the 4.9.8 encoding of the same map: 32,766 + 1 passes, 32,767 + 1 does not. The 5.x map holds the
    sent UNIQ_KEY, WAIT and value, buildMsgContext's MSG_REGION and TRACE_ON, and CLUSTER."""
    others = {
        "UNIQ_KEY": "U1",
        "WAIT": "true",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
        "CLUSTER": "DefaultCluster",
    }
    big = "v" * (32766 - props_len(others, {"big": ""}) + extra)
    model = Model(V5)
    msg = Message("T", b"x", props(UNIQ_KEY="U1", WAIT="true", big=big))
    _state, out = model.send(model.initial(), msg, 0)
    if accepted:
        record = is_a(out, SendOk).record
        assert record.size == 91 + 1 + 1 + 32766 + 1  # body, topic, properties, the separator
    else:
        assert is_a(out, Rejected).code == Code.MESSAGE_ILLEGAL


# --- put/stored-properties (5.x) ---------------------------------------------------------------------------


def test_five_x_generates_a_missing_uniq_key_and_4_9_does_not() -> None:
    """5.0.0+ sendMessage: MessageClientIDSetter.createUniqID when UNIQ_KEY is missing or empty."""
    for cfg, present in ((BrokerConfig(), False), (V5, True)):
        model = Model(cfg)
        _state, out = model.send(model.initial(), Message("T", b"x", props(k="v")), 0)
        uniq = is_a(out, SendOk).record.properties.get("UNIQ_KEY")
        assert (uniq is not None and len(uniq) == 32) is present


def test_five_x_request_properties() -> None:
    """buildMsgContext (5.0.0+) writes MSG_REGION and TRACE_ON into the request; clearReservedProperties
    (5.2.0+) deletes POP_CK; a lite topic (5.5.0) adds INNER_MULTI_DISPATCH = %LMQ%$<topic>$<lite>."""
    sent = props(UNIQ_KEY="U1", POP_CK="ck", __LITE_TOPIC="child")
    four = is_a(Model().send(Model().initial(), Message("LiteT", b"x", sent), 0)[1], SendOk).record
    assert (four.properties.get("POP_CK"), four.properties.get("MSG_REGION")) == ("ck", None)
    assert "INNER_MULTI_DISPATCH" not in four.properties
    model = Model(V5)
    five = is_a(model.send(model.initial(), Message("LiteT", b"x", sent), 0)[1], SendOk).record
    assert "POP_CK" not in five.properties
    assert (five.properties["MSG_REGION"], five.properties["TRACE_ON"]) == ("DefaultRegion", "true")
    assert five.properties["INNER_MULTI_DISPATCH"] == "%LMQ%$LiteT$child"


# --- batch ------------------------------------------------------------------------------------------------


def test_the_client_reads_every_message_before_any_body() -> None:
    """MessageBatch.generateFromList checks delay, retry, topic and WAIT of all messages before
    Validators.checkMessage looks at the first body."""
    entries = (BatchEntry(b"", props()), BatchEntry(b"b", props(DELAY="1")))
    assert "TimeDelayLevel is not supported" in (client_check(entries, "BT") or "")
    bad = (BatchEntry(b"a", props(DELAY=" 1")),)
    assert 'For input string: " 1"' in (client_check(bad, "BT") or "")


def test_the_5_5_client_refuses_timer_messages_in_a_batch() -> None:
    """5.5.0 generateFromList: getDelayTimeMs, getDelayTimeSec or getDeliverTimeMs > 0 refuse the batch."""
    entries = (BatchEntry(b"a", props(TIMER_DELAY_SEC="3")),)
    assert client_check(entries, "BT") is None
    assert "Delayed messages are not supported for batching" in (
        client_check(entries, "BT", timers_too=True) or ""
    )
    assert client_check((BatchEntry(b"a", props(TIMER_DELAY_SEC="0")),), "BT", timers_too=True) is None


def test_a_batch_with_no_messages() -> None:
    """An empty request body is decoded as null: 4.9.8 checkMessages reads its length (NullPointerException,
    SYSTEM_ERROR); 5.1.0-5.5.0 buildMsgContext reads it first (NullPointerException, SYSTEM_ERROR; observed on
    5.5.0; only 5.0.0's checkBeforePutMessage answers MESSAGE_ILLEGAL)."""
    for cfg, code in ((BrokerConfig(), Code.SYSTEM_ERROR), (V5, Code.SYSTEM_ERROR)):
        model = Model(cfg)
        _state, out = model.send_batch(model.initial(), Batch("BT", ()), 0)
        assert is_a(out, Rejected).code == code


def test_a_wrapper_delay_java_cannot_read() -> None:
    """4.9.8: the transaction type is checked before the wrapper's DELAY is parsed; 5.x's schedule hook
    parses it first for a NOT or COMMIT batch (NumberFormatException: SYSTEM_ERROR)."""
    entries = (BatchEntry(b"a", props()),)
    cases = [
        (BrokerConfig(), 0, Code.SYSTEM_ERROR),
        (BrokerConfig(), 8, Code.MESSAGE_ILLEGAL),
        (V5, 8, Code.SYSTEM_ERROR),
        (V5, 4, Code.MESSAGE_ILLEGAL),
    ]
    for cfg, sys_flag, code in cases:
        model = Model(cfg)
        batch = Batch("BT", entries, sys_flag=sys_flag, properties=props(DELAY="x"))
        _state, out = model.send_batch(model.initial(), batch, 0)
        assert is_a(out, Rejected).code == code, (cfg.profile, sys_flag)


@pytest.mark.parametrize(
    ("limit", "profile", "code"),
    [(54, Profile.V4_9, Code.MESSAGE_ILLEGAL), (54, Profile.V5, Code.SYSTEM_ERROR)],
)
def test_an_oversized_batch_body(limit: int, profile: Profile, code: Code) -> None:
    """4.9.8 checkMessages: MESSAGE_ILLEGAL; 5.x: the encoder's RuntimeException("message body size
    exceeded") reaches the remoting layer: SYSTEM_ERROR. The body is 22 + body + properties per message."""
    entries = (BatchEntry(b"abc", props(KEYS="k")), BatchEntry(b"de", props()))
    assert (22 + 3 + props_len({"KEYS": "k"})) + (22 + 2) == 55
    model = Model(BrokerConfig(max_message_size=limit, profile=profile))
    _state, out = model.send_batch(model.initial(), Batch("BT", entries), 0)
    assert is_a(out, Rejected).code == code
    model = Model(BrokerConfig(max_message_size=55, profile=profile))
    is_a(model.send_batch(model.initial(), Batch("BT", entries), 0)[1], BatchOk)

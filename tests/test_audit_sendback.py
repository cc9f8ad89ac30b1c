"""Send-back edges the spec examples cannot reach, each written from RocketMQ's source at the releases named.

Expected values come from apache/rocketmq (docs/audit/sendback.md), not from the model's output; where a
length depends on what the put stored, the test measures the original record and adds the send-back's
own properties by hand.
"""

from __future__ import annotations

from typing import TypeVar

import pytest

from rmqspec.adapters.remoting.codec import RemotingCommand
from rmqspec.adapters.remoting.server import BadRequest, Server, _reconsume_field
from rmqspec.conformance.contract import Response
from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import Code
from rmqspec.reference.model import ConsumerSendBack, Model, Pull
from rmqspec.reference.observations import PullResult, Rejected, SendBackOk, SendOk
from rmqspec.reference.properties import encode_properties
from rmqspec.reference.put import Message
from rmqspec.reference.records import Record, props
from rmqspec.reference.semantics import java_is_blank
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.state import BrokerState

T = TypeVar("T")
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def is_a(value: object, cls: type[T]) -> T:
    assert isinstance(value, cls), value
    return value


def sent_with_property(m: Model, length: int) -> tuple[BrokerState, SendOk]:
    state, out = m.send(m.initial(), Message("T", b"x", props(P="v" * length)), 0)
    return state, is_a(out, SendOk)


# --- sendback/through-schedule: which status names a properties string that became too long ----------------

# The retry copy adds RETRY_TOPIC=T, WAIT=false, DELAY=3 and ORIGIN_MESSAGE_ID=<32 hex digits>:
# 13 + 10 + 7 + 50 characters and 4 separators. The schedule rewrite then adds REAL_TOPIC=%RETRY%CG and
# REAL_QID=0: 20 + 10 characters and 2 separators.
RETRY_ADDS = 13 + 10 + 7 + 50 + 4
REWRITE_ADDS = 20 + 10 + 2


def _length_for(m: Model, retry_copy_length: int) -> int:
    """The P length whose retry copy's properties string has ``retry_copy_length`` characters."""
    _state, probe = sent_with_property(m, 1000)
    stored = len(encode_properties(probe.record.properties))
    return retry_copy_length - RETRY_ADDS - (stored - 1000)


@pytest.mark.parametrize(
    ("profile", "retry_copy_length", "status"),
    [
        (
            Profile.V4_9,
            32768,
            "MESSAGE_ILLEGAL",
        ),  # DefaultMessageStore.checkMessage: length() > Short.MAX_VALUE
        (Profile.V4_9, 32767, "PROPERTIES_SIZE_EXCEEDED"),  # passes it; the rewrite makes 32799 bytes
        (Profile.V5, 32768, "PROPERTIES_SIZE_EXCEEDED"),  # 5.x: no checkMessage, only the encoder
        (Profile.V5, 32767, "PROPERTIES_SIZE_EXCEEDED"),
    ],
)
def test_the_remark_of_a_too_long_retry_copy_names_the_store_status(
    profile: Profile, retry_copy_length: int, status: str
) -> None:
    m = Model(BrokerConfig(profile=profile))
    state, sent = sent_with_property(m, _length_for(m, retry_copy_length))
    assert retry_copy_length + REWRITE_ADDS > 32767
    _state, out = m.send_back(state, SendBack("CG", sent.record.commit_log_offset), 1000)
    assert (is_a(out, Rejected).code, is_a(out, Rejected).remark) == (Code.SYSTEM_ERROR, status)


def test_a_retry_copy_at_the_limit_minus_the_rewrite_is_stored() -> None:
    """32767 - 32 characters before the rewrite is 32767 after it: PUT_OK."""
    m = Model()
    state, sent = sent_with_property(m, _length_for(m, 32767 - REWRITE_ADDS))
    _state, out = m.send_back(state, SendBack("CG", sent.record.commit_log_offset), 1000)
    record = is_a(is_a(out, SendBackOk).record, Record)
    assert len(encode_properties(record.properties)) == 32767


# --- sendback/group-lookup: remarks -----------------------------------------------------------------------


def test_send_back_refusals_carry_rocketmqs_remarks() -> None:
    """asyncConsumerSendMsgBack (4.9.8): 'subscription group not exist, ' + group + ' ' + suggestTodo, and
    'the broker[' + brokerIP1 + '] sending message is forbidden'."""
    off = Model(BrokerConfig(auto_create_subscription_group=False))
    state, sent = sent_with_property(off, 1)
    _s, out = off.send_back(state, SendBack("G", sent.record.commit_log_offset), 1000)
    assert is_a(out, Rejected).remark == "subscription group not exist, G " + FAQ
    ro = Model(BrokerConfig(broker_writable=False, store_host=("10.0.0.7", 10911)))
    state, out2 = ro.send(ro.initial(), Message("T", b"x"), 0)
    _s, out = ro.send_back(state, SendBack("CG", is_a(out2, SendOk).record.commit_log_offset), 1000)
    assert (is_a(out, Rejected).code, is_a(out, Rejected).remark) == (
        Code.NO_PERMISSION,
        "the broker[10.0.0.7] sending message is forbidden",
    )


def test_a_retry_send_to_an_unknown_group_carries_the_same_remark() -> None:
    """handleRetryAndDLQ (4.9.8): 'subscription group not exist, ' + groupName + ' ' + suggestTodo."""
    off = Model(BrokerConfig(auto_create_subscription_group=False))
    _s, out = off.send(off.initial(), Message("%RETRY%G", b"x", reconsume_times=1), 0)
    assert (is_a(out, Rejected).code, is_a(out, Rejected).remark) == (
        Code.SUBSCRIPTION_GROUP_NOT_EXIST,
        "subscription group not exist, G " + FAQ,
    )


@pytest.mark.parametrize(
    ("group", "created"),
    [("g" * 120, True), ("g" * 121, False), ("bad group", False), ("a.b", False), ("%|-_Az09", True)],
)
def test_five_x_creates_only_groups_validate_group_accepts(group: str, created: bool) -> None:
    """5.4.0-5.5.0 findSubscriptionGroupConfig: TopicValidator.validateGroup (not blank, [%|a-zA-Z0-9_-],
    at most 120 characters) before auto-creating; 4.9.x creates any name."""
    m5 = Model(BrokerConfig(profile=Profile.V5))
    state, _sent = sent_with_property(m5, 1)
    _s, out = m5.step(state, Pull("T", 0, 0, group=group), 0)
    assert isinstance(out, PullResult) is created
    m4 = Model()
    state, _sent = sent_with_property(m4, 1)
    _s, out = m4.step(state, Pull("T", 0, 0, group=group), 0)
    assert isinstance(out, PullResult)


@pytest.mark.parametrize(
    ("release", "group", "created"),
    [
        ("5.1.0", "a.b", True),  # 5.0.0-5.1.0: no check before auto-creating
        ("5.1.0", "g" * 300, True),
        ("5.1.1", "a.b", False),  # 5.1.1 (#6142): TopicValidator.isTopicOrGroupIllegal
        ("5.1.1", "g" * 255, True),  # Validators.CHARACTER_MAX_LENGTH: > 255 is refused
        ("5.1.1", "g" * 256, False),
        ("5.3.3", "g" * 121, True),
        ("5.4.0", "g" * 121, False),  # 5.4.0: validateGroup, at most 120
    ],
)
def test_the_group_name_check_by_release(release: str, group: str, created: bool) -> None:
    """SubscriptionGroupManager.findSubscriptionGroupConfig at 5.0.0-5.3.3 (git tags) and 5.4.0: the check
    of the name before auto-creating arrives in 5.1.1 and becomes validateGroup in 5.4.0."""
    m = Model(BrokerConfig(profile=Profile.V5, release=release))
    state, _sent = sent_with_property(m, 1)
    _s, out = m.step(state, Pull("T", 0, 0, group=group), 0)
    assert isinstance(out, PullResult) is created


# --- sendback/origin-message-id: UtilAll.isBlank ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "blank"),
    [
        (None, True),
        ("", True),
        (" \t\n\r\f\u000b", True),
        ("\u001c\u001d\u001e\u001f", True),
        ("\u2003\u2028\u2029\u3000", True),  # space separators, line and paragraph separators
        ("\u00a0", False),  # no-break spaces are not whitespace to Java
        ("\u2007", False),
        ("\u202f", False),
        ("\u0085", False),  # NEL: Python's isspace says yes, Java's isWhitespace no
        (" x ", False),
    ],
)
def test_blank_is_java_character_is_whitespace(text: str | None, blank: bool) -> None:
    assert java_is_blank(text) is blank


# --- header fields read as the broker reads them -----------------------------------------------------------


def test_send_header_reconsume_fields_are_read_with_integer_parse_int() -> None:
    """SendMessageRequestHeaderV2.decode (4.9.4-4.9.8): Integer.parseInt, a bad value fails the request;
    the long names go through decodeCommandCustomHeader, which leaves a bad value null."""
    assert _reconsume_field({"j": "+3"}, "j", "reconsumeTimes") == 3
    assert _reconsume_field({"j": "\u0663"}, "j", "reconsumeTimes") == 3
    for bad in (" 3", "3_0", "", "2147483648"):
        with pytest.raises(BadRequest):
            _reconsume_field({"j": bad}, "j", "reconsumeTimes")
        assert _reconsume_field({"reconsumeTimes": bad}, "j", "reconsumeTimes") is None
    assert _reconsume_field({}, "j", "reconsumeTimes") is None


def test_a_send_back_whose_header_max_java_cannot_read_uses_the_group_limit() -> None:
    """decodeCommandCustomHeader catches the NumberFormatException: maxReconsumeTimes stays null, so the
    group's retryMaxTimes applies (the remoting server passes None to the model)."""
    seen: list[object] = []

    class Spy:
        def execute(self, op: object) -> Response:
            seen.append(op)
            return Response(0)

    server = Server.__new__(Server)
    server.target = Spy()  # type: ignore[assignment]
    for raw, expected in ((" 0", None), ("3_0", None), ("x", None), ("+2", 2), ("0", 0)):
        ext = {"group": "CG", "offset": "0", "delayLevel": "0", "maxReconsumeTimes": raw}
        server._send_back(RemotingCommand(code=36, ext_fields=ext), ("127.0.0.1", 1))
        assert is_a(seen[-1], ConsumerSendBack).request.max_reconsume_times == expected, raw

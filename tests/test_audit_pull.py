"""Pull answers the spec examples cannot pin, each written from PullMessageProcessor and getMessage's source.

Expected values come from apache/rocketmq at the releases named (docs/audit/pull.md), not from the model.
"""

from __future__ import annotations

from typing import TypeVar

from rmqspec.adapters.inprocess import to_response
from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import Code, PullStatus
from rmqspec.reference.model import Model, Pull
from rmqspec.reference.observations import PullResult, Rejected, SendOk
from rmqspec.reference.put import Message
from rmqspec.reference.state import BrokerState

T = TypeVar("T")


def is_a(value: object, cls: type[T]) -> T:
    assert isinstance(value, cls), value
    return value


def two_messages(m: Model) -> BrokerState:
    state = m.initial()
    for body in (b"a", b"b"):
        state, out = m.send(state, Message("P", body), 0)
        is_a(out, SendOk)
    return state


def test_the_queue_id_remark_names_the_consumers_socket_address() -> None:
    """processRequest: String.format("... consumer:[%s]", channel.remoteAddress()); an InetSocketAddress
    without a host name prints as /ip:port."""
    m = Model()
    state = two_messages(m)
    _state, out = m.step(state, Pull("P", 4, 0, client=("10.1.2.3", 61000)), 0)
    bad = is_a(out, Rejected)
    assert bad.code == Code.SYSTEM_ERROR
    assert bad.remark == (
        "queueId[4] is illegal, topic:[P] topicConfig.readQueueNums:[4] consumer:[/10.1.2.3:61000]"
    )
    assert is_a(m.pull(state, "P", -1, 0), Rejected).remark.endswith("consumer:[/127.0.0.1:50000]")


def test_five_x_answers_invalid_parameter_29() -> None:
    """5.3.2-5.5.0 (apache/rocketmq #9028): ResponseCode.INVALID_PARAMETER = 29."""
    m = Model(BrokerConfig(profile=Profile.V5))
    out = is_a(m.pull(two_messages(m), "P", 4, 0), Rejected)
    assert (int(out.code), out.code.name) == (29, "INVALID_PARAMETER")


def test_a_queue_never_written_to_is_no_message_in_queue() -> None:
    """getMessage: findConsumeQueue creates the queue, maxOffset == 0 -> NO_MESSAGE_IN_QUEUE, next 0."""
    m = Model()
    state = two_messages(m)
    for offset, code in ((0, Code.PULL_NOT_FOUND), (7, Code.PULL_OFFSET_MOVED)):
        r = is_a(m.pull(state, "P", 3, offset), PullResult)
        assert (r.code, r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (
            code,
            PullStatus.NO_MESSAGE_IN_QUEUE,
            0,
            0,
            0,
        )


def test_overflow_badly_points_back_to_the_max_offset() -> None:
    """4.9.4-4.9.8 and 5.x: nextBeginOffset = nextOffsetCorrection(offset, maxOffset) = maxOffset on a master."""
    m = Model()
    r = is_a(m.pull(two_messages(m), "P", 0, 9), PullResult)
    assert (r.code, r.status, r.next_begin_offset) == (
        Code.PULL_OFFSET_MOVED,
        PullStatus.OFFSET_OVERFLOW_BADLY,
        2,
    )


def test_the_remark_of_a_pull_is_the_store_status_name() -> None:
    """processRequest / composeResponseHeader: response.setRemark(getMessageResult.getStatus().name())."""
    m = Model()
    state = two_messages(m)
    assert to_response(m.pull(state, "P", 0, 0)).remark == "FOUND"
    assert to_response(m.pull(state, "P", 0, 2)).remark == "OFFSET_OVERFLOW_ONE"
    assert to_response(m.pull(state, "P", 1, 0)).remark == "NO_MESSAGE_IN_QUEUE"


def test_a_pull_creates_its_group_and_an_unknown_one_is_refused_without_auto_create() -> None:
    """processRequest starts with findSubscriptionGroupConfig: auto-creates (a step's new state keeps it), or
    answers SUBSCRIPTION_GROUP_NOT_EXIST; a CID_RMQ_SYS_ group is always created (isSysConsumerGroup)."""
    m = Model()
    state, _out = m.step(two_messages(m), Pull("P", 0, 0, group="G1"), 0)
    assert "G1" in state.groups
    off = Model(BrokerConfig(auto_create_subscription_group=False))
    state = two_messages(off)
    same, out = off.step(state, Pull("P", 0, 0, group="G1"), 0)
    bad = is_a(out, Rejected)
    assert bad.code == Code.SUBSCRIPTION_GROUP_NOT_EXIST and same is state
    assert bad.remark == (
        "subscription group [G1] does not exist, \nSee http://rocketmq.apache.org/docs/faq/ for further details."
    )
    state, out = off.step(state, Pull("P", 0, 0, group="CID_RMQ_SYS_X"), 0)
    assert is_a(out, PullResult).code == Code.SUCCESS and "CID_RMQ_SYS_X" in state.groups


def test_the_group_is_looked_at_before_the_topic() -> None:
    """Order in processRequest: group, then topic: an unknown group on an unknown topic is code 26."""
    off = Model(BrokerConfig(auto_create_subscription_group=False))
    out = off.pull(off.initial(), "NoSuchTopic", 0, 0, group="G1")
    assert is_a(out, Rejected).code == Code.SUBSCRIPTION_GROUP_NOT_EXIST

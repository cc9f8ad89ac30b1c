"""CONSUMER_SEND_MSG_BACK: consumer retry to %RETRY%<group> and the DLQ (facts §4.1), in the broker's order."""

from __future__ import annotations

import attrs

from .constants import Code, Prop, dlq_topic, retry_topic
from .observations import Rejected, SendBackOk
from .put import ensure_topic, group_config, store_put
from .records import Inner
from .semantics import Semantics
from .state import BrokerState, with_props


@attrs.frozen
class SendBack:
    """The CONSUMER_SEND_MSG_BACK request header."""

    group: str
    offset: int  # commit-log offset of the message the consumer failed
    delay_level: int = 0
    max_reconsume_times: int | None = None
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    version: int = 401


def send_back(
    state: BrokerState, req: SendBack, now: int, sem: Semantics, queue_choice: int = 0
) -> tuple[BrokerState, SendBackOk | Rejected]:
    """Steps 1-11 of facts §4.1. ``queue_choice`` is the broker's random draw for the retry queue."""
    cfg = state.config
    found = group_config(state, req.group, sem)
    if found is None:
        return state, Rejected(
            Code.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group not exist, {req.group} \nSee {sem.faq_url()} for further details.",
            "sendback/group-lookup",
        )
    state, gc = found
    if not cfg.broker_writable:  # brokerIP1 in the remark: the model's store host
        return state, Rejected(
            Code.NO_PERMISSION,
            f"the broker[{cfg.store_host[0]}] sending message is forbidden",
            "sendback/group-lookup",
        )
    retry_queues = sem.retry_queue_count(gc.retry_queue_nums)
    if retry_queues <= 0:
        # rule: sendback/no-retry-queues
        return state, SendBackOk(record=None, dropped=True)
    topic = retry_topic(req.group)  # rule: sendback/retry-topic
    queue_id = sem.retry_queue_id(queue_choice, retry_queues)
    state = ensure_topic(state, topic, retry_queues)
    msg = state.store.lookup(req.offset)
    if msg is None:
        # rule: sendback/lookup-by-offset
        miss = sem.send_back_miss(
            Rejected(
                Code.SYSTEM_ERROR, f"look message by offset failed, {req.offset}", "sendback/lookup-by-offset"
            )
        )
        return state, SendBackOk(record=None, dropped=True) if miss is None else miss
    p = msg.properties
    if p.get(Prop.RETRY_TOPIC) is None or not sem.keeps_retry_topic():
        p = with_props(p, RETRY_TOPIC=msg.topic)  # rule: sendback/retry-topic-property
    max_times = gc.retry_max_times  # rule: sendback/max-reconsume-times
    if sem.honours_header_max(req.version) and req.max_reconsume_times is not None:
        max_times = req.max_reconsume_times
    p = with_props(p, WAIT="false")
    delay_level = req.delay_level
    if sem.sendback_to_dlq(msg.reconsume_times, max_times, delay_level):
        # rule: sendback/dlq-route
        topic = dlq_topic(req.group)
        queue_id = 0
        state = ensure_topic(state, topic, 1)
        p = with_props(p, DELAY=sem.sendback_dlq_delay(msg.reconsume_times))
    else:
        delay_level = sem.sendback_delay_level(delay_level, msg.reconsume_times)
        p = with_props(
            p, DELAY=sem.retry_copy_delay(delay_level)
        )  # clamped at put time: rule: sendback/through-schedule
    origin = sem.origin_message_id(p.get(Prop.ORIGIN_MESSAGE_ID), msg.msg_id, msg.uniq_key)
    p = with_props(p, ORIGIN_MESSAGE_ID=origin)  # rule: sendback/origin-message-id
    inner = Inner(
        topic=topic,
        queue_id=queue_id,
        body=msg.body,
        properties=p,
        sys_flag=msg.sys_flag,
        flag=msg.flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_host=msg.store_host,
        reconsume_times=sem.next_reconsume_times(msg.reconsume_times),
    )
    result = store_put(state, inner, now, sem)
    if isinstance(result, Rejected):
        # Any status but PUT_OK: SYSTEM_ERROR, the status's name as the remark (facts §4.1 step 11).
        return state, Rejected(Code.SYSTEM_ERROR, result.status or result.code.name, result.rule)
    state, record = result
    return state, SendBackOk(record=record)

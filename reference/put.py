"""The put path: send-processor checks, the half and delay rewrites, append and dispatch (facts §1, §2, §5.2)."""

from __future__ import annotations

import re

import attrs
from pyrsistent import pvector

from .constants import (
    HALF_TOPIC,
    PERM_RW,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    TOPIC_MAX_LENGTH,
    TRANSACTION_NOT_TYPE,
    Code,
    Prop,
    dlq_topic,
    reset_transaction_value,
    transaction_value,
)
from .observations import Rejected, SendOk
from .properties import encode_properties, java_string_hash
from .records import Inner, Props, Record, stored_size
from .semantics import Semantics
from .state import BrokerState, GroupConfig, TopicConfig, store_append, with_props

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


@attrs.frozen
class Message:
    """What a producer sends (SendMessageRequestHeader and body)."""

    topic: str
    body: bytes = b""
    properties: Props = attrs.field(factory=lambda: Props())
    queue_id: int = 0
    sys_flag: int = 0
    flag: int = 0
    born_timestamp: int | None = None  # None: the broker's now
    born_host: tuple[str, int] = ("127.0.0.1", 50000)
    producer_group: str = "PG"
    reconsume_times: int | None = None
    max_reconsume_times: int | None = None
    default_topic_queue_nums: int = 4
    version: int = 401  # MQVersion ordinal of the client


def parse_delay(properties: Props) -> int | Rejected:
    """``getDelayTimeLevel``: Integer.parseInt of DELAY, 0 when absent. rule: put/delay-eligibility"""
    raw = properties.get(Prop.DELAY)
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        return Rejected(Code.SYSTEM_ERROR, f'For input string: "{raw}"', "put/delay-eligibility")


def validate_topic(state: BrokerState, topic: str, sem: Semantics) -> Rejected | None:
    """TopicValidator and the topics clients may not send to. rule: put/topic-validation, put/forbidden-topic"""
    if not topic:
        return Rejected(Code.SYSTEM_ERROR, "The specified topic is blank.", "put/topic-validation")
    if not _TOPIC_RE.match(topic):
        return Rejected(
            Code.SYSTEM_ERROR,
            f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
            "put/topic-validation",
        )
    if len(topic) > sem.topic_max_length():
        return Rejected(
            Code.SYSTEM_ERROR,
            f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}.",
            "put/topic-validation",
        )
    if sem.forbidden_topic(topic):
        return Rejected(
            Code.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.", "put/forbidden-topic"
        )
    return None


def resolve_topic(
    state: BrokerState, topic: str, default_queue_nums: int, sem: Semantics
) -> tuple[BrokerState, TopicConfig] | Rejected:
    """Find the topic, or auto-create it from TBW102 (retry topics with 1 queue). rule: put/topic-auto-create"""
    existing = state.topics.get(topic)
    if existing is not None:
        return state, existing
    cfg = state.config
    if cfg.auto_create_topic:
        default = state.topics.get("TBW102")
        queues = sem.auto_create_queue_nums(default_queue_nums, default.write_queues if default else 8)
        tc = TopicConfig(queues, queues)
        return state.with_topic(topic, tc), tc
    if topic.startswith(RETRY_PREFIX):
        tc = TopicConfig(1, 1)
        return state.with_topic(topic, tc), tc
    return Rejected(
        Code.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!", "put/topic-auto-create"
    )


def ensure_topic(state: BrokerState, topic: str, queues: int, perm: int = PERM_RW) -> BrokerState:
    """Create a system-made topic (retry, DLQ, half, discard) when missing."""
    if topic in state.topics:
        return state
    return state.with_topic(topic, TopicConfig(queues, queues, perm))


def group_config(state: BrokerState, group: str) -> tuple[BrokerState, GroupConfig] | None:
    """findSubscriptionGroupConfig with auto-create. rule: sendback/group-lookup"""
    gc = state.groups.get(group)
    if gc is not None:
        return state, gc
    if not state.config.auto_create_subscription_group:
        return None
    gc = GroupConfig(state.config.retry_queue_nums, state.config.retry_max_times)
    return attrs.evolve(state, groups=state.groups.set(group, gc)), gc


# --- the store: CommitLog.asyncPutMessage ----------------------------------------------------------------


def store_put(
    state: BrokerState, inner: Inner, now: int, sem: Semantics
) -> tuple[BrokerState, Record] | Rejected:
    """Put one message into the store: the delay rewrite, then append. rule: put/delay-eligibility"""
    cfg = state.config
    if len(inner.topic.encode()) > TOPIC_MAX_LENGTH:
        return Rejected(
            Code.MESSAGE_ILLEGAL, "message topic length too long", "put/message-illegal", "MESSAGE_ILLEGAL"
        )
    tran_type = transaction_value(inner.sys_flag)
    level = parse_delay(inner.properties)
    if isinstance(level, Rejected):
        return level
    if sem.delay_eligible(tran_type, level):
        # rule: put/delay-clamp, put/delay-schedule-queue
        level = sem.clamp_delay_level(level, cfg.max_delay_level)
        new_props = with_props(
            inner.properties,
            DELAY=str(level),
            REAL_TOPIC=inner.topic,
            REAL_QID=sem.real_qid(inner.queue_id),
        )
        inner = attrs.evolve(
            inner,
            topic=SCHEDULE_TOPIC,
            queue_id=sem.schedule_queue_id(level),
            properties=new_props,
            stored=None,  # the properties string is rebuilt from the map
        )
    stored = inner.stored_properties()
    if len(encode_properties(stored).encode()) > sem.properties_max_length():
        return Rejected(
            Code.MESSAGE_ILLEGAL,
            "message properties length too long",
            "put/message-illegal",
            "PROPERTIES_SIZE_EXCEEDED",
        )
    if stored_size(inner.body, inner.topic, stored) > cfg.max_message_size:
        # doAppend: MESSAGE_SIZE_EXCEEDED becomes MESSAGE_ILLEGAL (facts §1.3)
        return Rejected(
            Code.MESSAGE_ILLEGAL, "message size exceeded", "put/message-illegal", "MESSAGE_ILLEGAL"
        )
    return append(state, inner, now, sem)


def append(state: BrokerState, inner: Inner, now: int, sem: Semantics) -> tuple[BrokerState, Record]:
    """DefaultAppendMessageCallback.doAppend: queue offset from topicQueueTable. rule: put/queue-offset"""
    store = state.store
    key = (inner.topic, inner.queue_id)
    tran_type = transaction_value(inner.sys_flag)
    advances = sem.advances_queue_offset(tran_type)
    queue_offset = store.counters.get(key, 0) if advances else 0
    stored = inner.stored_properties()
    read_back = sem.read_back(stored)
    if read_back is not None:
        stored = Props(read_back)
    record = Record(
        commit_log_offset=store.end,
        size=stored_size(inner.body, inner.topic, stored) + inner.extra_size,
        topic=inner.topic,
        queue_id=inner.queue_id,
        queue_offset=queue_offset,
        sys_flag=inner.sys_flag,
        flag=inner.flag,
        body=inner.body,
        properties=stored,
        born_timestamp=inner.born_timestamp,
        store_timestamp=now,
        born_host=inner.born_host,
        store_host=inner.store_host,
        reconsume_times=inner.reconsume_times,
        prepared_transaction_offset=inner.prepared_transaction_offset,
    )
    store = store_append(store, record)
    if advances:
        store = attrs.evolve(store, counters=store.counters.set(key, queue_offset + 1))
    return attrs.evolve(state, store=store), record


# --- dispatch: ReputMessageService -----------------------------------------------------------------------


def tags_code(record: Record, state: BrokerState, sem: Semantics) -> int:
    """Tags hash, or for schedule entries the deliver time. rule: dispatch/tags-code, dispatch/schedule-tags-code"""
    code = 0
    tags = record.properties.get(Prop.TAGS)
    if tags:
        code = java_string_hash(tags)
    if record.topic == SCHEDULE_TOPIC:
        raw = record.properties.get(Prop.DELAY)
        if raw is not None:
            try:
                level = int(raw)
            except ValueError:
                level = 0
            cfg = state.config
            level = min(level, cfg.max_delay_level)
            if level > 0:
                code = sem.schedule_tags_code(
                    record.store_timestamp, sem.delay_ms_for(cfg.delay_levels, level)
                )
    return code


def dispatch(state: BrokerState, sem: Semantics) -> BrokerState:
    """Build consume queues from the commit log, in order, from the reput offset to the end.

    rule: dispatch/in-order, dispatch/transaction-types
    """
    store = state.store
    if store.reput >= len(store.records):
        return state
    cqs = store.cqs.mutate()
    for pos in sem.dispatch_order(store.reput, len(store.records)):
        record = store.records[pos]
        if not sem.dispatchable(record.tran_type):
            continue
        key = (record.topic, record.queue_id)
        cq = cqs.get(key, pvector())
        if record.queue_offset < len(cq):  # a repeat of an already dispatched offset is ignored (facts §2)
            continue
        entry = (record.commit_log_offset, record.size, tags_code(record, state, sem))
        at = sem.schedule_entry_index(cq, entry[2]) if record.topic == SCHEDULE_TOPIC else len(cq)
        cqs[key] = cq.append(entry) if at == len(cq) else pvector([*cq[:at], entry, *cq[at:]])
    new_store = attrs.evolve(store, cqs=cqs.finish(), reput=len(store.records))
    return attrs.evolve(state, store=new_store)


# --- SendMessageProcessor.asyncSendMessage ---------------------------------------------------------------


def msg_check(
    state: BrokerState, topic: str, queue_id: int, default_queue_nums: int, sem: Semantics, queue_choice: int
) -> tuple[BrokerState, int] | Rejected:
    """AbstractSendMessageProcessor.msgCheck, shared by single and batch sends: the topic, then the queue.

    A queueId < 0 becomes the broker's random pick modulo writeQueueNums (``queue_choice``).
    rule: put/topic-validation, put/forbidden-topic, put/topic-auto-create, put/queue-id-range
    """
    bad = validate_topic(state, topic, sem)
    if bad is not None:
        return bad
    resolved = resolve_topic(state, topic, default_queue_nums, sem)
    if isinstance(resolved, Rejected):
        return resolved
    state, tc = resolved
    if not sem.queue_id_allowed(queue_id, max(tc.write_queues, tc.read_queues)):
        return Rejected(
            Code.SYSTEM_ERROR,
            f"request queueId[{queue_id}] is illegal, topic {topic} {tc}",
            "put/queue-id-range",
        )
    return state, queue_id if queue_id >= 0 else queue_choice % tc.write_queues


def send(
    state: BrokerState, msg: Message, now: int, sem: Semantics, queue_choice: int = 0
) -> tuple[BrokerState, SendOk | Rejected]:
    """Store one message sent by a producer. ``queue_choice`` is the broker's random pick for queueId < 0."""
    cfg = state.config
    checked = msg_check(state, msg.topic, msg.queue_id, msg.default_topic_queue_nums, sem, queue_choice)
    if isinstance(checked, Rejected):
        return state, checked
    state, queue_id = checked
    topic = msg.topic
    props = msg.properties
    if topic.startswith(RETRY_PREFIX):
        routed = retry_and_dlq(state, msg, queue_id, sem)
        if isinstance(routed, Rejected):
            return state, routed
        state, topic, queue_id, props = routed
    # rule: put/stored-properties: CLUSTER added; WAIT kept in the map but not in the stored string
    props = with_props(props, CLUSTER=cfg.cluster_name)
    stored = sem.single_stored(props)
    born = now if msg.born_timestamp is None else msg.born_timestamp
    inner = Inner(
        topic=topic,
        queue_id=queue_id,
        body=msg.body,
        properties=props,
        stored=stored,
        sys_flag=msg.sys_flag,
        flag=msg.flag,
        born_timestamp=born,
        born_host=msg.born_host,
        store_host=cfg.store_host,
        reconsume_times=msg.reconsume_times or 0,
    )
    if props.get(Prop.TRAN_MSG, "").lower() == "true" and sem.rewrites_half():
        if cfg.reject_transaction_message:
            return state, Rejected(
                Code.NO_PERMISSION,
                f"the broker[{cfg.store_host[0]}] sending transaction message is forbidden",
                "put/reject-transaction-message",
            )
        inner = half_message(inner)
        state = ensure_topic(state, HALF_TOPIC, 1)
    result = store_put(state, inner, now, sem)
    if isinstance(result, Rejected):
        return state, result
    state, record = result
    return state, SendOk(
        queue_id=sem.send_result_queue_id(queue_id, record.queue_id),
        queue_offset=record.queue_offset,
        msg_id=record.msg_id,
        record=record,
    )


def half_message(inner: Inner) -> Inner:
    """parseHalfMessageInner: REAL_TOPIC / REAL_QID, sysFlag reset to NOT, half topic queue 0.

    rule: transaction/half-message
    """
    return attrs.evolve(
        inner,
        topic=HALF_TOPIC,
        queue_id=0,
        sys_flag=reset_transaction_value(inner.sys_flag, TRANSACTION_NOT_TYPE),
        properties=with_props(inner.properties, REAL_TOPIC=inner.topic, REAL_QID=str(inner.queue_id)),
        stored=None,  # the properties string is rebuilt from the map
    )


def retry_and_dlq(
    state: BrokerState, msg: Message, queue_id: int, sem: Semantics
) -> tuple[BrokerState, str, int, Props] | Rejected:
    """handleRetryAndDLQ for a normal send to ``%RETRY%<group>``. rule: sendback/retry-send-dlq

    On 4.9.8 the DLQ route sets DELAY 0 on the message object, but the request's properties replace the
    map afterwards, so a client-supplied DELAY survives and the message passes the schedule topic first.
    """
    group = msg.topic[len(RETRY_PREFIX) :]
    found = group_config(state, group)
    if found is None:
        return Rejected(
            Code.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group not exist, {group}",
            "sendback/group-lookup",
        )
    state, gc = found
    max_times = gc.retry_max_times
    if (
        sem.honours_header_max(msg.version) and msg.max_reconsume_times is not None
    ):  # rule: sendback/max-reconsume-times
        max_times = msg.max_reconsume_times
    reconsume = msg.reconsume_times or 0
    if sem.retry_send_to_dlq(reconsume, max_times):
        dlq = dlq_topic(group)
        state = ensure_topic(state, dlq, 1)
        kept = sem.retry_send_dlq_delay(msg.properties.get(Prop.DELAY))
        return state, dlq, 0, with_props(msg.properties, DELAY=kept)
    return state, msg.topic, queue_id, msg.properties

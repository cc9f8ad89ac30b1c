"""The put path: send-processor checks, the half and delay rewrites, append and dispatch (facts §1, §2, §5.2)."""

from __future__ import annotations

import attrs
from pyrsistent import pvector

from . import timer as _timer
from .constants import (
    HALF_TOPIC,
    PERM_RW,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    SYS_CONSUMER_GROUP_PREFIX,
    TIMER_TOPIC,
    TRANSACTION_NOT_TYPE,
    Code,
    Prop,
    dlq_topic,
    reset_transaction_value,
    transaction_value,
)
from .javanum import parse_int
from .observations import Rejected, SendOk
from .properties import java_string_hash
from .records import RECORD_FIXED_SIZE, Inner, Props, Record, offset_msg_id
from .semantics import Semantics
from .state import BrokerState, GroupConfig, TopicConfig, store_append, with_props

# What encode/append refuse: a body over maxMessageSize, and a whole record over maxMessageSize + 64 KiB
# (MessageExtEncoder, 4.9.5+ and 5.x). rule: put/message-illegal
RECORD_SLACK = 64 * 1024


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


def number_format(raw: str, rule: str) -> Rejected:
    """What a send whose property Java cannot parse gets: Integer.parseInt throws NumberFormatException, no
    one catches it on the put path, and the remoting layer answers SYSTEM_ERROR with the exception's text
    (``RemotingHelper.exceptionSimpleDesc``: the exception, then its first stack frame, which depends on the
    JVM; the model's remark is the part before that)."""
    return Rejected(
        Code.SYSTEM_ERROR, f'java.lang.NumberFormatException: For input string: "{raw}"', rule, "exception"
    )


def empty_body_npe(rule: str = "put/message-illegal") -> Rejected:
    """5.1.0-5.5.0: ``SendMessageProcessor.processRequest`` builds its message context first, and
    ``buildMsgContext`` reads ``request.getBody().length``; an empty body was decoded as none, so that throws
    and the remoting layer answers SYSTEM_ERROR with the exception's text (then a stack frame)."""
    return Rejected(
        Code.SYSTEM_ERROR,
        "java.lang.NullPointerException: Cannot read the array length because the return value of "
        '"org.apache.rocketmq.remoting.protocol.RemotingCommand.getBody()" is null',
        rule,
        "exception",
    )


def parse_delay(properties: Props) -> int | Rejected:
    """``getDelayTimeLevel``: Integer.parseInt of DELAY, 0 when absent. rule: put/delay-eligibility"""
    raw = properties.get(Prop.DELAY)
    if raw is None:
        return 0
    level = parse_int(raw)
    return number_format(raw, "put/delay-eligibility") if level is None else level


def illegal(cfg_max_message_size: int, status: str) -> Rejected:
    """MESSAGE_ILLEGAL or PROPERTIES_SIZE_EXCEEDED from the store, as SendMessageProcessor answers them.

    rule: put/message-illegal
    """
    return Rejected(
        Code.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched. "
        f"msg body length limit {cfg_max_message_size}B, msg properties length limit 32KB.",
        "put/message-illegal",
        status,
    )


def validate_topic(state: BrokerState, topic: str, sem: Semantics) -> Rejected | None:
    """TopicValidator.validateTopic and the topics clients may not send to.

    rule: put/topic-validation, put/forbidden-topic
    """
    remark = sem.topic_name_problem(topic)
    if remark is not None:
        return Rejected(sem.invalid_request_code(), remark, "put/topic-validation")
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
        template = default.write_queues if default else state.config.default_topic_queue_nums
        queues = max(0, sem.auto_create_queue_nums(default_queue_nums, template))  # "if (queueNums < 0) ..."
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


def group_config(state: BrokerState, group: str, sem: Semantics) -> tuple[BrokerState, GroupConfig] | None:
    """findSubscriptionGroupConfig: the group, else a new one with the defaults when
    autoCreateSubscriptionGroup is on or the name starts with CID_RMQ_SYS_ (MixAll.isSysConsumerGroup), and
    (5.5.0) the name passes TopicValidator.validateGroup. rule: sendback/group-lookup
    """
    gc = state.groups.get(group)
    if gc is not None:
        return state, gc
    if not (state.config.auto_create_subscription_group or group.startswith(SYS_CONSUMER_GROUP_PREFIX)):
        return None
    if not sem.creatable_group_name(group, state.config):
        return None
    gc = GroupConfig(state.config.retry_queue_nums, state.config.retry_max_times)
    return attrs.evolve(state, groups=state.groups.set(group, gc)), gc


# --- the store: CommitLog.asyncPutMessage ----------------------------------------------------------------


def store_put(
    state: BrokerState, inner: Inner, now: int, sem: Semantics
) -> tuple[BrokerState, Record] | Rejected:
    """Put one message into the store: the store's checks, the delay rewrite, the encoder's limits, append.

    4.9.8: ``DefaultMessageStore.asyncPutMessage`` (checkMessage), then ``CommitLog.asyncPutMessage`` (the
    delay rewrite) and ``MessageExtEncoder.encode``. 5.5.0: the put hooks (``HookUtils.checkBeforePutMessage``,
    ``handleScheduleMessage``, whose timer part comes before the delay rewrite: ``timer.put_hook``),
    then the commit log. rule: put/delay-eligibility, put/message-illegal, timer/timer-message
    """
    cfg = state.config
    refused = sem.store_refuses(
        inner.topic, inner.body, inner.properties, inner.stored_properties(), inner.sys_flag
    )
    if refused is not None:
        return illegal(cfg.max_message_size, refused)
    tran_type = transaction_value(inner.sys_flag)
    if sem.delay_eligible(tran_type, 1):  # only NOT and COMMIT messages read DELAY at all
        level = parse_delay(inner.properties)
        if isinstance(level, Rejected):
            return level
        if level <= 0 and sem.has_timer() and inner.topic != TIMER_TOPIC:
            timed = _timer.put_hook(inner, now, sem, state)  # 5.x: before the delay rewrite
            if isinstance(timed, Rejected):
                return timed
            inner = timed
        if sem.delay_eligible(tran_type, level):
            inner = delay_rewrite(inner, level, cfg.max_delay_level, sem)
    stored = inner.stored_properties()
    props_bytes = sem.properties_bytes(stored) if inner.props_bytes is None else inner.props_bytes
    if props_bytes > sem.properties_max_length():
        return illegal(cfg.max_message_size, "PROPERTIES_SIZE_EXCEEDED")
    if len(inner.body) > cfg.max_message_size or record_size(inner, props_bytes, sem) > (
        cfg.max_message_size + RECORD_SLACK
    ):
        return illegal(cfg.max_message_size, "MESSAGE_ILLEGAL")
    return append(state, inner, now, sem)


def delay_rewrite(inner: Inner, level: int, max_level: int, sem: Semantics) -> Inner:
    """The rewrite into the schedule topic. ``DELAY`` is only set again when the level is clamped; any other
    value stays as it was sent ("+3", "03"). rule: put/delay-clamp, put/delay-schedule-queue
    """
    clamped = sem.clamp_delay_level(level, max_level)
    # 5.x: the timer properties leave (checkIfTimerMessage), except in the timer topic, which skips that check
    props = sem.delay_props(inner.properties) if inner.topic != TIMER_TOPIC else inner.properties
    new_props = with_props(
        props,
        DELAY=str(clamped) if clamped != level else props.get(Prop.DELAY),
        REAL_TOPIC=inner.topic,
        REAL_QID=sem.real_qid(inner.queue_id),
    )
    return attrs.evolve(
        inner,
        topic=SCHEDULE_TOPIC,
        queue_id=sem.schedule_queue_id(clamped),
        properties=new_props,
        stored=None,  # the properties string is rebuilt from the map
        props_bytes=None,
    )


def record_size(inner: Inner, props_bytes: int, sem: Semantics) -> int:
    """The stored record's length (``calMsgLength``, IPv4 hosts): 91 bytes, body, topic, properties."""
    topic = len(inner.topic.encode())
    return RECORD_FIXED_SIZE + len(inner.body) + topic + sem.topic_length_extra(inner.topic) + props_bytes


def append(state: BrokerState, inner: Inner, now: int, sem: Semantics) -> tuple[BrokerState, Record]:
    """DefaultAppendMessageCallback.doAppend: queue offset from topicQueueTable. rule: put/queue-offset"""
    store = state.store
    key = (inner.topic, inner.queue_id)
    tran_type = transaction_value(inner.sys_flag)
    advances = sem.advances_queue_offset(tran_type)
    queue_offset = store.counters.get(key, 0) if advances else 0
    stored = inner.stored_properties()
    props_bytes = sem.properties_bytes(stored) if inner.props_bytes is None else inner.props_bytes
    read_back = sem.read_back(stored)
    if read_back is not None:
        stored = Props(read_back)
    record = Record(
        commit_log_offset=store.end,
        size=record_size(inner, props_bytes, sem),
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
            # Integer.parseInt; a put never stores a schedule record Java cannot read (the put fails first)
            level = parse_int(raw) or 0
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
            sem.invalid_request_code(),
            f"request queueId[{queue_id}] is illegal, topic {topic} {tc}",
            "put/queue-id-range",
        )
    return state, queue_id if queue_id >= 0 else queue_choice % tc.write_queues


def send(
    state: BrokerState, msg: Message, now: int, sem: Semantics, queue_choice: int = 0
) -> tuple[BrokerState, SendOk | Rejected]:
    """Store one message sent by a producer. ``queue_choice`` is the broker's random pick for queueId < 0.

    4.9.8: ``SendMessageProcessor.asyncSendMessage``; 5.5.0: ``SendMessageProcessor.sendMessage``.
    """
    cfg = state.config
    if not msg.body and sem.empty_body_npe():
        return state, empty_body_npe()
    props = sem.request_properties(msg.properties, cfg.region_id, True)  # rule: put/stored-properties
    checked = msg_check(state, msg.topic, msg.queue_id, msg.default_topic_queue_nums, sem, queue_choice)
    if isinstance(checked, Rejected):
        return state, checked
    state, queue_id = checked
    response_queue = queue_id  # rule: put/send-result: the resolved queue, whatever the DLQ route does
    topic = msg.topic
    if topic.startswith(RETRY_PREFIX):
        routed = retry_and_dlq(state, msg, props, queue_id, sem)
        if isinstance(routed, Rejected):
            return state, routed
        state, topic, queue_id, props = routed
    # rule: put/stored-properties: 5.x adds a missing UNIQ_KEY (a stand-in for createUniqID: the offset
    # message id the record will have, unique and deterministic)
    uniq = sem.generated_uniq_key(props, offset_msg_id(cfg.store_host, state.store.end))
    if uniq is not None:
        props = with_props(props, UNIQ_KEY=uniq)
    props = sem.lite_topic(props, msg.topic)
    props, prio_queue = sem.priority_queue(props, queue_id, state.topics[msg.topic].write_queues)
    if prio_queue != queue_id:
        queue_id = response_queue = prio_queue
    # rule: put/stored-properties: CLUSTER added; 4.9.1-4.9.8 keep WAIT in the map but not in the string
    props = with_props(props, CLUSTER=cfg.cluster_name)
    stored = with_props(props, WAIT=None) if sem.strips_wait() and Prop.WAIT in props else None
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
    half = sem.half_message_wanted(props, msg.reconsume_times or 0)
    if half == "parse":  # 5.x reads DELAY here: a retried, delayed TRAN_MSG message is not a half message
        level = parse_delay(props)
        if isinstance(level, Rejected):
            return state, level
        half = level <= 0
    if half and sem.rewrites_half():
        if cfg.reject_transaction_message:
            return state, Rejected(
                Code.NO_PERMISSION,
                f"the broker[{cfg.store_host[0]}] sending transaction message is forbidden",
                "put/reject-transaction-message",
            )
        inner = half_message(
            inner, sem
        )  # rule: timer/transactional: type NOT now, so the timer hook takes it
        state = ensure_topic(state, HALF_TOPIC, 1)
    result = store_put(state, inner, now, sem)
    if isinstance(result, Rejected):
        return state, result
    state, record = result
    return state, SendOk(
        queue_id=sem.send_result_queue_id(response_queue, record.queue_id),
        queue_offset=record.queue_offset,
        msg_id=record.msg_id,
        record=record,
    )


def half_message(inner: Inner, sem: Semantics) -> Inner:
    """parseHalfMessageInner: REAL_TOPIC / REAL_QID, sysFlag reset to NOT, half topic queue 0.

    rule: transaction/half-message
    """
    real = with_props(inner.properties, REAL_TOPIC=inner.topic, REAL_QID=str(inner.queue_id))
    return attrs.evolve(
        inner,
        topic=HALF_TOPIC,
        queue_id=0,
        sys_flag=reset_transaction_value(inner.sys_flag, TRANSACTION_NOT_TYPE),
        properties=sem.half_properties(real),
        stored=None,  # the properties string is rebuilt from the map
    )


def retry_and_dlq(
    state: BrokerState, msg: Message, props: Props, queue_id: int, sem: Semantics
) -> tuple[BrokerState, str, int, Props] | Rejected:
    """handleRetryAndDLQ for a normal send to ``%RETRY%<group>``. rule: sendback/retry-send-dlq

    On 4.9.8 the DLQ route sets DELAY 0 on the message object, but the request's properties replace the
    map afterwards, so a client-supplied DELAY survives and the message passes the schedule topic first.
    """
    group = msg.topic[len(RETRY_PREFIX) :]
    found = group_config(state, group, sem)
    if found is None:
        return Rejected(
            Code.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group not exist, {group} \nSee {sem.faq_url()} for further details.",
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
        kept = sem.retry_send_dlq_delay(props.get(Prop.DELAY))
        return state, dlq, 0, with_props(props, DELAY=kept)
    return state, msg.topic, queue_id, props

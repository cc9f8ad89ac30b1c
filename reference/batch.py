"""Batch messages: the client's rules and the broker's (facts §1.4)."""

from __future__ import annotations

import attrs

from . import timer as _timer
from .constants import (
    PROPERTIES_MAX_LENGTH,
    RETRY_PREFIX,
    TIMER_TOPIC,
    TOPIC_MAX_LENGTH,
    TRANSACTION_NOT_TYPE,
    Code,
    Prop,
    transaction_value,
)
from .javanum import parse_long
from .observations import BatchOk, Rejected
from .properties import PROPERTY_SEPARATOR, encode_properties
from .put import append, empty_body_npe, msg_check, parse_delay, store_put
from .records import Inner, Props, Record
from .semantics import Semantics
from .state import BrokerState, with_props


@attrs.frozen
class BatchEntry:
    """One message inside a batch."""

    body: bytes
    properties: Props
    flag: int = 0
    topic: str | None = None  # the client-side message's topic (None: the batch topic)


@attrs.frozen
class Batch:
    """SEND_BATCH_MESSAGE: the wrapper header plus its inner messages."""

    topic: str
    entries: tuple[BatchEntry, ...]
    queue_id: int = 0
    sys_flag: int = 0
    properties: Props = attrs.field(factory=lambda: Props())  # the wrapper's own properties
    born_timestamp: int | None = None
    born_host: tuple[str, int] = ("127.0.0.1", 50000)
    default_topic_queue_nums: int = 4


def _wait(p: Props) -> bool:
    return p.get(Prop.WAIT, "true").lower() != "false"


_CLIENT_TIMER_PROPS = (Prop.TIMER_DELAY_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELIVER_MS)


def client_check(
    entries: tuple[BatchEntry, ...],
    topic: str,
    max_message_size: int = 4 * 1024 * 1024,
    *,
    timers_too: bool = False,
) -> str | None:
    """MessageBatch.generateFromList, then Validators.checkMessage per message: a reason, or None when the
    client builds the batch.

    generateFromList looks at every message first (delay, retry topic, same topic, same waitStoreMsgOK), and
    only then is each message validated (body). The delay level is read with Integer.parseInt, which throws
    on a DELAY Java cannot read. ``timers_too``: the 5.5.0 client also refuses a positive TIMER_DELAY_MS,
    TIMER_DELAY_SEC or TIMER_DELIVER_MS ("Delayed messages are not supported for batching").
    rule: batch/client-rules
    """
    if not entries:
        return "the batch is empty"
    first_topic = entries[0].topic or topic
    first_wait = _wait(entries[0].properties)
    for n, e in enumerate(entries):
        level = parse_delay(e.properties)
        if isinstance(level, Rejected):
            return f"{level.remark} (message {n})"
        delayed = level > 0
        if timers_too:
            for k in _CLIENT_TIMER_PROPS:
                raw = e.properties.get(k)
                value = parse_long(raw) if raw is not None else 0
                if value is None:
                    return f'java.lang.NumberFormatException: For input string: "{raw}" (message {n})'
                delayed = delayed or value > 0
        if delayed:
            if timers_too:
                return f"Delayed messages are not supported for batching (message {n})"
            return f"TimeDelayLevel is not supported for batching (message {n})"
        t = e.topic or topic
        if t.startswith(RETRY_PREFIX):
            return f"Retry Group is not supported for batching (message {n})"
        if n and t != first_topic:
            return f"The topic of the messages in one batch should be the same (message {n})"
        if n and _wait(e.properties) != first_wait:
            return f"The waitStoreMsgOK of the messages in one batch should the same (message {n})"
    for n, e in enumerate(entries):
        if not e.body:
            return f"the message body length is zero (message {n})"
        if len(e.body) > max_message_size:
            return f"the message body size over max value, MAX: {max_message_size} (message {n})"
    return None


def _client_props_bytes(p: Props) -> int:
    # The properties string of one message as the client encodes it into the batch body.
    return len(encode_properties(p).encode())


def send_batch(
    state: BrokerState, batch: Batch, now: int, sem: Semantics, queue_choice: int = 0
) -> tuple[BrokerState, BatchOk | Rejected]:
    """Store a batch: the broker's refusals, then each inner message as a normal record.

    4.9.8: ``SendMessageProcessor.asyncSendBatchMessage``, ``DefaultMessageStore.checkMessages`` (body
    size), ``CommitLog.asyncPutMessages`` (transaction type, wrapper DELAY) and the batch encoder. 5.5.0:
    ``sendBatchMessage`` (retry topics), the put hooks (``checkBeforePutMessage``, the schedule hook reading
    the wrapper's DELAY), ``CommitLog.asyncPutMessages`` and the encoder, which throws on an oversized body.
    An inner DELAY is stored but never read: the messages are visible at once.
    rule: batch/broker-illegal, batch/inner-delay-ignored, batch/consecutive-offsets
    """
    cfg = state.config
    if not batch.entries and sem.empty_body_npe():
        return state, empty_body_npe("batch/broker-illegal")
    wrapper_sent = sem.request_properties(batch.properties, cfg.region_id, True)
    checked = msg_check(state, batch.topic, batch.queue_id, batch.default_topic_queue_nums, sem, queue_choice)
    if isinstance(checked, Rejected):
        return state, checked
    state, queue_id = checked
    if len(batch.topic) > TOPIC_MAX_LENGTH:  # only a 5.4.0+ retry or DLQ name gets this far
        return state, Rejected(
            Code.MESSAGE_ILLEGAL, f"message topic length too long {len(batch.topic)}", "batch/broker-illegal"
        )
    if batch.topic.startswith(RETRY_PREFIX) and sem.batch_rejects_retry_topic():
        return state, Rejected(
            Code.MESSAGE_ILLEGAL,
            f"batch request does not support retry group {batch.topic}",
            "batch/broker-illegal",
        )
    body_size = sum(22 + len(e.body) + _client_props_bytes(e.properties) for e in batch.entries)
    topic = batch.topic
    if sem.batch_oversize_is_exception():
        refused = _refuse_5_5(batch, body_size, cfg.max_message_size, sem, state, now)
        if isinstance(refused, str):
            topic, refused = refused, None  # rule: timer/timer-message: the wrapper was a timer message
    else:
        refused = _refuse_4_9(batch, body_size, cfg.max_message_size, sem)
    if refused is not None:
        return state, refused
    wrapper = with_props(wrapper_sent, CLUSTER=cfg.cluster_name)
    wrapper_bytes = sem.properties_bytes(wrapper) if sem.batch_stores_wrapper_properties() else 0
    born = now if batch.born_timestamp is None else batch.born_timestamp
    records: list[Record] = []
    for e in batch.entries:
        inner_bytes = _client_props_bytes(e.properties)
        if wrapper_bytes:
            # rule: batch/stored-properties: the inner string, a separator unless it ends with one (4.9.3+),
            # then the wrapper's; a reader's map lets the wrapper win
            stored = sem.batch_stored(e.properties, wrapper)
            sep = 1 if inner_bytes and not encode_properties(e.properties).endswith(PROPERTY_SEPARATOR) else 0
            props_bytes = inner_bytes + sep + wrapper_bytes
        else:
            # rule: batch/stored-properties: 5.4.0+ stores each message's own string and nothing else
            stored, props_bytes = e.properties, inner_bytes
        inner = Inner(
            topic=topic,
            queue_id=0 if topic == TIMER_TOPIC else queue_id,
            body=e.body,
            properties=stored,
            sys_flag=batch.sys_flag,
            flag=e.flag,
            born_timestamp=born,
            born_host=batch.born_host,
            store_host=cfg.store_host,
            props_bytes=props_bytes,
        )
        if sem.batch_inner_delay_ignored():  # rule: batch/inner-delay-ignored
            state, record = append(state, inner, now, sem)
        else:
            put = store_put(state, inner, now, sem)
            if isinstance(put, Rejected):
                return state, put
            state, record = put
        records.append(record)
    return state, BatchOk(
        queue_id=queue_id,
        queue_offset=sem.batch_result_offset([r.queue_offset for r in records]),
        msg_id=",".join(r.msg_id for r in records),
        records=tuple(records),
    )


def _refuse_4_9(batch: Batch, body_size: int, max_size: int, sem: Semantics) -> Rejected | None:
    """4.9.8: checkMessages (a missing body throws, a body over maxMessageSize is MESSAGE_ILLEGAL), then
    asyncPutMessages (transaction type, then the wrapper's DELAY), then the encoder (wrapper properties).
    rule: batch/broker-illegal
    """
    if not batch.entries:  # an empty request body is null: checkMessages reads its length
        return Rejected(
            Code.SYSTEM_ERROR, "java.lang.NullPointerException", "batch/broker-illegal", "exception"
        )
    if body_size > max_size:
        return Rejected(Code.MESSAGE_ILLEGAL, "PutMessages body length too long", "batch/broker-illegal")
    if transaction_value(batch.sys_flag) != TRANSACTION_NOT_TYPE:
        return Rejected(Code.MESSAGE_ILLEGAL, "tran type not supported in batch", "batch/broker-illegal")
    level = parse_delay(batch.properties)
    if isinstance(level, Rejected):
        return attrs.evolve(level, rule="batch/broker-illegal")
    if level > 0 and sem.batch_rejects_wrapper_delay():
        return Rejected(Code.MESSAGE_ILLEGAL, "delay level not supported in batch", "batch/broker-illegal")
    if sem.properties_bytes(batch.properties) > PROPERTIES_MAX_LENGTH:
        return Rejected(
            Code.SYSTEM_ERROR,
            "java.lang.RuntimeException: Properties size of messageExtBatch exceeded!",
            "batch/broker-illegal",
            "exception",
        )
    return None


def _refuse_5_5(
    batch: Batch, body_size: int, max_size: int, sem: Semantics, state: BrokerState, now: int
) -> Rejected | str | None:
    """5.5.0: the put hooks (a missing body; the schedule hook reads the wrapper's DELAY of a NOT or COMMIT
    batch, and takes a wrapper with timer properties and no DELAY > 0 for a timer message: the batch goes
    to the timer topic, which is returned), then asyncPutMessages (transaction type, DELAY > 0), then the
    encoder, whose oversized-body RuntimeException nobody catches: SYSTEM_ERROR.
    rule: batch/broker-illegal, timer/timer-message
    """
    if not batch.entries:  # 5.0.0: the put hook's null body (5.1.0+ throws earlier: send_batch)
        return Rejected(Code.MESSAGE_ILLEGAL, "message body is null", "batch/broker-illegal")
    tran = transaction_value(batch.sys_flag)
    level: int | Rejected = 0
    redirect: str | None = None
    if sem.delay_eligible(tran, 1):
        level = parse_delay(batch.properties)
        if isinstance(level, Rejected):
            return attrs.evolve(level, rule="batch/broker-illegal")
        if level <= 0 and sem.has_timer() and batch.topic != TIMER_TOPIC:
            wrapper = Inner(topic=batch.topic, queue_id=batch.queue_id, body=b"", properties=batch.properties)
            timed = _timer.put_hook(wrapper, now, sem, state)
            if isinstance(timed, Rejected):
                return timed
            redirect = timed.topic if timed.topic == TIMER_TOPIC else None
    if tran != TRANSACTION_NOT_TYPE:
        return Rejected(Code.MESSAGE_ILLEGAL, "tran type not supported in batch", "batch/broker-illegal")
    if isinstance(level, int) and level > 0 and sem.batch_rejects_wrapper_delay():
        return Rejected(Code.MESSAGE_ILLEGAL, "delay level not supported in batch", "batch/broker-illegal")
    if body_size > max_size:
        return Rejected(
            Code.SYSTEM_ERROR,
            "java.lang.RuntimeException: message body size exceeded",
            "batch/broker-illegal",
            "exception",
        )
    return redirect

"""Batch messages: the client's rules and the broker's (facts §1.4)."""

from __future__ import annotations

import attrs

from .constants import (
    RETRY_PREFIX,
    TRANSACTION_NOT_TYPE,
    Code,
    Prop,
    transaction_value,
)
from .observations import BatchOk, Rejected
from .properties import encode_properties
from .put import append, msg_check, parse_delay, store_put
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


def client_check(
    entries: tuple[BatchEntry, ...], topic: str, max_message_size: int = 4 * 1024 * 1024
) -> str | None:
    """MessageBatch.generateFromList and Validators.checkMessage: a reason, or None when the batch is legal.

    rule: batch/client-rules
    """
    if not entries:
        return "the batch is empty"
    first_wait = _wait(entries[0].properties)
    for n, e in enumerate(entries):
        level = parse_delay(e.properties)
        if isinstance(level, Rejected) or level > 0:
            return f"TimeDelayLevel is not supported for batching (message {n})"
        t = e.topic or topic
        if t.startswith(RETRY_PREFIX):
            return f"Retry Group is not supported for batching (message {n})"
        if t != (entries[0].topic or topic):
            return f"The topic of the messages in one batch should be the same (message {n})"
        if _wait(e.properties) != first_wait:
            return f"The waitStoreMsgOK of the messages in one batch should the same (message {n})"
        if not e.body:
            return f"the message body length is zero (message {n})"
        if len(e.body) > max_message_size:
            return f"the message body size over max value, MAX: {max_message_size} (message {n})"
    return None


def send_batch(
    state: BrokerState, batch: Batch, now: int, sem: Semantics, queue_choice: int = 0
) -> tuple[BrokerState, BatchOk | Rejected]:
    """Store a batch: the broker's MESSAGE_ILLEGAL cases, then each inner message as a normal record.

    An inner DELAY is stored but ignored on 4.9.8 (derived): the messages are visible at once.
    rule: batch/broker-illegal, batch/inner-delay-ignored, batch/consecutive-offsets
    """
    cfg = state.config
    checked = msg_check(state, batch.topic, batch.queue_id, batch.default_topic_queue_nums, sem, queue_choice)
    if isinstance(checked, Rejected):
        return state, checked
    state, queue_id = checked
    if transaction_value(batch.sys_flag) != TRANSACTION_NOT_TYPE:
        return state, Rejected(
            Code.MESSAGE_ILLEGAL, "tran type not supported in batch", "batch/broker-illegal"
        )
    if batch.topic.startswith(RETRY_PREFIX) and sem.batch_rejects_retry_topic():
        return state, Rejected(
            Code.MESSAGE_ILLEGAL, "batch request does not support retry group", "batch/broker-illegal"
        )
    wrapper_delay = parse_delay(batch.properties)
    if isinstance(wrapper_delay, Rejected) or (wrapper_delay > 0 and sem.batch_rejects_wrapper_delay()):
        return state, Rejected(
            Code.MESSAGE_ILLEGAL, "delay level not supported in batch", "batch/broker-illegal"
        )
    body_size = sum(
        20 + len(e.body) + 2 + len(encode_properties(e.properties).encode()) for e in batch.entries
    )
    if body_size > cfg.max_message_size:
        return state, Rejected(Code.MESSAGE_ILLEGAL, "message body size exceeded", "batch/broker-illegal")
    if not batch.entries:
        return state, Rejected(Code.MESSAGE_ILLEGAL, "the batch is empty", "batch/broker-illegal")
    wrapper = with_props(batch.properties, CLUSTER=cfg.cluster_name)
    born = now if batch.born_timestamp is None else batch.born_timestamp
    records: list[Record] = []
    for e in batch.entries:
        # Stored: the inner properties string, then the wrapper's; a reader's map lets the wrapper win.
        stored = sem.batch_stored(e.properties, wrapper)  # rule: batch/stored-properties
        raw = len(encode_properties(e.properties).encode()) + len(encode_properties(wrapper).encode())
        raw += 1 if e.properties and wrapper else 0
        inner = Inner(
            topic=batch.topic,
            queue_id=queue_id,
            body=e.body,
            properties=stored,
            sys_flag=batch.sys_flag,
            flag=e.flag,
            born_timestamp=born,
            born_host=batch.born_host,
            store_host=cfg.store_host,
            extra_size=raw - len(encode_properties(stored).encode()),
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

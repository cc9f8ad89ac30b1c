"""What a consumer sees: PULL_MESSAGE, GET_MAX_OFFSET, VIEW_MESSAGE_BY_ID, QUERY_MESSAGE (facts §2, §8)."""

from __future__ import annotations

from .constants import TRANSACTION_ROLLBACK_TYPE, Code, PullStatus
from .observations import Found, MaxOffset, PullResult, Rejected
from .state import BrokerState

MAX_PULL_BATCH = 32  # maxTransferCountOnMessageInMemory


def pull(
    state: BrokerState,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_msgs: int = 32,
    overflow_one_code: Code = Code.PULL_NOT_FOUND,
) -> PullResult | Rejected:
    """Read up to ``max_msgs`` dispatched entries of (topic, queue) from ``offset``.

    rule: pull/status-codes, pull/found, pull/unknown-topic, pull/queue-id-range
    """
    tc = state.topics.get(topic)
    if tc is None:
        return Rejected(
            Code.TOPIC_NOT_EXIST,
            f"topic[{topic}] not exist, apply first please!",
            "pull/unknown-topic",
        )
    if queue_id < 0 or queue_id >= tc.read_queues:
        return Rejected(
            Code.SYSTEM_ERROR,
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queues}] "
            f"consumer:[{group}]",
            "pull/queue-id-range",
        )
    key = (topic, queue_id)
    store = state.store
    cq = store.cqs.get(key)
    if cq is None:
        code = Code.PULL_NOT_FOUND if offset == 0 else Code.PULL_OFFSET_MOVED
        return PullResult(code, PullStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    min_offset, max_offset = 0, len(cq)
    if max_offset == 0:
        code = Code.PULL_NOT_FOUND if offset == 0 else Code.PULL_OFFSET_MOVED
        return PullResult(code, PullStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
    if offset < min_offset:
        return PullResult(
            Code.PULL_OFFSET_MOVED, PullStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset
        )
    if offset == max_offset:
        return PullResult(overflow_one_code, PullStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if offset > max_offset:
        return PullResult(
            Code.PULL_OFFSET_MOVED, PullStatus.OFFSET_OVERFLOW_BADLY, min_offset, min_offset, max_offset
        )
    n = max(0, min(max_msgs, MAX_PULL_BATCH, max_offset - offset))
    records = []
    for i in range(offset, offset + n):
        rec = store.lookup(cq[i][0])
        if rec is not None:
            records.append(rec)
    return PullResult(Code.SUCCESS, PullStatus.FOUND, offset + n, min_offset, max_offset, tuple(records))


def max_offset(state: BrokerState, topic: str, queue_id: int) -> MaxOffset:
    """GET_MAX_OFFSET: the next consume-queue offset; 0 for a queue that does not exist. rule: dispatch/max-offset"""
    return MaxOffset(state.store.max_offset(topic, queue_id))


def view(state: BrokerState, commit_log_offset: int) -> Found | Rejected:
    """VIEW_MESSAGE_BY_ID by commit-log offset. rule: put/commit-log-lookup"""
    rec = state.store.lookup(commit_log_offset)
    if rec is None:
        return Rejected(
            Code.SYSTEM_ERROR,
            f"can not find message by the offset, {commit_log_offset}",
            "put/commit-log-lookup",
        )
    return Found((rec,))


def query_uniq(state: BrokerState, topic: str, uniq_key: str) -> Found | Rejected:
    """QUERY_MESSAGE by UNIQ_KEY (``_UNIQUE_KEY_QUERY``): every stored record of that topic with the key.

    rule: put/commit-log-lookup
    """
    offsets = state.store.uniq.get(uniq_key, ())
    found = []
    for clo in offsets:
        rec = state.store.lookup(clo)
        # IndexService.buildIndex indexes NOT, PREPARED and COMMIT records, never a ROLLBACK one
        if rec is not None and rec.topic == topic and rec.tran_type != TRANSACTION_ROLLBACK_TYPE:
            found.append(rec)
    if not found:
        return Rejected(
            Code.QUERY_NOT_FOUND,
            "can not find message, maybe time range not correct",
            "put/commit-log-lookup",
        )
    return Found(tuple(found))

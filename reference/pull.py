"""What a consumer sees: PULL_MESSAGE, GET_MAX_OFFSET, VIEW_MESSAGE_BY_ID, QUERY_MESSAGE (facts §2, §8)."""

from __future__ import annotations

from .constants import TRANSACTION_ROLLBACK_TYPE, Code, PullStatus
from .observations import Found, MaxOffset, PullResult, Rejected
from .put import group_config
from .records import Host
from .semantics import REFERENCE, Semantics
from .state import BrokerState

MAX_PULL_BATCH = 32  # maxTransferCountOnMessageInMemory
DEFAULT_CLIENT: Host = ("127.0.0.1", 50000)  # the consumer's address when the caller does not know it


def socket_address(host: Host) -> str:
    """``InetSocketAddress.toString()`` of a connection's remote address: ``/ip:port`` (no host name)."""
    return f"/{host[0]}:{host[1]}"


def pull_request(
    state: BrokerState,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_msgs: int = 32,
    sem: Semantics = REFERENCE,
    client: Host = DEFAULT_CLIENT,
) -> tuple[BrokerState, PullResult | Rejected]:
    """PullMessageProcessor.processRequest: the group (found or auto-created), the topic, the queue id, then
    the store's getMessage. The new state holds an auto-created group.

    rule: sendback/group-lookup, pull/unknown-topic, pull/queue-id-range
    """
    found = group_config(state, group, sem)
    if found is None:
        return state, Rejected(
            Code.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group [{group}] does not exist, {faq(sem)}",
            "sendback/group-lookup",
        )
    state, _gc = found
    tc = state.topics.get(topic)
    if tc is None:
        return state, Rejected(
            Code.TOPIC_NOT_EXIST,
            f"topic[{topic}] not exist, apply first please! {faq(sem)}",
            "pull/unknown-topic",
        )
    if queue_id < 0 or queue_id >= tc.read_queues:
        return state, Rejected(
            sem.pull_queue_illegal_code(),
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queues}] "
            f"consumer:[{socket_address(client)}]",
            "pull/queue-id-range",
        )
    return state, get_message(state, topic, queue_id, offset, max_msgs, sem)


def pull(
    state: BrokerState,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_msgs: int = 32,
    sem: Semantics = REFERENCE,
    client: Host = DEFAULT_CLIENT,
) -> PullResult | Rejected:
    """The answer of ``pull_request`` alone. rule: pull/status-codes, pull/found"""
    return pull_request(state, group, topic, queue_id, offset, max_msgs, sem, client)[1]


def faq(sem: Semantics) -> str:
    """``FAQUrl.suggestTodo(url)``: the tip appended to several remarks."""
    return f"\nSee {sem.faq_url()} for further details."


def get_message(
    state: BrokerState, topic: str, queue_id: int, offset: int, max_msgs: int, sem: Semantics
) -> PullResult | Rejected:
    """DefaultMessageStore.getMessage and the status-to-code table of PullMessageProcessor.

    ``findConsumeQueue`` creates a queue that does not exist yet, so a queue nothing was written to is
    NO_MESSAGE_IN_QUEUE like an empty one (NO_MATCHED_LOGIC_QUEUE never happens). rule: pull/status-codes
    """
    cq = state.store.cq(topic, queue_id)
    min_offset, max_offset = 0, len(cq)
    if max_offset == 0:
        code = Code.PULL_NOT_FOUND if offset == 0 else Code.PULL_OFFSET_MOVED
        return PullResult(code, PullStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
    if offset < min_offset:
        return PullResult(
            Code.PULL_OFFSET_MOVED, PullStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset
        )
    if offset == max_offset:
        return PullResult(
            sem.overflow_one_code(), PullStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset
        )
    if offset > max_offset:  # 4.9.4-4.9.8, 5.0.0-5.5.0: nextBeginOffset = maxOffset
        return PullResult(
            Code.PULL_OFFSET_MOVED, PullStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset
        )
    if max_msgs < 0 and sem.negative_batch_fails():  # new GetMessageResult(maxMsgNums): ArrayList(-n) throws
        return Rejected(
            Code.SYSTEM_ERROR,
            f"java.lang.IllegalArgumentException: Illegal Capacity: {max_msgs}",
            "pull/found",
        )
    # rule: pull/found. isTheBatchFull is false while nothing is taken, so the first entry is always read,
    # even for maxMsgNums <= 0; then at most maxMsgNums and maxTransferCountOnMessageInMemory (32).
    n = min(max(max_msgs, 1), MAX_PULL_BATCH, max_offset - offset)
    records = []
    for i in range(offset, offset + n):
        rec = state.store.lookup(cq[i][0])
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

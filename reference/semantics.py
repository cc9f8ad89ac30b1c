"""The decision points of the model: small pure functions, each citing its rule.

They carry CrossHair contracts (PEP 316 ``pre:``/``post:`` docstring conditions) that ``make crosshair``
checks symbolically. ``Semantics`` groups them so that a profile (5.x) or a mutant (a realistic broker
bug, see ``rmqspec.conformance.mutants``) is a subclass overriding one decision, while the mechanics
around it stay the reference's.
"""

from __future__ import annotations

from collections.abc import Sequence

from .constants import (
    NOT_ALLOWED_SEND_TOPICS,
    PROPERTIES_MAX_LENGTH,
    TOPIC_MAX_LENGTH,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    V3_4_9,
    Code,
)
from .observations import PullResult, Rejected
from .properties import as_read_back
from .records import Props
from .state import with_props


def clamp_delay_level(level: int, max_level: int) -> int:
    """A level above the table's maximum is stored as the maximum. rule: put/delay-clamp

    pre: level > 0
    pre: max_level > 0
    post: 1 <= __return__ <= max_level
    post: __return__ == min(level, max_level)
    """
    return max_level if level > max_level else level


def schedule_queue_id(level: int) -> int:
    """Schedule queue of a level: ``delayLevel2QueueId = level - 1``. rule: put/delay-schedule-queue

    pre: level >= 1
    post: __return__ == level - 1
    post: __return__ >= 0
    """
    return level - 1


def delay_eligible(tran_type: int, level: int) -> bool:
    """Only NOT and COMMIT messages with DELAY > 0 are rewritten. rule: put/delay-eligibility

    post: __return__ == ((tran_type == 0 or tran_type == 8) and level > 0)
    """
    return tran_type in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE) and level > 0


def schedule_tags_code(store_timestamp: int, delay_ms: int | None) -> int:
    """Deliver time written as the tags code of a schedule entry. rule: dispatch/schedule-tags-code

    A level missing from the table means one second.
    post: __return__ == store_timestamp + (1000 if delay_ms is None else delay_ms)
    """
    return store_timestamp + (1000 if delay_ms is None else delay_ms)


def correct_deliver_timestamp(now: int, tags_code: int, delay_ms: int) -> int:
    """correctDeliverTimestamp: a deliver time beyond ``now + delay`` is taken as ``now``.

    rule: schedule/deliver-clamp
    pre: delay_ms >= 0
    post: __return__ <= now + delay_ms
    post: __return__ == tags_code or __return__ == now
    """
    return now if tags_code > now + delay_ms else tags_code


def is_due(deliver_ts: int, now: int) -> bool:
    """A schedule entry is delivered once ``deliverTs - now <= 0``. rule: schedule/due-time

    post: __return__ == (now >= deliver_ts)
    """
    return deliver_ts - now <= 0


def dispatchable(tran_type: int) -> bool:
    """Only NOT and COMMIT records reach a consume queue. rule: dispatch/transaction-types

    post: __return__ == (tran_type in (0, 8))
    """
    return tran_type in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


def advances_queue_offset(tran_type: int) -> bool:
    """PREPARED and ROLLBACK records are stored at queue offset 0 without advancing. rule: put/queue-offset

    post: __return__ == (tran_type not in (4, 12))
    """
    return tran_type not in (4, 12)


def sendback_to_dlq(reconsume_times: int, max_reconsume_times: int, delay_level: int) -> bool:
    """DLQ when reconsumeTimes >= max or the consumer asked for delayLevel < 0. rule: sendback/dlq-route

    post: __return__ == (reconsume_times >= max_reconsume_times or delay_level < 0)
    """
    return reconsume_times >= max_reconsume_times or delay_level < 0


def sendback_delay_level(delay_level: int, reconsume_times: int) -> int:
    """Level 0 means "broker decides": 3 + reconsumeTimes. rule: sendback/delay-level, sendback/ladder

    pre: delay_level >= 0
    pre: reconsume_times >= 0
    post: __return__ >= 1
    post: delay_level > 0 or __return__ == 3 + reconsume_times
    """
    return 3 + reconsume_times if delay_level == 0 else delay_level


def next_reconsume_times(reconsume_times: int) -> int:
    """Each send-back adds one, on the DLQ path too. rule: sendback/reconsume-times

    post: __return__ == reconsume_times + 1
    """
    return reconsume_times + 1


def retry_send_to_dlq(reconsume_times: int, max_reconsume_times: int) -> bool:
    """A normal send to %RETRY% goes to the DLQ at ``>=`` on 4.9.x. rule: sendback/retry-send-dlq

    post: __return__ == (reconsume_times >= max_reconsume_times)
    """
    return reconsume_times >= max_reconsume_times


def check_immunity_ms(value: str | None, transaction_timeout_ms: int) -> int:
    """CHECK_IMMUNITY_TIME_IN_SECONDS × 1000; -1 or unparsable means transactionTimeout (4.9.x).

    rule: transaction/check-immunity
    post: value is not None or __return__ == transaction_timeout_ms
    post: value != "-1" or __return__ == transaction_timeout_ms
    """
    if value is None:
        return transaction_timeout_ms
    try:
        seconds = int(value)
    except ValueError:
        return transaction_timeout_ms
    return transaction_timeout_ms if seconds == -1 else seconds * 1000


def must_discard(check_times: int, check_max: int) -> bool:
    """A half message considered with TRANSACTION_CHECK_TIMES >= transactionCheckMax is discarded.

    rule: transaction/check-discard
    post: __return__ == (check_times >= check_max)
    """
    return check_times >= check_max


def check_due(age_ms: int, immunity_ms: int) -> bool:
    """A half message is checked once its age exceeds the immunity (or the clock went back).

    rule: transaction/check-timeout
    post: __return__ == (age_ms > immunity_ms or age_ms <= -1)
    """
    return age_ms > immunity_ms or age_ms <= -1


class Semantics:
    """The reference's decisions (4.9.x). Subclasses: the 5.x profile and the mutants."""

    name = "reference"

    def clamp_delay_level(self, level: int, max_level: int) -> int:
        return clamp_delay_level(level, max_level)

    def schedule_queue_id(self, level: int) -> int:
        return schedule_queue_id(level)

    def delay_eligible(self, tran_type: int, level: int) -> bool:
        return delay_eligible(tran_type, level)

    def schedule_tags_code(self, store_timestamp: int, delay_ms: int | None) -> int:
        return schedule_tags_code(store_timestamp, delay_ms)

    def correct_deliver_timestamp(self, now: int, tags_code: int, delay_ms: int) -> int:
        return correct_deliver_timestamp(now, tags_code, delay_ms)

    def is_due(self, deliver_ts: int, now: int) -> bool:
        return is_due(deliver_ts, now)

    def dispatchable(self, tran_type: int) -> bool:
        return dispatchable(tran_type)

    def advances_queue_offset(self, tran_type: int) -> bool:
        return advances_queue_offset(tran_type)

    def sendback_to_dlq(self, reconsume_times: int, max_reconsume_times: int, delay_level: int) -> bool:
        return sendback_to_dlq(reconsume_times, max_reconsume_times, delay_level)

    def sendback_delay_level(self, delay_level: int, reconsume_times: int) -> int:
        return sendback_delay_level(delay_level, reconsume_times)

    def next_reconsume_times(self, reconsume_times: int) -> int:
        return next_reconsume_times(reconsume_times)

    def retry_send_to_dlq(self, reconsume_times: int, max_reconsume_times: int) -> bool:
        return retry_send_to_dlq(reconsume_times, max_reconsume_times)

    def retry_send_dlq_delay(self, client_delay: str | None) -> str | None:
        """DELAY a routed-to-DLQ normal send keeps: on 4.9.8 the request's own (it survives).

        rule: sendback/retry-send-dlq
        """
        return client_delay

    def check_immunity_ms(self, value: str | None, transaction_timeout_ms: int) -> int:
        return check_immunity_ms(value, transaction_timeout_ms)

    def must_discard(self, check_times: int, check_max: int) -> bool:
        return must_discard(check_times, check_max)

    def check_due(self, age_ms: int, immunity_ms: int) -> bool:
        return check_due(age_ms, immunity_ms)

    def end_tx_idempotent(self) -> bool:
        """4.9.x applies a second END_TRANSACTION again. rule: transaction/not-idempotent"""
        return False

    # -- mechanics switches: the reference's choice, named so that a mutant can change one ----------------

    def forbidden_topic(self, topic: str) -> bool:
        """rule: put/forbidden-topic"""
        return topic in NOT_ALLOWED_SEND_TOPICS

    def rewrites_half(self) -> bool:
        """A TRAN_MSG message goes to the half topic. rule: transaction/half-message"""
        return True

    def delay_ms_for(self, delay_levels: tuple[int, ...], level: int) -> int | None:
        """The delay of a level in the table. rule: dispatch/schedule-tags-code"""
        return delay_levels[level - 1] if 1 <= level <= len(delay_levels) else None

    def real_qid(self, queue_id: int) -> str:
        """REAL_QID keeps the original queue. rule: put/delay-schedule-queue"""
        return str(queue_id)

    def delivered_stored(self, stored: Props) -> Props:
        """The delivered copy's stored properties: the schedule copy's own (4.9.x). rule: schedule/delivered-copy"""
        return stored

    def sendback_dlq_delay(self, reconsume_times: int) -> str:
        """DELAY on the send-back DLQ path is "0": no schedule hop. rule: sendback/dlq-route"""
        return "0"

    def keeps_retry_topic(self) -> bool:
        """RETRY_TOPIC is set once. rule: sendback/retry-topic-property"""
        return True

    def origin_message_id(self, existing: str | None, offset_msg_id: str, uniq_key: str | None) -> str:
        """ORIGIN_MESSAGE_ID: the existing non-blank value, else the offset message id.

        rule: sendback/origin-message-id
        """
        return existing if existing and existing.strip() else offset_msg_id

    def honours_header_max(self, version: int) -> bool:
        """The header's maxReconsumeTimes counts from version V3_4_9 (121). rule: sendback/max-reconsume-times"""
        return version >= V3_4_9

    def rollback_writes_message(self) -> bool:
        """rule: transaction/rollback"""
        return False

    def on_unknown(self) -> str:
        """What END_TRANSACTION UNKNOW does: "nothing" (reference), "commit" or "op". rule: transaction/unknown"""
        return "nothing"

    def checks_producer_group(self) -> bool:
        """rule: transaction/commit-checks"""
        return True

    def committed_sys_flag(self, sys_flag: int) -> int:
        """rule: transaction/committed-message"""
        return (sys_flag & ~0xC) | TRANSACTION_COMMIT_TYPE

    def committed_stored(self, stored: Props) -> Props:
        """The committed message stores the half record's properties as they are (4.9.x).

        rule: transaction/committed-message
        """
        return stored

    def prepared_offset(self, half_commit_log_offset: int) -> int:
        """rule: transaction/committed-message"""
        return half_commit_log_offset

    def op_body(self, half_queue_offset: int, half_commit_log_offset: int) -> str:
        """rule: transaction/op-message"""
        return str(half_queue_offset)

    def next_check_times(self, seen: int) -> int:
        """rule: transaction/check-times"""
        return seen + 1

    def batch_rejects_wrapper_delay(self) -> bool:
        """rule: batch/broker-illegal"""
        return True

    def batch_rejects_retry_topic(self) -> bool:
        """A batch to a %RETRY% topic is stored as an ordinary batch at 4.9.8. rule: batch/broker-illegal"""
        return False

    def overflow_one_code(self) -> Code:
        """Pulling at exactly the max offset answers PULL_NOT_FOUND. rule: pull/status-codes"""
        return Code.PULL_NOT_FOUND

    # -- further decision points, one per rule a broker can get wrong (the mutants override them) --------

    def read_back(self, stored: Props) -> dict[str, str] | None:
        """What a reader decodes from the stored properties string (None: ``stored`` itself).

        rule: properties/encoding, properties/lenient-decoding
        """
        return as_read_back(stored)

    def topic_max_length(self) -> int:
        """rule: put/topic-validation"""
        return TOPIC_MAX_LENGTH

    def auto_create_queue_nums(self, requested: int, template_write_queues: int) -> int:
        """An auto-created topic's queue count. rule: put/topic-auto-create"""
        return min(requested, template_write_queues)

    def queue_id_allowed(self, queue_id: int, queue_count: int) -> bool:
        """A send's queue id against the larger queue count. rule: put/queue-id-range"""
        return queue_id < queue_count

    def properties_max_length(self) -> int:
        """rule: put/message-illegal"""
        return PROPERTIES_MAX_LENGTH

    def send_result_queue_id(self, resolved: int, stored_queue_id: int) -> int:
        """The send result names the queue the request resolved to. rule: put/send-result"""
        return resolved

    def single_stored(self, props: Props) -> Props | None:
        """A single message's stored properties: the map without WAIT (None: the map). rule: put/stored-properties"""
        return with_props(props, WAIT=None) if "WAIT" in props else None

    def dispatch_order(self, start: int, end: int) -> range:
        """The commit log is dispatched in order. rule: dispatch/in-order"""
        return range(start, end)

    def reported_max_offset(self, entries: int) -> int:
        """rule: dispatch/max-offset"""
        return entries

    def view_miss(self, rejected: Rejected) -> Rejected:
        """VIEW_MESSAGE_BY_ID of an offset with no record. rule: put/commit-log-lookup"""
        return rejected

    def pull_answer(
        self, read_queues: int | None, queue_id: int, offset: int, answer: PullResult | Rejected
    ) -> PullResult | Rejected:
        """The pull's answer as the store gave it (``read_queues``: the topic's, None for no topic).

        rule: pull/found, pull/unknown-topic, pull/queue-id-range
        """
        return answer

    def schedule_entry_index(self, entries: Sequence[tuple[int, int, int]], tags_code: int) -> int:
        """Where a schedule entry goes in its level's queue: at the end. rule: schedule/fifo-per-level"""
        return len(entries)

    def drops_half_topic_copy(self) -> bool:
        """rule: schedule/drop-half-topic"""
        return True

    def restart_offset(self, persisted: int, entries: int) -> int:
        """A level's read position after a restart: the persisted one, clamped. rule: schedule/restart-redelivery"""
        return max(0, min(persisted, entries))

    def retry_queue_count(self, configured: int) -> int:
        """rule: sendback/no-retry-queues"""
        return configured

    def retry_queue_id(self, choice: int, retry_queue_nums: int) -> int:
        """rule: sendback/retry-topic"""
        return choice % retry_queue_nums

    def send_back_miss(self, rejected: Rejected) -> Rejected | None:
        """A send-back naming no record (None: answered SUCCESS, nothing stored). rule: sendback/lookup-by-offset"""
        return rejected

    def retry_copy_delay(self, level: int) -> str | None:
        """The retry copy carries its level as DELAY (None: stored without). rule: sendback/through-schedule"""
        return str(level)

    def commit_miss(self, rejected: Rejected) -> Rejected | None:
        """END_TRANSACTION naming no record (None: answered SUCCESS). rule: transaction/commit-lookup"""
        return rejected

    def checks_without_producer(self) -> bool:
        """A round counts (copy, raised count) with no producer online. rule: transaction/check-no-producer"""
        return True

    def expired(self, age_ms: int, reserved_ms: int) -> bool:
        """rule: transaction/check-skip-expired"""
        return age_ms > reserved_ms

    def honours_ops(self) -> bool:
        """An op message resolves the half record it names. rule: transaction/check-resolved"""
        return True

    def batch_inner_delay_ignored(self) -> bool:
        """rule: batch/inner-delay-ignored"""
        return True

    def batch_result_offset(self, offsets: Sequence[int]) -> int:
        """The batch's send result names its first message. rule: batch/consecutive-offsets"""
        return offsets[0]

    def batch_stored(self, inner: Props, wrapper: Props) -> Props:
        """A batch message stores its own properties, then the wrapper's. rule: batch/stored-properties"""
        return inner.update(wrapper)


class V5Semantics(Semantics):
    """The 5.x profile's differences (facts §4.4, §5.4)."""

    name = "5.x"

    def retry_send_to_dlq(self, reconsume_times: int, max_reconsume_times: int) -> bool:
        # rule: sendback/retry-send-dlq (5.x: ">" instead of ">=")
        return reconsume_times > max_reconsume_times

    def retry_send_dlq_delay(self, client_delay: str | None) -> str | None:
        return "-1"

    def batch_rejects_retry_topic(self) -> bool:
        # rule: batch/broker-illegal (5.x: a %RETRY% batch is MESSAGE_ILLEGAL)
        return True

    def check_immunity_ms(self, value: str | None, transaction_timeout_ms: int) -> int:
        # rule: transaction/check-immunity (5.x: max(value × 1000, transactionTimeout))
        base = check_immunity_ms(value, transaction_timeout_ms)
        return max(base, transaction_timeout_ms)


REFERENCE = Semantics()

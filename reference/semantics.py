"""The decision points of the model: small pure functions, each citing its rule.

They carry CrossHair contracts (PEP 316 ``pre:``/``post:`` docstring conditions) that ``make crosshair``
checks symbolically. ``Semantics`` groups them so that a profile (5.x) or a mutant (a realistic broker
bug, see ``rmqspec.conformance.mutants``) is a subclass overriding one decision, while the mechanics
around it stay the reference's.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import topics
from .constants import (
    HALF_TOPIC,
    INNER_BATCH,
    NOT_ALLOWED_SEND_TOPICS,
    NOT_ALLOWED_SEND_TOPICS_5_5,
    PROPERTIES_MAX_LENGTH,
    RETRY_PREFIX,
    TOPIC_MAX_LENGTH,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    V3_4_9,
    Code,
    Prop,
)
from .javanum import parse_int, parse_long
from .observations import PullResult, Rejected
from .properties import as_read_back, encode_properties
from .records import Props

if TYPE_CHECKING:
    from .config import BrokerConfig
    from .state import TimerState

_JAVA_WHITESPACE_CONTROLS = frozenset("\t\n\u000b\f\r\u001c\u001d\u001e\u001f")
_NO_BREAK_SPACES = frozenset("\u00a0\u2007\u202f")


def java_is_blank(text: str | None) -> bool:
    """UtilAll.isBlank / StringUtils.isBlank: null, empty or only ``Character.isWhitespace`` characters.

    isWhitespace is a Unicode space, line or paragraph separator other than the no-break spaces, or one
    of nine controls; Python's ``str.isspace`` differs (it counts U+00A0 and U+0085). rule:
    sendback/origin-message-id
    """
    if not text:
        return True
    return all(
        c in _JAVA_WHITESPACE_CONTROLS
        or (unicodedata.category(c) in ("Zs", "Zl", "Zp") and c not in _NO_BREAK_SPACES)
        for c in text
    )


def _utf16_len(text: str) -> int:
    """Java's String.length(): UTF-16 units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def clamp_delay_level(level: int, max_level: int) -> int:
    """A level above the table's maximum is stored as the maximum. rule: put/delay-clamp

    A table of zero levels (config/delay-level-table) clamps every level to 0.
    pre: level > 0
    pre: max_level >= 0
    post: 0 <= __return__ <= max_level
    post: __return__ == min(level, max_level)
    """
    return max_level if level > max_level else level


def schedule_queue_id(level: int) -> int:
    """Schedule queue of a level: ``delayLevel2QueueId = level - 1``. rule: put/delay-schedule-queue

    Level 0 (after the clamp of a table without levels) is queue -1, which no level reads.
    pre: level >= 0
    post: __return__ == level - 1
    post: __return__ >= -1
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


def _java_long(value: int) -> int:
    """A Java ``long`` product: wrapped to 64 bits, two's complement."""
    return (value + 2**63) % 2**64 - 2**63


def check_immunity_ms(value: str | None, transaction_timeout_ms: int) -> int:
    """The check loop's immunity (getImmunityTime of TransactionalMessageServiceImpl, 4.9.8 and 5.5.0):
    ``Long.parseLong(value) × 1000`` as a Java long (it wraps); ``transactionTimeout`` for -1 and for a
    value that does not parse (getLong's -1). It may be shorter than the timeout, or negative.

    rule: transaction/check-immunity
    post: value is not None or __return__ == transaction_timeout_ms
    post: value != "-1" or __return__ == transaction_timeout_ms
    """
    if value is None:
        return transaction_timeout_ms
    seconds = parse_long(value)
    if seconds is None or seconds == -1:
        return transaction_timeout_ms
    return _java_long(seconds * 1000)


def end_immunity_ms(value: str, transaction_timeout_ms: int) -> int:
    """TransactionalMessageUtil.getImmunityTime (5.1.1+, END_TRANSACTION's reject): the value × 1000 (0
    when it does not parse), at least ``transactionTimeout``. rule: transaction/end-after-immunity

    post: __return__ >= transaction_timeout_ms
    """
    seconds = parse_long(value)
    ms = 0 if seconds is None else _java_long(seconds * 1000)
    return max(ms, transaction_timeout_ms)


def check_immune(age_ms: int, immunity_ms: int) -> bool:
    """A record with CHECK_IMMUNITY_TIME_IN_SECONDS gets an immunity copy while ``age < immunity`` (4.9.8;
    ``<=`` from 5.4.0). rule: transaction/check-immunity

    post: __return__ == (age_ms < immunity_ms)
    """
    return age_ms < immunity_ms


def check_holds(age_ms: int, immunity_ms: int) -> bool:
    """A record without immunity stops the run while ``0 <= age < transactionTimeout`` (4.9.8; ``<=`` from
    5.4.0). rule: transaction/check-timeout

    post: __return__ == (0 <= age_ms < immunity_ms)
    """
    return 0 <= age_ms < immunity_ms


def must_discard(check_times: int, check_max: int) -> bool:
    """A half message considered with TRANSACTION_CHECK_TIMES >= transactionCheckMax is discarded.

    rule: transaction/check-discard
    post: __return__ == (check_times >= check_max)
    """
    return check_times >= check_max


def check_due(age_ms: int, immunity_ms: int) -> bool:
    """isNeedCheck once the op queue is read to its end: the age exceeds the immunity (or the clock went
    back). rule: transaction/check-timeout
    post: __return__ == (age_ms > immunity_ms or age_ms <= -1)
    """
    return age_ms > immunity_ms or age_ms <= -1


def java_long(value: int) -> int:
    """A Java ``long`` result: wraps modulo 2**64."""
    return (value + 2**63) % 2**64 - 2**63


def timer_message(props: Props) -> bool:
    """``checkIfTimerMessage`` for a message with no ``DELAY`` > 0, outside the timer topic: one of
    ``TIMER_DELIVER_MS``, ``TIMER_DELAY_MS``, ``TIMER_DELAY_SEC`` is there and ``TIMER_OUT_MS`` is not.

    rule: timer/timer-message
    """
    if Prop.TIMER_OUT_MS in props:
        return False
    return Prop.TIMER_DELIVER_MS in props or Prop.TIMER_DELAY_MS in props or Prop.TIMER_DELAY_SEC in props


def timer_deliver_ms(sec: str | None, ms: str | None, deliver: str | None, now: int) -> int | None:
    """The deliver time of ``transformTimerMessage``: ``TIMER_DELAY_SEC`` first (now + s × 1000), then
    ``TIMER_DELAY_MS`` (now + ms), then ``TIMER_DELIVER_MS``; each read with ``Long.parseLong``, in Java
    ``long`` arithmetic. None: the value Java cannot read (WHEEL_TIMER_MSG_ILLEGAL). rule: timer/deliver-time

    post: sec is None or parse_long(sec) is not None or __return__ is None
    post: sec is not None or ms is None or parse_long(ms) is not None or __return__ is None
    """
    if sec is not None:
        v = parse_long(sec)
        return None if v is None else java_long(now + java_long(v * 1000))
    if ms is not None:
        v = parse_long(ms)
        return None if v is None else java_long(now + v)
    return parse_long(deliver)


def timer_too_far(deliver: int, now: int, max_delay_sec: int) -> bool:
    """A deliver time further than ``timerMaxDelaySec`` from now is refused. rule: timer/max-delay

    pre: deliver > now
    post: __return__ == (deliver - now > max_delay_sec * 1000)
    """
    return deliver - now > max_delay_sec * 1000


def timer_round(deliver: int, precision: int) -> int:
    """``TIMER_OUT_MS``: the deliver time floored to the precision, one precision less when it is a multiple
    of it: the slot before the one the deliver time opens. rule: timer/precision

    pre: deliver > 0
    pre: precision > 0
    post: __return__ % precision == 0
    post: deliver - precision <= __return__ < deliver
    """
    return deliver - precision if deliver % precision == 0 else deliver // precision * precision


def timer_slot_due(slot: int, now: int, precision: int) -> bool:
    """A slot is read once the write time (the clock floored to the precision) is past it: at
    ``slot + precision``. rule: timer/due-time

    pre: precision > 0
    pre: now >= 0
    pre: slot % precision == 0
    post: __return__ == (now >= slot + precision)
    """
    return slot < now // precision * precision


def timer_roll_target(out_ms: int, write: int, slots: int, precision: int) -> tuple[int, bool]:
    """``doEnqueue``: where the wheel takes a message, and whether that is only a roll. A message
    ``timerRollWindowSlot`` slots or more ahead of the write time goes to an intermediate slot: half a
    window ahead when less than a third of a window would be left after a whole one, else a whole window.
    rule: timer/roll

    pre: slots >= 2
    pre: precision > 0
    post: __return__[1] == (out_ms - write >= slots * precision)
    post: __return__[1] or __return__[0] == out_ms
    post: not __return__[1] or write < __return__[0] <= out_ms
    """
    window = slots * precision
    if out_ms - write < window:
        return out_ms, False
    if out_ms - write - window < slots // 3 * precision:
        return write + slots // 2 * precision, True
    return write + window, True


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

    def check_immune(self, age_ms: int, immunity_ms: int) -> bool:
        return check_immune(age_ms, immunity_ms)

    def check_holds(self, age_ms: int, immunity_ms: int) -> bool:
        return check_holds(age_ms, immunity_ms)

    def check_op_wait_ms(self) -> int | None:
        """What the check loop does when a read of the op queue finds nothing new and the record is not
        due: 4.9.8 reads again at once, until the clock moves (None). rule: transaction/check-timeout"""
        return None

    def end_immunity_ms(self, value: str, transaction_timeout_ms: int) -> int:
        return end_immunity_ms(value, transaction_timeout_ms)

    def rejects_end_after_immunity(self) -> bool:
        """4.9.8 has no rejectCommitOrRollback. rule: transaction/end-after-immunity"""
        return False

    def batched_ops(self) -> bool:
        """4.9.8 writes one op per END_TRANSACTION at once. rule: transaction/op-message"""
        return False

    def check_run_at_stop(self) -> bool:
        """Whether the run the check service makes when it is stopped reaches the store: 4.9.x shuts the
        store down first. rule: transaction/check-restart"""
        return False

    def writes_op_for(self, topic: str) -> bool:
        """4.9.8 writes the op for whatever record END_TRANSACTION named. rule: transaction/op-message"""
        return True

    def half_properties(self, properties: Props) -> Props:
        """parseHalfMessageInner's properties beyond REAL_TOPIC / REAL_QID: none on 4.9.8.

        rule: transaction/half-message
        """
        return properties

    def end_tx_idempotent(self) -> bool:
        """4.9.x applies a second END_TRANSACTION again. rule: transaction/not-idempotent"""
        return False

    # -- mechanics switches: the reference's choice, named so that a mutant can change one ----------------

    def forbidden_topic(self, topic: str) -> bool:
        """rule: put/forbidden-topic"""
        return topic in NOT_ALLOWED_SEND_TOPICS

    # -- the put path per release: 4.9.8 here, 5.5.0 in V5Semantics ----------------------------------------

    def topic_name_problem(self, topic: str) -> str | None:
        """TopicValidator.validateTopic's remark for a bad name, None for a good one. rule: put/topic-validation"""
        return topics.problem_4_9(topic)

    def invalid_request_code(self) -> Code:
        """The code of a bad topic name or queue id: SYSTEM_ERROR up to 5.3.1.

        rule: put/topic-validation, put/queue-id-range
        """
        return Code.SYSTEM_ERROR

    def request_properties(self, props: Props, region: str, trace_on: bool) -> Props:
        """What the send processor does to the request's properties before it reads them (4.9.8: nothing;
        with no send hook registered buildMsgContext returns early). rule: put/stored-properties
        """
        return props

    def store_refuses(
        self, topic: str, body: bytes, props: Props, stored: Props, sys_flag: int
    ) -> str | None:
        """DefaultMessageStore.checkMessage: a topic or a properties string longer than the record's length
        fields, counted in UTF-16 units on the string as it is before the delay rewrite. The PutMessageStatus,
        or None. rule: put/message-illegal
        """
        if _utf16_len(topic) > TOPIC_MAX_LENGTH:
            return "MESSAGE_ILLEGAL"
        if _utf16_len(encode_properties(stored)) > 32767:
            return "MESSAGE_ILLEGAL"
        return None

    def empty_body_npe(self) -> bool:
        """An empty request body (decoded as none) throws in the send processor's message context before
        anything is checked: 5.1.0-5.5.0 read its length there (4.9.x does not). rule: put/message-illegal,
        batch/broker-illegal"""
        return False

    def strips_wait(self) -> bool:
        """A sent message's stored string leaves out WAIT (4.9.1-4.9.8). rule: put/stored-properties"""
        return True

    def generated_uniq_key(self, props: Props, candidate: str) -> str | None:
        """A UNIQ_KEY the broker adds to a sent message: none in 4.9.x. rule: put/stored-properties"""
        return None

    def priority_queue(self, props: Props, queue_id: int, write_queues: int) -> tuple[Props, int]:
        """5.4.0+ priority messages choose their queue; 4.9.x knows no such property. rule: put/queue-id-range"""
        return props, queue_id

    def lite_topic(self, props: Props, topic: str) -> Props:
        """5.5.0 routes a lite topic through INNER_MULTI_DISPATCH; 4.9.x does not. rule: put/stored-properties"""
        return props

    def half_message_wanted(self, props: Props, reconsume_times: int) -> bool | str:
        """TRAN_MSG read by Boolean.parseBoolean makes a half message (4.9.8 asyncSendMessage).

        5.x answers "parse" when it must also read DELAY (see V5Semantics). rule: put/reject-transaction-message
        """
        return props.get(Prop.TRAN_MSG, "").lower() == "true"

    def delay_props(self, props: Props) -> Props:
        """The property map of a message the delay rewrite takes (4.9.8: as it is). rule: put/delay-schedule-queue"""
        return props

    def properties_bytes(self, props: Props) -> int:
        """Bytes of ``messageProperties2String(props)``: no separator after the last entry (4.9.1-5.1.4).

        rule: properties/encoding
        """
        return len(encode_properties(props).encode())

    def topic_length_extra(self, topic: str) -> int:
        """Bytes beyond one for the record's topic length field. rule: put/message-illegal"""
        return 0

    def rewrites_half(self) -> bool:
        """A TRAN_MSG message goes to the half topic. rule: transaction/half-message"""
        return True

    def delay_ms_for(self, delay_levels: tuple[int, ...], level: int) -> int | None:
        """The delay of a level in the table. rule: dispatch/schedule-tags-code"""
        return delay_levels[level - 1] if 1 <= level <= len(delay_levels) else None

    def real_qid(self, queue_id: int) -> str:
        """REAL_QID keeps the original queue. rule: put/delay-schedule-queue"""
        return str(queue_id)

    def undeliverable_head_blocks(self) -> bool:
        """A head whose copy cannot be built stays the next poll's start (4.9.3-4.9.8), blocking its level.

        rule: schedule/fifo-per-level
        """
        return True

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
        return offset_msg_id if java_is_blank(existing) or existing is None else existing

    def honours_header_max(self, version: int) -> bool:
        """The header's maxReconsumeTimes counts from version V3_4_9 (121). rule: sendback/max-reconsume-times"""
        return version >= V3_4_9

    def rollback_writes_message(self) -> bool:
        """rule: transaction/rollback"""
        return False

    def commit_writes_message(self) -> bool:
        """A commit writes the message to its real topic. rule: transaction/committed-message"""
        return True

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

    def batch_oversize_is_exception(self) -> bool:
        """4.9.x refuses a batch body over maxMessageSize in checkMessages (MESSAGE_ILLEGAL), before the
        transaction type and DELAY; 5.x has only the encoder's RuntimeException, after them.
        rule: batch/broker-illegal
        """
        return False

    def batch_stores_wrapper_properties(self) -> bool:
        """Each batch message stores its own properties and then the wrapper's (4.9.0-5.3.3).

        rule: batch/stored-properties
        """
        return True

    def overflow_one_code(self) -> Code:
        """Pulling at exactly the max offset answers PULL_NOT_FOUND. rule: pull/status-codes"""
        return Code.PULL_NOT_FOUND

    # -- the 5.x timer: decisions read by ``timer.py``, reached only where ``has_timer`` ------------------

    def has_timer(self) -> bool:
        """4.9.x has no timer: the timer properties are user properties. rule: timer/timer-message"""
        return False

    def timer_message(self, props: Props) -> bool:
        return timer_message(props)

    def timer_enabled(self, timer_wheel_enable: bool) -> bool:
        """``timerWheelEnable``. rule: timer/disabled"""
        return timer_wheel_enable

    def timer_deliver_ms(self, props: Props, now: int) -> int | None:
        return timer_deliver_ms(
            props.get(Prop.TIMER_DELAY_SEC),
            props.get(Prop.TIMER_DELAY_MS),
            props.get(Prop.TIMER_DELIVER_MS),
            now,
        )

    def timer_too_far(self, deliver: int, now: int, max_delay_sec: int) -> bool:
        return timer_too_far(deliver, now, max_delay_sec)

    def timer_round(self, deliver: int, precision: int) -> int:
        return timer_round(deliver, precision)

    def timer_slot_due(self, slot: int, now: int, precision: int) -> bool:
        return timer_slot_due(slot, now, precision)

    def timer_slot_readable_at(self, slot: int, precision: int) -> int:
        """The first instant ``timer_slot_due`` holds for ``slot``. rule: timer/due-time"""
        return slot + precision

    def timer_roll_target(self, out_ms: int, write: int, slots: int, precision: int) -> tuple[int, bool]:
        return timer_roll_target(out_ms, write, slots, precision)

    def timer_past(self, deliver: int, now: int) -> bool:
        """A deliver time not after now is no timer at all: stored at once. rule: timer/past-deliver-time"""
        return deliver <= now

    def timer_real(self, props: Props, topic: str, queue_id: int) -> tuple[str, str]:
        """REAL_TOPIC and REAL_QID of the timer record: the message's own topic and queue, whatever it
        carried (a half message's are the half topic's by then). rule: timer/rewrite, timer/transactional"""
        return topic, str(queue_id)

    def timer_queue(self, queue_id: int) -> int:
        """The timer topic's queue: 0. rule: timer/rewrite"""
        return 0

    def timer_skips_unreadable(self) -> bool:
        """``timerSkipUnknownError`` is false: an unreadable record stops the timer. rule: timer/stuck"""
        return False

    def timer_after_restart(self, checkpoint: TimerState, current: TimerState) -> TimerState:
        """What the timer comes back to: its last checkpoint. rule: timer/restart"""
        return checkpoint

    def timer_cancelled(self, uniq_key: str | None, cancelled: set[str]) -> bool:
        """A message of a slot whose UNIQ_KEY a cancel marker of the same slot names is not put.
        rule: timer/cancel"""
        return uniq_key is not None and uniq_key in cancelled

    def timer_copy_props(self, props: Props) -> Props:
        """The delivered copy's stored properties: the timer record's, with the timer's own added.
        rule: timer/delivered-copy"""
        return props

    def creatable_group_name(self, group: str, config: BrokerConfig) -> bool:
        """4.9.x auto-creates a group of any name. rule: sendback/group-lookup"""
        return True

    def pull_queue_illegal_code(self) -> Code:
        """A pull's queue id outside [0, readQueueNums) is SYSTEM_ERROR (4.9.x). rule: pull/queue-id-range"""
        return Code.SYSTEM_ERROR

    def negative_batch_fails(self) -> bool:
        """4.9.2-4.9.8 size the result list with maxMsgNums: a negative one throws. rule: pull/found"""
        return True

    def faq_url(self) -> str:
        """FAQUrl's address in remarks (4.9.x). rule: pull/unknown-topic, sendback/group-lookup"""
        return "http://rocketmq.apache.org/docs/faq/"

    # -- further decision points, one per rule a broker can get wrong (the mutants override them) --------

    def read_back(self, stored: Props) -> dict[str, str] | None:
        """What a reader decodes from the stored properties string (None: ``stored`` itself).

        rule: properties/encoding, properties/lenient-decoding
        """
        return as_read_back(stored)

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

    def check_progress_after_restart(self, kept: tuple[int, int]) -> tuple[int, int]:
        """Where the check service reads the half and op queues from after a restart: the progress it wrote
        (``kept``: the model writes it at the stop, a member of what the spec allows; a crash may make a
        broker read from an earlier write, which only the history checker allows). A record passed before
        the last write is never read again. rule: transaction/check-restart"""
        return kept

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


_VALID_NAME_CHARS = frozenset("%|-_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


TRANSACTION_ID_PROP = "__transactionId__"  # TransactionalMessageUtil.TRANSACTION_ID (5.1.0+)


class V5Semantics(Semantics):
    """The 5.x profile's differences: Apache RocketMQ 5.5.0 (facts §4.4, §5.4)."""

    name = "5.x"

    def has_timer(self) -> bool:
        # rule: timer/timer-message (5.0.0+: HookUtils.handleScheduleMessage and the TimerMessageStore)
        return True

    # -- the put path of 5.5.0 (rule ids on each) ----------------------------------------------------------

    def forbidden_topic(self, topic: str) -> bool:
        # rule: put/forbidden-topic (5.4.0+: the RocksDB transaction topics too)
        return topic in NOT_ALLOWED_SEND_TOPICS_5_5

    def topic_name_problem(self, topic: str) -> str | None:
        # rule: put/topic-validation (5.4.0+: %RETRY% and %DLQ% topics up to 255)
        return topics.problem_5_5(topic)

    def invalid_request_code(self) -> Code:
        # rule: put/topic-validation, put/queue-id-range (5.3.2+)
        return Code.INVALID_PARAMETER

    def request_properties(self, props: Props, region: str, trace_on: bool) -> Props:
        # rule: put/stored-properties: buildMsgContext writes MSG_REGION and TRACE_ON into the request's
        # properties (5.0.0+); clearReservedProperties deletes POP_CK (5.2.0+)
        mm = props.mutate()
        mm[Prop.MSG_REGION] = region
        mm[Prop.TRACE_ON] = "true" if trace_on else "false"
        mm.pop(Prop.POP_CK, None)
        return mm.finish()

    def store_refuses(
        self, topic: str, body: bytes, props: Props, stored: Props, sys_flag: int
    ) -> str | None:
        # rule: put/message-illegal: HookUtils.checkBeforePutMessage (topic bytes: 127, or 255 for %RETRY%;
        # a missing body, which an empty request body is), then checkInnerBatch (INNER_NUM without the
        # inner-batch flag, or the flag on a topic whose consume queue is not a batch one: every topic here)
        n = len(topic.encode())
        if (
            n > TOPIC_MAX_LENGTH and not topic.startswith(RETRY_PREFIX)
        ) or n > topics.RETRY_OR_DLQ_TOPIC_MAX_LENGTH:
            return "MESSAGE_ILLEGAL"
        if not body:
            return "MESSAGE_ILLEGAL"
        if "INNER_NUM" in props or sys_flag & INNER_BATCH:
            return "MESSAGE_ILLEGAL"
        return None

    def empty_body_npe(self) -> bool:
        # rule: put/message-illegal, batch/broker-illegal (5.1.0+: buildMsgContext reads the body's length)
        return True

    def strips_wait(self) -> bool:
        # rule: put/stored-properties (5.x stores WAIT)
        return False

    def generated_uniq_key(self, props: Props, candidate: str) -> str | None:
        # rule: put/stored-properties (5.x: MessageClientIDSetter.createUniqID when UNIQ_KEY is missing)
        return None if props.get(Prop.UNIQ_KEY) else candidate

    def priority_queue(self, props: Props, queue_id: int, write_queues: int) -> tuple[Props, int]:
        # rule: put/queue-id-range, put/stored-properties (5.4.0+): a priority >= 0 picks queue
        # min(priority, writeQueueNums - 1) when the message is of the PRIORITY type; otherwise it is removed
        raw = props.get(Prop.PRIORITY)
        priority = parse_int(raw) if raw is not None else None
        if priority is None or priority < 0:
            return props, queue_id
        other_type = (
            props.get(Prop.TRAN_MSG, "").lower() == "true"
            or any(
                k in props
                for k in (Prop.DELAY, Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS)
            )
            or Prop.SHARDING_KEY in props
        )
        if other_type:
            mm = props.mutate()
            mm.pop(Prop.PRIORITY)
            return mm.finish(), queue_id
        return props, min(priority, write_queues - 1)

    def lite_topic(self, props: Props, topic: str) -> Props:
        # rule: put/stored-properties (5.5.0): LiteUtil.toLmqName
        lite = props.get(Prop.LITE_TOPIC)
        if not lite:
            return props
        return props.set(Prop.INNER_MULTI_DISPATCH, f"%LMQ%${topic}${lite}")

    def half_message_wanted(self, props: Props, reconsume_times: int) -> bool | str:
        # rule: put/reject-transaction-message (5.x: "&& !(reconsumeTimes > 0 && getDelayTimeLevel() > 0)")
        if props.get(Prop.TRAN_MSG, "").lower() != "true":
            return False
        return "parse" if reconsume_times > 0 else True

    def delay_props(self, props: Props) -> Props:
        # rule: put/delay-schedule-queue (5.x: checkIfTimerMessage drops the timer properties of a DELAY > 0)
        mm = props.mutate()
        for k in (Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS):
            mm.pop(k, None)
        return mm.finish()

    def properties_bytes(self, props: Props) -> int:
        # rule: properties/encoding (5.2.0+: a separator after every entry, the last one too)
        n = len(encode_properties(props).encode())
        return n + 1 if n else 0

    def topic_length_extra(self, topic: str) -> int:
        # rule: put/message-illegal (autoMessageVersionOnTopicLen: a topic over 127 gets a 2-byte length)
        return 1 if len(topic) > TOPIC_MAX_LENGTH else 0

    def retry_send_to_dlq(self, reconsume_times: int, max_reconsume_times: int) -> bool:
        # rule: sendback/retry-send-dlq (5.x: ">" instead of ">=")
        return reconsume_times > max_reconsume_times

    def retry_send_dlq_delay(self, client_delay: str | None) -> str | None:
        return "-1"

    def batch_rejects_retry_topic(self) -> bool:
        # rule: batch/broker-illegal (5.x: a %RETRY% batch is MESSAGE_ILLEGAL)
        return True

    def batch_oversize_is_exception(self) -> bool:
        # rule: batch/broker-illegal (5.0.0+: SYSTEM_ERROR from the encoder's RuntimeException)
        return True

    def batch_stores_wrapper_properties(self) -> bool:
        # rule: batch/stored-properties (5.4.0+: only the message's own properties)
        return False

    def check_immune(self, age_ms: int, immunity_ms: int) -> bool:
        # rule: transaction/check-immunity (5.4.0+: "<=", ISSUE #9486)
        return age_ms <= immunity_ms

    def check_holds(self, age_ms: int, immunity_ms: int) -> bool:
        # rule: transaction/check-timeout (5.4.0+: "<=", ISSUE #9486)
        return 0 <= age_ms <= immunity_ms

    def check_op_wait_ms(self) -> int | None:
        # rule: transaction/check-timeout (5.1.0+: Thread.sleep(SLEEP_WHILE_NO_OP))
        return 1000

    def rejects_end_after_immunity(self) -> bool:
        # rule: transaction/end-after-immunity (5.1.1+)
        return True

    def batched_ops(self) -> bool:
        # rule: transaction/op-batch (5.1.0+)
        return True

    def check_run_at_stop(self) -> bool:
        # rule: transaction/check-restart (5.4.0+: the store is shut down last)
        return True

    def writes_op_for(self, topic: str) -> bool:
        # rule: transaction/op-message (5.4.0+: only for a record of the half topic)
        return topic == HALF_TOPIC

    def committed_stored(self, stored: Props) -> Props:
        # rule: transaction/committed-message (5.4.0+: the string is rebuilt without REAL_TOPIC, REAL_QID)
        kept = stored.mutate()
        for key in (Prop.REAL_TOPIC, Prop.REAL_QID):
            kept.pop(key, None)
        return kept.finish()

    def half_properties(self, properties: Props) -> Props:
        # rule: transaction/half-message (5.1.0+: __transactionId__ = UNIQ_KEY when it is not empty)
        uniq = properties.get(Prop.UNIQ_KEY)
        return properties.set(TRANSACTION_ID_PROP, uniq) if uniq else properties

    def undeliverable_head_blocks(self) -> bool:
        # rule: schedule/fifo-per-level (5.0.0-5.5.0: nextOffset is set before messageTimeUp throws)
        return False

    def creatable_group_name(self, group: str, config: BrokerConfig) -> bool:
        # rule: sendback/group-lookup. 5.0.0-5.1.0: any name; 5.1.1-5.3.3 (#6142): not longer than
        # Validators.CHARACTER_MAX_LENGTH (255) and no character outside [%|a-zA-Z0-9_-]
        # (TopicValidator.isTopicOrGroupIllegal); 5.4.0-5.5.0: TopicValidator.validateGroup (not blank, those
        # characters, at most 120).
        if not config.since("5.1.1"):
            return True
        if not config.since("5.4.0"):
            return len(group.encode("utf-16-le")) // 2 <= 255 and all(c in _VALID_NAME_CHARS for c in group)
        return 0 < len(group) <= 120 and all(c in _VALID_NAME_CHARS for c in group)

    def pull_queue_illegal_code(self) -> Code:
        # rule: pull/queue-id-range (5.3.2-5.5.0: INVALID_PARAMETER, apache/rocketmq #9028)
        return Code.INVALID_PARAMETER

    def negative_batch_fails(self) -> bool:
        # rule: pull/found (5.0.0-5.5.0: new GetMessageResult() has a fixed capacity)
        return False

    def faq_url(self) -> str:
        # rule: pull/unknown-topic, sendback/group-lookup (5.1.0-5.5.0: FAQUrl.DEFAULT_FAQ_URL)
        return "https://rocketmq.apache.org/docs/bestPractice/06FAQ"


REFERENCE = Semantics()

"""What a transition lets the outside world see. Rejections are values that name their rule."""

from __future__ import annotations

import attrs

from .constants import Code, PullStatus
from .records import Record


@attrs.frozen
class Rejected:
    """The broker answered with an error code. ``rule`` is the spec rule that says why."""

    code: Code
    remark: str
    rule: str
    status: str = ""  # the store's PutMessageStatus name, when the store refused (facts §1.1, §1.3)


@attrs.frozen
class SendOk:
    """SEND_MESSAGE / SEND_MESSAGE_V2 answered SUCCESS. rule: put/send-result

    ``queue_id`` is the queue the request resolved to; ``queue_offset`` and ``msg_id`` belong to the
    record actually written (the schedule or half copy when the message was rewritten).
    """

    queue_id: int
    queue_offset: int
    msg_id: str
    record: Record
    code: Code = Code.SUCCESS


@attrs.frozen
class BatchOk:
    """SEND_BATCH_MESSAGE answered SUCCESS: offsets of the first message, msgIds joined by commas."""

    queue_id: int
    queue_offset: int
    msg_id: str
    records: tuple[Record, ...]
    code: Code = Code.SUCCESS


@attrs.frozen
class PullResult:
    """PULL_MESSAGE's answer: response code, store status, offsets and the records found."""

    code: Code
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: tuple[Record, ...] = ()


@attrs.frozen
class SendBackOk:
    """CONSUMER_SEND_MSG_BACK answered SUCCESS; ``record`` is what was written (None when dropped)."""

    record: Record | None
    dropped: bool = False
    code: Code = Code.SUCCESS


@attrs.frozen
class EndTxOk:
    """END_TRANSACTION answered SUCCESS; ``written`` holds the committed message and the op message."""

    committed: Record | None
    op: Record | None
    remark: str | None = None
    code: Code = Code.SUCCESS


@attrs.frozen
class NoResponse:
    """The broker writes nothing and sends no response (END_TRANSACTION with UNKNOW)."""

    rule: str


@attrs.frozen
class Found:
    """VIEW_MESSAGE_BY_ID / QUERY_MESSAGE found records."""

    records: tuple[Record, ...]
    code: Code = Code.SUCCESS


@attrs.frozen
class MaxOffset:
    offset: int
    code: Code = Code.SUCCESS


@attrs.frozen
class Ack:
    """A request with nothing to report but success (heartbeat, persist)."""

    code: Code = Code.SUCCESS


@attrs.frozen
class Delivered:
    """The schedule service delivered a due message of ``level`` to its real topic."""

    level: int
    source: Record
    copy: Record


@attrs.frozen
class DroppedOnDelivery:
    """The schedule service dropped a due message (its real topic is the half topic)."""

    level: int
    source: Record
    rule: str


@attrs.frozen
class CheckRequest:
    """CHECK_TRANSACTION_STATE sent one-way to a producer of ``group`` (facts §5.4 step 9).

    Offsets name the put-back copy; ``message`` is that copy with topic and queue restored to REAL_*.
    """

    group: str
    tran_state_table_offset: int
    commit_log_offset: int
    offset_msg_id: str
    transaction_id: str | None
    message: Record
    sent: bool  # False: no producer of the group online, the check was skipped
    at: int = 0  # when the check round put the copy back (the copy's store time)


@attrs.frozen
class Discarded:
    """The check service gave up on a half message and copied it to TRANS_CHECK_MAX_TIME_TOPIC."""

    half: Record
    copy: Record
    reason: str  # "max-checks" or "expired"


@attrs.frozen
class TimerDelivered:
    """The 5.x timer put a due timer message back into its real topic. rule: timer/due-time

    ``slot`` is the wheel slot it was read from (its ``TIMER_OUT_MS`` floored to the precision).
    """

    source: Record  # the record in the timer topic
    copy: Record
    slot: int


@attrs.frozen
class TimerRolled:
    """The timer put a message beyond its roll window back into the timer topic. rule: timer/roll"""

    source: Record
    copy: Record


@attrs.frozen
class TimerDropped:
    """The timer read a message and put nothing: cancelled, a cancel marker, or refused by the store."""

    source: Record
    rule: str
    reason: str


Observation = (
    Rejected | SendOk | BatchOk | PullResult | SendBackOk | EndTxOk | NoResponse | Found | MaxOffset | Ack
)
Event = Delivered | DroppedOnDelivery | CheckRequest | Discarded | TimerDelivered | TimerRolled | TimerDropped

"""Names and numbers of Apache RocketMQ 4.9.x (facts §0, §8): topics, sysFlag bits, property keys, codes."""

from __future__ import annotations

import enum
from typing import Final

# --- topics (facts §0) -------------------------------------------------------------------------------
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
DEFAULT_TOPIC: Final = "TBW102"
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
TRANS_CHECK_GROUP: Final = "CID_RMQ_SYS_TRANS"
SCHEDULE_QUEUE_NUM: Final = 18
DLQ_NUMS_PER_GROUP: Final = 1

# 5.x: the timer's own topic (TimerMessageStore.TIMER_TOPIC, a system topic made when timerWheelEnable).
# rule: timer/rewrite
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
LONG_MAX: Final = 2**63 - 1  # Long.MAX_VALUE: TIMER_ENQUEUE_MS of a message the timer found already due

ROCKSDB_HALF_TOPIC: Final = "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC"  # 5.4.0 and later
ROCKSDB_OP_TOPIC: Final = "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC"

# rule: put/forbidden-topic (4.9.4-5.3.3; 4.9.0-4.9.3 forbid only SCHEDULE_TOPIC_XXXX)
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {SCHEDULE_TOPIC, HALF_TOPIC, OP_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT}
)
# rule: put/forbidden-topic (5.4.0-5.5.0: the RocksDB transaction topics as well)
NOT_ALLOWED_SEND_TOPICS_5_5: Final = NOT_ALLOWED_SEND_TOPICS | {ROCKSDB_HALF_TOPIC, ROCKSDB_OP_TOPIC}
# The topics the broker writes into itself, whose queue offsets on a shared broker belong to every client.
SYSTEM_TOPICS: Final = NOT_ALLOWED_SEND_TOPICS_5_5 | {TIMER_TOPIC}
TOPIC_MAX_LENGTH: Final = 127
PROPERTIES_MAX_LENGTH: Final = 32767


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


# --- MessageSysFlag (facts §0) -------------------------------------------------------------------------
COMPRESSED: Final = 0x1
MULTI_TAGS: Final = 0x2
TRANSACTION_MASK: Final = 0xC
TRANSACTION_NOT_TYPE: Final = 0
TRANSACTION_PREPARED_TYPE: Final = 4
TRANSACTION_COMMIT_TYPE: Final = 8
TRANSACTION_ROLLBACK_TYPE: Final = 12
BORNHOST_V6: Final = 0x10
STOREHOST_V6: Final = 0x20
INNER_BATCH: Final = 0x80


def transaction_value(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_MASK


def reset_transaction_value(sys_flag: int, tran_type: int) -> int:
    return (sys_flag & ~TRANSACTION_MASK) | tran_type


# --- property keys (MessageConst) ----------------------------------------------------------------------
class Prop:
    KEYS: Final = "KEYS"
    TAGS: Final = "TAGS"
    WAIT: Final = "WAIT"
    DELAY: Final = "DELAY"
    RETRY_TOPIC: Final = "RETRY_TOPIC"
    REAL_TOPIC: Final = "REAL_TOPIC"
    REAL_QID: Final = "REAL_QID"
    TRAN_MSG: Final = "TRAN_MSG"
    PGROUP: Final = "PGROUP"
    ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME: Final = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
    UNIQ_KEY: Final = "UNIQ_KEY"
    TRAN_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    CLUSTER: Final = "CLUSTER"
    MSG_REGION: Final = "MSG_REGION"
    TRACE_ON: Final = "TRACE_ON"
    # 5.x (rule: put/stored-properties, put/queue-id-range)
    POP_CK: Final = "POP_CK"
    PRIORITY: Final = "_SYS_MSG_PRIORITY_"
    SHARDING_KEY: Final = "__SHARDINGKEY"
    LITE_TOPIC: Final = "__LITE_TOPIC"
    INNER_MULTI_DISPATCH: Final = "INNER_MULTI_DISPATCH"
    TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
    # 5.x timer (rule: timer/rewrite, timer/delivered-copy, timer/roll, timer/cancel)
    TIMER_OUT_MS: Final = "TIMER_OUT_MS"
    TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
    TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
    TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"


SYS_CONSUMER_GROUP_PREFIX: Final = "CID_RMQ_SYS_"  # MixAll.CID_RMQ_SYS_PREFIX: always auto-created


# --- response codes (facts §8) -------------------------------------------------------------------------
class Code(enum.IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29  # 5.3.2 and later (apache/rocketmq #9028), where SYSTEM_ERROR was answered before
    FLOW_CONTROL = 215
    ILLEGAL_OPERATION = 604


class PullStatus(enum.Enum):
    """The store's GetMessageStatus values that a pull can end in (facts §8)."""

    FOUND = "FOUND"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"


class TxAction(enum.IntEnum):
    """commitOrRollback of END_TRANSACTION (facts §5.1)."""

    UNKNOW = 0
    COMMIT = 8
    ROLLBACK = 12


PERM_WRITE: Final = 2
PERM_READ: Final = 4
PERM_RW: Final = 6

V3_4_9: Final = 121  # MQVersion ordinal from which the send-back header's maxReconsumeTimes is honoured

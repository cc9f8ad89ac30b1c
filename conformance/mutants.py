"""Semantic mutants: realistic broker bugs, each one decision of the reference changed.

A conformance suite that passes the reference must fail every mutant (``rmqspec mutants``). Each mutant
names the rule it breaks; the kill matrix shows which scenarios and checks catch it.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import Code
from rmqspec.reference.model import Model
from rmqspec.reference.records import Props
from rmqspec.reference.semantics import Semantics
from rmqspec.reference.state import with_props


@attrs.frozen
class Mutant:
    name: str
    rule: str
    description: str
    semantics: type[Semantics]

    def model(self, config: BrokerConfig) -> Model:
        return Model(config, self.semantics())


MUTANTS: dict[str, Mutant] = {}


def mutant(name: str, rule: str, description: str) -> Callable[[type[Semantics]], type[Semantics]]:
    def register(cls: type[Semantics]) -> type[Semantics]:
        cls.name = f"mutant:{name}"
        MUTANTS[name] = Mutant(name, rule, description, cls)
        return cls

    return register


# --- put -------------------------------------------------------------------------------------------------


@mutant("no-clamp", "put/delay-clamp", "a level above the maximum is stored as given (DELAY=99 → queue 98)")
class NoClamp(Semantics):
    def clamp_delay_level(self, level: int, max_level: int) -> int:
        return level


@mutant("queue-equals-level", "put/delay-schedule-queue", "schedule queue = level instead of level - 1")
class QueueEqualsLevel(Semantics):
    def schedule_queue_id(self, level: int) -> int:
        return level


@mutant("delay-ignored", "put/delay-eligibility", "DELAY is ignored: delayed messages are visible at once")
class DelayIgnored(Semantics):
    def delay_eligible(self, tran_type: int, level: int) -> bool:
        return False


@mutant("forbidden-topic-allowed", "put/forbidden-topic", "clients may send to SCHEDULE_TOPIC_XXXX")
class ForbiddenAllowed(Semantics):
    def forbidden_topic(self, topic: str) -> bool:
        return False


@mutant(
    "real-qid-lost", "put/delay-schedule-queue", "REAL_QID is written as 0: delayed messages land in queue 0"
)
class RealQidLost(Semantics):
    def real_qid(self, queue_id: int) -> str:
        return "0"


@mutant("queue-offset-frozen", "put/queue-offset", "the queue offset counter never advances")
class QueueOffsetFrozen(Semantics):
    def advances_queue_offset(self, tran_type: int) -> bool:
        return False


# --- dispatch --------------------------------------------------------------------------------------------


@mutant("prepared-dispatched", "dispatch/transaction-types", "PREPARED records reach the consume queue")
class PreparedDispatched(Semantics):
    def dispatchable(self, tran_type: int) -> bool:
        return tran_type in (0, 4, 8)


@mutant(
    "deliver-time-ignored",
    "dispatch/schedule-tags-code",
    "the schedule entry's deliver time is the store time",
)
class DeliverTimeIgnored(Semantics):
    def schedule_tags_code(self, store_timestamp: int, delay_ms: int | None) -> int:
        return store_timestamp


@mutant("level-off-by-one", "dispatch/schedule-tags-code", "the deliver time uses the next level's delay")
class LevelOffByOne(Semantics):
    def delay_ms_for(self, delay_levels: tuple[int, ...], level: int) -> int | None:
        return super().delay_ms_for(delay_levels, min(level + 1, len(delay_levels)))


# --- schedule --------------------------------------------------------------------------------------------


@mutant("one-ms-early", "schedule/due-time", "a message is delivered 1 ms before its deliver time")
class OneMsEarly(Semantics):
    def is_due(self, deliver_ts: int, now: int) -> bool:
        return deliver_ts - now <= 1


@mutant("one-tick-late", "schedule/due-time", "a message is delivered one 100 ms poll after its deliver time")
class OneTickLate(Semantics):
    def is_due(self, deliver_ts: int, now: int) -> bool:
        return now - deliver_ts >= 100


@mutant("fifo-across-levels", "schedule/levels-independent", "all levels share one schedule queue")
class FifoAcrossLevels(Semantics):
    def schedule_queue_id(self, level: int) -> int:
        return 0


@mutant(
    "delivered-copy-cleaned",
    "schedule/delivered-copy",
    "the delivered copy drops DELAY, REAL_TOPIC and REAL_QID",
)
class DeliveredCopyCleaned(Semantics):
    def delivered_stored(self, stored: Props) -> Props:
        return with_props(stored, DELAY=None, REAL_TOPIC=None, REAL_QID=None)


# --- pull ------------------------------------------------------------------------------------------------


@mutant("overflow-one-moved", "pull/status-codes", "pulling at the max offset answers PULL_OFFSET_MOVED")
class OverflowOneMoved(Semantics):
    def overflow_one_code(self) -> Code:
        return Code.PULL_OFFSET_MOVED


# --- send-back -------------------------------------------------------------------------------------------


@mutant("reconsume-not-incremented", "sendback/reconsume-times", "reconsumeTimes is not incremented")
class ReconsumeNotIncremented(Semantics):
    def next_reconsume_times(self, reconsume_times: int) -> int:
        return reconsume_times


@mutant("dlq-at-max-plus-one", "sendback/dlq-route", "the DLQ is chosen at reconsumeTimes > max")
class DlqAtMaxPlusOne(Semantics):
    def sendback_to_dlq(self, reconsume_times: int, max_reconsume_times: int, delay_level: int) -> bool:
        return reconsume_times > max_reconsume_times or delay_level < 0


@mutant("negative-level-retried", "sendback/dlq-route", "delayLevel < 0 is retried instead of dead-lettered")
class NegativeLevelRetried(Semantics):
    def sendback_to_dlq(self, reconsume_times: int, max_reconsume_times: int, delay_level: int) -> bool:
        return reconsume_times >= max_reconsume_times

    def sendback_delay_level(self, delay_level: int, reconsume_times: int) -> int:
        return 3 + reconsume_times if delay_level <= 0 else delay_level


@mutant("dlq-delayed", "sendback/dlq-route", "the DLQ copy keeps a retry DELAY and passes the schedule topic")
class DlqDelayed(Semantics):
    def sendback_dlq_delay(self, reconsume_times: int) -> str:
        return str(3 + reconsume_times)


@mutant("retry-level-off-by-one", "sendback/delay-level", "level 0 becomes 2 + reconsumeTimes")
class RetryLevelOffByOne(Semantics):
    def sendback_delay_level(self, delay_level: int, reconsume_times: int) -> int:
        return 2 + reconsume_times if delay_level == 0 else delay_level


@mutant("retry-topic-overwritten", "sendback/retry-topic-property", "RETRY_TOPIC is rewritten at every hop")
class RetryTopicOverwritten(Semantics):
    def keeps_retry_topic(self) -> bool:
        return False


@mutant("origin-id-overwritten", "sendback/origin-message-id", "ORIGIN_MESSAGE_ID is set at every hop")
class OriginOverwritten(Semantics):
    def origin_message_id(self, existing: str | None, offset_msg_id: str, uniq_key: str | None) -> str:
        return offset_msg_id


@mutant(
    "origin-id-is-uniq-key",
    "sendback/origin-message-id",
    "ORIGIN_MESSAGE_ID is the UNIQ_KEY, not the offset id",
)
class OriginIsUniq(Semantics):
    def origin_message_id(self, existing: str | None, offset_msg_id: str, uniq_key: str | None) -> str:
        return existing if existing else (uniq_key or offset_msg_id)


@mutant("header-max-ignored", "sendback/max-reconsume-times", "the request's maxReconsumeTimes is ignored")
class HeaderMaxIgnored(Semantics):
    def honours_header_max(self, version: int) -> bool:
        return False


@mutant(
    "retry-send-gt", "sendback/retry-send-dlq", "a send to %RETRY% dead-letters at > (5.x) on the 4.9 profile"
)
class RetrySendGt(Semantics):
    def retry_send_to_dlq(self, reconsume_times: int, max_reconsume_times: int) -> bool:
        return reconsume_times > max_reconsume_times


# --- transactions ----------------------------------------------------------------------------------------


@mutant("half-visible", "transaction/half-message", "a half message is stored in its real topic at once")
class HalfVisible(Semantics):
    def rewrites_half(self) -> bool:
        return False


@mutant("rollback-visible", "transaction/rollback", "a rollback writes the message to the real topic")
class RollbackVisible(Semantics):
    def rollback_writes_message(self) -> bool:
        return True


@mutant("unknow-as-commit", "transaction/unknown", "END_TRANSACTION UNKNOW commits")
class UnknowAsCommit(Semantics):
    def on_unknown(self) -> str:
        return "commit"


@mutant("op-on-unknow", "transaction/unknown", "END_TRANSACTION UNKNOW writes an op message (no more checks)")
class OpOnUnknow(Semantics):
    def on_unknown(self) -> str:
        return "op"


@mutant("group-not-checked", "transaction/commit-checks", "END_TRANSACTION does not check the producer group")
class GroupNotChecked(Semantics):
    def checks_producer_group(self) -> bool:
        return False


@mutant("commit-not-typed", "transaction/committed-message", "the committed message keeps sysFlag type NOT")
class CommitNotTyped(Semantics):
    def committed_sys_flag(self, sys_flag: int) -> int:
        return sys_flag & ~0xC


@mutant("commit-loses-prepared-offset", "transaction/committed-message", "preparedTransactionOffset is 0")
class CommitLosesPrepared(Semantics):
    def prepared_offset(self, half_commit_log_offset: int) -> int:
        return 0


@mutant(
    "commit-props-cleaned", "transaction/committed-message", "the committed message drops REAL_* and TRAN_MSG"
)
class CommitPropsCleaned(Semantics):
    def committed_stored(self, stored: Props) -> Props:
        return with_props(stored, REAL_TOPIC=None, REAL_QID=None, TRAN_MSG=None)


@mutant(
    "op-body-commit-offset",
    "transaction/op-message",
    "the op body is the commit-log offset: commits get checked",
)
class OpBodyCommitOffset(Semantics):
    def op_body(self, half_queue_offset: int, half_commit_log_offset: int) -> str:
        return str(half_commit_log_offset + 1_000_000)


@mutant("no-check", "transaction/check-timeout", "the broker never checks a half message")
class NoCheck(Semantics):
    def check_due(self, age_ms: int, immunity_ms: int) -> bool:
        return False


@mutant(
    "check-before-timeout", "transaction/check-timeout", "half messages are checked before transactionTimeout"
)
class CheckBeforeTimeout(Semantics):
    def check_due(self, age_ms: int, immunity_ms: int) -> bool:
        return True

    def check_immunity_ms(self, value: str | None, transaction_timeout_ms: int) -> int:
        return 0


@mutant("discard-after-14", "transaction/check-discard", "a half message is discarded after max - 1 checks")
class DiscardEarly(Semantics):
    def must_discard(self, check_times: int, check_max: int) -> bool:
        return check_times >= check_max - 1


@mutant("check-count-stuck", "transaction/check-times", "TRANSACTION_CHECK_TIMES never rises: no discard")
class CheckCountStuck(Semantics):
    def next_check_times(self, seen: int) -> int:
        return seen


@mutant("immunity-ignored", "transaction/check-immunity", "CHECK_IMMUNITY_TIME_IN_SECONDS is ignored")
class ImmunityIgnored(Semantics):
    def check_immunity_ms(self, value: str | None, transaction_timeout_ms: int) -> int:
        return transaction_timeout_ms


# --- batch -----------------------------------------------------------------------------------------------


@mutant("batch-delay-accepted", "batch/broker-illegal", "a batch whose wrapper carries DELAY is accepted")
class BatchDelayAccepted(Semantics):
    def batch_rejects_wrapper_delay(self) -> bool:
        return False


from . import mutants_timer  # noqa: E402, F401  (the 5.x timer's mutants register themselves)

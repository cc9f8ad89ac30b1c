"""Mutants: realistic broker bugs, each one decision of the reference changed (or one fault on its wire).

A conformance suite that passes the reference must fail every mutant (``rmqspec mutants``), and for
the right reason: a mutant counts as killed only by a failure that names its rule, or one of the
``symptoms`` it declares (rules whose checks see the bug first, said with the reason). ``kill.py``
runs the matrix. Kinds:

* a semantic mutant overrides one ``Semantics`` decision of the model (``semantics``);
* a configuration mutant reads the broker settings wrongly (``configure``);
* a wire mutant is the served reference seen through a ``WireFault`` on its frames (``wire``): it runs
  through ``rmqspec serve`` and the wire probe only (``served_only``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import Code, PullStatus
from rmqspec.reference.model import Model
from rmqspec.reference.observations import PullResult, Rejected
from rmqspec.reference.properties import encode_properties
from rmqspec.reference.records import Props
from rmqspec.reference.semantics import Semantics, V5Semantics
from rmqspec.reference.state import with_props

from .wirecheck import WireFinding, parse_frame
from .wireprobe import WireFault, encode, rewrite_body, rewrite_header


@attrs.frozen
class Mutant:
    name: str
    rule: str
    description: str
    semantics: type[Semantics] = Semantics
    # Further rules a failure may name and still kill this mutant for the right reason: where the
    # bug shows first, through another rule's check (each declared with the reason in its definition).
    symptoms: tuple[str, ...] = ()
    configure: Callable[[BrokerConfig], BrokerConfig] | None = None
    wire: WireFault | None = None

    @property
    def rules(self) -> tuple[str, ...]:
        """The rules whose failure kills it: its own, then its declared symptoms."""
        return (self.rule, *self.symptoms)

    @property
    def kind(self) -> str:
        return "wire" if self.wire is not None else "config" if self.configure is not None else "semantic"

    @property
    def served_only(self) -> bool:
        """A wire mutant exists only on the served wire: the kill matrix runs it through ``served``."""
        return self.wire is not None

    def model(self, config: BrokerConfig) -> Model:
        """The mutant on the profile ``config`` names: its one change over that profile's semantics."""
        if self.configure is not None:
            config = self.configure(config)
        sem = self.semantics
        if config.profile is Profile.V5 and sem is Semantics:  # a configuration mutant: no change of its own
            sem = V5Semantics
        elif config.profile is Profile.V5 and not issubclass(sem, V5Semantics):
            sem = type(f"{sem.__name__}V5", (sem, V5Semantics), {})
        return Model(config, sem())


MUTANTS: dict[str, Mutant] = {}


def _add(m: Mutant) -> None:
    if m.name in MUTANTS:
        raise ValueError(f"two mutants named {m.name}")
    MUTANTS[m.name] = m


def mutant(
    name: str, rule: str, description: str, *, symptoms: Sequence[str] = ()
) -> Callable[[type[Semantics]], type[Semantics]]:
    def register(cls: type[Semantics]) -> type[Semantics]:
        cls.name = f"mutant:{name}"
        _add(Mutant(name, rule, description, cls, tuple(symptoms)))
        return cls

    return register


def config_mutant(
    name: str,
    rule: str,
    description: str,
    configure: Callable[[BrokerConfig], BrokerConfig],
    *,
    symptoms: Sequence[str] = (),
) -> None:
    _add(Mutant(name, rule, description, symptoms=tuple(symptoms), configure=configure))


def wire_mutant(name: str, rule: str, description: str, fault: WireFault) -> None:
    _add(Mutant(name, rule, description, wire=fault))


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
    "commit-invisible",
    "transaction/committed-message",
    "a commit answers SUCCESS and writes the op message, but not the message: it never becomes visible",
)
class CommitInvisible(Semantics):
    def commit_writes_message(self) -> bool:
        return False


# symptom transaction/check-resolved: the op's only effect a client sees is that the half it names is
# not checked again (spec: "Its effect is visible through the check").
@mutant(
    "op-body-commit-offset",
    "transaction/op-message",
    "the op body is the commit-log offset: commits get checked",
    symptoms=["transaction/check-resolved"],
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


# --- configuration ---------------------------------------------------------------------------------------


def _minutes_as_seconds(c: BrokerConfig) -> BrokerConfig:
    levels = tuple(ms // 60 if ms % 60_000 == 0 and ms % 3_600_000 else ms for ms in c.delay_levels)
    return attrs.evolve(c, delay_levels=levels)


# symptom schedule/due-time: a table read wrongly shows first as deliveries at the wrong time.
config_mutant(
    "minutes-read-as-seconds",
    "config/delay-level-table",
    "the unit m of messageDelayLevel is read as seconds (1m = 1 s)",
    _minutes_as_seconds,
    symptoms=["schedule/due-time"],
)
config_mutant(
    "transactions-refused-by-default",
    "config/defaults",
    "rejectTransactionMessage defaults to true",
    lambda c: attrs.evolve(c, reject_transaction_message=True),
)
config_mutant(
    "reject-transaction-ignored",
    "put/reject-transaction-message",
    "rejectTransactionMessage=true is not read: half messages are accepted",
    lambda c: attrs.evolve(c, reject_transaction_message=False),
)
config_mutant(
    "group-always-created",
    "sendback/group-lookup",
    "autoCreateSubscriptionGroup=false is not read: any group is created",
    lambda c: attrs.evolve(c, auto_create_subscription_group=True),
)
config_mutant(
    "check-interval-halved",
    "transaction/check-interval",
    "the check service runs every half transactionCheckInterval",
    lambda c: attrs.evolve(c, transaction_check_interval_ms=max(1, c.transaction_check_interval_ms // 2)),
)


# --- properties ------------------------------------------------------------------------------------------


@mutant("value-cut-at-space", "properties/encoding", "a property value is stored up to its first space")
class ValueCutAtSpace(Semantics):
    def read_back(self, stored: Props) -> dict[str, str] | None:
        read = super().read_back(stored)
        return {k: v.split(" ", 1)[0] for k, v in (stored if read is None else read).items()}


@mutant("empty-property-kept", "properties/lenient-decoding", "a property with an empty value is stored")
class EmptyPropertyKept(Semantics):
    def read_back(self, stored: Props) -> dict[str, str] | None:
        return None


# --- put (more) ------------------------------------------------------------------------------------------


@mutant("topic-length-255", "put/topic-validation", "topic names up to 255 characters are accepted")
class TopicLength255(Semantics):
    def topic_name_problem(self, topic: str) -> str | None:
        problem = super().topic_name_problem(topic)
        if problem is not None and len(topic) <= 255 and super().topic_name_problem(topic[:127]) is None:
            return None  # only the length was wrong
        return problem


@mutant(
    "auto-create-takes-template-queues",
    "put/topic-auto-create",
    "an auto-created topic gets the template's 8 queues, not defaultTopicQueueNums",
)
class AutoCreateTemplateQueues(Semantics):
    def auto_create_queue_nums(self, requested: int, template_write_queues: int) -> int:
        return template_write_queues


@mutant(
    "queue-id-at-count-accepted", "put/queue-id-range", "a send to queue id = the queue count is accepted"
)
class QueueIdAtCount(Semantics):
    def queue_id_allowed(self, queue_id: int, queue_count: int) -> bool:
        return queue_id <= queue_count


@mutant("properties-limit-65535", "put/message-illegal", "properties strings up to 65 535 are accepted")
class PropertiesLimit(Semantics):
    def properties_max_length(self) -> int:
        return 65_535

    def store_refuses(
        self, topic: str, body: bytes, props: Props, stored: Props, sys_flag: int
    ) -> str | None:
        refused = super().store_refuses(topic, body, props, stored, sys_flag)
        if refused is not None and len(encode_properties(stored)) <= 65_535 and len(topic) <= 127:
            return None
        return refused


@mutant(
    "send-result-names-stored-queue",
    "put/send-result",
    "a delayed or half send's result names the schedule or half queue, not the requested queue",
)
class SendResultStoredQueue(Semantics):
    def send_result_queue_id(self, resolved: int, stored_queue_id: int) -> int:
        return stored_queue_id


@mutant("wait-stored", "put/stored-properties", "a single message keeps WAIT in its stored properties")
class WaitStored(Semantics):
    def strips_wait(self) -> bool:
        return False


@mutant(
    "view-miss-is-query-not-found",
    "put/commit-log-lookup",
    "VIEW_MESSAGE_BY_ID of an offset with no record answers QUERY_NOT_FOUND",
)
class ViewMissQueryNotFound(Semantics):
    def view_miss(self, rejected: Rejected) -> Rejected:
        return attrs.evolve(rejected, code=Code.QUERY_NOT_FOUND)


# --- dispatch (more) -------------------------------------------------------------------------------------


@mutant("dispatch-reversed", "dispatch/in-order", "records stored together are dispatched last first")
class DispatchReversed(Semantics):
    def dispatch_order(self, start: int, end: int) -> range:
        return range(end - 1, start - 1, -1)


@mutant("max-offset-last-entry", "dispatch/max-offset", "GET_MAX_OFFSET answers the last entry's offset")
class MaxOffsetLastEntry(Semantics):
    def reported_max_offset(self, entries: int) -> int:
        return max(0, entries - 1)


# --- pull (more) -----------------------------------------------------------------------------------------


@mutant("found-next-begin-unmoved", "pull/found", "a FOUND answer's nextBeginOffset is the requested offset")
class FoundNextBeginUnmoved(Semantics):
    def pull_answer(
        self, read_queues: int | None, queue_id: int, offset: int, answer: PullResult | Rejected
    ) -> PullResult | Rejected:
        if isinstance(answer, PullResult) and answer.code == Code.SUCCESS:
            return attrs.evolve(answer, next_begin_offset=offset)
        return answer


@mutant("unknown-topic-not-found", "pull/unknown-topic", "a pull of an unknown topic answers PULL_NOT_FOUND")
class UnknownTopicNotFound(Semantics):
    def pull_answer(
        self, read_queues: int | None, queue_id: int, offset: int, answer: PullResult | Rejected
    ) -> PullResult | Rejected:
        if read_queues is None:
            return PullResult(Code.PULL_NOT_FOUND, PullStatus.NO_MATCHED_LOGIC_QUEUE, offset, 0, 0)
        return answer


@mutant(
    "pull-queue-at-count-accepted",
    "pull/queue-id-range",
    "a pull of queue id = the read queue count answers as an empty queue",
)
class PullQueueAtCount(Semantics):
    def pull_answer(
        self, read_queues: int | None, queue_id: int, offset: int, answer: PullResult | Rejected
    ) -> PullResult | Rejected:
        if isinstance(answer, Rejected) and queue_id == read_queues:
            return PullResult(Code.PULL_NOT_FOUND, PullStatus.NO_MATCHED_LOGIC_QUEUE, offset, 0, 0)
        return answer


# --- schedule (more) -------------------------------------------------------------------------------------


@mutant(
    "level-ordered-by-deliver-time",
    "schedule/fifo-per-level",
    "each level is kept in deliver-time order (a timer wheel), not in store order",
)
class LevelOrderedByDeliverTime(Semantics):
    def schedule_entry_index(self, entries: Sequence[tuple[int, int, int]], tags_code: int) -> int:
        return bisect.bisect_right([e[2] for e in entries], tags_code)


@mutant("no-deliver-clamp", "schedule/deliver-clamp", "a deliver time far in the future is not corrected")
class NoDeliverClamp(Semantics):
    def correct_deliver_timestamp(self, now: int, tags_code: int, delay_ms: int) -> int:
        return tags_code


@mutant(
    "half-topic-copy-delivered",
    "schedule/drop-half-topic",
    "a due copy whose REAL_TOPIC is the half topic is stored there, not dropped",
)
class HalfTopicCopyDelivered(Semantics):
    def drops_half_topic_copy(self) -> bool:
        return False


@mutant(
    "restart-skips-undelivered",
    "schedule/restart-redelivery",
    "after a restart each level resumes at its queue's end: what was not yet delivered never is",
)
class RestartSkipsUndelivered(Semantics):
    def restart_offset(self, persisted: int, entries: int) -> int:
        return entries


# symptom put/send-result: a copy delivered again long after the last persist shows as a duplicate
# delivery, which the checker names by the rule of the first copy's expectation.
@mutant(
    "restart-redelivers-everything",
    "schedule/restart-redelivery",
    "after a restart each level starts again from offset 0: everything is delivered again",
    symptoms=["schedule/due-time"],
)
class RestartRedeliversEverything(Semantics):
    def restart_offset(self, persisted: int, entries: int) -> int:
        return 0


# --- send-back (more) ------------------------------------------------------------------------------------


@mutant("no-retry-queues-retried", "sendback/no-retry-queues", "retryQueueNums 0 still stores a retry copy")
class NoRetryQueuesRetried(Semantics):
    def retry_queue_count(self, configured: int) -> int:
        return max(1, configured)


@mutant("retry-queue-past-the-last", "sendback/retry-topic", "the retry copy goes to queue retryQueueNums")
class RetryQueuePastTheLast(Semantics):
    def retry_queue_id(self, choice: int, retry_queue_nums: int) -> int:
        return retry_queue_nums


@mutant(
    "send-back-miss-dropped",
    "sendback/lookup-by-offset",
    "a send-back naming no record answers SUCCESS (the client does not fall back)",
)
class SendBackMissDropped(Semantics):
    def send_back_miss(self, rejected: Rejected) -> Rejected | None:
        return None


@mutant(
    "retry-not-scheduled",
    "sendback/through-schedule",
    "the retry copy is stored in %RETRY% at once, without passing the schedule topic",
)
class RetryNotScheduled(Semantics):
    def retry_copy_delay(self, level: int) -> str | None:
        return None


# symptom sendback/delay-level: a hop at another level than 3 + reconsumeTimes carries another DELAY.
@mutant(
    "ladder-stops-at-level-10",
    "sendback/ladder",
    "the broker's retry level stops rising at level 10",
    symptoms=["sendback/delay-level"],
)
class LadderStopsAt10(Semantics):
    def sendback_delay_level(self, delay_level: int, reconsume_times: int) -> int:
        return min(3 + reconsume_times, 10) if delay_level == 0 else delay_level


# --- transactions (more) ---------------------------------------------------------------------------------


@mutant(
    "commit-of-nothing-succeeds",
    "transaction/commit-lookup",
    "END_TRANSACTION naming no record answers SUCCESS",
)
class CommitOfNothingSucceeds(Semantics):
    def commit_miss(self, rejected: Rejected) -> Rejected | None:
        return None


@mutant(
    "end-tx-idempotent",
    "transaction/not-idempotent",
    "a second END_TRANSACTION of an ended half is ignored (4.9.x applies it again)",
)
class EndTxIdempotent(Semantics):
    def end_tx_idempotent(self) -> bool:
        return True


@mutant(
    "no-producer-round-skipped",
    "transaction/check-no-producer",
    "a round with no producer online neither copies nor counts the half message",
)
class NoProducerRoundSkipped(Semantics):
    def checks_without_producer(self) -> bool:
        return False


@mutant(
    "expiry-ignored",
    "transaction/check-skip-expired",
    "a half message older than fileReservedTime is checked",
)
class ExpiryIgnored(Semantics):
    def expired(self, age_ms: int, reserved_ms: int) -> bool:
        return False


@mutant("ops-ignored", "transaction/check-resolved", "the check service ignores op messages")
class OpsIgnored(Semantics):
    def honours_ops(self) -> bool:
        return False


@mutant(
    "end-after-immunity-accepted",
    "transaction/end-after-immunity",
    "a commit past its immunity that is not a check's answer is applied (5.1.1+ refuses it)",
)
class EndAfterImmunityAccepted(Semantics):
    def rejects_end_after_immunity(self) -> bool:
        return False


@mutant("ops-not-batched", "transaction/op-batch", "5.1.0+ writes each op at once instead of batching them")
class OpsNotBatched(Semantics):
    def batched_ops(self) -> bool:
        return False


@mutant(
    "check-progress-not-written",
    "transaction/check-restart",
    "the check service's progress is never written: after a restart it reads the half and op queues "
    "from the start, checking again every record it had passed",
)
class CheckProgressNotWritten(Semantics):
    def check_progress_after_restart(self, kept: tuple[int, int]) -> tuple[int, int]:
        return (0, 0)


# --- batch (more) ----------------------------------------------------------------------------------------


@mutant("batch-inner-delay-honoured", "batch/inner-delay-ignored", "an inner DELAY of a batch delays it")
class BatchInnerDelayHonoured(Semantics):
    def batch_inner_delay_ignored(self) -> bool:
        return False


@mutant("batch-result-names-last", "batch/consecutive-offsets", "a batch's result names its last message")
class BatchResultNamesLast(Semantics):
    def batch_result_offset(self, offsets: Sequence[int]) -> int:
        return offsets[-1]


@mutant("batch-wait-dropped", "batch/stored-properties", "a batch message loses WAIT like a single one")
class BatchWaitDropped(Semantics):
    def batch_stored(self, inner: Props, wrapper: Props) -> Props:
        return with_props(super().batch_stored(inner, wrapper), WAIT=None)


# --- the wire (served only) ------------------------------------------------------------------------------


def _header_length_off(frame: bytes) -> bytes:
    """The header length counts one byte too many."""
    mark = int.from_bytes(frame[4:8], "big")
    return frame[:4] + (mark + 1).to_bytes(4, "big") + frame[8:]


def _is_response(header: dict[str, Any]) -> bool:
    return bool(int(header.get("flag", 0)) & 1)


def _opaque_plus_one(frame: bytes) -> bytes:
    def change(h: dict[str, Any]) -> None:
        if _is_response(h):
            h["opaque"] = int(h.get("opaque", 0)) + 1

    return rewrite_header(frame, change)


def _drop_ext(key: str) -> Callable[[bytes], bytes]:
    def change(h: dict[str, Any]) -> None:
        if _is_response(h):
            (h.get("extFields") or {}).pop(key, None)

    def rewrite(frame: bytes) -> bytes:
        return rewrite_header(frame, change)

    return rewrite


def _lower_msg_id(frame: bytes) -> bytes:
    def change(h: dict[str, Any]) -> None:
        ext = h.get("extFields") or {}
        if _is_response(h) and "msgId" in ext:
            ext["msgId"] = ext["msgId"].lower()

    return rewrite_header(frame, change)


def _crc_unmasked(frame: bytes) -> bytes:
    """BODYCRC without the & 0x7FFFFFFF mask: the sign bit of every record's CRC set."""

    def change(header: dict[str, Any], body: bytes) -> bytes:
        if not _is_response(header) or int(header.get("code", -1)) != 0 or len(body) < 12:
            return body
        out = bytearray(body)
        pos = 0
        while pos + 12 <= len(out):
            total = int.from_bytes(out[pos : pos + 4], "big", signed=True)
            if total < 12 or pos + total > len(out):
                break
            out[pos + 8] |= 0x80
            pos += total
        return bytes(out)

    return rewrite_body(frame, change)


def _check_two_way(frame: bytes) -> bytes:
    def change(h: dict[str, Any]) -> None:
        if int(h.get("code", 0)) == 39 and not _is_response(h):
            h["flag"] = 0

    return rewrite_header(frame, change)


def _answer_unknow(frame: bytes) -> tuple[bytes | None, bytes | None]:
    """An END_TRANSACTION UNKNOW sent two-way is answered SUCCESS (it still reaches the broker)."""
    parsed = parse_frame(frame)
    if isinstance(parsed, WireFinding):
        return frame, None
    h = parsed.header
    unknow = int(h.get("code", 0)) == 37 and parsed.ext.get("commitOrRollback") == "0"
    if unknow and not parsed.flag & 2:
        return frame, encode(0, {}, opaque=int(h.get("opaque", 0)), flag=1)
    return frame, None


class _HeartbeatRefused:
    """HEART_BEAT answered SYSTEM_ERROR (the broker still registers the connection)."""

    def __init__(self) -> None:
        self.opaques: set[int] = set()

    def to_broker(self, frame: bytes) -> tuple[bytes | None, bytes | None]:
        parsed = parse_frame(frame)
        if not isinstance(parsed, WireFinding) and int(parsed.header.get("code", 0)) == 34:
            self.opaques.add(int(parsed.header.get("opaque", 0)))
        return frame, None

    def to_client(self, frame: bytes) -> bytes:
        def change(h: dict[str, Any]) -> None:
            if _is_response(h) and int(h.get("opaque", -1)) in self.opaques:
                h["code"] = 1

        return rewrite_header(frame, change)


_refused = _HeartbeatRefused()

wire_mutant(
    "frame-header-length-off",
    "wire/frame",
    "the header length of every frame counts one byte too many",
    WireFault(to_client=_header_length_off),
)
wire_mutant(
    "opaque-not-echoed",
    "wire/request-response",
    "a response carries the request's opaque plus one",
    WireFault(to_client=_opaque_plus_one),
)
wire_mutant(
    "send-result-without-queue-offset",
    "wire/send-headers",
    "a send response lacks queueOffset",
    WireFault(to_client=_drop_ext("queueOffset")),
)
wire_mutant(
    "pull-without-max-offset",
    "wire/pull-response",
    "a pull response lacks maxOffset",
    WireFault(to_client=_drop_ext("maxOffset")),
)
wire_mutant(
    "body-crc-unmasked",
    "wire/record-layout",
    "a record's BODYCRC is not masked with 0x7FFFFFFF",
    WireFault(to_client=_crc_unmasked),
)
wire_mutant(
    "msg-id-lower-case",
    "wire/offset-msg-id",
    "the offset message id is written in lower-case hex",
    WireFault(to_client=_lower_msg_id),
)
wire_mutant(
    "check-request-two-way",
    "wire/check-request",
    "CHECK_TRANSACTION_STATE is sent as a two-way request",
    WireFault(to_client=_check_two_way),
)
wire_mutant(
    "unknow-answered",
    "wire/end-transaction",
    "END_TRANSACTION UNKNOW sent two-way is answered",
    WireFault(to_broker=_answer_unknow),
)
wire_mutant(
    "heartbeat-refused",
    "wire/heartbeat",
    "HEART_BEAT is answered SYSTEM_ERROR",
    WireFault(to_client=_refused.to_client, to_broker=_refused.to_broker),
)


# Rules without a mutant, each with the reason no broker bug can be planted for it.
EXEMPT: dict[str, str] = {
    "dispatch/tags-code": "the tags code only decides tag filtering on pull, and no operation of the "
    "suite subscribes to a tag: a wrong code changes nothing a client of the suite can observe",
    "batch/client-rules": "a rule of the producer client, not of the broker: the scenario step "
    "batch_client runs the model's own client_check, so no target can get it wrong",
    "history/well-formed": "a rule about the suite's history format, not about a broker: the history "
    "fixtures (tests/fixtures/histories) break it instead",
    "history/known-operations": "a rule about the suite's history format, not about a broker: the "
    "history fixtures break it instead",
    "history/judged-answers": "a rule about the suite's history format, not about a broker: the history "
    "fixtures break it instead",
    "timer/order": "no scenario can make two slots of the model's wheel due at one read: the model reads "
    "each slot at the instant it falls due (the broker's earliest), so a mutant that reads due slots in "
    "another order changes nothing on a logical clock; only a restart re-reads several slots at once, and "
    "that repeat is optional (timer/restart). A broker that reads out of order shows in the order of the "
    "pulled copies, which the timer's support in the history checker (not built yet) is to judge",
}


from . import mutants_timer  # noqa: E402, F401  (the 5.x timer's mutants register themselves)

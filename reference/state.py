"""The broker state as one persistent value, and the store mechanics every transition shares.

Persistent containers (``immutables.Map``, a HAMT, and ``pyrsistent.pvector``, a persistent vector trie)
make every update O(log n): no transition copies the commit log or a consume queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import immutables
from pyrsistent import pvector
from pyrsistent.typing import PVector

from .config import BrokerConfig, Profile
from .constants import (
    DEFAULT_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    PERM_RW,
    SCHEDULE_QUEUE_NUM,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
)
from .records import CQEntry, Props, QueueKey, Record

if TYPE_CHECKING:
    from .transaction import CheckRun

_EMPTY_CQ: PVector[CQEntry] = pvector()


@attrs.frozen
class TopicConfig:
    read_queues: int
    write_queues: int
    perm: int = PERM_RW

    @property
    def writable(self) -> bool:
        return bool(self.perm & 2)


@attrs.frozen
class GroupConfig:
    """A subscription group's retry settings (facts §6): retryQueueNums and retryMaxTimes."""

    retry_queue_nums: int = 1
    retry_max_times: int = 16


@attrs.frozen
class Store:
    """Commit log, consume queues and the per-queue offset counters (topicQueueTable)."""

    # position -> record. A HAMT rather than a pvector: the C pvector's nodes are not objects of their
    # own, so the garbage collector walked all of the commit log on each young collection (O(n) per
    # operation, measured by benchmarks/model_ops.py); a HAMT's new nodes are the only young ones.
    records: immutables.Map[int, Record] = attrs.field(factory=immutables.Map)
    index: immutables.Map[int, int] = attrs.field(factory=immutables.Map)  # commit-log offset -> position
    end: int = 0  # next physical offset
    counters: immutables.Map[QueueKey, int] = attrs.field(factory=immutables.Map)
    cqs: immutables.Map[QueueKey, PVector[CQEntry]] = attrs.field(factory=immutables.Map)
    reput: int = 0  # records dispatched so far
    uniq: immutables.Map[str, PVector[int]] = attrs.field(factory=immutables.Map)  # UNIQ_KEY -> offsets

    def lookup(self, commit_log_offset: int) -> Record | None:
        pos = self.index.get(commit_log_offset)
        return None if pos is None else self.records[pos]

    def cq(self, topic: str, queue_id: int) -> PVector[CQEntry]:
        return self.cqs.get((topic, queue_id), _EMPTY_CQ)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next consume-queue offset to be written (GET_MAX_OFFSET). rule: dispatch/max-offset"""
        return len(self.cq(topic, queue_id))


@attrs.frozen
class WheelEntry:
    """One entry of the timer wheel (a TimerLog unit): which timer record, when the timer read it.

    ``enqueue_ms`` is the timer's write time when it read the record (``currWriteTimeMs``, a multiple of
    the precision): it becomes the delivered copy's ``TIMER_ENQUEUE_MS``. ``roll``: the entry only moves the
    message nearer (MAGIC_ROLL); ``delete``: the record is a cancel marker (MAGIC_DELETE). rule: timer/roll
    """

    commit_log_offset: int
    enqueue_ms: int
    roll: bool = False
    delete: bool = False


@attrs.frozen
class TimerState:
    """The 5.x timer (``TimerMessageStore``): how far it has read the timer queue, and its wheel.

    ``wheel`` maps a slot's time (a multiple of the precision) to its entries in the order they were
    written; a slot is read, and emptied, once the write time has passed it. ``checkpoint`` is the state
    the last flush saved (``timercheck``, ``timerwheel``, ``timerlog``): a restart comes back to it.
    rule: timer/due-time, timer/restart
    """

    enqueued: int = 0  # entries of the timer queue read so far (currQueueOffset)
    wheel: immutables.Map[int, tuple[WheelEntry, ...]] = attrs.field(factory=immutables.Map)
    checkpoint: TimerState | None = None

    def saved(self) -> TimerState:
        """This state as the flush saves it."""
        return attrs.evolve(self, checkpoint=None)


@attrs.frozen
class BrokerState:
    """Everything a broker remembers. A value: transitions return a new one."""

    config: BrokerConfig
    store: Store = attrs.field(factory=Store)
    topics: immutables.Map[str, TopicConfig] = attrs.field(factory=immutables.Map)
    groups: immutables.Map[str, GroupConfig] = attrs.field(factory=immutables.Map)
    schedule_offsets: immutables.Map[int, int] = attrs.field(factory=immutables.Map)
    persisted_schedule_offsets: immutables.Map[int, int] = attrs.field(factory=immutables.Map)
    producers: immutables.Map[str, int] = attrs.field(factory=immutables.Map)  # group -> connections
    tx_half_offset: int = 0  # committed offsets of CID_RMQ_SYS_TRANS on the half and op queues
    tx_op_offset: int = 0
    # The transaction check service (reference/transaction.py): a run that waits inside its loop, and when
    # the last run ended (the next one starts transactionCheckInterval later).
    tx_run: CheckRun | None = None
    tx_last_run_end: int | None = None
    # UNIQ_KEYs of the copies the last run wrote and MAY already have discarded (transaction/check-discard):
    # the broker's loop reaches its own copies when they are dispatched in time; the model's run stops
    # before them, and its next run discards them.
    tx_discardable: frozenset[str] = frozenset()
    # Half-queue offsets checked outside the model's runs (transaction.check_now): a later run passes them.
    tx_checked_aside: frozenset[int] = frozenset()
    # A broker other producers share (a checker's reading of one client's history): records the model does
    # not see may lie in the half queue before each record, born as late as that record was stored, and one
    # younger than the timeout stops a run there. ``tx_stored_by``: half offset -> the latest time the
    # broker may have stored the record (its send's answer); otherwise its store time.
    # rule: transaction/check-timeout
    tx_hidden_producers: bool = False
    tx_stored_by: immutables.Map[int, int] = attrs.field(factory=immutables.Map)
    # 5.x op batch service: entries "<offset>," not yet written, and when the last op was written (None
    # until the first END_TRANSACTION creates the queue's context).
    tx_op_pending: tuple[str, ...] = ()
    tx_op_last_write: int | None = None
    # The op batch service's tick grid: it runs at ``tx_op_anchor + k * transactionOpBatchInterval``
    # (k >= 1), from its start (None: ``started_at``, or 0) or from the last time an oversize list woke it.
    tx_op_anchor: int | None = None
    timer: TimerState = attrs.field(factory=TimerState)
    # A restart at a known time (rule: schedule/restart-redelivery): the schedule service delivers nothing
    # before ``schedule_resume_at`` (FIRST_DELAY_TIME after the start) and flushes its offsets every
    # flushDelayOffsetInterval counted from ``started_at`` (None: from time 0, a broker never restarted).
    schedule_resume_at: int | None = None
    started_at: int | None = None

    def with_topic(self, topic: str, config: TopicConfig) -> BrokerState:
        return attrs.evolve(self, topics=self.topics.set(topic, config))


def initial_state(config: BrokerConfig) -> BrokerState:
    """A fresh broker: SCHEDULE_TOPIC_XXXX (18 queues) and, with autoCreateTopicEnable on, the default topic
    TBW102 (defaultTopicQueueNums queues, 8 by default) exist; under the 5.x profile also the half and op
    topics (1 queue each: TopicConfigManager's constructor, 5.0.0-5.5.0) and, with the timer on, from 5.3.1
    rmq_sys_wheel_timer (one queue).
    rule: config/defaults, pull/unknown-topic, timer/rewrite, put/topic-auto-create
    """
    tbw = config.default_topic_queue_nums
    topics: dict[str, TopicConfig] = {SCHEDULE_TOPIC: TopicConfig(SCHEDULE_QUEUE_NUM, SCHEDULE_QUEUE_NUM)}
    if config.auto_create_topic:
        # TopicConfigManager's constructor makes TBW102 only when autoCreateTopicEnable is on (4.9.0-4.9.8,
        # 5.0.0-5.3.3 read). rule: put/topic-auto-create
        topics = {DEFAULT_TOPIC: TopicConfig(tbw, tbw, 7), **topics}
    if config.profile is Profile.V5:
        topics[HALF_TOPIC] = TopicConfig(1, 1)
        topics[OP_TOPIC] = TopicConfig(1, 1)
        if config.timer_wheel_enable and config.since("5.3.1"):
            # TopicConfigManager's constructor creates it from 5.3.1 (#8535); before, the first timer
            # message creates it (rule: timer/rewrite)
            topics[TIMER_TOPIC] = TopicConfig(1, 1)
    return BrokerState(config=config, topics=immutables.Map(topics))


def store_append(store: Store, record: Record) -> Store:
    """Append one record at ``store.end`` (the caller built it with that offset)."""
    uniq = record.uniq_key
    new_uniq = store.uniq
    if uniq is not None:
        new_uniq = store.uniq.set(uniq, store.uniq.get(uniq, pvector()).append(record.commit_log_offset))
    return attrs.evolve(
        store,
        records=store.records.set(len(store.records), record),
        index=store.index.set(record.commit_log_offset, len(store.records)),
        end=store.end + record.size,
        uniq=new_uniq,
    )


def with_props(p: Props, **changes: str | None) -> Props:
    """Set (str) or remove (None) properties."""
    mm = p.mutate()
    for k, v in changes.items():
        if v is None:
            mm.pop(k, None)
        else:
            mm[k] = v
    return mm.finish()

"""The model as one value: ``Model(config, semantics)`` with pure transitions over ``BrokerState``.

Every transition takes the state and ``now`` (ms) and returns the new state and what was observed;
nothing is read from a clock or drawn at random. ``Model.step`` is the single entry point over the
operation union (the WebAssembly interpreter's ``step(config) -> config``); the named methods are the
same transitions for direct use.
"""

from __future__ import annotations

import bisect

import attrs

from . import batch as _batch
from . import pull as _pull
from . import put as _put
from . import schedule as _schedule
from . import sendback as _sendback
from . import timer as _timer
from . import transaction as _tx
from .batch import Batch
from .config import BrokerConfig, Profile
from .constants import HALF_TOPIC, RETRY_PREFIX
from .observations import (
    Ack,
    BatchOk,
    CheckRequest,
    Delivered,
    Discarded,
    DroppedOnDelivery,
    EndTxOk,
    Event,
    Found,
    MaxOffset,
    NoResponse,
    Observation,
    PullResult,
    Rejected,
    SendBackOk,
    SendOk,
    TimerDelivered,
    TimerDropped,
    TimerRolled,
)
from .put import Message
from .records import Record
from .semantics import REFERENCE, Semantics, V5Semantics
from .sendback import SendBack
from .state import BrokerState, initial_state
from .transaction import EndTransaction

# --- the operation union ---------------------------------------------------------------------------------


@attrs.frozen
class Send:
    message: Message
    queue_choice: int = 0


@attrs.frozen
class SendBatch:
    batch: Batch
    queue_choice: int = 0


@attrs.frozen
class Pull:
    topic: str
    queue_id: int
    offset: int
    max_msgs: int = 32
    group: str = "CG"
    client: tuple[str, int] = _pull.DEFAULT_CLIENT  # the consumer's address (remarks name it)


@attrs.frozen
class ConsumerSendBack:
    request: SendBack
    queue_choice: int = 0


@attrs.frozen
class EndTx:
    request: EndTransaction


@attrs.frozen
class Heartbeat:
    """A producer of ``group`` connects (online) or goes away; ``consumer``: a consumer of ``group``
    heartbeats (HEART_BEAT's consumerDataSet), which makes the broker create the group's retry topic."""

    group: str
    online: bool = True
    consumer: bool = False


@attrs.frozen
class GetMaxOffset:
    topic: str
    queue_id: int


@attrs.frozen
class ViewMessage:
    commit_log_offset: int


@attrs.frozen
class QueryUniqKey:
    topic: str
    uniq_key: str


Op = (
    Send | SendBatch | Pull | ConsumerSendBack | EndTx | Heartbeat | GetMaxOffset | ViewMessage | QueryUniqKey
)


def semantics_for(profile: Profile) -> Semantics:
    return V5Semantics() if profile is Profile.V5 else REFERENCE


# ScheduleMessageService.FIRST_DELAY_TIME: the levels' tasks start this long after the service.
FIRST_DELAY_TIME_MS = 1000


@attrs.frozen
class Model:
    """The reference broker. Stateless itself: every method is a pure function of its arguments."""

    config: BrokerConfig = attrs.field(factory=BrokerConfig)
    semantics: Semantics = attrs.field(
        default=attrs.Factory(lambda self: semantics_for(self.config.profile), takes_self=True)
    )
    check_phase_ms: int = 0  # the check service runs at check_phase_ms + k * transactionCheckInterval
    flush_delay_offset_interval_ms: int = 10_000
    # Check rounds known to have run (a real broker's rounds drift: each waits the interval after the
    # last one ended). A periodic tick within half an interval of a known round is replaced by it.
    check_rounds: tuple[int, ...] = ()
    # Runs drift by an unknown amount (a shared 5.x broker's runs spin on other clients' op messages):
    # no periodic run before the first known round, and one between two known rounds only where it fits
    # an interval before the next. rule: transaction/check-interval
    drifting: bool = False

    @property
    def name(self) -> str:
        return self.semantics.name

    def initial(self) -> BrokerState:
        return initial_state(self.config)

    # -- client requests (each followed by the reput dispatch, as the broker does within milliseconds) --

    def send(
        self, state: BrokerState, msg: Message, now: int, queue_choice: int = 0
    ) -> tuple[BrokerState, SendOk | Rejected]:
        state, obs = _put.send(state, msg, now, self.semantics, queue_choice)
        return self.dispatch(state), obs

    def send_batch(
        self, state: BrokerState, batch: Batch, now: int, queue_choice: int = 0
    ) -> tuple[BrokerState, BatchOk | Rejected]:
        state, obs = _batch.send_batch(state, batch, now, self.semantics, queue_choice)
        return self.dispatch(state), obs

    def send_back(
        self, state: BrokerState, req: SendBack, now: int, queue_choice: int = 0
    ) -> tuple[BrokerState, SendBackOk | Rejected]:
        state, obs = _sendback.send_back(state, req, now, self.semantics, queue_choice)
        return self.dispatch(state), obs

    def end_transaction(
        self, state: BrokerState, req: EndTransaction, now: int
    ) -> tuple[BrokerState, EndTxOk | Rejected | NoResponse]:
        state, obs = _tx.end_transaction(state, req, now, self.semantics)
        return self.dispatch(state), obs

    def pull(
        self,
        state: BrokerState,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int = 32,
        group: str = "CG",
        client: tuple[str, int] = _pull.DEFAULT_CLIENT,
    ) -> PullResult | Rejected:
        answer = _pull.pull(state, group, topic, queue_id, offset, max_msgs, self.semantics, client)
        return self.pull_answer(state, topic, queue_id, offset, answer)

    def pull_answer(
        self, state: BrokerState, topic: str, queue_id: int, offset: int, answer: PullResult | Rejected
    ) -> PullResult | Rejected:
        tc = state.topics.get(topic)
        return self.semantics.pull_answer(None if tc is None else tc.read_queues, queue_id, offset, answer)

    def heartbeat(
        self, state: BrokerState, group: str, *, online: bool = True, consumer: bool = False
    ) -> BrokerState:
        """Register (online) or drop (offline) one producer connection of ``group``. ``online`` is
        keyword-only: ``heartbeat(state, "PG", 0)`` must not quietly mean "offline". A consumer's
        heartbeat finds (or creates) the group's subscription config and, when there is one, creates
        ``%RETRY%<group>`` with its retryQueueNums queues (ClientManageProcessor.heartBeat); it counts no
        producer. rule: sendback/retry-topic"""
        if consumer:
            if not online:
                return state  # unregistering a consumer leaves its retry topic
            found = _put.group_config(state, group, self.semantics)
            if found is None:
                return state
            state, gc = found
            return _put.ensure_topic(state, RETRY_PREFIX + group, gc.retry_queue_nums)
        count = state.producers.get(group, 0) + (1 if online else -1)
        if count > 0:
            return attrs.evolve(state, producers=state.producers.set(group, count))
        if group in state.producers:
            return attrs.evolve(state, producers=state.producers.delete(group))
        return state

    def max_offset(self, state: BrokerState, topic: str, queue_id: int) -> MaxOffset:
        found = _pull.max_offset(state, topic, queue_id)
        return attrs.evolve(found, offset=self.semantics.reported_max_offset(found.offset))

    def view(self, state: BrokerState, commit_log_offset: int) -> Found | Rejected:
        found = _pull.view(state, commit_log_offset)
        return self.semantics.view_miss(found) if isinstance(found, Rejected) else found

    def query(self, state: BrokerState, topic: str, uniq_key: str) -> Found | Rejected:
        return _pull.query_uniq(state, topic, uniq_key)

    # -- the broker's own services -----------------------------------------------------------------------

    def dispatch(self, state: BrokerState) -> BrokerState:
        return _put.dispatch(state, self.semantics)

    def deliver(
        self, state: BrokerState, now: int
    ) -> tuple[
        BrokerState, list[Delivered | DroppedOnDelivery | TimerDelivered | TimerRolled | TimerDropped]
    ]:
        """The delivering services at ``now``: the schedule service's levels, then the 5.x timer."""
        if state.schedule_resume_at is not None and now < state.schedule_resume_at:
            scheduled: list[Delivered | DroppedOnDelivery] = []  # the service has not started its levels yet
        else:
            state, scheduled = _schedule.deliver_due(state, now, self.semantics)
        state = self.dispatch(state)
        state, timed = _timer.run(state, now, self.semantics)
        return self.dispatch(state), [*scheduled, *timed]

    def check(self, state: BrokerState, now: int) -> tuple[BrokerState, list[CheckRequest | Discarded]]:
        """A check run at ``now``, or the suspended run going on once it is due. rule: transaction/check-interval"""
        state, events = _tx.check(state, now, self.semantics, known=now in self.check_rounds)
        return self.dispatch(state), events

    def check_now(self, state: BrokerState, half: Record, now: int) -> tuple[BrokerState, CheckRequest]:
        """``half`` checked at ``now`` outside the model's runs (see transaction.check_now)."""
        state, request = _tx.check_now(state, half, now, self.semantics)
        return self.dispatch(state), request

    def write_ops(self, state: BrokerState, now: int) -> BrokerState:
        """The 5.x op batch service at ``now``. rule: transaction/op-batch"""
        return self.dispatch(_tx.op_service(state, now, self.semantics))

    def persist(self, state: BrokerState) -> BrokerState:
        return _schedule.persist_offsets(state)

    def restart(self, state: BrokerState, now: int | None = None, orderly: bool = False) -> BrokerState:
        """The broker stops and starts again on its store. With ``now`` (when it starts again) the services
        start as a new broker's do: the schedule service's levels FIRST_DELAY_TIME (1000 ms) after it
        (rule: schedule/restart-redelivery), its offset flush every flushDelayOffsetInterval from it, and
        the check service's first run one transactionCheckInterval after it (``waitForRunning`` before
        each run; rule: transaction/check-interval)."""
        # A check run in progress is lost; 5.x op entries not yet written are lost in a crash. In an
        # ``orderly`` stop from 5.1.4 the op batch service is stopped before the store
        # (``TransactionalMessageServiceImpl.close`` in ``shutdownBasicService``): ``ServiceThread.shutdown``
        # wakes it for one last ``batchSendOpMessage``, which writes only the entries already due; 5.1.0-5.1.3
        # never stop it. The rest are lost (rule: transaction/op-batch, transaction/check-restart).
        state = attrs.evolve(state, tx_run=None, tx_discardable=frozenset())
        if state.tx_op_pending and orderly and now is not None and self.config.since("5.1.4"):
            state = _tx.op_service(state, now, self.semantics)
        state = attrs.evolve(state, tx_op_pending=(), tx_op_last_write=None, tx_op_anchor=None)
        # The check service's progress comes back from what was written (rule: transaction/check-restart).
        half, op = self.semantics.check_progress_after_restart((state.tx_half_offset, state.tx_op_offset))
        state = attrs.evolve(state, tx_half_offset=half, tx_op_offset=op)
        if now is not None:
            state = attrs.evolve(
                state,
                schedule_resume_at=now + FIRST_DELAY_TIME_MS,
                started_at=now,
                tx_last_run_end=now,
            )
        return _timer.restart(_schedule.restart(state, self.semantics), self.semantics)

    def next_check_time(self, after: int, last_end: int | None = None) -> int:
        """The first check-service run strictly after ``after``: one interval after the last run ended
        (``last_end``), or on the phase's ticks before any run. rule: transaction/check-interval"""
        interval = self.config.transaction_check_interval_ms
        base = self.check_phase_ms if last_end is None else last_end
        k = (after - base) // interval + 1
        tick = base + k * interval
        rounds = self.check_rounds
        if not rounds:
            return tick
        half = interval // 2
        while True:  # the next periodic tick that no known round stands in for
            i = bisect.bisect_left(rounds, tick - half)
            if i < len(rounds) and rounds[i] <= tick + half:
                tick += interval
                continue
            if self.drifting and i < len(rounds) and (i == 0 or tick + interval > rounds[i] + half):
                # before the first known round, or no room before the next one: the next known round
                return rounds[bisect.bisect_right(rounds, after)]
            break
        j = bisect.bisect_right(rounds, after)
        return min(tick, rounds[j]) if j < len(rounds) else tick

    def advance(self, state: BrokerState, start: int, end: int) -> tuple[BrokerState, list[Event]]:
        """Run the broker's services on a logical clock from ``start`` to ``end`` (both inclusive).

        Deliveries happen at their deliver time exactly, check runs at their ticks and offset flushes
        every ``flush_delay_offset_interval_ms`` (the timer's checkpoint every ``timerFlushIntervalMs``):
        the earliest time the spec allows for each.
        """
        events: list[Event] = []
        flush = self.flush_delay_offset_interval_ms
        timer_flush = max(1, self.config.timer_flush_interval_ms)
        now = start
        state, delivered = self.deliver(state, now)
        events.extend(delivered)
        if state.tx_run is not None and now >= state.tx_run.resume_at:  # a run an op message woke
            state, checks = self.check(state, now)
            events.extend(checks)
        while True:
            # Only ticks that can change something are visited: a flush when the offsets moved since the
            # last one, a check run when the half queue has unprocessed entries, and deliver times.
            candidates = []
            base = state.started_at or 0  # the flush grid starts with the broker
            if state.schedule_offsets != state.persisted_schedule_offsets:
                candidates.append(base + ((now - base) // flush + 1) * flush)
            if state.tx_run is not None:
                candidates.append(max(state.tx_run.resume_at, now + 1))
            elif state.tx_half_offset < state.store.max_offset(HALF_TOPIC, 0):
                candidates.append(self.next_check_time(now, state.tx_last_run_end))
            op_write = _tx.next_op_write(state, now)
            if op_write is not None:
                candidates.append(max(op_write, now + 1))
            due = _schedule.next_due(state, self.semantics, now)
            if due is not None and state.schedule_resume_at is not None:
                due = max(due, state.schedule_resume_at)
            if due is not None and due > now:
                candidates.append(due)
            if self.semantics.has_timer():
                timer_due = _timer.next_due(state, self.semantics)
                if timer_due is not None and timer_due > now:
                    candidates.append(timer_due)
                if _timer.dirty(state):
                    candidates.append((now // timer_flush + 1) * timer_flush)
            if not candidates or min(candidates) > end:
                state, delivered = self.deliver(state, end)  # the services also run at the final instant
                events.extend(delivered)
                return state, events
            now = min(candidates)
            state, delivered = self.deliver(state, now)
            events.extend(delivered)
            if (now - base) % flush == 0:
                state = self.persist(state)
            if now % timer_flush == 0 and self.semantics.has_timer():
                state = _timer.flush(state)
            if op_write is not None and now >= op_write:
                state = self.write_ops(state, now)
            run = state.tx_run
            if (run is not None and now >= run.resume_at) or (
                run is None and now == self.next_check_time(now - 1, state.tx_last_run_end)
            ):
                state, checks = self.check(state, now)
                events.extend(checks)

    # -- the single step ----------------------------------------------------------------------------------

    def step(self, state: BrokerState, op: Op, now: int) -> tuple[BrokerState, Observation]:
        """Apply one client operation. rule: put/send-result"""
        match op:
            case Send(message=m, queue_choice=c):
                return self.send(state, m, now, c)
            case SendBatch(batch=b, queue_choice=c):
                return self.send_batch(state, b, now, c)
            case Pull(topic=t, queue_id=q, offset=o, max_msgs=n, group=g, client=c):
                state, answer = _pull.pull_request(
                    state, g, t, q, o, n, self.semantics, c
                )  # may create the group
                return state, self.pull_answer(state, t, q, o, answer)
            case ConsumerSendBack(request=r, queue_choice=c):
                return self.send_back(state, r, now, c)
            case EndTx(request=r):
                return self.end_transaction(state, r, now)
            case Heartbeat(group=g, online=on, consumer=c):
                return self.heartbeat(state, g, online=on, consumer=c), Ack()
            case GetMaxOffset(topic=t, queue_id=q):
                return state, self.max_offset(state, t, q)
            case ViewMessage(commit_log_offset=o):
                return state, self.view(state, o)
            case QueryUniqKey(topic=t, uniq_key=k):
                return state, self.query(state, t, k)
        raise TypeError(f"not an rmqspec operation: {op!r}")

"""The checker's state, and how it reports: every anomaly with its subjects, linked to its root cause.

The checker is split by job into mixins over this one state (``windows``, ``records``, ``order``,
``transactions``, ``pulls``, ``operations``); ``core.Checker`` puts them together.

Root cause first: an anomaly names what it is about (``subjects``: a message by its UNIQ_KEY, a queue,
a topic). Some anomalies change what the target holds from then on compared with the model (a message
it refused or stored where the model did not, a copy it delivered early or never): those *taint* their
subjects, and a later anomaly about a tainted subject is a consequence of the first (``cause``), not a
cause of its own. Anomalies that only say a field differs (a body, a property, an offset in an answer)
taint nothing, so an unrelated bug in the same queue is still its own cause.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Final

import attrs

from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model, semantics_for
from rmqspec.reference.observations import CheckRequest
from rmqspec.reference.records import Record
from rmqspec.reference.state import BrokerState

from ..contract import Response
from ..history import Event
from .allowances import ALLOWANCES
from .expectation import Expectation
from .index import LevelSeen, QueueSeen
from .verdict import Anomaly

DEFAULT_EPSILON_MS = 1000

# Anomalies after which the target holds another message set than the model for that message: later
# anomalies about the same message follow from them.
TAINTS_MESSAGE: Final = frozenset(
    {
        "wrong-response",
        "early-delivery",
        "late-delivery",
        "lost-message",
        "duplicate-delivery",
        "unexpected-message",
        "visible-half-message",
        "rollback-visible",
        "early-discard",
        "wrong-dlq",
        "wrong-queue",
        "wrong-retry-level",
        "wrong-reconsume-times",
        "early-check",
        "missing-check",
        "wrong-check-times",
        "check-after-resolution",
        "repeated-check",
    }
)
# Anomalies after which a queue holds other entries than the model's: its offsets follow from them.
TAINTS_QUEUE: Final = frozenset(
    {
        "early-delivery",
        "late-delivery",
        "lost-message",
        "duplicate-delivery",
        "unexpected-message",
        "visible-half-message",
        "rollback-visible",
        "early-discard",
        "wrong-dlq",
        "wrong-queue",
        "wrong-send-result",
        "inconsistent-queue",
    }
)

Queue = tuple[str, int]
# What to do when an operation completes: called with the decoded answer and the completion event.
Completion = Callable[[Response, Event], None]


@attrs.define
class Pending:
    """An operation in flight: its invoke, and what judges its completion (None: nothing to judge)."""

    invoke: Event
    complete: Completion | None
    # What the invoke learned that its completion needs (a pull's floor, a model answer at invoke).
    floor: int | None = None


class CheckerBase:
    """Everything the checker remembers while it reads a history."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        epsilon_ms: int = DEFAULT_EPSILON_MS,
        check_phase_ms: int = 0,
        check_rounds: tuple[int, ...] = (),
        model: Model | None = None,
        shared: bool = False,
        queue_hints: dict[int, int] | None = None,
        check_phase_known: bool = True,
        indexed: bool = True,
    ) -> None:
        op_sleep = semantics_for(config.profile).check_op_wait_ms()
        self.model = model or Model(
            config,
            check_phase_ms=check_phase_ms,
            check_rounds=check_rounds,
            drifting=shared and op_sleep is not None,
        )
        # On a shared 5.x broker other clients' op messages lengthen the check runs (the loop sleeps
        # SLEEP_WHILE_NO_OP when it has read op messages and the op queue has nothing new, and checks a
        # record at the latest once an op born transactionTimeOut after the run began was read): a run
        # the history shows no check of may start that much later than the model's.
        lengthened = shared and op_sleep is not None
        self.run_slack_ms = config.transaction_timeout_ms + (op_sleep or 0) if lengthened else 0
        self.shared = shared  # a shared broker: system-topic queue offsets are not the model's
        # Whether the check service's runs are placed (on a logical clock, or by checks the history
        # shows): if not, what a run writes may come up to one interval after the model's run.
        self.check_phase_known = check_phase_known
        self.state: BrokerState = self.model.initial()
        if shared:  # other producers' half messages may hold up a run (transaction.may_be_held)
            self.state = attrs.evolve(self.state, tx_hidden_producers=True)
        self.eps = epsilon_ms
        self.model_time: int | None = None
        self.queue_hints = queue_hints or {}  # send with queue < 0 -> the queue its result names
        # What the model says must become visible, by (UNIQ_KEY, topic) and by queue.
        self.expectations: dict[tuple[str, str], list[Expectation]] = {}
        self.by_queue: dict[Queue, list[Expectation]] = {}
        # The same, indexed so that the cost per event stays flat (index.py); False: the exhaustive
        # walks only (the differential tests compare both).
        self.indexed = indexed
        self.seen_by_level: dict[tuple[int, int], LevelSeen] = {}  # (level, epoch) -> copies seen
        self.queue_seen_index: dict[Queue, QueueSeen] = {}
        # The verdict being built.
        self.anomalies: list[Anomaly] = []
        self.hazards: list[str] = []
        self.taints: dict[str, int] = {}  # subject -> the root anomaly it follows from
        self.checked: Counter[str] = Counter()
        self.allowances_used: Counter[str] = Counter()  # allowances.ALLOWANCES name -> times used
        # Reading the history.
        self.pending: dict[int, Pending] = {}  # process -> its operation in flight
        self.consumed = 0
        self.total = 0
        self.unknown_outcomes = 0
        self.cut_outcomes = 0  # operations of unknown outcome that met a restart (judged either way)
        self.last_time = 0
        self.last_answered = 0  # the latest answer (or check request) the target gave: it was working
        # Operations by the index of their invoke: when each began and completed (event index, time).
        self.invoked_at: dict[int, int] = {}
        self.completed: dict[int, tuple[int, int]] = {}
        # Commit-log offsets: the target's and the model's name the same record.
        self.target_to_model: dict[int, int] = {}
        self.model_to_target: dict[int, int] = {}
        self.half_table_target_to_model: dict[int, int] = {}  # a half's queue offset (END_TRANSACTION)
        self.writer_of_record: dict[int, int] = {}  # model commit-log offset -> the operation that wrote it
        self.writer_of_uniq: dict[str, int] = {}  # UNIQ_KEY -> the last operation that wrote it
        self.schedule_entry_offset: dict[int, int] = {}  # delayed send -> its entry's offset (send result)
        # (operation, UNIQ_KEY) -> the queue id and offset its response reported for that message
        self.reported_offset: dict[tuple[int, str], tuple[int, int]] = {}
        self.late_pending: list[tuple[Expectation, int, int]] = []  # (expectation, store time, event)
        # Queues where the model's queue offsets are not the target's: the broker's own services write
        # there too (deliveries, discards), or an operation with unknown outcome may have written there.
        self.mixed_queues: set[Queue] = set()
        self.delivery_queues: set[Queue] = set()  # queues the schedule service delivered into
        # Queues (and topics) whose length the model cannot bound from above: the target may hold
        # entries the model does not (redeliveries after a restart, a message only the target stored).
        self.open_queues: set[Queue] = set()
        self.open_topics: set[str] = set()
        self.queue_seen: dict[tuple[str, int, int], str] = {}  # (topic, queue, offset) -> UNIQ_KEY read
        self.read_prefix: dict[Queue, int] = {}  # offsets [0, n) of a queue read by some pull
        self.delivered_sources: set[int] = set()
        self.restarts: list[tuple[int, int]] = []  # (invoke, completion) of each restart
        self.aliases: dict[int, set[int]] = {}  # model offset -> the target's other records for it (alias)
        # (level, schedule offset, restart index): the one copy a restart let the target deliver again of
        # that schedule entry, taken (schedule/restart-redelivery: at most one per entry per restart)
        self.redelivered: set[tuple[int, int, int]] = set()
        # For records.redelivery_room, by queue: the delivered copies seen (store time, window opening,
        # level, schedule offset) in store-time order, the latest any came after its window opened, the
        # schedule entries delivered there, and the model's own copies delivered again (level, offset,
        # restart index).
        self.delivered_seen: dict[Queue, list[tuple[int, int, int, int]]] = {}
        self.delivered_lateness: dict[Queue, int] = {}
        self.delivered_keys: dict[Queue, set[tuple[int, int]]] = {}
        self.own_redeliveries: dict[Queue, set[tuple[int, int, int]]] = {}
        self.room_memo: dict[Queue, tuple[int, int]] = {}  # queue -> (the event it was asked at, the room)
        self.redelivered_at: dict[tuple[int, int], list[int]] = {}  # (level, offset) -> store times of those
        self.restarting: int | None = None  # the invoke time of a restart not completed yet
        # Schedule entries that fall due within FIRST_DELAY_TIME of a restart's invoke, and when: the broker
        # that is stopping may still deliver them at that time (the model restarted at the invoke).
        self.due_before_stop: dict[int, int] = {}
        # Transactions.
        self.expected_checks: list[tuple[int, CheckRequest]] = []
        self.resolved: dict[str, str] = {}  # UNIQ_KEY -> "commit" / "rollback"
        self.resolved_at: dict[str, int] = {}  # UNIQ_KEY -> when its latest END_TRANSACTION was invoked
        self.half_uniqs: set[str] = set()
        # Discards the target showed before the model's own (the run that wrote the last copy reached it,
        # transaction/check-discard): UNIQ_KEY -> the record and the event that showed it, judged against
        # the model's discard when the model makes it (not expected a second time).
        self.early_discards: dict[str, tuple[Record, Event]] = {}
        self.unsure_halves: set[str] = set()  # half messages sent by an operation of unknown outcome
        self.unsure_ends: set[str] = set()  # transactions an END_TRANSACTION of unknown outcome ended
        # (UNIQ_KEY, count) of checks that may not come: a 5.x transaction ended just before a crash (its op
        # may have been written, or lost as the model has it), a copy the broker may or may not hold
        self.tx_optional: set[tuple[str, int]] = set()
        self.tx_dropped: set[int] = set()  # the model's check copies found not to be the broker's
        self.tx_parent: dict[
            int, int
        ] = {}  # the model's check copy -> the record checked (commit-log offsets)
        # The check service across restarts (rule: transaction/check-restart). ``tx_progress``: (time, the
        # model's committed half offset) as its runs end; ``tx_floor``: a half offset the broker's written
        # progress is known to have reached; ``tx_up_since``: when the broker last started (the history's
        # start, a restart's completion); ``tx_reread``: the half offsets a run after the last restart may
        # read again (a crash's window), each at most once (``tx_reread_done``); ``tx_stop``: the last
        # restart (invoke, completion) and how many runs its stop may have made that no producer heard,
        # beyond the model's; ``tx_stop_copies``: copies the model's own runs wrote during that stop.
        self.tx_progress: list[tuple[int, int]] = []
        self.tx_floor = 0
        self.tx_up_since: int | None = None
        self.tx_reread: tuple[int, int] | None = None
        self.tx_reread_done: set[int] = set()
        self.tx_aside_at_stop: frozenset[int] = frozenset()
        self.tx_stop: tuple[int, int, int] | None = None
        self.tx_resynced: set[str] = set()
        self.tx_unheard: set[int] = set()  # the model's check copies whose checks a restart took away
        # Transactions an orderly stop's runs may have raised to transactionCheckMax unheard (so discarded,
        # never checked again): UNIQ_KEY -> (that stop's invoke, its runs). Only a half message the broker
        # held when the stop began, near enough the max; a check of it seen after the stop ends it.
        self.tx_maybe_discarded: dict[str, tuple[int, int]] = {}
        # Following what the target did: records the model holds that the target does not (the target
        # refused the operation that wrote them), and where they sit in the model's queues.
        self.phantoms: set[int] = set()  # model commit-log offsets
        self.phantom_entries: dict[Queue, list[int]] = {}  # queue -> model queue offsets of phantoms
        self.void_uniqs: set[str] = set()  # half messages the target never stored
        self.extra_entries: Counter[Queue] = Counter()  # entries only the target stored
        self.void_roots: dict[str, int] = {}  # UNIQ_KEY of a refused message -> the refusal's anomaly
        self.phantom_topics: set[str] = set()  # topics the model created only for phantoms
        # When a topic came into being in the model: by a client operation (its invoke index) or by the
        # broker's services (None). The target's topic exists for sure once that operation completed.
        self.topic_origin: dict[str, int | None] = {}

    # -- reporting ------------------------------------------------------------------------------------

    def _taint_of(self, subject: str) -> int | None:
        root = self.taints.get(subject)
        if root is None and subject.startswith("queue:"):
            topic = subject[len("queue:") :].rsplit(":", 1)[0]
            root = self.taints.get(f"topic:{topic}")
        return root

    def report(
        self,
        name: str,
        rule: str,
        event: int,
        message: str,
        *,
        uniq: str | None = None,
        queues: Iterable[Queue] = (),
        topics: Iterable[str] = (),
        also: Iterable[str] = (),
    ) -> int:
        """Record an anomaly; a consequence of an earlier root when one of its subjects is tainted.

        ``also``: further UNIQ_KEYs it concerns (a FIFO pair), consulted but not tainted.
        """
        subjects = [f"uniq:{uniq}"] if uniq else []
        subjects += [f"queue:{t}:{q}" for t, q in queues]
        subjects += [f"topic:{t}" for t in topics]
        cause = next(
            (
                r
                for s in [*subjects, *(f"uniq:{u}" for u in also if u)]
                if (r := self._taint_of(s)) is not None
            ),
            None,
        )
        index = len(self.anomalies)
        self.anomalies.append(Anomaly(name, rule, event, message, cause, tuple(subjects)))
        root = index if cause is None else cause
        for s in subjects:
            if (s.startswith("uniq:") and name in TAINTS_MESSAGE) or (
                not s.startswith("uniq:") and name in TAINTS_QUEUE
            ):
                self.taints.setdefault(s, root)
        return index

    def taint(
        self, root: int, *, uniq: str | None = None, queues: Iterable[Queue] = (), topics: Iterable[str] = ()
    ) -> None:
        """What follows from anomaly ``root`` beyond its own subjects (a followed divergence)."""
        if uniq:
            self.taints.setdefault(f"uniq:{uniq}", root)
        for t, q in queues:
            self.taints.setdefault(f"queue:{t}:{q}", root)
        for t in topics:
            self.taints.setdefault(f"topic:{t}", root)

    def count(self, kind: str, n: int = 1) -> None:
        self.checked[kind] += n

    def allow(self, name: str) -> None:
        """The history used allowance ``name`` (a row of allowances.ALLOWANCES) once more."""
        assert name in ALLOWANCES, name
        self.allowances_used[name] += 1

    # -- commit-log offsets ----------------------------------------------------------------------------

    def bind(self, target_offset: int, model_offset: int) -> None:
        self.target_to_model[target_offset] = model_offset
        self.model_to_target[model_offset] = target_offset

    def alias(self, target_offset: int, model_offset: int) -> None:
        """Another record of the target stands for the model's record at ``model_offset`` (a copy the
        target delivered again after a restart): what a client does with it, the model does with its own."""
        self.target_to_model.setdefault(target_offset, model_offset)
        self.aliases.setdefault(model_offset, set()).add(target_offset)

"""The adapter contract (version 1): what a conformance target provides.

A target executes the reference model's own operation values (``rmqspec.reference.model.Op``) and
answers with a ``Response`` in wire terms; its broker-internal activity (schedule delivery, transaction
checks) is seen only through pulls and through the check requests it reports from ``advance_to``.
Documented in docs/adapter-contract.md.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import attrs

from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.model import Op
from rmqspec.reference.records import Record

CONTRACT_VERSION = "1.1"


class Clock(enum.Enum):
    """LOGICAL: the suite drives time (in-process targets). WALL: real time passes; the suite waits."""

    LOGICAL = "logical"
    WALL = "wall"


class Feature(enum.StrEnum):
    """Capabilities, test262-style: a scenario needing a feature the target lacks is skipped, not failed."""

    SEND = "send"
    DELAY = "delay"
    BATCH = "batch"
    SENDBACK = "sendback"
    RETRY_SEND = "retry-send"
    TRANSACTION = "transaction"
    TRANSACTION_CHECK = "transaction-check"
    VIEW = "view"
    QUERY = "query"
    RESTART = "restart"
    HEARTBEAT = "heartbeat"
    # The suite can step the broker's clock (``skew_clock``): in process, the served reference, and a real
    # broker started under libfaketime (adapters/apache/clock.py).
    CLOCK_SKEW = "clock-skew"
    # The example steps the clock by less than a wall clock can show: a step back of a few milliseconds
    # is over before a wall-clock suite's next request lands (steps come some milliseconds apart, and
    # the broker's clock runs on meanwhile). Logical clocks only.
    FINE_CLOCK = "fine-clock"
    # The scenario leaves its broker in a state no other scenario may share (a stuck timer, a stray op
    # message): it runs on a broker of its own, which only a target that starts brokers can give.
    OWN_BROKER = "own-broker"
    # What only the remoting protocol lets a client do or see (a 5.x gRPC client cannot): pick the queue a
    # message goes to; read a queue by offset (PULL_MESSAGE at any offset, GET_MAX_OFFSET, the offsets of a
    # pull answer); see and set the broker's own properties (DELAY, REAL_TOPIC, TRAN_MSG, ...), sysFlag,
    # flag, reconsume times, and its response codes and remarks.
    QUEUE_CHOICE = "queue-choice"
    PULL_OFFSET = "pull-offset"
    REMOTING_DETAIL = "remoting-detail"
    # The suite places the transaction check service's runs (at multiples of the interval from the start
    # of the logical clock): needed by examples that pin a run to an exact millisecond (the timeout's
    # boundary); on a real broker the history checker judges check timing against the runs it shows.
    CHECK_PHASE = "check-phase"
    # Not a scenario's need but a target's way to run long ones: it can move a broker's clock, and its
    # clients', forward at once, the broker living through the time between (check runs, deliveries) as
    # it would in real time; a scenario longer than --max-wait then runs on a broker of its own that
    # way instead of being skipped (``served``: the model's clock is the suite's).
    FAST_FORWARD = "fast-forward"
    # Not a capability but how to run it: the scenario runs with no other scenario on its broker at the
    # same time. Its checks depend on which records stand ahead of its own in the broker's one half queue
    # (a run stops at another client's young half message, transaction/check-interval), or on the 5.x op
    # batch. Every target offers it; a wall-clock suite runs such scenarios one after another.
    ALONE = "alone"


ALL_FEATURES = frozenset(Feature)
# What only a logical clock offers: a wall-clock target never has these.
LOGICAL_ONLY = frozenset({Feature.FINE_CLOCK, Feature.CHECK_PHASE})


@attrs.frozen
class TargetInfo:
    name: str
    clock: Clock
    config: BrokerConfig
    features: frozenset[Feature] = ALL_FEATURES
    contract_version: str = CONTRACT_VERSION
    # True: the target starts empty for each scenario (a new model). False (1.1): it is a broker shared
    # with earlier runs and other clients, so the queue offsets of system topics (SCHEDULE_TOPIC_XXXX,
    # RMQ_SYS_TRANS_HALF_TOPIC, ...) are not predictable; the suite compares their queue ids only.
    isolated: bool = True

    @property
    def profile(self) -> Profile:
        return self.config.profile


@attrs.frozen
class Response:
    """A target's answer to one operation, in wire terms.

    ``fields`` holds the response header values a client sees (queue_id, queue_offset, msg_id,
    next_begin_offset, min_offset, max_offset, offset). ``no_response`` is True when the request was sent
    one-way: no answer is expected and none is recorded (code 0, no fields, no records), and the checker
    judges the operation by its effects alone, whatever its kind (spec history/judged-answers). Apache's
    producer sends every END_TRANSACTION one-way; an adapter that does the same returns this.
    """

    code: int
    remark: str | None = None
    fields: Mapping[str, object] = attrs.field(factory=dict)
    records: tuple[Record, ...] = ()
    no_response: bool = False


@attrs.frozen
class CheckEvent:
    """A CHECK_TRANSACTION_STATE the target's broker sent to a registered producer, and when."""

    time: int
    group: str
    tran_state_table_offset: int
    commit_log_offset: int
    message: Record


class TargetError(RuntimeError):
    """The target could not execute an operation at all (connection lost, timeout): outcome unknown."""


class ProtocolFailure(TargetError):
    """The target answered, but not as the protocol says: a required field missing, a value of the wrong
    type, a frame that cannot be read. Not an unknown outcome but a failure of ``rule`` (a ``wire/...``
    rule, or the rule that defines the answer), with the offending ``frame`` as received. A subclass of
    TargetError so that code which knows only TargetError still treats the operation as not judged,
    never as a pass."""

    def __init__(self, message: str, rule: str, frame: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.frame = frame


@runtime_checkable
class Target(Protocol):
    """What the suite drives. Times are epoch milliseconds on the target's clock."""

    @property
    def info(self) -> TargetInfo: ...

    def now(self) -> int: ...

    def advance_to(self, t: int) -> list[CheckEvent]:
        """LOGICAL: run the broker's services up to ``t``. WALL: wait until ``t``. Returns check requests."""
        ...

    def execute(self, op: Op) -> Response:
        """Run one client operation; raises TargetError when its outcome is unknown."""
        ...

    def restart(self, config: BrokerConfig | None = None) -> None:
        """Restart the broker (feature ``restart``), with a changed configuration when one is given. A
        target that can stop either way also takes ``graceful`` (``restart_ways``): True an orderly stop,
        False a crash; without it, the target's own way."""
        ...

    def close(self) -> None: ...


def restart_ways(target: Target) -> bool:
    """Whether ``target`` restarts either way on request (its ``restart`` takes ``graceful``)."""
    import inspect

    try:
        return "graceful" in inspect.signature(target.restart).parameters
    except (TypeError, ValueError):
        return False

"""Hypothesis strategies for your own property-based tests, with the reference model as a fake broker.

A small public API (documented in docs/guides/model-in-your-tests.md):

* :func:`uniq_keys`, :func:`bodies`: the parts of a message;
* :func:`messages`: normal messages; :func:`delayed_messages`: messages with a ``DELAY`` level;
  :func:`half_messages`: transaction half messages; :func:`any_messages`: any of the three;
* :func:`broker_configs`: broker configurations worth varying (level table, transaction timings,
  retry limit);
* :func:`histories`: a :class:`History`, the result of driving a :class:`~rmqspec.reference.model.Model`
  with a drawn sequence of client requests and clock advances, every step with what the model answered.

The values are the reference model's own (``rmqspec.reference.put.Message``, the operations of
``rmqspec.reference.model``), so whatever a strategy draws can be handed to ``Model.step`` or to any
conformance target. Everything here is deterministic given the draw: the model is pure and its clock
is logical.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from hypothesis import strategies as st

from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import TxAction, retry_topic
from rmqspec.reference.model import ConsumerSendBack, EndTx, Heartbeat, Model, Op, Pull, Send
from rmqspec.reference.observations import Event, Observation, PullResult, SendOk
from rmqspec.reference.put import Message
from rmqspec.reference.records import Record, props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.state import BrokerState
from rmqspec.reference.transaction import EndTransaction

__all__ = [
    "CONSUMER_GROUP",
    "PRODUCER_GROUP",
    "START",
    "TOPICS",
    "Advance",
    "History",
    "Step",
    "any_messages",
    "bodies",
    "broker_configs",
    "delayed_messages",
    "half_messages",
    "histories",
    "messages",
    "uniq_keys",
]

TOPICS: tuple[str, ...] = ("TopicA", "TopicB")
PRODUCER_GROUP = "PG"
CONSUMER_GROUP = "CG"
START = 1_700_000_000_000  # where a history's logical clock starts (epoch ms)
PREPARED = 4  # sysFlag transaction type of a half message


def uniq_keys() -> st.SearchStrategy[str]:
    """UNIQ_KEY values: 32 upper-case hex digits, as the Java client makes them."""
    return st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32)


def bodies(max_size: int = 64) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=0, max_size=max_size)


def _topic(topics: Sequence[str] | st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return topics if isinstance(topics, st.SearchStrategy) else st.sampled_from(tuple(topics))


@st.composite
def messages(
    draw: st.DrawFn,
    topics: Sequence[str] | st.SearchStrategy[str] = TOPICS,
    queue_ids: st.SearchStrategy[int] | None = None,
    tags: st.SearchStrategy[str | None] | None = None,
) -> Message:
    """A normal message: a topic, a body, a UNIQ_KEY, maybe TAGS (``None``, ``a`` or ``b`` unless
    ``tags`` is given), a queue id (0–3 of the default 4-queue topic unless ``queue_ids`` is given)."""
    p = {"UNIQ_KEY": draw(uniq_keys()), "WAIT": "true"}
    tag = draw(tags if tags is not None else st.sampled_from((None, "a", "b")))
    if tag:
        p["TAGS"] = tag
    return Message(
        draw(_topic(topics)),
        draw(bodies()),
        props(p),
        queue_id=draw(queue_ids if queue_ids is not None else st.integers(0, 3)),
        producer_group=PRODUCER_GROUP,
    )


@st.composite
def delayed_messages(
    draw: st.DrawFn,
    topics: Sequence[str] | st.SearchStrategy[str] = TOPICS,
    levels: st.SearchStrategy[int] | None = None,
) -> Message:
    """A message with a ``DELAY`` level (1–18 unless ``levels`` is given; pass e.g.
    ``st.integers(1, 99)`` to include levels above the table, which the broker clamps to the highest)."""
    msg = draw(messages(topics))
    level = draw(levels if levels is not None else st.integers(1, 18))
    return attrs.evolve(msg, properties=msg.properties.set("DELAY", str(level)))


@st.composite
def half_messages(
    draw: st.DrawFn,
    topics: Sequence[str] | st.SearchStrategy[str] = TOPICS,
    producer_group: str = PRODUCER_GROUP,
    immunity_s: st.SearchStrategy[int | None] | None = None,
) -> Message:
    """A transaction half message (``TRAN_MSG=true``, ``PGROUP``, sysFlag PREPARED), optionally with
    ``CHECK_IMMUNITY_TIME_IN_SECONDS``."""
    msg = draw(messages(topics))
    p = msg.properties.set("TRAN_MSG", "true").set("PGROUP", producer_group)
    immunity = draw(immunity_s) if immunity_s is not None else None
    if immunity is not None:
        p = p.set("CHECK_IMMUNITY_TIME_IN_SECONDS", str(immunity))
    return attrs.evolve(msg, properties=p, sys_flag=PREPARED, producer_group=producer_group)


def any_messages(topics: Sequence[str] | st.SearchStrategy[str] = TOPICS) -> st.SearchStrategy[Message]:
    return st.one_of(messages(topics), delayed_messages(topics), half_messages(topics))


@st.composite
def broker_configs(draw: st.DrawFn) -> BrokerConfig:
    """Configurations that change timings: a short level table or the default, short or default
    transaction timings, retry limit 1–16. Everything else keeps the 4.9.8 defaults."""
    default = BrokerConfig()
    tables: tuple[str | tuple[int, ...], ...] = (default.delay_levels, "1s 2s 3s", "1s 5s 10s 30s 1m")
    levels = draw(st.sampled_from(tables))
    short_tx = draw(st.booleans())
    return BrokerConfig(
        delay_levels=levels,
        transaction_timeout_ms=3000 if short_tx else default.transaction_timeout_ms,
        transaction_check_interval_ms=5000 if short_tx else default.transaction_check_interval_ms,
        transaction_check_max=3 if short_tx else default.transaction_check_max,
        retry_max_times=draw(st.integers(1, 16)),
    )


# --- histories -------------------------------------------------------------------------------------------


@attrs.frozen
class Advance:
    """The logical clock moves to ``to`` (epoch ms): the broker's services run up to then."""

    to: int


@attrs.frozen
class Step:
    """One step of a history: at ``time``, ``op`` and what the model answered.

    For a client request ``observation`` is the model's answer and ``events`` is empty; for an
    :class:`Advance`, ``observation`` is None and ``events`` holds what the broker's services did
    (``Delivered``, ``CheckRequest``, ``Discarded``, ...).
    """

    time: int
    op: Op | Advance
    observation: Observation | None = None
    events: tuple[Event, ...] = ()


@attrs.frozen
class History:
    """A model driven through ``steps`` from its initial state; ``state`` is where it ended."""

    model: Model
    steps: tuple[Step, ...]
    state: BrokerState
    start: int = START

    @property
    def now(self) -> int:
        return self.steps[-1].time if self.steps else self.start

    def sends(self) -> list[tuple[Send, SendOk]]:
        """Every accepted send, with the model's answer."""
        return [
            (s.op, s.observation)
            for s in self.steps
            if isinstance(s.op, Send) and isinstance(s.observation, SendOk)
        ]

    def events(self) -> list[Event]:
        return [e for s in self.steps for e in s.events]

    def replay(self) -> History:
        """The same operations applied again to a fresh model: a pure model answers the same."""
        return drive(self.model, [s.op for s in self.steps], self.start)


def drive(model: Model, ops: Sequence[Op | Advance], start: int = START) -> History:
    """Apply ``ops`` in order to ``model.initial()``; client requests happen at the current time."""
    state = model.initial()
    now = start
    steps = []
    for op in ops:
        if isinstance(op, Advance):
            state, events = model.advance(state, now, op.to)
            now = op.to
            steps.append(Step(now, op, None, tuple(events)))
        else:
            state, obs = model.step(state, op, now)
            steps.append(Step(now, op, obs))
    return History(model, tuple(steps), state, start)


_ADVANCES = st.sampled_from((1, 999, 1000, 5000, 10_000, 60_000, 600_000))
_KINDS = ("send", "send_delayed", "send_half", "pull", "send_back", "end_tx", "advance", "heartbeat")


@st.composite
def histories(
    draw: st.DrawFn,
    configs: BrokerConfig | st.SearchStrategy[BrokerConfig] | None = None,
    max_steps: int = 20,
    topics: Sequence[str] = TOPICS,
    advances: st.SearchStrategy[int] | None = None,
) -> History:
    """A history of up to ``max_steps`` steps on a fresh model (the default config, or one drawn).

    Each step is drawn knowing the steps before it: every message gets a UNIQ_KEY of its own, a pull reads a queue something was sent to, a
    send-back names a record that was pulled, an END_TRANSACTION names a half message that was sent,
    an advance moves the clock by ``advances`` ms (by default one of 1 ms, 999 ms, 1 s, 5 s, 10 s, 1 min
    and 10 min). Shrinking removes steps and picks simpler
    ones, so a failing property reports a short history.
    """
    if configs is None:
        config = BrokerConfig()
    elif isinstance(configs, BrokerConfig):
        config = configs
    else:
        config = draw(configs)
    model = Model(config)
    state = model.initial()
    now = START
    steps: list[Step] = []
    queues: list[tuple[str, int]] = []
    pulled: list[Record] = []
    halves: list[Record] = []
    uniq: set[str] = set()
    for _ in range(draw(st.integers(0, max_steps))):
        kinds = [k for k in _KINDS if _possible(k, queues, pulled, halves)]
        kind = draw(st.sampled_from(kinds))
        op: Op | Advance
        if kind == "advance":
            op = Advance(now + draw(advances if advances is not None else _ADVANCES))
            state, events = model.advance(state, now, op.to)
            now = op.to
            steps.append(Step(now, op, None, tuple(events)))
            continue
        if kind == "send":
            op = Send(_unique(draw(messages(topics)), uniq))
        elif kind == "send_delayed":
            op = Send(
                _unique(draw(delayed_messages(topics, st.integers(1, config.max_delay_level + 1))), uniq)
            )
        elif kind == "send_half":
            op = Send(_unique(draw(half_messages(topics)), uniq))
        elif kind == "pull":
            topic, queue = draw(st.sampled_from(queues))
            op = Pull(topic, queue, draw(st.integers(0, 3)), group=CONSUMER_GROUP)
        elif kind == "send_back":
            rec = draw(st.sampled_from(pulled))
            level = draw(st.sampled_from((0, 0, 1, -1)))
            op = ConsumerSendBack(SendBack(CONSUMER_GROUP, rec.commit_log_offset, delay_level=level))
        elif kind == "end_tx":
            half = draw(st.sampled_from(halves))
            action = draw(st.sampled_from((TxAction.COMMIT, TxAction.ROLLBACK, TxAction.UNKNOW)))
            op = EndTx(EndTransaction(PRODUCER_GROUP, half.queue_offset, half.commit_log_offset, action))
        else:
            op = Heartbeat(PRODUCER_GROUP, online=draw(st.booleans()))
        state, obs = model.step(state, op, now)
        steps.append(Step(now, op, obs))
        if isinstance(obs, SendOk):
            real = obs.record.properties.get("REAL_TOPIC")
            if obs.record.tran_type == PREPARED:
                halves.append(obs.record)
            key = (obs.record.topic, obs.record.queue_id) if real is None else (real, obs.queue_id)
            if key not in queues:
                queues.append(key)
        elif isinstance(obs, PullResult):
            pulled.extend(obs.records)
        if isinstance(op, ConsumerSendBack) and (retry_topic(CONSUMER_GROUP), 0) not in queues:
            queues.append((retry_topic(CONSUMER_GROUP), 0))
    return History(model, tuple(steps), state)


def _unique(msg: Message, used: set[str]) -> Message:
    """``msg`` with a UNIQ_KEY no earlier message of the history has (as a real client makes them)."""
    key = msg.properties["UNIQ_KEY"]
    n = len(used)
    while key in used:
        key = f"{n:08X}{key[8:]}"
        n += 1
    used.add(key)
    return attrs.evolve(msg, properties=msg.properties.set("UNIQ_KEY", key))


def _possible(kind: str, queues: list[tuple[str, int]], pulled: list[Record], halves: list[Record]) -> bool:
    if kind == "pull":
        return bool(queues)
    if kind == "send_back":
        return bool(pulled)
    if kind == "end_tx":
        return bool(halves)
    return True

"""The reference model as a fake broker in your own Hypothesis tests (docs/guides/model-in-your-tests.md).

These tests are the guide's examples, run: properties of the broker checked through the model, a piece
of "user code" (a retrying consumer) tested against it, and the strategies' own guarantees.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rmqspec.conformance.strategies import (
    CONSUMER_GROUP,
    START,
    Advance,
    History,
    broker_configs,
    delayed_messages,
    half_messages,
    histories,
    messages,
)
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model, Pull
from rmqspec.reference.observations import PullResult, SendBackOk, SendOk
from rmqspec.reference.put import Message
from rmqspec.reference.records import Record
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.state import BrokerState

FAST = settings(max_examples=40, deadline=None)


def visible(model: Model, state: BrokerState, topic: str, queue_id: int) -> list[Record]:
    """Every record a consumer can pull from one queue, from offset 0."""
    out: list[Record] = []
    offset = 0
    while True:
        got = model.pull(state, topic, queue_id, offset)
        if not isinstance(got, PullResult) or not got.records:
            return out
        out += got.records
        offset = got.next_begin_offset


# --- a property of the broker, checked on the model ------------------------------------------------------


@FAST
@given(msg=delayed_messages(levels=st.integers(1, 40)))
def test_a_delayed_message_arrives_at_its_deliver_time_not_before(msg: Message) -> None:
    model = Model(BrokerConfig())
    state, sent = model.send(model.initial(), msg, now=START)
    assert isinstance(sent, SendOk)
    level = min(int(sent.record.properties["DELAY"]), model.config.max_delay_level)
    due = START + model.config.delay_levels[level - 1]
    topic, queue = sent.record.properties["REAL_TOPIC"], sent.queue_id

    early, _ = model.advance(state, START, due - 1)
    assert visible(model, early, topic, queue) == []
    on_time, _ = model.advance(state, START, due)
    [copy] = visible(model, on_time, topic, queue)
    assert copy.store_timestamp == due and copy.uniq_key == sent.record.uniq_key


# --- user code tested against the fake broker ------------------------------------------------------------


def consume_with_retries(
    model: Model, state: BrokerState, topic: str, handler: Callable[[Record], bool], now: int
) -> tuple[list[Record], Record | None]:
    """A push consumer in miniature, the kind of code you would test: pull, hand each message to
    ``handler``, send it back with delay level 0 when the handler fails, and follow the retry topic
    until the message is handled or dead-lettered. Returns every delivery and the DLQ record, if any."""
    deliveries: list[Record] = []
    queue = (topic, 0)
    offsets: dict[tuple[str, int], int] = defaultdict(int)
    while True:
        got = model.pull(state, queue[0], queue[1], offsets[queue], group=CONSUMER_GROUP)
        if not isinstance(got, PullResult) or not got.records:
            raise AssertionError(f"nothing to consume in {queue} at +{now - START} ms")
        rec = got.records[0]
        offsets[queue] += 1
        deliveries.append(rec)
        if handler(rec):
            return deliveries, None
        state, ack = model.send_back(state, SendBack(CONSUMER_GROUP, rec.commit_log_offset), now)
        assert isinstance(ack, SendBackOk) and ack.record is not None
        if ack.record.topic.startswith("%DLQ%"):
            return deliveries, ack.record
        # wait, on the model's logical clock, until the broker delivers the retry copy
        level = int(ack.record.properties["DELAY"])
        now += model.config.delay_levels[level - 1]
        state, _ = model.advance(state, now - model.config.delay_levels[level - 1], now)
        queue = (f"%RETRY%{CONSUMER_GROUP}", 0)


@FAST
@given(msg=messages(queue_ids=st.just(0)), failures=st.integers(0, 20), retry_max=st.integers(1, 16))
def test_a_failing_consumer_is_redelivered_then_dead_lettered(
    msg: Message, failures: int, retry_max: int
) -> None:
    model = Model(BrokerConfig(retry_max_times=retry_max))
    state, sent = model.send(model.initial(), msg, now=START)
    assert isinstance(sent, SendOk)
    seen = 0

    def handler(rec: Record) -> bool:
        nonlocal seen
        seen += 1
        return seen > failures

    deliveries, dead = consume_with_retries(model, state, sent.record.topic, handler, START)
    assert [d.reconsume_times for d in deliveries] == list(range(len(deliveries)))
    if failures <= retry_max:
        assert dead is None and len(deliveries) == failures + 1
    else:
        assert dead is not None and len(deliveries) == retry_max + 1
        assert dead.reconsume_times == retry_max + 1


# --- properties over whole histories ---------------------------------------------------------------------


@FAST
@given(history=histories(max_steps=25))
def test_the_model_is_pure_a_history_replays_identically(history: History) -> None:
    again = history.replay()
    assert [s.observation for s in again.steps] == [s.observation for s in history.steps]
    assert [s.events for s in again.steps] == [s.events for s in history.steps]
    assert again.state == history.state


@FAST
@given(history=histories(configs=broker_configs(), max_steps=25))
def test_no_pull_ever_returns_a_half_message(history: History) -> None:
    for s in history.steps:
        if isinstance(s.op, Pull) and isinstance(s.observation, PullResult):
            assert all(r.tran_type in (0, 8) for r in s.observation.records)


@FAST
@given(history=histories(max_steps=25))
def test_queue_offsets_of_plain_sends_increase(history: History) -> None:
    # Not consecutive: a scheduled delivery or a commit may append to the same queue in between.
    offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
    for op, ok in history.sends():
        if ok.record.topic == op.message.topic:  # stored as sent: not delayed, not a half message
            offsets[(ok.record.topic, ok.queue_id)].append(ok.queue_offset)
    for got in offsets.values():
        assert got == sorted(set(got))


@FAST
@given(history=histories(max_steps=15), msg=half_messages())
def test_a_half_message_sent_after_any_history_stays_invisible(history: History, msg: Message) -> None:
    assume(msg.properties["UNIQ_KEY"] not in {op.message.properties["UNIQ_KEY"] for op, _ in history.sends()})
    state, sent = history.model.send(history.state, msg, history.now)
    assert isinstance(sent, SendOk) and sent.record.topic == "RMQ_SYS_TRANS_HALF_TOPIC"
    later, _ = history.model.advance(state, history.now, history.now + 600_000)  # checks run, nobody ends it
    assert all(
        r.uniq_key != sent.record.uniq_key for r in visible(history.model, later, msg.topic, sent.queue_id)
    )
    assert all(isinstance(s.op, Advance) == (s.observation is None) for s in history.steps)

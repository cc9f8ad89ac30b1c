"""Pulled records: matched to what the model stored, then compared field by field with the model's record.

A record is matched by UNIQ_KEY and topic (a required expectation before an optional one). Its timing
is judged against the expectation's window, its fields against the model's record: queue (a retry
copy: any queue below retryQueueNums), the queue offset its own send result named, body, flag,
reconsumeTimes, sysFlag, preparedTransactionOffset and every property except the ones a broker sets
from its own configuration or a client adds on reading.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Mapping
from typing import Final

import attrs

from rmqspec.reference.constants import (
    DLQ_PREFIX,
    HALF_TOPIC,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    Prop,
)
from rmqspec.reference.model import FIRST_DELAY_TIME_MS
from rmqspec.reference.observations import Discarded
from rmqspec.reference.records import Props, Record, props

from ..history import Event
from ..timer_windows import TIMER_CLOCK_PROPERTIES, timer_property_problems
from .expectation import Expectation
from .order import OrderMixin
from .windows import delivery_rule

# Properties whose value the model predicts exactly, with the rule that states each.
PROP_RULES: Final = {
    Prop.DELAY: "schedule/delivered-copy",
    Prop.REAL_TOPIC: "schedule/delivered-copy",
    Prop.REAL_QID: "schedule/delivered-copy",
    Prop.RETRY_TOPIC: "sendback/retry-topic-property",
    Prop.TRAN_MSG: "transaction/committed-message",
    Prop.PGROUP: "transaction/committed-message",
    Prop.UNIQ_KEY: "schedule/delivered-copy",
    Prop.TAGS: "put/stored-properties",
    Prop.KEYS: "put/stored-properties",
    Prop.TRANSACTION_CHECK_TIMES: "transaction/check-times",
}
# Properties a broker sets from its own configuration or a client adds on reading: never compared. Every
# other property of a record (user properties, WAIT, the ones above) must be what the model stores.
UNCOMPARED_PROPS: Final = frozenset(
    {
        Prop.CLUSTER,
        Prop.MSG_REGION,
        Prop.TRACE_ON,
        Prop.ORIGIN_MESSAGE_ID,  # compared on its own: the model's offset id maps to the target's
        "MIN_OFFSET",
        "MAX_OFFSET",
        "CONSUME_START_TIME",
    }
)


def prop_diffs(want: Props, got: Mapping[str, str]) -> list[tuple[str, str | None, str | None]]:
    """(key, expected, got) for every compared property that differs, is missing or is extra."""
    return [
        (k, want.get(k), got.get(k))
        for k in sorted((set(want) | set(got)) - UNCOMPARED_PROPS)
        if want.get(k) != got.get(k)
    ]


def msg_id_offset(msg_id: str) -> int:
    """The commit-log offset an offset message id names (its last 16 hex digits); -1 if none."""
    try:
        return int(msg_id.split(",")[0][-16:], 16)
    except ValueError:
        return -1


def is_offset_id(s: str) -> bool:
    return len(s) == 32 and all(c in "0123456789ABCDEF" for c in s)


def where(r: Record) -> str:
    return f"{r.topic}:{r.queue_id} offset {r.queue_offset}"


# The names RocketMQ gives the properties it reads or writes itself (MessageConst), in their case.
SYSTEM_PROPERTY_NAMES: Final = frozenset(
    v for k, v in vars(Prop).items() if not k.startswith("_") and isinstance(v, str)
)


def restore_case(r: Record) -> tuple[Record, tuple[str, ...]]:
    """A record whose broker wrote RocketMQ's own property names in another case (``uniq_key`` for
    ``UNIQ_KEY``), with those names restored, and the names as the broker wrote them; the record itself
    and () when there are none. The checker reports the renaming once (put/stored-properties) and then
    follows the target: the message is the one its UNIQ_KEY names, whatever the case."""
    renamed = {
        k: k.upper()
        for k in r.properties
        if k != k.upper() and k.upper() in SYSTEM_PROPERTY_NAMES and k.upper() not in r.properties
    }
    if not renamed:
        return r, ()
    fixed = props({renamed.get(k, k): v for k, v in r.properties.items()})
    return attrs.evolve(r, properties=fixed), tuple(renamed)


def early_rule(x: Expectation, r: Record) -> str:
    """The rule an early copy breaks. A delayed message's copy is judged by the schedule's timing, unless
    it never went through the schedule topic: a delivered copy always carries ``REAL_TOPIC``
    (schedule/delivered-copy), so one without it was stored as it was sent, at once: the broker did not
    rewrite it for delay (put/delay-eligibility)."""
    if x.rule == "schedule/due-time" and Prop.REAL_TOPIC not in r.properties:
        return "put/delay-eligibility"
    return x.rule


def placement_rule(got: Record, model: Record) -> str | None:
    """The rule a message stored in another place than the model's breaks (the same message, another
    topic or queue), by where the model stored it; None: no rule more precise than the lookup's."""
    if model.topic == SCHEDULE_TOPIC:
        # In its own topic: never rewritten for delay; elsewhere: rewritten to the wrong place.
        own = got.topic == model.properties.get(Prop.REAL_TOPIC)
        return "put/delay-eligibility" if own else "put/delay-schedule-queue"
    if model.topic == HALF_TOPIC:
        return "transaction/half-message"
    return None


# ScheduleMessageService.start (4.9.x, 5.x): the first offset write comes 10 s after the service starts.
FIRST_OFFSET_WRITE_MS: Final = 10_000


class RecordsMixin(OrderMixin):
    def on_record(self, r: Record, e: Event) -> None:
        uniq = r.uniq_key or ""
        topic = r.topic
        slot = (topic, r.queue_id, r.queue_offset)
        prev = self.queue_seen.get(slot)
        if prev is not None:
            if prev != uniq:
                self.report(
                    "inconsistent-queue",
                    "dispatch/in-order",
                    e.index,
                    f"{topic}:{slot[1]} offset {slot[2]} held {prev} and now {uniq}",
                    queues=[(topic, r.queue_id)],
                    also=[prev, uniq],
                )
            return  # a re-read of the same entry
        self.queue_seen[slot] = uniq
        xs = self.expectations.get((uniq, topic), [])
        # A required expectation first: an optional one (a possible redelivery, an operation whose
        # outcome is unknown) only when nothing else explains the record; of those, one of the record's
        # own queue first (one message may be stored twice in a topic: sent to one queue, committed to
        # another).
        # An optional one is a copy that may come again: a record of another retry hop (its reconsumeTimes
        # differ) is not that copy, but maybe the target's own redelivery of that hop (unexpected).
        waiting = [
            x
            for x in xs
            if x.seen_at is None and (not x.optional or x.model.reconsume_times == r.reconsume_times)
        ]
        same = [x for x in waiting if x.model.reconsume_times == r.reconsume_times]
        if waiting and not same:
            # No copy of this retry hop is expected: the target's redelivery of an earlier hop after a
            # restart (unexpected() says so), or a copy with the wrong reconsumeTimes (compared below).
            seen = [x for x in xs if x.seen_at is not None]
            if self.redelivery(seen, r) is not None:
                waiting = []
        # Of several copies of one message in a topic (a transaction committed twice after a restart,
        # each copy with the count of the record committed): the one whose properties are the record's.
        candidates = same or waiting
        x = min(
            candidates,
            key=lambda x: (
                x.optional,
                len(candidates) > 1 and any(self.property_diffs(x.model.properties, r.properties)),
                x.queue_id != r.queue_id,
            ),
            default=None,
        )
        if x is None:
            if topic in SYSTEM_TOPICS and not xs:
                # A system topic a client may read (the half topic, the discard topic): a record the
                # model holds there (a half, a check copy) is what it stored; on a shared broker, one of
                # a message this history never sent is another client's.
                if self.model_holds(uniq, topic):
                    self.count("records")
                    return
                if self.shared and uniq not in self.state.store.uniq:
                    return
            self.unexpected(r, uniq, topic, e)
            return
        self.count("records")
        x.seen_at = r.store_timestamp
        if x.again is not None and x.level is not None:
            # the model's copy delivered again: that restart's once
            self.redelivered.add((x.level, x.order, x.again))
            self.allow("restart-redelivery")
        if x.level is not None:  # a delivered copy, by store time (redelivery_room)
            bisect.insort(
                self.delivered_seen.setdefault(x.queue, []), (r.store_timestamp, x.earliest, x.level, x.order)
            )
            late = r.store_timestamp - x.earliest
            if late > self.delivered_lateness.get(x.queue, 0):
                self.delivered_lateness[x.queue] = late
        self.queue_index(x.queue).seen += 1
        self.bind(r.commit_log_offset, x.model.commit_log_offset)
        seen_at = e.time
        if r.store_timestamp < x.earliest or seen_at < x.earliest:
            self.report(
                "early-delivery",
                early_rule(x, r),
                e.index,
                f"{uniq} visible in {topic} at store time {r.store_timestamp}, "
                f"{x.earliest - min(r.store_timestamp, seen_at)} ms before it may be",
                uniq=uniq,
                queues=[(topic, r.queue_id)],
            )
        else:
            self.judge_late(x, r.store_timestamp, e.index)
        if x.level is not None:
            self.fifo(x, e)
        self.compare_record(r, x, e)

    def property_diffs(self, want: Props, got: Mapping[str, str]) -> list[tuple[str, str | None, str | None]]:
        """``prop_diffs``, with a half-queue offset (TRAN_PREPARED_QUEUE_OFFSET) compared through the
        mapping of the target's half queue to the model's: on a shared broker the offsets differ."""
        out = []
        for key, want_v, got_v in prop_diffs(want, got):
            if key == Prop.TRAN_PREPARED_QUEUE_OFFSET and want_v is not None and got_v is not None:
                try:
                    if self.half_table_target_to_model.get(int(got_v)) == int(want_v):
                        continue
                except ValueError:
                    pass
            out.append((key, want_v, got_v))
        return out

    def model_holds(self, uniq: str, topic: str) -> bool:
        store = self.state.store
        return any(
            (rec := store.lookup(clo)) is not None and rec.topic == topic and clo not in self.phantoms
            for clo in store.uniq.get(uniq, ())
        )

    def compare_record(self, r: Record, x: Expectation, e: Event) -> None:
        m = x.model
        uniq = x.uniq
        if m.topic.startswith(RETRY_PREFIX):
            # The retry queue is the broker's random pick among retryQueueNums (rule: sendback/retry-topic).
            if not 0 <= r.queue_id < self.model.config.retry_queue_nums:
                self.report(
                    "wrong-queue",
                    "sendback/retry-topic",
                    e.index,
                    f"{uniq} in retry queue {r.queue_id}; retryQueueNums is {self.model.config.retry_queue_nums}",
                    uniq=uniq,
                    queues=[(r.topic, r.queue_id), x.queue],
                )
        elif r.queue_id != x.queue_id:
            self.report(
                "wrong-queue",
                x.rule,
                e.index,
                f"{uniq} in queue {r.queue_id}, expected {x.queue_id}",
                uniq=uniq,
                queues=[(r.topic, r.queue_id), x.queue],
            )
        reported = self.reported_offset.get((x.source, uniq))
        if reported is not None and reported != (r.queue_id, r.queue_offset):
            self.report(
                "wrong-queue-offset",
                "put/queue-offset",
                e.index,
                f"{uniq} read at {where(r)}, but its send result said queue {reported[0]} offset {reported[1]}",
                uniq=uniq,
                queues=[(r.topic, r.queue_id)],
            )
        if r.body != m.body:
            self.report(
                "wrong-body",
                x.rule,
                e.index,
                f"{uniq} in {m.topic}: the body differs from the one sent",
                uniq=uniq,
            )
        if r.flag != m.flag:
            self.report("wrong-flag", x.rule, e.index, f"{uniq} flag {r.flag}, expected {m.flag}", uniq=uniq)
        if r.reconsume_times != m.reconsume_times:
            self.report(
                "wrong-reconsume-times",
                "sendback/reconsume-times",
                e.index,
                f"{uniq} reconsumeTimes {r.reconsume_times}, expected {m.reconsume_times}",
                uniq=uniq,
            )
        if r.sys_flag != m.sys_flag:
            self.report(
                "wrong-sys-flag",
                "transaction/committed-message" if m.sys_flag & 8 else x.rule,
                e.index,
                f"{uniq} sysFlag {r.sys_flag}, expected {m.sys_flag}",
                uniq=uniq,
            )
        if x.rule == "transaction/committed-message":
            # What END_TRANSACTION wrote names its half (which may sit at commit-log offset 0). Other
            # COMMIT-typed records (a retry copy of a committed message) carry 0: nothing to map.
            want = self.model_to_target.get(m.prepared_transaction_offset)
            if want is not None and r.prepared_transaction_offset != want:
                self.report(
                    "wrong-prepared-offset",
                    "transaction/committed-message",
                    e.index,
                    f"{uniq} preparedTransactionOffset {r.prepared_transaction_offset}, expected {want}",
                    uniq=uniq,
                )
        diffs = self.property_diffs(m.properties, r.properties)
        diffs = [d for d in diffs if not self.timer_out_in_reach(d, r, x)]
        if x.timer_slot is not None:
            # The timer sets these from its own clock (rule: timer/delivered-copy): judged by their bounds.
            diffs = [d for d in diffs if d[0] not in TIMER_CLOCK_PROPERTIES]
            self.judge_timer_clock(r, x, e)
        for key, want_v, got_v in diffs:
            name, rule = "wrong-properties", PROP_RULES.get(key, "put/stored-properties")
            if key == Prop.DELAY and m.topic.startswith(RETRY_PREFIX):
                name, rule = "wrong-retry-level", "sendback/delay-level"
            self.report(
                name, rule, e.index, f"{uniq} in {m.topic}: {key}={got_v!r}, expected {want_v!r}", uniq=uniq
            )
        self.compare_origin(r, m, uniq, e)

    def timer_out_in_reach(self, diff: tuple[str, str | None, str | None], r: Record, x: Expectation) -> bool:
        """A TIMER_OUT_MS the broker computed from a relative delay (TIMER_DELAY_SEC, TIMER_DELAY_MS) by its
        clock at the put, which lies between the writing operation's invoke (the model's) and completion:
        a value between the model's and the one a put at the completion gives (a put either side of a slot
        boundary: seen on 5.5.0, one precision apart). rule: timer/rewrite"""
        key, want_v, got_v = diff
        if key != Prop.TIMER_OUT_MS or want_v is None or got_v is None or x.writer is None:
            return False
        if Prop.TIMER_DELAY_SEC not in r.properties and Prop.TIMER_DELAY_MS not in r.properties:
            return False
        # the operation whose put computed it: a committed message carries its half's (the send's)
        put: int | None = x.writer
        if x.rule == "transaction/committed-message":  # its half may sit at commit-log offset 0
            put = self.writer_of_record.get(x.model.prepared_transaction_offset)
        if put is None:
            return False
        start, done = self.invoked_at.get(put), self.completed.get(put)
        if (
            start is None
            or done is None
            or not want_v.lstrip("-").isdigit()
            or not got_v.lstrip("-").isdigit()
        ):
            return False
        sem = self.model.semantics
        latest = sem.timer_deliver_ms(r.properties, done[1])  # the broker's clock at the completion
        if latest is None:
            return False
        return int(want_v) <= int(got_v) <= sem.timer_round(latest, self.model.config.timer_precision_ms)

    def judge_timer_clock(self, r: Record, x: Expectation, e: Event) -> None:
        """TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS of a delivered timer copy, within what the broker's clock
        allows: between the put and the delivery. rule: timer/delivered-copy"""
        if x.writer is None or x.writer not in self.invoked_at:
            return
        done = self.completed.get(x.writer)
        put_at = (self.invoked_at[x.writer], done[1] if done is not None else r.store_timestamp)
        precision = self.model.config.timer_precision_ms
        for problem in timer_property_problems(
            r.properties, put_at, x.earliest, r.store_timestamp, precision
        ):
            self.report(
                "wrong-properties",
                "timer/delivered-copy",
                e.index,
                f"{x.uniq} in {x.topic}: {problem}",
                uniq=x.uniq,
            )

    def compare_origin(self, r: Record, m: Record, uniq: str, e: Event) -> None:
        """ORIGIN_MESSAGE_ID names the first failed message: the model's offset id maps to the target's."""
        want = m.properties.get(Prop.ORIGIN_MESSAGE_ID)
        if want is None:
            return
        got = r.properties.get(Prop.ORIGIN_MESSAGE_ID)
        mapped: set[int] = set()
        if is_offset_id(want):
            first = self.model_to_target.get(msg_id_offset(want))
            mapped = ({first} if first is not None else set()) | self.aliases.get(msg_id_offset(want), set())
        ok = got is not None and ((is_offset_id(got) and msg_id_offset(got) in mapped) or got == want)
        if not ok:
            self.report(
                "wrong-properties",
                "sendback/origin-message-id",
                e.index,
                f"{uniq}: ORIGIN_MESSAGE_ID={got!r} does not name the first failed message",
                uniq=uniq,
            )

    def unexpected(self, r: Record, uniq: str, topic: str, e: Event) -> None:
        """A record no expectation explains: say what it is most likely to be."""
        seen = [
            x for xs in self.expectations.values() for x in xs if x.uniq == uniq and x.seen_at is not None
        ]
        waiting = [x for xs in self.expectations.values() for x in xs if x.uniq == uniq and x.seen_at is None]
        scheduled = [x for x in self.schedule_pending(uniq) if x.topic == topic]
        queues = [(topic, r.queue_id)]
        # A copy already seen, delivered again after a restart: whatever the model holds for the message
        # now (a later hop, its dead-letter copy), this record is that copy again.
        if seen and (first := self.redelivery(seen, r, take=True)) is not None:
            self.alias(r.commit_log_offset, first.model.commit_log_offset)
            self.count("records")
            self.hazards.append(
                f"schedule/restart-redelivery: {uniq} delivered again to {topic} after a restart"
            )
            # The same message again (a new record with the same UNIQ_KEY and body): every field the
            # broker does not set anew on delivery is the first copy's.
            self.compare_record(r, attrs.evolve(first, rule="schedule/restart-redelivery"), e)
        elif topic.startswith(DLQ_PREFIX) and any(
            x.topic.startswith(RETRY_PREFIX) for x in waiting + scheduled
        ):
            self.report(
                "wrong-dlq",
                "sendback/dlq-route",
                e.index,
                f"{uniq} dead-lettered; the model retries it",
                uniq=uniq,
                queues=queues,
            )
        elif topic.startswith(RETRY_PREFIX) and any(x.topic.startswith(DLQ_PREFIX) for x in waiting):
            self.report(
                "wrong-dlq",
                "sendback/dlq-route",
                e.index,
                f"{uniq} retried; the model dead-letters it",
                uniq=uniq,
                queues=queues,
            )
        elif uniq in self.half_uniqs and self.resolved.get(uniq) == "rollback":
            self.report(
                "rollback-visible",
                "transaction/rollback",
                e.index,
                f"{uniq} visible after a rollback",
                uniq=uniq,
                queues=queues,
            )
        elif uniq in self.half_uniqs and uniq not in self.resolved and topic != TRANS_CHECK_MAX_TIME_TOPIC:
            self.report(
                "visible-half-message",
                "transaction/half-message",
                e.index,
                f"{uniq} visible in {topic} before any commit",
                uniq=uniq,
                queues=queues,
            )
        elif topic == TRANS_CHECK_MAX_TIME_TOPIC and (
            uniq in self.state.tx_discardable or self.discarded_soon(uniq)
        ):
            # The run that wrote the copy reached it (transaction/check-discard), or the model discards it
            # within the interval the phase leaves open: the record is the model's discard, judged when
            # the model makes it (Checker.advance), and not expected again.
            self.count("records")
            self.early_discards.setdefault(uniq, (r, e))
        elif topic == TRANS_CHECK_MAX_TIME_TOPIC:
            self.report(
                "early-discard",
                "transaction/check-discard",
                e.index,
                f"{uniq} discarded before the model discards it",
                uniq=uniq,
                queues=queues,
            )
        elif any(x.model.reconsume_times == r.reconsume_times for x in scheduled):
            # A copy whose schedule entry the model has not delivered yet: early, by its own rule.
            x = next(x for x in scheduled if x.model.reconsume_times == r.reconsume_times)
            self.report(
                "early-delivery",
                early_rule(x, r),
                e.index,
                f"{uniq} visible in {topic} at store time {r.store_timestamp}, before it is due",
                uniq=uniq,
                queues=queues,
            )
        elif seen:
            # Beyond what a restart allows (its once used up, or past its window): the restart's rule.
            restarted = any(x.level is not None for x in seen) and any(
                start < r.store_timestamp for _i, start, _done in self.restart_spans()
            )
            self.report(
                "duplicate-delivery",
                "schedule/restart-redelivery" if restarted else seen[0].rule,
                e.index,
                f"{uniq} delivered again to {topic}",
                uniq=uniq,
                queues=queues,
            )
        elif scheduled:
            x = scheduled[0]
            self.report(
                "early-delivery",
                early_rule(x, r),
                e.index,
                f"{uniq} visible in {topic} before it is due",
                uniq=uniq,
                queues=queues,
            )
        else:
            self.report(
                "unexpected-message",
                "put/send-result",
                e.index,
                f"{uniq} in {topic} was never sent there",
                uniq=uniq,
                queues=queues,
            )

    def discarded_soon(self, uniq: str) -> bool:
        """With the check service's phase unknown (no check in the history), whether the model discards
        ``uniq`` within one interval: a broker whose runs come earlier than the model's may have."""
        if self.check_phase_known or self.model_time is None:
            return False
        interval = self.model.config.transaction_check_interval_ms
        _state, events = self.model.advance(self.state, self.model_time, self.model_time + interval)
        return any(isinstance(ev, Discarded) and ev.copy.uniq_key == uniq for ev in events)

    def restart_spans(self) -> list[tuple[int, int, int]]:
        """(index, invoke, completion) of every restart, one in flight last (completing at ``sys.maxsize``:
        the broker may answer again before the suite's restart completes)."""
        spans = [(i, start, done) for i, (start, done) in enumerate(self.restarts)]
        if self.restarting is not None:
            spans.append((len(self.restarts), self.restarting, sys.maxsize))
        return spans

    def redelivery_since(self, spans: list[tuple[int, int, int]], i: int) -> int:
        """The earliest first delivery restart ``i`` of ``spans`` may repeat: one persist interval (plus
        epsilon) before it was asked for; when the broker had been up less than its first offset write
        since the restart before (ScheduleMessageService.start: 10 s after the start), it had written
        nothing since then, so as far back as that restart may repeat. rule: schedule/restart-redelivery"""
        flush = self.model.flush_delay_offset_interval_ms
        while i > 0 and spans[i][1] - spans[i - 1][2] < FIRST_OFFSET_WRITE_MS:
            i -= 1
        return spans[i][1] - flush - self.eps

    def redelivery(self, seen: list[Expectation], r: Record, *, take: bool = False) -> Expectation | None:
        """The first delivery of a scheduled copy that ``r`` may be, delivered again after a restart; None
        when no restart allows it. rule: schedule/restart-redelivery, bounded three ways:

        * which copies: one delivered (first, or again after an earlier restart) at most one offset
          persist interval (plus epsilon) before the restart was asked for (further back when the broker
          had not been up long enough to write: ``redelivery_since``), or while the broker was stopping
          (until the restart completed: it writes its offsets in its shutdown, which may come after that
          delivery or not at all under SIGKILL);
        * when: after the restart was asked for, and by the first run of the schedule service after the
          broker is back (FIRST_DELAY_TIME after the completion, plus epsilon): the entries it reads again
          are due, and that run delivers every due entry of its level;
        * how often: once per schedule entry per restart (the level's offset is read back once); the
          model's own copy delivered again after that restart (``Expectation.again``) takes that once.

        ``take``: ``r`` is that copy (its restart's once is used up)."""
        spans = self.restart_spans()
        for x in seen:
            if (
                x.level is None
                or x.topic != r.topic
                or x.model.reconsume_times != r.reconsume_times  # the same copy, not the next retry
                or x.seen_at is None
                or x.seen_at >= r.store_timestamp
            ):
                continue
            delivered = [x.seen_at, *self.redelivered_at.get((x.level, x.order), ())]
            for i, start, done in spans:
                since = self.redelivery_since(spans, i)
                if (
                    any(since <= t <= done for t in delivered)
                    and start < r.store_timestamp <= done + FIRST_DELAY_TIME_MS + self.eps
                    and (x.level, x.order, i) not in self.redelivered
                ):
                    if take:
                        self.allow("restart-redelivery")
                        self.redelivered.add((x.level, x.order, i))
                        self.redelivered_at.setdefault((x.level, x.order), []).append(r.store_timestamp)
                    return x
        return None

    def redelivery_room(self, queue: tuple[str, int]) -> int:
        """How many more entries than the model's ``queue`` may hold because restarts let the target deliver
        copies again: one per schedule entry whose delivery may have fallen in a restart's window
        (``redelivery``), per restart, less the ones the model delivered again itself (in its count).
        rule: schedule/restart-redelivery

        Asked at every pull of a delivery queue, so it reads the copies seen through ``delivered_seen``
        (by store time: only those from the window's start on) and walks only the copies not seen yet."""
        spans = self.restart_spans()
        if not spans or queue not in self.delivery_queues:
            return 0
        memo = self.room_memo.get(queue)
        if memo is not None and memo[0] == self.total:  # asked again for the same event
            return memo[1]
        room: set[tuple[int, int, int]] = set()
        seen = self.delivered_seen.get(queue, [])
        lateness = self.delivered_lateness.get(queue, 0)
        q = self.queue_seen_index.get(queue)
        # (level, offset, window opening, window closing: None while its writer runs)
        unseen = [
            (x.level, x.order, x.earliest, self.latest(x))
            for x in (q.waiting() if q is not None else ())
            if x.level is not None
        ]
        for i, _start, done in spans:
            since = self.redelivery_since(spans, i)
            # seen: delivered at ``seen_at`` >= since, its window opening by the restart's completion
            k = bisect.bisect_left(seen, (since,))
            while k < len(seen) and seen[k][0] <= done + lateness:
                _t, earliest, level, order = seen[k]
                if earliest <= done:
                    room.add((level, order, i))
                k += 1
            for level, order, earliest, last in unseen:  # not seen yet: delivered some time in its window
                if earliest <= done and (last is None or last >= since):
                    room.add((level, order, i))
            for (level, order), times in self.redelivered_at.items():  # copies delivered again
                if any(since <= t <= done for t in times) and (level, order) in self.delivered_keys.get(
                    queue, ()
                ):
                    room.add((level, order, i))
        n = len(room - self.own_redeliveries.get(queue, set()))
        self.room_memo[queue] = (self.total, n)
        return n

    def held_back(self, queue: tuple[str, int]) -> int:
        """How many messages the model holds in the schedule topic for ``queue`` (not delivered yet)."""
        delivered = self.delivered_sources
        n = 0
        for level in range(self.state.config.max_delay_level):
            for clo, _size, _tags in self.state.store.cq(SCHEDULE_TOPIC, level):
                rec = self.state.store.lookup(clo)
                if rec is None or clo in delivered or clo in self.phantoms:
                    continue
                p = rec.properties
                if p.get(Prop.REAL_TOPIC) == queue[0] and p.get(Prop.REAL_QID) == str(queue[1]):
                    n += 1
        return n

    def committed_in(self, queue: tuple[str, int]) -> int:
        """How many messages END_TRANSACTION commits wrote to ``queue`` in the model."""
        n = 0
        for clo, _size, _tags in self.state.store.cq(*queue):
            rec = self.state.store.lookup(clo)
            if rec is not None and rec.sys_flag & 0xC == TRANSACTION_COMMIT_TYPE:
                n += 1
        return n

    def excess_rule(self, queue: tuple[str, int], excess: int, rule: str) -> tuple[str, str]:
        """The rule for a queue that holds ``excess`` more entries than the model's (fewer, when negative):
        when the model holds at least as many delayed messages back for it, the likeliest cause is that the
        broker stored them at once (put/delay-eligibility); when it lacks no more entries than the model's
        commits wrote there, that the commits stored nothing (transaction/committed-message). The note
        says so. Else ``rule``, and no note."""
        held = self.held_back(queue) if excess > 0 else 0
        if 0 < excess <= held:
            return (
                "put/delay-eligibility",
                f" (the model holds {held} delayed message(s) for this queue in the schedule topic: stored "
                "at once?)",
            )
        committed = self.committed_in(queue) if excess < 0 else 0
        if 0 < -excess <= committed:
            return (
                "transaction/committed-message",
                f" (the model's commits wrote {committed} message(s) to this queue: never stored?)",
            )
        return rule, ""

    def schedule_pending(self, uniq: str) -> list[Expectation]:
        """Deliveries the model has not made yet: the copies of ``uniq`` still in the schedule queue."""
        out = []
        delivered = self.delivered_sources
        for clo in self.state.store.uniq.get(uniq, ()):
            rec = self.state.store.lookup(clo)
            if rec is None or rec.topic != SCHEDULE_TOPIC or clo in delivered or clo in self.phantoms:
                continue
            real = rec.properties.get(Prop.REAL_TOPIC, "")
            out.append(Expectation(uniq, real, -1, 0, 0, rec, delivery_rule(real), -1))
        return out

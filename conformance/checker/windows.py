"""Timing windows: the model's services run at the earliest time the spec allows, and each thing the
model says must become visible is an expectation with a window ``[earliest, latest]``.

A record stored before its window opens is early (``records``); one stored after it closes is late;
one never seen although its queue was read past its window is lost (or late, for a scheduled copy).
"""

from __future__ import annotations

import bisect
import sys

from rmqspec.reference.constants import DLQ_PREFIX, HALF_TOPIC, RETRY_PREFIX, TRANS_CHECK_MAX_TIME_TOPIC
from rmqspec.reference.observations import CheckRequest, Delivered, Discarded, TimerDelivered
from rmqspec.reference.records import Record

from ..history import Event
from ..timer_windows import timer_window
from .base import CheckerBase, Queue
from .expectation import Expectation
from .index import QueueSeen


def delivery_rule(topic: str) -> str:
    """The rule a delivered copy's timing is judged by: a retry copy is the send-back's, a copy routed
    to the DLQ by a send to %RETRY% the retry-send's, any other the schedule's."""
    if topic.startswith(RETRY_PREFIX):
        return "sendback/through-schedule"
    if topic.startswith(DLQ_PREFIX):
        return "sendback/retry-send-dlq"
    return "schedule/due-time"


class WindowsMixin(CheckerBase):
    # -- the model's services ---------------------------------------------------------------------------

    def advance(self, t: int) -> None:
        """Run the model's services up to ``t`` and turn what they write into expectations."""
        if self.model_time is None:
            self.model_time = t
            self.tx_up_since = t  # the broker was up when the history began
            return
        if t <= self.model_time:
            return
        before = len(self.state.store.records)
        topics_before = self.state.topics
        self.state, events = self.model.advance(self.state, self.model_time, t)
        self.model_time = t
        for ev in events:
            if isinstance(ev, Delivered):
                self.on_delivered(ev)
            elif isinstance(ev, TimerDelivered):
                self.on_timer_delivered(ev)
            elif isinstance(ev, CheckRequest):
                self.note_parent(ev)  # the lineage of copies, for what a restart may take away
                # While the broker stops (or is down) its remoting server is closed: a check then reaches
                # no producer, though the copy is written (rule: transaction/check-restart).
                if ev.sent and self.restarting is None and (ev.transaction_id or "") not in self.void_uniqs:
                    self.expected_checks.append((ev.at, ev))
            elif isinstance(ev, Discarded):
                uniq = ev.copy.uniq_key or ""
                if uniq in self.void_uniqs:
                    continue
                x = self.expect(
                    ev.copy,
                    "transaction/check-discard",
                    -1,
                    ev.copy.store_timestamp,
                    writer=self.writer_of_uniq.get(uniq),
                )
                x.closes += self.run_slack_ms
                early = self.early_discards.pop(uniq, None)
                if early is not None:
                    # The target discarded it in an earlier run, the one that wrote its last copy
                    # (transaction/check-discard allows it; the pull was accepted then): that record is
                    # this discard, compared with the model's copy now, and not waited for again.
                    r, shown = early
                    x.seen_at = r.store_timestamp
                    self.queue_index(x.queue).seen += 1
                    self.bind(r.commit_log_offset, x.model.commit_log_offset)
                    self.compare_record(r, x, shown)
                    self.mixed_queues.add((ev.copy.topic, ev.copy.queue_id))
                    continue
                if not self.check_phase_known:
                    # No check shows when the broker's runs are: its run may come up to an interval
                    # before or after the model's (the spec leaves the phase to the broker).
                    interval = self.model.config.transaction_check_interval_ms
                    x.earliest -= interval
                    x.closes += interval
                self.mixed_queues.add((ev.copy.topic, ev.copy.queue_id))
        if not self.tx_progress or self.tx_progress[-1][1] != self.state.tx_half_offset:
            self.tx_progress.append((self.state.tx_last_run_end or t, self.state.tx_half_offset))
        self.note_service_records(before)
        for topic in set(self.state.topics) - set(topics_before):
            self.topic_origin.setdefault(topic, None)
            self.note_new_topic(topic)
        self.overdue_checks(t)

    def on_delivered(self, ev: Delivered) -> None:
        source = ev.source.commit_log_offset
        queue = (ev.copy.topic, ev.copy.queue_id)
        self.mixed_queues.add(queue)
        self.delivery_queues.add(queue)
        if source in self.phantoms:
            self.make_phantom(ev.copy)  # the target never stored the schedule entry: nothing to deliver
            return
        x = self.expect(
            ev.copy,
            delivery_rule(ev.copy.topic),
            -1,
            ev.copy.store_timestamp,
            ev.level,
            ev.source.queue_offset,
            writer=self.writer_of_record.get(source, self.writer_of_uniq.get(ev.copy.uniq_key or "")),
        )
        due = self.due_before_stop.pop(source, None)
        if due is not None:  # the stopping broker may have delivered it on time (apply_restart)
            x.earliest = min(x.earliest, due)
        # A copy delivered again after a restart may or may not come (rule: schedule/restart-redelivery):
        # the broker may have persisted its offset at shutdown.
        x.optional = source in self.delivered_sources
        if x.optional and (self.restarts or self.restarting is not None):
            x.again = len(self.restarts) - (self.restarting is None)  # the restart that made it
            self.own_redeliveries.setdefault(queue, set()).add((ev.level, ev.source.queue_offset, x.again))
        self.delivered_keys.setdefault(queue, set()).add((ev.level, ev.source.queue_offset))
        self.delivered_sources.add(source)

    def on_timer_delivered(self, ev: TimerDelivered) -> None:
        """The 5.x timer put a due message back: the copy's window opens a precision after its slot
        (rule: timer/due-time); the send that wrote the timer record bounds when it closes."""
        source = ev.source.commit_log_offset
        queue = (ev.copy.topic, ev.copy.queue_id)
        self.mixed_queues.add(queue)
        self.delivery_queues.add(queue)
        if source in self.phantoms:
            self.make_phantom(ev.copy)
            return
        window = timer_window(ev, self.model.config.timer_precision_ms, self.eps)
        x = self.expect(
            ev.copy,
            "timer/due-time",
            -1,
            window.due,
            writer=self.writer_of_record.get(source, self.writer_of_uniq.get(ev.copy.uniq_key or "")),
        )
        x.timer_slot = window.slot

    def note_new_topic(self, topic: str, root: int | None = None) -> None:
        """The model created ``topic``: if only for phantoms, the target may well not have it."""
        if self.real_entries(topic):
            return
        self.phantom_topics.add(topic)
        if root is None:
            roots = [self.void_roots[u] for u in self.phantom_uniqs_in(topic) if u in self.void_roots]
            root = roots[0] if roots else None
        if root is not None:
            self.taint(root, topics=[topic])

    def real_entries(self, topic: str) -> bool:
        """Whether the model holds, in ``topic``, an entry that is not a phantom."""
        store = self.state.store
        return any(
            clo not in self.phantoms
            for (t, _q), cq in store.cqs.items()
            if t == topic
            for clo, _s, _tags in cq
        )

    def phantom_uniqs_in(self, topic: str) -> list[str]:
        out = []
        for clo in self.phantoms:
            rec = self.state.store.lookup(clo)
            if rec is not None and rec.topic == topic:
                out.append(rec.uniq_key or "")
        return out

    def note_service_records(self, before: int) -> None:
        """A check copy or discard of a half message the target never stored is a phantom too."""
        records = self.state.store.records
        for pos in range(before, len(records)):
            rec = records[pos]
            if (
                rec.topic in (HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC)
                and (rec.uniq_key or "") in self.void_uniqs
            ):
                self.make_phantom(rec)

    # -- expectations --------------------------------------------------------------------------------------

    def expect(
        self,
        rec: Record,
        rule: str,
        source: int,
        earliest: int,
        level: int | None = None,
        order: int = 0,
        *,
        writer: int | None = None,
    ) -> Expectation:
        x = Expectation(
            rec.uniq_key or "",
            rec.topic,
            rec.queue_id,
            earliest,
            earliest + self.eps,
            rec,
            rule,
            source,
            level,
            order,
            writer=writer,
            epoch=len(self.restarts) + (self.restarting is not None),  # a restart in flight counts
        )
        self.expectations.setdefault((x.uniq, x.topic), []).append(x)
        self.by_queue.setdefault(x.queue, []).append(x)
        self.queue_index(x.queue).unseen.append(x)
        return x

    def queue_index(self, queue: Queue) -> QueueSeen:
        q = self.queue_seen_index.get(queue)
        if q is None:
            q = self.queue_seen_index[queue] = QueueSeen()
        return q

    def forget(self, x: Expectation) -> None:
        """``x`` is no longer expected (a phantom's): out of the indexes too."""
        q = self.queue_index(x.queue)
        if x.seen_at is None:
            q.drop(x)
            return
        q.seen -= 1
        if x.level is not None and x.seen_at is not None:
            seen = self.delivered_seen.get(x.queue, [])
            entry = (x.seen_at, x.earliest, x.level, x.order)
            if entry in seen:
                seen.remove(entry)
        if x.level is not None:
            level = self.seen_by_level.get((x.level, x.epoch))
            if level is not None and any(o is x for o in level.items):
                level.remove(x)

    def created_by(self, source: int) -> list[Expectation]:
        return [x for xs in self.expectations.values() for x in xs if x.source == source]

    def latest(self, x: Expectation) -> int | None:
        """When ``x``'s window closes; None while the operation it follows from has not completed.

        The target stored what the operation wrote at some time between its invoke and its completion
        (the model stores it at the invoke), so everything that follows may be that much later.
        """
        # The broker is stopping or starting (a restart invoked, not yet completed): its services owe
        # nothing until it is back; the completion then sets how long they have (apply_restart).
        service = x.level is not None or x.timer_slot is not None
        if self.restarting is not None and service and x.closes >= self.restarting:
            return sys.maxsize
        if x.writer is None:
            return x.closes
        done = self.completed.get(x.writer)
        if done is None:
            return None  # still running, or its outcome is unknown
        return x.closes + max(0, done[1] - self.invoked_at[x.writer])

    def judge_waiting(self, op: int) -> None:
        """``op`` completed: judge the records seen for windows that waited for its completion."""
        waiting = [w for w in self.late_pending if w[0].writer == op]
        if not waiting:
            return
        self.late_pending = [w for w in self.late_pending if w[0].writer != op]
        for x, store_ts, index in waiting:
            self.judge_late(x, store_ts, index)

    def judge_late(self, x: Expectation, store_ts: int, index: int) -> None:
        latest = self.latest(x)
        if latest is None:
            self.late_pending.append((x, store_ts, index))
        elif store_ts > latest:
            self.report(
                "late-delivery",
                x.rule,
                index,
                f"{x.uniq} stored in {x.topic} {store_ts - latest} ms after its window closed "
                f"(window [{x.earliest}, {latest}])",
                uniq=x.uniq,
                queues=[x.queue],
            )
        elif x.unstretched is not None and store_ts > latest - (x.closes - x.unstretched):
            self.allow("restart-stretched-window")  # on time only because a restart stretched it

    # -- phantoms: what the model holds and the target does not -------------------------------------------

    def make_phantom(self, rec: Record) -> None:
        """The target does not hold ``rec``: drop what the model expects of it, and count it out of its
        queue (the target's later entries there sit one offset lower than the model's)."""
        if rec.commit_log_offset in self.phantoms:
            return
        self.phantoms.add(rec.commit_log_offset)
        for key in ((rec.uniq_key or "", rec.topic),):
            xs = self.expectations.get(key, [])
            gone = [x for x in xs if x.model.commit_log_offset == rec.commit_log_offset]
            for x in gone:
                xs.remove(x)
                self.by_queue[x.queue].remove(x)
                self.forget(x)
        cq = self.state.store.cq(rec.topic, rec.queue_id)
        if rec.queue_offset < len(cq) and cq[rec.queue_offset][0] == rec.commit_log_offset:
            bisect.insort(self.phantom_entries.setdefault((rec.topic, rec.queue_id), []), rec.queue_offset)

    def phantoms_below(self, queue: Queue, model_offset: int) -> int:
        return bisect.bisect_left(self.phantom_entries.get(queue, []), model_offset)

    def target_offset(self, queue: Queue, model_offset: int) -> int:
        """Where the target holds the model's entry ``model_offset`` of ``queue``."""
        return model_offset - self.phantoms_below(queue, model_offset)

    # -- reading a queue to its end ----------------------------------------------------------------------

    def read_to(self, topic: str, queue: int) -> int:
        """n such that every offset below n of the queue has been read by some pull."""
        n = self.read_prefix.get((topic, queue), 0)
        while (topic, queue, n) in self.queue_seen:
            n += 1
        self.read_prefix[topic, queue] = n
        return n

    def missing_in(self, topic: str, queue: int, t: int, index: int) -> None:
        """The queue was read to its end by a pull that began at ``t``: what was due by then is missing."""
        if self.indexed:
            candidates = list(self.queue_index((topic, queue)).waiting())
        else:
            candidates = list(self.by_queue.get((topic, queue), ()))
        for x in candidates:
            if x.seen_at is not None or x.optional:
                continue
            latest = self.latest(x)
            if latest is not None and latest < t:
                x.optional = True  # report once
                self.count("absences")
                name = "lost-message" if x.level is None else "late-delivery"
                self.report(
                    name,
                    x.rule,
                    index,
                    f"{x.uniq} not visible in {topic}:{queue} at {t}, due by {latest}",
                    uniq=x.uniq,
                    queues=[x.queue],
                )

    def overdue_checks(self, t: int) -> None:  # transactions.TransactionsMixin
        raise NotImplementedError

    def note_parent(
        self, req: CheckRequest, half: Record | None = None
    ) -> None:  # transactions.TransactionsMixin
        raise NotImplementedError

    def compare_record(self, r: Record, x: Expectation, e: Event) -> None:  # records.RecordsMixin
        raise NotImplementedError

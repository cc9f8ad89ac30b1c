"""Client operations: applied to the model at their invoke, their answers compared at their completion.

When the target's answer diverges from the model's, the checker follows what the target did where the
spec lets it continue, instead of keeping the model's story:

* the target refused what the model stored (a send, a batch, a send-back, a commit): the model's
  records of it become *phantoms*: nothing is expected of them (no delivery, no check, no discard), and
  the target's later entries of their queues are one offset lower than the model's;
* the target stored what the model refused: its queue holds an entry the model does not (counted in
  the queue's length), and its offsets there are no longer the model's;
* either way the divergence is one anomaly, a root cause; what still follows from it later (a check
  the target sends for a message it resolved, a pull of a topic it never created) is a consequence.
"""

from __future__ import annotations

from typing import Final

import attrs

from rmqspec.reference.batch import Batch
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import (
    DLQ_PREFIX,
    HALF_TOPIC,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    Code,
    Prop,
    TxAction,
)
from rmqspec.reference.model import FIRST_DELAY_TIME_MS, ConsumerSendBack, EndTx, Heartbeat, Send, SendBatch
from rmqspec.reference.observations import (
    BatchOk,
    Delivered,
    EndTxOk,
    Found,
    NoResponse,
    Rejected,
    SendBackOk,
    SendOk,
)
from rmqspec.reference.records import Record

from ..codec import code_name
from ..contract import Response
from ..history import Event
from .base import Completion
from .pulls import PullsMixin, _int_field
from .records import msg_id_offset

_OFFSET_ID_LENGTHS: Final = (32, 56)


def _offset_id(s: object) -> bool:
    return isinstance(s, str) and len(s) in _OFFSET_ID_LENGTHS and all(c in "0123456789ABCDEF" for c in s)


def _send_rule(topic: str, half: bool) -> str:
    if half:
        return "transaction/half-message"
    if topic.startswith(RETRY_PREFIX):
        return "sendback/retry-send-dlq"
    return "put/send-result"


class OperationsMixin(PullsMixin):
    def visible(self, rec: Record) -> bool:
        """Whether a stored record reaches a consume queue a client may read."""
        return rec.topic not in SYSTEM_TOPICS and self.model.semantics.dispatchable(rec.tran_type)

    def mismatch(self, e: Event, resp: Response, want: int, rule: str, what: str, uniq: str | None) -> int:
        return self.report(
            "wrong-response",
            rule,
            e.index,
            f"{what}: expected {code_name(want)}, got {code_name(resp.code)} ({resp.remark})",
            uniq=uniq,
        )

    def void(self, root: int, records: tuple[Record, ...], *, uniq: str, new_topic: str | None) -> None:
        """The target refused what the model stored: follow the target (rule of the refusal: ``root``)."""
        for rec in records:
            self.make_phantom(rec)
            if rec.topic == HALF_TOPIC:
                self.void_uniqs.add(rec.uniq_key or uniq)
            self.void_roots.setdefault(rec.uniq_key or uniq, root)
        self.taint(root, uniq=uniq)
        if new_topic:
            self.note_new_topic(new_topic, root)

    def stored_anyway(self, root: int, topic: str, resp: Response, plain: bool, n: int = 1) -> None:
        """The target stored what the model refused: its queue holds entries the model does not."""
        queue_id = _int_field(resp, "queue_id")
        if plain and queue_id is not None:
            queue = (topic, queue_id)
            self.extra_entries[queue] += n
            self.mixed_queues.add(queue)
            self.taint(root, queues=[queue])
        else:
            self.open_topics.add(topic)
            self.taint(root, topics=[topic])

    # -- sends ------------------------------------------------------------------------------------------

    def apply_send(self, inv: Event, op: Send) -> Completion:
        msg = op.message
        if msg.born_timestamp is None:
            msg = attrs.evolve(msg, born_timestamp=inv.time)
        p = msg.properties
        uniq = p.get(Prop.UNIQ_KEY, "")
        half = p.get(Prop.TRAN_MSG) == "true"
        rule = _send_rule(msg.topic, half)
        # A queueId < 0 is the broker's random pick: the one its send result names (rule: put/queue-id-range).
        choice = self.queue_hints.get(inv.index, 0)
        queue = (msg.topic, msg.queue_id if msg.queue_id >= 0 else choice)
        offset_known = queue not in self.mixed_queues
        new_topic = None if msg.topic in self.state.topics else msg.topic
        self.state, obs = self.model.send(self.state, msg, inv.time, queue_choice=choice)
        if isinstance(obs, SendOk):
            rec = obs.record
            self.writer_of_record[rec.commit_log_offset] = inv.index
            self.writer_of_uniq[uniq] = inv.index
            if self.visible(rec):
                routed = rec.topic != msg.topic  # a send to %RETRY% at its limit: stored in the DLQ
                expect_rule = "sendback/retry-send-dlq" if routed else "put/send-result"
                self.expect(rec, expect_rule, inv.index, inv.time, writer=inv.index)
        if half:
            self.half_uniqs.add(uniq)

        def complete(resp: Response, e: Event) -> None:
            self.count("responses")
            if isinstance(obs, Rejected):
                if resp.code != int(obs.code):
                    root = self.mismatch(
                        e, resp, int(obs.code), obs.rule, f"send of {uniq} to {msg.topic}", uniq
                    )
                    if resp.code == int(Code.SUCCESS):
                        plain = not half and p.get(Prop.DELAY, "0") in ("", "0")
                        self.stored_anyway(root, msg.topic, resp, plain)
                return
            if resp.code != int(Code.SUCCESS):
                root = self.mismatch(e, resp, 0, rule, f"send of {uniq} to {msg.topic}", uniq)
                self.void(root, (obs.record,), uniq=uniq, new_topic=new_topic)
                return
            self.send_result(obs, resp, e, uniq, half, inv.index, offset_known)

        return complete

    def send_result(
        self, obs: SendOk, resp: Response, e: Event, uniq: str, half: bool, op: int, offset_known: bool
    ) -> None:
        """The send response against the model's (rule: put/send-result). The queue offset is compared
        where the model knows it: not in a queue the broker's own services also write to, and, on a
        shared broker, not in a system topic that every producer writes to."""
        rec = obs.record
        stored = rec.topic
        queue_id, queue_offset = _int_field(resp, "queue_id"), _int_field(resp, "queue_offset")
        if stored == SCHEDULE_TOPIC and queue_offset is not None:
            self.schedule_entry_offset[op] = queue_offset
        elif stored not in SYSTEM_TOPICS and queue_offset is not None:
            self.reported_offset[op, uniq] = (queue_id if queue_id is not None else -1, queue_offset)
        offset_known = offset_known and not (self.shared and stored in SYSTEM_TOPICS)
        want_offset = self.target_offset((stored, rec.queue_id), obs.queue_offset)
        if (offset_known and queue_offset != want_offset) or queue_id != obs.queue_id:
            excess = (
                queue_offset - want_offset if queue_id == obs.queue_id and queue_offset is not None else 0
            )
            rule, note = self.excess_rule((stored, rec.queue_id), excess, "put/send-result")
            self.report(
                "wrong-send-result",
                rule,
                e.index,
                f"send result of {uniq}: queue {queue_id} offset {queue_offset}, expected "
                f"{obs.queue_id}/{want_offset}{note}",
                queues=[(stored, rec.queue_id)],
            )
        msg_id = resp.fields.get("msg_id")
        if not _offset_id(msg_id):
            self.report(
                "wrong-send-result",
                "put/send-result",
                e.index,
                f"send result of {uniq}: msgId {msg_id!r} is not an offset message id",
                queues=[(stored, rec.queue_id)],
            )
        else:
            self.bind(msg_id_offset(str(msg_id)), rec.commit_log_offset)
        if half and queue_offset is not None:
            self.half_table_target_to_model[queue_offset] = rec.queue_offset
        if half and self.state.tx_hidden_producers:  # stored by its answer, at the latest
            self.state = attrs.evolve(
                self.state, tx_stored_by=self.state.tx_stored_by.set(rec.queue_offset, e.time)
            )

    def apply_send_batch(self, inv: Event, op: SendBatch) -> Completion:
        b: Batch = op.batch
        if b.born_timestamp is None:
            b = attrs.evolve(b, born_timestamp=inv.time)
        # A queueId < 0 is the broker's random pick: the one its result names (rule: put/queue-id-range).
        choice = self.queue_hints.get(inv.index, 0)
        offset_known = (b.topic, b.queue_id if b.queue_id >= 0 else choice) not in self.mixed_queues
        new_topic = None if b.topic in self.state.topics else b.topic
        self.state, obs = self.model.send_batch(self.state, b, inv.time, choice)
        if isinstance(obs, BatchOk):
            for rec in obs.records:
                self.writer_of_record[rec.commit_log_offset] = inv.index
                self.writer_of_uniq[rec.uniq_key or ""] = inv.index
                self.expect(rec, "batch/consecutive-offsets", inv.index, inv.time, writer=inv.index)
        uniqs = [e.properties.get(Prop.UNIQ_KEY, "") for e in b.entries]
        first_uniq = uniqs[0] if uniqs else None

        def complete(resp: Response, e: Event) -> None:
            self.count("responses")
            if isinstance(obs, Rejected):
                if resp.code != int(obs.code):
                    root = self.mismatch(e, resp, int(obs.code), obs.rule, f"batch to {b.topic}", first_uniq)
                    if resp.code == int(Code.SUCCESS):
                        self.stored_anyway(root, b.topic, resp, True, len(b.entries))
                        for u in uniqs:
                            self.taint(root, uniq=u)
                return
            if resp.code != int(Code.SUCCESS):
                root = self.mismatch(
                    e, resp, 0, "batch/consecutive-offsets", f"batch to {b.topic}", first_uniq
                )
                self.void(root, obs.records, uniq=first_uniq or "", new_topic=new_topic)
                for u in uniqs:
                    self.taint(root, uniq=u)
                return
            self.batch_result(obs, resp, e, inv.index, offset_known)

        return complete

    def batch_result(self, obs: BatchOk, resp: Response, e: Event, op: int, offset_known: bool) -> None:
        queue = (obs.records[0].topic, obs.records[0].queue_id)
        ids = str(resp.fields.get("msg_id", "")).split(",")
        if len(ids) != len(obs.records) or not all(_offset_id(i) for i in ids):
            self.report(
                "wrong-send-result",
                "batch/consecutive-offsets",
                e.index,
                f"batch result msgId {resp.fields.get('msg_id')!r}: expected {len(obs.records)} offset message ids",
                queues=[queue],
            )
        for rec, mid in zip(obs.records, ids, strict=False):
            if _offset_id(mid):
                self.bind(msg_id_offset(mid), rec.commit_log_offset)
        first = _int_field(resp, "queue_offset")
        queue_id = _int_field(resp, "queue_id")
        want = self.target_offset(queue, obs.records[0].queue_offset)
        if first is None or queue_id != obs.queue_id or (offset_known and first != want):
            self.report(
                "wrong-send-result",
                "batch/consecutive-offsets",
                e.index,
                f"batch result queue {queue_id} offset {first}, expected {obs.queue_id}/{want}",
                queues=[queue],
            )
        if first is None:
            return
        # Each message of the batch is at the next offset (rule: batch/consecutive-offsets).
        for i, rec in enumerate(obs.records):
            self.reported_offset[op, rec.uniq_key or ""] = (
                queue_id if queue_id is not None else -1,
                first + i,
            )

    # -- send-back ----------------------------------------------------------------------------------------

    def apply_send_back(self, inv: Event, op: ConsumerSendBack) -> Completion:
        r = op.request
        model_offset = self.target_to_model.get(r.offset, -1 - r.offset)
        named = self.state.store.lookup(model_offset)
        uniq = named.uniq_key if named is not None else None
        self.state, obs = self.model.send_back(self.state, attrs.evolve(r, offset=model_offset), inv.time)
        rule = obs.rule if isinstance(obs, Rejected) else "sendback/dlq-route"
        if isinstance(obs, SendBackOk) and obs.record is not None:
            self.writer_of_record[obs.record.commit_log_offset] = inv.index
            self.writer_of_uniq[obs.record.uniq_key or ""] = inv.index
            if obs.record.topic != SCHEDULE_TOPIC:
                self.expect(obs.record, "sendback/dlq-route", inv.index, inv.time, writer=inv.index)

        def complete(resp: Response, e: Event) -> None:
            self.count("responses")
            want = int(obs.code)
            if resp.code == want:
                return
            root = self.mismatch(e, resp, want, rule, f"send-back of {uniq or r.offset} by {r.group}", uniq)
            if isinstance(obs, SendBackOk) and obs.record is not None:
                self.void(root, (obs.record,), uniq=uniq or "", new_topic=None)
            elif resp.code == int(Code.SUCCESS):
                for topic in (f"{RETRY_PREFIX}{r.group}", f"{DLQ_PREFIX}{r.group}"):
                    self.open_topics.add(topic)
                    self.taint(root, topics=[topic])

        return complete

    # -- END_TRANSACTION ---------------------------------------------------------------------------------

    def uniq_at(self, model_offset: int) -> str:
        """The UNIQ_KEY of the model's record at ``model_offset`` ("" when there is none)."""
        if model_offset < 0:
            return ""
        found = self.model.view(self.state, model_offset)
        if isinstance(found, Found) and found.records:
            return found.records[0].uniq_key or ""
        return ""

    def apply_end_tx(self, inv: Event, op: EndTx) -> Completion:
        r = op.request
        model_offset = self.target_to_model.get(r.commit_log_offset, -1)
        table = self.half_table_target_to_model.get(r.tran_state_table_offset, r.tran_state_table_offset)
        req = attrs.evolve(r, tran_state_table_offset=table, commit_log_offset=model_offset)
        # The half message's UNIQ_KEY names the transaction. A 4.9.x producer sends no transactionId
        # outside a check (the 4.9.x broker never sets one in the send result): read the key from the
        # half record the request names, so that two transactions never share the empty name.
        uniq = str(r.transaction_id or "") or self.uniq_at(model_offset)
        self.state, obs = self.model.end_transaction(self.state, req, inv.time)
        if isinstance(obs, EndTxOk):
            if uniq in self.resolved:
                self.hazards.append(
                    f"transaction/not-idempotent: {uniq} ended twice ({self.resolved[uniq]}, then "
                    f"{r.action.name.lower()}); the broker keeps no transaction state and applies both"
                )
            self.resolved[uniq] = "commit" if r.action == TxAction.COMMIT else "rollback"
            self.resolved_at[uniq] = inv.time
            if obs.committed is not None:
                self.writer_of_record[obs.committed.commit_log_offset] = inv.index
                self.expect(
                    obs.committed, "transaction/committed-message", inv.index, inv.time, writer=inv.index
                )

        def complete(resp: Response, e: Event) -> None:
            # Only answered requests get here: one sent one-way (no_response) is judged by its effects
            # alone (Checker.feed_completion), an UNKNOW as well as a COMMIT or ROLLBACK.
            self.count("responses")
            if isinstance(obs, NoResponse):
                self.report(
                    "wrong-response",
                    obs.rule,
                    e.index,
                    f"END_TRANSACTION UNKNOW of {uniq} was answered {code_name(resp.code)}; it gets no response",
                    uniq=uniq,
                )
                return
            rule = obs.rule if isinstance(obs, Rejected) else "transaction/committed-message"
            if resp.code != int(obs.code):
                root = self.mismatch(
                    e, resp, int(obs.code), rule, f"END_TRANSACTION {r.action.name} of {uniq}", uniq
                )
                if isinstance(obs, EndTxOk) and obs.committed is not None:
                    self.void(root, (obs.committed,), uniq=uniq, new_topic=None)

        return complete

    # -- the rest ----------------------------------------------------------------------------------------

    def apply_heartbeat(self, inv: Event, op: Heartbeat) -> Completion:
        self.state = self.model.heartbeat(self.state, op.group, online=op.online, consumer=op.consumer)

        def complete(resp: Response, e: Event) -> None:
            self.count("responses")
            if resp.code != int(Code.SUCCESS):
                self.mismatch(e, resp, 0, "wire/heartbeat", f"HEART_BEAT of {op.group}", None)

        return complete

    def apply_restart(self, inv: Event) -> Completion:
        """rule: schedule/restart-redelivery. The model restarts as after a crash (delivery resumes from
        the last persisted offset); copies it delivers again are optional, since a broker that persisted
        its offsets at shutdown delivers nothing twice, and one whose persist fell at another time than
        the model's may deliver again anything delivered up to one persist interval before."""
        levels = inv.value.get("delay_levels") if isinstance(inv.value, dict) else None
        if isinstance(levels, list) and levels and all(isinstance(v, int) for v in levels):
            config: BrokerConfig = attrs.evolve(self.model.config, delay_levels=tuple(levels))
            self.model = attrs.evolve(self.model, config=config)
            self.state = attrs.evolve(self.state, config=config)
        # The broker goes on until it has stopped, at some moment before the restart completes: a schedule
        # entry due before the model's first run after the restart (FIRST_DELAY_TIME after the invoke)
        # may come at its own due time from the broker that is stopping (ScheduleMessageService runs
        # until BrokerController.shutdown stops it), not only a run after the start.
        _, ahead = self.model.advance(self.state, inv.time, inv.time + FIRST_DELAY_TIME_MS)
        self.due_before_stop = {  # this restart's: an earlier one's are over
            ev.source.commit_log_offset: ev.copy.store_timestamp for ev in ahead if isinstance(ev, Delivered)
        }
        # the broker starts again at the earliest when the restart was asked for: its services' first
        # moments (deliveries FIRST_DELAY_TIME later, the check service an interval later) count from there
        asked = inv.value.get("graceful") if isinstance(inv.value, dict) else None
        self.state = self.model.restart(self.state, inv.time, orderly=asked is True)
        self.restarting = inv.time
        # The target may deliver again what it delivered before, once it answers again (which may be
        # before the suite sees the restart complete): once per schedule entry whose delivery fell in the
        # restart's window (records.redelivery; a delivery queue's ceiling counts them, redelivery_room).

        def complete(resp: Response, e: Event) -> None:
            self.restarting = None
            self.restarts.append((inv.time, e.time))
            done = e.value.get("graceful") if isinstance(e.value, dict) else None
            self.note_restart_for_checks(inv.time, e.time, orderly=(asked if done is None else done) is True)
            # The check service's first run comes an interval after the broker started again, which it did
            # by the time the restart completed (it answers then), mostly just before: count from there, as
            # a broker started at the completion would (rule: transaction/check-interval). The model's runs
            # while it stopped were the stopping broker's (unheard: transaction/check-restart).
            self.state = attrs.evolve(self.state, tx_run=None, tx_last_run_end=e.time)
            # Due while the broker was down (or released by the restart, which the model does at once):
            # delivered once its schedule service runs again, the first run FIRST_DELAY_TIME (1000 ms)
            # after the start.
            # A timer message whose time passed while the broker was down: delivered once the timer reads
            # its wheel again, a slot (one precision) after the start at the latest (rule: timer/restart).
            # Only a copy whose window was still open when the stop began (due while the broker was
            # stopping or down, or released by the restart): one whose window closed while the broker was
            # up was owed then, and is late whatever restart came after.
            precision = self.model.config.timer_precision_ms
            for xs in self.expectations.values():
                for x in xs:
                    if x.seen_at is None and (x.level is not None or x.timer_slot is not None):
                        resume = FIRST_DELAY_TIME_MS if x.level is not None else precision
                        latest = self.latest(x)
                        stretched = e.time + resume + self.eps
                        if x.earliest <= e.time + resume and (latest is None or latest >= inv.time):
                            if stretched > x.closes and x.unstretched is None:
                                x.unstretched = x.closes
                            x.closes = max(x.closes, stretched)

        return complete

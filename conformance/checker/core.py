"""The checker: reads a history event by event, replays it on the model, and reaches a verdict.

Operations are applied to the model at their invoke time, in invoke order (a broker's store times are
monotone, and a message is stored somewhere between its invoke and its completion; the model stores it
at the invoke, the earliest possible), and each completion is compared with what the model answered.
What the history holds must be judged: an event the checker cannot read, an operation kind it does not
know, or an answer it cannot judge is itself an anomaly of a ``history/...`` rule, never a silent pass.
"""

from __future__ import annotations

import attrs

from rmqspec.reference.constants import HALF_TOPIC
from rmqspec.reference.model import (
    ConsumerSendBack,
    EndTx,
    GetMaxOffset,
    Heartbeat,
    Pull,
    QueryUniqKey,
    Send,
    SendBatch,
    ViewMessage,
)
from rmqspec.reference.records import Record

from ..codec import OP_KINDS, RESTART, CodecError, check_from_json, event_op, response_from_json
from ..contract import Response
from ..history import TYPES, Event
from .base import Completion, Pending
from .operations import OperationsMixin
from .records import restore_case
from .verdict import CHECK_KINDS, Verdict


class Checker(OperationsMixin):
    """Incremental: ``feed`` events in history order, then ``finish``."""

    def malformed(self, e: Event, message: str) -> int:
        return self.report("malformed-history", "history/well-formed", e.index, message)

    def cannot_replay(self, e: Event, root: int) -> None:
        """An operation the model cannot replay may have changed what its message and its topic hold:
        what the target shows of them from now on follows from ``root``."""
        value = e.value if isinstance(e.value, dict) else {}
        p = value.get("properties")
        uniqs = [p.get("UNIQ_KEY")] if isinstance(p, dict) else []
        for m in value.get("messages") or [] if isinstance(value.get("messages"), list) else []:
            if isinstance(m, dict) and isinstance(m.get("properties"), dict):
                uniqs.append(m["properties"].get("UNIQ_KEY"))
        for uniq in uniqs:
            if isinstance(uniq, str):
                self.taint(root, uniq=uniq)
        topic = value.get("topic")
        if isinstance(topic, str):
            self.taint(root, topics=[topic])
            self.open_topics.add(topic)

    def feed(self, e: Event) -> None:
        self.total += 1
        self.consumed += 1
        self.last_time = max(self.last_time, e.time)
        if e.type not in TYPES:
            self.malformed(e, f"event type {e.type!r} is not one of {', '.join(TYPES)}")
        elif e.process < 0 or e.f == "check":
            self.feed_broker_event(e)
        elif e.type == "invoke":
            self.feed_invoke(e)
        else:
            self.feed_completion(e)

    def feed_broker_event(self, e: Event) -> None:
        """What the broker did on its own: a CHECK_TRANSACTION_STATE (process -1, type ok)."""
        if e.f != "check" or e.process != -1 or e.type != "ok":
            self.malformed(
                e, f"a broker event is a check (process -1, type ok), not {e.type} {e.f} by {e.process}"
            )
            return
        try:
            c = check_from_json(e.value, e.time)
        except CodecError as err:
            self.malformed(e, f"check: {err}")
            return
        self.last_answered = max(self.last_answered, e.time)
        fixed, names = restore_case(c.message)
        if names:
            self.report_case(fixed, names, e)
            c = attrs.evolve(c, message=fixed)
        self.advance(e.time)
        self.on_check(c, e)

    def feed_invoke(self, e: Event) -> None:
        self.advance(e.time)
        self.invoked_at[e.index] = e.time
        if e.process in self.pending:
            prev = self.pending[e.process].invoke
            self.malformed(
                e, f"process {e.process} began {e.f} while its {prev.f} (event {prev.index}) was in flight"
            )
        topics_before = self.state.topics
        self.pending[e.process] = Pending(e, self.invoke(e))
        for topic in set(self.state.topics) - set(topics_before):
            self.topic_origin.setdefault(topic, e.index)

    def invoke(self, e: Event) -> Completion | None:
        if e.f == RESTART:
            return self.apply_restart(e)
        if e.f not in OP_KINDS:
            root = self.report(
                "unknown-operation",
                "history/known-operations",
                e.index,
                f"{e.f!r} is not an operation the checker judges (it knows {', '.join(OP_KINDS)}, restart)",
            )
            self.cannot_replay(e, root)
            return None
        try:
            op = event_op(e.f, e.value)
        except CodecError as err:
            self.cannot_replay(e, self.malformed(e, str(err)))
            return None
        match op:
            case Send():
                return self.apply_send(e, op)
            case SendBatch():
                return self.apply_send_batch(e, op)
            case Pull():
                return self.apply_pull(e, op)
            case ConsumerSendBack():
                return self.apply_send_back(e, op)
            case EndTx():
                return self.apply_end_tx(e, op)
            case Heartbeat():
                return self.apply_heartbeat(e, op)
            case GetMaxOffset():
                return self.apply_max_offset(e, op)
            case ViewMessage():
                return self.apply_view(e, op)
            case QueryUniqKey():
                return self.apply_query(e, op)
        raise AssertionError(f"the codec read {e.f} as {op!r}")

    def feed_completion(self, e: Event) -> None:
        entry = self.pending.pop(e.process, None)
        if entry is None:
            self.malformed(e, f"{e.type} of {e.f} without an invoke by process {e.process}")
            return
        inv = entry.invoke
        if e.f != inv.f:
            self.malformed(
                e, f"{e.type} of {e.f} completes process {e.process}'s {inv.f} (event {inv.index})"
            )
        # The broker's services ran up to this completion too: a pull that returns here may show copies
        # delivered after its invoke (the model, like the broker, delivers at the due time).
        self.advance(e.time)
        if e.type == "info":
            self.unknown_outcome(inv, cut=self.cut_by_restart(inv.time, e.time))
            rule = e.value.get("rule") if isinstance(e.value, dict) else None
            if isinstance(rule, str) and rule:
                # The target answered, but not as the protocol says (a field missing, a frame that
                # cannot be read): a failure of that rule. What the operation did stays unknown, so what
                # the target later shows of its message and topic follows from this one.
                error = e.value.get("error")
                root = self.report(
                    "malformed-answer",
                    rule,
                    e.index,
                    f"{inv.f}: {error if isinstance(error, str) else 'an answer that breaks the protocol'}",
                )
                self.cannot_replay(inv, root)
            return
        self.completed[inv.index] = (e.index, e.time)
        self.last_answered = max(self.last_answered, e.time)
        if entry.complete is not None:
            if inv.f == RESTART:
                entry.complete(Response(0), e)
            else:
                try:
                    resp = response_from_json(e.value, f"answer to {inv.f}")
                except CodecError as err:
                    root = self.report(
                        "unjudged-answer",
                        "history/judged-answers",
                        e.index,
                        f"{err}: the answer cannot be compared with the model's",
                    )
                    # What the operation did is unknown: follow neither way.
                    self.cannot_replay(inv, root)
                    for x in self.created_by(inv.index):
                        x.optional = True
                        self.mixed_queues.add(x.queue)
                else:
                    if resp.no_response:
                        # Sent one-way: no answer was expected and none is recorded; the operation is
                        # judged by its effects alone (the model's expectations), whatever its kind
                        # (history/judged-answers; Apache's producer sends every END_TRANSACTION one-way).
                        self.count("responses")
                    else:
                        entry.complete(self.restored(resp, e), e)
        self.judge_waiting(inv.index)

    def restored(self, resp: Response, e: Event) -> Response:
        """The answer with each record's RocketMQ property names back in their case, each renaming
        reported once (put/stored-properties): what follows is judged on what the target stored."""
        if not resp.records:
            return resp
        out = []
        for r in resp.records:
            fixed, names = restore_case(r)
            if names:
                self.report_case(fixed, names, e)
            out.append(fixed)
        return attrs.evolve(resp, records=tuple(out))

    def report_case(self, r: Record, names: tuple[str, ...], e: Event) -> None:
        self.report(
            "wrong-properties",
            "put/stored-properties",
            e.index,
            f"{r.uniq_key} in {r.topic}: property names in another case than the message was sent with: "
            + ", ".join(f"{n} for {n.upper()}" for n in names),
            uniq=r.uniq_key,
        )

    def cut_by_restart(self, start: int, end: int) -> bool:
        """Whether an operation in flight from ``start`` to ``end`` met a restart (the broker stopping, down
        or starting): its outcome unknown is what a restart does, not something the target left open."""
        if self.restarting is not None and self.restarting <= end:
            return True
        return any(s <= end and start <= d for s, d in self.restarts)

    def unknown_outcome(self, inv: Event, cut: bool = False) -> None:
        """The operation may or may not have happened: what it wrote is optional, and its queue's
        offsets are no longer the model's. One a restart ``cut`` is judged either way; any other leaves
        the verdict unknown (a target that does not answer cannot be judged)."""
        if cut:
            self.cut_outcomes += 1
        else:
            self.unknown_outcomes += 1
        if inv.f == "end_tx" and isinstance(inv.value, dict):
            # It may not have reached the broker: the transaction may still be checked.
            uniq = str(inv.value.get("transaction_id") or "")
            if uniq and self.resolved_at.get(uniq) == inv.time:
                self.resolved.pop(uniq, None)
            self.unsure_ends.add(uniq)
        for x in self.created_by(inv.index):
            x.optional = True
            self.mixed_queues.add(x.queue)
        for clo, op in self.writer_of_record.items():
            if op == inv.index:
                rec = self.state.store.lookup(clo)
                if rec is not None:
                    self.mixed_queues.add((rec.topic, rec.queue_id))
                    self.open_queues.add((rec.topic, rec.queue_id))
                    if rec.topic == HALF_TOPIC and rec.uniq_key:
                        self.unsure_halves.add(rec.uniq_key)  # its checks may never come

    def finish(self) -> Verdict:
        if self.pending:
            self.unknown_outcomes += len(self.pending)
        self.overdue_checks(self.last_time)
        checked = {kind: self.checked.get(kind, 0) for kind in CHECK_KINDS}
        anomalies = tuple(self.anomalies)
        if self.cut_outcomes:
            self.hazards.append(
                f"{self.cut_outcomes} operation(s) cut by a restart, of unknown outcome: judged either way "
                "(what each wrote may or may not be there)"
            )
        hazards = tuple(self.hazards)
        used = dict(sorted(self.allowances_used.items()))
        if anomalies:
            return Verdict(
                "fail",
                anomalies,
                self.consumed,
                self.total,
                hazards=hazards,
                checked=checked,
                allowances=used,
            )
        if self.consumed != self.total:
            reason = "the checker did not consume the whole history"
        elif self.unknown_outcomes:
            reason = f"{self.unknown_outcomes} operation(s) with unknown outcome"
        elif not sum(checked.values()):
            reason = "nothing was checked: the history holds no answer the model could be compared with"
        else:
            return Verdict(
                "pass", (), self.consumed, self.total, hazards=hazards, checked=checked, allowances=used
            )
        return Verdict("unknown", (), self.consumed, self.total, reason, hazards, checked, used)

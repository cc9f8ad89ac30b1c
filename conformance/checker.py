"""The history checker: replay a history against the reference model; a verdict with named anomalies.

The model replays every client operation at its invoke time. Broker-internal work (schedule delivery,
transaction checks) runs in the model at the earliest time the spec allows, and each thing the model
says must become visible turns into an *expectation*: a (UNIQ_KEY, topic) with a window
``[earliest, latest]`` and the record the model would store. Pulled records are matched against
expectations; checks against the model's check requests. Timing is two-sided: a record stored before
its window opens is early, one stored after it closes (by more than ``epsilon_ms``) is late, and one
never seen although the queue was read past its window is lost. Inconsistency is a value: every
anomaly names its rule and the event that shows it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rmqspec.reference.batch import Batch, BatchEntry
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import (
    DLQ_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    Code,
    Prop,
    TxAction,
)
from rmqspec.reference.model import Model
from rmqspec.reference.observations import (
    BatchOk,
    CheckRequest,
    Delivered,
    Discarded,
    EndTxOk,
    NoResponse,
    Rejected,
    SendBackOk,
    SendOk,
)
from rmqspec.reference.put import Message
from rmqspec.reference.records import Props, Record, props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

from .history import Event

DEFAULT_EPSILON_MS = 1000

# Properties whose value the model predicts exactly, with the rule that states each.
_PROP_RULES = {
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
_UNCOMPARED_PROPS = frozenset(
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


@attrs.frozen
class Anomaly:
    name: str
    rule: str
    event: int  # index of the event that shows it (-1: the history as a whole)
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "rule": self.rule, "event": self.event, "message": self.message}


@attrs.frozen
class Verdict:
    valid: str  # "pass", "fail" or "unknown"
    anomalies: tuple[Anomaly, ...]
    consumed: int
    total: int
    reason: str = ""
    hazards: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "anomalies": [a.to_json() for a in self.anomalies],
            "consumed": self.consumed,
            "total": self.total,
            "reason": self.reason,
            "hazards": list(self.hazards),
        }


@attrs.define
class _Exp:
    uniq: str
    topic: str
    queue_id: int | None
    earliest: int
    closes: int  # earliest + epsilon (later after a restart); Checker.latest adds the base operation's width
    model: Record
    rule: str
    source: int
    level: int | None = None
    order: int = 0  # position in its schedule queue (FIFO checks)
    matched_at: int | None = None
    optional: bool = False
    # The operation whose completion bounds when the target stored what this expectation follows from
    # (the send, send-back or END_TRANSACTION; for a delivered copy, the one that wrote its schedule
    # entry): the window stays open until that operation completes, and then closes its width later.
    base: int | None = None
    epoch: int = 0  # restarts before the expectation was made


class Checker:
    """Incremental: ``feed`` events in history order, then ``finish``."""

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
    ) -> None:
        self.model = model or Model(config, check_phase_ms=check_phase_ms, check_rounds=check_rounds)
        self.shared = shared  # a shared broker: system-topic queue offsets are not the model's
        self.state = self.model.initial()
        self.eps = epsilon_ms
        self.mtime: int | None = None
        self.expect: dict[tuple[str, str], list[_Exp]] = {}
        self.anomalies: list[Anomaly] = []
        self.hazards: list[str] = []
        self.pending: dict[int, tuple[Event, Callable[[Event], None] | None]] = {}
        self.obs_to_model: dict[int, int] = {}
        self.model_to_obs: dict[int, int] = {}
        self.half_table_obs_to_model: dict[int, int] = {}
        self.queue_seen: dict[tuple[str, int, int], str] = {}
        self.expected_checks: list[tuple[int, CheckRequest]] = []
        self.resolved: dict[str, str] = {}  # uniq -> "commit"/"rollback"
        self.half_uniqs: set[str] = set()
        self.consumed = 0
        self.total = 0
        self.infos = 0
        self.last_time = 0
        # Operations by the index of their invoke: when each completed (index and time of its ok/fail).
        self.invoked_at: dict[int, int] = {}
        self.done: dict[int, tuple[int, int]] = {}
        self.op_of_record: dict[int, int] = {}  # model commit-log offset -> the operation that wrote it
        self.op_of_uniq: dict[str, int] = {}  # UNIQ_KEY -> the last operation that wrote it
        self.sched_offset: dict[int, int] = {}  # delayed send -> its schedule entry's offset (send result)
        # (send, UNIQ_KEY) -> the queue id and offset its response reported for that message
        self.sent_offset: dict[tuple[int, str], tuple[int, int]] = {}
        self.late_pending: list[tuple[_Exp, int, int]] = []  # (expectation, store time, event) to judge
        # Queues the broker's own services write into (deliveries, discards): the model's queue offsets
        # of later sends there depend on how the two interleave, so they are not compared.
        self.mixed_queues: set[tuple[str, int]] = set()
        self.read_prefix: dict[tuple[str, int], int] = {}  # offsets [0, n) of a queue read by some pull
        self.delivered_sources: set[int] = set()
        self.restarts: list[tuple[int, int]] = []  # (invoke, completion) of each restart
        self.queue_hints = queue_hints or {}  # send with queue < 0 -> the queue its result names

    # -- bookkeeping --
    def anomaly(self, name: str, rule: str, event: int, message: str) -> None:
        self.anomalies.append(Anomaly(name, rule, event, message))

    def bind(self, obs_clo: int, model_clo: int) -> None:
        self.obs_to_model[obs_clo] = model_clo
        self.model_to_obs[model_clo] = obs_clo

    def advance(self, t: int) -> None:
        if self.mtime is None:
            self.mtime = t
            return
        if t <= self.mtime:
            return
        self.state, events = self.model.advance(self.state, self.mtime, t)
        self.mtime = t
        for ev in events:
            if isinstance(ev, Delivered):
                source = ev.source.commit_log_offset
                exp = self.add_exp(
                    ev.copy,
                    "schedule/due-time",
                    -1,
                    ev.copy.store_timestamp,
                    ev.level,
                    ev.source.queue_offset,
                    base=self.op_of_record.get(source, self.op_of_uniq.get(ev.copy.uniq_key or "")),
                )
                # A copy delivered again after a restart may or may not come (rule:
                # schedule/restart-redelivery): the broker may have persisted its offset at shutdown.
                exp.optional = source in self.delivered_sources
                self.delivered_sources.add(source)
                self.mixed_queues.add((ev.copy.topic, ev.copy.queue_id))
            elif isinstance(ev, CheckRequest):
                if ev.sent:
                    self.expected_checks.append((ev.at, ev))
            elif isinstance(ev, Discarded):
                self.add_exp(
                    ev.copy,
                    "transaction/check-discard",
                    -1,
                    ev.copy.store_timestamp,
                    base=self.op_of_uniq.get(ev.copy.uniq_key or ""),
                )
                self.mixed_queues.add((ev.copy.topic, ev.copy.queue_id))
        self.overdue_checks(t)

    def add_exp(
        self,
        rec: Record,
        rule: str,
        source: int,
        earliest: int,
        level: int | None = None,
        order: int = 0,
        *,
        base: int | None = None,
    ) -> _Exp:
        uniq = rec.uniq_key or ""
        exp = _Exp(
            uniq,
            rec.topic,
            rec.queue_id,
            earliest,
            earliest + self.eps,
            rec,
            rule,
            source,
            level,
            order,
            base=base,
            epoch=len(self.restarts),
        )
        self.expect.setdefault((uniq, rec.topic), []).append(exp)
        return exp

    def latest(self, x: _Exp) -> int | None:
        """When ``x``'s window closes; None while the operation it follows from has not completed.

        The target stored what the operation wrote at some time between its invoke and its completion
        (the model stores it at the invoke), so everything that follows may be that much later.
        """
        if x.base is None:
            return x.closes
        done = self.done.get(x.base)
        if done is None:
            return None  # still running, or its outcome is unknown
        return x.closes + max(0, done[1] - self.invoked_at[x.base])

    def settle(self, op: int) -> None:
        """``op`` completed: judge the records matched to windows that waited for it."""
        waiting = [w for w in self.late_pending if w[0].base == op]
        if not waiting:
            return
        self.late_pending = [w for w in self.late_pending if w[0].base != op]
        for exp, store_ts, index in waiting:
            self.judge_late(exp, store_ts, index)

    def judge_late(self, exp: _Exp, store_ts: int, index: int) -> None:
        latest = self.latest(exp)
        if latest is None:
            self.late_pending.append((exp, store_ts, index))
        elif store_ts > latest:
            self.anomaly(
                "late-delivery",
                exp.rule,
                index,
                f"{exp.uniq} stored in {exp.topic} {store_ts - latest} ms after its window closed "
                f"(window [{exp.earliest}, {latest}])",
            )

    # -- feeding --
    def feed(self, e: Event) -> None:
        """Consume one event. Operations are applied to the model in invoke order (the broker's store
        times are monotone), and compared with what the target answered when their completion arrives."""
        self.total += 1
        self.last_time = max(self.last_time, e.time)
        if e.f == "check":
            self.advance(e.time)
            self.on_check(e)
            self.consumed += 1
            return
        if e.type == "invoke":
            self.advance(e.time)
            self.invoked_at[e.index] = e.time
            apply = getattr(self, f"apply_{e.f}", None)
            complete = apply(e) if apply is not None else None
            self.pending[e.process] = (e, complete)
            self.consumed += 1
            return
        entry = self.pending.pop(e.process, None)
        if entry is None:
            self.anomaly(
                "malformed-history",
                "put/send-result",
                e.index,
                f"{e.type} of {e.f} without an invoke by process {e.process}",
            )
            return
        inv, complete = entry
        self.consumed += 1
        # The broker's services ran up to this completion too: a pull that returns here may show copies
        # delivered after its invoke (the model, like the broker, delivers at the due time).
        self.advance(e.time)
        if e.type == "info":
            self.infos += 1
            for x in self.created_by(inv.index):
                x.optional = True  # the operation may or may not have happened
            return
        self.done[inv.index] = (e.index, e.time)
        if e.f == "pull":
            self.on_pull(inv, e)
        elif complete is not None:
            complete(e)
        self.settle(inv.index)

    def created_by(self, source: int) -> list[_Exp]:
        return [x for xs in self.expect.values() for x in xs if x.source == source]

    def _response(self, e: Event) -> dict[str, Any]:
        return e.value

    def compare_code(self, e: Event, model_code: int, rule: str, what: str) -> bool:
        got = int(e.value.get("code", -1))
        if got != model_code:
            self.anomaly(
                "wrong-response",
                rule,
                e.index,
                f"{what}: expected {_code(model_code)}, got {_code(got)} ({e.value.get('remark')})",
            )
            return False
        return True

    # -- operations --
    def apply_send(self, inv: Event) -> Callable[[Event], None]:
        a = inv.value
        p = props({k: str(v) for k, v in a["properties"].items()})
        uniq = p.get(Prop.UNIQ_KEY, "")
        msg = Message(
            topic=a["topic"],
            body=str(a["body"]).encode(),
            properties=p,
            queue_id=int(a["queue"]),
            sys_flag=int(a.get("sys_flag", 0)),
            producer_group=str(a.get("group", "PG")),
            born_timestamp=inv.time,
            reconsume_times=a.get("reconsume_times"),
            max_reconsume_times=a.get("max_reconsume_times"),
        )
        # A queueId < 0 is the broker's random pick: the one its send result names (rule: put/queue-id-range).
        choice = self.queue_hints.get(inv.index, 0)
        record_queue = (a["topic"], int(a["queue"]) if int(a["queue"]) >= 0 else choice)
        offset_known = record_queue not in self.mixed_queues
        self.state, obs = self.model.send(self.state, msg, inv.time, queue_choice=choice)
        if isinstance(obs, SendOk):
            self.op_of_record[obs.record.commit_log_offset] = inv.index
            self.op_of_uniq[uniq] = inv.index
            if obs.record.topic == a["topic"]:
                self.add_exp(obs.record, "put/send-result", inv.index, inv.time, base=inv.index)
        if p.get(Prop.TRAN_MSG) == "true":
            self.half_uniqs.add(uniq)

        def complete(e: Event) -> None:
            if isinstance(obs, Rejected):
                self.compare_code(e, int(obs.code), obs.rule, "send")
            elif self.compare_code(e, int(obs.code), "put/send-result", "send"):
                self.send_result(obs, e, p, inv.index, offset_known)

        return complete

    def send_result(self, obs: SendOk, e: Event, p: Props, op: int, offset_known: bool) -> None:
        """The send response against the model's (rule: put/send-result). The queue offset is compared
        where the model knows it: not in a queue the broker's own services also write to, and, on a
        shared broker, not in a system topic that every producer writes to."""
        fields = e.value.get("fields", {})
        stored = obs.record.topic
        if stored == SCHEDULE_TOPIC and fields.get("queue_offset") is not None:
            self.sched_offset[op] = int(fields["queue_offset"])
        elif stored not in NOT_ALLOWED_SEND_TOPICS and fields.get("queue_offset") is not None:
            uniq = obs.record.uniq_key or ""
            self.sent_offset[op, uniq] = (int(fields.get("queue_id", -1)), int(fields["queue_offset"]))
        offset_known = offset_known and not (self.shared and stored in NOT_ALLOWED_SEND_TOPICS)
        if (offset_known and fields.get("queue_offset") != obs.queue_offset) or fields.get(
            "queue_id"
        ) != obs.queue_id:
            self.anomaly(
                "wrong-send-result",
                "put/send-result",
                e.index,
                f"send result queue {fields.get('queue_id')}/offset {fields.get('queue_offset')}, "
                f"expected {obs.queue_id}/{obs.queue_offset}",
            )
        self.bind(_offset(str(fields.get("msg_id", ""))), obs.record.commit_log_offset)
        if p.get(Prop.TRAN_MSG) == "true":
            self.half_table_obs_to_model[int(fields.get("queue_offset", -1))] = obs.record.queue_offset

    apply_send_half = apply_send

    def apply_send_batch(self, inv: Event) -> Callable[[Event], None]:
        a = inv.value
        entries = tuple(
            BatchEntry(str(m["body"]).encode(), props({k: str(v) for k, v in m["properties"].items()}))
            for m in a["messages"]
        )
        batch = Batch(
            topic=a["topic"],
            entries=entries,
            queue_id=int(a["queue"]),
            properties=props({k: str(v) for k, v in a.get("properties", {}).items()}),
            born_timestamp=inv.time,
        )
        offset_known = (a["topic"], int(a["queue"])) not in self.mixed_queues
        self.state, obs = self.model.send_batch(self.state, batch, inv.time)
        if isinstance(obs, BatchOk):
            for rec in obs.records:
                self.op_of_record[rec.commit_log_offset] = inv.index
                self.op_of_uniq[rec.uniq_key or ""] = inv.index
                self.add_exp(rec, "batch/consecutive-offsets", inv.index, inv.time, base=inv.index)

        def complete(e: Event) -> None:
            if isinstance(obs, Rejected):
                self.compare_code(e, int(obs.code), obs.rule, "send_batch")
                return
            if self.compare_code(e, int(obs.code), "batch/consecutive-offsets", "send_batch"):
                fields = e.value.get("fields", {})
                ids = str(fields.get("msg_id", "")).split(",")
                for rec, mid in zip(obs.records, ids, strict=False):
                    self.bind(_offset(mid), rec.commit_log_offset)
                if fields.get("queue_offset") is None:
                    return
                first = int(fields["queue_offset"])
                if offset_known and first != obs.records[0].queue_offset:
                    self.anomaly(
                        "wrong-send-result",
                        "batch/consecutive-offsets",
                        e.index,
                        f"batch result offset {first}, expected {obs.records[0].queue_offset}",
                    )
                # Each message of the batch is at the next offset (rule: batch/consecutive-offsets).
                queue = int(fields.get("queue_id", -1))
                for i, rec in enumerate(obs.records):
                    self.sent_offset[inv.index, rec.uniq_key or ""] = (queue, first + i)

        return complete

    def on_pull(self, inv: Event, e: Event) -> None:
        a = inv.value
        topic, queue, offset = a["topic"], int(a["queue"]), int(a.get("offset", 0))
        records = e.value.get("records", [])
        for i, r in enumerate(records):
            where = (r["topic"], int(r["queue_id"]), int(r["queue_offset"]))
            if where != (topic, queue, offset + i):
                self.anomaly(
                    "wrong-pull-result",
                    "pull/found",
                    e.index,
                    f"record {i} of a pull of {topic}:{queue} from {offset} is {where[0]}:{where[1]} "
                    f"offset {where[2]}, expected offset {offset + i}",
                )
            self.on_record(r, inv, e)
        code = int(e.value.get("code", -1))
        fields = e.value.get("fields", {})
        self.pull_codes(a, code, fields, len(records), e)
        max_offset = fields.get("max_offset")
        if max_offset is None and code == int(Code.TOPIC_NOT_EXIST):
            max_offset = 0
        # Lost only if every entry the queue held then has been read by some pull: a message stored
        # before this pull began is at an offset below the max it reports (rule: dispatch/in-order).
        if max_offset is not None and self.read_to(topic, queue) >= int(max_offset):
            self.missing_in(topic, queue, inv.time, e.index)

    def read_to(self, topic: str, queue: int) -> int:
        """n such that every offset below n of the queue has been read by some pull."""
        n = self.read_prefix.get((topic, queue), 0)
        while (topic, queue, n) in self.queue_seen:
            n += 1
        self.read_prefix[topic, queue] = n
        return n

    def pull_codes(self, a: dict[str, Any], code: int, fields: dict[str, Any], n: int, e: Event) -> None:
        """The pull status codes, judged on the response's own offsets. rule: pull/status-codes"""
        offset, max_offset = int(a.get("offset", 0)), fields.get("max_offset")
        if code == int(Code.SUCCESS):
            if n == 0 or fields.get("next_begin_offset") != offset + n:
                self.anomaly(
                    "wrong-pull-result",
                    "pull/found",
                    e.index,
                    f"FOUND with {n} records and nextBeginOffset {fields.get('next_begin_offset')} from {offset}",
                )
        elif (
            max_offset is not None
            and offset == max_offset
            and max_offset > 0
            and code != int(Code.PULL_NOT_FOUND)
        ):
            self.anomaly(
                "wrong-pull-status",
                "pull/status-codes",
                e.index,
                f"pull at the max offset {offset} answered {_code(code)}, not PULL_NOT_FOUND",
            )
        elif (
            max_offset is not None
            and int(fields.get("min_offset", 0)) <= offset < int(max_offset)
            and code not in (int(Code.PULL_NOT_FOUND), int(Code.PULL_RETRY_IMMEDIATELY))
        ):
            # An offset the response's own min and max put in range is FOUND, or an entry that could
            # not be read (OFFSET_FOUND_NULL, 19) or is being removed (20); it has not moved.
            self.anomaly(
                "wrong-pull-status",
                "pull/status-codes",
                e.index,
                f"pull at offset {offset} of a queue holding [{fields.get('min_offset', 0)}, {max_offset}) "
                f"answered {_code(code)}",
            )

    def on_record(self, r: dict[str, Any], inv: Event, e: Event) -> None:
        p = r.get("properties", {})
        uniq = p.get(Prop.UNIQ_KEY, "")
        topic = r["topic"]
        slot = (topic, int(r["queue_id"]), int(r["queue_offset"]))
        prev = self.queue_seen.get(slot)
        if prev is not None:
            if prev != uniq:
                self.anomaly(
                    "inconsistent-queue",
                    "dispatch/in-order",
                    e.index,
                    f"{topic}:{slot[1]} offset {slot[2]} held {prev} and now {uniq}",
                )
            return  # a re-read of the same entry
        self.queue_seen[slot] = uniq
        exps = self.expect.get((uniq, topic), [])
        # A required expectation first: an optional one (a possible redelivery, an operation whose
        # outcome is unknown) only when nothing else explains the record.
        exp = next((x for x in exps if x.matched_at is None and not x.optional), None) or next(
            (x for x in exps if x.matched_at is None), None
        )
        if exp is None:
            self.unexpected(r, uniq, topic, e)
            return
        exp.matched_at = int(r["store_timestamp"])
        self.bind(int(r["commit_log_offset"]), exp.model.commit_log_offset)
        store_ts = int(r["store_timestamp"])
        seen_at = e.time
        if store_ts < exp.earliest or seen_at < exp.earliest:
            self.anomaly(
                "early-delivery",
                exp.rule,
                e.index,
                f"{uniq} visible in {topic} at store time {store_ts}, "
                f"{exp.earliest - min(store_ts, seen_at)} ms before it may be",
            )
        else:
            self.judge_late(exp, store_ts, e.index)
        if exp.level is not None:
            self.fifo(exp, e)
        self.compare_record(r, exp, e)

    def precedes(self, a: _Exp, b: _Exp) -> bool:
        """Whether ``a``'s schedule entry is ahead of ``b``'s in their level's queue.

        The send results say so when both name their entry's offset; otherwise the operation that wrote
        ``a``'s entry completed before the one that wrote ``b``'s began. Entries written by operations
        that overlap in time, without offsets, are in either order.
        """
        if a.base is None or b.base is None:
            return not self.shared and a.order < b.order
        oa, ob = self.sched_offset.get(a.base), self.sched_offset.get(b.base)
        if oa is not None and ob is not None:
            return oa < ob
        done = self.done.get(a.base)
        return done is not None and done[0] < b.base

    def fifo(self, exp: _Exp, e: Event) -> None:
        """rule: schedule/fifo-per-level, between copies delivered with no restart in between."""
        assert exp.matched_at is not None
        for others in self.expect.values():
            for o in others:
                if o is exp or o.level != exp.level or o.matched_at is None or o.epoch != exp.epoch:
                    continue
                lo, hi = sorted((o.matched_at, exp.matched_at))
                if any(lo <= r <= hi for r, _ in self.restarts):
                    continue
                first, then = (o, exp) if o.matched_at < exp.matched_at else (exp, o)
                if first.matched_at != then.matched_at and self.precedes(then, first):
                    self.anomaly(
                        "fifo-violation",
                        "schedule/fifo-per-level",
                        e.index,
                        f"{first.uniq} delivered at {first.matched_at} before {then.uniq} at "
                        f"{then.matched_at}, whose schedule entry is ahead of it in level {exp.level}",
                    )

    def compare_record(self, r: dict[str, Any], exp: _Exp, e: Event) -> None:
        m = exp.model
        p = r.get("properties", {})
        queue = int(r["queue_id"])
        if m.topic.startswith(RETRY_PREFIX):
            # The retry queue is the broker's random pick among retryQueueNums (rule: sendback/retry-topic).
            if not 0 <= queue < self.model.config.retry_queue_nums:
                self.anomaly(
                    "wrong-queue",
                    "sendback/retry-topic",
                    e.index,
                    f"{exp.uniq} in retry queue {queue}; retryQueueNums is "
                    f"{self.model.config.retry_queue_nums}",
                )
        elif exp.queue_id is not None and queue != exp.queue_id:
            self.anomaly(
                "wrong-queue",
                exp.rule,
                e.index,
                f"{exp.uniq} in queue {r['queue_id']}, expected {exp.queue_id}",
            )
        reported = self.sent_offset.get((exp.source, exp.uniq))
        if reported is not None and reported != (queue, int(r["queue_offset"])):
            self.anomaly(
                "wrong-queue-offset",
                "put/queue-offset",
                e.index,
                f"{exp.uniq} read at {topic_q(r)}, but its send result said queue {reported[0]} "
                f"offset {reported[1]}",
            )
        if r.get("body") is not None and r["body"] != m.body.decode("utf-8", errors="replace"):
            self.anomaly(
                "wrong-body",
                exp.rule,
                e.index,
                f"{exp.uniq} in {m.topic}: the body differs from the one sent",
            )
        if r.get("flag") is not None and int(r["flag"]) != m.flag:
            self.anomaly("wrong-flag", exp.rule, e.index, f"{exp.uniq} flag {r['flag']}, expected {m.flag}")
        if int(r["reconsume_times"]) != m.reconsume_times:
            self.anomaly(
                "wrong-reconsume-times",
                "sendback/reconsume-times",
                e.index,
                f"{exp.uniq} reconsumeTimes {r['reconsume_times']}, expected {m.reconsume_times}",
            )
        if int(r["sys_flag"]) != m.sys_flag:
            self.anomaly(
                "wrong-sys-flag",
                "transaction/committed-message" if m.sys_flag & 8 else exp.rule,
                e.index,
                f"{exp.uniq} sysFlag {r['sys_flag']}, expected {m.sys_flag}",
            )
        if m.prepared_transaction_offset:
            want = self.model_to_obs.get(m.prepared_transaction_offset)
            if want is not None and int(r["prepared_transaction_offset"]) != want:
                self.anomaly(
                    "wrong-prepared-offset",
                    "transaction/committed-message",
                    e.index,
                    f"{exp.uniq} preparedTransactionOffset {r['prepared_transaction_offset']}, expected {want}",
                )
        for key, want_v, got_v in prop_diffs(m.properties, p):
            name, rule = "wrong-properties", _PROP_RULES.get(key, "put/stored-properties")
            if key == Prop.DELAY and m.topic.startswith(RETRY_PREFIX):
                name, rule = "wrong-retry-level", "sendback/delay-level"
            self.anomaly(
                name, rule, e.index, f"{exp.uniq} in {m.topic}: {key}={got_v!r}, expected {want_v!r}"
            )
        want_origin = m.properties.get(Prop.ORIGIN_MESSAGE_ID)
        if want_origin is not None:
            got_origin = p.get(Prop.ORIGIN_MESSAGE_ID)
            mapped = self.model_to_obs.get(_offset(want_origin)) if _is_offset_id(want_origin) else None
            ok = got_origin is not None and (
                (mapped is not None and _is_offset_id(got_origin) and _offset(got_origin) == mapped)
                or got_origin == want_origin
            )
            if not ok:
                self.anomaly(
                    "wrong-properties",
                    "sendback/origin-message-id",
                    e.index,
                    f"{exp.uniq}: ORIGIN_MESSAGE_ID={got_origin!r} does not name the first failed message",
                )

    def unexpected(self, r: dict[str, Any], uniq: str, topic: str, e: Event) -> None:
        matched = [
            x for xs in self.expect.values() for x in xs if x.uniq == uniq and x.matched_at is not None
        ]
        pending = [x for xs in self.expect.values() for x in xs if x.uniq == uniq and x.matched_at is None]
        if topic.startswith(DLQ_PREFIX) and any(x.topic.startswith(RETRY_PREFIX) for x in pending):
            self.anomaly(
                "wrong-dlq", "sendback/dlq-route", e.index, f"{uniq} dead-lettered; the model retries it"
            )
        elif topic.startswith(RETRY_PREFIX) and any(x.topic.startswith(DLQ_PREFIX) for x in pending):
            self.anomaly(
                "wrong-dlq", "sendback/dlq-route", e.index, f"{uniq} retried; the model dead-letters it"
            )
        elif uniq in self.half_uniqs and self.resolved.get(uniq) == "rollback":
            self.anomaly(
                "rollback-visible", "transaction/rollback", e.index, f"{uniq} visible after a rollback"
            )
        elif uniq in self.half_uniqs and uniq not in self.resolved and topic != TRANS_CHECK_MAX_TIME_TOPIC:
            self.anomaly(
                "visible-half-message",
                "transaction/half-message",
                e.index,
                f"{uniq} visible in {topic} before any commit",
            )
        elif topic == TRANS_CHECK_MAX_TIME_TOPIC:
            self.anomaly(
                "early-discard",
                "transaction/check-discard",
                e.index,
                f"{uniq} discarded before the model discards it",
            )
        elif matched and self.redelivery(matched, topic, int(r["store_timestamp"])):
            self.hazards.append(
                f"schedule/restart-redelivery: {uniq} delivered again to {topic} after a restart"
            )
        elif matched:
            self.anomaly("duplicate-delivery", matched[0].rule, e.index, f"{uniq} delivered again to {topic}")
        elif any(x.topic == topic for x in self.schedule_pending(uniq)):
            self.anomaly(
                "early-delivery", "schedule/due-time", e.index, f"{uniq} visible in {topic} before it is due"
            )
        else:
            self.anomaly(
                "unexpected-message", "put/send-result", e.index, f"{uniq} in {topic} was never sent there"
            )

    def redelivery(self, matched: list[_Exp], topic: str, store_ts: int) -> bool:
        """A scheduled copy delivered again after a restart, its first delivery at most one offset
        persist interval before the restart (rule: schedule/restart-redelivery)."""
        flush = self.model.flush_delay_offset_interval_ms
        return any(
            x.level is not None
            and x.topic == topic
            and x.matched_at is not None
            and start - flush - self.eps <= x.matched_at <= start < store_ts
            for x in matched
            for start, _ in self.restarts
        )

    def schedule_pending(self, uniq: str) -> list[_Exp]:
        """Delivery the model has not made yet: the scheduled copies of ``uniq`` still in the schedule queue."""
        out = []
        for rec in self.state.store.uniq.get(uniq, ()):
            r = self.state.store.lookup(rec)
            if r is not None and r.topic == SCHEDULE_TOPIC:
                real = r.properties.get(Prop.REAL_TOPIC, "")
                out.append(_Exp(uniq, real, None, 0, 0, r, "schedule/due-time", -1))
        return out

    def missing_in(self, topic: str, queue: int, t: int, index: int) -> None:
        for (_u, tp), exps in self.expect.items():
            if tp != topic:
                continue
            for x in exps:
                if x.matched_at is not None or x.optional or x.queue_id not in (None, queue):
                    continue
                latest = self.latest(x)
                if latest is not None and latest < t:
                    x.optional = True  # report once
                    name = "lost-message" if x.level is None else "late-delivery"
                    self.anomaly(
                        name,
                        x.rule,
                        index,
                        f"{x.uniq} not visible in {topic}:{queue} at {t}, due by {latest}",
                    )

    def apply_send_back(self, inv: Event) -> Callable[[Event], None]:
        a = inv.value
        model_clo = self.obs_to_model.get(int(a["offset"]), -1 - int(a["offset"]))
        req = SendBack(
            group=a["group"],
            offset=model_clo,
            delay_level=int(a.get("delay_level", 0)),
            max_reconsume_times=a.get("max_reconsume_times"),
            version=int(a.get("version", 401)),
        )
        self.state, obs = self.model.send_back(self.state, req, inv.time)
        if isinstance(obs, SendBackOk) and obs.record is not None:
            self.op_of_record[obs.record.commit_log_offset] = inv.index
            self.op_of_uniq[obs.record.uniq_key or ""] = inv.index
            if obs.record.topic != SCHEDULE_TOPIC:
                self.add_exp(obs.record, "sendback/dlq-route", inv.index, inv.time, base=inv.index)

        def complete(e: Event) -> None:
            rule = obs.rule if isinstance(obs, Rejected) else "sendback/dlq-route"
            self.compare_code(e, int(obs.code), rule, "send_back")

        return complete

    def apply_end_tx(self, inv: Event) -> Callable[[Event], None]:
        a = inv.value
        clo = self.obs_to_model.get(int(a["commit_log_offset"]), -1)
        table = self.half_table_obs_to_model.get(int(a["table_offset"]), int(a["table_offset"]))
        action = TxAction(int(a["action"]))
        req = EndTransaction(
            a["group"], table, clo, action, bool(a.get("from_check")), transaction_id=a.get("transaction_id")
        )
        self.state, obs = self.model.end_transaction(self.state, req, inv.time)
        uniq = str(a.get("transaction_id") or "")
        if isinstance(obs, EndTxOk):
            if uniq in self.resolved:
                self.hazards.append(
                    f"transaction/not-idempotent: {uniq} ended twice ({self.resolved[uniq]}, then "
                    f"{action.name.lower()}); 4.9.x applies both"
                )
            self.resolved[uniq] = "commit" if action == TxAction.COMMIT else "rollback"
            if obs.committed is not None:
                self.op_of_record[obs.committed.commit_log_offset] = inv.index
                self.add_exp(
                    obs.committed, "transaction/committed-message", inv.index, inv.time, base=inv.index
                )

        def complete(e: Event) -> None:
            if isinstance(obs, NoResponse):
                if not e.value.get("no_response"):
                    self.anomaly("wrong-response", obs.rule, e.index, "UNKNOW must get no response")
            elif isinstance(obs, Rejected):
                self.compare_code(e, int(obs.code), obs.rule, "end_tx")
            else:
                self.compare_code(e, int(obs.code), "transaction/committed-message", "end_tx")

        return complete

    def apply_heartbeat(self, inv: Event) -> None:
        self.state = self.model.heartbeat(self.state, inv.value["group"], bool(inv.value.get("online", True)))

    def apply_restart(self, inv: Event) -> Callable[[Event], None]:
        """rule: schedule/restart-redelivery. The model restarts as after a crash (delivery resumes from
        the last persisted offset); copies it delivers again are optional, since a broker that persisted
        its offsets at shutdown delivers nothing twice, and one whose persist fell at another time than
        the model's may deliver again anything delivered up to one persist interval before."""
        self.state = self.model.restart(self.state)
        down = [x for xs in self.expect.values() for x in xs if x.level is not None and x.matched_at is None]

        def complete(e: Event) -> None:
            self.restarts.append((inv.time, e.time))
            # Due while the broker was down: delivered once its schedule service runs again, the first
            # run FIRST_DELAY_TIME (1000 ms) after the start.
            for x in down:
                x.closes = max(x.closes, e.time + 1000 + self.eps)

        return complete

    # -- checks --
    def on_check(self, e: Event) -> None:
        msg = e.value["message"]
        uniq = msg["properties"].get(Prop.UNIQ_KEY, "")
        times = msg["properties"].get(Prop.TRANSACTION_CHECK_TIMES)
        for n, (t, req) in enumerate(self.expected_checks):
            if (
                req.transaction_id == uniq
                and req.message.properties.get(Prop.TRANSACTION_CHECK_TIMES) == times
            ):
                if e.time < t:
                    self.anomaly(
                        "early-check",
                        "transaction/check-interval",
                        e.index,
                        f"check of {uniq} {t - e.time} ms early",
                    )
                self.bind(int(e.value["commit_log_offset"]), req.commit_log_offset)
                self.half_table_obs_to_model[int(e.value["table_offset"])] = req.tran_state_table_offset
                del self.expected_checks[n]
                self.compare_check_message(msg, req.message, e)
                return
        if uniq in self.resolved:
            self.anomaly(
                "check-after-resolution",
                "transaction/check-resolved",
                e.index,
                f"{uniq} checked after it was {self.resolved[uniq]}ed",
            )
        elif any(r.transaction_id == uniq for _t, r in self.expected_checks):
            self.anomaly(
                "wrong-check-times",
                "transaction/check-times",
                e.index,
                f"check of {uniq} with TRANSACTION_CHECK_TIMES={times}",
            )
        else:
            self.anomaly(
                "early-check",
                "transaction/check-timeout",
                e.index,
                f"check of {uniq} (TRANSACTION_CHECK_TIMES={times}) the model does not send now",
            )

    def compare_check_message(self, got: dict[str, Any], want: Record, e: Event) -> None:
        """The message a check carries: the half message under its real topic and queue, body and
        properties as stored (rule: wire/check-request)."""
        p = got.get("properties", {})
        diffs = [
            f"{what} {g!r}, expected {w!r}"
            for what, g, w in (
                ("topic", got.get("topic"), want.topic),
                ("queue", got.get("queue_id"), want.queue_id),
                ("body", got.get("body"), want.body.decode("utf-8", errors="replace")),
            )
            if g is not None and g != w
        ]
        diffs += [f"{k}={g!r}, expected {w!r}" for k, w, g in prop_diffs(want.properties, p)]
        if diffs:
            self.anomaly(
                "wrong-check-message",
                "wire/check-request",
                e.index,
                f"check of {want.uniq_key}: {'; '.join(diffs)}",
            )

    def overdue_checks(self, t: int) -> None:
        keep = []
        for when, req in self.expected_checks:
            if when + self.eps < t:
                self.anomaly(
                    "missing-check",
                    "transaction/check-timeout",
                    -1,
                    f"no check of {req.transaction_id} (TRANSACTION_CHECK_TIMES="
                    f"{req.message.properties.get(Prop.TRANSACTION_CHECK_TIMES)}) by {when + self.eps}",
                )
            else:
                keep.append((when, req))
        self.expected_checks = keep

    def finish(self) -> Verdict:
        if self.pending:
            self.infos += len(self.pending)
        self.overdue_checks(self.last_time)
        if self.anomalies:
            return Verdict(
                "fail", tuple(self.anomalies), self.consumed, self.total, hazards=tuple(self.hazards)
            )
        if self.consumed != self.total:
            return Verdict(
                "unknown", (), self.consumed, self.total, "the checker did not consume the whole history"
            )
        if self.infos:
            return Verdict(
                "unknown",
                (),
                self.consumed,
                self.total,
                f"{self.infos} operation(s) with unknown outcome",
                tuple(self.hazards),
            )
        return Verdict("pass", (), self.consumed, self.total, hazards=tuple(self.hazards))


def infer_check_phase(events: Sequence[Event], interval_ms: int) -> int:
    """The check service's phase: the earliest arrival within a round, over every check in the history.

    A check request arrives a little after its round starts (the time to put the copy back and send);
    the round that shows the least delay is the best estimate of the phase. Arrivals are compared on a
    circle of ``interval_ms``, so a round straddling a multiple of the interval is not split.
    """
    times = [e.time for e in events if e.f == "check"]
    if not times:
        return 0
    base = times[0] % interval_ms
    earliest = min(((t - base + interval_ms // 2) % interval_ms) - interval_ms // 2 for t in times)
    return (base + earliest) % interval_ms


def infer_check_rounds(
    events: Sequence[Event], interval_ms: int, timeout_ms: int = 0, latency_ms: int = 0
) -> tuple[int, ...]:
    """When each check round ran, from the check requests the history shows.

    A round's requests arrive together, the first one ``A`` at most ``latency_ms`` after the round began
    (a real broker's rounds also drift: each waits the interval after the last one ended). The round
    began no later than ``A``, no earlier than ``A - latency_ms``, and late enough that every message it
    checked for the first time was old enough (sent at least ``timeout_ms`` before): the earliest time
    consistent with all of that (the model checks a message older than the timeout, strictly) is the
    round's time in the model.
    """
    sent: dict[str, int] = {}
    for e in events:
        if e.type == "invoke" and e.f == "send_half":
            props = e.value.get("properties") or {}
            if "CHECK_IMMUNITY_TIME_IN_SECONDS" not in props:
                sent.setdefault(str(props.get("UNIQ_KEY", "")), e.time)
    rounds: list[int] = []
    for group in _check_rounds(events, interval_ms):
        first_at = group[0].time
        at = first_at - latency_ms
        for e in group:
            props = (e.value.get("message") or {}).get("properties") or {}
            if props.get("TRANSACTION_CHECK_TIMES") == "1" and str(props.get("UNIQ_KEY")) in sent:
                at = min(first_at, max(at, sent[str(props.get("UNIQ_KEY"))] + timeout_ms + 1))
        rounds.append(at)
    return tuple(rounds)


def _check_rounds(events: Sequence[Event], interval_ms: int) -> list[list[Event]]:
    """The check requests grouped by round, in arrival order: a round's requests arrive together, and a
    request more than half an interval after its round's first one opens the next round."""
    groups: list[list[Event]] = []
    for e in sorted((e for e in events if e.f == "check"), key=lambda e: (e.time, e.index)):
        if not groups or e.time - groups[-1][0].time > interval_ms // 2:
            groups.append([])
        groups[-1].append(e)
    return groups


def check_round_spacing(events: Sequence[Event], interval_ms: int, latency_ms: int) -> list[Anomaly]:
    """Check rounds at least an interval apart (rule: transaction/check-interval).

    Each round waits the interval after the previous one ended, so the first requests of two rounds
    arrive at least ``interval_ms - latency_ms`` apart, ``latency_ms`` bounding how late a round's first
    request may arrive after the round began.
    """
    firsts = [group[0] for group in _check_rounds(events, interval_ms)]
    return [
        Anomaly(
            "early-check",
            "transaction/check-interval",
            b.index,
            f"a check round {b.time - a.time} ms after the previous one; the interval is {interval_ms} ms",
        )
        for a, b in itertools.pairwise(firsts)
        if b.time - a.time < interval_ms - latency_ms
    ]


def queue_hints(events: Sequence[Event]) -> dict[int, int]:
    """For each send with a queue id below 0, the queue its response names: the broker's random pick
    (rule: put/queue-id-range). The model makes the same pick, and judges its range."""
    invoked: dict[int, Event] = {}
    hints: dict[int, int] = {}
    for e in events:
        if e.f not in ("send", "send_half"):
            continue
        if e.type == "invoke":
            invoked[e.process] = e
            continue
        inv = invoked.pop(e.process, None)
        queue_id = (e.value.get("fields") or {}).get("queue_id")
        if inv is not None and int(inv.value.get("queue", 0)) < 0 and queue_id is not None:
            hints[inv.index] = int(queue_id)
    return hints


def check_history(
    events: Sequence[Event],
    config: BrokerConfig,
    *,
    epsilon_ms: int = DEFAULT_EPSILON_MS,
    check_phase_ms: int | None = None,
    expected_total: int | None = None,
    shared: bool = False,
) -> Verdict:
    """Check a complete history. ``check_phase_ms`` None: inferred from the first check in the history."""
    rounds: tuple[int, ...] = ()
    spacing: list[Anomaly] = []
    if check_phase_ms is None:
        check_phase_ms = infer_check_phase(events, config.transaction_check_interval_ms)
        # Half the epsilon for the arrival latency, so that a check expected at a round's time still has
        # the other half to arrive: checks of one round arrive over some milliseconds.
        rounds = infer_check_rounds(
            events, config.transaction_check_interval_ms, config.transaction_timeout_ms, epsilon_ms // 2
        )
        spacing = check_round_spacing(events, config.transaction_check_interval_ms, epsilon_ms // 2)
    checker = Checker(
        config,
        epsilon_ms=epsilon_ms,
        check_phase_ms=check_phase_ms,
        shared=shared,
        check_rounds=rounds,
        queue_hints=queue_hints(events),
    )
    checker.anomalies.extend(spacing)
    for ev in sorted(events, key=lambda x: (x.time, x.index)):
        checker.feed(ev)
    verdict = checker.finish()
    if expected_total is not None and verdict.total != expected_total and verdict.valid == "pass":
        return attrs.evolve(
            verdict, valid="unknown", reason=f"history has {verdict.total} events, {expected_total} expected"
        )
    return verdict


def prop_diffs(want: Props, got: dict[str, str]) -> list[tuple[str, str | None, str | None]]:
    """(key, expected, got) for every compared property that differs, is missing or is extra."""
    return [
        (k, want.get(k), got.get(k))
        for k in sorted((set(want) | set(got)) - _UNCOMPARED_PROPS)
        if want.get(k) != got.get(k)
    ]


def topic_q(r: dict[str, Any]) -> str:
    return f"{r['topic']}:{r['queue_id']} offset {r['queue_offset']}"


def _offset(msg_id: str) -> int:
    try:
        return int(msg_id.split(",")[0][-16:], 16)
    except ValueError:
        return -1


def _is_offset_id(s: str) -> bool:
    return len(s) == 32 and all(c in "0123456789ABCDEF" for c in s)


def _code(c: int) -> str:
    try:
        return Code(c).name
    except ValueError:
        return str(c)

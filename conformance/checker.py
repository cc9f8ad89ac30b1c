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

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rmqspec.reference.batch import Batch, BatchEntry
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import (
    DLQ_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_PREFIX,
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
    latest: int
    model: Record
    rule: str
    source: int
    level: int | None = None
    order: int = 0  # position in its schedule queue (FIFO checks)
    matched_at: int | None = None
    optional: bool = False


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
        self.width: dict[str, int] = {}  # uniq -> invoke..ok width of its send

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
                self.add_exp(
                    ev.copy,
                    "schedule/due-time",
                    -1,
                    ev.copy.store_timestamp,
                    ev.level,
                    ev.source.queue_offset,
                )
            elif isinstance(ev, CheckRequest):
                if ev.sent:
                    self.expected_checks.append((ev.at, ev))
            elif isinstance(ev, Discarded):
                self.add_exp(ev.copy, "transaction/check-discard", -1, ev.copy.store_timestamp)
        self.overdue_checks(t)

    def add_exp(
        self, rec: Record, rule: str, source: int, earliest: int, level: int | None = None, order: int = 0
    ) -> None:
        uniq = rec.uniq_key or ""
        slack = self.width.get(uniq, 0)
        exp = _Exp(
            uniq,
            rec.topic,
            rec.queue_id,
            earliest,
            earliest + slack + self.eps,
            rec,
            rule,
            source,
            level,
            order,
        )
        self.expect.setdefault((uniq, rec.topic), []).append(exp)

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
        if e.f == "pull":
            self.on_pull(inv, e)
        elif complete is not None:
            complete(e)

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
        self.state, obs = self.model.send(self.state, msg, inv.time, queue_choice=max(0, int(a["queue"])))
        if isinstance(obs, SendOk) and obs.record.topic == a["topic"]:
            self.add_exp(obs.record, "put/send-result", inv.index, inv.time)
        if p.get(Prop.TRAN_MSG) == "true":
            self.half_uniqs.add(uniq)

        def complete(e: Event) -> None:
            width = max(0, e.time - inv.time)
            self.width[uniq] = width
            for x in self.created_by(inv.index):
                x.latest += width
            if isinstance(obs, Rejected):
                self.compare_code(e, int(obs.code), obs.rule, "send")
            elif self.compare_code(e, int(obs.code), "put/send-result", "send"):
                self.send_result(obs, e, p)

        return complete

    def send_result(self, obs: SendOk, e: Event, p: Props) -> None:
        fields = e.value.get("fields", {})
        offset_known = not (self.shared and obs.record.topic in NOT_ALLOWED_SEND_TOPICS)
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
        self.state, obs = self.model.send_batch(self.state, batch, inv.time)
        if isinstance(obs, BatchOk):
            for rec in obs.records:
                self.add_exp(rec, "batch/consecutive-offsets", inv.index, inv.time)

        def complete(e: Event) -> None:
            if isinstance(obs, Rejected):
                self.compare_code(e, int(obs.code), obs.rule, "send_batch")
                return
            if self.compare_code(e, int(obs.code), "batch/consecutive-offsets", "send_batch"):
                ids = str(e.value.get("fields", {}).get("msg_id", "")).split(",")
                for rec, mid in zip(obs.records, ids, strict=False):
                    self.bind(_offset(mid), rec.commit_log_offset)

        return complete

    def on_pull(self, inv: Event, e: Event) -> None:
        a = inv.value
        records = e.value.get("records", [])
        for r in records:
            self.on_record(r, inv, e)
        code = int(e.value.get("code", -1))
        fields = e.value.get("fields", {})
        self.pull_codes(a, code, fields, len(records), e)
        at_end = code != int(Code.SUCCESS) or fields.get("next_begin_offset") == fields.get("max_offset")
        if at_end:
            self.missing_in(a["topic"], int(a["queue"]), inv.time, e.index)

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
        exp = next((x for x in exps if x.matched_at is None), None)
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
        elif store_ts > exp.latest:
            self.anomaly(
                "late-delivery",
                exp.rule,
                e.index,
                f"{uniq} stored in {topic} {store_ts - exp.latest} ms after its window closed "
                f"(window [{exp.earliest}, {exp.latest}])",
            )
        if exp.level is not None:
            self.fifo(exp, e)
        self.compare_record(r, exp, e)

    def fifo(self, exp: _Exp, e: Event) -> None:
        for others in self.expect.values():
            for o in others:
                if o is exp or o.level != exp.level or o.matched_at is None or exp.matched_at is None:
                    continue
                if o.order > exp.order and o.matched_at < exp.matched_at:
                    self.anomaly(
                        "fifo-violation",
                        "schedule/fifo-per-level",
                        e.index,
                        f"{o.uniq} (schedule position {o.order}) delivered before {exp.uniq} "
                        f"(position {exp.order}) of level {exp.level}",
                    )

    def compare_record(self, r: dict[str, Any], exp: _Exp, e: Event) -> None:
        m = exp.model
        p = r.get("properties", {})
        if (
            exp.queue_id is not None
            and int(r["queue_id"]) != exp.queue_id
            and not m.topic.startswith(RETRY_PREFIX)
        ):
            self.anomaly(
                "wrong-queue",
                exp.rule,
                e.index,
                f"{exp.uniq} in queue {r['queue_id']}, expected {exp.queue_id}",
            )
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
        for key, rule in _PROP_RULES.items():
            want_v, got_v = m.properties.get(key), p.get(key)
            if want_v != got_v:
                name = "wrong-properties"
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

    def schedule_pending(self, uniq: str) -> list[_Exp]:
        """Delivery the model has not made yet: the scheduled copies of ``uniq`` still in the schedule queue."""
        out = []
        for rec in self.state.store.uniq.get(uniq, ()):
            r = self.state.store.lookup(rec)
            if r is not None and r.topic == "SCHEDULE_TOPIC_XXXX":
                real = r.properties.get(Prop.REAL_TOPIC, "")
                out.append(_Exp(uniq, real, None, 0, 0, r, "schedule/due-time", -1))
        return out

    def missing_in(self, topic: str, queue: int, t: int, index: int) -> None:
        for (_u, tp), exps in self.expect.items():
            if tp != topic:
                continue
            for x in exps:
                if x.matched_at is None and not x.optional and x.latest < t and x.queue_id in (None, queue):
                    x.optional = True  # report once
                    name = "lost-message" if x.level is None else "late-delivery"
                    self.anomaly(
                        name,
                        x.rule,
                        index,
                        f"{x.uniq} not visible in {topic}:{queue} at {t}, due by {x.latest}",
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
        if (
            isinstance(obs, SendBackOk)
            and obs.record is not None
            and not obs.record.topic.startswith("SCHEDULE")
        ):
            self.add_exp(obs.record, "sendback/dlq-route", inv.index, inv.time)

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
                self.add_exp(obs.committed, "transaction/committed-message", inv.index, inv.time)

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

    def apply_restart(self, inv: Event) -> None:
        self.state = self.model.restart(self.state)
        for exps in self.expect.values():
            for x in exps:
                if x.level is not None and x.matched_at is None:
                    x.optional = True
        # Redelivery after a restart is allowed: further copies may appear (rule: schedule/restart-redelivery)

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
    checks = [
        (e.time, e) for e in sorted((e for e in events if e.f == "check"), key=lambda e: (e.time, e.index))
    ]
    rounds: list[int] = []
    first_at = 0
    for t, e in checks:
        if not rounds or t - first_at > interval_ms // 2:
            first_at = t
            rounds.append(t - latency_ms)
        props = (e.value.get("message") or {}).get("properties") or {}
        if props.get("TRANSACTION_CHECK_TIMES") == "1" and str(props.get("UNIQ_KEY")) in sent:
            rounds[-1] = min(first_at, max(rounds[-1], sent[str(props.get("UNIQ_KEY"))] + timeout_ms + 1))
    return tuple(rounds)


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
    if check_phase_ms is None:
        check_phase_ms = infer_check_phase(events, config.transaction_check_interval_ms)
        # Half the epsilon for the arrival latency, so that a check expected at a round's time still has
        # the other half to arrive: checks of one round arrive over some milliseconds.
        rounds = infer_check_rounds(
            events, config.transaction_check_interval_ms, config.transaction_timeout_ms, epsilon_ms // 2
        )
    checker = Checker(
        config, epsilon_ms=epsilon_ms, check_phase_ms=check_phase_ms, shared=shared, check_rounds=rounds
    )
    for ev in sorted(events, key=lambda x: (x.time, x.index)):
        checker.feed(ev)
    verdict = checker.finish()
    if expected_total is not None and verdict.total != expected_total and verdict.valid == "pass":
        return attrs.evolve(
            verdict, valid="unknown", reason=f"history has {verdict.total} events, {expected_total} expected"
        )
    return verdict


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

"""Running a scenario on a target: the step interpreter, its expectations, and its verdict.

A step runs at its ``at`` (an ``=EXPR`` of the target's settings, see :mod:`.scenario_expr`), then its
operation, then its ``expect`` is matched. On a wall clock (a real broker) three things differ from a
logical clock, and each is judged by what the spec allows, not by a wider tolerance:

* a read of what dispatch builds (pull, max offset, query) may lag the put by up to epsilon (RocketMQ's
  reput service is asynchronous), so a read whose expectation does not hold yet is repeated until epsilon
  has passed; a pull without ``expect`` waits, within epsilon, for the messages the reference model has
  in that queue at that moment under the same settings (the *plan*, from a dry run on the model);
* ``until: EXPR`` makes a ``pull`` or ``checks`` step wait for its expectation up to that time (ms since
  start), and epsilon more: for things whose moment depends on the broker (the phase of the transaction
  check service); a check that arrived within epsilon of a ``checks`` step's moment, more than it
  expects, is left to the next ``checks`` step;
* the scenario's operations are recorded as a history and judged by the history checker, which places
  check rounds where the broker actually ran them: check times are judged two-sided there, and any
  anomaly the scenario's own ``expect`` did not ask about still fails it.

No exception escapes :func:`run_scenario`: a target that cannot be reached is ``unknown``; a response a
client cannot read (a send answer without ``msgId``) fails the rule of the wire format it breaks; a
scenario that cannot run as written is reported as such.
"""

from __future__ import annotations

import hashlib
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from rmqspec.reference.batch import Batch, BatchEntry, client_check
from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import (
    SYSTEM_TOPICS,
    TRANS_CHECK_MAX_TIME_TOPIC,
    Code,
    Prop,
    TxAction,
)
from rmqspec.reference.model import (
    ConsumerSendBack,
    EndTx,
    GetMaxOffset,
    Heartbeat,
    Op,
    Pull,
    QueryUniqKey,
    Send,
    SendBatch,
    ViewMessage,
)
from rmqspec.reference.put import Message
from rmqspec.reference.records import Record, props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

from .contract import CheckEvent, Clock, Feature, ProtocolFailure, Response, Target, TargetError
from .history import Event, RecordingTarget
from .scenario_expr import Env, ExprError, Needs, need, resolve
from .scenarios import OPS, Scenario, ScenarioError, broker_config

# Codes that say "nothing of this scenario's is there" when a pull of a shared broker's system topic
# is judged on this scenario's own messages only.
_EMPTY_CODES = frozenset({Code.TOPIC_NOT_EXIST, Code.PULL_NOT_FOUND, Code.PULL_OFFSET_MOVED})
_DISPATCHED_READS = frozenset({"pull", "max_offset", "query"})
# Steps whose broker-side moment starts a clock the spec times from (a store time a delay or a timeout
# counts from). On a wall clock that moment is known only to lie between the step's invoke and its answer.
_TIMED_WRITES = frozenset({"send", "send_half", "send_batch", "send_back", "end_tx", "batch_client"})
# Send answers that mean "stored" (facts §8: the client maps 10, 11 and 12 to send statuses, not errors).
_STORED_CODES = frozenset(
    {Code.SUCCESS, Code.FLUSH_DISK_TIMEOUT, Code.SLAVE_NOT_AVAILABLE, Code.FLUSH_SLAVE_TIMEOUT}
)
LOGICAL_POLL_MS = 100  # how often a waiting step looks again on a logical clock (RocketMQ polls per 100 ms)
WALL_POLL_MS = 20

# The remark of a pull of a shared broker's system topic that found none of the scenario's records
# (Runner.scan_system): made here, not by the broker.
SCANNED_REMARK = "no record of this scenario's messages"


@attrs.frozen
class StepFailure:
    step: int
    operation: str
    message: str
    rule: str | None = None  # the rule the failure shows when it is not the scenario's own (wire/...)
    frame: str | None = None  # the offending answer, as received
    event: int | None = None  # the index of the history event where it showed (None: before any)
    # The general rule this failure is an instance of, whatever the scenario is about (a check that never
    # came: transaction/check-timeout; a send answer naming another offset: put/send-result). A run whose
    # scenarios of several rules first fail this way names that rule as their root cause (suite.Report).
    symptom: str | None = None


def step_symptom(op: str, problem: str) -> str | None:
    """The general rule a step's failed expectation is an instance of (``StepFailure.symptom``)."""
    if op in ("send", "send_half", "send_batch") and problem.startswith(("queue_offset:", "queue_id:")):
        return "put/send-result"
    if op == "pull" and problem.startswith("code:") and ", got SYSTEM_ERROR" in problem:
        # No pull of a scenario answers SYSTEM_ERROR on a correct broker: whatever the scenario is about,
        # the broker broke what a pull answers (shared with other rules' first failures, it is named so).
        return "pull/status-codes"
    return None


@attrs.frozen
class ScenarioResult:
    scenario: Scenario
    outcome: str  # "pass", "fail", "skip", "unknown"
    reason: str = ""
    failures: tuple[StepFailure, ...] = ()
    history: tuple[Event, ...] = ()
    checked: int = 0  # expectations compared (a pass that compared nothing is not a pass)
    seconds: float = 0.0  # how long it ran
    # The step (1-based) the scenario stopped at before its end (an answer it could not go on from, a
    # step that needed what the target did not produce, no answer): the steps after it never ran, so the
    # scenario's rules that no failure names were not reached, not passed. None: it ran to its end.
    stopped_at: int | None = None

    @property
    def rules(self) -> tuple[str, ...]:
        return self.scenario.rules

    @property
    def rule_outcomes(self) -> dict[str, str]:
        """Each rule of the scenario (and each rule a failure names) judged: "fail" where a failure names
        it; for the others, "pass" only where the steps that check them ran and held (the scenario ran to
        its end), "not reached" where it stopped earlier; a skipped or unknown scenario's rules keep its
        outcome."""
        if self.outcome in ("skip", "unknown") and not self.failures:
            return {rule: self.outcome for rule in self.rules}
        failed = self.failed_rules
        rest = "not reached" if self.stopped_at is not None or self.outcome == "unknown" else "pass"
        return {rule: "fail" if rule in failed else rest for rule in dict.fromkeys((*self.rules, *failed))}

    @property
    def failed_rules(self) -> tuple[str, ...]:
        """The rules the failures name: their own where given, else the scenario's."""
        out: list[str] = []
        for f in self.failures:
            out.extend([f.rule] if f.rule else self.scenario.rules)
        return tuple(dict.fromkeys(out))


@attrs.frozen
class Plan:
    """What the reference model does with a scenario under one configuration (a dry run)."""

    pulls: Mapping[int, frozenset[str]]  # step index -> names of the messages the model's pull returns
    span_ms: int  # when the scenario ends on the model (ms since start)
    failure: str | None = None  # the scenario fails on the reference itself under this configuration
    needs: Needs | None = None  # the configuration lacks something the scenario needs


class _WireFault(Exception):
    """An answer a client cannot use, as a failure of the named wire rule."""

    def __init__(self, rule: str, message: str, frame: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.frame = frame


@attrs.define
class _Sent:
    uniq: str
    group: str
    response: Response
    kind: str


def _uniq(seed: str, n: int) -> str:
    return hashlib.sha256(f"{seed}/{n}".encode()).hexdigest()[:32].upper()


def _offset_of(msg_id: object, what: str) -> int:
    """The commit-log offset in an offset message id (its last 16 hex digits; facts §8)."""
    text = str(msg_id).split(",")[0] if msg_id is not None else ""
    tail = text[-16:]
    if len(text) not in (32, 56) or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise _WireFault(
            "wire/offset-msg-id",
            f"{what}: msgId {msg_id!r} is not an offset message id (32 or 56 hex digits: host, port, "
            "commit-log offset)",
            repr(msg_id),
        )
    return int(tail, 16)


def _code_name(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return str(code)


class _Runner:
    def __init__(
        self,
        scenario: Scenario,
        target: Target,
        epsilon_ms: int,
        salt: str,
        plan: Plan | None,
        exact_check_times: bool = True,
    ) -> None:
        self.s = scenario
        self.rec = RecordingTarget(target)
        self.t: Target = self.rec
        self.config = target.info.config
        self.initial_config = self.config  # the history checker applies a restart's new settings itself
        self.eps = epsilon_ms
        self.salt = salt
        self.plan = plan
        self.t0 = target.now()
        self.sent: dict[str, _Sent] = {}
        self.committed: set[str] = set()  # the messages an end_tx step committed (answered SUCCESS)
        self.sent_at: dict[str, int] = {}
        self.checks_at: dict[str, list[int]] = {}
        self.pulled: dict[str, list[Record]] = {}
        self.checks: list[CheckEvent] = []  # received since the last `checks` step
        self.all_checks: list[CheckEvent] = []
        self.failures: list[StepFailure] = []
        self.counter = 0
        self.checked = 0
        self.wall = target.info.clock is Clock.WALL
        self.shared = not target.info.isolated
        self.system_queue = False  # the current step's offsets are those of a system topic's queue
        self.step_at: int | None = None  # the current step's ``at`` (ms since start), if it has one
        # On a wall clock: the longest a timed write took so far (answer minus invoke, ms). ``at(NAME)`` and
        # a step's ``at`` are invoke times; the broker stored what a deadline counts from at most this much
        # later, so every wall-clock deadline ends this much later (never earlier: lower bounds stay).
        self.lag = 0
        # A check item's ``at`` assumes the check service's phase of the logical clock (rounds at multiples
        # of the interval): compared only there. A wall clock (or a model run at another phase) has its
        # rounds judged by the history checker instead.
        self.exact_check_times = not self.wall and exact_check_times
        self.pull_names: dict[int, frozenset[str]] = {}  # step index -> names of the messages pulled

    # -- helpers --
    def env(self) -> Env:
        return Env(
            self.config,
            self.sent_at,
            {k: tuple(v) for k, v in self.checks_at.items()},
            self.t.now() - self.t0,
            self.t0,
        )

    def fail(
        self,
        i: int,
        op: str,
        msg: str,
        rule: str | None = None,
        frame: str | None = None,
        symptom: str | None = None,
    ) -> None:
        event = len(self.rec.events) - 1 if self.rec.events else None
        self.failures.append(StepFailure(i + 1, op, msg, rule, frame, event, symptom))

    def ref(self, name: str, i: int) -> _Sent:
        if name not in self.sent:
            raise ScenarioError(f"{self.s.id} step {i + 1}: unknown ref {name!r}")
        return self.sent[name]

    def take_checks(self, got: Iterable[CheckEvent]) -> None:
        for c in got:
            self.checks.append(c)
            name = self.uniq_to_name(c.message.uniq_key)
            self.checks_at.setdefault(name, []).append(c.time - self.t0)

    def advance(self, t: int) -> None:
        self.take_checks(self.t.advance_to(t))

    def placeholder(self, value: Any, i: int) -> Any:
        if isinstance(value, str) and value.startswith("$"):
            kind, _, name = value[1:].partition(":")
            sent = self.ref(name, i)
            if kind == "msgid":
                return str(sent.response.fields.get("msg_id", ""))
            if kind == "pulled":
                seen = self.pulled.get(sent.uniq)
                if not seen:
                    raise ScenarioError(f"{self.s.id} step {i + 1}: {name!r} was never pulled")
                return seen[0].msg_id
            if kind == "uniq":
                return sent.uniq
            if kind == "queue_offset":  # the queue offset its send answered (a half's, in the half queue)
                return str(sent.response.fields.get("queue_offset", ""))
            raise ScenarioError(f"{self.s.id} step {i + 1}: unknown placeholder {value!r}")
        return value

    def new_uniq(self) -> str:
        self.counter += 1
        return _uniq(self.salt + self.s.id, self.counter)

    def commit_log_offset(self, sent: _Sent, i: int) -> int:
        if sent.response.code not in _STORED_CODES:
            raise ScenarioError(
                f"{self.s.id} step {i + 1}: the send of this message was answered "
                f"{_code_name(sent.response.code)} ({sent.response.remark}), so it has no msgId to use"
            )
        return _offset_of(
            sent.response.fields.get("msg_id"), f"step {i + 1}: the send response of this message"
        )

    # -- operations --
    def build(self, op: str, a: Mapping[str, Any], i: int) -> Op:
        now = self.t.now()
        if op in ("send", "send_half"):
            p = {k: str(self.placeholder(v, i)) for k, v in (a.get("props") or {}).items()}
            if "tags" in a:
                p[Prop.TAGS] = str(a["tags"])
            if "keys" in a:
                p[Prop.KEYS] = str(a["keys"])
            p.setdefault(Prop.UNIQ_KEY, self.new_uniq())
            p.setdefault(Prop.WAIT, "true")
            group = str(a.get("group", "PG"))
            sys_flag = int(a.get("sys_flag", 0))
            if op == "send_half":
                p[Prop.TRAN_MSG] = "true"
                p[Prop.PGROUP] = group
                sys_flag |= 4
            body = str(a.get("body", "")).encode()
            if "body_size" in a:
                body = (body or b"x") * (int(a["body_size"]) // max(1, len(body or b"x")) + 1)
                body = body[: int(a["body_size"])]
            born = now + int(a["born"]) - (now - self.t0) if "born" in a else None
            return Send(
                Message(
                    topic=str(a["topic"]),
                    body=body,
                    properties=props(p),
                    queue_id=int(a.get("queue", 0)),
                    sys_flag=sys_flag,
                    flag=int(a.get("flag", 0)),
                    born_timestamp=born,
                    producer_group=group,
                    reconsume_times=a.get("reconsume_times"),
                    max_reconsume_times=a.get("max_reconsume_times"),
                    version=int(a.get("version", 401)),
                )
            )
        if op == "send_batch":
            entries = []
            for m in a.get("messages", []):
                p = {k: str(v) for k, v in (m.get("props") or {}).items()}
                p.setdefault(Prop.UNIQ_KEY, self.new_uniq())
                p.setdefault(Prop.WAIT, "true")
                entries.append(BatchEntry(str(m.get("body", "")).encode(), props(p)))
            wrapper = {k: str(v) for k, v in (a.get("props") or {}).items()}
            return SendBatch(
                Batch(
                    topic=str(a["topic"]),
                    entries=tuple(entries),
                    queue_id=int(a.get("queue", 0)),
                    sys_flag=int(a.get("sys_flag", 0)),
                    properties=props(wrapper),
                )
            )
        if op == "pull":
            return Pull(
                str(a["topic"]),
                int(a.get("queue", 0)),
                int(a.get("offset", 0)),
                int(a.get("max", 32)),
                str(a.get("group", "CG")),
            )
        if op == "send_back":
            origin: str | None = None
            if "offset" in a:
                offset = int(a["offset"])
            else:
                sent = self.ref(str(a["ref"]), i)
                seen = self.pulled.get(sent.uniq)
                if not seen:
                    raise ScenarioError(
                        f"{self.s.id} step {i + 1}: send_back of {a['ref']!r} before any pull of it"
                    )
                offset = seen[-1].commit_log_offset
                origin = origin_topic(seen[-1])
            if "origin_topic" in a:  # null: the request carries none
                origin = None if a["origin_topic"] is None else str(a["origin_topic"])
            return ConsumerSendBack(
                SendBack(
                    group=str(a.get("group", "CG")),
                    offset=offset,
                    delay_level=int(a.get("delay_level", 0)),
                    max_reconsume_times=a.get("max_reconsume_times"),
                    origin_topic=origin,
                    version=int(a.get("version", 401)),
                )
            )
        if op == "end_tx":
            sent = self.ref(str(a["ref"]), i)
            action = TxAction[str(a.get("action", "commit")).upper()]
            from_check = bool(a.get("from_check", False))
            if a.get("via_check"):
                mine = [c for c in self.all_checks + self.checks if c.message.uniq_key == sent.uniq]
                if not mine:
                    raise ScenarioError(
                        f"{self.s.id} step {i + 1}: no check request received for {a['ref']!r}"
                    )
                table, log_offset, from_check = (
                    mine[-1].tran_state_table_offset,
                    mine[-1].commit_log_offset,
                    True,
                )
            else:
                table = int(a["table_offset"]) if "table_offset" in a else self.queue_offset_of(sent, i)
                log_offset = (
                    int(a["commit_log_offset"])
                    if "commit_log_offset" in a
                    else self.commit_log_offset(sent, i)
                )
            table = int(a.get("table_offset", table)) + int(a.get("table_offset_delta", 0))
            log_offset = int(a.get("commit_log_offset", log_offset)) + int(
                a.get("commit_log_offset_delta", 0)
            )
            return EndTx(
                EndTransaction(
                    producer_group=str(a.get("group", sent.group)),
                    tran_state_table_offset=table,
                    commit_log_offset=log_offset,
                    action=action,
                    from_check=from_check,
                    msg_id=sent.uniq,  # the Java send result's msgId (the half's UNIQ_KEY)
                    transaction_id=sent.uniq,
                )
            )
        if op in ("heartbeat", "offline"):
            return Heartbeat(str(a.get("group", "PG")), op == "heartbeat", bool(a.get("consumer", False)))
        if op == "max_offset":
            return GetMaxOffset(str(a["topic"]), int(a.get("queue", 0)))
        if op == "view":
            if "offset" in a:
                return ViewMessage(int(a["offset"]))
            return ViewMessage(self.commit_log_offset(self.ref(str(a["ref"]), i), i))
        if op == "query":
            return QueryUniqKey(str(a["topic"]), self.ref(str(a["ref"]), i).uniq)
        raise ScenarioError(f"{self.s.id} step {i + 1}: unknown operation {op!r}")

    def queue_offset_of(self, sent: _Sent, i: int) -> int:
        value = sent.response.fields.get("queue_offset")
        if isinstance(value, bool) or not isinstance(value, int):
            raise _WireFault(
                "wire/send-headers",
                f"step {i + 1}: the send response of this message has no whole-number queueOffset "
                f"(got {value!r})",
                repr(dict(sent.response.fields)),
            )
        return value

    # -- the interpreter --
    def check_needs(self) -> None:
        """Raise Needs when the target's settings do not meet one of the scenario's ``needs``."""
        for text in self.s.needs:
            need(text, self.env())

    def run(self) -> ScenarioResult:
        try:
            self.check_needs()
        except Needs as e:
            return self.result("skip", f"{e.what}: {e.fix}")
        try:
            for i, raw in enumerate(self.s.steps):
                result = self.step(i, raw)
                if result is not None:
                    return result
        except (_WireFault, ProtocolFailure) as e:
            # An answer a client cannot use: a failure of the wire rule it breaks, with the frame.
            self.fail(i, next(k for k in raw if k in OPS), str(e), e.rule, e.frame)
            return self.judge_history(self.stopped(i, self.result("fail", str(e))))
        except Needs as e:
            return self.result("skip", f"{e.what}: {e.fix}")
        except (ScenarioError, ExprError) as e:
            # The step needs something the target did not produce (a check, a pulled copy): the
            # scenario fails here. On the reference this surfaces authoring mistakes too.
            self.fail(i, next((k for k in raw if k in OPS), "?"), str(e))
            return self.judge_history(self.stopped(i, self.result("fail", str(e))))
        except TargetError as e:
            # No answer (a timeout, a lost connection): unknown, unless what came before already fails.
            return self.judge_history(self.stopped(i, self.result("unknown", f"step {i + 1}: {e}")))
        return self.judge_history(self.result("fail" if self.failures else "pass"))

    def stopped(self, i: int, result: ScenarioResult) -> ScenarioResult:
        """``result`` of a scenario that stopped at step ``i + 1`` (0-based ``i``): that step did not finish
        either, so even a stop at the last step leaves what it checks not reached."""
        return attrs.evolve(result, stopped_at=i + 1)

    def result(self, outcome: str, reason: str = "") -> ScenarioResult:
        return ScenarioResult(
            self.s, outcome, reason, tuple(self.failures), tuple(self.rec.events), self.checked
        )

    def judge_history(self, result: ScenarioResult) -> ScenarioResult:
        """On a wall clock, the whole scenario's history goes to the history checker as well."""
        if not self.wall:
            return result
        if Feature.REMOTING_DETAIL not in self.rec.target.info.features:
            # The checker compares every property and offset a remoting client reads; a gRPC target shows
            # a message's user properties, tags, keys and id only. The scenario's own expectations judge it.
            note = "history checker not applied: the target shows what a gRPC client sees"
            return attrs.evolve(result, reason=result.reason or note)
        if Feature.CLOCK_SKEW in self.s.features:
            # The history checker reads client and broker times as one clock (docs/checker.md); a scenario
            # that steps the broker's clock breaks that on purpose. Its own steps judge it: the message
            # released, its store time on the stepped clock, the order of the level.
            note = "history checker not applied: the scenario steps the broker's clock"
            return result if result.outcome != "pass" else attrs.evolve(result, reason=result.reason or note)
        from .checker import check_history

        if result.outcome != "pass":  # a run cut short: the check requests that came meanwhile count too
            self.take_checks(self.rec.advance_to(self.rec.now()))
        result = attrs.evolve(result, history=tuple(self.rec.events))

        verdict = check_history(self.rec.events, self.initial_config, epsilon_ms=self.eps, shared=self.shared)
        if verdict.status == "fail":
            # Root causes only: what follows from a cause is counted under it, not reported as a cause.
            for root in verdict.root_causes:
                event = self.rec.events[root.event] if 0 <= root.event < len(self.rec.events) else None
                where = (
                    f"event {root.event} ({event.f} {event.type} at +{event.time - self.t0} ms)"
                    if event
                    else "history"
                )
                more = f" ({len(root.causes) - 1} more like it)" if len(root.causes) > 1 else ""
                follow = f"; {len(root.consequences)} consequences" if root.consequences else ""
                frame = event.value.get("frame") if event is not None else None
                self.failures.append(
                    StepFailure(
                        0,
                        "history",
                        f"{root.name} at {where}: {root.message}{more}{follow}",
                        root.rule,
                        frame if isinstance(frame, str) else None,
                        root.event if root.event >= 0 else None,
                    )
                )
            reason = result.reason if result.outcome != "unknown" else f"{result.reason}, after a failure"
            return attrs.evolve(result, outcome="fail", failures=tuple(self.failures), reason=reason)
        return result

    def step(self, i: int, raw: Mapping[str, Any]) -> ScenarioResult | None:
        op = next(k for k in raw if k in OPS)
        self.step_at = None
        if "at" in raw:
            self.step_at = int(resolve(raw["at"], self.env()))
            self.advance(self.t0 + self.step_at)
        step = resolve({k: v for k, v in raw.items() if k != "at"}, self.env())
        args = step[op] or {}
        expect = step.get("expect")
        until = step.get("until")
        if op == "wait":
            if "as" in step:  # at(NAME) of a wait: a moment to count from (a deliver time, say)
                self.sent_at[str(step["as"])] = self.t.now() - self.t0
            return None
        if op == "restart":
            changed = dict(self.s.config, **(args or {}))
            self.t.restart(broker_config(changed, self.s.profile, self.config) if args else None)
            if args:
                self.config = broker_config(changed, self.s.profile, self.config)
            if "as" in step:  # at(NAME): when the broker was back (a restart on a wall clock takes a while)
                self.sent_at[str(step["as"])] = self.t.now() - self.t0
            return None
        if op == "skew":
            skew = getattr(self.rec.target, "skew_clock", None)
            if skew is None or Feature.CLOCK_SKEW not in self.rec.target.info.features:
                return self.result("skip", "the target cannot step its clock (feature clock-skew)")
            skew(int(args.get("ms", 0)))
            return None
        if op == "checks":
            self.await_checks(expect, until, i)
            judged, later = self.checks_to_judge(expect, until, i)
            self.check_checks(i, judged, expect)
            self.all_checks.extend(judged)
            self.checks = later
            return None
        if op == "batch_client":
            began = self.t.now()
            self.batch_client(i, args, expect)
            self.note_lag(op, began)
            return None
        built = self.build(op, args, i)
        self.system_queue = self.shared and _in_system_queue(built, self.config.profile is Profile.V5)
        if "as" in step:  # at(NAME): when this step ran (a send's name also names its message)
            self.sent_at[str(step["as"])] = self.t.now() - self.t0
        scan = self.shared and isinstance(built, Pull) and built.topic in SYSTEM_TOPICS
        began = self.t.now()
        resp, problems = self.execute_until(i, op, built, expect, until, scan)
        self.note_lag(op, began)
        self.note_records(resp)
        if op == "pull":
            self.pull_names[i] = frozenset(self.uniq_to_name(r.uniq_key) for r in resp.records)
        if expect is not None:
            self.checked += 1
        if op == "end_tx" and resp.code == 0 and str(args.get("action", "")).lower() == "commit":
            self.committed.add(str(args.get("ref")))
        for p in problems:
            self.fail(i, op, p, symptom=step_symptom(op, p) or self.missing_committed(op, p, expect))
        if op in ("send", "send_half", "send_batch") and "as" in step:
            if isinstance(built, Send):
                uniq = built.message.properties[Prop.UNIQ_KEY]
                self.sent[str(step["as"])] = _Sent(uniq, built.message.producer_group, resp, op)
            elif isinstance(built, SendBatch):
                for n, entry in enumerate(built.batch.entries):
                    name = f"{step['as']}.{n}"
                    self.sent[name] = _Sent(entry.properties[Prop.UNIQ_KEY], "PG", resp, op)
                    self.sent_at[name] = self.sent_at.get(str(step["as"]), self.t.now() - self.t0)
        return None

    def note_lag(self, op: str, began: int) -> None:
        if self.wall and op in _TIMED_WRITES:
            self.lag = max(self.lag, self.t.now() - began)

    @property
    def late(self) -> int:
        """On a wall clock, how long after a moment the spec names the broker may act: epsilon, and the
        longest a timed write took (the broker's store time of what it counts from is not seen closer)."""
        return self.eps + self.lag if self.wall else 0

    def allowed(self, value: int) -> str:
        taken = f" (epsilon {self.eps} + {self.lag} ms a write took)" if self.lag else ""
        return f"allowed [{value}, {value + self.late}]{taken}"

    def execute_until(
        self,
        i: int,
        op: str,
        built: Op,
        expect: Any,
        until: Any,
        scan: bool,
    ) -> tuple[Response, list[str]]:
        """Run the operation; read again while the spec allows the answer to be not yet there."""
        if until is not None and op != "pull":
            raise ScenarioError(f"{self.s.id} step {i + 1}: 'until' is for pull and checks steps")
        deadline = self.deadline(until) if until is not None else self.t.now() + self.late
        want = self.plan.pulls.get(i) if self.plan is not None and expect is None and op == "pull" else None
        while True:
            resp = self.scan_system(built) if scan and isinstance(built, Pull) else self.t.execute(built)
            if self.observed_too_late(op, resp, expect):
                resp = Response(int(Code.PULL_NOT_FOUND), "stored after the step's time")
            if expect is not None:
                problems = self.match_response(resp, expect, i, scan)
            elif want:
                have = {self.uniq_to_name(r.uniq_key) for r in resp.records}
                missing = sorted(want - have)
                problems = (
                    [f"the model has {', '.join(missing)} there; the target does not"] if missing else []
                )
            else:
                problems = []
            retry = until is not None or (self.wall and op in _DISPATCHED_READS)
            if not problems or not retry or self.t.now() >= deadline:
                return resp, problems
            poll = WALL_POLL_MS if self.wall else LOGICAL_POLL_MS
            self.advance(min(deadline, self.wake_after(poll, deadline, self.next_service_at)))

    def scan_system(self, pull: Pull) -> Response:
        """A pull of a shared broker's system topic, judged on this scenario's messages only: read the
        queue from ``pull.offset`` to its end and keep the records of messages this scenario sent."""
        ours = {s.uniq for s in self.sent.values()}
        found: list[Record] = []
        offset = pull.offset
        first: Response | None = None
        for _ in range(10_000):
            resp = self.t.execute(attrs.evolve(pull, offset=offset, max_msgs=32))
            first = first or resp
            if resp.code != Code.SUCCESS or not resp.records:
                break
            found.extend(r for r in resp.records if r.uniq_key in ours)
            nxt = resp.fields.get("next_begin_offset")
            if not isinstance(nxt, int) or nxt <= offset:
                break
            offset = nxt
        if not found:
            code = first.code if first is not None and first.code != Code.SUCCESS else Code.PULL_NOT_FOUND
            return Response(int(code), SCANNED_REMARK, {}, ())
        return Response(int(Code.SUCCESS), None, {}, tuple(found[: pull.max_msgs]))

    def expected_checks(self, expect: Any, i: int) -> list[Mapping[str, Any]]:
        """The check items a ``checks`` step expects, each ``repeat: n`` item standing for n requests
        in a row (its ``check_times`` the first one's, each next one higher by one)."""
        items = expect if isinstance(expect, list) else (expect or {}).get("requests", [])
        out: list[Mapping[str, Any]] = []
        for w in items:
            n = int(w.get("repeat", 1))
            if n < 0 or (n != 1 and "at" in w):
                raise ScenarioError(
                    f"{self.s.id} step {i + 1}: 'repeat' is a count (0 or more), without 'at'"
                )
            base = {k: v for k, v in w.items() if k != "repeat"}
            for j in range(n):
                item = dict(base)
                if "check_times" in item:
                    item["check_times"] = int(item["check_times"]) + j
                out.append(item)
        return out

    def await_checks(self, expect: Any, until: Any, i: int) -> None:
        if until is None:
            return
        want = self.expected_checks(expect, i)
        deadline = self.deadline(until)
        poll = WALL_POLL_MS if self.wall else LOGICAL_POLL_MS
        while len(self.checks) < len(want) and self.t.now() < deadline:
            self.advance(min(deadline, self.wake_after(poll, deadline, self.next_check_at)))
        if self.wall and len(self.checks) >= len(want):
            self.advance(self.t.now() + self.eps // 2)  # a round's requests arrive over some ms

    @property
    def next_check_at(self) -> Callable[[int], int | None] | None:
        """On a broker that fast-forwards: when it next sends a check request (None: not such a broker)."""
        if Feature.FAST_FORWARD not in self.rec.target.info.features:
            return None
        return getattr(self.rec.target, "next_check_at", None)

    @property
    def next_service_at(self) -> Callable[[int], int | None] | None:
        """On a broker that fast-forwards: when its services next change anything (None: not such a broker)."""
        if Feature.FAST_FORWARD not in self.rec.target.info.features:
            return None
        return getattr(self.rec.target, "next_service_at", None)

    def wake_after(self, poll: int, deadline: int, foresee: Callable[[int], int | None] | None) -> int:
        """When a wait that polls next looks: a poll later, or on a broker that fast-forwards, a poll after
        the next moment its services act (the wait jumps there instead of polling in real time)."""
        wake = self.t.now() + poll
        if foresee is None:
            return wake
        moment = foresee(deadline)
        return deadline if moment is None else max(wake, moment + poll)

    def deadline(self, until: Any) -> int:
        """The absolute time an ``until`` step waits up to: the moment it names, and on a wall clock
        epsilon more (a broker MAY be late by that much, never early: transaction/check-interval) plus the
        longest timed write so far (``late``)."""
        return self.t0 + int(until) + self.late

    def checks_to_judge(self, expect: Any, until: Any, i: int) -> tuple[list[CheckEvent], list[CheckEvent]]:
        """The checks a ``checks`` step judges, and those it leaves to the next ``checks`` step.

        On a logical clock: all that arrived. On a wall clock a moment is known within epsilon: a step
        without ``until`` that received more checks than it expects leaves those that arrived within
        epsilon before its ``at`` (or after it: the runner woke late) to the next ``checks`` step, which
        expects them; the history checker judges their times. A check earlier than that is judged here.
        """
        if not self.wall or until is not None or expect is None:
            return self.checks, []
        want = len(self.expected_checks(expect, i))
        if len(self.checks) <= want:
            return self.checks, []
        moment = self.t0 + self.step_at if self.step_at is not None else self.t.now()
        judged = [c for c in self.checks if c.time <= moment - self.eps]
        later = [c for c in self.checks if c.time > moment - self.eps]
        take = max(0, want - len(judged))
        return judged + later[:take], later[take:]

    def observed_too_late(self, op: str, resp: Response, expect: Any) -> bool:
        """On a wall clock a step runs a little after its ``at``. A pull meant to show that nothing is
        there yet at ``at`` that finds only messages the broker stored after ``at`` saw the queue too late,
        not a violation: the queue was empty at ``at``."""
        if not (self.wall and op == "pull" and self.step_at is not None and isinstance(expect, Mapping)):
            return False
        want = expect.get("code")
        if want not in ("PULL_NOT_FOUND", int(Code.PULL_NOT_FOUND)) or resp.code != Code.SUCCESS:
            return False
        limit = self.t0 + self.step_at
        return bool(resp.records) and all(r.store_timestamp > limit for r in resp.records)

    def note_records(self, resp: Response) -> None:
        for r in resp.records:
            if r.uniq_key is not None:
                self.pulled.setdefault(r.uniq_key, []).append(r)

    def batch_client(self, i: int, a: Mapping[str, Any], expect: Any) -> None:
        entries = tuple(
            BatchEntry(
                str(m.get("body", "x")).encode(),
                props({k: str(v) for k, v in (m.get("props") or {}).items()}),
                topic=m.get("topic"),
            )
            for m in a.get("messages", [])
        )
        err = client_check(entries, str(a.get("topic", "T")))
        want = (expect or {}).get("error")
        self.checked += 1
        if want is None and err is not None:
            self.fail(i, "batch_client", f"expected the client to accept the batch, it refused: {err}")
        elif want is not None and (err is None or str(want) not in err):
            self.fail(i, "batch_client", f"expected a client error containing {want!r}, got {err!r}")

    # -- matching --
    def match_response(
        self, resp: Response, expect: Mapping[str, Any], i: int, scan: bool = False
    ) -> list[str]:
        out: list[str] = []
        for key, want in expect.items():
            if key == "code":
                want_code = Code[want] if isinstance(want, str) else int(want)
                if scan and want_code in _EMPTY_CODES and resp.code in _EMPTY_CODES:
                    continue  # nothing of ours there, whatever else a shared broker holds
                if resp.code != want_code:
                    out.append(
                        f"code: expected {_code_name(want_code)}, got {_code_name(resp.code)} ({resp.remark})"
                    )
            elif key == "remark":
                # A shared broker's system queue holds other clients' records: the answer judged is made
                # from this scenario's records, and the broker's remark for an empty queue is not there.
                if resp.remark != want and resp.remark != SCANNED_REMARK:
                    out.append(f"remark: expected {want!r}, got {resp.remark!r}")
            elif key == "no_response":
                if resp.no_response != bool(want):
                    out.append(f"no_response: expected {want}, got {resp.no_response}")
            elif key == "messages":
                out.extend(self.match_messages(resp.records, want, i))
            elif key == "msg_id_count":
                n = len(str(resp.fields.get("msg_id", "")).split(","))
                if n != int(want):
                    out.append(f"msg_id_count: expected {want}, got {n}")
            elif key in (
                "queue_id",
                "queue_offset",
                "offset",
                "next_begin_offset",
                "min_offset",
                "max_offset",
            ):
                if key != "queue_id" and (self.system_queue or scan):
                    continue  # a shared broker's system queues hold other clients' entries too
                if resp.fields.get(key) != want:
                    out.append(f"{key}: expected {want}, got {resp.fields.get(key)}")
            else:
                raise ScenarioError(f"{self.s.id} step {i + 1}: unknown expectation {key!r}")
        return out

    def match_messages(
        self, records: Sequence[Record], want: Sequence[Mapping[str, Any]], i: int
    ) -> list[str]:
        # Trailing items marked ``maybe: true`` are records the spec allows but does not require (a
        # delivery repeated after a restart): the list may end before them; where present they must match.
        required = len(want)
        while required and want[required - 1].get("maybe"):
            required -= 1
        if any(w.get("maybe") for w in want[:required]):
            raise ScenarioError(f"{self.s.id} step {i + 1}: only the last items of 'messages' may be 'maybe'")
        if not required <= len(records) <= len(want):
            names = [self.uniq_to_name(r.uniq_key) for r in records]
            count = str(len(want)) if required == len(want) else f"{required} to {len(want)}"
            return [f"messages: expected {count}, got {len(records)} {names}"]
        out: list[str] = []
        for n, (rec, w) in enumerate(zip(records, want[: len(records)], strict=True)):
            for key, value in w.items():
                got: Any
                if key == "maybe":
                    continue
                if key == "ref":
                    sent = self.ref(str(value), i)
                    if rec.uniq_key != sent.uniq:
                        out.append(f"message {n}: expected {value}, got {self.uniq_to_name(rec.uniq_key)}")
                    continue
                if key == "props":
                    for pk, pv in value.items():
                        got = rec.properties.get(pk)
                        if isinstance(pv, Mapping):
                            out.extend(self.match_time_prop(n, pk, got, pv, i))
                            continue
                        exp = None if pv is None else str(self.placeholder(pv, i))
                        if got != exp:
                            out.append(f"message {n}: property {pk}: expected {exp!r}, got {got!r}")
                    continue
                if key == "body":
                    got, value = rec.body.decode(errors="replace"), str(value)
                elif key == "body_size":
                    got, value = len(rec.body), int(value)
                elif key == "store_at":
                    got, value = rec.store_timestamp - self.t0, int(value)
                    if self.wall:
                        if not value <= got <= value + self.late:
                            out.append(f"message {n}: stored at +{got} ms, {self.allowed(value)}")
                        continue
                elif key == "new_offset_from":
                    orig = self.commit_log_offset(self.ref(str(value), i), i)
                    if rec.commit_log_offset == orig:
                        out.append(f"message {n}: expected a new commit-log offset, got the original {orig}")
                    continue
                elif key == "prepared_offset_of":
                    got, value = (
                        rec.prepared_transaction_offset,
                        self.commit_log_offset(self.ref(str(value), i), i),
                    )
                elif key == "queue_offset" and self.shared and rec.topic in SYSTEM_TOPICS:
                    continue  # a shared broker's system queues hold other clients' entries too
                elif key in ("topic", "queue_id", "queue_offset", "sys_flag", "reconsume_times", "flag"):
                    got = getattr(rec, key)
                else:
                    raise ScenarioError(f"{self.s.id} step {i + 1}: unknown message expectation {key!r}")
                if got != value:
                    out.append(f"message {n}: {key}: expected {value!r}, got {got!r}")
        return out

    def match_time_prop(
        self, n: int, key: str, got: str | None, want: Mapping[str, Any], i: int
    ) -> list[str]:
        """A property that holds a moment of the broker's clock (epoch ms), ``{time: N}``: exactly N on a
        logical clock, within ``[N, N + epsilon]`` on a wall clock, as ``store_at`` is."""
        if set(want) != {"time"}:
            raise ScenarioError(f"{self.s.id} step {i + 1}: property {key}: a mapping must be {{time: N}}")
        value = int(want["time"])
        if got is None or not got.lstrip("-").isdigit():
            return [f"message {n}: property {key}: expected a time {value}, got {got!r}"]
        t = int(got)
        if self.wall:
            if not value <= t <= value + self.late:
                return [f"message {n}: property {key}: {t}, {self.allowed(value)}"]
        elif t != value:
            return [f"message {n}: property {key}: expected {value}, got {t}"]
        return []

    def uniq_to_name(self, uniq: str | None) -> str:
        for name, sent in self.sent.items():
            if sent.uniq == uniq:
                return name
        return str(uniq)

    def in_expected_order(
        self, got: list[CheckEvent], want: list[Mapping[str, Any]], i: int
    ) -> list[CheckEvent]:
        """The requests of a wall-clock broker paired with the expected ones by message and count: a run
        hands each check to a thread pool (AbstractTransactionalMessageCheckListener.resolveHalfMsg,
        executorService.execute, 2 to 5 threads, at 4.9.7 and 5.5.0), so requests of one run may arrive
        in any order. What finds no pair keeps its place, and is judged there."""
        left = list(got)
        paired: list[CheckEvent | None] = []
        for w in want:
            uniq = self.ref(str(w["ref"]), i).uniq if "ref" in w else None
            times = str(w["check_times"]) if "check_times" in w else None
            match = next(
                (
                    c
                    for c in left
                    if c.message.uniq_key == uniq
                    and (times is None or c.message.properties.get("TRANSACTION_CHECK_TIMES") == times)
                ),
                None,
            )
            if match is not None:
                left.remove(match)
            paired.append(match)
        return [c if c is not None else left.pop(0) for c in paired]

    def alive(self) -> bool:
        """Whether the target still answers: a request outside the history (GET_MAX_OFFSET of a topic no
        scenario uses), whose answer, whatever it is, says the broker is working."""
        try:
            self.rec.target.execute(GetMaxOffset("rmqspec_liveness", 0))
        except ProtocolFailure:
            return True
        except TargetError:
            return False
        return True

    def missing_committed(self, op: str, problem: str, expect: Any) -> str | None:
        """transaction/committed-message when a pull that should show a message this scenario committed
        shows another status or other records: the symptom of a commit that stored nothing, whatever the
        scenario is about (``StepFailure.symptom``)."""
        if op != "pull" or not problem.startswith(("code:", "messages:")) or not isinstance(expect, Mapping):
            return None
        wanted = expect.get("messages")
        refs = (
            {str(m.get("ref")) for m in wanted if isinstance(m, Mapping)}
            if isinstance(wanted, list)
            else set()
        )
        return "transaction/committed-message" if refs & self.committed else None

    def check_checks(self, i: int, got: list[CheckEvent], expect: Any) -> None:
        if expect is None:
            return
        self.checked += 1
        want = self.expected_checks(expect, i)
        if self.wall and len(got) < len(want) and not self.alive():
            # A check that did not come is evidence only while the broker answers.
            raise TargetError(
                f"expected {len(want)} check request(s), got {len(got)}, and the target answers nothing"
            )
        if len(got) != len(want):
            names = [self.uniq_to_name(c.message.uniq_key) for c in got]
            few = "transaction/check-timeout" if len(got) < len(want) else None  # a check that never came
            self.fail(
                i, "checks", f"expected {len(want)} check request(s), got {len(got)} {names}", symptom=few
            )
            return
        if self.wall:
            got = self.in_expected_order(got, want, i)
        for n, (chk, w) in enumerate(zip(got, want, strict=True)):
            if "ref" in w:
                sent = self.ref(str(w["ref"]), i)
                if chk.message.uniq_key != sent.uniq:
                    self.fail(
                        i,
                        "checks",
                        f"check {n}: expected {w['ref']}, got {self.uniq_to_name(chk.message.uniq_key)}",
                    )
                if w.get("new_offsets") and chk.commit_log_offset == self.commit_log_offset(sent, i):
                    self.fail(i, "checks", f"check {n}: expected the offsets of a put-back copy")
            if "check_times" in w:
                t = chk.message.properties.get(Prop.TRANSACTION_CHECK_TIMES)
                if t != str(w["check_times"]):
                    self.fail(
                        i,
                        "checks",
                        f"check {n}: TRANSACTION_CHECK_TIMES expected {w['check_times']}, got {t}",
                    )
            # The moment of a check depends on the phase of the broker's check service: compared exactly
            # on a logical clock; on a wall clock the history checker judges it against the rounds seen.
            if "at" in w and self.exact_check_times and chk.time - self.t0 != int(w["at"]):
                self.fail(i, "checks", f"check {n}: expected at +{w['at']} ms, got +{chk.time - self.t0} ms")
            if "topic" in w and chk.message.topic != w["topic"]:
                self.fail(i, "checks", f"check {n}: topic expected {w['topic']}, got {chk.message.topic}")


_TIMER_PROPS = (Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_MS, Prop.TIMER_DELAY_SEC)


def origin_topic(record: Record) -> str:
    """The ``originTopic`` a Java consumer sends back with a message: the topic it consumed it from, which
    for a retried copy is the original one (``RETRY_TOPIC``; ``MQClientAPIImpl.consumerSendMessageBack``
    sets it from the message the consumer was given, whose topic the client has restored)."""
    return record.properties.get(Prop.RETRY_TOPIC) or record.topic


def _in_system_queue(op: Op, five: bool = False) -> bool:
    """Whether the offsets answered to ``op`` are positions in a system topic's queue (delayed, half or,
    on 5.x, timer sends are stored in SCHEDULE_TOPIC_XXXX, RMQ_SYS_TRANS_HALF_TOPIC or rmq_sys_wheel_timer;
    reads name the topic)."""
    match op:
        case Send(message=m):
            p = m.properties
            if m.sys_flag & 12 == 4:
                return True
            if m.sys_flag & 12 == 12:
                return False
            return p.get(Prop.DELAY, "0") not in ("", "0") or (five and any(k in p for k in _TIMER_PROPS))
        case SendBatch(batch=b):
            return five and any(k in b.properties for k in _TIMER_PROPS)
        case Pull(topic=t) | GetMaxOffset(topic=t):
            return t in SYSTEM_TOPICS
    return False


def dry_run(scenario: Scenario, config: BrokerConfig, reference: Callable[[BrokerConfig], Target]) -> Plan:
    """The scenario on the reference model (``reference`` makes a logical-clock target of it) under
    ``config``: what each pull without ``expect`` returns, how long the scenario runs, and whether it
    holds at all under these settings."""
    target = reference(config)
    runner = _Runner(scenario, target, 0, "plan", None)
    try:
        runner.check_needs()
        for i, raw in enumerate(scenario.steps):
            if runner.step(i, raw) is not None:
                break
    except Needs as e:
        return Plan(runner.pull_names, 0, needs=e)
    except (ScenarioError, ExprError, _WireFault, TargetError) as e:
        return Plan(runner.pull_names, runner.t.now() - runner.t0, failure=str(e))
    finally:
        target.close()
    span = runner.t.now() - runner.t0
    if runner.failures:
        f = runner.failures[0]
        return Plan(runner.pull_names, span, failure=f"step {f.step} ({f.operation}): {f.message}")
    return Plan(runner.pull_names, span)


def run_scenario(
    scenario: Scenario,
    make_target: Callable[[BrokerConfig], Target],
    *,
    features: frozenset[Feature] | None = None,
    config: BrokerConfig | None = None,
    base: BrokerConfig | None = None,
    epsilon_ms: int = 500,
    salt: str = "",
    reference: Callable[[BrokerConfig], Target] | None = None,
    max_wait_ms: int | None = None,
) -> ScenarioResult:
    """Run one scenario on a target made for it. ``config`` is the target's own configuration (a
    broker whose settings the suite cannot choose: a scenario that pins other settings is skipped);
    None: the scenario's settings over ``base`` (default: the defaults).
    ``reference`` (a logical-clock target of the model) enables the dry run that wall-clock runs use.
    Never raises: every outcome is a result."""
    started = time.perf_counter()
    try:
        result = _run_scenario(
            scenario,
            make_target,
            features,
            config or base,
            config is not None,
            epsilon_ms,
            salt,
            reference,
            max_wait_ms,
        )
        return attrs.evolve(result, seconds=time.perf_counter() - started)
    except Exception as e:  # the suite's own bug: reported as unknown, with where, never a crash
        where = traceback.extract_tb(e.__traceback__)[-1]
        return ScenarioResult(
            scenario,
            "unknown",
            f"rmqspec error {type(e).__name__}: {e} (at {where.filename}:{where.lineno}); please report it",
        )


def _run_scenario(
    scenario: Scenario,
    make_target: Callable[[BrokerConfig], Target],
    features: frozenset[Feature] | None,
    config: BrokerConfig | None,
    fixed: bool,
    epsilon_ms: int,
    salt: str,
    reference: Callable[[BrokerConfig], Target] | None,
    max_wait_ms: int | None,
) -> ScenarioResult:
    reason = scenario.release_skip(config)
    if reason is not None:
        return ScenarioResult(scenario, "skip", reason)
    try:
        cfg = scenario.broker_config(config)
    except ScenarioError as e:
        return ScenarioResult(scenario, "skip", str(e))
    if fixed and config is not None:
        reason = scenario.unmet_settings(config)
        if reason is not None:
            return ScenarioResult(scenario, "skip", reason)
    if features is not None:
        missing = scenario.features - features
        if missing:
            return ScenarioResult(
                scenario, "skip", "the target lacks " + ", ".join(sorted(f.value for f in missing))
            )
    plan: Plan | None = None
    if reference is not None:
        plan = dry_run(scenario, cfg, reference)
        if plan.needs is not None:
            return ScenarioResult(scenario, "skip", f"{plan.needs.what}: {plan.needs.fix}")
        if plan.failure is not None:
            return ScenarioResult(
                scenario,
                "skip",
                f"the scenario does not hold on the reference model under these settings ({plan.failure}): "
                "a portability bug of the scenario, please report it",
            )
        if max_wait_ms is not None and plan.span_ms > max_wait_ms:
            return ScenarioResult(
                scenario,
                "skip",
                f"runs {plan.span_ms / 1000:.0f} s of wall time with these settings (limit "
                f"{max_wait_ms / 1000:.0f} s): raise --max-wait, or use shorter messageDelayLevel / "
                "transactionCheckInterval settings",
            )
    try:
        target = make_target(cfg)
    except TargetError as e:
        return ScenarioResult(scenario, "unknown", f"the target could not be made: {e}")
    try:
        return _Runner(scenario, target, epsilon_ms, salt or str(time.time_ns()), plan).run()
    finally:
        target.close()


__all__ = [
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "Plan",
    "ScenarioResult",
    "StepFailure",
    "dry_run",
    "run_scenario",
]

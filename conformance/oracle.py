"""The oracle: a slow, exhaustive history checker (Knossos / Porcupine style) for small histories.

It shares nothing with the fast checker (``conformance.checker``) but the reference model and the codec.
Where the fast checker resolves the broker's nondeterminism greedily from what the history shows, the
oracle *searches* every broker run the model allows and asks whether one explains the whole history:

- **the order** in which operations took effect: an operation may take effect before another only if
  it was invoked before that one completed (concurrent operations, with overlapping invoke..completion
  intervals, are tried in every order);
- **each operation's effect moment** within its ``[invoke, completion]`` interval: its ends and the
  moments inside it where the model's answer can change (the history's event times shifted by the
  delays the model applies: every delay level, the transaction timeout, epsilon; one millisecond either
  side). The moments between two of these give the same answers as one of them;
- **the services' moments**: the broker's services (schedule delivery, transaction check, offset
  flush: ``Model.advance``) run behind the operations by at most ``epsilon_ms``: before an operation
  takes effect at ``m`` the services have run up to some ``b`` with ``m - epsilon_ms <= b <= m``; the
  oracle tries every ``b`` that changes what they did (just before each delivery or check run in that
  range). So a delivery due at ``d`` becomes visible somewhere in ``[d, d + epsilon_ms]``
  (schedule/due-time, with the checker's epsilon), never before;
- **the check service's phase**: its runs fall at ``phase + k * transactionCheckInterval``; the phase
  is tried at 0 and at each check arrival and each arrival less epsilon (mod the interval); a check
  request must arrive within ``[run, run + epsilon_ms]`` of the run that sent it, with exactly the
  model's content; one whose run is less than ``epsilon_ms`` before the history's end is not owed;
- **causality**: an END_TRANSACTION sent from a check answers a check request of the history that
  arrived before it was invoked, and that the run has sent by the moment it takes effect;
- **the broker's random queue pick** (a send to queue -1): the queue its answer names, if in range,
  as the model's ``queue_choice`` (put/queue-id-range).

Every answer is compared with the model's: the code, every response field (queue id, queue offset,
message id, pull offsets, GET_MAX_OFFSET) and every record field but the ones a broker sets from its own
clock, hosts or configuration (store and born timestamps, hosts, size, and the properties of
``UNCOMPARED``). The remark is never compared (its wording differs between releases). Commit-log offsets
and message ids are compared exactly: the oracle assumes the target lays out its store as the model does
(the in-process target does; a real broker does not), so it judges generated histories, not real ones.

The search is exhaustive, depth first, memoized on (model state, the clocks, which operations and
checks are done). It answers ``Explained`` with the run (each operation's moment and the services'
time before it) or ``Unexplained`` with the shortest failing prefix of the history (a prefix's operations
without a completion may or may not have taken effect).

Not modelled yet (refused with ``OracleRefused``): restarts, the 5.x profile (timer wheel, op batch),
``info`` completions (outcome unknown), operation kinds other than send, send_half, pull, send_back,
end_tx and heartbeat (batch, max_offset, view, query), a broker clock skewed from the client's, shared
brokers (other clients' records), and histories of more than ``MAX_OPERATIONS`` operations or
``MAX_CHECKS`` checks.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Final

import attrs

from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.model import ConsumerSendBack, EndTx, Model, Op, Send
from rmqspec.reference.observations import CheckRequest, Delivered, Discarded, DroppedOnDelivery
from rmqspec.reference.state import BrokerState

from .codec import CHECK, CodecError, check_to_json, event_op, response_of, response_to_json
from .contract import CheckEvent
from .history import Event

MAX_OPERATIONS: Final = 30
MAX_CHECKS: Final = 12
EPSILON_MS: Final = 1000  # the same default as the fast checker's, stated here on its own
KINDS: Final = frozenset({"send", "send_half", "pull", "send_back", "end_tx", "heartbeat"})
# Record fields a broker fills from its own clock, hosts or store encoding: not the model's to predict.
UNJUDGED_FIELDS: Final = frozenset({"store_timestamp", "born_timestamp", "born_host", "store_host", "size"})
# Properties a broker sets from its own configuration or a client adds on reading (the spec's list).
UNCOMPARED: Final = frozenset(
    {"CLUSTER", "MSG_REGION", "TRACE_ON", "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME"}
)
NEVER: Final = sys.maxsize
MAX_NODES: Final = 3_000  # search nodes over all phases: beyond this the history is refused as too large


class OracleRefused(ValueError):
    """A history the oracle does not search: what it holds that the oracle does not model, in one line."""


@attrs.frozen
class Operation:
    id: int
    index: int  # the invoke event's index
    process: int
    f: str
    op: Op
    invoke: int
    complete: int  # NEVER: no completion in the history (may or may not have taken effect)
    done_index: int  # the completion event's index (NEVER: none)
    answer: dict[str, Any] | None


@attrs.frozen
class Check:
    id: int
    index: int
    time: int
    value: dict[str, Any]


@attrs.frozen
class Step:
    """One step of an explaining run: the operation of event ``index`` took effect at ``moment``, the
    services having run up to ``services``."""

    index: int
    moment: int
    services: int


@attrs.frozen
class Explained:
    phase: int
    run: tuple[Step, ...]
    ok: bool = True


@attrs.frozen
class Unexplained:
    prefix: tuple[Event, ...]  # the shortest prefix of the history that no run explains
    ok: bool = False


Verdict = Explained | Unexplained


# --- reading a history ----------------------------------------------------------------------------------


def _read(events: Sequence[Event]) -> tuple[list[Operation], list[Check]]:
    ops: list[Operation] = []
    checks: list[Check] = []
    open_: dict[int, tuple[Event, Op]] = {}
    done: dict[int, tuple[Event, Op, Event | None]] = {}
    for e in sorted(events, key=lambda x: x.index):
        if e.process == -1:
            if e.f != CHECK or e.type != "ok":
                raise OracleRefused(
                    f"event {e.index}: a broker event {e.f!r} {e.type!r} the oracle does not model"
                )
            checks.append(Check(len(checks), e.index, e.time, e.value))
            continue
        if e.f not in KINDS:
            raise OracleRefused(f"event {e.index}: operation {e.f!r} is not modelled by the oracle")
        if e.type == "invoke":
            if e.process in open_:
                raise OracleRefused(
                    f"event {e.index}: process {e.process} invokes with an operation in flight"
                )
            try:
                open_[e.process] = (e, event_op(e.f, e.value))
            except CodecError as err:
                raise OracleRefused(f"event {e.index}: unreadable operation: {err}") from None
            continue
        if e.type == "info":
            raise OracleRefused(f"event {e.index}: an info completion (outcome unknown) is not modelled")
        if e.process not in open_:
            raise OracleRefused(f"event {e.index}: a completion without an invoke")
        inv, op = open_.pop(e.process)
        done[inv.index] = (inv, op, e)
    for inv, op in open_.values():
        done[inv.index] = (inv, op, None)
    for key in sorted(done):
        inv, op, comp = done[key]
        if comp is not None and comp.time < inv.time:
            raise OracleRefused(f"event {comp.index}: completes before its invoke")
        ops.append(
            Operation(
                len(ops),
                inv.index,
                inv.process,
                inv.f,
                _with_queue_pick(op, comp),
                inv.time,
                NEVER if comp is None else comp.time,
                NEVER if comp is None else comp.index,
                None if comp is None else comp.value,
            )
        )
    if len(ops) > MAX_OPERATIONS:
        raise OracleRefused(f"{len(ops)} operations: the oracle searches at most {MAX_OPERATIONS}")
    if len(checks) > MAX_CHECKS:
        raise OracleRefused(f"{len(checks)} checks: the oracle searches at most {MAX_CHECKS}")
    return ops, checks


def _with_queue_pick(op: Op, comp: Event | None) -> Op:
    """A send to queue -1: the broker's random pick is the queue its answer names (put/queue-id-range)."""
    if not isinstance(op, Send) or op.message.queue_id >= 0 or comp is None:
        return op
    q = comp.value.get("fields", {}).get("queue_id") if isinstance(comp.value, dict) else None
    if isinstance(q, int) and not isinstance(q, bool) and q >= 0:
        return attrs.evolve(op, queue_choice=q)
    return op


# --- comparing answers ----------------------------------------------------------------------------------


# Compared only with exact offsets: where the target laid out its commit log (to classify a disagreement).
OFFSET_FIELDS: Final = frozenset({"msg_id", "commit_log_offset"})


def _record(d: dict[str, Any], exact: bool = True) -> dict[str, Any]:
    out = {k: v for k, v in d.items() if k not in UNJUDGED_FIELDS and (exact or k not in OFFSET_FIELDS)}
    out["properties"] = {k: v for k, v in d.get("properties", {}).items() if k not in UNCOMPARED}
    return out


def _answer(d: dict[str, Any], exact: bool = True) -> dict[str, Any]:
    return {
        "code": d.get("code"),
        "fields": {k: v for k, v in (d.get("fields") or {}).items() if exact or k not in OFFSET_FIELDS},
        "records": [_record(r, exact) for r in d.get("records") or []],
        "no_response": bool(d.get("no_response")),
    }


def _check(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "message": _record(d.get("message", {}))}


# --- the search -----------------------------------------------------------------------------------------


def _service_times(events: Sequence[object]) -> list[int]:
    times = []
    for e in events:
        if isinstance(e, CheckRequest):
            times.append(e.at)
        elif isinstance(e, Delivered | Discarded):
            times.append(e.copy.store_timestamp)
        elif isinstance(e, DroppedOnDelivery):
            times.append(e.source.store_timestamp)
    return sorted(set(times))


def _timed(op: Op) -> bool:
    """Whether the moment an operation takes effect may decide something besides its order: the deliver
    time of a delayed send or a send-back, the check rounds of a half message, the time of the op
    message an END_TRANSACTION writes. (A plain send's or a pull's moment only orders it.)"""
    if isinstance(op, ConsumerSendBack | EndTx):
        return True
    if isinstance(op, Send):
        m = op.message
        return bool(m.properties.get("DELAY")) or bool(m.sys_flag & 4) or bool(m.properties.get("TRAN_MSG"))
    return False


class _Search:
    def __init__(
        self, model: Model, ops: list[Operation], checks: list[Check], end: int, eps: int, critical: list[int]
    ) -> None:
        self.model = model
        self.ops = ops
        self.checks = checks
        self.end = end
        self.eps = eps
        self.critical = critical
        self.nodes = 0
        self.invoke_order = False
        self.causal = True
        self.exact = True
        self.advanced: dict[tuple[BrokerState, int, int], tuple[BrokerState, list[Any]]] = {}
        self.failed: set[tuple[BrokerState, int, int, frozenset[int], frozenset[int]]] = set()

    def moments(self, o: Operation, state: BrokerState, b: int, lo: int, hi: int) -> list[int]:
        """The effect moments worth trying for ``o`` in ``[lo, hi]``: the earliest, and each service
        event in the interval (so the services may run before ``o``, ``b <= m``); for an operation whose
        record's time decides something later (a delayed send's deliver time, a half message's check, a
        send-back's retry), also the history's times shifted by the delays, one millisecond either side.
        A plain operation's moment decides nothing else: its record's store time is never judged."""
        out = {lo}
        if hi > lo:
            _, events = self.advance(state, b, hi)
            out |= {x for x in _service_times(events) if lo < x <= hi}
            out |= {x - 1 for x in out if lo < x - 1}
            if _timed(o.op):
                out |= {c for c in self.critical if lo < c < hi} | {hi}
        return sorted(out)

    def advance(self, state: BrokerState, b: int, to: int) -> tuple[BrokerState, list[Any]]:
        key = (state, b, to)
        hit = self.advanced.get(key)
        if hit is None:
            hit = self.advanced[key] = self.model.advance(state, b, to)
        return hit

    def services(
        self, state: BrokerState, b: int, to: int, matched: frozenset[int]
    ) -> tuple[BrokerState, frozenset[int]] | None:
        """Run the services from ``b`` to ``to``; the checks they send matched with the history's, or None."""
        if to <= b:
            return state, matched
        state, events = self.advance(state, b, to)
        for e in events:
            if not isinstance(e, CheckRequest) or not e.sent:
                continue
            want = _check(
                check_to_json(
                    CheckEvent(e.at, e.group, e.tran_state_table_offset, e.commit_log_offset, e.message)
                )
            )
            hit = next(
                (
                    c.id
                    for c in self.checks
                    if c.id not in matched and e.at <= c.time <= e.at + self.eps and _check(c.value) == want
                ),
                None,
            )
            if hit is None:
                if e.at + self.eps <= self.end:
                    return None  # a check the broker owed before the history ended
                continue
            matched = matched | {hit}
        return state, matched

    def lags(self, state: BrokerState, b: int, m: int) -> list[int]:
        """The services' times worth trying before an operation at ``m``: ``m``, and just before each
        service event in ``[m - eps, m]`` (what ran before then is all the same)."""
        if m <= b:
            return [b]
        _, events = self.advance(state, b, m)
        out = [m]
        for x in reversed(_service_times(events)):
            if b < x and x >= m - self.eps and x - 1 not in out:
                out.append(max(b, x - 1))
        return out

    def answers_a_check_received(self, o: Operation, matched: frozenset[int]) -> bool:
        """An END_TRANSACTION from a check answers a check request of the history that arrived before it
        was invoked and that the run has sent (causality: the producer answers what it received)."""
        if not self.causal or not isinstance(o.op, EndTx) or not o.op.request.from_check:
            return True
        r = o.op.request
        return any(
            c.id in matched
            and c.index < o.index
            and c.value.get("table_offset") == r.tran_state_table_offset
            and c.value.get("commit_log_offset") == r.commit_log_offset
            for c in self.checks
        )

    def run(
        self, state: BrokerState, t: int, b: int, done: frozenset[int], matched: frozenset[int]
    ) -> list[Step] | None:
        key = (state, t, b, done, matched)
        if key in self.failed:
            return None
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise OracleRefused(
                f"the search visited more than {MAX_NODES} runs: too large a history to search"
            )
        pending = [o for o in self.ops if o.id not in done]
        required = [o for o in pending if o.complete != NEVER]
        if not required:
            for b_end in self.lags(state, b, self.end):
                res = self.services(state, b, b_end, matched)
                if res is not None and len(res[1]) == len(self.checks):
                    return []
        for o in pending:
            if any(p.done_index < o.index for p in required):
                continue  # p completed before o was invoked: p took effect first (real-time order)
            if self.invoke_order and any(p.index < o.index for p in pending):
                continue
            lo = max(t, o.invoke)
            # an operation without a completion taking effect after the history's end is one not taking effect
            hi = min([o.complete, self.end, *(p.complete for p in required if p.id != o.id)])
            if lo > hi:
                continue
            for m in self.moments(o, state, b, lo, hi):
                for b2 in self.lags(state, b, m):
                    res = self.services(state, b, b2, matched)
                    if res is None:
                        continue
                    s2, matched2 = res
                    if not self.answers_a_check_received(o, matched2):
                        continue
                    s3, obs = self.model.step(s2, o.op, m)
                    model = _answer(response_to_json(response_of(obs)), self.exact)
                    if o.answer is not None and model != _answer(o.answer, self.exact):
                        continue
                    rest = self.run(s3, m, b2, done | {o.id}, matched2)
                    if rest is not None:
                        return [Step(o.index, m, b2), *rest]
        self.failed.add(key)
        return None


def _critical(events: Sequence[Event], config: BrokerConfig, eps: int) -> list[int]:
    shifts = {0, eps, config.transaction_timeout_ms, config.transaction_check_interval_ms}
    for level in range(1, len(config.delay_levels) + 1):
        d = config.delay_ms(level)
        if d:
            shifts |= {d, d + eps}
    out: set[int] = set()
    for e in events:
        for s in shifts:
            for j in (-1, 0, 1):
                out |= {e.time - s + j, e.time + s + j}
    return sorted(out)


def _phases(checks: list[Check], interval: int, eps: int) -> list[int]:
    """The check phases to try: 0, and each that puts one shown check at its run or epsilon after it;
    only those that put every shown check within epsilon after some run of theirs."""
    out = [0]
    for c in checks:
        for p in (c.time % interval, (c.time - eps) % interval):
            if p not in out:
                out.append(p)
    return [p for p in out if all((c.time - p) % interval <= eps for c in checks)]


def _explain(
    events: Sequence[Event],
    config: BrokerConfig,
    eps: int,
    invoke_order: bool = False,
    causal: bool = True,
    exact: bool = True,
) -> Explained | None:
    ops, checks = _read(events)
    if not events:
        return Explained(0, ())
    start = min(e.time for e in events)
    end = max(e.time for e in events)
    critical = _critical(events, config, eps)
    nodes = 0
    for phase in _phases(checks, config.transaction_check_interval_ms, eps):
        model = Model(config, check_phase_ms=phase)
        search = _Search(model, ops, checks, end, eps, critical)
        search.invoke_order = invoke_order
        search.causal = causal
        search.exact = exact
        search.nodes = nodes
        found = search.run(model.initial(), start, start, frozenset(), frozenset())
        if found is not None:
            return Explained(phase, tuple(found))
        nodes = search.nodes
    return None


def explain(
    events: Sequence[Event],
    config: BrokerConfig,
    *,
    epsilon_ms: int = EPSILON_MS,
    invoke_order: bool = False,
    shortest_prefix: bool = True,
    causal: bool = True,
    exact_offsets: bool = True,
) -> Verdict:
    """Search the broker runs the model allows for one that explains ``events`` (see the module doc).

    ``invoke_order``: only runs where operations take effect in the order they were invoked (what the
    fast checker assumes; used to classify a disagreement). ``shortest_prefix`` False: an unexplained
    history is answered with the whole history as its prefix (no search for the shortest). ``causal``
    False: an END_TRANSACTION from a check need not follow the check's arrival (to classify a
    disagreement). ``exact_offsets`` False: the message ids and commit-log offsets of answers are not
    compared (to classify a disagreement; operations that name an offset still use the target's)."""
    if config.profile is Profile.V5:
        raise OracleRefused("the 5.x profile (timer wheel, op batch) is not modelled by the oracle")
    events = sorted(events, key=lambda e: e.index)
    if any(e.f == "restart" for e in events):
        raise OracleRefused("a history with a restart is not modelled by the oracle")
    found = _explain(events, config, epsilon_ms, invoke_order, causal, exact_offsets)
    if found is not None:
        return found
    if not shortest_prefix:
        return Unexplained(tuple(events))
    lo, hi = 0, len(events)  # prefix lo is explained, prefix hi is not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _explain(events[:mid], config, epsilon_ms, invoke_order, causal, exact_offsets) is None:
            hi = mid
        else:
            lo = mid
    return Unexplained(tuple(events[:hi]))

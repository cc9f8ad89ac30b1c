"""Small histories for the oracle tests: reference runs on a logical clock, made concurrent, then perturbed.

``reference_history(plan)`` drives the in-process target (the reference model on a logical clock) through
a plan of actions and records the history. ``widen(events, stretches)`` moves invokes earlier and
completions later (never into the same process's neighbour, nor an invoke before a check the process may
be answering): the run recorded stays a run that explains the result, and operations of different
processes now overlap, so the order in which they took effect is the checker's to find. ``perturb``
applies one change a broken broker could make (a code, an offset, a record dropped, duplicated or
corrupted, a check dropped, duplicated or moved, a pull moved in time, two answers swapped); the result
may or may not still be explainable: the tests ask the fast checker and the oracle, and they must agree.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.history import Event, RecordingTarget
from rmqspec.conformance.trace_gen import TRACE_CONFIG
from rmqspec.reference.constants import TxAction
from rmqspec.reference.model import ConsumerSendBack, EndTx, Heartbeat, Model, Op, Pull, Send
from rmqspec.reference.put import Message
from rmqspec.reference.records import props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

CONFIG = TRACE_CONFIG
PGROUP, GROUP = "PG", "CG"
CONSUMER = 9
ACTIONS = ("send", "delay", "half", "half_end", "pull", "pull_back")
QUEUES = ("T", "D", f"%RETRY%{GROUP}")
TX_ACTIONS = (TxAction.COMMIT, TxAction.ROLLBACK, TxAction.UNKNOW)

# An action: (kind, process 1..3, gap before it in ms, a small number the kind uses)
Action = tuple[str, int, int, int]

actions = st.tuples(
    st.sampled_from(ACTIONS),
    st.integers(1, 3),
    st.sampled_from([0, 0, 0, 5, 40, 300, 900, 1200, 2500]),
    st.integers(0, 5),
)
plans = st.lists(actions, min_size=1, max_size=9)


def reference_history(plan: Sequence[Action]) -> list[Event]:
    """The reference's history of ``plan``, settled: what is due comes due, every queue is read."""
    rec = RecordingTarget(InProcessTarget(Model(CONFIG)))
    offsets = dict.fromkeys(QUEUES, 0)

    def run(op: Op, process: int) -> Any:
        return rec.execute(op, process)

    def answer_checks(t: int) -> None:
        for c in rec.advance_to(t):
            run(
                EndTx(
                    EndTransaction(
                        PGROUP,
                        c.tran_state_table_offset,
                        c.commit_log_offset,
                        TX_ACTIONS[c.commit_log_offset % 3],
                        True,
                        transaction_id=c.message.properties.get("UNIQ_KEY"),
                    )
                ),
                1,
            )

    def pull(topic: str, back: int) -> None:
        resp = run(Pull(topic, 0, offsets[topic], 4, GROUP), CONSUMER)
        if resp.code == 0 and resp.records:
            offsets[topic] = int(resp.fields["next_begin_offset"])
            if back:
                r = resp.records[0]
                run(
                    ConsumerSendBack(SendBack(GROUP, r.commit_log_offset, 0 if back % 2 else -1, 2)), CONSUMER
                )

    run(Heartbeat(PGROUP), 1)
    for n, (kind, process, gap, x) in enumerate(plan, start=1):
        answer_checks(rec.now() + gap)
        uniq = f"K{n:04d}"
        if kind == "send":
            run(Send(Message("T", b"p", props(UNIQ_KEY=uniq))), process)
        elif kind == "delay":
            run(Send(Message("D", b"d", props(UNIQ_KEY=uniq, DELAY=str(1 + x % 2)))), process)
        elif kind in ("half", "half_end"):
            p = props(UNIQ_KEY=uniq, TRAN_MSG="true", PGROUP=PGROUP)
            resp = run(Send(Message("T", b"t", p, sys_flag=4, producer_group=PGROUP)), process)
            if kind == "half_end" and resp.code == 0:
                req = EndTransaction(
                    PGROUP,
                    int(resp.fields["queue_offset"]),
                    int(str(resp.fields["msg_id"])[-16:], 16),
                    TX_ACTIONS[x % 3],
                    transaction_id=uniq,
                )
                run(EndTx(req), process)
        else:
            pull(QUEUES[x % 3], x if kind == "pull_back" else 0)
    end = rec.now() + 2 * CONFIG.transaction_check_interval_ms + 3000
    while rec.now() < end:
        answer_checks(min(end, rec.now() + 1000))
    for topic in QUEUES:
        for _ in range(3):
            pull(topic, 0)
    return rec.events


def widen(events: Sequence[Event], stretches: Sequence[tuple[int, int]]) -> list[Event]:
    """Invokes earlier and completions later by the given amounts (bounded, see the module doc)."""
    evs = sorted(events, key=lambda e: e.index)
    times = [e.time for e in evs]
    last_done: dict[int, int] = {}
    last_check = -(10**18)
    k = 0
    invoked: dict[int, int] = {}
    for i, e in enumerate(evs):
        if e.process == -1:
            last_check = e.time
            continue
        if e.type == "invoke":
            before = stretches[k % len(stretches)][0] if stretches else 0
            floor = max(last_done.get(e.process, -(10**18)), last_check)
            times[i] = max(floor, e.time - before)
            invoked[e.process] = i
        else:
            after = stretches[k % len(stretches)][1] if stretches else 0
            k += 1
            nxt = next((j for j in range(i + 1, len(evs)) if evs[j].process == e.process), None)
            ceiling = evs[nxt].time if nxt is not None else e.time + after
            times[i] = max(e.time, min(e.time + after, ceiling))
            last_done[e.process] = times[i]
    order = sorted(range(len(evs)), key=lambda i: (times[i], evs[i].index))
    return [
        Event(n, evs[i].process, evs[i].type, evs[i].f, evs[i].value, times[i]) for n, i in enumerate(order)
    ]


stretches = st.lists(st.tuples(st.sampled_from([0, 0, 3, 20]), st.sampled_from([0, 0, 3, 20])), max_size=6)

PERTURBATIONS = (
    "none",
    "code",
    "send_offset",
    "pull_offset",
    "drop_record",
    "dup_record",
    "corrupt_body",
    "corrupt_property",
    "drop_check",
    "dup_check",
    "move_check",
    "move_pull",
    "swap_sends",
)


def _reindex(evs: list[Event]) -> list[Event]:
    order = sorted(range(len(evs)), key=lambda i: (evs[i].time, i))
    return [
        Event(n, evs[i].process, evs[i].type, evs[i].f, evs[i].value, evs[i].time)
        for n, i in enumerate(order)
    ]


def _with(e: Event, value: dict[str, Any] | None = None, time: int | None = None) -> Event:
    return Event(
        e.index, e.process, e.type, e.f, e.value if value is None else value, e.time if time is None else time
    )


def perturb(events: Sequence[Event], kind: str, rnd: random.Random) -> list[Event]:
    """``events`` with one change of ``kind`` at a random place (unchanged if the kind finds none)."""
    evs = sorted(events, key=lambda e: e.index)
    done = [i for i, e in enumerate(evs) if e.process >= 0 and e.type != "invoke"]
    sends = [i for i in done if evs[i].f in ("send", "send_half") and evs[i].value.get("fields")]
    found = [i for i in done if evs[i].f == "pull" and evs[i].value.get("records")]
    checks = [i for i, e in enumerate(evs) if e.process == -1]
    pulls = [i for i in done if evs[i].f == "pull"]
    if kind == "none":
        return list(evs)
    if kind == "code" and done:
        i = rnd.choice(done)
        v = copy.deepcopy(evs[i].value)
        v["code"] = rnd.choice([1, 14, 17, 19, 20]) if v.get("code") == 0 else 0
        evs[i] = _with(evs[i], v)
    elif kind == "send_offset" and sends:
        i = rnd.choice(sends)
        v = copy.deepcopy(evs[i].value)
        v["fields"]["queue_offset"] = int(v["fields"]["queue_offset"]) + rnd.choice([-1, 1])
        evs[i] = _with(evs[i], v)
    elif kind == "pull_offset" and pulls:
        i = rnd.choice(pulls)
        v = copy.deepcopy(evs[i].value)
        field = rnd.choice(["next_begin_offset", "max_offset"])
        if field in v["fields"]:
            v["fields"][field] = int(v["fields"][field]) + rnd.choice([-1, 1])
        evs[i] = _with(evs[i], v)
    elif kind in ("drop_record", "dup_record", "corrupt_body", "corrupt_property") and found:
        i = rnd.choice(found)
        v = copy.deepcopy(evs[i].value)
        recs = v["records"]
        r = rnd.randrange(len(recs))
        if kind == "drop_record":
            del recs[r]
        elif kind == "dup_record":
            recs.insert(r, copy.deepcopy(recs[r]))
        elif kind == "corrupt_body":
            recs[r]["body"] = recs[r].get("body", "") + "X"
        else:
            recs[r]["properties"]["UNIQ_KEY"] = "K9999"
        evs[i] = _with(evs[i], v)
    elif kind == "drop_check" and checks:
        del evs[rnd.choice(checks)]
    elif kind == "dup_check" and checks:
        i = rnd.choice(checks)
        evs.insert(i + 1, _with(evs[i], time=evs[i].time + rnd.choice([0, 5])))
    elif kind == "move_check" and checks:
        i = rnd.choice(checks)
        evs[i] = _with(evs[i], time=max(0, evs[i].time + rnd.choice([-1500, -1, 1, 999, 1001, 2000])))
    elif kind == "move_pull" and pulls:
        i = rnd.choice(pulls)
        j = max(k for k in range(i) if evs[k].process == evs[i].process and evs[k].type == "invoke")
        delta = rnd.choice([-3000, -1000, -1, 1, 1000, 3000])
        lo = max([e.time for e in evs[:j] if e.process == evs[i].process] or [0])
        hi = min([e.time for e in evs[i + 1 :] if e.process == evs[i].process] or [10**18])
        if lo <= evs[j].time + delta and evs[i].time + delta <= hi:
            evs[j] = _with(evs[j], time=evs[j].time + delta)
            evs[i] = _with(evs[i], time=evs[i].time + delta)
    elif kind == "swap_sends" and len(sends) >= 2:
        a, b = rnd.sample(sends, 2)
        va, vb = copy.deepcopy(evs[a].value), copy.deepcopy(evs[b].value)
        evs[a], evs[b] = _with(evs[a], vb), _with(evs[b], va)
    return _reindex(evs)

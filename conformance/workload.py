"""The wall-clock workload: many operations at once in one timeline, checked as a whole at the end.

Jepsen style: producer, consumer and check-responder threads drive a wall-clock target concurrently
for a while, then the workload waits for everything due to come due, reads every queue to its end,
and the history checker judges the whole history. Each producer owns its topic, so no two operations
race on one queue and the checker's model sees queue offsets in the broker's own order: producer ``i``
sends plain and half messages to ``W…_i`` and delayed ones to ``W…_id`` (which only the broker's delivery
service writes), and it answers the check requests for its own messages itself, so a commit never races
with its sends. The retry topic is written only by the delivery service, the DLQ only by the consumer.
System topics (SCHEDULE_TOPIC_XXXX, RMQ_SYS_TRANS_HALF_TOPIC) are written by every producer and by the
broker at once; their queue offsets depend on the interleaving and are not compared (``shared``).
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
import time
from collections.abc import Callable

import attrs

from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import Prop, TxAction
from rmqspec.reference.model import ConsumerSendBack, EndTx, Heartbeat, Pull, Send
from rmqspec.reference.put import Message
from rmqspec.reference.records import Record, props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

from .checker import Verdict, check_history
from .contract import CheckEvent, Target, TargetError
from .history import Event, RecordingTarget


def _offset_id(msg_id: str) -> bool:
    """An offset message id whose last 16 hex digits are a commit-log offset (wire/offset-msg-id)."""
    return len(msg_id) in (32, 56) and all(c in "0123456789ABCDEFabcdef" for c in msg_id)


@attrs.frozen
class WorkloadResult:
    verdict: Verdict
    events: tuple[Event, ...]
    operations: int
    seconds: float
    restarts: int = 0

    def acknowledged(self) -> int:
        """Messages the broker acknowledged: sends (and batch members) answered SUCCESS."""
        n = 0
        for e in self.events:
            if e.type == "ok" and e.f in ("send", "send_half") and e.value.get("code") == 0:
                n += 1
        return n

    def duplicates(self) -> int:
        """Copies read more than once in one queue (a redelivery the spec allows after a restart)."""
        # Retry copies share the UNIQ_KEY but differ in reconsumeTimes: only the same copy stored twice
        # (a delivery repeated after a restart, a transaction committed twice) is a duplicate.
        seen: dict[tuple[str, str, int, int, int], set[int]] = {}
        for e in self.events:
            if e.f == "pull" and e.type == "ok":
                for r in e.value.get("records", []):
                    uniq = (r.get("properties") or {}).get("UNIQ_KEY")
                    if uniq:
                        key = (
                            uniq,
                            str(r.get("topic")),
                            int(r.get("queue_id", 0)),
                            int(r.get("reconsume_times", 0)),
                            int(r.get("sys_flag", 0)),
                        )
                        seen.setdefault(key, set()).add(int(r.get("queue_offset", -1)))
        return sum(len(offsets) - 1 for offsets in seen.values() if len(offsets) > 1)


@attrs.frozen
class Chaos:
    """Broker restarts during a workload: every ``every_s`` seconds (drawn from [0.5, 1.5] times it),
    ``restart(graceful)`` stops the broker (SIGTERM when graceful, else SIGKILL) and starts it again on
    the same store, returning once it answers, and says whether the broker's shutdown ran (None: not
    known). Each restart is an event of the history; its completion says how the broker stopped."""

    restart: Callable[[bool], bool | None]
    every_s: float = 12.0


class _SafeRecorder(RecordingTarget):
    """A recording target safe to share between threads (one lock around each call's bookkeeping)."""

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.lock = threading.Lock()

    def _add(self, process: int, type_: str, f: str, value: dict[str, object], time_: int) -> None:
        with self.lock:
            super()._add(process, type_, f, value, time_)


def run_workload(
    target: Target,
    *,
    seconds: float = 20.0,
    producers: int = 2,
    seed: int = 0,
    epsilon_ms: int = 1000,
    levels: int = 2,
    progress: Callable[[str], None] | None = None,
    chaos: Chaos | None = None,
) -> WorkloadResult:
    """Drive ``target`` concurrently for ``seconds``, then settle, read everything and check the history.

    ``levels`` delay levels are used in all, each by one producer only: levels 1, 2, then those above
    the consumer's retry levels (3 and 4, for reconsumeTimes 0 and 1), so that no schedule queue is
    written by two clients at once (the order of racing writes is the broker's choice, and the per-level
    FIFO makes it observable).
    """
    cfg: BrokerConfig = target.info.config
    free = [lv for lv in [1, 2, *range(5, cfg.max_delay_level + 1)] if lv <= cfg.max_delay_level]
    used = free[: max(1, levels)]
    mine = [used[i::producers] or [used[i % len(used)]] for i in range(producers)]
    rec = _SafeRecorder(target)
    run = f"{seed:x}{int(time.time()) % 100000:x}"
    group, pgroup = f"CG_w{run}", f"PG_w{run}"
    topics = [f"W{run}_{i}" for i in range(producers)]
    delayed = [f"{t}d" for t in topics]
    inbox: list[queue.SimpleQueue[CheckEvent]] = [queue.SimpleQueue() for _ in range(producers)]
    stop = threading.Event()
    halves: list[tuple[str, int, str]] = []
    pulled: list[Record] = []
    lock = threading.Lock()
    ops = [0]
    with contextlib.suppress(TargetError):  # recorded either way: an unknown outcome, judged as such
        rec.execute(Heartbeat(pgroup), process=0)

    def producer(i: int) -> None:
        rnd = random.Random(seed * 1000 + i)
        n = 0
        while not stop.is_set():
            n += 1
            uniq = f"{run}{i:02X}{n:08X}".upper().rjust(32, "0")
            kind = rnd.random()
            try:
                while not inbox[i].empty():  # answer the broker's checks of this producer's messages
                    c = inbox[i].get_nowait()
                    answer = rnd.choice([TxAction.COMMIT, TxAction.ROLLBACK, TxAction.UNKNOW])
                    check_req = EndTransaction(
                        pgroup,
                        c.tran_state_table_offset,
                        c.commit_log_offset,
                        answer,
                        True,
                        msg_id=c.message.properties.get(Prop.UNIQ_KEY),  # what Java's check answer sends
                        transaction_id=c.message.properties.get(Prop.UNIQ_KEY),
                    )
                    rec.execute(EndTx(check_req), process=1 + i)
                if kind < 0.35:
                    rec.execute(
                        Send(Message(topics[i], b"p", props(UNIQ_KEY=uniq, WAIT="true"))), process=1 + i
                    )
                elif kind < 0.8:
                    level = rnd.choice(mine[i])
                    p = props(UNIQ_KEY=uniq, WAIT="true", DELAY=str(level))
                    rec.execute(Send(Message(delayed[i], b"d", p)), process=1 + i)
                else:
                    p = props(UNIQ_KEY=uniq, WAIT="true", TRAN_MSG="true", PGROUP=pgroup)
                    resp = rec.execute(
                        Send(Message(topics[i], b"t", p, sys_flag=4, producer_group=pgroup)), process=1 + i
                    )
                    table, msg_id = resp.fields.get("queue_offset"), str(resp.fields.get("msg_id", ""))
                    # An answer without the offsets to end it by (judged by the checker): left to the check.
                    if resp.code == 0 and isinstance(table, int) and _offset_id(msg_id):
                        action = rnd.choice([TxAction.COMMIT, TxAction.ROLLBACK, TxAction.UNKNOW, None])
                        if action is None:
                            with lock:
                                halves.append((uniq, table, msg_id))
                        else:
                            req = EndTransaction(
                                pgroup,
                                table,
                                int(msg_id[-16:], 16),
                                action,
                                msg_id=uniq,  # the Java send result's msgId: the half's UNIQ_KEY
                                transaction_id=uniq,
                            )
                            rec.execute(EndTx(req), process=1 + i)
            except TargetError:
                pass
            ops[0] += 1
            time.sleep(rnd.uniform(0.01, 0.1))

    offsets: dict[tuple[str, int], int] = {}

    def pull_all(process: int, rnd: random.Random | None) -> None:
        for topic in [*topics, *delayed, f"%RETRY%{group}", f"%DLQ%{group}"]:
            while True:
                off = offsets.get((topic, 0), 0)
                try:
                    resp = rec.execute(Pull(topic, 0, off, 32, group), process=process)
                except TargetError:
                    break
                nxt = resp.fields.get("next_begin_offset")
                if resp.code != 0 or not resp.records or not isinstance(nxt, int) or nxt <= off:
                    break  # nothing more to read here (a bad answer is the checker's to judge)
                offsets[(topic, 0)] = nxt
                for r in resp.records:
                    if rnd is not None and r.reconsume_times < 2 and rnd.random() < 0.3:
                        level = rnd.choice([0, 0, -1])
                        with contextlib.suppress(TargetError):
                            rec.execute(
                                ConsumerSendBack(
                                    SendBack(
                                        group,
                                        r.commit_log_offset,
                                        level,
                                        2,
                                        origin_topic=r.properties.get(Prop.RETRY_TOPIC) or r.topic,
                                    )
                                ),
                                process=process,
                            )
                with lock:
                    pulled.extend(resp.records)

    def consumer() -> None:
        rnd = random.Random(seed + 7)
        while not stop.is_set():
            pull_all(90, rnd)
            time.sleep(0.05)

    restarts = [0]

    def chaos_thread() -> None:
        assert chaos is not None
        rnd = random.Random(seed + 99)
        while not stop.wait(chaos.every_s * rnd.uniform(0.5, 1.5)):
            graceful = restarts[0] % 2 == 0  # SIGTERM, then SIGKILL, alternately
            t0 = rec.now()
            rec.note(0, "invoke", "restart", {"graceful": graceful})
            try:
                orderly = chaos.restart(graceful)
            except Exception as e:  # the broker did not come back: the rest is judged as unknown
                rec.note(0, "info", "restart", {"error": f"{type(e).__name__}: {e}"})
                return
            restarts[0] += 1
            stopped = graceful if orderly is None else orderly  # a SIGTERM not honoured in time: SIGKILL
            rec.note(0, "ok", "restart", {"graceful": stopped, "down_ms": rec.now() - t0})
            with contextlib.suppress(TargetError):  # producers register again at once after a restart
                rec.execute(Heartbeat(pgroup), process=0)

    def checker_thread() -> None:
        while not stop.is_set():
            for c in rec.advance_to(rec.now() + 100):
                real = c.message.properties.get(Prop.REAL_TOPIC)
                if c.group == pgroup and real in topics:
                    inbox[topics.index(real)].put(c)

    start = time.perf_counter()
    threads = [threading.Thread(target=producer, args=(i,), daemon=True) for i in range(producers)]
    threads += [
        threading.Thread(target=consumer, daemon=True),
        threading.Thread(target=checker_thread, daemon=True),
    ]
    if chaos is not None:
        threads.append(threading.Thread(target=chaos_thread, daemon=True, name="rmqspec-chaos"))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=120 if t.name == "rmqspec-chaos" else 30)
    if progress:
        progress("settling")
    settle = max(cfg.delay_levels[lv - 1] for lv in used) * 2 + 2 * epsilon_ms
    settle_until = rec.now() + settle
    while rec.now() < settle_until:
        rec.advance_to(min(settle_until, rec.now() + 500))
    pull_all(90, None)
    verdict = check_history(rec.events, cfg, epsilon_ms=epsilon_ms, shared=True)
    return WorkloadResult(verdict, tuple(rec.events), ops[0], time.perf_counter() - start, restarts[0])

"""The Hypothesis state machine that drives any target and checks the history after every step.

``conformance_machine(make_target, config)`` returns a RuleBasedStateMachine class; ``run_machine``
runs it (the analogue of Hypothesis' ``run_conformance_test``: the suite is a library other projects
import). Rule selection is swarm-style: each run enables a random subset of operation kinds, so long
runs of one kind happen. A target with feature ``restart`` is restarted too, an orderly stop or a crash
where it can do either (``contract.restart_ways``), and the checker judges the history across it. A failure is shrunk by Hypothesis and the shrunk history is saved to a file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rmqspec.reference.batch import Batch, BatchEntry
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import TxAction
from rmqspec.reference.model import ConsumerSendBack, EndTx, Heartbeat, Pull, Send, SendBatch
from rmqspec.reference.put import Message
from rmqspec.reference.records import Record, props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

from .checker import Checker, Verdict
from .contract import Feature, Target, restart_ways
from .history import RecordingTarget, save

KINDS = ("send", "delay", "batch", "pull", "sendback", "half", "end_tx", "advance", "heartbeat", "restart")
TOPICS = ("TopicA", "TopicB")
GROUP = "CG_m"
PGROUP = "PG_m"
PULL_TOPICS = (*TOPICS, f"%RETRY%{GROUP}", f"%DLQ%{GROUP}", "TRANS_CHECK_MAX_TIME_TOPIC")


class ConformanceFailure(AssertionError):
    """The checker found anomalies; the message lists them and where the history was saved."""


def conformance_machine(
    make_target: Callable[[BrokerConfig], Target],
    config: BrokerConfig,
    *,
    epsilon_ms: int = 0,
    save_dir: Path | None = None,
    on_verdict: Callable[[Verdict, int], None] | None = None,
) -> type[RuleBasedStateMachine]:
    counter = itertools.count()

    class Machine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.target = RecordingTarget(make_target(config))
            self.checker = Checker(config, epsilon_ms=epsilon_ms)
            self.fed = 0
            self.kinds: frozenset[str] = frozenset(KINDS)
            self.offsets: dict[tuple[str, int], int] = {}
            self.pulled: list[Record] = []
            self.halves: list[tuple[str, int, str]] = []  # (uniq, table offset, msg id)
            self.n = next(counter)
            self.seq = 0

        def uniq(self) -> str:
            self.seq += 1
            return f"{self.n:08X}{self.seq:024X}"

        @initialize(kinds=st.sets(st.sampled_from(KINDS), min_size=1))
        def swarm(self, kinds: set[str]) -> None:
            self.kinds = frozenset(kinds | {"pull"})
            self.target.execute(Heartbeat(PGROUP))

        def on(self, kind: str) -> bool:
            return kind in self.kinds

        @precondition(lambda self: self.on("send"))
        @rule(
            topic=st.sampled_from((*TOPICS, *TOPICS, "SCHEDULE_TOPIC_XXXX", "bad topic")),
            queue=st.sampled_from([0, 1, 1, 7]),
            tags=st.sampled_from(["a", "b", ""]),
        )
        def send(self, topic: str, queue: int, tags: str) -> None:
            p = {"UNIQ_KEY": self.uniq(), "WAIT": "true"}
            if tags:
                p["TAGS"] = tags
            self.target.execute(Send(Message(topic, b"m", props(p), queue_id=queue, producer_group="PG")))

        @precondition(lambda self: self.on("delay"))
        @rule(
            topic=st.sampled_from(TOPICS),
            queue=st.integers(0, 1),
            level=st.sampled_from([1, 2, 3, 4, 17, 18, 19, 99]),
        )
        def send_delayed(self, topic: str, queue: int, level: int) -> None:
            p = {"UNIQ_KEY": self.uniq(), "WAIT": "true", "DELAY": str(level)}
            self.target.execute(Send(Message(topic, b"d", props(p), queue_id=queue)))

        @precondition(lambda self: self.on("batch"))
        @rule(n=st.integers(1, 3), delay=st.booleans())
        def send_batch(self, n: int, delay: bool) -> None:
            entries = tuple(BatchEntry(b"b", props(UNIQ_KEY=self.uniq(), WAIT="true")) for _ in range(n))
            wrapper = props(DELAY="2") if delay else props()
            self.target.execute(SendBatch(Batch("TopicA", entries, queue_id=0, properties=wrapper)))

        @precondition(lambda self: self.on("send"))
        @rule(reconsume=st.integers(0, 3), max_times=st.sampled_from([None, 1, 2]))
        def send_retry(self, reconsume: int, max_times: int | None) -> None:
            """The client's fallback: a normal send to %RETRY%<group> with DELAY = 3 + reconsumeTimes."""
            p = props(UNIQ_KEY=self.uniq(), WAIT="true", DELAY=str(3 + reconsume), RETRY_TOPIC="TopicA")
            self.target.execute(
                Send(
                    Message(
                        f"%RETRY%{GROUP}",
                        b"r",
                        p,
                        queue_id=0,
                        reconsume_times=reconsume,
                        max_reconsume_times=max_times,
                    )
                )
            )

        @precondition(lambda self: self.on("half"))
        @rule(topic=st.sampled_from(TOPICS), immunity=st.sampled_from([None, None, "90"]))
        def send_half(self, topic: str, immunity: str | None) -> None:
            uniq = self.uniq()
            p = props(UNIQ_KEY=uniq, WAIT="true", TRAN_MSG="true", PGROUP=PGROUP)
            if immunity is not None:
                p = p.set("CHECK_IMMUNITY_TIME_IN_SECONDS", immunity)
            resp = self.target.execute(
                Send(Message(topic, b"t", p, queue_id=0, sys_flag=4, producer_group=PGROUP))
            )
            if resp.code == 0:
                self.halves.append((uniq, int(resp.fields["queue_offset"]), str(resp.fields["msg_id"])))  # type: ignore[call-overload]

        @precondition(lambda self: self.on("end_tx") and bool(self.halves))
        @rule(
            data=st.data(),
            action=st.sampled_from([TxAction.COMMIT, TxAction.ROLLBACK, TxAction.UNKNOW]),
            group=st.sampled_from([PGROUP, PGROUP, PGROUP, "PG_other"]),
        )
        def end_tx(self, data: st.DataObject, action: TxAction, group: str) -> None:
            uniq, table, msg_id = data.draw(st.sampled_from(self.halves))
            req = EndTransaction(
                group, table, int(msg_id[-16:], 16), action, msg_id=uniq, transaction_id=uniq
            )
            self.target.execute(EndTx(req))

        @precondition(lambda self: self.on("heartbeat"))
        @rule(online=st.booleans())
        def heartbeat(self, online: bool) -> None:
            self.target.execute(Heartbeat(PGROUP, online))

        @rule(
            topic=st.sampled_from(
                (*TOPICS, f"%RETRY%{GROUP}", f"%DLQ%{GROUP}", "TRANS_CHECK_MAX_TIME_TOPIC")
            ),
            queue=st.integers(0, 1),
        )
        def pull(self, topic: str, queue: int) -> None:
            self.pull_queue(topic, queue)

        def pull_queue(self, topic: str, queue: int) -> None:
            off = self.offsets.get((topic, queue), 0)
            resp = self.target.execute(Pull(topic, queue, off, 32, GROUP))
            if resp.code == 0:
                self.offsets[(topic, queue)] = int(resp.fields["next_begin_offset"])  # type: ignore[call-overload]
                self.pulled.extend(resp.records)

        @precondition(lambda self: self.on("sendback") and bool(self.pulled))
        @rule(data=st.data(), level=st.sampled_from([0, 1]), max_times=st.sampled_from([None, 3]))
        def send_back(self, data: st.DataObject, level: int, max_times: int | None) -> None:
            rec = data.draw(st.sampled_from(self.pulled))
            self.target.execute(ConsumerSendBack(SendBack(GROUP, rec.commit_log_offset, level, max_times)))

        @precondition(lambda self: self.on("sendback") and bool(self.pulled))
        @rule(data=st.data())
        def send_back_dlq(self, data: st.DataObject) -> None:
            """The consumer asks for the DLQ at once (delayLevel -1)."""
            rec = data.draw(st.sampled_from(self.pulled))
            self.target.execute(ConsumerSendBack(SendBack(GROUP, rec.commit_log_offset, -1)))

        @precondition(lambda self: self.on("sendback") and any(r.reconsume_times > 0 for r in self.pulled))
        @rule(data=st.data(), extra=st.sampled_from([0, 1]))
        def send_back_at_max(self, data: st.DataObject, extra: int) -> None:
            """A retried message sent back with the header's maxReconsumeTimes at (or above) its count."""
            rec = data.draw(st.sampled_from([r for r in self.pulled if r.reconsume_times > 0]))
            max_times = rec.reconsume_times + extra
            self.target.execute(ConsumerSendBack(SendBack(GROUP, rec.commit_log_offset, 0, max_times)))

        @precondition(lambda self: self.on("restart") and Feature.RESTART in self.target.info.features)
        @rule(graceful=st.booleans())
        def restart(self, graceful: bool) -> None:
            """The broker stops (orderly or crashing, where the target can do either) and starts again on
            its store; the producer registers again at once, as the chaos workload's do (a restart forgets
            every producer, transaction/check-no-producer)."""
            self.target.restart(graceful=graceful if restart_ways(self.target.target) else None)
            self.target.execute(Heartbeat(PGROUP))

        @precondition(lambda self: self.on("advance"))
        @rule(ms=st.sampled_from([1, 999, 1000, 2000, 5000, 9999, 10_000, 55_000, 60_000, 600_000]))
        def advance(self, ms: int) -> None:
            self.target.advance_to(self.target.now() + ms)

        @invariant()
        def history_is_valid(self) -> None:
            events = self.target.events
            while self.fed < len(events):
                self.checker.feed(events[self.fed])
                self.fed += 1
            if self.checker.anomalies:
                self.fail()

        def fail(self) -> None:
            verdict = self.checker.finish()
            where = ""
            if save_dir is not None:
                save_dir.mkdir(parents=True, exist_ok=True)
                path = save_dir / f"{self.target.info.name.replace(':', '_')}.jsonl"
                save(self.target.events, path, {"target": self.target.info.name})
                where = f"\nshrunk history saved to {path}"
            if on_verdict is not None:
                on_verdict(verdict, len([e for e in self.target.events if e.type == "invoke"]))
            lines = "\n".join(
                f"  {a.name} [{a.rule}] at event {a.event}: {a.message}" for a in verdict.anomalies
            )
            raise ConformanceFailure(
                f"{len(verdict.anomalies)} anomal{'y' if len(verdict.anomalies) == 1 else 'ies'}:\n{lines}{where}"
            )

        def teardown(self) -> None:
            try:
                if not self.checker.anomalies:
                    horizon = (
                        max(config.delay_levels)
                        + config.transaction_check_interval_ms * (config.transaction_check_max + 2)
                        + epsilon_ms
                        + 1
                    )
                    self.target.advance_to(self.target.now() + min(horizon, 8 * 3_600_000))
                    for topic in PULL_TOPICS:
                        for queue in (0, 1):
                            self.pull_queue(topic, queue)
                    self.history_is_valid()
                    verdict = self.checker.finish()
                    if on_verdict is not None:
                        on_verdict(verdict, len([e for e in self.target.events if e.type == "invoke"]))
                    if verdict.status == "fail":
                        self.fail()
            finally:
                self.target.close()

    Machine.__name__ = "ConformanceMachine"
    return Machine


def run_machine(
    make_target: Callable[[BrokerConfig], Target],
    config: BrokerConfig,
    *,
    max_examples: int = 50,
    stateful_step_count: int = 30,
    epsilon_ms: int = 0,
    save_dir: Path | None = None,
    seed: int | None = 0,
    on_verdict: Callable[[Verdict, int], None] | None = None,
    shrink: bool = True,
) -> str | None:
    """Run the state machine; None when it passes, else the failure message (shrunk unless ``shrink`` is off)."""
    from hypothesis import Phase
    from hypothesis import seed as hseed
    from hypothesis.stateful import run_state_machine_as_test

    machine = conformance_machine(
        make_target, config, epsilon_ms=epsilon_ms, save_dir=save_dir, on_verdict=on_verdict
    )
    s = settings(
        max_examples=max_examples,
        stateful_step_count=stateful_step_count,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=False,
        print_blob=False,
        phases=[Phase.explicit, Phase.generate, *([Phase.shrink] if shrink else [])],
    )

    def runner() -> None:
        run_state_machine_as_test(machine, settings=s)

    run: Any = hseed(seed)(runner) if seed is not None else runner
    try:
        run()
    except ConformanceFailure as e:
        return str(e)
    return None

"""Histories for trace verification: a model-driven workload on a logical clock, deterministic per seed.

Each history drives the reference model (or a mutant of it) through the in-process target with a
random but seeded mix of what production traffic does: plain and delayed sends (each producer on its
own topics and levels), half messages ended at once or left for the check service (whose requests the
producer answers), and a consumer that reads every queue and sends some messages back (to the retry
topic, or at once to the DLQ). The history ends by letting everything come due and reading every
queue to its end, so the checker can judge every message. Nothing here reads a clock: the same seed
gives the same history, byte for byte.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import TxAction
from rmqspec.reference.model import ConsumerSendBack, EndTx, Heartbeat, Model, Pull, Send
from rmqspec.reference.put import Message
from rmqspec.reference.records import props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

from .contract import CheckEvent, Target, TargetError
from .history import Event, RecordingTarget

# Makes the target a history drives from the model (or mutant) it runs: the in-process target on a
# logical clock (``rmqspec.adapters.inprocess.InProcessTarget``; a class, so it reaches worker processes).
TargetMaker = Callable[[Model], Target]

# The settings traces are generated with (the short table of profiles/short-levels.yaml).
TRACE_CONFIG = BrokerConfig(
    "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s",
    transaction_timeout_ms=3000,
    transaction_check_interval_ms=5000,
    transaction_check_max=3,
)
PRODUCERS = 2
LEVELS = ((1, 5), (2, 6))  # producer i's delay levels: never the retry levels 3 and 4
GROUP, PGROUP = "CG", "PG"
MAX_RECONSUME = 2


def _model(config: BrokerConfig, mutant: str | None) -> Model:
    if mutant is None:
        return Model(config)
    from .mutants import MUTANTS

    return MUTANTS[mutant].model(config)


def generate_history(
    seed: int,
    events: int,
    *,
    make_target: TargetMaker,
    config: BrokerConfig = TRACE_CONFIG,
    mutant: str | None = None,
) -> list[Event]:
    """About ``events`` events (a few more: the history always ends settled and read to the end).

    ``make_target`` must give a target on a logical clock, so that the same seed gives the same history.
    """
    rnd = random.Random(seed)
    rec = RecordingTarget(make_target(_model(config, mutant)))
    topics = [f"T{i}" for i in range(PRODUCERS)]
    delayed = [f"D{i}" for i in range(PRODUCERS)]
    queues = [*topics, *delayed, f"%RETRY%{GROUP}", f"%DLQ%{GROUP}"]
    offsets = dict.fromkeys(queues, 0)
    n = 0

    def run(op: object, process: int) -> object:
        try:
            return rec.execute(op, process)  # type: ignore[arg-type]
        except TargetError:
            return None

    def answer(checks: list[CheckEvent]) -> None:
        for c in checks:
            real = c.message.properties.get("REAL_TOPIC", "")
            process = 1 + topics.index(real) if real in topics else 1
            action = rnd.choice([TxAction.COMMIT, TxAction.ROLLBACK, TxAction.UNKNOW])
            req = EndTransaction(
                PGROUP,
                c.tran_state_table_offset,
                c.commit_log_offset,
                action,
                True,
                transaction_id=c.message.properties.get("UNIQ_KEY"),
            )
            run(EndTx(req), process)

    def pull_all(send_back: bool) -> None:
        for topic in queues:
            stuck = False
            while not stuck:
                resp = run(Pull(topic, 0, offsets[topic], 32, GROUP), 9)
                if resp is None or resp.code != 0 or not resp.records:  # type: ignore[attr-defined]
                    break
                nxt = int(resp.fields.get("next_begin_offset", -1))  # type: ignore[attr-defined]
                stuck = nxt <= offsets[topic]  # a broker whose pulls do not move on: read it no further
                offsets[topic] = max(nxt, offsets[topic])
                for r in resp.records:  # type: ignore[attr-defined]
                    if send_back and not topic.startswith("%DLQ%") and rnd.random() < 0.25:
                        level = rnd.choice([0, 0, 0, -1])
                        run(ConsumerSendBack(SendBack(GROUP, r.commit_log_offset, level, MAX_RECONSUME)), 9)

    run(Heartbeat(PGROUP), 0)
    while len(rec.events) < events:
        answer(rec.advance_to(rec.now() + rnd.randint(20, 400)))
        i = rnd.randrange(PRODUCERS)
        n += 1
        uniq = f"{seed:016X}{n:016X}"
        kind = rnd.random()
        if kind < 0.3:
            run(Send(Message(topics[i], b"p", props(UNIQ_KEY=uniq))), 1 + i)
        elif kind < 0.6:
            level = rnd.choice(LEVELS[i])
            run(Send(Message(delayed[i], b"d", props(UNIQ_KEY=uniq, DELAY=str(level)))), 1 + i)
        elif kind < 0.75:
            p = props(UNIQ_KEY=uniq, TRAN_MSG="true", PGROUP=PGROUP)
            resp = run(Send(Message(topics[i], b"t", p, sys_flag=4, producer_group=PGROUP)), 1 + i)
            if resp is not None and resp.code == 0 and rnd.random() < 0.6:  # type: ignore[attr-defined]
                fields = resp.fields  # type: ignore[attr-defined]
                action = rnd.choice([TxAction.COMMIT, TxAction.ROLLBACK, TxAction.UNKNOW])
                req = EndTransaction(
                    PGROUP,
                    int(fields["queue_offset"]),
                    int(str(fields["msg_id"])[-16:], 16),
                    action,
                    transaction_id=uniq,
                )
                run(EndTx(req), 1 + i)
        else:
            pull_all(send_back=True)
    # Settle: everything due comes due (the longest level used, the retry levels, the check rounds).
    horizon = max(config.delay_ms(lv) or 0 for lv in (*LEVELS[0], *LEVELS[1], 3, 4))
    horizon = max(horizon, config.transaction_check_interval_ms * (config.transaction_check_max + 1))
    end = rec.now() + horizon + 1000
    while rec.now() < end:
        answer(rec.advance_to(min(end, rec.now() + 1000)))
    pull_all(send_back=False)
    return rec.events


def generate(
    seeds: range, events: int, make_target: TargetMaker, mutant: str | None = None
) -> Iterator[tuple[str, list[Event]]]:
    """``(history_id, events)`` for each seed; the id is the seed in hex (and the mutant's name)."""
    for s in seeds:
        history = generate_history(s, events, make_target=make_target, mutant=mutant)
        yield (f"{mutant + ':' if mutant else ''}{s:08x}", history)


def _write_file(job: tuple[str, int, int, int, str | None, str, TargetMaker]) -> tuple[str, int, int]:
    """Worker: histories ``first .. first + count - 1`` into one file; returns (path, histories, rows)."""
    from .trace_format import config_to_json, rows_of, write_jsonl, write_parquet

    path, first, count, events, mutant, fmt, make_target = job

    def rows() -> Iterator[dict[str, object]]:
        for hid, evs in generate(range(first, first + count), events, make_target, mutant):
            yield from rows_of(hid, evs)

    p = Path(path)
    # The settings the histories were made with travel in the file: verify judges by them by default.
    meta = {"mutant": mutant, "config": config_to_json(TRACE_CONFIG)}
    n = write_parquet(p, rows(), meta=meta) if fmt == "parquet" else write_jsonl(p, rows(), meta)
    return path, count, n


def write_traces(
    out: Path,
    *,
    histories: int,
    events: int,
    make_target: TargetMaker,
    seed: int = 0,
    mutant: str | None = None,
    fmt: str = "parquet",
    files: int | None = None,
    workers: int | None = None,
) -> tuple[list[Path], int]:
    """Write ``histories`` histories (seeds ``seed ..``) into ``files`` files; returns (files, rows).

    The content depends only on the arguments, not on ``workers``: file k always holds the same seeds.
    """
    import os
    from multiprocessing import Pool

    cores = os.cpu_count() or 1
    files = files or max(cores * 2, min(64, histories // 1000 or 1))
    files = max(1, min(files, histories))
    out.mkdir(parents=True, exist_ok=True)
    per, extra = divmod(histories, files)
    jobs = []
    first = seed
    for k in range(files):
        count = per + (1 if k < extra else 0)
        name = out / f"part-{k:05d}.{'parquet' if fmt == 'parquet' else 'jsonl'}"
        jobs.append((str(name), first, count, events, mutant, fmt, make_target))
        first += count
    if (workers or cores) > 1 and files > 1:
        with Pool(min(workers or cores, files)) as pool:
            done = pool.map(_write_file, jobs)
    else:
        done = [_write_file(j) for j in jobs]
    return [Path(p) for p, _, _ in done], sum(n for _, _, n in done)

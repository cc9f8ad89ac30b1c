"""The model's per-operation cost as the store grows (issue 2): put + dispatch + deliver + pull.

One cycle sends a level-1 delayed message (put and dispatch), runs the schedule service at its deliver
time (deliver and dispatch), and pulls the delivered copy. Cycles are timed on states that already
hold 10^3 ... 10^6 stored messages; the ratio to the 10^3 row is the number to watch (goal: <= 1.5x).
"""

from __future__ import annotations

import gc
import resource
import time

from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model
from rmqspec.reference.put import Message
from rmqspec.reference.records import props
from rmqspec.reference.state import BrokerState

T0 = 1_700_000_000_000
FILL_TOPICS = 16


def build(model: Model, n: int) -> tuple[BrokerState, int]:
    """A state holding ``n`` stored messages spread over FILL_TOPICS topics x 4 queues."""
    state = model.initial()
    now = T0
    for i in range(n):
        msg = Message(f"Fill{i % FILL_TOPICS}", b"x" * 16, props(UNIQ_KEY=f"F{i:031X}"), queue_id=i % 4)
        state, _ = model.send(state, msg, now)
        now += 1
    return state, now


def cycle_cost(model: Model, state: BrokerState, now: int, cycles: int) -> float:
    """Microseconds per put + dispatch + deliver + pull cycle."""
    delay = model.config.delay_levels[0]
    start = time.perf_counter()
    for i in range(cycles):
        msg = Message("BenchT", b"payload", props(UNIQ_KEY=f"B{i:031X}", DELAY="1"))
        state, _ = model.send(state, msg, now)
        now += delay
        state, _ = model.deliver(state, now)
        result = model.pull(state, "BenchT", 0, i, 1)
        assert not isinstance(result, Exception)
    return (time.perf_counter() - start) / cycles * 1e6


def main(quick: bool = False) -> None:
    model = Model(BrokerConfig())
    sizes = [10**3, 10**4, 10**5] if quick else [10**3, 10**4, 10**5, 10**6]
    print("== reference model: put + dispatch + deliver + pull per cycle ==")
    print(f"{'stored':>10} {'build s':>8} {'us/cycle':>9} {'ratio':>6} {'peak MiB':>9}")
    base = None
    for n in sizes:
        gc.collect()
        t = time.perf_counter()
        state, now = build(model, n)
        built = time.perf_counter() - t
        cost = min(cycle_cost(model, state, now, 2000) for _ in range(5))
        base = base or cost
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{n:>10} {built:>8.1f} {cost:>9.1f} {cost / base:>6.2f} {rss:>9.0f}")
        del state
    print("goal: ratio <= 1.5 at 10^6 (peak MiB: the process's maximum resident set so far)")

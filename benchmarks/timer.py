"""The timer scenarios' wall time: on the model (logical clock) and on a real Apache RocketMQ 5.5.0 broker.

``python -m benchmarks --only timer``. The real-broker line needs Java 17 and the 5.5.0 jars in rmqspec's
cache (``rmqspec broker fetch --version 5.5.0``); without them it says so and measures the model only.
It runs every ``timer/`` scenario of the spec with ``profiles/short-levels-5.yaml`` on ``apache:5.5.0``
(brokers started and stopped by the suite: the main one, one per pinned configuration, one per scenario
that restarts or needs a broker of its own) and prints the total and the slowest scenarios.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rmqspec.conform import conform
from rmqspec.conformance.scenarios import catalogue

PROFILE = Path(__file__).resolve().parents[1] / "profiles" / "short-levels-5.yaml"


def _real_broker_ready() -> str | None:
    """Why the real 5.5.0 run cannot happen here (None: it can)."""
    from rmqspec.adapters.apache.maven import cached

    if shutil.which("java") is None:
        return "no java on PATH"
    if cached("5.5.0") is None:
        return "Apache RocketMQ 5.5.0 is not in rmqspec's cache (rmqspec broker fetch --version 5.5.0)"
    return None


def main(quick: bool = False) -> None:
    scenarios = [s for s in catalogue() if s.id.startswith("timer/")]
    start = time.perf_counter()
    rep = conform("reference", scenarios=scenarios, examples=0, profile=PROFILE)
    model_s = time.perf_counter() - start
    print(f"timer: {len(scenarios)} scenarios on the model (logical clock): {model_s:.2f} s, {rep.counts}")
    if quick:
        print("timer: real broker skipped (--quick)")
        return
    why = _real_broker_ready()
    if why is not None:
        print(f"timer: real broker skipped: {why}")
        return
    start = time.perf_counter()
    rep = conform("apache:5.5.0", scenarios=scenarios, profile=PROFILE, workload_seconds=0, concurrency=16)
    wall = time.perf_counter() - start
    slow = sorted(rep.scenarios, key=lambda r: -r.seconds)[:3]
    print(
        f"timer: {len(scenarios)} scenarios on apache:5.5.0: {wall:.0f} s of wall time "
        f"({rep.counts}); slowest: " + ", ".join(f"{r.scenario.id} {r.seconds:.1f} s" for r in slow)
    )

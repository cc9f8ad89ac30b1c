"""Each pinned Apache RocketMQ version's whole suite, in wall time, against the served reference's.

``python -m benchmarks --only real``. For every pinned version (``rmqspec broker versions``) it runs what
``make conform-real`` runs: every scenario that fits, on brokers the suite starts and stops (the main one,
one per pinned configuration, one per scenario that restarts or needs a broker of its own), then the
wall-clock workload (60 s; 20 s with ``--quick``), on the release line's short profile
(``profiles/short-levels.yaml``, ``profiles/short-levels-5.yaml``). The baseline, measured in the same run
on the same machine, is the model served over TCP here (``--target served``) with the same profile and
workload: the ratio says what a real broker costs over the suite's own overhead. A version whose jars are
not in rmqspec's cache, or a machine without Java, is said and skipped.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rmqspec.adapters.apache.maven import cached
from rmqspec.adapters.apache.versions import PINNED
from rmqspec.conform import conform
from rmqspec.reference.config import Profile

PROFILES = Path(__file__).resolve().parents[1] / "profiles"


def _profile(line: Profile) -> Path:
    return PROFILES / ("short-levels-5.yaml" if line == Profile.V5 else "short-levels.yaml")


def _run(target: str, profile: Path, seconds: float) -> tuple[float, str]:
    start = time.perf_counter()
    rep = conform(target, profile=profile, workload_seconds=seconds)
    wall = time.perf_counter() - start
    workload = rep.workload.verdict if rep.workload is not None else "none"
    return wall, f"{rep.counts}, workload {rep.machine_examples} operations {workload}"


def main(quick: bool = False) -> None:
    seconds = 20.0 if quick else 60.0
    if shutil.which("java") is None:
        print("real: skipped: no java on PATH")
        return
    baselines: dict[Path, float] = {}
    for version, pinned in PINNED.items():
        if cached(version) is None:
            print(
                f"real: apache:{version} skipped: not in rmqspec's cache (rmqspec broker fetch --version {version})"
            )
            continue
        profile = _profile(pinned.line)
        if profile not in baselines:
            wall, counts = _run("served", profile, seconds)
            baselines[profile] = wall
            print(
                f"real: served reference, {profile.name}, {seconds:.0f} s workload: {wall:.0f} s ({counts})"
            )
        wall, counts = _run(f"apache:{version}", profile, seconds)
        print(
            f"real: apache:{version}, {profile.name}, {seconds:.0f} s workload: {wall:.0f} s of wall time, "
            f"{wall / baselines[profile]:.2f}x the served reference ({counts})"
        )

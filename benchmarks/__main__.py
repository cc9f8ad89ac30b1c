"""``python -m benchmarks [--quick] [--only NAME] [--sizes N ...]``: the benchmarks of ``make bench``.

Each benchmark prints ratios against a baseline measured in the same run, so the numbers compare across
machines. ``--quick`` (CI smoke use) stops the model benchmark at 10^5 stored messages and shortens the
conformance one. The run is made reproducible: inputs are fixed, and the interpreter is restarted with
PYTHONHASHSEED=0 (as ``make bench`` sets it) when no seed was given, since str hashes decide the layout
of the model's hash maps.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
import time

from benchmarks import adversary, cluster, conformance, faultgen, model_ops, real, summary, timer, traces

BENCHMARKS = ("model_ops", "conformance", "traces", "cluster", "timer", "real", "adversary", "faultgen")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu ?"


def _mem_total_gib() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError):
        pass
    return "? GiB"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def machine_info() -> list[str]:
    from pyrsistent import pvector

    impl = type(pvector()).__module__
    pvector_impl = "C (pvectorc)" if impl == "pvectorc" else f"pure Python ({impl})"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return [
        f"python {platform.python_version()} ({platform.python_implementation()}, "
        f"{' '.join(platform.python_build())}), PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED', 'random')}",
        f"machine: {platform.machine()} {platform.system()} {platform.release()}, {_cpu_model()}, "
        f"{os.cpu_count()} CPUs, {_mem_total_gib()}; load average {load}",
        f"libraries: attrs {_version('attrs')}, immutables {_version('immutables')}, "
        f"pyrsistent {_version('pyrsistent')} (pvector: {pvector_impl}), hypothesis {_version('hypothesis')}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="rmqspec benchmarks (make bench)"
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke size: up to 10^5 stored messages")
    parser.add_argument("--only", choices=BENCHMARKS, action="append", help="run only this benchmark")
    parser.add_argument(
        "--sizes", type=int, nargs="+", metavar="N", help="model_ops: stored-message counts to measure at"
    )
    parser.add_argument("--cycles", type=int, default=model_ops.CYCLES, help="model_ops: cycles per repeat")
    parser.add_argument("--repeats", type=int, default=model_ops.REPEATS, help="model_ops: repeats (best of)")
    parser.add_argument(
        "--markdown", metavar="FILE", help="also write the summary table as Markdown (docs/performance.md)"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if argv is None and "PYTHONHASHSEED" not in os.environ:
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "benchmarks", *sys.argv[1:]])
    chosen = args.only or list(BENCHMARKS)
    for line in machine_info():
        print(line)
    start = time.perf_counter()
    if "model_ops" in chosen:
        model_ops.main(args.quick, args.sizes, args.cycles, args.repeats)
    if "conformance" in chosen:
        conformance.main(args.quick)
    if "traces" in chosen:
        traces.main(args.quick)
    if "cluster" in chosen:
        cluster.main(args.quick)
    if "timer" in chosen:
        timer.main(args.quick)
    if "real" in chosen:
        real.main(args.quick)
    if "adversary" in chosen:
        adversary.main(args.quick)
    if "faultgen" in chosen:
        faultgen.main(args.quick)
    seconds = time.perf_counter() - start
    print(f"benchmarks: {seconds:.0f} s")
    print(f"== issue 15: every measure beside its goal ({'quick' if args.quick else 'full'} size) ==")
    print(summary.table())
    if args.markdown:
        head = [
            f"Measured {time.strftime('%Y-%m-%d %H:%M %Z')} by `python -m benchmarks "
            f"{' '.join(sys.argv[1:])}` in {seconds:.0f} s.",
            "",
            *(f"- {line}" for line in machine_info()),
            "",
        ]
        with open(args.markdown, "w") as f:
            f.write("\n".join([*head, summary.table(markdown=True), ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

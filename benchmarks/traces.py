"""Trace verification throughput (issue 6, issue 15), every engine on the same data in one run.

Rows are trace rows (events plus one row per record a pull returned). The ceiling is the bare replay
loop: reading the same files and visiting every row in Python without judging anything. Whole mode
runs the full history checker per history; keyed mode the column checks of ``trace_keyed``, over whole
files (one process, or Spark ``rdd``: a task per file) or split by key (Spark ``pandas``: one huge
history in parallel). The Spark goals are measured at >= 20 M rows (full size only): the generated
histories copied under new ids, since generating 20 M rows takes longer than checking them. The last
part checks one huge history, where whole mode cannot use a second core and keyed mode by key can.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.summary import record
from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.checker import check_history
from rmqspec.conformance.trace_format import read_parquet_table, rows_of, trace_files, write_parquet
from rmqspec.conformance.trace_gen import TRACE_CONFIG, generate_history, write_traces
from rmqspec.conformance.trace_spark import spark_session, verify

LARGE_ROWS = 20_000_000


def bare_loop(path: Path) -> int:
    """Read every file and touch every row's time: what any checker must at least do."""
    n = 0
    total = 0
    for f in trace_files(path):
        table = read_parquet_table(f)
        for t in table.column("time").to_pylist():
            total += t
            n += 1
    return n


def _timed(fn: Callable[[], int]) -> tuple[int, float]:
    start = time.perf_counter()
    n = fn()
    return n, time.perf_counter() - start


def _line(name: str, rows: int, seconds: float, ceiling: float, base: float | None) -> None:
    rate = rows / seconds
    extra = f"  {rate / base:5.2f}x one process" if base else ""
    print(
        f"   {name:34} {seconds:8.2f} s {rate:12,.0f} rows/s  {rate / ceiling:6.1%} of the bare loop{extra}"
    )


def main(quick: bool = False) -> None:
    histories = 200 if quick else 2000
    huge_events = 20_000 if quick else 100_000
    cores = os.cpu_count() or 1
    print(
        f"== trace verification: {histories} histories of ~200 events, then one history of ~{huge_events} =="
    )
    with tempfile.TemporaryDirectory(prefix="rmqspec-bench-") as tmp:
        data = Path(tmp) / "many"
        t0 = time.perf_counter()
        _, rows = write_traces(
            data,
            histories=histories,
            events=200,
            seed=1,
            files=max(4, cores * 2),
            make_target=InProcessTarget,
        )
        print(f"   generated {rows:,} rows in {time.perf_counter() - t0:.1f} s; {cores} CPUs")
        n, s = _timed(lambda: bare_loop(data))
        ceiling = n / s
        _line("bare replay loop (ceiling)", n, s, ceiling, None)
        base = None
        results: dict[str, float] = {}
        for mode in ("whole", "keyed"):
            print(f"   -- {mode} mode --")
            n, s = _timed(lambda m=mode: verify(data, mode=m, engine="local").rows_checked)  # type: ignore[misc]
            base = n / s
            results[f"{mode} one process"] = base
            _line("one process", n, s, ceiling, base)
            if mode == "whole":
                n, s = _timed(lambda: verify(data, mode="whole", engine="pool", workers=2).rows_checked)
                results["whole pool(2)"] = n / s
                _line("multiprocessing Pool(2)", n, s, ceiling, base)
            for master in ("local[1]", "local[2]"):
                spark = spark_session(master, "rmqspec bench")
                try:
                    engines = ("rdd", "pandas")
                    for engine in engines:
                        verify(data, mode=mode, engine=engine, spark=spark)  # warm the workers
                        n, s = _timed(
                            lambda e=engine, m=mode, sp=spark: (
                                verify(data, mode=m, engine=e, spark=sp).rows_checked
                            )  # type: ignore[misc]
                        )
                        results[f"{mode} {engine} {master}"] = n / s
                        label = {"rdd": "rdd (a task per file)", "pandas": "mapInPandas"}[engine]
                        if mode == "keyed" and engine == "pandas":
                            label = "mapInPandas by key"
                        _line(
                            f"Spark {master} {label}",
                            n,
                            s,
                            ceiling,
                            base,
                        )
                finally:
                    spark.stop()
        size = f"at {rows / 1e6:.2f} M rows, not 20 M"
        for mode, engine in (("whole", "rdd"), ("keyed", "rdd")):
            one, two = results.get(f"{mode} {engine} local[1]"), results.get(f"{mode} {engine} local[2]")
            if one and two:
                print(
                    f"   {mode} mode, Spark local[2] / local[1]: {two / one:.2f}x (goal 1.7x at 20 M rows or more)"
                )
                alone = results[f"{mode} one process"]
                if mode == "keyed" and quick:
                    record(
                        "spark-keyed",
                        f"{two / one:.2f}×; {two / alone:.2f}× one process ({size})",
                        two / one >= 1.7 and two > alone,
                        full_size=False,
                    )
                elif mode == "whole" and quick:
                    record("spark-whole", f"{two / one:.2f}× ({size})", two / one >= 1.7, full_size=False)
        if not quick:
            large(data, Path(tmp) / "large", rows, results["keyed one process"])
        for mode, goal in (("keyed", 1e6), ("whole", 1e5)):
            rate = results[f"{mode} one process"]
            record(mode, f"{rate:,.0f} rows/s ({rate / ceiling:.1%} of the bare loop)", rate >= goal)
        per_core = results["keyed one process"]
        print(
            f"   keyed checker: {per_core:,.0f} rows/s in one process (goal 1 M/s per core); "
            f"{per_core / ceiling:.0%} of the bare loop (goal 15%)"
        )
        print(
            f"   projection at the keyed one-process rate: 16 cores {16 * per_core / 1e6:.1f} M rows/s, "
            f"a 64-core cluster {64 * per_core / 1e6:.1f} M rows/s (perfect scaling; Spark's overhead not counted)"
        )
        print("   -- one huge history --")
        huge = Path(tmp) / "huge"
        huge.mkdir()
        events = generate_history(99, huge_events, make_target=InProcessTarget)
        write_parquet(huge / "h.parquet", rows_of("huge", events))
        n, s = _timed(lambda: verify(huge, mode="whole", engine="local").rows_checked)
        whole_rate = n / s
        _line("whole, one process (sequential)", n, s, ceiling, None)
        n, s = _timed(lambda: verify(huge, mode="keyed", engine="local").rows_checked)
        _line("keyed, one process", n, s, ceiling, whole_rate)
        spark = spark_session("local[2]", "rmqspec bench")
        try:
            verify(huge, mode="keyed", engine="pandas", spark=spark)
            n, s = _timed(lambda: verify(huge, mode="keyed", engine="pandas", spark=spark).rows_checked)
            _line("keyed by key, Spark local[2]", n, s, ceiling, whole_rate)
        finally:
            spark.stop()
        print("   (ratios in this part are to the whole-history checker in one process)")
    growth(huge_events)


def replicate(src: Path, dst: Path, rows: int, goal: int) -> int:
    """At least ``goal`` rows: the histories of ``src`` copied under new ids (copy k of history h is
    "k/h"), each file holding whole copies (a history lies in one file). Returns the rows written."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pa.concat_tables([read_parquet_table(f) for f in trace_files(src)])
    copies = math.ceil(goal / rows)
    files = max(8, 2 * (os.cpu_count() or 1))
    per_file = math.ceil(copies / files)
    dst.mkdir(parents=True, exist_ok=True)
    schema = table.schema
    written = 0
    for k in range(files):
        first = k * per_file
        chunk = range(first, min(copies, first + per_file))
        if not chunk:
            break
        with pq.ParquetWriter(dst / f"part-{k:05d}.parquet", schema, compression="zstd") as w:
            for c in chunk:
                ids = pc.binary_join_element_wise(pa.scalar(str(c)), table.column("history_id"), "/")
                w.write_table(table.set_column(0, "history_id", ids.cast(pa.string())))
                written += len(table)
    return written


def _spark_rates(src: Path, dst: Path, mode: str, alone: float | None = None) -> dict[str, float]:
    """Rows/s of ``mode`` on ``dst`` with Spark local[1] and local[2] (rdd: a task per file), each session
    warmed on the small traces ``src`` first."""
    rates: dict[str, float] = {}
    for master in ("local[1]", "local[2]"):
        spark = spark_session(master, "rmqspec bench")
        try:
            verify(src, mode=mode, engine="rdd", spark=spark)
            n, s = _timed(lambda sp=spark: verify(dst, mode=mode, engine="rdd", spark=sp).rows_checked)  # type: ignore[misc]
        finally:
            spark.stop()
        rates[master] = n / s
        vs = f"  {n / s / alone:5.2f}x one process" if alone else ""
        print(f"   {mode} Spark {master} rdd: {s:8.2f} s {n / s:12,.0f} rows/s{vs}")
    return rates


def large(src: Path, dst: Path, rows: int, one_process_small: float) -> None:
    """Both modes at >= 20 M rows: keyed in one process against Spark local[1] and local[2] (a task per
    file), whole on Spark only (one process would take as long as local[1], minutes)."""
    print(f"   -- at >= {LARGE_ROWS / 1e6:.0f} M rows --")
    t0 = time.perf_counter()
    n_rows = replicate(src, dst, rows, LARGE_ROWS)
    print(f"   {n_rows:,} rows in {len(trace_files(dst))} files ({time.perf_counter() - t0:.0f} s to write)")
    n, s = _timed(lambda: verify(dst, mode="keyed", engine="local").rows_checked)
    alone = n / s
    print(
        f"   keyed one process: {s:8.2f} s {alone:12,.0f} rows/s ({alone / one_process_small:.2f}x the small size)"
    )
    at = f"at {n_rows / 1e6:.1f} M rows"
    keyed = _spark_rates(src, dst, "keyed", alone)
    one, two = keyed["local[1]"], keyed["local[2]"]
    record(
        "spark-keyed",
        f"{two / one:.2f}×; {two / alone:.2f}× one process ({at})",
        two / one >= 1.7 and two > alone,
        full_size=n_rows >= LARGE_ROWS,
    )
    whole = _spark_rates(src, dst, "whole")
    ratio = whole["local[2]"] / whole["local[1]"]
    record("spark-whole", f"{ratio:.2f}× ({at})", ratio >= 1.7, full_size=n_rows >= LARGE_ROWS)


def _per_event_us(events: int, seed: int = 99, repeats: int = 1) -> float:
    """CPU microseconds per event of the whole-history checker on one history of ``events`` events."""
    history = generate_history(seed, events, make_target=InProcessTarget)
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        check_history(history, TRACE_CONFIG, epsilon_ms=0)
        best = min(best, time.process_time() - t)
    return best / len(history) * 1e6


def growth(largest: int) -> None:
    """The whole checker's cost per event on one history of 10^3 events and of ``largest`` events."""
    print("   -- whole mode, cost per event as one history grows (CPU time; 10^3 best of 5) --")
    base = _per_event_us(1000, repeats=5)
    print(f"   {1000:>9,} events {base:8.1f} us/event")
    ratio = 1.0
    for n in sorted({10_000, largest}):
        us = _per_event_us(n)
        ratio = us / base
        print(f"   {n:>9,} events {us:8.1f} us/event  {ratio:5.2f}x")
    record(
        "growth", f"{ratio:.2f}× at {largest:,} events (not 10^6)", ratio <= 1.5, full_size=largest >= 10**6
    )


if __name__ == "__main__":
    main()

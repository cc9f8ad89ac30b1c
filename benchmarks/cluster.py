"""Trace verification on a Spark standalone cluster (issue 15): one master and one worker of two cores
on loopback, started with the launcher PySpark ships, ``rmqspec traces verify --master spark://...``
run as a user runs it; rows read must equal rows checked and the verdict the local run's. The master
and the worker are stopped after, whatever happened (``spark_cluster.standalone``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.summary import record
from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.spark_cluster import standalone
from rmqspec.conformance.trace_gen import write_traces
from rmqspec.conformance.trace_spark import verify


def main(quick: bool = False) -> None:
    histories = 200 if quick else 2000
    print(f"== Spark standalone cluster on loopback: 1 master, 1 worker (2 cores); {histories} histories ==")
    with tempfile.TemporaryDirectory(prefix="rmqspec-cluster-") as tmp:
        data = Path(tmp) / "t"
        _, rows = write_traces(
            data, histories=histories, events=200, seed=1, files=4, make_target=InProcessTarget
        )
        t = time.perf_counter()
        with standalone(Path(tmp) / "spark", workers=1, cores=2) as master:
            print(f"   {master} up in {time.perf_counter() - t:.0f} s")
            results = []
            for mode in ("whole", "keyed"):
                report = Path(tmp) / f"{mode}.json"
                cmd = [sys.executable, "-m", "rmqspec", "traces", "verify", str(data), "--master", master]
                t = time.perf_counter()
                r = subprocess.run(
                    [*cmd, "--mode", mode, "--report", str(report)], capture_output=True, text=True
                )
                seconds = time.perf_counter() - t
                if r.returncode not in (0, 1) or not report.exists():
                    print(f"   {mode}: traces verify failed ({r.returncode}): {r.stderr.strip()[-500:]}")
                    record("cluster", f"{mode}: traces verify exited {r.returncode}", False)
                    return
                got = json.loads(report.read_text())
                local = verify(data, mode=mode, engine="local")
                same = (
                    got["rows_read"] == got["rows_checked"] == local.rows_read
                    and got["verdicts"] == local.verdicts
                    and got["anomalies_by_rule"] == local.by_rule
                )
                print(
                    f"   {mode:5}: {got['rows_checked']:,} of {got['rows_read']:,} rows checked, "
                    f"verdicts {got['verdicts']} (local run: {local.verdicts}), {seconds:.1f} s "
                    f"with the JVM start, {got['rows_checked'] / got['seconds']:,.0f} rows/s in the job"
                )
                results.append((mode, same, got["rows_checked"] / got["seconds"]))
        ok = all(same for _, same, _ in results)
        rates = ", ".join(f"{m} {rate / 1e3:,.0f} k rows/s" for m, _, rate in results)
        record("cluster", f"{'equal' if ok else 'DIFFERENT'} ({rows:,} rows; {rates})", ok)

"""Trace verification on a real Spark standalone cluster (issue 15), not only local mode.

A master and one worker are started on loopback with the launcher PySpark ships
(``conformance/spark_cluster.py``), ``rmqspec traces verify --master spark://127.0.0.1:PORT`` runs as a
user would run it, and the report must count as many rows checked as read and reach the verdict the
local run reaches; the master and the worker are stopped after, whatever happened.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.spark_cluster import standalone
from rmqspec.conformance.trace_gen import write_traces
from rmqspec.conformance.trace_spark import verify

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def run_verify(traces: Path, master: str, mode: str, report: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "rmqspec", "traces", "verify", str(traces), "--master", master]
    cmd += ["--mode", mode, "--report", str(report)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    out: dict[str, Any] = json.loads(report.read_text())
    assert (r.returncode == 0) == out["passed"]
    return out


def test_standalone_cluster_verdicts_equal_the_local_run(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_traces(good, histories=16, events=150, seed=7, files=2, workers=1, make_target=InProcessTarget)
    write_traces(
        bad, histories=8, events=150, seed=7, mutant="one-tick-late", files=2, workers=1,
        make_target=InProcessTarget,
    )  # fmt: skip
    with standalone(tmp_path / "spark", workers=1, cores=2) as master:
        assert master.startswith("spark://127.0.0.1:")
        for traces, mode in ((good, "whole"), (bad, "whole"), (bad, "keyed")):
            got = run_verify(traces, master, mode, tmp_path / f"{traces.name}-{mode}.json")
            local = verify(traces, mode=mode, engine="local")
            assert got["rows_read"] == got["rows_checked"] == local.rows_read > 0
            assert got["verdicts"] == local.verdicts, (traces.name, mode)
            assert got["anomalies_by_rule"] == local.by_rule
            assert got["failed_histories"] == list(local.failed)
            assert got["passed"] == (traces is good)
    # stopped: nothing listens on the master's port any more
    import socket

    port = int(master.rsplit(":", 1)[1])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0

"""Trace verification (issue 6): the format, the generator, the keyed checker and the Spark jobs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.cli import app
from rmqspec.conformance.checker import check_history
from rmqspec.conformance.trace_format import (
    TraceError,
    events_of,
    read_jsonl,
    read_rows,
    rows_of,
    write_jsonl,
    write_parquet,
)
from rmqspec.conformance.trace_gen import TRACE_CONFIG, generate_history, write_traces
from rmqspec.conformance.trace_keyed import check_frame
from rmqspec.conformance.trace_spark import verify

runner = CliRunner()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for every Spark test (two cores, no UI)."""
    from rmqspec.conformance.trace_spark import spark_session

    s = spark_session("local[2]", "rmqspec tests")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def reference_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ref")
    write_traces(out, histories=24, events=150, seed=7, files=3, workers=1, make_target=InProcessTarget)
    return out


@pytest.fixture(scope="module")
def mutant_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mut")
    write_traces(
        out,
        histories=12,
        events=150,
        seed=7,
        mutant="one-tick-late",
        files=2,
        workers=1,
        make_target=InProcessTarget,
    )
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip_rebuilds_the_history_exactly(tmp_path: Path, fmt: str) -> None:
    events = generate_history(3, 120, make_target=InProcessTarget)
    path = tmp_path / f"t.{fmt}"
    rows = list(rows_of("h3", events))
    n = write_parquet(path, rows) if fmt == "parquet" else write_jsonl(path, rows)
    back = list(read_rows(path))
    assert n == len(rows) == len(back)
    again = events_of(back)
    assert [(e.index, e.process, e.type, e.f, e.time) for e in again] == [
        (e.index, e.process, e.type, e.f, e.time) for e in events
    ]
    assert [e.value for e in again] == [json.loads(json.dumps(e.value)) for e in events]
    assert check_history(again, TRACE_CONFIG, epsilon_ms=0).status == "pass"


def test_a_bad_line_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    write_jsonl(path, rows_of("h", generate_history(1, 40, make_target=InProcessTarget)))
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[5] = lines[5][:-10]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=rf"{path}:6: not JSON"):
        list(read_jsonl(path))
    broken = json.loads(lines[7])
    broken["time"] = "soon"
    lines[5] = lines[4]
    lines[7] = json.dumps(broken)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=rf"{path}:8: time must be a whole number"):
        list(read_jsonl(path))
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 not really")
    with pytest.raises(TraceError, match=r"junk\.parquet: not a readable Parquet file"):
        list(read_rows(junk))


def test_cli_reports_a_corrupt_trace_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_jsonl(path, rows_of("h", generate_history(1, 40, make_target=InProcessTarget)))
    with path.open("a", encoding="utf-8") as fh:
        fh.write("{broken\n")
    result = runner.invoke(app, ["traces", "verify", str(path), "--engine", "local"])
    assert result.exit_code == 2
    assert f"{path}:" in result.output and "not JSON" in result.output
    assert "Traceback" not in result.output


def test_generation_is_deterministic_per_seed_whatever_the_workers(tmp_path: Path) -> None:
    a, rows_a = write_traces(
        tmp_path / "a", histories=6, events=80, seed=11, files=3, workers=1, make_target=InProcessTarget
    )
    b, rows_b = write_traces(
        tmp_path / "b", histories=6, events=80, seed=11, files=3, workers=2, make_target=InProcessTarget
    )
    assert rows_a == rows_b
    for pa, pb in zip(a, b, strict=True):
        assert pd.read_parquet(pa).equals(pd.read_parquet(pb))
    c, _ = write_traces(
        tmp_path / "c", histories=6, events=80, seed=12, files=3, workers=1, make_target=InProcessTarget
    )
    assert not pd.read_parquet(a[0]).equals(pd.read_parquet(c[0]))


def test_reference_traces_pass_in_one_process(reference_traces: Path) -> None:
    for mode in ("whole", "keyed"):
        r = verify(reference_traces, mode=mode, engine="local")
        assert r.passed, (mode, r.by_rule)
        assert r.histories == 24 and r.rows_read == r.rows_checked > 24 * 150


def test_mutant_traces_fail_with_the_mutants_rule(mutant_traces: Path) -> None:
    for mode in ("whole", "keyed"):
        r = verify(mutant_traces, mode=mode, engine="local")
        assert not r.passed
        assert "schedule/due-time" in r.by_rule, (mode, r.by_rule)
        assert r.failed


@pytest.mark.parametrize(
    "mutant",
    ["retry-level-off-by-one", "rollback-visible", "negative-level-retried", "level-off-by-one", None],
)
def test_keyed_never_fails_a_history_the_full_checker_passes(mutant: str | None) -> None:
    rows: list[dict[str, Any]] = []
    full_fail: set[str] = set()
    for seed in range(6):
        events = generate_history(seed, 150, mutant=mutant, make_target=InProcessTarget)
        if check_history(events, TRACE_CONFIG, epsilon_ms=0).status != "pass":
            full_fail.add(str(seed))
        rows.extend(rows_of(str(seed), events))
    keyed = check_frame(pd.DataFrame(rows), TRACE_CONFIG, 0)
    keyed_fail = set(keyed["history_id"])
    assert keyed_fail <= full_fail
    if mutant is None:
        assert not full_fail and not keyed_fail
    else:
        assert keyed_fail, f"the keyed checker missed {mutant}"


def test_cli_generate_and_verify(tmp_path: Path) -> None:
    out = tmp_path / "t"
    r = runner.invoke(app, ["traces", "generate", "--out", str(out), "--histories", "8", "--events", "80"])
    assert r.exit_code == 0, r.output
    report = tmp_path / "r.json"
    plots = tmp_path / "plots"
    r = runner.invoke(
        app,
        ["traces", "verify", str(out), "--engine", "local", "--report", str(report), "--plots", str(plots)],
    )
    assert r.exit_code == 0, r.output
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["passed"] and data["histories"] == 8 and data["rows_read"] == data["rows_checked"]
    assert (plots / "lateness.png").stat().st_size > 1000
    assert (plots / "retry-ladder.png").stat().st_size > 1000
    bad = runner.invoke(app, ["traces", "generate", "--out", str(out), "--mutant", "nope"])
    assert bad.exit_code == 2 and "unknown mutant" in bad.output
    keyed = runner.invoke(app, ["traces", "verify", str(out), "--mode", "keyed", "--plots", str(plots)])
    assert keyed.exit_code == 2 and "--plots needs --mode whole" in keyed.output


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["rdd", "pandas"])
def test_spark_whole_histories(spark: Any, engine: str, reference_traces: Path, mutant_traces: Path) -> None:
    ok = verify(reference_traces, mode="whole", engine=engine, spark=spark)
    assert ok.passed and ok.histories == 24 and ok.rows_read == ok.rows_checked
    bad = verify(mutant_traces, mode="whole", engine=engine, spark=spark)
    assert not bad.passed and "schedule/due-time" in bad.by_rule


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["rdd", "pandas"])
def test_spark_keyed_agrees_with_one_process(
    spark: Any, engine: str, reference_traces: Path, mutant_traces: Path
) -> None:
    """A task per file (rdd) and the split by key (pandas) find what one process finds, to the text."""
    ok = verify(reference_traces, mode="keyed", engine=engine, spark=spark)
    assert ok.passed and ok.rows_read == ok.rows_checked and ok.histories == 24
    bad = verify(mutant_traces, mode="keyed", engine=engine, spark=spark)
    local = verify(mutant_traces, mode="keyed", engine="local")
    assert bad.by_rule == local.by_rule and set(bad.failed) == set(local.failed)
    assert bad.anomalies == local.anomalies and bad.anomalies
    pool = verify(mutant_traces, mode="keyed", engine="pool", workers=2)
    assert pool.anomalies == local.anomalies and pool.rows_checked == local.rows_checked


def test_a_trace_is_judged_against_its_own_settings(tmp_path: Path) -> None:
    """Issue 16 item 1: a correct history from a broker with RocketMQ's default table failed verify,
    which judged every trace against the generator's short table. Now: --profile, or the settings the
    trace records."""
    from rmqspec.adapters.inprocess import InProcessTarget
    from rmqspec.conformance.trace_format import config_to_json, rows_of, write_jsonl
    from rmqspec.conformance.trace_gen import generate_history
    from rmqspec.conformance.trace_spark import verify
    from rmqspec.reference.config import BrokerConfig

    default = BrokerConfig()
    history = generate_history(7, 150, make_target=InProcessTarget, config=default)
    bare = tmp_path / "bare"
    bare.mkdir()
    write_jsonl(bare / "h.jsonl", rows_of("h7", history))
    judged_short = verify(bare, engine="local")
    assert not judged_short.passed and "schedule/due-time" in judged_short.by_rule
    assert judged_short.anomalies and judged_short.anomalies[0][0] == "h7"  # the history, rule, name, message
    assert verify(bare, engine="local", config=default).passed
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    write_jsonl(recorded / "h.jsonl", rows_of("h7", history), {"config": config_to_json(default)})
    result = verify(recorded, engine="local")
    assert result.passed and result.config["messageDelayLevel"] == default.describe()


def test_cli_verify_takes_a_profile_and_names_failing_histories(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rmqspec.adapters.inprocess import InProcessTarget
    from rmqspec.cli import app
    from rmqspec.conformance.trace_format import rows_of, write_jsonl
    from rmqspec.conformance.trace_gen import generate_history
    from rmqspec.reference.config import BrokerConfig

    history = generate_history(3, 150, make_target=InProcessTarget, config=BrokerConfig())
    write_jsonl(tmp_path / "h.jsonl", rows_of("h3", history))
    runner = CliRunner()
    bad = runner.invoke(app, ["traces", "verify", str(tmp_path), "--engine", "local"])
    assert bad.exit_code == 1 and "in h3:" in bad.output and "--history h3" in bad.output
    root = Path(__file__).resolve().parents[1]
    good = runner.invoke(
        app,
        [
            "traces",
            "verify",
            str(tmp_path),
            "--engine",
            "local",
            "--profile",
            str(root / "profiles/default.yaml"),
        ],
    )
    assert good.exit_code == 0, good.output
    assert "judged against: profile 4.9, levels 1s 5s 10s" in good.output


@pytest.mark.slow
@pytest.mark.spark
def test_bad_input_on_spark_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Issue 16 item 2: bad input on the default Spark engine gave 130-line PySpark tracebacks and exit 1."""
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "corrupt").mkdir()
    (cases / "corrupt" / "a.jsonl").write_text('{"rmqspec_trace": 1}\n{"history_id": "h", oops\n')
    (cases / "bytes").mkdir()
    (cases / "bytes" / "a.parquet").write_bytes(b"\x00\x01 not parquet at all" * 10)
    (cases / "schema").mkdir()
    pq.write_table(pa.table({"x": [1]}), cases / "schema" / "a.parquet")
    (cases / "stringtime").mkdir()
    from rmqspec.conformance.trace_format import COLUMNS

    cols = {
        n: pa.array(
            ["1"] if n == "time" or t == "string" else [1],
            pa.string() if n == "time" or t == "string" else (pa.int64() if t == "int64" else pa.int32()),
        )
        for n, (t, _) in COLUMNS.items()
    }
    table = pa.table(cols).replace_schema_metadata({b"rmqspec_trace": b"1"})
    pq.write_table(table, cases / "stringtime" / "a.parquet")
    expect = {
        "corrupt": "a.jsonl:2: not JSON",
        "bytes": "not a readable Parquet file",
        "schema": "no rmqspec_trace = 1",
        "stringtime": "column time is string, not int64",
    }
    # Keyed mode's default Spark engine checks whole files (JSON Lines too); its split by key reads Parquet.
    runs = [(name, mode, "rdd", text) for name, text in expect.items() for mode in ("whole", "keyed")]
    runs.append(("corrupt", "keyed", "pandas", "keyed mode on Spark reads Parquet traces"))
    for name, mode, engine, want in runs:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "rmqspec",
                "traces",
                "verify",
                str(cases / name),
                "--master",
                "local[1]",
                "--mode",
                mode,
                "--engine",
                engine,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 2, (name, mode, proc.stdout[-500:], proc.stderr[-1500:])
        assert "Traceback" not in proc.stderr and want in proc.stderr, (name, mode, proc.stderr[-800:])
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    good = tmp_path / "good"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqspec",
            "traces",
            "generate",
            "--out",
            str(good),
            "--histories",
            "2",
            "--events",
            "40",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "rmqspec", "traces", "verify", str(good), "--master", "bogus://x"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "cannot start Spark with --master bogus://x" in proc.stderr, proc.stderr[
        -800:
    ]
    assert "Traceback" not in proc.stderr

"""``rmqspec traces``: generate traces and verify them, in one process or on Spark (docs/traces.md)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.trace_format import TraceError
from rmqspec.console import make_console

console = make_console()
err = make_console(stderr=True)
traces_app = typer.Typer(help="Traces: generate histories, verify them at scale.", no_args_is_help=True)

ENGINES = ("rdd", "pandas", "local", "pool")
MODES = ("whole", "keyed")


@contextlib.contextmanager
def _stderr_to_file() -> Iterator[Path]:
    """File descriptor 2 (inherited by the JVM Spark starts) to a log file while Spark runs. Nothing is
    left in the temp folder by a run that went through, nor by an empty log; a failed run keeps a log
    with something in it, and its error names it (``_kept``)."""
    fd, name = tempfile.mkstemp(prefix="rmqspec-spark-", suffix=".log")
    log = Path(name)
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    went_through = False
    try:
        yield log
        went_through = True
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        with contextlib.suppress(OSError):
            if went_through or log.stat().st_size == 0:
                log.unlink()


def _kept(log: Path | None) -> str:
    """Where Spark's log of a failed run is, when it was kept (said after the error)."""
    return f" (Spark's log: {log})" if log is not None and log.is_file() else ""


def _missing_extra(e: ModuleNotFoundError) -> str:
    return (
        f"traces need the spark extra ({e.name} is not installed): in a checkout, pip install '.[spark]' "
        "(rmqspec is not on PyPI yet)"
    )


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(2)


@traces_app.command("generate")
def generate_cmd(
    out: Annotated[Path, typer.Option(help="folder to write the trace files into")],
    histories: Annotated[int, typer.Option(help="how many histories")] = 1000,
    events: Annotated[int, typer.Option(help="events per history (about; each ends settled and read)")] = 200,
    seed: Annotated[int, typer.Option(help="the first history's seed; history k has seed + k")] = 0,
    mutant: Annotated[str | None, typer.Option(help="drive this mutant instead of the reference")] = None,
    fmt: Annotated[str, typer.Option("--format", help="parquet or jsonl")] = "parquet",
    files: Annotated[
        int | None, typer.Option(help="number of files (default: enough for every core)")
    ] = None,
    workers: Annotated[int | None, typer.Option(help="processes (default: every core)")] = None,
) -> None:
    """Generate histories from the model-driven workload, deterministic per seed."""
    import time

    from rmqspec.adapters.inprocess import InProcessTarget
    from rmqspec.conformance.trace_gen import write_traces

    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ModuleNotFoundError as e:
            raise _fail(_missing_extra(e)) from None

    if histories < 1 or events < 1:
        raise _fail("--histories and --events must be at least 1")
    if mutant is not None and mutant not in MUTANTS:
        raise _fail(f"unknown mutant {mutant!r}; `rmqspec mutants --list` shows the names")
    if mutant is not None and MUTANTS[mutant].served_only:
        raise _fail(f"mutant {mutant!r} is a fault on the served wire: traces are made in process")
    if fmt not in ("parquet", "jsonl"):
        raise _fail(f"--format {fmt!r}: use parquet or jsonl")
    if out.exists() and not out.is_dir():
        raise _fail(f"{out} exists and is not a folder")
    start = time.perf_counter()
    paths, rows = write_traces(
        out,
        histories=histories,
        events=events,
        make_target=InProcessTarget,
        seed=seed,
        mutant=mutant,
        fmt=fmt,
        files=files,
        workers=workers,
    )
    took = time.perf_counter() - start
    console.print(
        f"wrote {histories} histories, {rows} rows in {len(paths)} {fmt} files to {out} "
        f"in {took:.1f} s ({rows / max(took, 1e-9):,.0f} rows/s)"
    )


@traces_app.command("verify")
def verify_cmd(
    path: Annotated[Path, typer.Argument(help="a trace file or a folder of them")],
    master: Annotated[str, typer.Option(help="Spark master URL")] = "local[*]",
    mode: Annotated[
        str, typer.Option(help="whole (the full checker per history) or keyed (split by key)")
    ] = "whole",
    engine: Annotated[
        str,
        typer.Option(
            help="rdd, pandas (Spark), local (one process) or pool; keyed mode: rdd, local and pool check "
            "whole files, pandas splits the rows by key (one huge history in parallel)"
        ),
    ] = "rdd",
    epsilon: Annotated[int, typer.Option(help="allowed lateness, ms (0 for logical-clock traces)")] = 0,
    report: Annotated[Path | None, typer.Option(help="write totals and anomalies as JSON")] = None,
    plots: Annotated[Path | None, typer.Option(help="write PNG plots into this folder")] = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            help="the broker settings to judge by (a target profile: a YAML file, or a shipped one by name)  [default: the settings the trace "
            "records, else the generator's]"
        ),
    ] = None,
    history: Annotated[
        str | None, typer.Option(help="show only this history's verdict and anomalies (re-check one history)")
    ] = None,
) -> None:
    """Verify traces; exit 1 on any violation (or when rows read and rows checked differ)."""
    try:
        from rmqspec.conformance.trace_spark import plot, verify
    except ModuleNotFoundError as e:
        raise _fail(_missing_extra(e)) from None

    config = None
    if profile is not None:
        from rmqspec.adapters.remoting.profile import ProfileError, load_profile

        try:
            config = load_profile(profile, "127.0.0.1:10911").config
        except ProfileError as e:
            raise _fail(str(e)) from None

    if config is not None:
        for line in _disagreements(path, config):
            err.print(f"[yellow]warning:[/yellow] {escape(line)}")
    if engine not in ENGINES:
        raise _fail(f"--engine {engine!r}: use one of {', '.join(ENGINES)}")
    if mode not in MODES:
        raise _fail(f"--mode {mode!r}: use whole or keyed")
    if plots is not None and mode != "whole":
        raise _fail("--plots needs --mode whole: the keyed mode does not collect lateness or retry ladders")
    spark_log = None
    try:
        if engine in ("rdd", "pandas"):
            # Spark's JVM and its Python workers write warnings and tracebacks to the process's stderr:
            # they go to a log file, so that bad input is one line here (exit 2), as on the other engines.
            with _stderr_to_file() as spark_log:
                result = verify(path, mode=mode, engine=engine, master=master, eps=epsilon, config=config)
        else:
            result = verify(path, mode=mode, engine=engine, master=master, eps=epsilon, config=config)
    except TraceError as e:
        raise _fail(f"{e}{_kept(spark_log)}") from None
    except (
        Exception
    ) as e:  # Spark itself failed (a master it cannot reach, a JVM that died): said, with its log
        if spark_log is None:
            raise
        first = (str(e).strip().splitlines() or [""])[0]
        raise _fail(f"Spark failed: {type(e).__name__}: {first}{_kept(spark_log)}") from None
    table = Table(
        title=f"rmqspec traces verify ({mode}, {engine}, {master if engine in ('rdd', 'pandas') else 'no Spark'})"
    )
    table.add_column("what")
    table.add_column("value", justify="right")
    for k, v in (
        ("files", result.files),
        ("histories", result.histories),
        ("rows read", result.rows_read),
        ("rows checked", result.rows_checked),
        *((f"verdict {k}", v) for k, v in result.verdicts.items()),
        ("seconds", f"{result.seconds:.1f}"),
        ("rows/s", f"{result.rows_read / max(result.seconds, 1e-9):,.0f}"),
    ):
        table.add_row(k, str(v))
    console.print(table)
    levels = result.config.get("messageDelayLevel")
    console.print(
        f"judged against: profile {result.config.get('profile')}, levels {levels}, transactionTimeOut "
        f"{result.config.get('transactionTimeOut')} ms, transactionCheckInterval "
        f"{result.config.get('transactionCheckInterval')} ms, transactionCheckMax {result.config.get('transactionCheckMax')}"
    )
    shown = [a for a in result.anomalies if history is None or a[0] == history]
    by_rule = result.by_rule if history is None else dict(Counter(a[1] for a in shown).most_common())
    for rule, n in by_rule.items():
        console.print(f"[red]{n:6}[/red] {escape(rule)}")
    if (
        history is not None
        and not any(a[0] == history for a in result.anomalies)
        and history not in result.failed
    ):
        console.print(f"history {escape(history)}: no anomaly")
    for h, rule, name, message in shown[:20]:
        console.print(f"[red]{escape(name)}[/red] {escape(f'[{rule}]')} in {escape(h)}: {escape(message)}")
    if len(shown) > 20:
        console.print(f"... {len(shown) - 20} more (all of them in --report)")
    if result.failed and history is None:
        first = result.failed[0]
        console.print(f"failed histories ({len(result.failed)}): {', '.join(result.failed[:10])}")
        console.print(
            f"re-check one: rmqspec traces verify {path} --engine local --history {first}"
            + (f" --profile {profile}" if profile else "")
        )
    if report is not None:
        report.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
    if plots is not None:
        for p in plot(result, plots, epsilon):
            console.print(f"plot: {p}")
    if result.rows_read != result.rows_checked:
        err.print(f"[red]error:[/red] {result.rows_read} rows read but {result.rows_checked} checked")
        raise typer.Exit(1)
    if history is not None:  # that history's verdict only
        one_passed = history not in result.failed and not shown
        console.print(
            f"history {escape(history)}: " + ("[green]PASS[/green]" if one_passed else "[red]FAIL[/red]")
        )
        raise typer.Exit(0 if one_passed else 1)
    console.print("[green]PASS[/green]" if result.passed else "[red]FAIL[/red]")
    raise typer.Exit(0 if result.passed else 1)


def _disagreements(path: Path, config: Any) -> list[str]:
    """Where --profile's settings differ from those the trace records in its header (one line each)."""
    from rmqspec.conformance.suite import broker_settings
    from rmqspec.conformance.trace_format import recorded_config, trace_files

    try:
        files = trace_files(path)
        recorded = recorded_config(Path(files[0])) if files else None
    except (TraceError, OSError):
        return []  # the run itself says what is wrong with the input
    if recorded is None or recorded == config:
        return []
    mine, theirs = broker_settings(config), broker_settings(recorded)
    differ = [f"{k} {mine[k]} (the trace: {theirs.get(k)})" for k in mine if mine[k] != theirs.get(k)]
    return [
        f"--profile disagrees with the settings {files[0]} records: {'; '.join(differ) or 'other settings'}; "
        "judging by --profile, so anomalies may come from the settings, not the broker"
    ]


def register(app: typer.Typer) -> None:
    app.add_typer(traces_app, name="traces")

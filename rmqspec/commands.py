"""The conformance commands of the ``rmqspec`` CLI: conform, mutants, scenarios."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rmqspec.conform import Report, TargetSpecError, conform, kill_matrix
from rmqspec.conformance.kill import summary as kill_summary
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.scenarios import ScenarioError, catalogue, dump

console = Console()
err = Console(stderr=True)


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[item]}"),
        console=console,
        transient=True,
    )


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(2)


def conform_cmd(
    target: Annotated[
        str,
        typer.Option(
            help="reference, mutant:NAME, served[:mutant:NAME] (rmqspec serve in this process) or remoting://HOST:PORT"
        ),
    ] = "reference",
    report: Annotated[Path | None, typer.Option(help="write the full report as JSON")] = None,
    junit: Annotated[Path | None, typer.Option(help="write a JUnit XML report")] = None,
    examples: Annotated[int, typer.Option(help="state-machine runs (0: scenarios only)")] = 50,
    steps: Annotated[int, typer.Option(help="operations per state-machine run")] = 30,
    epsilon: Annotated[int, typer.Option(help="allowed lateness in ms (wall-clock targets)")] = 0,
    save_dir: Annotated[Path, typer.Option(help="where a shrunk failing history is saved")] = Path(
        "out/failures"
    ),
    profile: Annotated[
        Path | None, typer.Option(help="target profile (YAML): the broker's settings and features (remoting)")
    ] = None,
    workload_seconds: Annotated[
        float, typer.Option(help="wall-clock targets: seconds of concurrent workload (0: scenarios only)")
    ] = 30.0,
    max_wait: Annotated[
        int, typer.Option(help="wall-clock targets: skip scenarios that run longer than this (ms)")
    ] = 30_000,
) -> None:
    """Run the conformance suite against a target; exit 0 only when it passes."""
    try:
        scenarios = catalogue()
        with _progress() as bar:
            task = bar.add_task(f"conform {target}", total=len(scenarios) + 1, item="")
            rep = conform(
                target,
                scenarios=scenarios,
                examples=examples,
                steps=steps,
                epsilon_ms=epsilon,
                save_dir=save_dir,
                progress=lambda n, total, item: bar.update(task, completed=n, total=total, item=item),
                profile=profile,
                workload_seconds=workload_seconds,
                max_wait_ms=max_wait,
            )
    except (TargetSpecError, ScenarioError) as e:
        raise _fail(str(e)) from None
    _print_report(rep)
    if report:
        rep.write_json(report)
    if junit:
        rep.write_junit(junit)
    raise typer.Exit(0 if rep.passed else 1)


def _print_report(rep: Report) -> None:
    table = Table(title=f"rmqspec conform --target {rep.target}")
    for col in ("rule", "pass", "fail", "skip", "unknown"):
        table.add_column(col, justify="left" if col == "rule" else "right")
    for rule, counts in rep.by_rule().items():
        fails = counts.get("fail", 0)
        table.add_row(
            rule,
            str(counts.get("pass", 0)),
            f"[red]{fails}[/red]" if fails else "0",
            str(counts.get("skip", 0)),
            str(counts.get("unknown", 0)),
        )
    console.print(table)
    for r in rep.scenarios:
        if r.outcome == "fail":
            console.print(f"[red]FAIL[/red] {escape(r.scenario.id)} ({escape(r.scenario.source)})")
            for f in r.failures:
                console.print(f"     step {f.step} ({f.operation}): {escape(f.message)}")
        elif r.outcome in ("skip", "unknown"):
            console.print(f"[yellow]{r.outcome.upper()}[/yellow] {escape(r.scenario.id)}: {escape(r.reason)}")
    for rule, why in rep.hazards.items():
        console.print(f"[yellow]hazard[/yellow] {escape(rule)}: {escape(why)}")
    machine = "passed" if rep.machine is None else f"[red]FAILED[/red]\n{escape(rep.machine)}"
    if rep.mode == "workload":
        console.print(f"workload ({rep.machine_examples} operations, history checked at the end): {machine}")
    else:
        console.print(
            f"state machine ({rep.machine_examples} runs, history checker after every step): {machine}"
        )
    n = len(rep.scenarios)
    passed = sum(r.outcome == "pass" for r in rep.scenarios)
    verdict = "[green]PASS[/green]" if rep.passed else "[red]FAIL[/red]"
    console.print(f"{verdict}: {passed}/{n} scenarios passed in {rep.seconds:.1f} s")


def mutants_cmd(
    list_only: Annotated[bool, typer.Option("--list", help="list the mutants and exit")] = False,
    examples: Annotated[int, typer.Option(help="state-machine runs per mutant")] = 30,
    only: Annotated[list[str] | None, typer.Option("--only", help="run only these mutants")] = None,
    report: Annotated[Path | None, typer.Option(help="write the kill matrix as JSON")] = None,
    workers: Annotated[int, typer.Option(help="processes to run mutants in")] = 2,
) -> None:
    """Run the suite against every mutant; exit 1 unless each is killed by a failure naming its rule."""
    if list_only:
        for name in sorted(MUTANTS):
            m = MUTANTS[name]
            console.print(f"{name:36} {m.rule:32} {m.kind:8} {m.description}")
        raise typer.Exit(0)
    unknown = [n for n in (only or []) if n not in MUTANTS]
    if unknown:
        raise _fail(f"unknown mutant(s): {', '.join(unknown)}")
    if workers < 1:
        raise _fail("--workers must be at least 1")
    try:
        scenarios = catalogue()
    except ScenarioError as e:
        raise _fail(str(e)) from None
    start = time.perf_counter()
    with _progress() as bar:
        task = bar.add_task("mutants", total=len(only or MUTANTS), item="")
        rows = kill_matrix(
            examples=examples,
            names=only,
            scenarios=scenarios,
            workers=workers,
            progress=lambda n, total, item: bar.update(task, completed=n, total=total, item=item),
        )
    took = time.perf_counter() - start
    table = Table(title="kill matrix")
    for col in ("mutant", "rule broken", "outcome", "killed by (its rule)", "caught for other rules"):
        table.add_column(col)
    style = {"killed": "[green]killed[/green]", "wrong-reason": "[yellow]WRONG REASON[/yellow]"}
    for r in rows:
        by = r.killed_by
        wrong = r.wrong
        table.add_row(
            r.mutant,
            r.rule,
            style.get(r.outcome, "[red]SURVIVED[/red]"),
            f"{len(by)} ({by[0]})" if by else "-",
            f"{len(wrong)} ({wrong[0].source}: {', '.join(wrong[0].rules)})" if wrong else "-",
        )
    console.print(table)
    counts = kill_summary(rows)
    console.print(
        f"{counts['killed']}/{len(rows)} mutants killed for their own rule, {counts['wrong-reason']} for the "
        f"wrong reason, {counts['survived']} survived ({took:.0f} s, {workers} worker(s))"
    )
    if report:
        doc = {"summary": counts, "seconds": round(took, 1), "mutants": [r.to_json() for r in rows]}
        report.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    raise typer.Exit(0 if counts["killed"] == len(rows) else 1)


scenarios_app = typer.Typer(help="The scenario catalogue.", no_args_is_help=True)


@scenarios_app.command("dump")
def scenarios_dump(
    out: Annotated[Path | None, typer.Option("--out", help="write JSON here (default: stdout)")] = None,
) -> None:
    """Write every scenario (the spec's examples and the catalogue) as language-neutral JSON."""
    try:
        scenarios = catalogue()
    except ScenarioError as e:
        raise _fail(str(e)) from None
    text = dump(scenarios, out)
    if out is None:
        print(text)
    else:
        err.print(f"{len(scenarios)} scenarios written to {out}")


@scenarios_app.command("list")
def scenarios_list() -> None:
    """List scenario ids with their rules and features."""
    try:
        scenarios = catalogue()
    except ScenarioError as e:
        raise _fail(str(e)) from None
    for s in scenarios:
        console.print(f"{s.id:60} {', '.join(sorted(f.value for f in s.features))}")


def serve_cmd(
    port: Annotated[int, typer.Option(help="TCP port (0: any free port, printed)")] = 10911,
    host: Annotated[str, typer.Option(help="address to listen on (loopback by default)")] = "127.0.0.1",
    target: Annotated[str, typer.Option(help="what to serve: reference or mutant:NAME")] = "reference",
    profile: Annotated[
        Path | None, typer.Option(help="target profile (YAML) whose broker settings the served model uses")
    ] = None,
    seconds: Annotated[
        float | None, typer.Option(help="stop after this many seconds (default: never)")
    ] = None,
) -> None:
    """Serve the reference model (or a mutant) over RocketMQ's remoting protocol, on the wall clock."""
    import asyncio

    from rmqspec.adapters.inprocess import WallClockTarget
    from rmqspec.adapters.remoting.profile import ProfileError, load_profile
    from rmqspec.adapters.remoting.server import serve_forever
    from rmqspec.reference.model import Model

    if not 0 <= port < 65536:
        raise _fail(f"port {port} is not from 0 to 65535")
    try:
        config = load_profile(profile, f"{host}:{port or 1}").config
    except ProfileError as e:
        raise _fail(str(e)) from None
    if target == "reference":
        model = Model(config)
    elif target.startswith("mutant:") and target.removeprefix("mutant:") in MUTANTS:
        model = MUTANTS[target.removeprefix("mutant:")].model(config)
    else:
        raise _fail(f"cannot serve {target!r}: use reference or mutant:NAME (`rmqspec mutants --list`)")
    wall = WallClockTarget(model, name=f"{target}@wall")

    def ready(bound: tuple[str, int]) -> None:
        console.print(
            f"serving {target} on {bound[0]}:{bound[1]} (levels {config.describe()}; "
            f"transaction timeout {config.transaction_timeout_ms} ms, "
            f"check interval {config.transaction_check_interval_ms} ms, max {config.transaction_check_max})",
            soft_wrap=True,
        )

    async def main() -> None:
        stop = asyncio.Event()
        if seconds is not None:
            asyncio.get_running_loop().call_later(seconds, stop.set)
        await serve_forever(wall, host, port, ready=ready, stop=stop)

    try:
        asyncio.run(main())
    except OSError as e:
        raise _fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    except KeyboardInterrupt:
        pass


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
    app.command("conform")(conform_cmd)
    app.command("mutants")(mutants_cmd)
    app.add_typer(scenarios_app, name="scenarios")

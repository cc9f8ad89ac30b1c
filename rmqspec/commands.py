"""The conformance commands of the ``rmqspec`` CLI: conform, mutants, faults, serve, scenarios."""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.conform import (
    TARGET_FORMS,
    FaultRunner,
    Report,
    TargetSpecError,
    conform,
    fault_matrix,
    kill_matrix,
)
from rmqspec.conformance import faults as zoo
from rmqspec.conformance.kill import summary as kill_summary
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.scenarios import Scenario, ScenarioError, catalogue, dump
from rmqspec.conformance.wireprobe import FaultProxy, Faulty
from rmqspec.console import Format, FormatOpt, make_console

console = make_console()
err = make_console(stderr=True)


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[item]}"),
        console=console,
        transient=True,
        disable=not console.is_terminal,  # a pipe or a log: no bar, and no blank line where it was
    )


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(2)


def conform_cmd(
    target: Annotated[
        str,
        typer.Option(help=TARGET_FORMS),
    ] = "reference",
    report: Annotated[Path | None, typer.Option(help="write the full report as JSON")] = None,
    junit: Annotated[Path | None, typer.Option(help="write a JUnit XML report")] = None,
    examples: Annotated[
        int, typer.Option(help="logical targets: state-machine runs (0: scenarios only)")
    ] = 50,
    steps: Annotated[int, typer.Option(help="logical targets: operations per state-machine run")] = 30,
    epsilon: Annotated[
        int | None,
        typer.Option(help="wall-clock targets: allowed lateness in ms  [default: the profile's epsilon]"),
    ] = None,
    save_dir: Annotated[
        Path, typer.Option(help="where failing histories (shrunk runs, workloads) are saved")
    ] = Path("out/failures"),
    profile: Annotated[
        Path | None,
        typer.Option(
            help="target profile (a YAML file, or a shipped one by name: short-levels): the broker's settings and features; logical targets run under its settings"
        ),
    ] = None,
    workload_seconds: Annotated[
        float, typer.Option(help="wall-clock targets: seconds of concurrent workload (0: scenarios only)")
    ] = 30.0,
    max_wait: Annotated[
        int, typer.Option(help="wall-clock targets: skip scenarios that run longer than this (ms)")
    ] = 120_000,
    concurrency: Annotated[
        int, typer.Option(help="wall-clock targets: scenarios run at once, each in its own namespace")
    ] = 16,
    brokers: Annotated[
        int,
        typer.Option(
            help="apache: and served targets: brokers running scenarios at once (the main one, other settings, "
            "scenarios that need a broker of their own)"
        ),
    ] = 3,
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            "--scenario", help="run only this scenario (an id, or a prefix such as put/ or a rule id)"
        ),
    ] = None,
    chaos: Annotated[
        bool, typer.Option("--chaos", help="apache: targets: stop and restart the broker during the workload")
    ] = False,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude", help="leave out this scenario (an id, or a prefix such as put/ or a rule id)"
        ),
    ] = None,
    probe: Annotated[
        bool,
        typer.Option(
            "--probe/--no-probe",
            help="remoting targets: run the wire probe beside the scenarios, from the start (protocol failures named once)",
        ),
    ] = True,
    plots: Annotated[
        Path | None,
        typer.Option(
            help="wall-clock targets: draw the workload's plots (lateness, retry ladder, checks) here"
        ),
    ] = None,
) -> None:
    """Run the conformance suite against a target. Exit 0 pass, 1 fail, 2 usage or setup error,
    3 unknown (inconclusive: a target that stopped answering, or nothing judged)."""
    try:
        scenarios = _select(catalogue(), scenario)
        if exclude:
            scenarios = [x for x in scenarios if x not in _select(scenarios, exclude)]
        with _progress() as bar:
            task = bar.add_task(f"conform {target}", total=len(scenarios) + 1, item="")
            rep = conform(
                target,
                scenarios=scenarios,
                examples=examples if scenario is None else 0,
                steps=steps,
                epsilon_ms=epsilon,
                save_dir=save_dir,
                progress=lambda n, total, item: bar.update(task, completed=n, total=total, item=item),
                profile=profile,
                workload_seconds=workload_seconds if scenario is None else 0,
                max_wait_ms=max_wait,
                concurrency=concurrency,
                brokers=brokers,
                chaos=chaos,
                probe=probe,
                plots=plots,
            )
    except (TargetSpecError, ScenarioError) as e:
        if report:  # the report is always written: here it says why nothing was judged
            _error_report(report, target, 2, str(e))
        raise _fail(str(e)) from None
    except Exception as e:  # rmqspec's own error: no verdict (exit 3), said in one line, never a traceback
        frames = traceback.extract_tb(e.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        message = f"rmqspec error {type(e).__name__}: {e}{where}; nothing was judged (please report it)"
        if report:
            _error_report(report, target, 3, message)
        err.print(f"[yellow]unknown:[/yellow] {escape(message)}")
        raise typer.Exit(3) from None
    if report:
        rep.write_json(report)
    if junit:
        rep.write_junit(junit)
    settings = _settings_line(profile, target)
    if settings:  # what the run judged by: above all, the defaults a run without --profile assumed
        _out().print(escape(settings))
    _print_report(rep, report)
    raise typer.Exit(rep.exit_code)


def _settings_line(profile: Path | None, target: str) -> str | None:
    """Which settings a run judges by: the profile's, or, without --profile, the defaults it assumed
    (None: a profile or target that cannot be read; the run says why)."""
    import attrs

    from rmqspec.adapters.apache.versions import UnknownVersion, pinned
    from rmqspec.adapters.remoting.profile import ProfileError, load_profile, resolve_profile
    from rmqspec.conformance.suite import broker_settings

    try:
        path = None if profile is None else resolve_profile(profile)
        tp = load_profile(path, "127.0.0.1:10911")
        if target.startswith(("apache:", "apache-proxy:")):  # as apache_target: the version's line
            line = pinned(target.partition(":")[2]).line
            tp = attrs.evolve(tp, config=attrs.evolve(tp.config, profile=line))
    except (ProfileError, UnknownVersion):
        return None
    shown = ", ".join(f"{k}={v}" for k, v in broker_settings(tp.config).items())
    if path is None:
        return (
            f"no --profile: assuming RocketMQ's defaults ({shown}; epsilon {tp.epsilon_ms} ms); "
            "give --profile NAME or FILE when the broker runs with other settings"
        )
    return f"profile: {tp.name or path.stem} ({path}): {shown}; epsilon {tp.epsilon_ms} ms"


def _error_report(report: Path, target: str, code: int, error: str) -> None:
    """The report of a run that judged nothing: why, and its exit code."""
    report.parent.mkdir(parents=True, exist_ok=True)
    doc = {"target": target, "passed": False, "exit_code": code, "error": error}
    report.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def _select(scenarios: list[Scenario], wanted: list[str] | None) -> list[Scenario]:
    """The scenarios named by ``--scenario`` (ids, rule ids or prefixes); all when none is given."""
    if not wanted:
        return scenarios
    chosen = [s for s in scenarios if any(s.id == w or s.id.startswith(w) or w in s.rules for w in wanted)]
    if not chosen:
        raise ScenarioError(
            f"--scenario {', '.join(wanted)}: no scenario has that id, rule or prefix "
            "(`rmqspec scenarios list` shows them)"
        )
    return chosen


def _out() -> Console:
    """The console for reports: no wrapping when the output is a log or a pipe (CI), so that ids and
    messages stay on one line each."""
    return console


def _print_root_causes(rep: Report, out: Console) -> None:
    """The run's root causes, at the top: a protocol failure named once in one line, then the first failure
    of each failed scenario and of the workload, by rule, in the order they showed."""
    roots = rep.root_causes
    if not roots:
        return
    out.print(
        f"[bold]Root causes[/bold] ({len(roots)}, the one that blocks the most first; what follows from each "
        "is counted under it):"
    )
    for n, r in enumerate(roots, start=1):
        label = "[red]PROTOCOL[/red]" if r.protocol else f"[red]{n}.[/red]"
        out.print(f"  {label} {escape(r.line())}")
        if r.first.frame:
            out.print(f"     [dim]frame: {escape(r.first.frame)}[/dim]")


def _print_report(rep: Report, report: Path | None = None) -> None:
    out = _out()
    _print_root_causes(rep, out)
    table = Table(title=f"rmqspec conform --target {rep.target}")
    # A rule passes only where a step that checks it ran and held: a scenario that stopped before those
    # steps counts its rules "not reached" (conformance/scenario_run.py, ScenarioResult.rule_outcomes).
    for col in ("rule", "pass", "fail", "not reached", "skip", "unknown"):
        table.add_column(col, justify="left" if col == "rule" else "right", no_wrap=col == "rule")
    for rule, counts in rep.by_rule().items():
        fails = counts.get("fail", 0)
        unreached = counts.get("not reached", 0)
        table.add_row(
            rule,
            str(counts.get("pass", 0)),
            f"[red]{fails}[/red]" if fails else "0",
            f"[yellow]{unreached}[/yellow]" if unreached else "0",
            str(counts.get("skip", 0)),
            str(counts.get("unknown", 0)),
        )
    out.print(table)
    # Failures first (what a broker's author acts on), then what could not be judged, then the skips.
    for r in rep.scenarios:
        if r.outcome == "fail":
            rules = ", ".join(r.failed_rules)
            out.print(
                f"[red]FAIL[/red] {escape(r.scenario.id)} {escape(f'[{rules}]')} ({escape(r.scenario.source)})"
            )
            for f in r.failures:
                where = f"step {f.step} ({f.operation})" if f.step else f.operation
                rule = " " + escape(f"[{f.rule}]") if f.rule else ""
                out.print(f"     {where}{rule}: {escape(f.message)}")
                if f.frame:
                    out.print(f"       [dim]frame: {escape(f.frame)}[/dim]")
    for r in rep.scenarios:
        if r.outcome == "unknown":
            out.print(f"[yellow]UNKNOWN[/yellow] {escape(r.scenario.id)}: {escape(r.reason)}")
    for r in rep.scenarios:
        if r.outcome == "skip":
            out.print(f"[dim]SKIP[/dim] {escape(r.scenario.id)}: {escape(r.reason)}")
    for hint in rep.hints:  # once per run: what to do about the skips for settings
        out.print(f"[dim]skipped for their settings:[/dim] {escape(hint)}")
    for rule, why in rep.hazards.items():
        out.print(f"[yellow]hazard[/yellow] {escape(rule)}: {escape(why)}")
    if rep.probe is not None:
        p = rep.probe
        state = (
            f"[yellow]stopped[/yellow]: {escape(p.stopped)}"
            if p.stopped
            else ("[red]findings[/red] (above)" if p.findings else "clean")
        )
        out.print(
            f"wire probe ({p.exchanges} exchanges, {p.broker_requests} broker requests, {p.seconds:.1f} s): {state}"
        )
    for line in rep.unjudged:
        out.print(f"[yellow]not judged[/yellow]: {escape(line)}")
    machine = "passed" if rep.machine is None else f"[red]FAILED[/red]\n{escape(rep.machine)}"
    if rep.mode == "workload":
        w = rep.workload
        extra = ""
        if w is not None and w.restarts:
            extra = (
                f"; {w.restarts} broker restarts, {w.acknowledged} messages acknowledged, {w.lost} lost, "
                f"{w.duplicates_allowed} duplicates (allowed by schedule/restart-redelivery)"
            )
        out.print(
            f"workload ({rep.machine_examples} operations, history checked at the end{extra}): {machine}"
        )
        for drawn in w.plots if w is not None else ():
            out.print(f"plot: {drawn}")
    else:
        out.print(f"state machine ({rep.machine_examples} runs, history checker after every step): {machine}")
    verdict = {0: "[green]PASS[/green]", 1: "[red]FAIL[/red]", 3: "[yellow]UNKNOWN[/yellow]"}[rep.exit_code]
    out.print(f"{verdict}: {escape(rep.summary())}" + (f" Report: {report}" if report else ""))


def mutants_cmd(
    list_only: Annotated[bool, typer.Option("--list", help="list the mutants and exit")] = False,
    examples: Annotated[int, typer.Option(help="state-machine runs per mutant")] = 30,
    only: Annotated[list[str] | None, typer.Option("--only", help="run only these mutants")] = None,
    report: Annotated[Path | None, typer.Option(help="write the kill matrix as JSON")] = None,
    workers: Annotated[int, typer.Option(help="processes to run mutants in")] = 2,
    fmt: FormatOpt = Format.TEXT,
) -> None:
    """Run the suite against every mutant; exit 1 unless each is killed by a failure naming its rule."""
    if list_only:
        if fmt is Format.JSON:
            listed = [
                {
                    "name": n,
                    "rule": m.rule,
                    "kind": m.kind,
                    "symptoms": list(m.symptoms),
                    "description": m.description,
                }
                for n, m in sorted(MUTANTS.items())
            ]
            typer.echo(json.dumps(listed, indent=2, ensure_ascii=False))
            raise typer.Exit(0)
        for name in sorted(MUTANTS):
            m = MUTANTS[name]
            console.print(escape(f"{name:36} {m.rule:32} {m.kind:8} {m.description}"))
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
    for r in rows:  # where the suite broke on a mutant: no kill, said here (the JSON report lists them all)
        if r.errors:
            more = f" ({len(r.errors) - 1} more)" if len(r.errors) > 1 else ""
            console.print(f"[red]error[/red] {escape(r.mutant)}: {escape(r.errors[0])}{more}")
    if report:
        doc = {"summary": counts, "seconds": round(took, 1), "mutants": [r.to_json() for r in rows]}
        report.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    raise typer.Exit(0 if counts["killed"] == len(rows) else 1)


def faults_cmd(
    list_only: Annotated[bool, typer.Option("--list", help="list the faults and exit")] = False,
    only: Annotated[list[str] | None, typer.Option("--only", help="run only these faults")] = None,
    profile: Annotated[
        Path,
        typer.Option(
            help="target profile (a YAML file, or a shipped one by name: short-levels): the settings each faulty broker is served with"
        ),
    ] = Path("profiles/short-levels.yaml"),
    workload_seconds: Annotated[float, typer.Option(help="seconds of workload in each run")] = 10.0,
    workers: Annotated[int, typer.Option(help="faults run at once, each in a process of its own")] = 3,
    report: Annotated[Path | None, typer.Option(help="write the matrix as JSON")] = None,
    report_dir: Annotated[
        Path | None, typer.Option(help="write each run's report (NAME.json) and failing histories here")
    ] = None,
    random_n: Annotated[
        int,
        typer.Option(
            "--random",
            help="instead of the zoo: N generated brokers with 1-3 faults each, graded by their truth",
        ),
    ] = 0,
    seed: Annotated[
        list[int] | None, typer.Option("--seed", help="the draw's seed (repeat for several)")
    ] = None,
    combo: Annotated[
        list[str] | None,
        typer.Option("--combo", help="a named combination (go-broker, ...) or SEED:INDEX, graded"),
    ] = None,
    fmt: FormatOpt = Format.TEXT,
) -> None:
    """Run the whole suite over TCP against every broken broker of the zoo (`rmqspec serve --fault NAME`)
    and print the matrix; exit 0 only if every fault is diagnosed right: its rule named as the first root
    cause with at most a handful of root causes (a broker that stops answering: exit 3, what could not be
    judged said). With --random N (and --seed S) or --combo NAME: brokers with several faults at once,
    each diagnosis graded against the combination's truth (every fault named, no false cause, the most
    blocking fault first); exit 0 only if every one is right."""
    if random_n or combo:
        _combos(random_n, seed or [1], combo or [], profile, workload_seconds, workers, report, report_dir)
        return
    if list_only:
        if fmt is Format.JSON:
            listed = [
                {
                    "name": name,
                    "kind": f.kind,
                    "rule": f.rule,
                    "expect": f.expect,
                    "symptoms": list(f.symptoms),
                    "description": f.description,
                }
                for name, f in zoo.FAULTS.items()
            ]
            typer.echo(json.dumps(listed, indent=2, ensure_ascii=False))
            raise typer.Exit(0)
        for name, f in zoo.FAULTS.items():
            expect = f.rule if f.expect == "fail" else "unknown (exit 3)"
            _out().print(escape(f"{name:28} {f.kind:10} {expect:30} {f.description}"))
        raise typer.Exit(0)
    unknown = [n for n in (only or []) if n not in zoo.FAULTS]
    if unknown:
        raise _fail(f"unknown fault(s): {', '.join(unknown)} (`rmqspec faults --list` shows the names)")
    if workers < 1:
        raise _fail("--workers must be at least 1")
    from rmqspec.adapters.remoting.profile import ProfileError, resolve_profile

    try:
        profile = resolve_profile(profile)
    except ProfileError as e:
        raise _fail(f"no profile {e}") from None
    if not profile.is_file():
        raise _fail(f"no profile {profile}: give --profile FILE or a shipped profile's name (short-levels)")
    runner = FaultRunner(profile=profile, workload_seconds=workload_seconds, report_dir=report_dir)
    start = time.perf_counter()
    names = list(dict.fromkeys(only)) if only else list(zoo.FAULTS)
    with _progress() as bar:
        task = bar.add_task("faults", total=len(names), item="")
        rows = fault_matrix(
            runner,
            names,
            workers=workers,
            progress=lambda n, total, item: bar.update(task, completed=n, total=total, item=item),
        )
    took = time.perf_counter() - start
    out = _out()
    table = Table(title="faults matrix: the suite over TCP against each broken broker")
    for col in ("fault", "kind", "expected root cause", "first root cause reported", "roots", "outcome", "s"):
        table.add_column(col, justify="right" if col in ("roots", "s") else "left")
    for r in rows:
        outcome = f"[green]{r.outcome}[/green]" if r.ok else f"[red]{r.outcome.upper()}[/red]"
        table.add_row(
            r.fault,
            r.kind,
            r.expected,
            r.first or ("— (exit 3)" if r.exit_code == 3 else "—"),
            str(r.root_causes),
            outcome,
            f"{r.seconds:.0f}",
        )
    out.print(table)
    for r in rows:
        if not r.ok:
            out.print(f"[red]{escape(r.fault)}[/red] {escape(r.outcome)}: {escape(r.line)}")
    counts = zoo.matrix_summary(rows)
    good = counts[zoo.DIAGNOSED]
    out.print(
        f"{good}/{len(rows)} faults diagnosed right"
        + "".join(f", {n} {k}" for k, n in counts.items() if n and k != zoo.DIAGNOSED)
        + f" ({took:.0f} s, {workers} worker(s))"
    )
    if report:
        doc = {
            "summary": counts,
            "max_root_causes": zoo.MAX_ROOT_CAUSES,
            "seconds": round(took, 1),
            "faults": [r.to_json() for r in rows],
        }
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    raise typer.Exit(0 if good == len(rows) else 1)


def _combos(
    n: int,
    seeds: list[int],
    named: list[str],
    profile: Path,
    workload_seconds: float,
    workers: int,
    report: Path | None,
    report_dir: Path | None,
) -> None:
    """``faults --random``/``--combo``: the generated brokers, their grades and the score."""
    from rmqspec.conform import ComboRunner, combo_matrix
    from rmqspec.conformance import faultgen

    if n < 0:
        raise _fail("--random must be at least 0")
    if workers < 1:
        raise _fail("--workers must be at least 1")
    if not profile.is_file():
        raise _fail(f"no profile {profile}: give --profile FILE (the repo's is profiles/short-levels.yaml)")
    specs: list[str] = []
    for name in named:
        try:
            faultgen.combination(name)
        except KeyError as e:
            raise _fail(str(e.args[0])) from None
        specs.append(name)
    for s in seeds:
        specs += [f"{s}:{i}" for i in range(n)]
    runner = ComboRunner(profile=profile, workload_seconds=workload_seconds, report_dir=report_dir)
    start = time.perf_counter()
    with _progress() as bar:
        task = bar.add_task("combinations", total=len(specs), item="")
        grades = combo_matrix(
            runner,
            specs,
            workers=workers,
            progress=lambda k, total, item: bar.update(task, completed=k, total=total, item=item),
        )
    took = time.perf_counter() - start
    out = _out()
    table = Table(title="generated brokers: each diagnosis against the combination's truth")
    for col in ("combination", "first cause", "missed", "false causes", "right"):
        table.add_column(col)
    for g in grades:
        table.add_row(
            g.combination,
            f"{g.first_rule or '—'}{'' if g.first_ok else ' (not first)'}",
            ", ".join(g.missed) or "—",
            ", ".join(g.false_causes) or "—",
            "[green]yes[/green]" if g.right else f"[red]NO[/red]{' ' + escape(g.error) if g.error else ''}",
        )
    out.print(table)
    sc = faultgen.score(grades)
    out.print(
        f"{sc['right']}/{sc['combinations']} combinations fully right ({100 * float(sc['share']):.1f} %): "
        f"{sc['missed_fault']} missed a fault, {sc['false_cause']} named a false cause, "
        f"{sc['wrong_first']} put another fault first, {sc['crashed']} crashed ({took:.0f} s, seeds "
        f"{', '.join(map(str, seeds)) if n else '—'})"
    )
    if report:
        doc = {
            "score": sc,
            "seeds": seeds,
            "seconds": round(took, 1),
            "grades": [g.to_json() for g in grades],
        }
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    raise typer.Exit(0 if sc["right"] == sc["combinations"] else 1)


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
def scenarios_list(fmt: FormatOpt = Format.TEXT) -> None:
    """List scenario ids with their rules and features, one line each."""
    try:
        scenarios = catalogue()
    except ScenarioError as e:
        raise _fail(str(e)) from None
    if fmt is Format.JSON:
        rows = [
            {
                "id": s.id,
                "rules": list(s.rules),
                "features": sorted(f.value for f in s.features),
                "source": s.source,
            }
            for s in scenarios
        ]
        typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    for s in scenarios:
        features = ", ".join(sorted(f.value for f in s.features))
        console.print(
            escape(f"{s.id}  rules: {', '.join(s.rules)}" + (f"  features: {features}" if features else ""))
        )


def serve_cmd(
    port: Annotated[int, typer.Option(help="TCP port (0: any free port, printed)")] = 10911,
    host: Annotated[str, typer.Option(help="address to listen on (loopback by default)")] = "127.0.0.1",
    target: Annotated[str, typer.Option(help="what to serve: reference or mutant:NAME")] = "reference",
    fault: Annotated[
        str | None,
        typer.Option(
            "--fault",
            help="serve a broken broker of the zoo (`rmqspec faults --list`): the reference with one fault",
        ),
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            help="target profile (a YAML file, or a shipped one by name: short-levels) whose broker settings the served model uses"
        ),
    ] = None,
    seconds: Annotated[
        float | None, typer.Option(help="stop after this many seconds (default: never)")
    ] = None,
) -> None:
    """Serve the reference model (or a mutant) over RocketMQ's remoting protocol, on the wall clock."""
    import asyncio

    from rmqspec.adapters.remoting.profile import ProfileError, load_profile
    from rmqspec.adapters.remoting.server import serve_forever
    from rmqspec.reference.model import Model

    if not 0 <= port < 65536:
        raise _fail(f"port {port} is not from 0 to 65535")
    try:
        config = load_profile(profile, f"{host}:{port or 1}").config
    except ProfileError as e:
        raise _fail(str(e)) from None
    wire = None
    if fault is not None:
        if target != "reference":
            raise _fail("--fault and --target name two brokers: give one of them")
        try:
            chosen = zoo.fault(fault)
        except KeyError as e:
            raise _fail(str(e.args[0])) from None
        model, wire, target = chosen.model(config), chosen.wire_fault(), f"fault:{fault}"
    elif target == "reference":
        model = Model(config)
    elif target.startswith("mutant:") and target.removeprefix("mutant:") in MUTANTS:
        m = MUTANTS[target.removeprefix("mutant:")]
        model, wire = m.model(config), m.wire
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

    if wire is not None:  # the model on a free loopback port, the fault's proxy on the port asked for
        _serve_through(wall, wire, host, port, seconds, ready)
        return

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


def _serve_through(
    wall: WallClockTarget,
    wire: Faulty,
    host: str,
    port: int,
    seconds: float | None,
    ready: Callable[[tuple[str, int]], None],
) -> None:
    """Serve ``wall`` behind a FaultProxy listening on ``host:port``, until ``seconds`` pass or Ctrl-C."""
    from rmqspec.adapters.remoting.server import BackgroundServer

    try:
        with contextlib.ExitStack() as stack:
            inner_host, inner_port = stack.enter_context(BackgroundServer(wall))
            bound = stack.enter_context(FaultProxy(inner_host, inner_port, wire, listen=(host, port)))
            ready(bound)
            deadline = None if seconds is None else time.monotonic() + seconds
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
    except OSError as e:
        raise _fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    except KeyboardInterrupt:
        pass


def java_workload_cmd(
    target: Annotated[
        str, typer.Option(help="apache:VERSION (a pinned version: 4.9.7, 5.5.0)")
    ] = "apache:4.9.7",
    seconds: Annotated[
        float, typer.Option(help="seconds of workload (then it settles and reads back)")
    ] = 30.0,
    seed: Annotated[int, typer.Option(help="seed of the workload's choices")] = 0,
    save: Annotated[Path | None, typer.Option(help="write the history (JSON Lines) here")] = None,
    report: Annotated[Path | None, typer.Option(help="write the verdict as JSON")] = None,
) -> None:
    """Run the wall-clock workload with Apache RocketMQ's own Java client (rocketmq-client at the broker's
    version, built from adapters/apache/javadriver) against a broker rmqspec starts, read back every record
    of its commit log, and judge the history. Exit 0: pass, 1: fail, 3: unknown."""
    from rmqspec.adapters.apache.javadriver import JavaDriverError, java_workload

    kind, _, version = target.partition(":")
    if kind != "apache" or not version:
        raise _fail(f"--target {target!r}: the Java-client workload runs on apache:VERSION")
    if seconds <= 0:
        raise _fail("--seconds must be more than 0")
    try:
        res = java_workload(version, seconds=seconds, seed=seed, save=save, progress=lambda s: err.print(s))
    except (JavaDriverError, ValueError) as e:
        raise _fail(str(e)) from None
    out = _out()
    out.print(escape(res.log))
    out.print(f"{len(res.events)} events in {res.seconds:.0f} s; {escape(res.verdict.summary())}")
    if save is not None:
        out.print(f"history: {save}")
    if report is not None:
        report.write_text(json.dumps(res.verdict.to_json(), indent=2) + "\n", encoding="utf-8")
    raise typer.Exit({"pass": 0, "fail": 1}.get(res.verdict.status, 3))


def register(app: typer.Typer) -> None:
    app.command("java-workload")(java_workload_cmd)
    app.command("serve")(serve_cmd)
    app.command("conform")(conform_cmd)
    app.command("mutants")(mutants_cmd)
    app.command("faults")(faults_cmd)
    app.add_typer(scenarios_app, name="scenarios")

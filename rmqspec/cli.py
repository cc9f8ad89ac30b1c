"""The ``rmqspec`` command: one Typer app; each sub-command is a function registered on it.

To add a command, write it as a plain function (Typer options as ``Annotated`` parameters) and register
it in :func:`build_app` (or give its module a ``register(app)`` function and call that there).
Exit codes: 0 success, 1 a check failed, 2 bad input (a one-line error, never a traceback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rmqspec import __version__
from rmqspec.conformance.specdoc import SpecError
from rmqspec.console import Format, FormatOpt, make_console
from rmqspec.rules import RuleTrace, Traceability, default_root, scan

__all__ = ["app", "build_app", "main", "rules_cmd"]


def _error(message: str) -> typer.Exit:
    """Print a one-line error on stderr; the caller raises the returned exit (code 2)."""
    make_console(stderr=True).print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(2)


def rules_cmd(
    rule_id: Annotated[
        str | None,
        typer.Argument(metavar="[RULE]", help="show one rule whole: text, sources, code and checks"),
    ] = None,
    grep: Annotated[
        str | None, typer.Option("--grep", metavar="WORD", help="only the rules whose ID or text holds WORD")
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="exit 1 if a rule lacks implementation or coverage, or code cites an unknown rule"
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print the traceability as JSON instead of a table (= --format json)"),
    ] = False,
    fmt: FormatOpt = Format.TEXT,
    sources: Annotated[
        bool,
        typer.Option(
            "--sources", help="with --check: also fail on a rule whose Source line does not back its Versions"
        ),
    ] = False,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help="the tree to scan: holds spec/, reference/, conformance/, adapters/ (default: the installed package)",
        ),
    ] = None,
) -> None:
    """Every spec rule, the code that implements it and the checks that cover it."""
    as_json = as_json or fmt is Format.JSON
    root = default_root() if root is None else root
    if not root.is_dir():
        raise _error(f"{root}: no such directory")
    try:
        trace = scan(root)
    except SpecError as e:
        raise _error(str(e)) from None
    except OSError as e:
        raise _error(f"cannot read the tree at {root}: {e}") from None
    problems = trace.problems(require_sources=True if sources else None)
    if rule_id is not None or grep is not None:
        chosen = _chosen(trace, rule_id, grep)
        if as_json:
            typer.echo(json.dumps([t.details() for t in chosen], indent=2, ensure_ascii=False))
        else:
            for t in chosen:
                _print_rule(t)
        raise typer.Exit(1 if check and problems else 0)
    if as_json:
        typer.echo(json.dumps(trace.to_json(), indent=2, ensure_ascii=False))
    else:
        _print_rules(trace, problems)
    raise typer.Exit(1 if check and problems else 0)


def _chosen(trace: Traceability, rule_id: str | None, grep: str | None) -> list[RuleTrace]:
    if rule_id is not None:
        try:
            return [trace.trace(rule_id)]
        except KeyError:
            near = [t.id for t in trace.rules if rule_id.split("/")[-1] in t.id][:5]
            hint = f" (did you mean {', '.join(near)}?)" if near else " (`rmqspec rules` lists them)"
            raise _error(f"no rule {rule_id!r}{hint}") from None
    word = (grep or "").lower()
    chosen = [t for t in trace.rules if word in t.id.lower() or word in t.rule.statement_markdown.lower()]
    if not chosen:
        raise _error(f"no rule's ID or text holds {grep!r}")
    return chosen


def _print_rule(t: RuleTrace) -> None:
    out = make_console()
    d = t.details()
    out.print(f"[bold]{escape(t.id)}[/bold]  ({escape(d['file'])})")
    out.print(f"Versions: {escape(d['versions'])}")
    if d["source"]:
        out.print(f"Source: {escape(d['source'])}")
    out.print(escape(t.rule.statement_markdown))
    out.print("Implemented by: " + (", ".join(d["implemented_by"]) or "[red]nothing[/red]"))
    for kind, items in d["checks"].items():
        label = kind.replace("_", " ")
        out.print(f"{label} ({len(items)}): " + (escape(", ".join(items)) if items else "—"))
    out.print("")


def _print_rules(trace: Traceability, problems: list[str]) -> None:
    console = make_console()  # a log or a pipe: plain, not cut at 80 columns
    table = Table(title=f"spec rules ({escape(str(trace.root))})")
    id_width = max((len(t.id) for t in trace.rules), default=4)
    show_versions = console.width >= id_width + 100  # a narrow terminal: the versions are in --json
    table.add_column("rule", no_wrap=True, min_width=id_width)
    if show_versions:
        table.add_column("versions", no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column("implemented by", no_wrap=True, overflow="ellipsis", min_width=12)
    table.add_column("covered by", no_wrap=True, min_width=10)
    for t in trace.rules:
        impl = (
            f"{len(t.implemented_by)} ({escape(str(t.implemented_by[0]))})"
            if t.implemented_by
            else "[red]0[/red]"
        )
        cov = str(t.coverage_count) if t.covered else "[red]0[/red]"
        if t.covered:
            cov += f" ({len(t.examples)} ex)"
        versions = [escape(_short_versions(t.rule.versions))] if show_versions else []
        table.add_row(escape(t.id), *versions, impl, cov)
    console.print(table)
    out = make_console()
    for w in trace.warnings():
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")
    for p in problems:
        out.print(f"[red]problem:[/red] {escape(p)}")
    s = trace.summary()
    verdict = "[green]OK[/green]" if not problems else f"[red]{len(problems)} problem(s)[/red]"
    out.print(
        f"{verdict}: {s['rules']} rules in {len(trace.spec.areas)} areas; {s['implemented']} implemented, "
        f"{s['covered']} covered ({s['examples']} spec examples); {s['unknown_citations']} unknown citation(s)"
    )


def _short_versions(versions: str) -> str:
    """The first sentence of a versions line (the default profile's range)."""
    head, sep, _ = versions.partition(". ")
    return head + ("." if sep else "")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rmqspec {__version__}")
        raise typer.Exit(0)


def build_app() -> typer.Typer:
    """The ``rmqspec`` app with every sub-command registered."""
    app = typer.Typer(
        name="rmqspec",
        help="The executable specification of Apache RocketMQ broker semantics, and its conformance kit.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def _main(
        version: Annotated[
            bool,
            typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit"),
        ] = False,
    ) -> None:
        """rmqspec: spec rules, conformance runs, mutants and scenarios."""

    app.command("rules")(rules_cmd)

    from rmqspec import broker_cli, commands, matrix_cli, traces_cli  # conform, ...; traces; broker; matrix

    commands.register(app)
    matrix_cli.register(app)
    traces_cli.register(app)
    broker_cli.register(app)
    return app


app = build_app()


def main() -> None:
    app()

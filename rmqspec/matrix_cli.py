"""``rmqspec matrix``: the release matrix on pinned Apache RocketMQ releases (``make conform-matrix``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from .matrix import ReleaseRun

console = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def matrix_cmd(
    release: Annotated[
        list[str] | None,
        typer.Option("--release", help="a pinned release (repeat; default: every pinned one)"),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="the matrix's JSON")] = Path("docs/results/matrix.json"),
    page: Annotated[Path, typer.Option("--page", help="the site's page of it")] = Path(
        "docs/release-matrix.md"
    ),
    work: Annotated[Path, typer.Option("--work", help="per-release reports and failures")] = Path(
        "out/matrix"
    ),
    keep: Annotated[
        bool,
        typer.Option("--keep/--fresh", help="keep the rows of releases not run now from the existing JSON"),
    ] = True,
    dry: Annotated[bool, typer.Option("--plan", help="only print what each release would run")] = False,
    smoke: Annotated[int, typer.Option("--smoke", help="smoke scenarios per area")] = 3,
    brokers: Annotated[int, typer.Option("--brokers", help="brokers running scenarios at once")] = 1,
    render: Annotated[
        bool, typer.Option("--render", help="run nothing: rebuild the table and page from the JSON")
    ] = False,
) -> None:
    """Run the scenarios whose expected answer changes across releases, plus a smoke set, on each pinned
    release (one broker at a time); write the rule x release table. Exit 1 when a run contradicts a rule."""
    from rmqspec.adapters.apache.versions import PINNED, UnknownVersion, pinned
    from rmqspec.conformance.scenarios import catalogue
    from rmqspec.conformance.specdoc import load_spec

    from . import matrix as mx

    root = Path.cwd()
    try:
        releases = [pinned(v).version for v in release] if release else list(PINNED)
    except UnknownVersion as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    spec = load_spec()
    versions = {r.id: r.versions for r in spec.rules}
    selection = mx.select(catalogue(spec), spec, smoke)
    if dry:
        for v in releases:
            run, off = mx.plan(selection, versions, v)
            rnr = sum(1 for why in off.values() if why.startswith(mx.READ_NOT_RUN))
            console.print(f"{v}: runs {len(run)} of {len(selection.scenarios)}; {rnr} read, not run")
        return
    previous: dict[str, mx.ReleaseRun] = {}
    old_commit = ""
    if keep and out.is_file():
        try:
            old = json.loads(out.read_text(encoding="utf-8"))
            old_commit = str(old["commit"])
            previous = {
                r["release"]: mx.ReleaseRun.from_json(r, old["commit"], old["date"]) for r in old["releases"]
            }
        except (OSError, ValueError, KeyError, TypeError) as e:
            err.print(f"[red]error:[/red] {out} is not the matrix's JSON ({e}); use --fresh")
            raise typer.Exit(2) from None
    if render:
        if not previous:
            err.print(f"[red]error:[/red] no matrix results in {out} to render")
            raise typer.Exit(2)
        ordered = [_with_reasons(previous[r], work) for r in PINNED if r in previous]
        doc = mx.document(ordered, selection, spec, old_commit)
        out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        page.write_text(mx.render_markdown(doc), encoding="utf-8")
        console.print(f"{out} and {page} rebuilt ({len(doc['contradictions'])} contradictions)")
        return
    runs: dict[str, mx.ReleaseRun] = dict(previous)
    commit = mx.commit_of(root)  # the code the runs below run (read before they write anything)
    for v in releases:
        console.print(f"== apache:{v}")

        def progress(done: int, total: int, what: str, v: str = v) -> None:
            if done % 10 == 0 or done == total:
                console.print(f"  {v}: {done}/{total} {escape(what)}")

        got = mx.run_release(
            v, selection, versions, root, work, progress=progress, brokers=brokers, commit=commit
        )
        n = {k: sum(1 for o in got.outcomes if o.outcome == k) for k in ("pass", "fail", "skip", "unknown")}
        console.print(f"  {v}: {got.status}; {n} in {got.seconds:.0f} s")
        runs[v] = got
        ordered = [runs[r] for r in PINNED if r in runs]
        doc = mx.document(ordered, selection, spec, commit)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        page.write_text(mx.render_markdown(doc), encoding="utf-8")
    doc = json.loads(out.read_text(encoding="utf-8"))
    if doc["contradictions"]:
        for rule, v, sid in doc["contradictions"]:
            console.print(f"[red]contradicted:[/red] {rule} on {v} ({escape(sid)})")
        raise typer.Exit(1)
    console.print(f"no contradiction; {out} and {page} written")


def _with_reasons(run: ReleaseRun, work: Path) -> ReleaseRun:
    """A failed outcome written without its failures' messages gets them from the release's report in
    ``work`` (apache-V.json, written by the same run), where that is still there."""
    import attrs

    report = work / f"apache-{run.release}.json"
    if not report.is_file() or all(o.reason or o.outcome != "fail" for o in run.outcomes):
        return run
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
        found = {s["id"]: s.get("failures") or [] for s in data["scenarios"]}
    except (OSError, ValueError, KeyError, TypeError):
        return run
    outs = tuple(
        attrs.evolve(
            o,
            reason="; ".join(
                f"step {f['step']} {f['operation']}: {f['message']}" for f in found.get(o.scenario, [])[:3]
            ),
        )
        if o.outcome == "fail" and not o.reason
        else o
        for o in run.outcomes
    )
    return attrs.evolve(run, outcomes=outs)


def register(app: typer.Typer) -> None:
    app.command("matrix")(matrix_cmd)

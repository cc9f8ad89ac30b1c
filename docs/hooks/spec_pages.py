"""mkdocs hook: generate the spec pages from ``spec/`` at build time.

Registered under ``hooks:`` in ``mkdocs.yml``. The project root is the folder of ``mkdocs.yml``; the
spec is ``<root>/spec`` and the traceability comes from :func:`rmqspec.rules.scan` over ``<root>``
(``reference/``, ``conformance/``, ``adapters/``). The pages are virtual files added in ``on_files``:
nothing is written into the source tree.

* ``spec/index.md``: the rule index, one row per rule with the anchor ``#<area>-<case>``;
* ``spec/<area>.md``: one page per spec file, one section per rule (anchor ``#<area>-<case>``) with
  the versions, the statement, the examples as YAML, the implemented-by / covered-by lists, the model
  code that implements it (collapsed excerpts) and its results on each verified target;
* ``results.md`` and ``results.json``: every rule's result on every target (``site_results.py``).

The pages go into the ``nav:`` section that lists ``spec/index.md``, one entry per area.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.livereload import LiveReloadServer
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from site_results import Results, collect, render_results_page, render_rule_results

from rmqspec.conformance.specdoc import Rule, SpecError, SpecFile
from rmqspec.rules import (
    ADAPTERS_DIR,
    COVERING_DIR,
    IMPLEMENTING_DIR,
    SPEC_DIR,
    RuleTrace,
    Traceability,
    scan,
)

log = logging.getLogger("mkdocs.hooks.spec_pages")

PAGES_DIR = "spec"  # where the generated pages live in the site
INDEX = f"{PAGES_DIR}/index.md"
RESULTS_PAGE = "results.md"
RESULTS_JSON = "results.json"
EXCERPT_LINES = 24  # at most this many lines of model code per citation

_trace: Traceability | None = None
_results: Results | None = None


def anchor(rule_id: str) -> str:
    """The stable anchor of a rule: its ID with ``/`` replaced by ``-``."""
    return rule_id.replace("/", "-")


def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


# --- hooks -------------------------------------------------------------------------------------------


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    global _trace, _results
    root = _root(config)
    try:
        _trace = scan(root)
    except SpecError as e:
        raise PluginError(f"spec_pages: {e}") from None
    _results = collect(root)
    if "attr_list" not in config.markdown_extensions:
        raise PluginError("spec_pages: the generated pages need the attr_list markdown extension")
    _add_to_nav(config, _trace)
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = _root(config)
    trace = _trace if _trace is not None else scan(root)
    results = _results if _results is not None else collect(root)
    for uri, text in render_pages(trace, results).items():
        existing = files.get_file_from_path(uri)
        if existing is not None:
            raise PluginError(f"spec_pages: docs/{uri} would hide the page generated from spec/; remove it")
        files.append(File.generated(config, uri, content=text))
    files.append(File.generated(config, RESULTS_JSON, content=json.dumps(results.to_json(), indent=1) + "\n"))
    return files


_IF_PAGE = re.compile(
    r"^<!-- if-page (?P<uri>\S+) -->\n(?P<then>.*?)(?:^<!-- else -->\n(?P<other>.*?))?^<!-- end-if -->\n?",
    re.S | re.M,
)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Keep a hand-written page's ``<!-- if-page URI -->`` block only when the page URI exists.

    ``<!-- if-page traces.md -->`` ... ``<!-- else -->`` ... ``<!-- end-if -->`` (the else part is
    optional): a guide may link to a page another change adds, and the strict build stays green
    until it does.
    """
    if "<!-- if-page " not in markdown:
        return markdown
    return resolve_if_page(markdown, lambda uri: files.get_file_from_path(uri) is not None)


def resolve_if_page(markdown: str, exists: Callable[[str], bool]) -> str:
    def choose(m: re.Match[str]) -> str:
        return m.group("then") if exists(m.group("uri")) else (m.group("other") or "")

    return _IF_PAGE.sub(choose, markdown)


def on_serve(server: LiveReloadServer, config: MkDocsConfig, builder: Any) -> LiveReloadServer:
    root = _root(config)
    for name in (SPEC_DIR, IMPLEMENTING_DIR, COVERING_DIR, ADAPTERS_DIR):
        if (root / name).is_dir():
            server.watch(str((root / name).resolve()))
    return server


def _add_to_nav(config: MkDocsConfig, trace: Traceability) -> None:
    nav = config.nav
    if not nav:
        return  # no nav: mkdocs lists every page
    entries: list[Any] = [{f.title: f"{PAGES_DIR}/{f.area}.md"} for f in trace.spec.files]

    def find(items: list[Any]) -> list[Any] | None:
        for item in items:
            values = item.values() if isinstance(item, dict) else [item]
            for value in values:
                if value == INDEX:
                    return items
                if isinstance(value, list) and (found := find(value)) is not None:
                    return found
        return None

    section = find(nav)
    if section is None:
        nav.append({"Spec": [{"Rule index": INDEX}, *entries]})
        return
    listed = {v for item in section for v in (item.values() if isinstance(item, dict) else [item])}
    section.extend(e for e in entries if next(iter(e.values())) not in listed)


# --- rendering ---------------------------------------------------------------------------------------


def render_pages(trace: Traceability, results: Results | None = None) -> dict[str, str]:
    """Every generated page: ``{docs-relative path: Markdown}``."""
    pages = {INDEX: render_index(trace)}
    for f in trace.spec.files:
        pages[f"{PAGES_DIR}/{f.area}.md"] = render_area(trace, f, results)
    if results is not None:
        rules = [(r.id, r.title or "") for r in trace.spec.rules]
        pages[RESULTS_PAGE] = render_results_page(
            results, rules, lambda rule_id: f"[`{rule_id}`]({PAGES_DIR}/{_link_target(rule_id, '')})"
        )
    return pages


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _short_versions(versions: str) -> str:
    head, sep, _ = versions.partition(". ")
    return head + ("." if sep else "")


def render_index(trace: Traceability) -> str:
    s = trace.summary()
    out = [
        "# Rule index",
        "",
        f"{s['rules']} rules in {len(trace.spec.areas)} areas; {s['implemented']} implemented in "
        f"`{IMPLEMENTING_DIR}/`, {s['covered']} covered by the {s['examples']} spec examples or by "
        f"`{COVERING_DIR}/`. Generated from `spec/` at build time (the same data as `rmqspec rules`).",
        "",
    ]
    problems = trace.problems()
    if problems:
        out += ['!!! warning "Problems (`rmqspec rules --check` fails)"', ""]
        out += [f"    - {_cell(p)}" for p in problems]
        out.append("")
    for f in trace.spec.files:
        out += [f"## {f.title} (`{f.area}`) {{ #{f.area} }}", ""]
        if not f.rules:
            out += ["No rules yet.", ""]
            continue
        out += ["| rule | summary | versions | implemented by | covered by |", "|---|---|---|---|---|"]
        for r in f.rules:
            t = trace.trace(r.id)
            out.append(
                f'| <a id="{anchor(r.id)}"></a>[`{r.id}`]({f.area}.md#{anchor(r.id)}) '
                f"| {_cell(r.title or '')} | {_cell(_short_versions(r.versions))} "
                f"| {len(t.implemented_by) or '**0**'} | {t.coverage_count or '**0**'} |"
            )
        out.append("")
    return "\n".join(out)


def render_area(trace: Traceability, f: SpecFile, results: Results | None = None) -> str:
    ids = trace.spec.ids
    here = f.area
    out = [f"# {f.title}", ""]
    if f.intro_markdown:
        out += [link_rules(f.intro_markdown, ids, here), ""]
    out += [f"Rules: {', '.join(_link(r.id, here) for r in f.rules) or 'none yet'}.", ""]
    for r in f.rules:
        out += render_rule(trace.trace(r.id), ids, here, results, trace.root)
    return "\n".join(out)


def render_rule(
    t: RuleTrace,
    ids: frozenset[str],
    here: str,
    results: Results | None = None,
    root: Path | None = None,
) -> list[str]:
    r: Rule = t.rule
    out = [f"## {r.id} {{ #{anchor(r.id)} }}", "", f"**Versions:** {r.versions}", ""]
    if r.facts:
        out += [f"**Facts:** {r.facts}", ""]
    out += [link_rules(r.statement_markdown, ids, here), ""]
    for ex in r.examples:
        also = ex.also
        head = f"**Example** `{ex.id}`"
        if also:
            head += " — also covers " + ", ".join(_link(a, here) for a in also)
        fence = "`" * max(3, _longest_run(ex.source, "`") + 1)
        out += [head, "", f"{fence}yaml", ex.source.strip("\n"), fence, ""]
    excerpts = [render_excerpt(root, loc.path, loc.line) for loc in t.implemented_by] if root else []
    if excerpts and all(excerpts):
        out += ["**Implemented by** (the model code that cites this rule):", ""]
        out += [line for e in excerpts for line in e]
    else:
        impl = ", ".join(f"`{loc}`" for loc in t.implemented_by) or "**none** (`rmqspec rules --check` fails)"
        out += [f"**Implemented by:** {impl}", ""]
    covered = [f"`{e}`" for e in t.examples] + [f"`{loc}`" for loc in t.covered_by]
    cov = ", ".join(covered) or "**nothing** (`rmqspec rules --check` fails)"
    out += [f"**Covered by:** {cov}", ""]
    if results is not None:
        out += render_rule_results(results, r.id, "../" + RESULTS_PAGE)
    out += [f"<small>Source: `{r.file}:{r.line}`</small>", ""]
    return out


def code_excerpt(source: str, line: int) -> tuple[int, int, str | None]:
    """The lines to show around ``line`` (1-based, inclusive) and the enclosing function's name.

    Inside a function: from its ``def`` when the citation is near the top (a docstring citation), else
    from a few lines above; at most :data:`EXCERPT_LINES` lines, never past the function's end.
    """
    lines = source.splitlines()
    func: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and node.lineno <= line <= (node.end_lineno or node.lineno)
                and (func is None or node.lineno >= func.lineno)
            ):
                func = node
    if func is None:
        start = max(1, line - 3)
        return start, min(len(lines), start + 8), None
    first = min((d.lineno for d in func.decorator_list), default=func.lineno)
    last = func.end_lineno or func.lineno
    start = first if line - first < EXCERPT_LINES // 2 else line - 6
    end = min(last, max(line + 8, start + EXCERPT_LINES // 2), start + EXCERPT_LINES - 1)
    return start, end, func.name


def render_excerpt(root: Path, path: str, line: int) -> list[str]:
    """A collapsed block with the code around a citation, the cited line highlighted."""
    try:
        source = (root / path).read_text(encoding="utf-8")
    except OSError:
        return []
    start, end, name = code_excerpt(source, line)
    body = "\n".join(source.splitlines()[start - 1 : end])
    fence = "`" * max(3, _longest_run(body, "`") + 1)
    where = f" in `{name}()`" if name else ""
    title = f"`{path}:{line}`{where}".replace('"', "'")
    out = [f'??? example "{title}"', ""]
    out.append(f'    {fence}python linenums="{start}" hl_lines="{line - start + 1}"')
    out += [f"    {x}" if x.strip() else "" for x in body.split("\n")]
    out += [f"    {fence}", ""]
    return out


def _longest_run(text: str, char: str) -> int:
    return max((len(m.group(0)) for m in re.finditer(re.escape(char) + "+", text)), default=0)


def _link_target(rule_id: str, here: str) -> str:
    area = rule_id.split("/")[0]
    page = "" if area == here else f"{area}.md"
    return f"{page}#{anchor(rule_id)}"


def _link(rule_id: str, here: str) -> str:
    return f"[`{rule_id}`]({_link_target(rule_id, here)})"


_PROTECTED = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<inner>.+?)(?P=ticks))"  # a code span
    r"|(?P<link>!?\[[^\]]*\]\([^)]*\))"  # a Markdown link or image
    r"|(?P<html><[^>\n]+>)"  # an HTML tag or autolink
)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def link_rules(markdown: str, ids: frozenset[str], here: str) -> str:
    """Turn every mention of a known rule ID in ``markdown`` into a link to its anchor.

    Mentions in fenced code, in links, in HTML and in code spans holding more than the ID are kept.
    """
    token = re.compile(r"(?<![\w/.-])([a-z]+/[a-z0-9]+(?:-[a-z0-9]+)*)(?![\w/-])")

    def text(segment: str) -> str:
        return token.sub(lambda m: _link(m.group(1), here) if m.group(1) in ids else m.group(0), segment)

    out = []
    fence: str | None = None
    for line in markdown.split("\n"):
        m = _FENCE.match(line)
        if fence is not None:
            if (
                m
                and m.group(1)[0] == fence[0]
                and len(m.group(1)) >= len(fence)
                and not line[m.end() :].strip()
            ):
                fence = None
            out.append(line)
            continue
        if m:
            fence = m.group(1)
            out.append(line)
            continue
        pieces = []
        pos = 0
        for p in _PROTECTED.finditer(line):
            pieces.append(text(line[pos : p.start()]))
            inner = (p.group("inner") or "").strip()
            if p.group("code") and inner in ids:
                pieces.append(_link(inner, here))
            else:
                pieces.append(p.group(0))
            pos = p.end()
        pieces.append(text(line[pos:]))
        out.append("".join(pieces))
    return "\n".join(out)

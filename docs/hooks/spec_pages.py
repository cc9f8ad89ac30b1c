"""mkdocs hook: generate the spec pages from ``spec/`` at build time.

Registered under ``hooks:`` in ``mkdocs.yml``. The project root is the folder of ``mkdocs.yml``; the
spec is ``<root>/spec`` and the traceability comes from :func:`rmqspec.rules.scan` over ``<root>``
(``reference/``, ``conformance/``, ``adapters/``). The pages are virtual files added in ``on_files``:
nothing is written into the source tree.

* ``spec/index.md``: the rule index, one row per rule with the anchor ``#<area>-<case>``;
* ``spec/<area>.md``: one page per spec file, one section per rule (anchor ``#<area>-<case>``) with
  the versions, the statement, the examples as YAML, and the implemented-by / covered-by lists.

The pages go into the ``nav:`` section that lists ``spec/index.md``, one entry per area.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.livereload import LiveReloadServer
from mkdocs.structure.files import File, Files

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

_trace: Traceability | None = None


def anchor(rule_id: str) -> str:
    """The stable anchor of a rule: its ID with ``/`` replaced by ``-``."""
    return rule_id.replace("/", "-")


def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


# --- hooks -------------------------------------------------------------------------------------------


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    global _trace
    root = _root(config)
    try:
        _trace = scan(root)
    except SpecError as e:
        raise PluginError(f"spec_pages: {e}") from None
    if "attr_list" not in config.markdown_extensions:
        raise PluginError("spec_pages: the generated pages need the attr_list markdown extension")
    _add_to_nav(config, _trace)
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    trace = _trace if _trace is not None else scan(_root(config))
    for uri, text in render_pages(trace).items():
        existing = files.get_file_from_path(uri)
        if existing is not None:
            raise PluginError(f"spec_pages: docs/{uri} would hide the page generated from spec/; remove it")
        files.append(File.generated(config, uri, content=text))
    return files


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


def render_pages(trace: Traceability) -> dict[str, str]:
    """Every generated page: ``{docs-relative path: Markdown}``."""
    pages = {INDEX: render_index(trace)}
    for f in trace.spec.files:
        pages[f"{PAGES_DIR}/{f.area}.md"] = render_area(trace, f)
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


def render_area(trace: Traceability, f: SpecFile) -> str:
    ids = trace.spec.ids
    here = f.area
    out = [f"# {f.title}", ""]
    if f.intro_markdown:
        out += [link_rules(f.intro_markdown, ids, here), ""]
    out += [f"Rules: {', '.join(_link(r.id, here) for r in f.rules) or 'none yet'}.", ""]
    for r in f.rules:
        out += render_rule(trace.trace(r.id), ids, here)
    return "\n".join(out)


def render_rule(t: RuleTrace, ids: frozenset[str], here: str) -> list[str]:
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
    impl = ", ".join(f"`{loc}`" for loc in t.implemented_by) or "**none** (`rmqspec rules --check` fails)"
    out += [f"**Implemented by:** {impl}", ""]
    covered = [f"`{e}`" for e in t.examples] + [f"`{loc}`" for loc in t.covered_by]
    cov = ", ".join(covered) or "**nothing** (`rmqspec rules --check` fails)"
    out += [f"**Covered by:** {cov}", "", f"<small>Source: `{r.file}:{r.line}`</small>", ""]
    return out


def _longest_run(text: str, char: str) -> int:
    return max((len(m.group(0)) for m in re.finditer(re.escape(char) + "+", text)), default=0)


def _link(rule_id: str, here: str) -> str:
    area = rule_id.split("/")[0]
    page = "" if area == here else f"{area}.md"
    return f"[`{rule_id}`]({page}#{anchor(rule_id)})"


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

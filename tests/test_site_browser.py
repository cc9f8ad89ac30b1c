"""The documentation site, built with ``mkdocs build --strict`` and looked at in a real browser.

The site is built into a temporary folder, served by ``http.server`` on 127.0.0.1 (a free port) and
loaded in headless Chromium (Debian's ``chromium`` package), whose ``--dump-dom`` prints the DOM after
the page's scripts ran. The tests assert on that rendered DOM: the home page, the rule index with one
anchor per rule, a rule page (statement, examples, model code, results table) and the diagrams page.
Chromium resolves no host but 127.0.0.1, so nothing is fetched from the internet.

Without Chromium the browser tests skip, except in CI (``CI`` set), where they fail: install it with
``apt-get install -y chromium``.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rmqspec.rules import Traceability, scan

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_ENV = "RMQSPEC_CHROMIUM"  # a Chromium binary to use instead of the one on the PATH
INSTALL = "apt-get install -y chromium"
RULE = "put/delay-clamp"

pytestmark = pytest.mark.slow


# --- a small DOM ---------------------------------------------------------------------------------------


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        parts: list[str] = []

        def walk(n: Node) -> None:
            for c in n.children:
                if isinstance(c, str):
                    parts.append(c)
                else:
                    walk(c)

        walk(self)
        return " ".join("".join(parts).split())

    def iter(self) -> Iterator[Node]:
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        return [
            n
            for n in self.iter()
            if (tag is None or n.tag == tag)
            and (cls is None or cls in n.classes)
            and all(n.attrs.get(k) == v for k, v in attrs.items())
        ]

    def by_id(self, ident: str) -> Node | None:
        found = self.find_all(id=ident)
        return found[0] if found else None


class _Builder(HTMLParser):
    VOID = frozenset(
        "area base br col embed hr img input link meta param source track wbr".split()  # noqa: SIM905
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag: str) -> None:
        n: Node | None = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data: str) -> None:
        self.cur.children.append(data)


def parse(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    b.close()
    return b.root


def section(heading: Node) -> list[Node]:
    """The heading and the elements after it, up to the next heading of the same level."""
    assert heading.parent is not None
    siblings = [c for c in heading.parent.children if isinstance(c, Node)]
    start = siblings.index(heading)
    out = [heading]
    for n in siblings[start + 1 :]:
        if n.tag == heading.tag:
            break
        out.append(n)
    return out


def heading(node: Node) -> str:
    """A heading's text without its permalink sign."""
    return node.text().removesuffix("¶").strip()


def plain(markdown: str) -> str:
    """The text a reader sees of a Markdown paragraph (code spans, emphasis and links unwrapped)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"[`*_]", "", text)
    return " ".join(text.split())


# --- fixtures --------------------------------------------------------------------------------------------


def find_chromium() -> str | None:
    for candidate in (
        os.environ.get(CHROMIUM_ENV),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"headless Chromium is required in CI and was not found; install it: {INSTALL}")
        pytest.skip(f"headless Chromium not found (install it: {INSTALL}); CI requires it")
    return path


@pytest.fixture(scope="module")
def trace() -> Traceability:
    return scan(REPO)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, (
        f"mkdocs build --strict failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def render(chromium: str, server: str, tmp_path_factory: pytest.TempPathFactory) -> functools.partial[Node]:
    return functools.partial(_render, chromium, server, tmp_path_factory.mktemp("chromium"))


def _render(chromium: str, server: str, profile: Path, path: str) -> Node:
    """Load ``path`` of the served site in headless Chromium; the DOM after its scripts ran."""
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # nothing but the local server
        "--virtual-time-budget=5000",  # let the page's scripts (and timers) run before the dump
        "--dump-dom",
        server + path,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert "<html" in proc.stdout, f"no DOM from chromium for {path}:\n{proc.stderr[-3000:]}"
    return parse(proc.stdout)


def _scripts_ran(dom: Node) -> bool:
    """Material's JavaScript marks the root element with the class ``js`` once it runs."""
    html = dom.find_all("html")
    return bool(html) and "js" in html[0].classes


# --- the built site, without a browser --------------------------------------------------------------------


def test_every_rule_id_resolves_to_its_page(site: Path, trace: Traceability) -> None:
    index = (site / "spec" / "index.html").read_text(encoding="utf-8")
    for t in trace.rules:
        area, anchor = t.rule.area, t.id.replace("/", "-")
        page = (site / "spec" / area / "index.html").read_text(encoding="utf-8")
        assert f'id="{anchor}"' in page, f"{t.id} has no anchor on spec/{area}/"
        assert f'id="{anchor}"' in index, f"{t.id} has no anchor on the rule index"
        assert f'href="{area}/#{anchor}"' in index, f"the rule index does not link {t.id} to its page"
    results = (site / "results" / "index.html").read_text(encoding="utf-8")
    assert all(f"spec/{t.rule.area}/#{t.id.replace('/', '-')}" in results for t in trace.rules)
    assert (site / "results.json").is_file()


# --- in the browser --------------------------------------------------------------------------------------


@pytest.mark.browser
def test_home_page_renders(render: functools.partial[Node]) -> None:
    dom = render("/")
    assert _scripts_ran(dom), "Material's scripts did not run"
    assert [heading(h) for h in dom.find_all("h1")][:1] == ["rmqspec"]
    links = {a.text() for a in dom.find_all("a")}
    for title in ("Rule index", "Results by target", "Diagrams", "Test your broker", "Adapter contract"):
        assert title in links, f"the navigation lacks {title!r}"


@pytest.mark.browser
def test_rule_index_has_an_anchor_and_a_link_per_rule(
    render: functools.partial[Node], trace: Traceability
) -> None:
    dom = render("/spec/")
    assert _scripts_ran(dom)
    assert "Rule index" in [heading(h) for h in dom.find_all("h1")]
    hrefs = {a.attrs.get("href") for a in dom.find_all("a")}
    for t in trace.rules:
        anchor = t.id.replace("/", "-")
        assert dom.by_id(anchor) is not None, f"no element with id {anchor}"
        assert f"{t.rule.area}/#{anchor}" in hrefs, f"no link to {t.id}"


@pytest.mark.browser
def test_rule_page_shows_statement_examples_code_and_results(
    render: functools.partial[Node], trace: Traceability
) -> None:
    rule = trace.trace(RULE).rule
    dom = render(f"/spec/{rule.area}/#{RULE.replace('/', '-')}")
    assert _scripts_ran(dom)
    heading = dom.by_id(RULE.replace("/", "-"))
    assert heading is not None and heading.tag == "h2" and RULE in heading.text()
    nodes = section(heading)
    text = " ".join(n.text() for n in nodes)
    assert plain(rule.versions)[:40] in text
    first_paragraph = plain(rule.statement_markdown.split("\n\n")[0])
    assert first_paragraph[:80] in text, "the rule statement is not rendered"
    for ex in rule.examples:
        assert ex.id in text, f"the example {ex.id} is missing"
    code = [d for n in nodes for d in ([n] if n.tag == "details" else n.find_all("details"))]
    assert code and all("reference/" in d.text() for d in code), "no model code excerpt"
    tables = [t for n in nodes for t in ([n] if n.tag == "table" else n.find_all("table"))]
    results = [t for t in tables if [th.text() for th in t.find_all("th")] == ["target", "result", "details"]]
    assert results, "no results table on the rule page"
    rows = [[td.text() for td in tr.find_all("td")] for tr in results[0].find_all("tr")[1:]]
    titles = [r[0] for r in rows]
    assert titles[:2] == ["reference", "mutants"], titles
    # then one row per report in docs/results/, the real brokers first and the 4.9.4 hand run marked as such
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    from site_results import KNOWN

    known = [title for name, title in KNOWN if (REPO / "docs" / "results" / name).is_file()]
    assert titles[2 : 2 + len(known)] == known, titles
    assert rows[0][1].startswith("pass"), f"the reference does not pass {RULE}: {rows[0]}"
    assert "killed" in rows[1][1], f"no mutant result for {RULE}: {rows[1]}"


@pytest.mark.browser
def test_diagrams_page_has_the_generated_diagrams(render: functools.partial[Node], site: Path) -> None:
    dom = render("/diagrams/")
    assert _scripts_ran(dom)
    for anchor in ("lifecycle", "retry-ladder", "check-timeline"):
        assert dom.by_id(anchor) is not None, f"no section {anchor}"
    ladder = section(dom.by_id("retry-ladder"))  # type: ignore[arg-type]
    text = " ".join(n.text() for n in ladder)
    assert "delivered 17 times" in text
    assert "%DLQ%CG" in text
    built = (site / "diagrams" / "index.html").read_text(encoding="utf-8").count('<pre class="mermaid">')
    assert built >= 4, "the diagrams page lost its Mermaid blocks"
    local = (site / "assets" / "javascripts" / "mermaid.min.js").is_file()
    # make test installs Mermaid from the npm registry (package-lock.json): in CI the site must draw its
    # diagrams with no network at all (this browser reaches no CDN)
    assert local or os.environ.get("CI") != "true", "the site has no local mermaid.min.js (npm ci)"
    if local:
        # a local Mermaid rendered every diagram: Material replaced each source block by a drawing
        assert not dom.find_all("pre", cls="mermaid")
        assert len(dom.find_all("div", cls="mermaid")) == built
    else:
        # no local copy (Material would load Mermaid from a CDN, which this browser cannot reach): the
        # sources stay on the page as text, and the tables carry the same data
        kinds = ("stateDiagram-v2", "flowchart", "sequenceDiagram")
        sources = [p.text() for p in dom.find_all("pre") if p.text().startswith(kinds)]
        assert len(sources) == built
        assert len(dom.find_all("table")) >= built - 1  # the two lifecycle diagrams share one table

"""Parse the normative spec: ``spec/<area>.md`` files of rules, each with executable examples.

The format (``docs/spec-format.md`` describes it for authors):

* the file starts with a ``# Title`` line and intro text;
* a rule is a level-2 heading whose whole text is the rule ID, ``<area>/<case>``, where ``<area>`` is
  the file's name without ``.md``;
* right after the heading a ``**Versions:**`` line, then optionally a ``**Source:**`` line (the RocketMQ
  source the rule was read in, per version tag) and a ``**Facts:**`` line, in that order;
* then the statement (any Markdown), then zero or more fenced blocks with the info string ``example``,
  each a YAML mapping (a scenario) with ``name`` and ``steps``.

Pure parsing: nothing here imports the reference model. Every problem is a :class:`SpecError` naming
the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import yaml

__all__ = [
    "AREA_ORDER",
    "EXAMPLE_KEYS",
    "RULE_ID_RE",
    "Example",
    "Rule",
    "SourceCitation",
    "Spec",
    "SpecError",
    "SpecFile",
    "default_spec_dir",
    "load_spec",
    "parse_spec_file",
]

RULE_ID_RE = re.compile(r"^[a-z]+/[a-z0-9]+(-[a-z0-9]+)*$")
AREA_RE = re.compile(r"^[a-z]+$")
# The order areas are listed in (docs, tables); areas not named here follow in alphabetical order.
AREA_ORDER = (
    "config",
    "properties",
    "put",
    "dispatch",
    "schedule",
    "pull",
    "sendback",
    "transaction",
    "batch",
    "wire",
    "history",
)
EXAMPLE_KEYS = frozenset({"name", "also", "config", "profile", "releases", "features", "needs", "steps"})

_VERSIONS = "**Versions:**"
_SOURCE = "**Source:**"
_FACTS = "**Facts:**"
_LABELS = (_VERSIONS, _SOURCE, _FACTS)
# A release named in a Versions or Source line: 4.9.8, 5.5.0.
VERSION_RE = re.compile(r"\b\d+\.\d+\.\d+\b")
_RANGE_RE = re.compile(r"^(?P<a>\d+\.\d+\.\d+)(?:\s*[–-]\s*(?P<b>\d+\.\d+\.\d+))?$")
# A line of releases that were not read: "5.x", "4.x" (a Versions line names releases).
VAGUE_VERSION_RE = re.compile(r"\b\d+\.x\b")
_FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_H1 = re.compile(r"^ {0,3}#(?:[ \t]+(?P<text>.*?))?[ \t]*$")
_H2 = re.compile(r"^ {0,3}##(?:[ \t]+(?P<text>.*?))?(?:[ \t]+#+)?[ \t]*$")


class SpecError(ValueError):
    """A spec file that does not follow the format; ``str()`` is ``file:line: message``."""

    def __init__(self, file: str, line: int | None, message: str) -> None:
        self.file = file
        self.line = line
        self.message = message
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {message}")


@attrs.frozen
class Example:
    """One executable example; its scenario ID is ``<rule_id>#<name>``."""

    rule_id: str
    name: str
    scenario: dict[str, Any]
    also: tuple[str, ...]
    file: str
    line: int  # the line of the opening fence
    source: str = ""  # the YAML text as written

    @property
    def id(self) -> str:
        return f"{self.rule_id}#{self.name}"

    @property
    def rules(self) -> tuple[str, ...]:
        """The rules this example covers: its own, then those of ``also``."""
        return tuple(dict.fromkeys((self.rule_id, *self.also)))


@attrs.frozen
class SourceCitation:
    """One group of a ``**Source:**`` line: the releases read, the file, and the methods read in it."""

    versions: tuple[tuple[str, str], ...]  # (first, last) release tags; first == last for one release
    path: str
    methods: tuple[str, ...]

    def covers(self, version: str) -> bool:
        v = version_key(version)
        return any(version_key(a) <= v <= version_key(b) for a, b in self.versions)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


@attrs.frozen
class Rule:
    id: str
    area: str
    title: str | None  # the statement's first sentence, shortened; None for an empty statement
    versions: str
    facts: str | None
    statement_markdown: str
    examples: tuple[Example, ...]
    file: str
    line: int  # the line of the heading
    source: str | None = None  # the ``**Source:**`` line as written
    sources: tuple[SourceCitation, ...] = ()
    observed: str | None = None  # the ``Observed:`` part of the Source line: runs that confirmed it
    suite_rule: str | None = None  # ``Source: suite: <why>``: a rule about rmqspec itself, not RocketMQ

    def source_problems(self) -> list[str]:
        """Why this rule's sources do not back its Versions line (empty: they do)."""
        where = f"{self.id} ({self.file}:{self.line})"
        if self.suite_rule is not None:
            return []
        if self.source is None:
            return [f"{where}: no **Source:** line (cite the RocketMQ file and method per version tag)"]
        out = []
        vague = VAGUE_VERSION_RE.findall(self.versions)
        if vague:
            out.append(
                f"{where}: the Versions line names {', '.join(dict.fromkeys(vague))}: name the releases read"
            )
        for v in dict.fromkeys(VERSION_RE.findall(self.versions)):
            if not any(c.covers(v) for c in self.sources):
                out.append(f"{where}: the Versions line names {v}, which no Source citation covers")
        return out


@attrs.frozen
class SpecFile:
    """One ``spec/<area>.md`` file: its title and the intro text before the first rule."""

    area: str
    path: Path
    file: str
    title: str
    intro_markdown: str
    rules: tuple[Rule, ...]


@attrs.frozen
class Spec:
    areas: tuple[str, ...]
    rules: tuple[Rule, ...]
    files: tuple[SpecFile, ...] = ()
    spec_dir: Path | None = None

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(r.id for r in self.rules)

    def rule(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def rules_in(self, area: str) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.area == area)

    def examples(self) -> Iterator[Example]:
        for r in self.rules:
            yield from r.examples

    def citation_pattern(self) -> re.Pattern[str]:
        """Tokens that look like a rule ID of one of this spec's areas."""
        return citation_pattern(self.areas)


def citation_pattern(areas: tuple[str, ...] | list[str]) -> re.Pattern[str]:
    if not areas:
        return re.compile(r"(?!x)x")  # matches nothing
    alternatives = "|".join(sorted((re.escape(a) for a in areas), key=lambda a: (-len(a), a)))
    # Not a path segment: "broker/transaction/queue/..." in a Source line names no rule.
    return re.compile(rf"(?<![\w/.-])(?:{alternatives})/[a-z0-9]+(?:-[a-z0-9]+)*\b(?!/)")


def default_spec_dir() -> Path:
    """The spec shipped with the package (``rmqspec/spec``; a symlink to ``spec/`` in the source tree)."""
    return Path(str(resources.files("rmqspec") / "spec"))


def _area_key(area: str) -> tuple[int, str]:
    return (AREA_ORDER.index(area), "") if area in AREA_ORDER else (len(AREA_ORDER), area)


def load_spec(spec_dir: Path | None = None) -> Spec:
    """Parse every ``<area>.md`` in ``spec_dir`` (default: :func:`default_spec_dir`)."""
    spec_dir = default_spec_dir() if spec_dir is None else Path(spec_dir)
    display_dir = spec_dir.name or str(spec_dir)
    if not spec_dir.is_dir():
        raise SpecError(str(spec_dir), None, "no such spec directory")
    paths = sorted(spec_dir.glob("*.md"))
    if not paths:
        raise SpecError(str(spec_dir), None, "the spec directory holds no <area>.md files")
    files = []
    for path in paths:
        display = f"{display_dir}/{path.name}"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SpecError(display, None, f"cannot read: {e}") from None
        files.append(parse_spec_file(text, path.stem, display, path))
    files.sort(key=lambda f: _area_key(f.area))

    seen: dict[str, Rule] = {}
    for f in files:
        for r in f.rules:
            if r.id in seen:
                first = seen[r.id]
                raise SpecError(
                    r.file, r.line, f"duplicate rule ID {r.id} (first at {first.file}:{first.line})"
                )
            seen[r.id] = r
    for f in files:
        for r in f.rules:
            for ex in r.examples:
                for other in ex.also:
                    if other not in seen:
                        raise SpecError(
                            ex.file,
                            ex.line,
                            f"example {ex.id}: 'also' names {other}, which no spec file defines",
                        )
    return Spec(
        areas=tuple(f.area for f in files),
        rules=tuple(r for f in files for r in f.rules),
        files=tuple(files),
        spec_dir=spec_dir,
    )


@attrs.define
class _Section:
    rule_id: str
    line: int
    body: list[tuple[int, str]] = attrs.field(factory=list)


def parse_spec_file(text: str, area: str, file: str, path: Path | None = None) -> SpecFile:
    """Parse one spec file's text; ``area`` is its file name without ``.md``, ``file`` names it in errors."""
    if not AREA_RE.match(area):
        raise SpecError(
            file, None, f"{area!r} is not an area name (a spec file is <area>.md, area in [a-z]+)"
        )
    lines = text.splitlines()
    title: str | None = None
    intro: list[tuple[int, str]] = []
    sections: list[_Section] = []
    fence: tuple[str, int, int] | None = None  # (char, length, opening line)
    for n, line in enumerate(lines, start=1):
        current = sections[-1].body if sections else intro
        if fence is not None:
            current.append((n, line))
            if _closes(line, fence):
                fence = None
            continue
        opened = _opens(line)
        if opened is not None:
            fence = (opened[0], opened[1], n)
            current.append((n, line))
            continue
        if title is None:
            if not line.strip():
                continue
            h1 = _H1.match(line)
            if not h1 or not (h1.group("text") or "").strip():
                raise SpecError(file, n, "a spec file starts with a '# Title' line")
            title = (h1.group("text") or "").strip()
            continue
        h2 = _H2.match(line)
        if h2:
            rule_id = (h2.group("text") or "").strip()
            if not RULE_ID_RE.match(rule_id):
                raise SpecError(
                    file,
                    n,
                    f"level-2 heading {rule_id!r} is not a rule ID (<area>/<case>: lowercase letters, "
                    "digits and single dashes); use ### for other headings",
                )
            if rule_id.split("/")[0] != area:
                raise SpecError(
                    file, n, f"rule {rule_id} is in {file}; a {area}.md file holds only {area}/... rules"
                )
            sections.append(_Section(rule_id, n))
            continue
        if _H1.match(line):
            raise SpecError(file, n, "only the first line of a spec file is a level-1 heading")
        current.append((n, line))
    if fence is not None:
        raise SpecError(file, fence[2], "code fence is never closed")
    if title is None:
        raise SpecError(file, 1, "a spec file starts with a '# Title' line")

    rules = []
    names: dict[str, int] = {}
    for s in sections:
        if s.rule_id in names:
            raise SpecError(
                file, s.line, f"duplicate rule ID {s.rule_id} (first at {file}:{names[s.rule_id]})"
            )
        names[s.rule_id] = s.line
        rules.append(_parse_rule(s, area, file))
    return SpecFile(
        area=area,
        path=path if path is not None else Path(file),
        file=file,
        title=title,
        intro_markdown=_join(intro),
        rules=tuple(rules),
    )


def _opens(line: str) -> tuple[str, int, str] | None:
    m = _FENCE_OPEN.match(line)
    if not m:
        return None
    fence, info = m.group("fence"), m.group("info")
    if fence[0] == "`" and "`" in info:
        return None  # an inline code span, not a fence
    return fence[0], len(fence), info.strip()


def _closes(line: str, fence: tuple[str, int, int]) -> bool:
    m = re.match(r"^ {0,3}(`{3,}|~{3,})[ \t]*$", line)
    return m is not None and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1]


def _join(lines: list[tuple[int, str]]) -> str:
    text = "\n".join(line for _, line in lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def _labelled(
    body: list[tuple[int, str]], i: int, label: str
) -> tuple[str | None, int, int]:  # (text, line, next index)
    """A ``**Label:** text`` line at body[i] (after blank lines) and its continuation lines."""
    j = i
    while j < len(body) and not body[j][1].strip():
        j += 1
    if j >= len(body) or not body[j][1].lstrip().startswith(label):
        return None, body[j][0] if j < len(body) else 0, i
    line_no = body[j][0]
    parts = [body[j][1].lstrip()[len(label) :].strip()]
    j += 1
    while j < len(body):
        text = body[j][1]
        if not text.strip() or text.lstrip().startswith(_LABELS) or _opens(text):
            break
        parts.append(text.strip())
        j += 1
    return " ".join(p for p in parts if p), line_no, j


def _parse_rule(s: _Section, area: str, file: str) -> Rule:
    body = s.body
    versions, vline, i = _labelled(body, 0, _VERSIONS)
    if versions is None:
        raise SpecError(file, s.line, f"rule {s.rule_id}: a '{_VERSIONS}' line must follow the heading")
    if not versions:
        raise SpecError(file, vline, f"rule {s.rule_id}: the '{_VERSIONS}' line is empty")
    source, sline, i = _labelled(body, i, _SOURCE)
    sources: tuple[SourceCitation, ...] = ()
    observed = suite_rule = None
    if source is not None:
        sources, observed, suite_rule = parse_source(source, s.rule_id, file, sline)
    facts, fline, i = _labelled(body, i, _FACTS)
    if facts is not None and not facts:
        raise SpecError(file, fline, f"rule {s.rule_id}: the '{_FACTS}' line is empty")

    statement: list[tuple[int, str]] = []
    examples: list[Example] = []
    names: dict[str, int] = {}
    while i < len(body):
        n, line = body[i]
        opened = _opens(line)
        if opened is None:
            statement.append((n, line))
            i += 1
            continue
        # a fence: collect it whole
        j = i + 1
        while j < len(body) and not _closes(body[j][1], (opened[0], opened[1], n)):
            j += 1
        block = body[i : j + 1]
        i = j + 1
        if opened[2] != "example":
            statement.extend(block)
            continue
        ex = _parse_example(s.rule_id, file, n, "\n".join(line for _, line in block[1:-1]))
        if ex.name in names:
            raise SpecError(
                file,
                n,
                f"rule {s.rule_id}: a second example named {ex.name!r} (first at line {names[ex.name]})",
            )
        names[ex.name] = n
        examples.append(ex)
    statement_md = _join(statement)
    if not statement_md.strip():
        raise SpecError(file, s.line, f"rule {s.rule_id} has no statement")
    return Rule(
        id=s.rule_id,
        area=area,
        title=_first_sentence(statement_md),
        versions=versions,
        facts=facts,
        statement_markdown=statement_md,
        examples=tuple(examples),
        file=file,
        line=s.line,
        source=source,
        sources=sources,
        observed=observed,
        suite_rule=suite_rule,
    )


_CITATION_RE = re.compile(r"^(?P<versions>[^:`]+):\s*`(?P<path>[^`]+)`(?P<methods>(?:[\s,]*`[^`]+`)*)\s*\.?$")


def parse_source(
    text: str, rule_id: str, file: str, line: int
) -> tuple[tuple[SourceCitation, ...], str | None, str | None]:
    """A ``**Source:**`` line: ``V[, V...]: `path` `method`[, `method`...]`` groups separated by ``;``,
    optionally followed by ``Observed: <runs>``; or ``suite: <why>`` for a rule about rmqspec itself.
    A V is a release (``4.9.8``) or a range of releases read (``4.9.3–4.9.8``)."""
    text = text.strip()
    if not text:
        raise SpecError(file, line, f"rule {rule_id}: the '{_SOURCE}' line is empty")
    if text.startswith("suite:"):
        why = text.removeprefix("suite:").strip()
        if not why:
            raise SpecError(file, line, f"rule {rule_id}: 'Source: suite:' needs a reason")
        return (), None, why
    body, _, observed = text.partition("Observed:")
    citations = []
    for group in (g.strip() for g in body.split(";")):
        if not group:
            continue
        m = _CITATION_RE.match(group)
        if not m:
            raise SpecError(
                file,
                line,
                f"rule {rule_id}: Source group {group[:60]!r} is not 'VERSIONS: `path` `method`, ...' "
                "(VERSIONS: releases such as 4.9.8 or ranges such as 4.9.3–4.9.8, comma-separated)",
            )
        versions = []
        for item in (v.strip() for v in m.group("versions").split(",")):
            r = _RANGE_RE.match(item)
            if not r:
                raise SpecError(file, line, f"rule {rule_id}: {item!r} in the Source line is not a release")
            a, b = r.group("a"), r.group("b") or r.group("a")
            if version_key(b) < version_key(a):
                raise SpecError(file, line, f"rule {rule_id}: the range {item!r} runs backwards")
            versions.append((a, b))
        methods = tuple(re.findall(r"`([^`]+)`", m.group("methods")))
        if not methods:
            raise SpecError(file, line, f"rule {rule_id}: Source group {group[:60]!r} names no method")
        citations.append(SourceCitation(tuple(versions), m.group("path"), methods))
    if not citations:
        raise SpecError(file, line, f"rule {rule_id}: the Source line cites nothing")
    return tuple(citations), (observed.strip().rstrip(".") or None), None


def _parse_example(rule_id: str, file: str, line: int, source: str) -> Example:
    try:
        data = yaml.safe_load(source)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = line + 1 + mark.line if mark is not None else line
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(file, at, f"rule {rule_id}: example is not valid YAML: {problem}") from None
    if not isinstance(data, Mapping):
        raise SpecError(file, line, f"rule {rule_id}: an example is a YAML mapping (name, steps, ...)")
    unknown = sorted(str(k) for k in data if k not in EXAMPLE_KEYS)
    if unknown:
        raise SpecError(
            file,
            line,
            f"rule {rule_id}: unknown example key(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(EXAMPLE_KEYS))})",
        )
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SpecError(file, line, f"rule {rule_id}: example has no 'name'")
    if "#" in name or any(c.isspace() for c in name):
        raise SpecError(file, line, f"rule {rule_id}: example name {name!r} must not hold '#' or spaces")
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise SpecError(file, line, f"rule {rule_id}: example {name!r} has no 'steps' (a non-empty list)")
    also_raw = data.get("also", [])
    if isinstance(also_raw, str):
        also_raw = [also_raw]
    if not isinstance(also_raw, list) or not all(
        isinstance(a, str) and RULE_ID_RE.match(a) for a in also_raw
    ):
        raise SpecError(file, line, f"rule {rule_id}: example {name!r}: 'also' is a list of rule IDs")
    if data.get("config") is not None and not isinstance(data["config"], Mapping):
        raise SpecError(file, line, f"rule {rule_id}: example {name!r}: 'config' is a mapping")
    if "features" in data and not isinstance(data["features"], list):
        raise SpecError(file, line, f"rule {rule_id}: example {name!r}: 'features' is a list")
    if "profile" in data and not isinstance(data["profile"], str):
        raise SpecError(file, line, f"rule {rule_id}: example {name!r}: 'profile' is a string, e.g. \"5.x\"")
    if "releases" in data and not isinstance(data["releases"], str):
        raise SpecError(
            file, line, f"rule {rule_id}: example {name!r}: 'releases' is a string, e.g. \"5.0.0–5.1.0\""
        )
    return Example(
        rule_id=rule_id,
        name=name,
        scenario=dict(data),
        also=tuple(dict.fromkeys(also_raw)),
        file=file,
        line=line,
        source=source,
    )


def _first_sentence(markdown: str, limit: int = 120) -> str | None:
    para = re.split(r"\n\s*\n", markdown.strip(), maxsplit=1)[0]
    text = " ".join(para.split())
    if not text:
        return None
    m = re.search(r"[.:;](?=\s|$)", text)
    if m:
        text = text[: m.start() + 1] if text[m.start()] == "." else text[: m.start()]
    if len(text) <= limit:
        return text
    text = text[: limit - 1]
    if text.count("`") % 2:  # do not cut a code span in two
        text = text[: text.rindex("`")]
    return text.rstrip() + "…"

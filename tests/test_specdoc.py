"""The spec parser: the format of spec/<area>.md, and an error naming file and line for each violation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rmqspec.conformance.specdoc import SpecError, default_spec_dir, load_spec

GOOD_PUT = """\
# The put path

Intro text; it mentions put/alpha-one.

## put/alpha-one
**Versions:** 4.9.0–4.9.8 (default profile).
5.x: same.
**Facts:** §1.2

The broker MUST do alpha. Then more.

```text
## not/a-heading, inside a fence
```

```example
name: first
steps:
  - send: {topic: T, body: a}
```

```example
name: second
also: [put/beta]
config: {messageDelayLevel: "1s"}
steps:
  - send: {topic: T, body: b}
```

## put/beta
**Versions:** 5.x only.

The broker MUST do beta.

### A sub-heading inside the statement

More beta.
"""

GOOD_SCHEDULE = """\
# Schedule

## schedule/early
**Versions:** 4.9.x.

Statement.
"""


def write(spec: Path, name: str, text: str) -> Path:
    spec.mkdir(parents=True, exist_ok=True)
    path = spec / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    spec = tmp_path / "spec"
    write(spec, "put.md", GOOD_PUT)
    write(spec, "schedule.md", GOOD_SCHEDULE)
    return spec


def test_parses_rules_examples_and_metadata(spec_dir: Path) -> None:
    spec = load_spec(spec_dir)
    assert spec.areas == ("put", "schedule")
    assert [r.id for r in spec.rules] == ["put/alpha-one", "put/beta", "schedule/early"]
    alpha = spec.rule("put/alpha-one")
    assert alpha.area == "put"
    assert alpha.file == "spec/put.md"
    assert alpha.line == 5
    assert alpha.versions == "4.9.0–4.9.8 (default profile). 5.x: same."
    assert alpha.facts == "§1.2"
    assert alpha.title == "The broker MUST do alpha."
    assert alpha.statement_markdown.startswith("The broker MUST do alpha.")
    assert "## not/a-heading" in alpha.statement_markdown  # a non-example fence stays in the statement
    assert "name: first" not in alpha.statement_markdown
    first, second = alpha.examples
    assert (first.id, first.line, first.also) == ("put/alpha-one#first", 16, ())
    assert second.id == "put/alpha-one#second"
    assert second.also == ("put/beta",)
    assert second.rules == ("put/alpha-one", "put/beta")
    assert second.scenario["config"] == {"messageDelayLevel": "1s"}
    assert second.scenario["steps"] == [{"send": {"topic": "T", "body": "b"}}]
    beta = spec.rule("put/beta")
    assert beta.facts is None
    assert beta.examples == ()
    assert "### A sub-heading" in beta.statement_markdown
    put_file = spec.files[0]
    assert put_file.title == "The put path"
    assert put_file.intro_markdown == "Intro text; it mentions put/alpha-one."
    assert [e.id for e in spec.examples()] == ["put/alpha-one#first", "put/alpha-one#second"]


def test_citation_pattern_uses_the_spec_areas(spec_dir: Path) -> None:
    pattern = load_spec(spec_dir).citation_pattern()
    text = 'rule: put/alpha-one, schedule/early; rule="put/x-y" foo/bar output/x spec/put.md'
    assert [m.group(0) for m in pattern.finditer(text)] == ["put/alpha-one", "schedule/early", "put/x-y"]


def test_the_shipped_spec_loads() -> None:
    if not default_spec_dir().is_dir():
        pytest.skip("no spec/ in this tree yet")
    spec = load_spec()
    assert spec.rules
    assert all(r.id.split("/")[0] == r.area for r in spec.rules)


def _error(tmp_path: Path, text: str, name: str = "put.md") -> SpecError:
    spec = tmp_path / "spec"
    write(spec, name, text)
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    return info.value


RULE = "## put/a\n**Versions:** 4.9.\n\nStatement.\n"
EX = "```example\nname: n\nsteps:\n  - send: {topic: T}\n```\n"

MALFORMED = {
    "duplicate-id": ("# T\n\n" + RULE + "\n" + RULE, 8, "duplicate rule ID put/a"),
    "area-mismatch": ("# T\n\n## schedule/a\n**Versions:** x\n\nS.\n", 3, "a put.md file holds only put/"),
    "missing-versions": ("# T\n\n## put/a\n\nStatement.\n", 3, "**Versions:**"),
    "empty-versions": ("# T\n\n## put/a\n**Versions:**\n\nS.\n", 4, "is empty"),
    "bad-yaml": (
        "# T\n\n" + RULE + "\n```example\nname: n\nsteps: [a, b\n  - c: {\n```\n",
        11,
        "not valid YAML",
    ),
    "yaml-not-a-mapping": ("# T\n\n" + RULE + "\n```example\n- a\n- b\n```\n", 8, "a YAML mapping"),
    "example-without-name": ("# T\n\n" + RULE + "\n```example\nsteps: [{send: {}}]\n```\n", 8, "no 'name'"),
    "example-without-steps": ("# T\n\n" + RULE + "\n```example\nname: n\n```\n", 8, "no 'steps'"),
    "example-empty-steps": ("# T\n\n" + RULE + "\n```example\nname: n\nsteps: []\n```\n", 8, "no 'steps'"),
    "duplicate-example-name": ("# T\n\n" + RULE + "\n" + EX + "\n" + EX, 14, "second example named 'n'"),
    "unknown-example-key": (
        "# T\n\n" + RULE + "\n```example\nname: n\nnote: x\nsteps: [{send: {}}]\n```\n",
        8,
        "unknown example key(s) note",
    ),
    "unknown-also": (
        "# T\n\n" + RULE + "\n```example\nname: n\nalso: [put/zzz]\nsteps: [{send: {}}]\n```\n",
        8,
        "'also' names put/zzz",
    ),
    "no-title": ("\n" + RULE, 2, "'# Title'"),
    "heading-not-an-id": ("# T\n\n## Notes\n\ntext\n", 3, "not a rule ID"),
    "uppercase-id": ("# T\n\n## put/Delay\n**Versions:** x\n\nS.\n", 3, "not a rule ID"),
    "unclosed-fence": ("# T\n\n" + RULE + "\n```example\nname: n\n", 8, "never closed"),
    "no-statement": ("# T\n\n## put/a\n**Versions:** x\n\n" + EX, 3, "has no statement"),
    "second-title": ("# T\n\n" + RULE + "\n# Another\n", 8, "level-1 heading"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_spec_names_file_and_line(tmp_path: Path, case: str) -> None:
    text, line, fragment = MALFORMED[case]
    e = _error(tmp_path, text)
    assert e.file == "spec/put.md"
    assert e.line == line, str(e)
    assert fragment in e.message
    assert str(e).startswith(f"spec/put.md:{line}: ")


def test_duplicate_id_message_points_at_the_first(tmp_path: Path) -> None:
    e = _error(tmp_path, MALFORMED["duplicate-id"][0])
    assert "first at spec/put.md:3" in str(e)


def test_bad_area_file_name(tmp_path: Path) -> None:
    e = _error(tmp_path, "# T\n", name="Put-Stuff.md")
    assert e.file == "spec/Put-Stuff.md"
    assert "not an area name" in str(e)


def test_missing_and_empty_spec_dir(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such spec directory"):
        load_spec(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match=r"no <area>\.md files"):
        load_spec(tmp_path / "empty")


def test_also_may_name_a_rule_of_another_file(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    write(spec, "schedule.md", GOOD_SCHEDULE)
    write(
        spec,
        "put.md",
        "# T\n\n" + RULE + "\n```example\nname: n\nalso: [schedule/early]\nsteps: [{send: {}}]\n```\n",
    )
    (ex,) = load_spec(spec).rule("put/a").examples
    assert ex.also == ("schedule/early",)


# --- Source lines (issue 17: every rule cites the RocketMQ source it was read in) ---

_SOURCED = """# T

## put/a
**Versions:** 4.9.3–4.9.8 (default profile). 5.0.0–5.5.0: same.
**Source:** 4.9.3, 4.9.8: `store/src/main/java/org/apache/rocketmq/store/CommitLog.java` `asyncPutMessage`; 5.0.0–5.5.0: `broker/src/main/java/org/apache/rocketmq/broker/util/HookUtils.java` `handleScheduleMessage`, `transformDelayLevelMessage`. Observed: apache 4.9.7.
**Facts:** §1

Statement.
"""


def test_source_line_is_parsed_into_citations() -> None:
    from rmqspec.conformance.specdoc import parse_spec_file

    rule = parse_spec_file(_SOURCED, "put", "put.md").rules[0]
    assert [c.path.rsplit("/", 1)[1] for c in rule.sources] == ["CommitLog.java", "HookUtils.java"]
    assert rule.sources[1].methods == ("handleScheduleMessage", "transformDelayLevelMessage")
    assert rule.sources[1].covers("5.3.3") and not rule.sources[0].covers("4.9.5")
    assert rule.observed == "apache 4.9.7"
    assert rule.source_problems() == []


def test_versions_not_backed_by_a_source_are_problems() -> None:
    from rmqspec.conformance.specdoc import parse_spec_file

    rule = parse_spec_file(_SOURCED.replace("4.9.3, 4.9.8:", "4.9.8:"), "put", "put.md").rules[0]
    assert rule.source_problems() == [
        "put/a (put.md:3): the Versions line names 4.9.3, which no Source citation covers"
    ]
    vague = parse_spec_file(_SOURCED.replace("5.0.0–5.5.0: same", "5.x: same"), "put", "put.md").rules[0]
    assert any("names 5.x" in p for p in vague.source_problems())
    unsourced = parse_spec_file(_SOURCED.replace(_SOURCED.splitlines()[4] + "\n", ""), "put", "put.md").rules[
        0
    ]
    assert unsourced.source_problems() == [
        "put/a (put.md:3): no **Source:** line (cite the RocketMQ file and method per version tag)"
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("4.9.8: `CommitLog.java`", "names no method"),
        ("4.9.8 `CommitLog.java` `m`", "is not 'VERSIONS: `path`"),
        ("4.9.x: `CommitLog.java` `m`", "is not a release"),
        ("4.9.8–4.9.3: `CommitLog.java` `m`", "runs backwards"),
        ("suite:", "needs a reason"),
    ],
)
def test_malformed_source_lines_name_the_problem(line: str, problem: str) -> None:
    from rmqspec.conformance.specdoc import SpecError, parse_spec_file

    text = _SOURCED.replace(_SOURCED.splitlines()[4], f"**Source:** {line}")
    with pytest.raises(SpecError, match=re.escape(problem)) as e:
        parse_spec_file(text, "put", "put.md")
    assert str(e.value).startswith("put.md:5:")

"""``rmqspec rules``: traceability from spec rules to the code that implements and the checks that cover them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rmqspec.cli import app
from rmqspec.rules import scan

SPEC_PUT = """\
# Put

## put/a
**Versions:** 4.9.8.
**Source:** 4.9.8: `store/src/main/java/X.java` `m`

Rule a.

```example
name: a-works
also: [put/c]
steps:
  - send: {topic: T, body: a}
```

## put/b
**Versions:** 4.9.8.
**Source:** 4.9.8: `store/src/main/java/X.java` `m`

Rule b, covered by conformance code only.

## put/c
**Versions:** 4.9.8.
**Source:** 4.9.8: `store/src/main/java/X.java` `m`

Rule c, covered by the example of put/a.
"""

SPEC_WIRE = """\
# Wire

## wire/frame
**Versions:** 4.9.8.
**Source:** 4.9.8: `store/src/main/java/X.java` `m`

The frame.

```example
name: frame
steps:
  - send: {topic: T}
```
"""

IMPL = '''\
"""Implements the put rules."""

# rule: put/a, put/b
X = 1  # rule: put/c
'''

CHECK = """\
CASES = [dict(rule="put/b")]
"""

ADAPTER = """\
# rule: wire/frame
"""


def make_tree(root: Path, files: dict[str, str] | None = None) -> Path:
    """A minimal project: spec/, reference/, conformance/, adapters/; ``files`` overrides by path."""
    tree = {
        "spec/put.md": SPEC_PUT,
        "spec/wire.md": SPEC_WIRE,
        "reference/impl.py": IMPL,
        "conformance/check.py": CHECK,
        "adapters/wire.py": ADAPTER,
    }
    tree.update(files or {})
    for rel, text in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["rules", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_clean_tree_traces_every_rule(tmp_path: Path) -> None:
    trace = scan(make_tree(tmp_path))
    assert trace.ok, trace.problems()
    a, b, c = (trace.trace(i) for i in ("put/a", "put/b", "put/c"))
    assert [str(loc) for loc in a.implemented_by] == ["reference/impl.py:3"]
    assert a.examples == ("put/a#a-works",)
    assert [str(loc) for loc in b.covered_by] == ["conformance/check.py:1"]
    assert b.examples == ()
    assert c.examples == ("put/a#a-works",)  # covered through 'also'
    assert [str(loc) for loc in c.implemented_by] == ["reference/impl.py:4"]
    assert [str(loc) for loc in trace.trace("wire/frame").implemented_by] == ["adapters/wire.py:1"]


def test_clean_tree_passes_check(tmp_path: Path) -> None:
    code, out = run("--check", "--root", str(make_tree(tmp_path)))
    assert code == 0, out
    for rule in ("put/a", "put/b", "put/c", "wire/frame"):
        assert rule in out
    assert "reference/impl.py:3" in out
    assert "OK: 4 rules in 2 areas" in out


def test_rule_without_implementation_fails(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"reference/impl.py": "# rule: put/a, put/c\n"})
    code, out = run("--check", "--root", str(root))
    assert code == 1
    assert "put/b (spec/put.md:16): not implemented" in out
    assert "1 problem(s)" in out
    # without --check the table is printed and the exit code is 0
    assert run("--root", str(root))[0] == 0


def test_citation_in_adapters_implements_only_wire_rules(tmp_path: Path) -> None:
    root = make_tree(
        tmp_path, {"reference/impl.py": "# rule: put/a, put/c\n", "adapters/wire.py": "# wire/frame put/b\n"}
    )
    trace = scan(root)
    assert trace.trace("wire/frame").implemented
    assert not trace.trace("put/b").implemented


def test_rule_without_coverage_fails(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"conformance/check.py": "CASES = []\n"})
    code, out = run("--check", "--root", str(root))
    assert code == 1
    assert "put/b (spec/put.md:16): not covered" in out
    assert "put/a" not in out.split("problem:")[-1]


def test_unknown_cited_rule_fails_with_file_and_line(tmp_path: Path) -> None:
    root = make_tree(
        tmp_path,
        {
            "reference/sub/deep.py": '"""Deep."""\n\n\nY = "put/nope"  # and foo/bar, spec/put.md, output/x\n',
            "conformance/check.py": 'CASES = [dict(rule="put/b"), dict(rule="put/gone")]\n',
        },
    )
    trace = scan(root)
    assert [(c.rule_id, str(c.location)) for c in trace.unknown] == [
        ("put/gone", "conformance/check.py:1"),
        ("put/nope", "reference/sub/deep.py:4"),
    ]
    code, out = run("--check", "--root", str(root))
    assert code == 1
    assert "reference/sub/deep.py:4: unknown rule put/nope" in out
    assert "conformance/check.py:1: unknown rule put/gone" in out


def test_json_output(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"conformance/check.py": "CASES = []\n"})
    result = runner.invoke(app, ["rules", "--json", "--check", "--root", str(root)])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    assert doc["summary"]["rules"] == 4
    rules = {r["id"]: r for r in doc["rules"]}
    assert rules["put/a"]["implemented_by"] == ["reference/impl.py:3"]
    assert rules["put/a"]["examples"] == ["put/a#a-works"]
    assert rules["put/b"]["covered_by"] == []
    assert any("put/b" in p and "not covered" in p for p in doc["problems"])


def test_dangling_reference_in_spec_text_is_a_warning(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"spec/put.md": SPEC_PUT.replace("Rule b,", "Rule b (see put/missing),")})
    code, out = run("--check", "--root", str(root))
    assert code == 0
    assert "warning:" in out
    assert "spec/put.md:20: the spec names put/missing" in out


def test_missing_root_is_bad_input(tmp_path: Path) -> None:
    code, out = run("--root", str(tmp_path / "nowhere"))
    assert code == 2
    assert "error:" in out
    assert "no such directory" in out
    assert "Traceback" not in out


def test_missing_spec_dir_is_bad_input(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    for f in (root / "spec").iterdir():
        f.unlink()
    (root / "spec").rmdir()
    code, out = run("--check", "--root", str(root))
    assert code == 2
    assert "no such spec directory" in out
    assert len(out.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            SPEC_PUT.replace(
                "**Versions:** 4.9.8.\n**Source:** 4.9.8: `store/src/main/java/X.java` `m`\n\nRule b",
                "Rule b",
            ),
            "spec/put.md:16:",
        ),
        (SPEC_PUT.replace("steps:\n  - send: {topic: T, body: a}", "steps: [oops"), "spec/put.md:12:"),
    ],
)
def test_malformed_spec_is_bad_input(tmp_path: Path, text: str, where: str) -> None:
    code, out = run("--check", "--root", str(make_tree(tmp_path, {"spec/put.md": text})))
    assert code == 2
    assert out.startswith("error: ")
    assert where in out
    assert "Traceback" not in out


def test_default_root_is_the_package(tmp_path: Path) -> None:
    code, out = run()
    assert code in (0, 2)  # 2 only while the tree has no spec/ yet
    if code == 0:
        assert "spec rules" in out


def test_version_and_help() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("rmqspec ")
    result = runner.invoke(app, ["rules", "--help"])
    assert result.exit_code == 0
    assert "--check" in result.output


def test_a_path_segment_is_not_a_rule_citation() -> None:
    """A Source line cites broker/src/main/java/.../broker/transaction/queue/...: no rule transaction/queue."""
    from rmqspec.conformance.specdoc import citation_pattern

    pattern = citation_pattern(["transaction", "put"])
    text = "`broker/src/main/java/org/apache/rocketmq/broker/transaction/queue/X.java`; rule: put/delay-clamp"
    assert [m.group(0) for m in pattern.finditer(text)] == ["put/delay-clamp"]
    assert [m.group(0) for m in pattern.finditer("see transaction/check-timeout.")] == [
        "transaction/check-timeout"
    ]


def test_rules_shows_one_rule_whole_with_every_check_by_kind() -> None:
    from typer.testing import CliRunner

    from rmqspec.cli import app

    result = CliRunner().invoke(app, ["rules", "schedule/fifo-per-level", "--json"])
    assert result.exit_code == 0, result.output
    [d] = json.loads(result.output)
    assert d["id"] == "schedule/fifo-per-level" and d["versions"] and d["source"]
    assert any(loc.startswith("reference/") for loc in d["implemented_by"])
    assert d["checks"]["examples"] and d["checks"]["mutants"]
    assert all(":" in loc for loc in d["checks"]["checker_and_suite"])
    bad = CliRunner().invoke(app, ["rules", "sched/fifo"])
    assert bad.exit_code == 2 and "did you mean schedule/fifo-per-level" in bad.output
    grep = CliRunner().invoke(app, ["rules", "--grep", "clamp", "--json"])
    assert grep.exit_code == 0 and "put/delay-clamp" in {r["id"] for r in json.loads(grep.output)}


def test_coverage_counts_values_not_comments_or_docstrings() -> None:
    """A rule ID in a comment or a docstring checks nothing: only values (an anomaly's rule) count."""
    from rmqspec.conformance.specdoc import citation_pattern
    from rmqspec.rules import value_citations

    text = '"""Docstring: put/a."""\n# comment: put/b\nRULE = "put/c"\n\ndef f():\n    """put/d"""\n    return "x put/e"\n'
    found = [c.rule_id for c in value_citations(text, citation_pattern(["put"]), "x.py")]
    assert found == ["put/c", "put/e"] or sorted(found) == ["put/c", "put/e"]

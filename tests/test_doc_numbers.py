"""Numbers the docs give about the code, held to the code (issue 27 item 10): a count of rules, examples,
scenarios, mutants, a CLI option's default or a model default that drifts fails here, so that a change
in the code is a change in the docs too. Measurements of a past run are dated in the docs, not checked."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import typer

from rmqspec.cli import app
from rmqspec.conform import TARGET_FORMS, TargetSpecError, target_factory, wall_target
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.scenarios import catalogue
from rmqspec.conformance.specdoc import load_spec
from rmqspec.reference.config import BrokerConfig, Profile

ROOT = Path(__file__).resolve().parents[1]


def _text(path: str) -> str:
    return " ".join((ROOT / path).read_text(encoding="utf-8").split())  # one line: sentences wrap


def _number(path: str, pattern: str) -> tuple[int, ...]:
    m = re.search(pattern, _text(path))
    assert m, f"{path}: no sentence matching {pattern!r} (reworded? update this test with it)"
    return tuple(int(g) for g in m.groups())


def test_readme_counts_are_the_codes() -> None:
    spec = load_spec()
    examples = sum(len(r.examples) for r in spec.rules)
    assert _number("README.md", r"the spec \((\d+) areas, (\d+) rules, (\d+) executable examples") == (
        len(spec.areas),
        len(spec.rules),
        examples,
    )
    assert _number("README.md", r"\((\d+) scenarios: the spec's examples and the catalogue's\)") == (
        len(catalogue()),
    )
    assert _number("README.md", r"(\d+) mutants, each killed") == (len(MUTANTS),)


def test_mutation_page_counts_are_the_codes() -> None:
    kinds = Counter(m.kind for m in MUTANTS.values())
    assert _number("docs/mutation.md", r"holds (\d+) mutants, of three kinds") == (len(MUTANTS),)
    for shown, kind in (("semantic", "semantic"), ("configuration", "config"), ("wire", "wire")):
        assert _number("docs/mutation.md", rf"\| {shown} \((\d+)\) \|") == (kinds[kind],), kind
    assert set(kinds) == {"semantic", "config", "wire"}


def test_real_brokers_page_gives_the_models_defaults() -> None:
    four, five = BrokerConfig(), BrokerConfig(profile=Profile.V5)
    assert _number(
        "docs/guides/real-brokers.md",
        r"`transactionCheckInterval` (\d+) s on 4\.9, (\d+) s on 5\.x; `defaultTopicQueueNums` (\d+)\)",
    ) == (
        four.transaction_check_interval_ms // 1000,
        five.transaction_check_interval_ms // 1000,
        four.default_topic_queue_nums,
    )


def _conform_options() -> list[Any]:
    """The options of `rmqspec conform`, as the command line parses them."""
    group = typer.main.get_command(app)
    command = group.commands["conform"]  # type: ignore[attr-defined]
    return [p for p in command.params if p.param_type_name == "option"]


def _shown(default: object) -> str | None:
    """A default as the guide's table writes it in backticks (None: a dash or words)."""
    if default is None:
        return None
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def test_the_guides_option_table_is_the_conform_commands() -> None:
    """Every option of `rmqspec conform` is in docs/guides/test-your-broker.md's table, with its default."""
    rows: dict[str, str] = {}
    for line in (ROOT / "docs/guides/test-your-broker.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `--") and len(cells) >= 3:
            for opt in re.findall(r"`(--[a-z-]+)`", cells[0]):
                rows[opt] = cells[1]
    params = _conform_options()
    missing = [p.opts[0] for p in params if p.opts[0] not in rows]
    assert not missing, f"options missing from the guide's table: {missing}"
    for p in params:
        cell = rows[p.opts[0]]
        ticked = re.fullmatch(r"`([^`]*)`", cell)
        plain = cell if cell in ("on", "off") else None
        written = ticked.group(1) if ticked else plain
        assert written == _shown(p.default), f"{p.opts[0]}: the guide says {cell!r}, the CLI {p.default!r}"
    for opt in rows:
        assert any(opt in p.opts + p.secondary_opts for p in params), (
            f"the guide lists {opt}, the CLI has none"
        )


@pytest.mark.parametrize(
    "form",
    ["reference", "mutant:", "served", "remoting://", "apache:", "grpc://", "apache-proxy:"],
)
def test_every_target_form_is_named_in_the_help_and_the_error(form: str) -> None:
    option = next(p for p in _conform_options() if p.name == "target")
    assert form in option.help
    for make in (target_factory, lambda spec: wall_target(spec, None)):
        with pytest.raises(TargetSpecError) as e:
            make("nosuch:thing")
        assert form in str(e.value)
    assert form in TARGET_FORMS

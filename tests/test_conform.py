"""The suite as a whole: the reference passes, every mutant is killed, reports are well formed."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from rmqspec.cli import app
from rmqspec.conform import conform, kill_matrix
from rmqspec.conformance.mutants import MUTANTS


def test_reference_passes_with_reports(tmp_path: Path) -> None:
    rep = conform("reference", examples=30)
    assert rep.passed, rep.machine or [r for r in rep.scenarios if r.outcome != "pass"]
    rep.write_json(tmp_path / "r.json")
    rep.write_junit(tmp_path / "r.xml")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["passed"] is True and doc["rules"]
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert suite.get("failures") == "0"
    assert int(suite.get("tests", "0")) == len(rep.scenarios) + 1


def test_at_least_30_mutants() -> None:
    assert len(MUTANTS) >= 30
    assert all(m.rule.count("/") == 1 for m in MUTANTS.values())


@pytest.mark.slow
def test_every_mutant_is_killed_for_its_own_rule() -> None:
    rows = kill_matrix(examples=60, workers=2)
    assert len(rows) == len(MUTANTS)
    not_killed = {r.mutant: (r.outcome, [(f.source, f.rules) for f in r.wrong]) for r in rows if not r.killed}
    assert not not_killed, f"mutants not killed for their own rule: {not_killed}"


def test_cli_conform_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(
        app, ["conform", "--target", "reference", "--examples", "5", "--report", str(tmp_path / "a.json")]
    )
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["conform", "--target", "mutant:delay-ignored", "--examples", "0"])
    assert bad.exit_code == 1
    assert "FAIL" in bad.output
    unknown = runner.invoke(app, ["conform", "--target", "mutant:nope"])
    assert unknown.exit_code == 2
    assert "unknown mutant" in unknown.output
    remote = runner.invoke(
        app, ["conform", "--target", "remoting://127.0.0.1:1", "--report", str(tmp_path / "e.json")]
    )
    assert remote.exit_code == 2
    assert "cannot connect to 127.0.0.1:1" in remote.output and "Traceback" not in remote.output
    # the report is written even when nothing could be judged, and says why
    error = json.loads((tmp_path / "e.json").read_text())
    assert error["exit_code"] == 2 and "cannot connect to 127.0.0.1:1" in error["error"]


def test_scenarios_dump_is_json(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    result = CliRunner().invoke(app, ["scenarios", "dump", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["format"] == "rmqspec-scenarios"
    assert len(doc["scenarios"]) >= 60
    assert all(s["steps"] and s["rules"] for s in doc["scenarios"])


def test_a_catalogue_scenario_citing_an_id_that_is_no_rule_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16 item 8: a catalogue scenario cited put/delay-rewrite, which is no rule, and nothing noticed."""
    from importlib import resources

    from rmqspec.conformance import scenarios as sc

    real = resources.files

    class Fake:
        def __init__(self, base: object) -> None:
            self.base = base

        def __truediv__(self, name: str) -> object:
            return tmp_path if name == "catalogue" else self.base / name  # type: ignore[operator]

    (tmp_path / "x.yaml").write_text(
        "- name: bad\n  rules: [put/delay-rewrite]\n  steps:\n    - send: {topic: T, body: x}\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(resources, "files", lambda pkg: Fake(real(pkg)))
    with pytest.raises(sc.ScenarioError, match="names put/delay-rewrite, which no spec file defines"):
        sc.catalogue()


def test_the_scenario_dump_validates_against_its_json_schema(tmp_path: Path) -> None:
    """Issue 16 item 6: the JSON is enough on its own for an implementation in another language."""
    import jsonschema

    from rmqspec.conformance.scenarios import catalogue, dump

    root = Path(__file__).resolve().parents[1]
    schema = json.loads((root / "conformance" / "scenarios.schema.json").read_text())
    doc = json.loads(dump(catalogue()))
    jsonschema.validate(doc, schema)
    assert doc["codes"]["PULL_NOT_FOUND"] == 19 and doc["codes"]["SUCCESS"] == 0
    logical = [s["id"] for s in doc["scenarios"] if s["logical_only"]]
    assert logical and all(
        set(s["features"]) & {"check-phase", "fine-clock"} for s in doc["scenarios"] if s["logical_only"]
    )
    # a step with two operations is refused by the schema
    bad = json.loads(json.dumps(doc))
    bad["scenarios"][0]["steps"][0]["pull"] = {"topic": "T"}
    bad["scenarios"][0]["steps"][0].setdefault("send", {"topic": "T"})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)

"""What a new user meets (issue 27): hints that are true and said once, plain output, exact errors."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from rich.console import Console

from rmqspec import commands
from rmqspec.adapters.apache import launcher
from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.adapters.remoting.deploy import FixedRemoting, settings_hint
from rmqspec.adapters.remoting.profile import TargetProfile
from rmqspec.conformance.contract import Feature, Target
from rmqspec.conformance.faults import FAULTS
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.scenarios import Scenario, catalogue
from rmqspec.conformance.specdoc import load_spec
from rmqspec.conformance.suite import Deployment, WallOptions, run_wall
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

SHORT = BrokerConfig("1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s")


@attrs.frozen
class _Main:
    """The main broker of a remoting:// target: nothing runs on it in these tests."""

    config: BrokerConfig
    can_restart: bool = False

    def target(self) -> Target:
        return InProcessTarget(Model(self.config))

    def restart_broker(self, graceful: bool) -> bool | None:
        return None

    def close(self) -> None:
        pass


@attrs.frozen
class _Fixed:
    """A remoting:// target as FixedRemoting is, but without a socket: every other setting is refused
    with FixedRemoting's own words."""

    remote: FixedRemoting

    @property
    def name(self) -> str:
        return self.remote.name

    @property
    def config(self) -> BrokerConfig:
        return self.remote.config

    @property
    def epsilon_ms(self) -> int:
        return 1000

    @property
    def features(self) -> frozenset[Feature]:
        return self.remote.features

    def open(self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False) -> Deployment:
        if config != self.config:
            self.remote.open(config)  # raises CannotDeploy
        return _Main(config)


def _needing_other_settings(base: BrokerConfig, features: frozenset[Feature]) -> Sequence[Scenario]:
    out = [
        s
        for s in catalogue()
        if s.config
        and s.features <= features
        and s.profile in (None, base.profile.value)
        and s.unmet_settings(base) is not None
    ]
    assert len(out) >= 3, "the catalogue has scenarios that need settings of their own"
    return out


def _report_text(rep: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    buf = io.StringIO()
    monkeypatch.setattr(commands, "_out", lambda: Console(file=buf, width=300, soft_wrap=True))
    commands._print_report(rep)
    return buf.getvalue()


def test_skips_for_settings_name_the_need_and_the_hint_is_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "running", lambda cache=None: [])
    remote = FixedRemoting(TargetProfile("broker.example", 10911, SHORT), "remoting://broker.example:10911")
    wanted = _needing_other_settings(SHORT, remote.features)
    rep = run_wall(_Fixed(remote), wanted, lambda cfg: InProcessTarget(Model(cfg)), WallOptions())
    skips = [r for r in rep.scenarios if r.outcome == "skip"]
    assert len(skips) == len(wanted)
    for r in skips:
        assert r.reason.startswith("needs ") and "(the target has " in r.reason, r.reason
        assert "rmqspec broker start" not in r.reason and "--set" not in r.reason
    assert len(rep.hints) == 1
    (hint,) = rep.hints
    # A broker rmqspec did not start: change its own configuration and the profile's `broker:` to match.
    assert "did not start" in hint and "broker.conf" in hint and "`broker:` section has KEY: VALUE" in hint
    assert "rmqspec broker start" not in hint and "--set" not in hint
    text = _report_text(rep, monkeypatch)
    assert text.count(hint) == 1
    assert text.count("SKIP ") == len(wanted)
    assert rep.to_json()["hints"] == [hint]


def test_hint_names_broker_start_only_for_a_broker_rmqspec_started(monkeypatch: pytest.MonkeyPatch) -> None:
    ours = launcher.BrokerState(
        "4.9.7", 4242, None, "127.0.0.1", 10911, None, "/tmp/rmqspec-broker-x", None, None, 0.0, False
    )
    monkeypatch.setattr(launcher, "running", lambda cache=None: [ours])
    hint = settings_hint(TargetProfile("localhost", 10911, SHORT))
    assert "was started by `rmqspec broker start`" in hint
    assert "rmqspec broker stop --store /tmp/rmqspec-broker-x" in hint
    assert "rmqspec broker start --version 4.9.7 --profile COPY --port 10911" in hint
    assert "--set" not in hint
    # Another port: a broker rmqspec did not start.
    other = settings_hint(TargetProfile("localhost", 10999, SHORT))
    assert "did not start" in other and "rmqspec broker start" not in other


def _rmqspec(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it with its output to a pipe (not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "rmqspec", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")},
    )


def test_piped_lists_are_plain_one_line_each_and_not_cut() -> None:
    done = _rmqspec("mutants", "--list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(MUTANTS)  # rich wrapped long descriptions onto lines of their own at 80
    for line, name in zip(lines, sorted(MUTANTS), strict=True):
        assert line.startswith(name) and line.endswith(MUTANTS[name].description), line
    assert "\x1b[" not in done.stdout
    scenarios = _rmqspec("scenarios", "list")
    shown = scenarios.stdout.splitlines()
    assert len(shown) == len(catalogue())
    assert all(" rules: " in line for line in shown)  # its help promises the rules


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("mutants", "--list"), "name"),
        (("faults", "--list"), "name"),
        (("scenarios", "list"), "id"),
    ],
)
def test_list_commands_print_json(args: tuple[str, ...], key: str) -> None:
    done = _rmqspec(*args, "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    expected = {"mutants": len(MUTANTS), "faults": len(FAULTS), "scenarios": len(catalogue())}[args[0]]
    assert len(rows) == expected and all(isinstance(r[key], str) for r in rows)


def test_rules_prints_json_with_format() -> None:
    done = _rmqspec("rules", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["rules"] == len(load_spec().rules)


def test_errors_are_one_plain_line_and_an_address_is_not_an_emoji() -> None:
    bad = _rmqspec("conform", "--target", "remoting://nosuchhost.invalid:123")
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: cannot connect to nosuchhost.invalid:123: "), bad.stderr
    assert len(bad.stderr.splitlines()) == 1 and "\x1b[" not in bad.stderr
    unknown = _rmqspec("conform", "--target", "nope")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: unknown target 'nope'"), (
        unknown.stderr
    )


def test_a_corrupt_json_line_is_reported_whole_with_its_column(tmp_path: Path) -> None:
    """Issue 27 item 8: the decoder's whole message, with line and column, not just its first words."""
    from rmqspec.conformance.history import HistoryError, load
    from rmqspec.conformance.trace_format import TraceError, read_jsonl, write_jsonl

    trace = tmp_path / "corrupt.jsonl"
    write_jsonl(trace, [])
    with trace.open("a", encoding="utf-8") as fh:
        fh.write('{"a": "x\ty"}\n')  # a raw tab inside a string
    with pytest.raises(TraceError) as e:
        list(read_jsonl(trace))
    assert str(e.value) == f"{trace}:2: not JSON: Invalid control character at: line 1 column 9 (char 8)"
    history = tmp_path / "h.jsonl"
    history.write_text('{"rmqspec_history": 1, "x": "a\tb"}\n', encoding="utf-8")
    with pytest.raises(HistoryError) as h:
        load(history)
    assert str(h.value) == f"{history}:1: not JSON: Invalid control character at: line 1 column 31 (char 30)"


@pytest.mark.spark
@pytest.mark.slow
def test_spark_runs_leave_no_log_in_the_temp_folder(tmp_path: Path) -> None:
    """Issue 27 item 15: a run that went through leaves no rmqspec-spark-*.log; a failed one keeps its
    log only when something is in it, and then its error says where."""
    from rmqspec.conformance.trace_format import rows_of, write_jsonl
    from rmqspec.conformance.trace_gen import generate_history

    temp = tmp_path / "temp"
    temp.mkdir()
    traces = tmp_path / "t"
    traces.mkdir()
    write_jsonl(traces / "a.jsonl", rows_of("h", generate_history(1, 40, make_target=InProcessTarget)))
    env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"} | {"TMPDIR": str(temp)}

    def verify() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rmqspec", "traces", "verify", str(traces), "--master", "local[1]"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env=env,
        )

    ok = verify()
    assert ok.returncode == 0, ok.stdout[-1000:] + ok.stderr[-1000:]
    assert not list(temp.glob("rmqspec-spark-*.log"))
    with (traces / "a.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("{broken\n")
    bad = verify()
    assert bad.returncode == 2 and "not JSON" in bad.stderr, bad.stderr
    for kept in temp.glob("rmqspec-spark-*.log"):
        assert kept.stat().st_size > 0 and str(kept) in bad.stderr


def test_traces_verify_warns_when_profile_disagrees_and_history_shows_only_that_one(tmp_path: Path) -> None:
    """Issue 27 item 7: --profile against the trace's own header is said; --history ID is that history only."""
    from typer.testing import CliRunner

    from rmqspec.cli import app
    from rmqspec.conformance.trace_gen import write_traces

    out = tmp_path / "t"
    write_traces(
        out, histories=6, events=120, seed=3, files=1, workers=1, make_target=InProcessTarget, fmt="jsonl"
    )
    runner = CliRunner()
    agree = runner.invoke(
        app, ["traces", "verify", str(out), "--engine", "local", "--profile", "short-levels"]
    )
    assert "disagrees" not in agree.output, agree.output
    differ = runner.invoke(app, ["traces", "verify", str(out), "--engine", "local", "--profile", "default"])
    assert "warning: --profile disagrees with the settings" in differ.output, differ.output
    assert "messageDelayLevel 1s 5s 10s" in differ.output and "(the trace: 1s 2s 3s" in differ.output

    bad = tmp_path / "bad"
    write_traces(
        bad,
        histories=6,
        events=120,
        seed=3,
        files=1,
        workers=1,
        make_target=InProcessTarget,
        fmt="jsonl",
        mutant="delay-ignored",
    )
    whole = runner.invoke(app, ["traces", "verify", str(bad), "--engine", "local"])
    listed = re.search(r"failed histories \(\d+\): (.+)", whole.output)
    assert whole.exit_code == 1 and listed, whole.output
    failed = listed.group(1).split(", ")
    assert len(failed) >= 2, failed
    one, others = failed[1], set(failed) - {failed[1]}  # not the first: its anomalies come first anyway
    only = runner.invoke(app, ["traces", "verify", str(bad), "--engine", "local", "--history", one])
    assert only.exit_code == 1 and f"history {one}: FAIL" in only.output, only.output
    assert "[sendback/" in only.output or "[put/" in only.output  # a rule in brackets is text, not markup
    assert f" in {one}: " in only.output
    assert not any(h in only.output for h in others), only.output

"""End to end over TCP: ``rmqspec serve`` (the model behind the remoting protocol) judged by ``rmqspec
conform --target remoting://...`` with the short level table of profiles/short-levels.yaml.

The served reference must pass (every scenario that fits a wall clock and that configuration, then the
concurrent workload checked as a whole); a served mutant must fail. Both use the real command line for
the server, as a user would, on a free loopback port.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rmqspec.adapters.remoting.profile import ProfileError, load_profile, parse_address
from rmqspec.adapters.remoting.target import Namespace
from rmqspec.conform import TargetSpecError, conform

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "short-levels.yaml"

pytestmark = [pytest.mark.wire]


@contextmanager
def served(target: str = "reference") -> Iterator[str]:
    """``rmqspec serve --port 0`` in a subprocess; yields its ``remoting://`` address."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rmqspec",
            "serve",
            "--port",
            "0",
            "--target",
            target,
            "--profile",
            str(PROFILE),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"on (127\.0\.0\.1):(\d+)", line)
        assert m, f"rmqspec serve said {line!r}"
        yield f"remoting://{m.group(1)}:{m.group(2)}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_served_reference_passes_the_wall_clock_suite() -> None:
    with served() as address:
        start = time.monotonic()
        rep = conform(address, profile=PROFILE, workload_seconds=20, max_wait_ms=30_000)
        took = time.monotonic() - start
    ran = [r for r in rep.scenarios if r.outcome != "skip"]
    bad = [(r.scenario.id, r.outcome, r.reason, r.failures) for r in ran if r.outcome != "pass"]
    assert not bad, bad
    assert rep.machine is None, rep.machine
    assert rep.passed and rep.mode == "workload"
    assert len(ran) >= 25  # put, pull, batch, send-back, transaction scenarios that fit the short table
    assert rep.machine_examples >= 100  # workload operations
    assert took < 300


@pytest.mark.slow
def test_served_mutant_fails() -> None:
    with served("mutant:delay-ignored") as address:
        rep = conform(address, profile=PROFILE, workload_seconds=10, max_wait_ms=10_000)
    assert not rep.passed
    failed = [r.scenario.id for r in rep.scenarios if r.outcome == "fail"]
    assert failed or (rep.machine is not None and "put/" in rep.machine), (failed, rep.machine)


def test_nothing_listening_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TargetSpecError, match=r"cannot connect to 127\.0\.0\.1:1"):
        conform("remoting://127.0.0.1:1", profile=PROFILE, workload_seconds=0)


def test_cli_reports_a_bad_target_without_a_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rmqspec", "conform", "--target", "remoting://127.0.0.1:notaport"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    # the error blames the argument that is wrong, on one line
    assert "--target 'remoting://127.0.0.1:notaport': the address must be remoting://HOST:PORT" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_profile_file_errors_name_the_file_and_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("version: 1\nbroker: {messageDelayLevel: '1s 2x'}\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"p\.yaml: broker: messageDelayLevel item 2"):
        load_profile(bad, "127.0.0.1:10911")
    bad.write_text("version: 1\nlacks: [teleport]\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="unknown feature 'teleport'"):
        load_profile(bad, "127.0.0.1:10911")
    bad.write_text("version: 1\nbrokr: {}\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="unknown key 'brokr'"):
        load_profile(bad, "127.0.0.1:10911")
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "missing.yaml", "127.0.0.1:10911")
    with pytest.raises(ProfileError, match="port from 1 to 65535"):
        parse_address("host:70000")


def test_profile_defaults_and_settings() -> None:
    p = load_profile(PROFILE, "10.0.0.1:9876")
    assert (p.host, p.port) == ("10.0.0.1", 9876)
    assert p.config.delay_levels[:3] == (1000, 2000, 3000)
    assert (p.config.transaction_timeout_ms, p.config.transaction_check_interval_ms) == (3000, 5000)
    assert p.config.transaction_check_max == 3
    assert load_profile(None, "h").port == 10911


def test_namespace_renames_user_names_both_ways_and_leaves_system_names() -> None:
    ns = Namespace("SABCD_")
    assert ns.topic("T") == "SABCD_T"
    assert ns.topic("%RETRY%CG") == "%RETRY%SABCD_CG"
    assert ns.topic("%DLQ%CG") == "%DLQ%SABCD_CG"
    assert ns.topic("SCHEDULE_TOPIC_XXXX") == "SCHEDULE_TOPIC_XXXX"
    assert ns.topic("bad topic") == "bad topic"  # illegal as it is: the broker must refuse it as it is
    assert ns.topic("x" * 127) == "x" * 127  # would become too long with the prefix
    assert ns.strip_topic("%RETRY%SABCD_CG") == "%RETRY%CG"
    assert ns.out_props({"REAL_TOPIC": "T", "PGROUP": "PG"}) == {
        "REAL_TOPIC": "SABCD_T",
        "PGROUP": "SABCD_PG",
    }


@pytest.mark.slow
def test_pytest_plugin_runs_the_suite_over_the_wire(tmp_path: Path) -> None:
    (tmp_path / "test_nothing.py").write_text("def test_nothing() -> None:\n    pass\n", encoding="utf-8")
    with served() as address:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--rmq-target={address}",
                f"--rmq-profile={PROFILE}",
                "--rmq-workload-seconds=5",
                "-k",
                "batch or workload or nothing",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "failed" not in summary, summary

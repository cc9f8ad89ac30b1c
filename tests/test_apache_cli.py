"""``rmqspec broker``: argument errors are one line and exit 2, before any broker or Maven runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rmqspec.adapters.apache import launcher, maven
from rmqspec.cli import app

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache, and Maven out of reach: nothing here may resolve a version or find another run's broker."""
    c = tmp_path / "cache"
    monkeypatch.setenv("RMQSPEC_CACHE", str(c))

    def no_maven(*args: object, **kwargs: object) -> None:
        raise AssertionError("a bad argument reached Maven")

    monkeypatch.setattr(launcher, "resolve", no_maven)
    monkeypatch.setattr(maven, "resolve", no_maven)
    return c


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["broker", *args])
    return result.exit_code, result.output


def one_error(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert "Traceback" not in output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["start", "--version", "4.9.8"], "4.9.8 is not on Maven Central: use 4.9.7"),
        (["start", "--version", "9.9"], "'9.9' is not pinned"),
        (["start", "--isolation", "docker"], "--isolation 'docker': use auto, netns or host"),
        (["start", "--port", "1"], "--port 1: the broker also listens on port-2 and port+1"),
        (["start", "--port", "65535"], "--port 65535"),
        (["start", "--timeout", "0"], "--timeout 0.0: must be > 0 seconds"),
        (["start", "--profile", "no/such.yaml"], "no/such.yaml: cannot read"),
        (["stop", "--version", "1.0"], "'1.0' is not pinned"),
        (["status", "--version", "1.0"], "'1.0' is not pinned"),
        (["fetch", "--version", "4.9.8"], "use 4.9.7"),
        (["record", "--out", ".", "--version", "4.9.7"], "--out . is a directory"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    code, out = run(*args)
    assert code == 2
    assert fragment in one_error(out)


def test_a_profile_a_broker_cannot_take_is_refused(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("version: 1\nbroker:\n  retryMaxTimes: 3\n")
    code, out = run("start", "--profile", str(profile), "--store", str(tmp_path / "s"))
    assert code == 2
    assert "retryMaxTimes=3 cannot be given to a real broker" in one_error(out)


def test_a_store_that_is_not_empty_is_refused_and_not_wiped_unless_rmqspec_made_it(tmp_path: Path) -> None:
    store = tmp_path / "mine"
    store.mkdir()
    (store / "precious.txt").write_text("keep me")
    code, out = run("start", "--store", str(store))
    assert code == 2 and "is not empty; give an empty or new directory, or --fresh" in one_error(out)
    code, out = run("start", "--store", str(store), "--fresh")
    assert code == 2 and "will not wipe" in one_error(out)
    assert (store / "precious.txt").read_text() == "keep me"
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    code, out = run("start", "--store", str(not_a_dir))
    assert code == 2 and "is not a directory" in one_error(out)


def test_stop_and_status_with_nothing_running(tmp_path: Path) -> None:
    code, out = run("status")
    assert code == 1 and out.strip() == "not running"
    code, out = run("stop")
    assert code == 0 and out.strip() == "no broker started by rmqspec is running"
    code, out = run("stop", "--store", str(tmp_path))
    assert code == 2 and "no broker state in" in one_error(out)


def test_versions_lists_the_pinned_table() -> None:
    code, out = run("versions")
    assert code == 0
    assert "4.9.7 (default): spec profile 4.9" in out and "5.5.0: spec profile 5.x" in out
    assert "not fetched" in out  # the empty cache of this test

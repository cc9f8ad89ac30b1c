"""CrossHair (``make crosshair``): the reference's contracts hold, and a planted violation is found.

Every test here that expects success also has a twin that must fail on a planted bug, so none of them
can pass by checking nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rmqspec.contracts_check import check, contracted_functions, default_targets, main, reference_dir

# clamp_delay_level as in reference/semantics.py, same contract; BODY is the line under test.
PLANTED = '''
def clamp_delay_level(level: int, max_level: int) -> int:
    """A level above the table's maximum is stored as the maximum.

    pre: level > 0
    pre: max_level > 0
    post: 1 <= __return__ <= max_level
    post: __return__ == min(level, max_level)
    """
    BODY
'''
CORRECT = "return max_level if level > max_level else level"
OFF_BY_ONE = "return max_level + 1 if level > max_level else level"

SLOW = '''
def slow(n: int) -> int:
    """Many paths: CrossHair keeps exploring until stopped.

    pre: 0 <= n
    post: __return__ >= 0
    """
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total
'''

# The contracted decision functions of reference/semantics.py (a subset is enough to show they are seen).
DECISIONS = {
    "clamp_delay_level",
    "schedule_queue_id",
    "correct_deliver_timestamp",
    "is_due",
    "sendback_delay_level",
    "check_immunity_ms",
    "check_due",
}


def _planted(tmp_path: Path, body: str, name: str = "planted_clamp") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(PLANTED.replace("BODY", body))
    return path


# --- the real reference -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_reference_contracts_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """``make crosshair``'s own run: every contracted function of reference/ is analysed, none refuted."""
    targets = default_targets()
    semantics = reference_dir() / "semantics.py"
    assert semantics in targets
    report = check(targets, budget=240)
    out = capsys.readouterr().out
    assert report.status == 0, out
    assert not report.violations and not report.timed_out and report.returncode == 0, out
    analysed = {f.function for f in report.findings}
    assert analysed == {c.qualname for c in report.contracted}, out
    assert analysed >= DECISIONS, out
    assert report.count("confirmed") >= len(DECISIONS), out
    assert "contracts hold (exit 0)" in out


@pytest.mark.slow
def test_a_bug_in_a_copy_of_the_reference_is_found(tmp_path: Path) -> None:
    """The same run over a copy of reference/ whose clamp_delay_level is off by one must fail (exit 1)."""
    copy = tmp_path / "refcopy"  # not "reference": the copy must not shadow, or be shadowed by, the real one
    shutil.copytree(reference_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    semantics = copy / "semantics.py"
    source = semantics.read_text()
    assert "    " + CORRECT + "\n" in source
    semantics.write_text(source.replace("    " + CORRECT + "\n", "    " + OFF_BY_ONE + "\n", 1))
    report = check([semantics], budget=240, per_condition=1.0, echo=False)
    assert report.status == 1
    assert {f.function for f in report.violations} == {"clamp_delay_level"}
    assert all("when calling clamp_delay_level(" in f.message for f in report.violations)


# --- a planted violation ------------------------------------------------------------------------------------


def test_planted_violation_is_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _planted(tmp_path, OFF_BY_ONE)
    assert main([str(bad), "--budget", "120"]) == 1
    out = capsys.readouterr().out
    # The counterexample names the function and its arguments, e.g. clamp_delay_level(2, 1) returning 2.
    assert "VIOLATION in clamp_delay_level" in out
    assert "when calling clamp_delay_level(" in out
    assert "contract violated (exit 1)" in out


def test_planted_function_without_the_bug_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: the same file with the correct body is confirmed, so the failure above is the bug's."""
    good = _planted(tmp_path, CORRECT, "planted_clamp_ok")
    assert main([str(good), "--budget", "120"]) == 0
    out = capsys.readouterr().out
    assert "VIOLATION" not in out
    assert "2 confirmed over all paths" in out


# --- the runner's own failure modes -------------------------------------------------------------------------


def test_budget_is_enforced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = tmp_path / "planted_slow.py"
    slow.write_text(SLOW)
    assert main([str(slow), "--budget", "3", "--per-condition", "60"]) == 2
    assert "budget ran out" in capsys.readouterr().out


def test_missing_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_file_without_contracts_is_not_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("def f(x: int) -> int:\n    return x\n")
    assert main([str(plain)]) == 2
    assert "nothing to check" in capsys.readouterr().err


def test_contract_discovery(tmp_path: Path) -> None:
    found = contracted_functions(_planted(tmp_path, CORRECT))
    assert [(c.qualname, c.preconditions, c.postconditions) for c in found] == [("clamp_delay_level", 2, 2)]
    names = {c.qualname for c in contracted_functions(reference_dir() / "semantics.py")}
    assert names >= DECISIONS

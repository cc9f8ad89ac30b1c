"""CrossHair: the reference's contracts hold, and a planted violation is found."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqspec.contracts_check import main

PLANTED = '''
def clamp_delay_level(level: int, max_level: int) -> int:
    """A planted bug: one above the maximum.

    pre: level > 0
    pre: max_level > 0
    post: 1 <= __return__ <= max_level
    """
    return max_level + 1 if level > max_level else level
'''


@pytest.mark.slow
def test_reference_contracts_hold() -> None:
    assert main(["--budget", "240"]) == 0


def test_planted_violation_is_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "planted.py"
    bad.write_text(PLANTED)
    assert main([str(bad), "--budget", "120"]) == 1
    out = capsys.readouterr()
    assert "clamp_delay_level" in out.out + out.err
    assert "error:" in out.out


def test_missing_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err

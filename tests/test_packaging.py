"""Issue 16 item 12: the packaging a new user meets. The build requirement takes the SPDX license string,
the documented commands' outputs are ignored, and docs/layout.md says which layouts were measured and
why the package's subfolders stay links to the design card's top-level folders."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_build_requires_a_setuptools_that_takes_the_spdx_license_string() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert isinstance(meta["project"]["license"], str)  # PEP 639: setuptools 77 and later
    assert "setuptools>=77" in meta["build-system"]["requires"]


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)
@pytest.mark.parametrize(
    "output",
    ["t/part-0.parquet", "report.json", "report.xml", "plots/lateness.png", "s.json", "out/results/a.json"],
)
def test_what_the_documented_commands_write_is_ignored(output: str) -> None:
    """README and guides write these (traces generate --out t/, --report, --junit, --plots, scenarios dump)."""
    done = subprocess.run(["git", "check-ignore", "-q", output], cwd=ROOT, check=False)
    assert done.returncode == 0, f"{output} is not ignored by .gitignore"


def test_the_layout_page_names_each_layout_measured_and_is_in_the_site() -> None:
    page = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    for layout in ("symlinks", "package-dir", "editable_mode=strict", "non-editable"):
        assert layout in page
    assert "layout.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    # the links it describes are what the package is
    for sub in ("reference", "conformance", "adapters", "spec"):
        assert (ROOT / "rmqspec" / sub).is_symlink()

"""Issue 16 item 12: the packaging a new user meets. The build requirement takes the SPDX license string,
the documented commands' outputs are ignored, and docs/layout.md says which layouts were measured and
why the package's subfolders stay links to the design card's top-level folders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
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


@pytest.mark.slow
def test_the_built_wheel_carries_the_profiles_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    """Issue 27 item 2: `python -m build` (an sdist, then a wheel built from it) carries profiles/ as
    package data; the wheel installed into a fresh venv outside the checkout finds `--profile
    short-levels` by name and passes the served reference from a folder that has no profiles/."""
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = dist.glob("rmqspec-*.whl")
    (sdist,) = dist.glob("rmqspec-*.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        in_wheel = set(z.namelist())
    with tarfile.open(sdist) as t:
        in_sdist = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for name in sorted(p.name for p in (ROOT / "profiles").glob("*.yaml")):
        assert f"rmqspec/profiles/{name}" in in_wheel, name
        assert f"rmqspec/profiles/{name}" in in_sdist, name

    # A fresh venv; its dependencies are the checkout venv's (not rmqspec itself: no network needed).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("rmqspec", "__editable__")):
            (deps / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    (Path(purelib) / "rmqspec-test-deps.pth").write_text(f"{deps}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)],
        check=True,
        timeout=300,
        env=env,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import rmqspec; print(rmqspec.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=elsewhere,
        env=env,
        timeout=60,
    ).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    run = subprocess.run(
        [str(venv / "bin" / "rmqspec"), "conform", "--target", "served", "--profile", "short-levels"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=1800,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "PASS" in run.stdout.splitlines()[-1]
    # The shipped profile, found by name inside the installed package.
    assert re.search(
        r"^profile: short-levels \(\S*site-packages/rmqspec/profiles/short-levels\.yaml\)", run.stdout, re.M
    ), run.stdout[:500]

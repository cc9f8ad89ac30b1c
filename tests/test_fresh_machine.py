"""Issue 22: `make test` on a fresh machine. Every test's prerequisites are fetched before pytest runs,
CI runs with an rmqspec cache of its own that starts empty, and the installed versions come from one
constraints file whose pins are supported together (no PySpark warning about pandas)."""

from __future__ import annotations

import re
import tomllib
import warnings
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt: {line!r} is not pinned with =="
        pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def _requirements() -> list[Requirement]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in meta["dependencies"]]
    for extra in meta["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return reqs


def test_every_dependency_is_pinned_within_what_pyproject_allows() -> None:
    pins = _pins()
    for req in _requirements():
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{req.name} is a dependency but constraints.txt does not pin it"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}"
        )


def test_make_installs_from_the_constraints() -> None:
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    installs = [ln for ln in make.splitlines() if "$(BIN)/python -m pip install" in ln]
    assert installs and all("-c constraints.txt" in ln for ln in installs), installs
    assert re.search(r"^\$\(STAMP\): .*constraints\.txt", make, re.M), "the venv is not rebuilt on new pins"


def test_pyspark_supports_the_pinned_pandas() -> None:
    """PySpark warns (UserWarning) for a pandas it does not fully support; with the pins it says nothing."""
    utils = pytest.importorskip("pyspark.sql.pandas.utils")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        utils.require_minimum_pandas_version()
        utils.require_minimum_pyarrow_version()


def _prerequisites(make: str, target: str) -> list[str]:
    m = re.search(rf"^{re.escape(target)}:([^\n=]*)$", make, re.M)
    assert m, f"no target {target} in the Makefile"
    return m.group(1).split()


def test_the_jars_are_fetched_before_pytest_runs() -> None:
    """The proxy and broker tests need the pinned releases' jars; the step that fetches them runs first."""
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "rocketmq" in _prerequisites(make, "pytest")
    assert "broker fetch" in make.split("\nrocketmq:", 1)[1].split("\n\n", 1)[0]
    test = _prerequisites(make, "test")
    assert {"pytest", "docs", "conform-real"} <= set(test)


def test_ci_runs_with_an_empty_cache_of_its_own() -> None:
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    m = re.search(r'^export RMQSPEC_CACHE="\$PWD/([^"]+)"$', run, re.M)
    assert m, "CI does not point RMQSPEC_CACHE into the clone"
    cache = m.group(1)
    body = run[m.end() :]
    assert 'rm -rf "$RMQSPEC_CACHE"' in body.split("make test")[0], "the cache is not emptied first"
    assert run.rstrip().endswith("make test")
    ignore = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert f"/{cache.split('/')[0]}/" in ignore, "the CI cache would show as untracked files"

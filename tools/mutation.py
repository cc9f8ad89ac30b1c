"""Mutation testing of the reference model (``reference/``) with mutmut 3.

Run it with ``make mutmut`` or ``.venv/bin/python tools/mutation.py --help``.

Why a script: the ``rmqspec`` package maps its subpackages onto top-level folders through symlinks
(``rmqspec/reference -> ../reference`` ...), which mutmut 3 does not follow, and the project venv has an
*editable* install of ``rmqspec`` that would let the tests import the original files instead of
mutmut's ``mutants/`` copy.  So this script

1. copies the repository into a scratch folder, with every symlink replaced by a real directory;
2. creates a fresh, non-editable venv there (``--without-pip``, no system site-packages) whose only
   extra entry is a ``.pth`` *path* line to the project venv's site-packages: the third-party
   packages (mutmut, pytest, hypothesis, ...) are importable, but the editable-install hook of that
   site-packages is never executed, so ``rmqspec`` can only come from ``sys.path`` -- that is, from
   mutmut's ``mutants/`` folder;
3. writes ``[tool.mutmut]`` into the copy's ``pyproject.toml`` (mutate ``rmqspec/reference/*.py`` only,
   run a fast test subset without the slow-marked tests) and a ``tests/conftest.py`` that makes
   Hypothesis deterministic and logs, from inside every pytest session that mutmut starts, which
   files ``rmqspec.reference.*`` was imported from;
4. runs ``mutmut run`` under ``nice``, checks that the import log only names files under
   ``mutants/rmqspec/reference/`` that carry mutmut's trampolines, and writes a JSON summary (counts
   per module and status, plus every surviving mutant with its diff from ``mutmut show``).

Nothing in the repository is modified; the scratch folder can be deleted afterwards.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "rmqspec"
TARGET = "reference"  # the subpackage under mutation: rmqspec/reference -> ../reference
DEFAULT_TESTS = (
    "tests/test_spec_examples.py",
    "tests/test_strategies.py",
    "tests/test_properties.py",
    "tests/test_checker.py",
    "tests/test_reference_edges.py",
    "tests/test_config_profile.py",
    "tests/test_wire_codec.py",  # the model's records against the real 4.9.4 wire vectors in shared/
)
DEFAULT_MARKERS = "not slow"
DEFAULT_SCRATCH = Path("/tmp/rmqspec-mutation")
DEFAULT_OUTPUT = REPO / "out" / "mutation" / "summary.json"
IMPORT_LOG = "import-log.txt"
# Top-level entries of the repository that the scratch copy does not need.
SKIP_TOP = frozenset(
    {".git", ".venv", "site", "out", "build", "mutants", ".hypothesis", ".mypy_cache", ".ruff_cache"}
)
SKIP_ANYWHERE = ("__pycache__", ".pytest_cache", "*.egg-info", "*.pyc")
# mutmut's status names (mutmut.stats.status_by_exit_code); "killed" also covers exit code 3.
KILLED_LIKE = ("killed", "timeout", "caught by type check")
NOT_TESTED = ("skipped", "not checked", "check was interrupted by user")

STRING = re.compile(r"""[fbrFBR]*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")


def _skeleton(lines: list[str]) -> str:
    """The code with string literals, ``None``, commas and blanks removed."""
    text = STRING.sub("", "".join(lines))
    return re.sub(r"\bNone\b|[\s,]", "", text)


CONFTEST = """
# --- added by tools/mutation.py in the scratch copy only (never in the repository) ---
import os as _mut_os
import sys as _mut_sys

from hypothesis import settings as _mut_settings

# Deterministic and timing-independent: the same mutant gets the same verdict on every run, and
# mutmut's trampolines cannot trip Hypothesis deadlines.
_mut_settings.register_profile("mutmut", deadline=None, derandomize=True, database=None, print_blob=False)
_mut_settings.load_profile("mutmut")


def pytest_sessionfinish(session, exitstatus):  # type: ignore[no-untyped-def]
    log = _mut_os.environ.get("RMQSPEC_MUTATION_IMPORT_LOG")
    if not log:
        return
    lines = []
    for name, module in sorted(_mut_sys.modules.items()):
        if name == "rmqspec.reference" or name.startswith("rmqspec.reference."):
            path = getattr(module, "__file__", None)
            trampolined = any("__mutmut_" in key for key in vars(module))
            lines.append(f"{name}\\t{path}\\t{int(trampolined)}\\n")
    with open(log, "a", encoding="utf-8") as handle:
        handle.writelines(lines)
"""


@dataclass
class Mutant:
    name: str
    module: str
    status: str
    diff: str = ""

    @property
    def kind(self) -> str:
        """``message-text`` when the mutant only changes (or drops) a remark or rule-id string literal.

        Those strings are diagnostics (``Rejected.remark``, ``Rejected.rule``), not observable
        behaviour the conformance checks compare; every other mutant is ``behaviour``.  A heuristic
        for reading the list, not a verdict: docs/mutation.md classifies the survivors by hand.
        """
        removed = [
            line[1:] for line in self.diff.splitlines() if line.startswith("-") and not line.startswith("---")
        ]
        added = [
            line[1:] for line in self.diff.splitlines() if line.startswith("+") and not line.startswith("+++")
        ]
        texts = [lit for line in removed for lit in STRING.findall(line) if " " in lit or "/" in lit]
        if not texts:
            return "behaviour"
        return "message-text" if _skeleton(removed) == _skeleton(added) else "behaviour"


@dataclass
class ModuleScore:
    module: str
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def tested(self) -> int:
        return self.total - sum(self.counts[s] for s in NOT_TESTED)

    @property
    def killed(self) -> int:
        return sum(self.counts[s] for s in KILLED_LIKE)

    def as_json(self) -> dict[str, Any]:
        tested = self.tested
        return {
            "module": self.module,
            "total": self.total,
            "tested": tested,
            "killed_or_timeout": self.killed,
            "score_percent": round(100.0 * self.killed / tested, 1) if tested else None,
            "by_status": dict(sorted(self.counts.items())),
        }


def _ignore(directory: str, names: list[str]) -> set[str]:
    ignored = set(shutil.ignore_patterns(*SKIP_ANYWHERE)(directory, names))
    if Path(directory).resolve() == REPO:
        ignored |= {n for n in names if n in SKIP_TOP}
    return ignored


def copy_repo(scratch: Path) -> Path:
    """Copy the repository to ``scratch/repo``, replacing every symlink by a real copy of its target."""
    copy = scratch / "repo"
    shutil.copytree(REPO, copy, symlinks=False, ignore=_ignore)
    for path in [copy, *copy.rglob("*")]:
        if path.is_symlink():
            raise SystemExit(f"error: the scratch copy still has a symlink: {path}")
    package_dir = copy / PACKAGE / TARGET
    if not (package_dir / "__init__.py").is_file():
        raise SystemExit(f"error: {package_dir} is not a real package directory")
    shared = REPO.parent / "shared"
    if shared.is_dir():  # beside the copy, where tests look for the wire vectors (outside the copy)
        (scratch / "shared").symlink_to(shared, target_is_directory=True)
    return copy


def python_says(python: Path, code: str, **kwargs: Any) -> str:
    """What ``python -c code`` prints, stripped."""
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, **kwargs)
    return str(proc.stdout).strip()


def make_venv(scratch: Path, deps_site_packages: Path) -> Path:
    """A venv without rmqspec installed; third-party packages come from ``deps_site_packages``.

    The ``.pth`` line only puts that folder on ``sys.path``: ``.pth`` files *inside* it (the
    editable-install finder of the project venv) are not executed.
    """
    env_dir = scratch / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = python_says(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    (Path(purelib) / "rmqspec_mutation_deps.pth").write_text(f"{deps_site_packages}\n", encoding="utf-8")
    return python


def configure(copy: Path, modules: list[str], tests: list[str], markers: str) -> None:
    """Append ``[tool.mutmut]`` to the copy's pyproject.toml and the conftest hook to its tests."""
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    if "[tool.mutmut]" in text:
        raise SystemExit("error: pyproject.toml already has a [tool.mutmut] table; merge it by hand")
    only = [f"{PACKAGE}/{TARGET}/{m}.py" for m in modules] if modules else [f"{PACKAGE}/{TARGET}/*.py"]
    settings: dict[str, object] = {
        # The whole package is copied to mutants/ so that rmqspec.adapters / rmqspec.conformance are
        # importable next to the mutated rmqspec.reference; only_mutate restricts what gets mutated.
        "source_paths": [PACKAGE],
        "only_mutate": only,
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-m", markers, "-p", "no:cacheprovider"],
        "use_git_change_detection": False,
    }
    lines = ["", "[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    pyproject.write_text(text.rstrip("\n") + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
    conftest = copy / "tests" / "conftest.py"
    previous = conftest.read_text(encoding="utf-8") if conftest.exists() else ""
    conftest.write_text(previous + CONFTEST, encoding="utf-8")


def clean_env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "COVERAGE_"))}
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["RMQSPEC_MUTATION_IMPORT_LOG"] = str(scratch / IMPORT_LOG)
    env["PATH"] = f"{scratch / 'venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def mutmut(python: Path, args: list[str], *, nice: int) -> list[str]:
    launcher = "import sys; from mutmut.__main__ import cli; sys.argv[0] = 'mutmut'; cli()"
    command = [str(python), "-c", launcher, *args]
    if nice:
        command = ["nice", "-n", str(nice), *command]
    return command


def run_mutmut(python: Path, copy: Path, env: dict[str, str], nice: int, max_children: int, log: Path) -> int:
    command = mutmut(python, ["run", "--max-children", str(max_children)], nice=nice)
    print("+", " ".join(command), f"  (cwd {copy}, log {log})", flush=True)
    with log.open("w", encoding="utf-8") as handle:
        proc = subprocess.run(
            command, cwd=copy, env=env, stdout=handle, stderr=subprocess.STDOUT, check=False
        )
    return proc.returncode


def check_imports(scratch: Path, copy: Path, modules: list[str]) -> dict[str, Any]:
    """Which files the tests run by mutmut imported ``rmqspec.reference.*`` from (see CONFTEST).

    ``modules``: the ones mutmut made mutants of (a module of attrs classes only has none, so no
    trampolines either)."""
    log = scratch / IMPORT_LOG
    if not log.exists():
        raise SystemExit("error: no import log: the tests never ran inside mutmut")
    expected_dir = (copy / "mutants" / PACKAGE / TARGET).resolve()
    seen: dict[str, tuple[str, bool]] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        name, path, trampolined = line.split("\t")
        seen[name] = (path, seen.get(name, ("", False))[1] or trampolined == "1")
    wrong = {n: p for n, (p, _) in seen.items() if Path(p).resolve().parent != expected_dir}
    mutated = {f"{PACKAGE}.{TARGET}.{m}" for m in modules}
    untrampolined = sorted(n for n in mutated if n in seen and not seen[n][1])
    if wrong or untrampolined:
        raise SystemExit(f"error: tests imported unmutated code: {wrong or untrampolined}")
    return {
        "expected_dir": str(expected_dir),
        "modules": {n: p for n, (p, _) in sorted(seen.items())},
        "ok": True,
    }


def module_of(name: str, modules: list[str]) -> str:
    prefix = f"{PACKAGE}.{TARGET}."
    rest = name.removeprefix(prefix)
    matches = [m for m in modules if rest.startswith(m + ".")]
    return max(matches, key=len) if matches else "?"


def collect_results(
    python: Path, copy: Path, env: dict[str, str], modules: list[str]
) -> tuple[list[Mutant], str]:
    command = mutmut(python, ["results", "--all", "true"], nice=0)
    out = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, check=True).stdout
    mutants: list[Mutant] = []
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name:
            mutants.append(Mutant(name=name, module=module_of(name, modules), status=status))
    version = python_says(python, "import importlib.metadata as m; print(m.version('mutmut'))", env=env)
    return mutants, version


def add_diffs(python: Path, copy: Path, env: dict[str, str], mutants: list[Mutant]) -> None:
    for mutant in mutants:
        command = mutmut(python, ["show", mutant.name], nice=0)
        proc = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, check=False)
        mutant.diff = proc.stdout.strip() or proc.stderr.strip()


def summarise(
    mutants: list[Mutant],
    modules: list[str],
    *,
    version: str,
    tests: list[str],
    markers: str,
    seconds: float,
    started: dt.datetime,
    imports: dict[str, Any],
    exit_code: int,
) -> dict[str, Any]:
    scores = {m: ModuleScore(m) for m in modules}
    overall = ModuleScore("total")
    for mutant in mutants:
        scores.setdefault(mutant.module, ModuleScore(mutant.module)).counts[mutant.status] += 1
        overall.counts[mutant.status] += 1
    not_killed = [m for m in mutants if m.status not in KILLED_LIKE and m.status not in NOT_TESTED]
    return {
        "tool": "mutmut",
        "mutmut_version": version,
        "python": sys.version.split()[0],
        "started_utc": started.isoformat(timespec="seconds"),
        "duration_seconds": round(seconds),
        "mutmut_exit_code": exit_code,
        "mutated": [f"{PACKAGE}/{TARGET}/{m}.py" for m in modules],
        "tests": tests,
        "pytest_markers": markers,
        "score_definition": "(killed + timeout + caught by type check) / (total - skipped - not checked)",
        "total": overall.as_json(),
        "not_killed_by_kind": dict(sorted(Counter(m.kind for m in not_killed).items())),
        "modules": [s.as_json() for s in scores.values()],
        "imports_verified": imports,
        "not_killed": [
            {"name": m.name, "module": m.module, "status": m.status, "kind": m.kind, "diff": m.diff}
            for m in not_killed
        ],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    all_modules = sorted(p.stem for p in (REPO / TARGET).glob("*.py") if p.stem != "__init__")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scratch", type=Path, default=DEFAULT_SCRATCH, help="scratch folder (recreated)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON summary path")
    parser.add_argument(
        "--modules",
        nargs="+",
        choices=all_modules,
        default=all_modules,
        metavar="MODULE",
        help=f"reference modules to mutate (default: all of {', '.join(all_modules)})",
    )
    parser.add_argument("--tests", nargs="+", default=list(DEFAULT_TESTS), help="test files mutmut runs")
    parser.add_argument("--markers", default=DEFAULT_MARKERS, help="pytest -m expression")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--nice", type=int, default=10, help="nice increment for mutmut (0: none)")
    parser.add_argument(
        "--deps-site-packages",
        type=Path,
        default=Path(sysconfig.get_paths()["purelib"]),
        help="site-packages that provides mutmut, pytest, hypothesis... (default: this interpreter's)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="do not run mutmut: rebuild the summary from the existing scratch folder",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep an existing scratch folder and let mutmut continue (it skips mutants already tested)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scratch: Path = args.scratch.resolve()
    if scratch == REPO or REPO in scratch.parents:
        raise SystemExit("error: the scratch folder must be outside the repository")
    modules: list[str] = sorted(set(args.modules))
    if not (args.deps_site_packages / "mutmut").is_dir():
        raise SystemExit(f"error: mutmut is not installed in {args.deps_site_packages}")
    started = dt.datetime.now(dt.UTC)
    copy = scratch / "repo"
    if (args.resume or args.report_only) and (copy / "mutants").is_dir():
        python = scratch / "venv" / "bin" / "python"
    else:
        if scratch.exists():
            shutil.rmtree(scratch)
        scratch.mkdir(parents=True)
        copy = copy_repo(scratch)
        python = make_venv(scratch, args.deps_site_packages.resolve())
        configure(copy, modules, list(args.tests), args.markers)
    env = clean_env(scratch)
    where = python_says(
        python, "import importlib.util as u; print(u.find_spec('rmqspec'))", cwd=scratch, env=env
    )
    if where != "None":
        raise SystemExit(f"error: rmqspec is importable outside mutmut's copy: {where}")
    run_file = scratch / "run.json"
    if args.report_only:
        if not run_file.exists():
            raise SystemExit(f"error: no finished run in {scratch}")
        run = json.loads(run_file.read_text(encoding="utf-8"))
        started = dt.datetime.fromisoformat(run["started_utc"])
        seconds, exit_code = float(run["duration_seconds"]), int(run["mutmut_exit_code"])
    else:
        t0 = time.monotonic()
        exit_code = run_mutmut(python, copy, env, args.nice, args.max_children, scratch / "mutmut-run.log")
        seconds = time.monotonic() - t0
        run = {
            "started_utc": started.isoformat(timespec="seconds"),
            "duration_seconds": round(seconds),
            "mutmut_exit_code": exit_code,
        }
        run_file.write_text(json.dumps(run) + "\n", encoding="utf-8")
    mutants, version = collect_results(python, copy, env, modules)
    if not mutants:
        raise SystemExit(
            f"error: mutmut produced no results (exit {exit_code}); see {scratch}/mutmut-run.log"
        )
    imports = check_imports(scratch, copy, sorted({m.module for m in mutants}))
    add_diffs(python, copy, env, [m for m in mutants if m.status not in KILLED_LIKE + NOT_TESTED])
    summary = summarise(
        mutants,
        modules,
        version=version,
        tests=list(args.tests),
        markers=args.markers,
        seconds=seconds,
        started=started,
        imports=imports,
        exit_code=exit_code,
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    total = summary["total"]
    print(
        f"mutmut {version}: {total['killed_or_timeout']}/{total['tested']} killed ({total['score_percent']}%)"
    )
    for row in summary["modules"]:
        print(f"  {row['module']:<14} {row['killed_or_timeout']:>4}/{row['tested']:<4} {row['by_status']}")
    print(f"not killed, by kind: {summary['not_killed_by_kind']}")
    print(f"summary: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

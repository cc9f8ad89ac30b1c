"""Run CrossHair over the reference model's contracts with a time budget (``make crosshair``).

The contracts are PEP 316 ``pre:`` / ``post:`` conditions in the docstrings of ``reference/``'s pure
decision functions (``reference/semantics.py``). This runner lives in the command-line layer, not in
``reference/``, because it starts a subprocess; the model itself stays free of I/O.

    python -m rmqspec.contracts_check [--budget SECONDS] [--per-condition SECONDS] [FILE ...]

Exit status: 0 when CrossHair finds no counterexample within the budget, 1 when it reports one (each
printed as ``file:line: error: ...``), 2 when it cannot run or the budget runs out.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent / "reference"
DEFAULT_TARGETS = ("semantics.py",)


def run(targets: list[Path], budget: float, per_condition: float) -> int:
    cmd = [
        sys.executable,
        "-m",
        "crosshair",
        "check",
        "--analysis_kind=PEP316",
        f"--per_condition_timeout={per_condition}",
        f"--per_path_timeout={max(1.0, per_condition / 2)}",
        *map(str, targets),
    ]
    print(f"crosshair: checking {', '.join(t.name for t in targets)} (budget {budget:.0f} s)", flush=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget, check=False)
    except subprocess.TimeoutExpired:
        print(f"crosshair: the {budget:.0f} s budget ran out before the analysis finished", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"crosshair: cannot start: {e}", file=sys.stderr)
        return 2
    out = (proc.stdout + proc.stderr).strip()
    if out:
        print(out)
    took = time.perf_counter() - start
    if proc.returncode == 0:
        print(f"crosshair: no counterexample found ({took:.1f} s)")
        return 0
    if "error:" in out:
        print(f"crosshair: contract violation(s) found ({took:.1f} s)", file=sys.stderr)
        return 1
    print(f"crosshair: failed to run (exit {proc.returncode})", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rmqspec.contracts_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "files", nargs="*", type=Path, help="modules to check (default: reference/semantics.py)"
    )
    parser.add_argument("--budget", type=float, default=120.0, help="overall time budget in seconds")
    parser.add_argument("--per-condition", type=float, default=4.0, help="seconds per contract")
    args = parser.parse_args(argv)
    targets = args.files or [REFERENCE / name for name in DEFAULT_TARGETS]
    missing = [t for t in targets if not t.is_file()]
    if missing:
        print(f"crosshair: no such file: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    return run(targets, args.budget, args.per_condition)


if __name__ == "__main__":
    sys.exit(main())

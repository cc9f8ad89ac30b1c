"""``python -m benchmarks [--quick]``: every benchmark, each printing ratios against its same-run baseline."""

from __future__ import annotations

import platform
import sys

from benchmarks import conformance, model_ops


def main() -> None:
    quick = "--quick" in sys.argv
    print(
        f"python {platform.python_version()} on {platform.machine()} {platform.system()}, "
        f"{platform.processor() or 'cpu ?'}"
    )
    model_ops.main(quick)
    conformance.main(quick)


if __name__ == "__main__":
    main()

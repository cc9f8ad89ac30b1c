"""A real broker's clock that the suite can step: libfaketime under the JVM.

A scenario that steps the broker's clock back (``skew``, feature clock-skew: the schedule service's
deliver-clamp, schedule/deliver-clamp) runs on a broker of its own started with libfaketime preloaded.
Its offset from the real clock lives in a file the suite rewrites (``FAKETIME_TIMESTAMP_FILE``, read on
every call to the clock with ``FAKETIME_NO_CACHE``), so a step takes effect at the broker's next reading
of ``System.currentTimeMillis``. The monotonic clock is left alone (``FAKETIME_DONT_FAKE_MONOTONIC``:
the JVM's timed waits use it), and timed waits are not re-timed (``FAKETIME_FORCE_MONOTONIC_FIX=0``:
with it, every ``Thread.sleep`` of JDK 17 under libfaketime 0.9.10 overslept by about 170 ms).

libfaketime is a C library (Debian's ``libfaketime``, ``apt-get install libfaketime``; ``make test``
installs it when run as root); ``RMQSPEC_LIBFAKETIME`` names another build. Without it an ``apache:``
target does not offer clock-skew, and the scenarios that need it are skipped, saying so.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

ENV = "RMQSPEC_LIBFAKETIME"
OFFSET_FILE = "clock-offset"  # in the broker's directory
SEARCHED = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
)


class ClockError(RuntimeError):
    """The broker's clock cannot be stepped (no libfaketime, or a broker started without it)."""


def libfaketime() -> Path | None:
    """The libfaketime library to preload, or None (not Linux, or not installed)."""
    named = os.environ.get(ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise ClockError(f"{ENV}={named}: no such file")
        return path
    if platform.system() != "Linux":
        return None
    for candidate in SEARCHED:
        if Path(candidate).is_file():
            return Path(candidate)
    return None


def offset_text(ms: int) -> str:
    """libfaketime's relative offset for ``ms`` milliseconds: seconds with a sign and three decimals."""
    sign = "-" if ms < 0 else "+"
    whole, frac = divmod(abs(ms), 1000)
    return f"{sign}{whole}.{frac:03d}"


def write_offset(path: Path, ms: int) -> None:
    """Set the broker's clock to the real clock plus ``ms``: the file is replaced whole, so the broker
    never reads half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(offset_text(ms) + "\n", encoding="ascii")
    os.replace(tmp, path)


def environment(library: Path, offset_file: Path) -> dict[str, str]:
    """What the broker's JVM runs with so that its clock reads the offset file."""
    return {
        "LD_PRELOAD": str(library),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
    }

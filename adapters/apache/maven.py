"""Resolve an Apache RocketMQ broker's runtime classpath from Maven Central into rmqspec's cache.

``resolve("4.9.7")`` runs Maven once (``dependency:copy-dependencies`` on our one-dependency pom, with the
version and artifact as properties) and copies the jars into ``<cache>/apache-rocketmq-<v>/lib``. A stamp file
per artifact (``classpath-rocketmq-broker.txt``) lists the jars of that classpath, one name a line; while the
stamp and every jar it names are there, nothing runs Maven again, so a cached version works offline.

The cache is ``$RMQSPEC_CACHE`` when set, else ``$XDG_CACHE_HOME/rmqspec``, else ``~/.cache/rmqspec``.
Maven uses its own local repository (``~/.m2``) as usual.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import attrs

from .versions import ApacheVersion, pinned

RESOURCES = Path(__file__).resolve().parent / "resources"
POM = RESOURCES / "pom.xml"
MAVEN_TIMEOUT_S = 900
# Apache's Java client for the remoting protocol, at the broker's version: the Java-client workload runs on it
CLIENT_ARTIFACT = "rocketmq-client"


class ResolveError(RuntimeError):
    """Maven could not resolve a version (or is missing); the message names the version and the cause."""


def cache_root() -> Path:
    """Where rmqspec keeps resolved versions and brokers' temporary stores."""
    env = os.environ.get("RMQSPEC_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "rmqspec").resolve()


def version_dir(version: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / f"apache-rocketmq-{version}"


@attrs.frozen
class Classpath:
    """The jars of one artifact's runtime classpath, in the stamp's order."""

    version: str
    artifact: str
    jars: tuple[Path, ...]

    def java_arg(self) -> str:
        return os.pathsep.join(str(j) for j in self.jars)


def _stamp(vdir: Path, artifact: str) -> Path:
    return vdir / f"classpath-{artifact}.txt"


def cached(version: str, artifact: str = "rocketmq-broker", cache: Path | None = None) -> Classpath | None:
    """The classpath if it is fully in the cache (its stamp and every jar it lists), else None."""
    vdir = version_dir(version, cache)
    stamp = _stamp(vdir, artifact)
    try:
        names = [n for n in stamp.read_text(encoding="utf-8").splitlines() if n.strip()]
    except OSError:
        return None
    jars = tuple(vdir / "lib" / n for n in names)
    if not jars or not all(j.is_file() for j in jars):
        return None
    return Classpath(version, artifact, jars)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (two processes resolving the same version take turns)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _maven_error(output: str) -> str:
    """The line of Maven's output that says what went wrong, shortened to what a user needs."""
    errors = [ln.removeprefix("[ERROR]").strip() for ln in output.splitlines() if ln.startswith("[ERROR]")]
    errors = [
        e for e in errors if e and not e.startswith(("->", "To see the full", "Re-run Maven", "For more"))
    ]
    text = errors[0] if errors else (output.strip().splitlines() or ["no output"])[-1]
    text = re.sub(r"^Failed to execute goal [^:]+:[^:]+:[^:]+:[^ ]+ \([^)]*\) on project [^:]+: ", "", text)
    return text[:400]


def _run_maven(row: ApacheVersion, artifact: str, out: Path, work: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ResolveError(
            f"cannot resolve Apache RocketMQ {row.version}: Maven (mvn) is not on PATH "
            "(Debian: apt-get install maven)"
        )
    shutil.copyfile(POM, work / "pom.xml")  # Maven may write beside its pom: never into the package
    cmd = [
        mvn,
        "-B",
        "-q",
        "-Dstyle.color=never",
        "-f",
        str(work / "pom.xml"),
        "dependency:copy-dependencies",
        f"-Drocketmq.version={row.version}",
        f"-Drocketmq.artifact={artifact}",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out}",
    ]
    try:
        proc = subprocess.run(
            cmd, cwd=work, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise ResolveError(
            f"cannot resolve org.apache.rocketmq:{artifact}:{row.version}: Maven ran over {MAVEN_TIMEOUT_S} s"
        ) from None
    except OSError as e:
        raise ResolveError(f"cannot run Maven ({mvn}) for Apache RocketMQ {row.version}: {e}") from None
    if proc.returncode != 0:
        raise ResolveError(
            f"cannot resolve org.apache.rocketmq:{artifact}:{row.version} from Maven "
            f"(exit {proc.returncode}): {_maven_error(proc.stdout + proc.stderr)}"
        )


def resolve(
    version: str, artifact: str = "rocketmq-broker", *, cache: Path | None = None, offline: bool = False
) -> Classpath:
    """The classpath of ``artifact`` at ``version``: from the cache, else resolved by Maven into it.

    ``offline``: never run Maven (a ``ResolveError`` if the version is not cached).
    """
    row = pinned(version)
    if artifact not in (*row.artifacts, CLIENT_ARTIFACT):
        raise ResolveError(f"Apache RocketMQ {version} has no {artifact} (it has {', '.join(row.artifacts)})")
    found = cached(version, artifact, cache)
    if found is not None:
        return found
    if offline:
        raise ResolveError(
            f"Apache RocketMQ {version} ({artifact}) is not in the cache {version_dir(version, cache)}; "
            "run `rmqspec broker fetch` (or `make rocketmq`) where Maven Central is reachable"
        )
    vdir = version_dir(version, cache)
    with _locked(vdir / ".lock"):
        found = cached(version, artifact, cache)  # another process may have resolved it meanwhile
        if found is not None:
            return found
        lib = vdir / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"resolve-{artifact}-", dir=vdir) as tmp:
            work = Path(tmp)
            out = work / "jars"
            _run_maven(row, artifact, out, work)
            names = sorted(p.name for p in out.glob("*.jar"))
            if not any(n.startswith(f"{artifact}-{version}") for n in names):
                raise ResolveError(
                    f"Maven resolved org.apache.rocketmq:{artifact}:{version} but {artifact}-{version}.jar "
                    f"is not among the {len(names)} jars it copied"
                )
            for n in names:
                target = lib / n
                if not target.is_file():
                    os.replace(out / n, target)
        stamp = _stamp(vdir, artifact)
        tmp_stamp = stamp.with_suffix(".tmp")
        tmp_stamp.write_text("".join(n + "\n" for n in names), encoding="utf-8")
        os.replace(tmp_stamp, stamp)
    found = cached(version, artifact, cache)
    if found is None:  # pragma: no cover - the stamp was just written
        raise ResolveError(f"Apache RocketMQ {version}: the cache {vdir} lost jars while resolving")
    return found


@attrs.frozen
class Fetched:
    version: str
    classpaths: tuple[Classpath, ...]
    seconds: float
    from_cache: bool


def fetch(version: str, *, cache: Path | None = None) -> Fetched:
    """Resolve every artifact of a pinned version (the broker, and the proxy on 5.x)."""
    row = pinned(version)
    was_cached = all(cached(version, a, cache) is not None for a in row.artifacts)
    t0 = time.perf_counter()
    cps = tuple(resolve(version, a, cache=cache) for a in row.artifacts)
    return Fetched(version, cps, time.perf_counter() - t0, was_cached)

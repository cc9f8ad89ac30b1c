"""A Spark standalone cluster on loopback, for the cluster test and benchmark (issue 15).

``standalone()`` starts one master and ``workers`` workers with the launcher PySpark ships
(``pyspark/bin/spark-class org.apache.spark.deploy.master.Master`` and ``...worker.Worker``: the
``sbin/start-*.sh`` scripts are not in the PyPI package), waits until every worker has registered,
yields the master URL, and stops them all on the way out, whatever happened inside. Their logs go to a
folder (``log_dir``), not to the console.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from .trace_format import TraceError

HOST = "127.0.0.1"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _launch(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stopped with everything it started
        )


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)


def _wait_for(log: Path, text: str, p: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if p.poll() is not None:
            raise TraceError(f"the Spark {what} exited with {p.returncode} (log: {log})")
        time.sleep(0.5)
    raise TraceError(f"the Spark {what} did not start within {timeout:.0f} s (log: {log})")


@contextmanager
def standalone(
    log_dir: Path, *, workers: int = 1, cores: int = 2, memory: str = "2g", timeout: float = 120
) -> Iterator[str]:
    """A master and ``workers`` workers of ``cores`` cores on 127.0.0.1; yields ``spark://HOST:PORT``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=HOST, SPARK_NO_DAEMONIZE="1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    port = free_port()
    url = f"spark://{HOST}:{port}"
    with ExitStack() as stack:
        master_log = log_dir / "master.log"
        master = _launch(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                HOST,
                "--port",
                str(port),
                "--webui-port",
                "0",
            ],
            master_log,
            env,
        )
        stack.callback(_stop, master)
        _wait_for(master_log, "I have been elected leader", master, "master", timeout)
        for i in range(workers):
            log = log_dir / f"worker-{i}.log"
            worker = _launch(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--host",
                    HOST,
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    "0",
                    "--work-dir",
                    str(log_dir / f"work-{i}"),
                ],
                log,
                env,
            )
            stack.callback(_stop, worker)
            _wait_for(log, "Successfully registered with master", worker, f"worker {i}", timeout)
        yield url

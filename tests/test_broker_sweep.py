"""``sweep`` (run by every broker start and `rmqspec broker status`) cleans up after crashes, and never
takes what a live process still manages: two suites at once once saw one's restarted broker lose its
namespace, and its address go to the other suite's new broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqspec.adapters.apache import launcher, netns
from rmqspec.adapters.apache.launcher import STATE_FILE, BrokerState, _proc_start


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _register(cache: Path, d: Path, owner: int | None, ns: str | None = None) -> BrokerState:
    pid = _dead_pid()
    state = BrokerState(
        version="4.9.7",
        pid=pid,
        pid_start=None,
        host="127.0.0.1",
        port=10911,
        netns=ns,
        dir=str(d),
        owner_pid=owner,
        owner_start=None if owner is None else _proc_start(owner),
        started=time.time(),
        temporary=True,
    )
    d.mkdir(parents=True, exist_ok=True)
    (d / STATE_FILE).write_text(json.dumps(state.to_json()))
    reg = cache / "running"
    reg.mkdir(parents=True, exist_ok=True)
    (reg / f"{pid}.json").write_text(json.dumps({"dir": str(d)}))
    return state


def test_a_stopped_broker_whose_owner_lives_is_left_to_its_owner(tmp_path: Path) -> None:
    """Between a restart's stop and its unregistering, the broker is gone but its owner (this process)
    lives: nothing of it is touched."""
    state = _register(tmp_path / "cache", tmp_path / "b", owner=os.getpid())
    assert not [x for x in launcher.sweep(tmp_path / "cache") if str(state.pid) in x]
    assert (tmp_path / "b" / STATE_FILE).exists()
    assert (tmp_path / "cache" / "running" / f"{state.pid}.json").exists()


def test_a_stopped_broker_whose_owner_is_gone_is_cleaned_up(tmp_path: Path) -> None:
    state = _register(tmp_path / "cache", tmp_path / "b", owner=_dead_pid())
    done = launcher.sweep(tmp_path / "cache")
    assert any(f"pid {state.pid}, gone" in x for x in done), done
    assert not (tmp_path / "b" / STATE_FILE).exists()
    assert not (tmp_path / "cache" / "running" / f"{state.pid}.json").exists()


@pytest.mark.skipif(netns.unavailable() is not None, reason="network namespaces need root on Linux")
def test_a_held_namespace_survives_the_cleanup_of_its_gone_broker(tmp_path: Path) -> None:
    """A broker gone, its owner gone from the registry's view (a detached start's record), but the
    namespace still held by a live process (a restart in flight): the namespace stays."""
    ns = netns.create()
    hold = netns.Hold(ns)
    try:
        _register(tmp_path / "cache", tmp_path / "b", owner=None, ns=ns.name)
        launcher.sweep(tmp_path / "cache")
        assert netns.exists(ns)
    finally:
        hold.release()
        netns.delete(ns)
    assert not netns.exists(ns)

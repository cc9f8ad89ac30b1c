"""The wire probe: clean on the reference served over TCP, and each wire fault named by its own rule."""

from __future__ import annotations

import pytest

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.adapters.remoting.server import BackgroundServer
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.wireprobe import PROBE_CONFIG, FaultProxy, WireFault, probe
from rmqspec.reference.model import Model


def test_the_served_reference_gives_the_probe_nothing_to_find() -> None:
    with BackgroundServer(WallClockTarget(Model(PROBE_CONFIG))) as (host, port):
        direct = probe(host, port)
        with FaultProxy(host, port, WireFault()) as (proxy_host, proxy_port):
            through = probe(proxy_host, proxy_port)
    for result in (direct, through):
        assert result.findings == ()
        assert result.exchanges == 13 and result.broker_requests >= 1


@pytest.mark.parametrize("name", ["opaque-not-echoed", "pull-without-max-offset", "unknow-answered"])
def test_a_wire_fault_is_found_by_its_rule(name: str) -> None:
    m = MUTANTS[name]
    assert m.wire is not None
    served = BackgroundServer(WallClockTarget(Model(PROBE_CONFIG)))
    with served as (host, port), FaultProxy(host, port, m.wire) as (proxy_host, proxy_port):
        result = probe(proxy_host, proxy_port)
    assert result.rules == (m.rule,), [f.message for f in result.findings]


def test_nothing_listening_is_a_finding_not_an_exception() -> None:
    result = probe("127.0.0.1", 1, timeout_s=0.5)
    assert result.exchanges == 0 and result.findings[0].rule == "wire/frame"

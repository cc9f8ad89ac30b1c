"""The wire probe: clean on the reference served over TCP, and each wire fault named by its own rule."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.adapters.remoting.server import BackgroundServer
from rmqspec.conformance.faultgen import answer_frame, partial_upper_camel
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.wirecheck import WireFinding, parse_frame
from rmqspec.conformance.wireprobe import DECODE_TRIES, PROBE_CONFIG, FaultProxy, WireFault, probe
from rmqspec.reference.model import Model


def test_the_served_reference_gives_the_probe_nothing_to_find() -> None:
    with BackgroundServer(WallClockTarget(Model(PROBE_CONFIG))) as (host, port):
        direct = probe(host, port)
        with FaultProxy(host, port, WireFault()) as (proxy_host, proxy_port):
            through = probe(proxy_host, proxy_port)
    for result in (direct, through):
        assert result.findings == ()
        # 13 exchanges judged, and DECODE_TRIES sends in each of RocketMQ's two spellings (decoding)
        assert result.exchanges == 13 + 2 * DECODE_TRIES and result.broker_requests >= 1


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


def _probe_through(fault: object) -> list[str]:
    served = BackgroundServer(WallClockTarget(Model(PROBE_CONFIG)))
    with served as (host, port), FaultProxy(host, port, fault) as (proxy_host, proxy_port):  # type: ignore[arg-type]
        result = probe(proxy_host, proxy_port)
    return [f.message for f in result.findings if f.rule == "wire/send-headers"]


def test_order_dependent_header_decoding_is_found_though_no_send_got_system_error() -> None:
    """Issue 25: a broker that reads some keys only in UpperCamel and stops at the first key it does not
    know answers a send TOPIC_NOT_EXIST, never SYSTEM_ERROR; the probe names the header all the same."""
    said = _probe_through(partial_upper_camel(random.Random(3)))
    assert len(said) == 1, said
    assert "does not read request header keys" in said[0]
    assert "SEND_MESSAGE_V2 (keys a, b, c, ...)" in said[0] or "decoding depends" in said[0]


def test_a_broker_that_reads_only_the_long_keys_is_named_with_the_spelling_it_refuses() -> None:
    def to_broker(frame: bytes) -> tuple[bytes | None, bytes | None]:
        parsed = parse_frame(frame)
        if isinstance(parsed, WireFinding) or parsed.flag & 1 or parsed.header.get("code") != 310:
            return frame, None
        return None, answer_frame(dict(parsed.header), 17, "topic[] not exist, apply first please!")

    said = _probe_through(WireFault(to_broker=to_broker))
    assert len(said) == 1 and "SEND_MESSAGE_V2 (keys a, b, c, ...) was answered 17" in said[0], said


def test_a_busy_answer_is_no_evidence_about_decoding() -> None:
    """A loaded broker may answer one send SYSTEM_BUSY and the next SUCCESS: not a header finding."""
    seen = [0]

    def to_broker(frame: bytes) -> tuple[bytes | None, bytes | None]:
        parsed = parse_frame(frame)
        if isinstance(parsed, WireFinding) or parsed.flag & 1 or parsed.header.get("code") not in (10, 310):
            return frame, None
        seen[0] += 1
        if seen[0] % 3:
            return frame, None
        return None, answer_frame(dict(parsed.header), 2, "[PCBUSY_CLEAN_QUEUE]broker busy")

    assert _probe_through(WireFault(to_broker=to_broker)) == []


def _closing(when: Callable[[dict[str, Any]], bool]) -> Callable[[], WireFault]:
    """A broker stand-in's gate that closes the connection on a request frame for which ``when(header)``
    holds, as a strict broker does (the proxy drops both sides when its rewrite raises OSError)."""

    def to_broker(frame: bytes) -> tuple[bytes | None, bytes | None]:
        parsed = parse_frame(frame)
        if isinstance(parsed, WireFinding) or when(parsed.header):
            raise OSError("closed by the strict broker")
        return frame, None

    return lambda: WireFault(to_broker=to_broker)


# The frame fields Apache's Java client writes in every request header (RemotingSerializable.encode of
# RemotingCommand at rocketmq-all-4.9.7: code, extFields, flag, language, opaque, serializeTypeCurrentRPC,
# version; remark only when set).
JAVA_HEADER = {"code", "extFields", "flag", "language", "opaque", "serializeTypeCurrentRPC", "version"}


def test_a_strict_broker_that_closes_on_a_header_lacking_a_java_field_sees_none() -> None:
    strict = _closing(lambda h: not set(h) >= JAVA_HEADER or h.get("serializeTypeCurrentRPC") != "JSON")
    served = BackgroundServer(WallClockTarget(Model(PROBE_CONFIG)))
    with served as (host, port), FaultProxy(host, port, strict) as (proxy_host, proxy_port):
        result = probe(proxy_host, proxy_port)
    assert result.findings == () and result.stopped is None
    assert result.exchanges == 13 + 2 * DECODE_TRIES and result.broker_requests >= 1


def test_a_closed_connection_is_a_finding_that_names_the_frame_and_the_probe_goes_on() -> None:
    served = BackgroundServer(WallClockTarget(Model(PROBE_CONFIG)))
    with (
        served as (host, port),
        FaultProxy(host, port, _closing(lambda h: h.get("code") == 12)) as (proxy_host, proxy_port),
    ):
        result = probe(proxy_host, proxy_port)
    assert result.stopped is None
    (finding,) = result.findings
    assert finding.rule == "wire/request-response" and finding.code == 12
    assert "closed the connection" in finding.message and "no answer" not in finding.message
    assert finding.frame is not None and finding.frame.startswith('{"code":12,')
    # The exchanges after it were made over a new connection: the check of the half message came.
    assert result.exchanges == 13 + 2 * DECODE_TRIES and result.broker_requests >= 1


def test_a_broker_that_closes_every_connection_is_judged_by_that_finding_not_left_unjudged() -> None:
    served = BackgroundServer(WallClockTarget(Model(PROBE_CONFIG)))
    with served as (host, port), FaultProxy(host, port, _closing(lambda h: True)) as (proxy_host, proxy_port):
        started = time.monotonic()
        result = probe(proxy_host, proxy_port)
    assert result.stopped is None and time.monotonic() - started < 3
    (finding,) = result.findings
    assert finding.code == 34 and "closed the connection" in finding.message
    assert finding.frame is not None and '"code":34' in finding.frame

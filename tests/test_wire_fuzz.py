"""Fuzzing the remoting decoders (facts §8): whatever comes in, only ``ProtocolError`` comes out, and soon.

Arbitrary bytes, JSON headers of any shape and mutated copies of the 60 recorded frames (and of their stored
records and batch bodies) go into ``decode_frame``, ``FrameDecoder``, ``decode_records``,
``decode_batch_body`` and every response parser. The default runs are short; the ``slow`` ones run many more
examples. ``pytest-timeout`` bounds every test, so a decoder that hangs fails instead of blocking.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqspec.adapters.remoting.codec import (
    BatchMessage,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    decode_batch_body,
    decode_frame,
    decode_records,
    encode_batch_body,
    encode_frame,
    encode_record,
    make_record,
    parse_check_transaction_request,
    parse_max_offset_response,
    parse_offset_msg_id,
    parse_pull_response,
    parse_query_message_response,
    parse_reply,
    parse_route,
    parse_route_response,
    parse_send_response,
    parse_view_message_response,
)

# The 4.9.4 recording (tests/vectors/README-4.9.4.md), kept in the repo.
VECTORS = Path(__file__).resolve().parent / "vectors" / "rocketmq-4.9.4.jsonl"
ROWS: list[dict[str, Any]] = [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]


def _synthetic_frames() -> list[bytes]:
    """Frames that exist without the vectors: JSON and ROCKETMQ headers, a record body, a batch body."""
    rec = make_record(topic="T", body=b"hello", properties={"UNIQ_KEY": "K"}, sys_flag=1)
    v6 = make_record(topic="T6", body=b"x", born_host=("::1", 5), store_host=("fe80::1", 6))
    cmds = [
        RemotingCommand(11, opaque=1, ext_fields={"topic": "T", "queueId": "0"}),
        RemotingCommand(
            0, opaque=1, flag=1, remark="FOUND", ext_fields={"nextBeginOffset": "2"}, body=encode_record(rec)
        ),
        RemotingCommand(0, opaque=2, flag=1, body=encode_record(v6) + encode_record(rec)),
        RemotingCommand(
            320, opaque=3, ext_fields={"a": "PG"}, body=encode_batch_body([BatchMessage(b"b", "K\x01v")])
        ),
    ]
    return [encode_frame(c) for c in cmds] + [
        encode_frame(attrs.evolve(c, serialize_type_current_rpc="ROCKETMQ")) for c in cmds
    ]


FRAMES = [bytes.fromhex(r["frame_hex"]) for r in ROWS] + _synthetic_frames()
FRAMES += [
    encode_frame(attrs.evolve(decode_frame(f), serialize_type_current_rpc="ROCKETMQ")) for f in FRAMES[:60]
]


def _holds_records(body: bytes) -> bool:
    try:
        return bool(decode_records(body))
    except ProtocolError:
        return False


RECORD_BODIES = [decode_frame(f).body for f in FRAMES if _holds_records(decode_frame(f).body)]
BATCH_BODIES = [decode_frame(f).body for f in FRAMES if decode_frame(f).code == 320]

PARSERS: list[Callable[[RemotingCommand], object]] = [
    parse_send_response,
    parse_pull_response,
    parse_reply,
    parse_max_offset_response,
    parse_view_message_response,
    parse_query_message_response,
    parse_check_transaction_request,
    parse_route_response,
]


def only_protocol_errors(fn: Callable[[Any], Any], arg: Any) -> Any:
    """``fn(arg)``, with a ``ProtocolError`` turned into None; any other exception fails the test."""
    try:
        return fn(arg)
    except ProtocolError as e:
        assert str(e)  # names the problem
        return None


def check_frame_input(data: bytes, chunk: int = 1) -> None:
    cmd = only_protocol_errors(decode_frame, data)
    if cmd is not None:
        for parse in PARSERS:
            only_protocol_errors(parse, cmd)
        only_protocol_errors(decode_records, cmd.body)
        only_protocol_errors(decode_batch_body, cmd.body)
        assert decode_frame(encode_frame(cmd)) == cmd  # what decodes re-encodes to the same command
    dec = FrameDecoder()

    def stream(d: bytes) -> list[RemotingCommand]:
        got = [c for i in range(0, len(d), chunk) for c in dec.feed(d[i : i + chunk])]
        dec.finish()
        return got

    got = only_protocol_errors(stream, data)
    if cmd is not None:
        assert got == [cmd]


def check_body_input(data: bytes) -> None:
    records = only_protocol_errors(decode_records, data)
    if records is not None:  # what decodes re-encodes (CRC and size recomputed)
        again = decode_records(b"".join(encode_record(r) for r in records))
        assert [attrs.evolve(r, body_crc=0, total_size=0) for r in again] == [
            attrs.evolve(r, body_crc=0, total_size=0) for r in records
        ]
    only_protocol_errors(decode_batch_body, data)
    only_protocol_errors(parse_route, data)


@st.composite
def mutated(draw: st.DrawFn, sources: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(sources)))
    for _ in range(draw(st.integers(1, 5))):
        if not data:
            data += draw(st.binary(min_size=1, max_size=8))
            continue
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "set", "delete", "insert", "truncate", "int32", "int16"]))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[i] = draw(st.integers(0, 255))
        elif op == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "truncate":
            del data[i:]
        else:
            edge = [
                0,
                1,
                3,
                4,
                5,
                8,
                91,
                127,
                128,
                255,
                256,
                32767,
                32768,
                65535,
                2**24 - 1,
                2**24,
                2**31 - 1,
            ]
            value = draw(st.sampled_from(edge + [-v for v in edge]))
            data[i : i + 4] = (
                struct.pack(">i", max(-(2**31), min(value, 2**31 - 1)))
                if op == "int32"
                else struct.pack(">h", max(-(2**15), min(value, 2**15 - 1)))
            )
    return bytes(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
header_keys = st.sampled_from(
    ["code", "flag", "opaque", "version", "language", "remark", "extFields", "serializeTypeCurrentRPC"]
)


@st.composite
def json_header_frames(draw: st.DrawFn) -> bytes:
    """A well-formed frame around a JSON header of any shape: known keys with values of any type."""
    header = draw(st.dictionaries(header_keys, json_values, max_size=8) | json_values)
    if isinstance(header, dict) and draw(st.booleans()):
        header["code"] = draw(st.integers(-(2**31), 2**31 - 1))
    raw = json.dumps(header).encode()
    body = draw(st.sampled_from([b"", *RECORD_BODIES[:3]]))
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- fast default runs ---------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@FAST
@given(st.binary(max_size=300), st.integers(1, 64))
def test_arbitrary_bytes(data: bytes, chunk: int) -> None:
    check_frame_input(data, chunk)
    check_body_input(data)
    only_protocol_errors(parse_offset_msg_id, data.decode("latin-1"))


@pytest.mark.timeout(120)
@FAST
@given(mutated(FRAMES), st.integers(1, 64))
def test_mutated_frames(data: bytes, chunk: int) -> None:
    check_frame_input(data, chunk)


@pytest.mark.timeout(120)
@FAST
@given(mutated(RECORD_BODIES + BATCH_BODIES))
def test_mutated_record_and_batch_bodies(data: bytes) -> None:
    check_body_input(data)


@pytest.mark.timeout(120)
@FAST
@given(json_header_frames())
def test_json_headers_of_any_shape(data: bytes) -> None:
    check_frame_input(data, 4096)


@pytest.mark.timeout(120)
def test_every_truncation_of_every_frame() -> None:
    """Deterministic: each non-empty proper prefix of each frame is an error for decode_frame and at finish()."""
    for f in FRAMES:
        for n in range(1, len(f)):
            with pytest.raises(ProtocolError):
                decode_frame(f[:n])
            dec = FrameDecoder()
            assert dec.feed(f[:n]) == []
            with pytest.raises(ProtocolError):
                dec.finish()


@pytest.mark.timeout(120)
def test_every_truncation_of_every_record_body() -> None:
    """A cut at a record boundary gives the records before it; any other cut is an error."""
    for body in RECORD_BODIES:
        records = decode_records(body)
        bounds = {sum(r.total_size for r in records[:i]): i for i in range(len(records) + 1)}
        for n in range(len(body)):
            if n in bounds:
                assert decode_records(body[:n]) == records[: bounds[n]]
            else:
                with pytest.raises(ProtocolError):
                    decode_records(body[:n])


@pytest.mark.timeout(120)
def test_a_stream_of_all_frames_one_byte_at_a_time() -> None:
    stream = b"".join(FRAMES)
    dec = FrameDecoder()
    got = [c for i in range(len(stream)) for c in dec.feed(stream[i : i + 1])]
    dec.finish()
    assert [encode_frame(c) for c in got] == FRAMES


def test_the_fuzz_sources_are_not_empty() -> None:
    assert len(FRAMES) >= 8 and RECORD_BODIES and BATCH_BODIES
    assert len(FRAMES) == 60 + 8 + 60 and len(RECORD_BODIES) >= 11


# --- long runs ----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
@SLOW
@given(st.binary(max_size=2000), st.integers(1, 512))
def test_arbitrary_bytes_long(data: bytes, chunk: int) -> None:
    check_frame_input(data, chunk)
    check_body_input(data)


@pytest.mark.slow
@pytest.mark.timeout(900)
@SLOW
@given(mutated(FRAMES), st.integers(1, 512))
def test_mutated_frames_long(data: bytes, chunk: int) -> None:
    check_frame_input(data, chunk)


@pytest.mark.slow
@pytest.mark.timeout(900)
@SLOW
@given(mutated(RECORD_BODIES + BATCH_BODIES))
def test_mutated_record_and_batch_bodies_long(data: bytes) -> None:
    check_body_input(data)


@pytest.mark.slow
@pytest.mark.timeout(900)
@SLOW
@given(json_header_frames())
def test_json_headers_of_any_shape_long(data: bytes) -> None:
    check_frame_input(data, 4096)

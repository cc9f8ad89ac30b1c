"""The independent wire checker (conformance/wirecheck.py): clean on the real 4.9.4 frames and on what
``rmqspec serve`` answers, and each kind of damage is named by its rule."""

from __future__ import annotations

import asyncio
import json
import struct
import time
import zlib
from pathlib import Path
from typing import Any

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.adapters.remoting.codec import FrameDecoder, RemotingCommand, encode_frame, heartbeat_body
from rmqspec.adapters.remoting.server import Server
from rmqspec.conformance.wirecheck import (
    WireFinding,
    check_broker_request,
    check_exchange,
    check_records,
    parse_frame,
)
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

# The 4.9.4 recording (tests/vectors/README-4.9.4.md), kept in the repo.
VECTORS = Path(__file__).resolve().parent / "vectors" / "rocketmq-4.9.4.jsonl"


def _frames() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for line in VECTORS.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        out[(d["case"], d["direction"])] = d
    return out


def _raw(d: dict[str, Any]) -> bytes:
    return bytes.fromhex(d["frame_hex"]) if "frame_hex" in d else _encode(d)


def _encode(d: dict[str, Any]) -> bytes:
    header = json.dumps(d["header"], separators=(",", ":")).encode()
    body = bytes.fromhex(d.get("body_hex", ""))
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def _frame(
    code: int, *, opaque: int = 1, flag: int = 0, ext: dict[str, str] | None = None, body: bytes = b""
) -> bytes:
    header: dict[str, Any] = {
        "code": code,
        "language": "JAVA",
        "version": 401,
        "opaque": opaque,
        "flag": flag,
    }
    if ext is not None:
        header["extFields"] = ext
    h = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(h) + len(body), len(h)) + h + body


def test_every_recorded_exchange_is_clean() -> None:
    frames = _frames()
    cases = sorted({c for c, _ in frames})
    checked = 0
    for case in cases:
        if (case, "broker-request") in frames:
            assert check_broker_request(_raw(frames[(case, "broker-request")])) == [], case
            checked += 1
        if (case, "request") in frames:
            resp = frames.get((case, "response"))
            assert (
                check_exchange(_raw(frames[(case, "request")]), None if resp is None else _raw(resp)) == []
            ), case
            checked += 1
    assert checked >= 30


def test_served_answers_are_clean_and_a_check_request_arrives() -> None:
    """Raw frames to ``Server`` over TCP; every answer, and the broker's own check request, judged."""
    cfg = BrokerConfig(transaction_timeout_ms=100, transaction_check_interval_ms=200)

    async def main() -> list[tuple[bytes, bytes | None]]:
        server = Server(WallClockTarget(Model(cfg)), tick_ms=10)
        host, port = await server.start()
        reader, writer = await asyncio.open_connection(host, port)
        dec = FrameDecoder()
        got: list[RemotingCommand] = []
        pairs: list[tuple[bytes, bytes | None]] = []

        async def ask(cmd: RemotingCommand, answered: bool = True) -> bytes | None:
            raw = encode_frame(cmd)
            writer.write(raw)
            await writer.drain()
            if not answered:
                await asyncio.sleep(0.05)
                pairs.append((raw, None))
                return None
            while not any(c.opaque == cmd.opaque and c.is_response for c in got):
                try:
                    got.extend(dec.feed(await asyncio.wait_for(reader.read(65536), 5)))
                except TimeoutError:
                    raise AssertionError(
                        f"no answer to request code {cmd.code} (opaque {cmd.opaque})"
                    ) from None
            answer = next(c for c in got if c.opaque == cmd.opaque and c.is_response)
            pairs.append((raw, encode_frame(answer)))
            return encode_frame(answer)

        props = "UNIQ_KEY\x01" + "A" * 32 + "\x02WAIT\x01true\x02"
        send = {
            "a": "PG",
            "b": "T",
            "c": "TBW102",
            "d": "4",
            "e": "0",
            "f": "0",
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": props,
        }
        await ask(RemotingCommand(34, opaque=1, body=heartbeat_body("c1", ["PG"])))
        await ask(RemotingCommand(310, opaque=2, ext_fields=send, body=b"hello"))
        pull = {"consumerGroup": "CG", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32"}
        await ask(RemotingCommand(11, opaque=3, ext_fields=pull))
        await ask(RemotingCommand(30, opaque=4, ext_fields={"topic": "T", "queueId": "0"}))
        await ask(RemotingCommand(999, opaque=5))
        half = dict(send, f="4", i="PGROUP\x01PG\x02TRAN_MSG\x01true\x02UNIQ_KEY\x01" + "B" * 32 + "\x02")
        await ask(RemotingCommand(310, opaque=6, ext_fields=half, body=b"t"))
        unknow = {"producerGroup": "PG", "tranStateTableOffset": "0", "commitLogOffset": "0"}
        await ask(
            RemotingCommand(37, opaque=7, ext_fields=dict(unknow, commitOrRollback="0")), answered=False
        )
        deadline = asyncio.get_running_loop().time() + 5
        while not any(c.code == 39 for c in got) and asyncio.get_running_loop().time() < deadline:
            got.extend(dec.feed(await asyncio.wait_for(reader.read(65536), 5)))
        checks = [encode_frame(c) for c in got if c.code == 39]
        pairs.append((b"", checks[0] if checks else None))
        writer.close()
        await server.close()
        return pairs

    pairs = asyncio.run(main())
    *exchanges, (_, check) = pairs
    for request, response in exchanges:
        assert check_exchange(request, response) == []
    assert check is not None, "no CHECK_TRANSACTION_STATE arrived"
    assert check_broker_request(check) == []


def test_damage_is_named_by_its_rule() -> None:
    req = _frame(30, opaque=7, ext={"topic": "T", "queueId": "0"})
    ok = _frame(0, opaque=7, flag=1, ext={"offset": "1"})
    assert check_exchange(req, ok) == []
    assert [f.rule for f in check_exchange(req[:-1], ok)] == ["wire/frame"]
    assert [f.rule for f in check_exchange(req, _frame(0, opaque=8, flag=1))] == ["wire/request-response"]
    assert [f.rule for f in check_exchange(req, _frame(0, opaque=7, flag=0))] == ["wire/request-response"]
    assert [f.rule for f in check_exchange(_frame(4242), _frame(0, flag=1))] == ["wire/request-response"]
    unknow = _frame(
        37,
        ext={
            "producerGroup": "PG",
            "tranStateTableOffset": "0",
            "commitLogOffset": "0",
            "commitOrRollback": "0",
        },
    )
    assert [f.rule for f in check_exchange(unknow, _frame(0, flag=1))] == ["wire/end-transaction"]
    assert check_exchange(unknow, None) == []
    send = _frame(310, ext={k: "0" for k in "abcdefg"})
    bad_id = _frame(0, flag=1, ext={"msgId": "7f00", "queueId": "0", "queueOffset": "0"})
    assert [f.rule for f in check_exchange(send, bad_id)] == ["wire/offset-msg-id"]
    assert parse_frame(b"\x00\x00\x00\x04\x01\x00\x00\x00") == WireFinding(
        "wire/frame", "serialize type 1: only JSON (0) is judged here"
    )
    assert {f.rule for f in check_broker_request(_frame(39, flag=0))} >= {"wire/check-request"}


def test_record_damage() -> None:
    body = b"hello"
    topic = b"T"
    props = b"UNIQ_KEY\x01K\x02"
    fixed = struct.pack(">iiiiiqqiq", 0, -626843481, zlib.crc32(body) & 0x7FFFFFFF, 0, 0, 0, 0, 0, 0)
    rest = (
        b"\x7f\x00\x00\x01"
        + struct.pack(">i", 1)
        + struct.pack(">q", 0)
        + b"\x7f\x00\x00\x01"
        + struct.pack(">i", 2)
    )
    rest += struct.pack(">iq", 0, 0) + struct.pack(">i", len(body)) + body + bytes([len(topic)]) + topic
    rest += struct.pack(">h", len(props)) + props
    rec = fixed + rest
    rec = struct.pack(">i", len(rec)) + rec[4:]
    assert check_records(rec, "x") == []
    broken_crc = rec[:8] + struct.pack(">i", 1) + rec[12:]
    assert [f.rule for f in check_records(broken_crc, "x")] == ["wire/record-layout"]
    assert [f.rule for f in check_records(rec + b"\x00", "x")] == ["wire/record-layout"]
    assert [f.rule for f in check_records(struct.pack(">i", 10_000) + rec[4:], "x")] == ["wire/record-layout"]

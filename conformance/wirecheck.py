"""Judging a target's raw frames against the wire rules (spec/wire.md), independently of the codec.

The remoting adapter decodes what a broker sends with ``adapters/remoting/codec.py``; a bug shared by
that codec and a broker would go unseen if the codec also judged the bytes. This module is a second,
deliberately small decoder that only checks: give it the bytes of a request and of the answer (or of a
request the broker started) and it returns the findings, each naming the rule it breaks. Nothing here
raises on bad input: a malformed frame is a finding.

Usage: ``check_exchange(request_bytes, response_bytes_or_None)`` and ``check_broker_request(bytes)``.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from typing import Any

import attrs

from rmqspec.reference.javanum import parse_int
from rmqspec.reference.properties import decode_properties

_OFFSET_ID = re.compile(r"[0-9A-F]{32}|[0-9A-F]{56}")
_MAGICS = {-626843481: 1, -626843477: 2}  # MESSAGE_MAGIC_CODE and its V2 (2-byte topic length)
SEND_CODES = frozenset({10, 310, 320})
_SEND_LONG = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag")
_SEND_SHORT = ("a", "b", "c", "d", "e", "f", "g")
_PULL_FIELDS = ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset")
_CHECK_FIELDS = ("tranStateTableOffset", "commitLogOffset", "msgId", "transactionId", "offsetMsgId")
_END_TX_FIELDS = ("producerGroup", "tranStateTableOffset", "commitLogOffset", "commitOrRollback")
_KNOWN = frozenset({10, 11, 12, 30, 33, 34, 35, 36, 37, 310, 320})


@attrs.frozen
class WireFinding:
    rule: str
    message: str
    code: int | None = None  # the request code of the exchange it was found on (39: the broker's check)
    frame: str | None = None  # the offending frame as received (``show``)


@attrs.frozen
class Frame:
    header: dict[str, Any]
    body: bytes

    @property
    def ext(self) -> dict[str, str]:
        ext = self.header.get("extFields") or {}
        return {str(k): str(v) for k, v in ext.items()} if isinstance(ext, dict) else {}

    @property
    def flag(self) -> int:
        return int(self.header.get("flag", 0))


def parse_frame(raw: bytes) -> Frame | WireFinding:
    """One frame (JSON header) or the finding that says why it is not one. rule: wire/frame"""
    if len(raw) < 8:
        return WireFinding("wire/frame", f"a frame is at least 8 bytes, got {len(raw)}")
    (length, mark) = struct.unpack(">ii", raw[:8])
    if length != len(raw) - 4:
        return WireFinding("wire/frame", f"length prefix {length}, but {len(raw) - 4} bytes follow it")
    kind, header_len = (mark >> 24) & 0xFF, mark & 0xFFFFFF
    if kind != 0:
        return WireFinding("wire/frame", f"serialize type {kind}: only JSON (0) is judged here")
    if 8 + header_len > len(raw):
        return WireFinding("wire/frame", f"header length {header_len} runs past the frame")
    try:
        header = json.loads(raw[8 : 8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return WireFinding("wire/frame", f"the header is not JSON: {e}")
    if not isinstance(header, dict):
        return WireFinding("wire/frame", "the header is not a JSON object")
    for key in ("code", "opaque", "flag"):
        if not isinstance(header.get(key), int):
            return WireFinding("wire/frame", f"the header's {key!r} is missing or not a number")
    ext = header.get("extFields")
    if ext is not None and not (isinstance(ext, dict) and all(isinstance(v, str) for v in ext.values())):
        return WireFinding("wire/frame", "extFields is not an object of strings")
    return Frame(header, raw[8 + header_len :])


def show(raw: bytes | None) -> str | None:
    """A frame as a report shows it: its JSON header and its body's length, or the first bytes in hex."""
    if raw is None:
        return None
    f = parse_frame(raw)
    if isinstance(f, WireFinding):
        return f"{len(raw)} bytes: {raw[:64].hex()}{'…' if len(raw) > 64 else ''}"
    header = json.dumps(f.header, ensure_ascii=False, separators=(",", ":"))
    return f"{header} + body of {len(f.body)} bytes" if f.body else f"{header} (no body)"


def check_records(body: bytes, where: str) -> list[WireFinding]:
    """Walk concatenated stored records. rule: wire/record-layout, wire/offset-msg-id"""
    out: list[WireFinding] = []
    pos = 0
    n = 0
    while pos < len(body):
        n += 1
        rule = "wire/record-layout"
        if len(body) - pos < 4:
            return [*out, WireFinding(rule, f"{where}: record {n}: {len(body) - pos} stray bytes")]
        total = struct.unpack_from(">i", body, pos)[0]
        if total < 91 or pos + total > len(body):
            return [*out, WireFinding(rule, f"{where}: record {n}: TOTALSIZE {total} does not fit the body")]
        rec = body[pos : pos + total]
        magic = struct.unpack_from(">i", rec, 4)[0]
        if magic not in _MAGICS:
            out.append(WireFinding(rule, f"{where}: record {n}: MAGIC {magic:#x}"))
            pos += total
            continue
        crc, sys_flag = struct.unpack_from(">i", rec, 8)[0], struct.unpack_from(">i", rec, 36)[0]
        born_len = 20 if sys_flag & 0x10 else 8
        store_len = 20 if sys_flag & 0x20 else 8
        p = 40 + 8 + born_len + 8 + store_len + 4 + 8
        try:
            body_len = struct.unpack_from(">i", rec, p)[0]
            stored = rec[p + 4 : p + 4 + body_len]
            p += 4 + body_len
            if _MAGICS[magic] == 2:
                topic_len = struct.unpack_from(">h", rec, p)[0]
                p += 2
            else:
                topic_len = rec[p]
                p += 1
            p += topic_len
            props_len = struct.unpack_from(">h", rec, p)[0]
            props = rec[p + 2 : p + 2 + props_len].decode("utf-8")
            p += 2 + props_len
        except (struct.error, IndexError, UnicodeDecodeError) as e:
            out.append(WireFinding(rule, f"{where}: record {n}: fields run past TOTALSIZE ({e})"))
            pos += total
            continue
        if p != total:
            out.append(WireFinding(rule, f"{where}: record {n}: fields end at {p}, TOTALSIZE is {total}"))
        if crc != zlib.crc32(stored) & 0x7FFFFFFF:
            out.append(
                WireFinding(rule, f"{where}: record {n}: BODYCRC {crc} is not crc32(body) & 0x7FFFFFFF")
            )
        if props and not decode_properties(props):
            out.append(
                WireFinding(rule, f"{where}: record {n}: properties are not NAME\\x01VALUE\\x02 pairs")
            )
        pos += total
    return out


def _offset_ids(value: str | None, where: str) -> list[WireFinding]:
    """rule: wire/offset-msg-id"""
    if not value:
        return [WireFinding("wire/send-headers", f"{where}: {'no' if value is None else 'an empty'} msgId")]
    return [
        WireFinding("wire/offset-msg-id", f"{where}: msgId {m!r} is not 32 or 56 upper-case hex digits")
        for m in value.split(",")
        if not _OFFSET_ID.fullmatch(m)
    ]


def _end_tx_type(ext: dict[str, str]) -> int | None:
    """commitOrRollback as the broker reads it (Integer.parseInt: "00" is UNKNOW too); None: unreadable."""
    return parse_int(ext.get("commitOrRollback"))


def check_exchange(request: bytes, response: bytes | None) -> list[WireFinding]:
    """The findings on one request and its answer (None: none arrived), each with the request code and
    the answer as received. rule: wire/request-response"""
    req = parse_frame(request)
    if isinstance(req, WireFinding):
        return [WireFinding(req.rule, f"request: {req.message}")]
    code = int(req.header["code"])
    shown = show(response)
    return [attrs.evolve(f, code=code, frame=shown) for f in _check_exchange(req, code, response)]


def _check_exchange(req: Frame, code: int, response: bytes | None) -> list[WireFinding]:
    oneway = bool(req.flag & 2)
    if response is None:
        if oneway or (code == 37 and _end_tx_type(req.ext) == 0):
            return []  # rule: wire/end-transaction (no answer to UNKNOW)
        if code == 37:
            kind = _end_tx_type(req.ext)
            return [
                WireFinding("wire/end-transaction", f"END_TRANSACTION type {kind} sent two-way: no answer")
            ]
        return [WireFinding("wire/request-response", f"request code {code}: no answer")]
    resp = parse_frame(response)
    if isinstance(resp, WireFinding):
        return [WireFinding(resp.rule, f"response to code {code}: {resp.message}")]
    out: list[WireFinding] = []
    where = f"response to code {code}"
    if oneway:
        out.append(WireFinding("wire/request-response", f"{where}: a one-way request was answered"))
    if not resp.flag & 1:
        out.append(WireFinding("wire/request-response", f"{where}: flag {resp.flag} lacks the response bit"))
    if resp.header["opaque"] != req.header["opaque"]:
        out.append(
            WireFinding(
                "wire/request-response",
                f"{where}: opaque {resp.header['opaque']}, the request's is {req.header['opaque']}",
            )
        )
    rcode = int(resp.header["code"])
    ext = resp.ext
    if code not in _KNOWN:
        if rcode != 3:
            out.append(WireFinding("wire/request-response", f"{where}: unknown code answered {rcode}, not 3"))
        return out
    if code in SEND_CODES:
        names = _SEND_SHORT if code in (310, 320) else _SEND_LONG
        missing = [n for n in names if n not in req.ext]
        if missing:
            out.append(WireFinding("wire/send-headers", f"request code {code} lacks {', '.join(missing)}"))
        if rcode == 0:
            for f in ("queueId", "queueOffset"):
                if not ext.get(f, "x").lstrip("-").isdigit():
                    out.append(WireFinding("wire/send-headers", f"{where}: {f} missing or not a number"))
            out += _offset_ids(ext.get("msgId"), where)
    elif code == 11 and rcode in (0, 19, 20, 21):
        for f in _PULL_FIELDS:
            if not ext.get(f, "x").lstrip("-").isdigit():
                out.append(WireFinding("wire/pull-response", f"{where}: {f} missing or not a number"))
        if rcode == 0:
            if not resp.body:
                out.append(WireFinding("wire/pull-response", f"{where}: SUCCESS with an empty body"))
            out += check_records(resp.body, where)
    elif code in (12, 33) and rcode == 0:
        out += check_records(resp.body, where)
    elif code == 37:
        kind = _end_tx_type(req.ext)
        if kind == 0:
            out.append(WireFinding("wire/end-transaction", f"{where}: an UNKNOW was answered"))
        elif kind not in (8, 12) and rcode != 1:
            out.append(
                WireFinding(
                    "wire/end-transaction", f"{where}: type {kind} answered {rcode}, not SYSTEM_ERROR"
                )
            )
        missing = [n for n in _END_TX_FIELDS if n not in req.ext]
        if missing:
            out.append(WireFinding("wire/end-transaction", f"request lacks {', '.join(missing)}"))
    elif code == 34 and rcode != 0:
        out.append(WireFinding("wire/heartbeat", f"{where}: heart beat answered {rcode}, not SUCCESS"))
    return out


def check_broker_request(raw: bytes) -> list[WireFinding]:
    """A request the broker started: CHECK_TRANSACTION_STATE. rule: wire/check-request"""
    shown = show(raw)
    return [attrs.evolve(f, code=39, frame=shown) for f in _check_broker_request(raw)]


def _check_broker_request(raw: bytes) -> list[WireFinding]:
    f = parse_frame(raw)
    if isinstance(f, WireFinding):
        return [f]
    out: list[WireFinding] = []
    code = int(f.header["code"])
    if code != 39:
        return [WireFinding("wire/check-request", f"the broker started request code {code}, not 39")]
    if not f.flag & 2 or f.flag & 1:
        out.append(WireFinding("wire/check-request", f"flag {f.flag}: a check request is one-way (2)"))
    missing = [n for n in _CHECK_FIELDS if n not in f.ext]
    if missing:
        out.append(WireFinding("wire/check-request", f"the check request lacks {', '.join(missing)}"))
    out += _offset_ids(f.ext.get("offsetMsgId"), "check request offsetMsgId")
    out += check_records(f.body, "check request body")
    return out

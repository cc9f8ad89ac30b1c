"""Pure encoding and decoding of RocketMQ remoting frames and stored records (facts §8, §10, §11).

No I/O. Malformed input raises ``ProtocolError`` naming the problem, never another exception.
rule: wire/frame, wire/record-layout, wire/offset-msg-id
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from rmqspec.reference.properties import decode_properties, encode_properties
from rmqspec.reference.records import Record, props

MAX_FRAME = 16 * 1024 * 1024
JSON_SERIALIZE = 0
MAGIC = -626843481  # 0xDAA320A7
FLAG_RESPONSE = 1
FLAG_ONEWAY = 2


class ProtocolError(ValueError):
    """A frame or record that does not follow the remoting protocol."""


@attrs.frozen
class RemotingCommand:
    """One remoting frame: the JSON header fields and the body."""

    code: int
    opaque: int
    flag: int = 0
    ext_fields: Mapping[str, str] | None = attrs.field(factory=dict)
    body: bytes = b""
    remark: str | None = None
    language: str = "JAVA"
    version: int = 401

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def encode_frame(cmd: RemotingCommand) -> bytes:
    """int32 length, int32 (serializeType << 24 | header length), JSON header, body (facts §8).

    The header's keys are in fastjson's (alphabetical) order, as the 4.9.4 broker writes them; extFields
    keep their own order. rule: wire/frame
    """
    header: dict[str, Any] = {"code": cmd.code}
    if cmd.ext_fields is not None:
        header["extFields"] = dict(cmd.ext_fields)
    header["flag"] = cmd.flag
    header["language"] = cmd.language
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    return (
        struct.pack(">ii", 4 + len(raw) + len(cmd.body), (JSON_SERIALIZE << 24) | len(raw)) + raw + cmd.body
    )


def decode_frame(frame: bytes) -> RemotingCommand:
    """Decode one complete frame, length prefix included."""
    if len(frame) < 8:
        raise ProtocolError(f"frame of {len(frame)} bytes is shorter than its 8-byte prefix")
    (total,) = struct.unpack(">i", frame[:4])
    if total != len(frame) - 4:
        raise ProtocolError(f"frame length field says {total} bytes, {len(frame) - 4} follow")
    return _decode_body(frame[4:])


def _decode_body(data: bytes) -> RemotingCommand:
    (info,) = struct.unpack(">i", data[:4])
    kind, header_len = (info >> 24) & 0xFF, info & 0xFFFFFF
    if kind != JSON_SERIALIZE:
        raise ProtocolError(f"serialize type {kind} is not supported (only 0, JSON)")
    if header_len > len(data) - 4:
        raise ProtocolError(f"header length {header_len} exceeds the {len(data) - 4} bytes left")
    try:
        header = json.loads(data[4 : 4 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"header is not UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    try:
        ext = header.get("extFields")
        if ext is not None and not (isinstance(ext, dict) and all(isinstance(v, str) for v in ext.values())):
            raise ProtocolError("extFields is not a map of strings")
        remark = header.get("remark")
        return RemotingCommand(
            code=_int(header["code"], "code"),
            opaque=_int(header.get("opaque", 0), "opaque"),
            flag=_int(header.get("flag", 0), "flag"),
            ext_fields=ext,
            body=data[4 + header_len :],
            remark=remark if isinstance(remark, str) else None,
            language=str(header.get("language", "JAVA")),
            version=_int(header.get("version", 0), "version"),
        )
    except KeyError as e:
        raise ProtocolError(f"header lacks {e.args[0]!r}") from None


def _int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"header field {name} is not an integer: {value!r}")
    return value


class FrameDecoder:
    """Incremental decoding of a byte stream into frames."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> Iterator[RemotingCommand]:
        self._buf += data
        while len(self._buf) >= 4:
            (total,) = struct.unpack(">i", self._buf[:4])
            if total < 4 or total > self._max:
                raise ProtocolError(f"frame length {total} is outside [4, {self._max}]")
            if len(self._buf) < 4 + total:
                return
            body = bytes(self._buf[4 : 4 + total])
            del self._buf[: 4 + total]
            yield _decode_body(body)


# --- stored records -------------------------------------------------------------------------------------

_FIXED = struct.Struct(
    ">iiiiiqqiq"
)  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORN


def _host(buf: bytes, pos: int, v6: bool) -> tuple[tuple[str, int], int]:
    n = 16 if v6 else 4
    if pos + n + 4 > len(buf):
        raise ProtocolError("record truncated inside a host address")
    raw = buf[pos : pos + n]
    ip = ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2)) if v6 else ".".join(str(b) for b in raw)
    (port,) = struct.unpack(">i", buf[pos + n : pos + n + 4])
    return (ip, port), pos + n + 4


def decode_records(body: bytes) -> list[Record]:
    """Stored records laid end to end (pull, view, query and check bodies). rule: wire/record-layout"""
    out: list[Record] = []
    pos = 0
    while pos < len(body):
        if pos + _FIXED.size > len(body):
            raise ProtocolError(f"record at byte {pos} truncated in its fixed fields")
        size, magic, _crc, qid, flag, qoff, clo, sys_flag, born = _FIXED.unpack_from(body, pos)
        if size <= 0 or pos + size > len(body):
            raise ProtocolError(f"record at byte {pos} claims {size} bytes, {len(body) - pos} remain")
        if magic != MAGIC:
            raise ProtocolError(f"record at byte {pos} has magic {magic & 0xFFFFFFFF:#x}, not 0xdaa320a7")
        end = pos + size
        rec = body[:end]
        p = pos + _FIXED.size
        born_host, p = _host(rec, p, bool(sys_flag & 0x10))
        if p + 8 > end:
            raise ProtocolError(f"record at byte {pos} truncated")
        (store_ts,) = struct.unpack_from(">q", rec, p)
        store_host, p = _host(rec, p + 8, bool(sys_flag & 0x20))
        if p + 16 > end:
            raise ProtocolError(f"record at byte {pos} truncated")
        reconsume, prepared, body_len = struct.unpack_from(">iqi", rec, p)
        p += 16
        if body_len < 0 or p + body_len + 1 > end:
            raise ProtocolError(f"record at byte {pos}: body length {body_len} does not fit")
        payload = rec[p : p + body_len]
        p += body_len
        topic_len = rec[p]
        p += 1
        if p + topic_len + 2 > end:
            raise ProtocolError(f"record at byte {pos}: topic length {topic_len} does not fit")
        topic = rec[p : p + topic_len].decode("utf-8", errors="replace")
        p += topic_len
        (props_len,) = struct.unpack_from(">h", rec, p)
        p += 2
        if props_len < 0 or p + props_len > end:
            raise ProtocolError(f"record at byte {pos}: properties length {props_len} does not fit")
        properties = decode_properties(rec[p : p + props_len].decode("utf-8", errors="replace"))
        if sys_flag & 0x1:
            try:
                payload = zlib.decompress(payload)
            except zlib.error as e:
                raise ProtocolError(f"record at byte {pos}: compressed body does not inflate: {e}") from None
        out.append(
            Record(
                clo,
                size,
                topic,
                qid,
                qoff,
                sys_flag,
                flag,
                payload,
                props(properties),
                born,
                store_ts,
                born_host,
                store_host,
                reconsume,
                prepared,
            )
        )
        pos = end
    return out


def encode_record(r: Record) -> bytes:
    """The stored layout of one IPv4 record, as the broker writes it (BODYCRC = crc32 & 0x7FFFFFFF)."""
    topic = r.topic.encode()
    properties = encode_properties(r.properties).encode()
    size = 91 + len(r.body) + len(topic) + len(properties)
    crc = zlib.crc32(r.body) & 0x7FFFFFFF

    def host(h: tuple[str, int]) -> bytes:
        return bytes(int(x) for x in h[0].split(".")) + struct.pack(">i", h[1])

    return (
        _FIXED.pack(
            size,
            MAGIC,
            crc,
            r.queue_id,
            r.flag,
            r.queue_offset,
            r.commit_log_offset,
            r.sys_flag,
            r.born_timestamp,
        )
        + host(r.born_host)
        + struct.pack(">q", r.store_timestamp)
        + host(r.store_host)
        + struct.pack(">iqi", r.reconsume_times, r.prepared_transaction_offset, len(r.body))
        + r.body
        + bytes([len(topic)])
        + topic
        + struct.pack(">h", len(properties))
        + properties
    )


def parse_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(store IP, port, commit-log offset) of a 32-character offset message id. rule: wire/offset-msg-id"""
    if len(msg_id) != 32:
        raise ProtocolError(f"offset message id {msg_id!r} is not 32 hex characters")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ProtocolError(f"offset message id {msg_id!r} is not hex") from None
    ip = ".".join(str(b) for b in raw[:4])
    (port,) = struct.unpack(">i", raw[4:8])
    (offset,) = struct.unpack(">q", raw[8:])
    return ip, port, offset

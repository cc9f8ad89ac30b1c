"""Pure encoding and decoding of the RocketMQ 4.x remoting protocol (facts §8, §10, §11). No I/O.

What is here:

- frames: ``RemotingCommand``, ``encode_frame``, ``decode_frame`` and the incremental ``FrameDecoder``, for
  serialize type 0 (JSON, what a 4.9.4 broker speaks by default) and type 1 (ROCKETMQ binary header);
- stored message records (pull, view, query and check bodies): ``WireRecord``, ``decode_records``,
  ``make_record``, ``encode_record``;
- offset message ids, the batch body of SEND_BATCH_MESSAGE, the heart-beat body;
- request builders, one per request code the adapter uses, with the ``extFields`` names of facts §8;
- response parsers into small typed results, and ``CheckTransactionRequest`` for the broker's own request.

Every decoder raises ``ProtocolError`` (a ``ValueError``) on malformed input, with a message naming the
problem, and never another exception type. Encoders raise ``ProtocolError`` too when a value cannot be put on
the wire (a number out of range, a topic too long, a frame over ``MAX_FRAME``).

rule: wire/frame, wire/record-layout, wire/offset-msg-id
"""

from __future__ import annotations

import contextlib
import enum
import ipaddress
import json
import re
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final, TypeAlias

import attrs
import immutables

from rmqspec.reference.constants import (
    BORNHOST_V6,
    COMPRESSED,
    DEFAULT_TOPIC,
    STOREHOST_V6,
    Code,
    Prop,
    transaction_value,
)
from rmqspec.reference.properties import decode_properties, encode_properties, java_string_hash
from rmqspec.reference.records import Record

# --- constants (facts §8) ------------------------------------------------------------------------------

MAX_FRAME: Final = 16 * 1024 * 1024
"""Largest frame accepted or produced, length prefix included (Netty's ``frameMaxLength`` default, 16 MiB)."""
MAX_BODY: Final = MAX_FRAME
"""Largest body a compressed record may inflate to (a guard against zlib bombs)."""
JSON_SERIALIZE: Final = 0
ROCKETMQ_SERIALIZE: Final = 1
SERIALIZE_NAMES: Final = {JSON_SERIALIZE: "JSON", ROCKETMQ_SERIALIZE: "ROCKETMQ"}
SERIALIZE_TYPES: Final = {name: kind for kind, name in SERIALIZE_NAMES.items()}
FLAG_RESPONSE: Final = 1  # flag bit 0
FLAG_ONEWAY: Final = 2  # flag bit 1
VERSION_4_9_4: Final = 401  # MQVersion.V4_9_4.ordinal(), the version of the recorded frames (facts §11)
VERSION_4_9_5: Final = (
    403  # MQVersion.V4_9_5.ordinal(): Java clients from here on send ``bname`` (RpcRequestHeader)
)
VERSION_5_0_0: Final = 413  # MQVersion.V5_0_0.ordinal(): END_TRANSACTION also carries ``topic``
MAGIC: Final = -626843481  # 0xDAA320A7, MESSAGE_MAGIC_CODE
MAGIC_V2: Final = -626843477  # 0xDAA320AB, 5.x MESSAGE_MAGIC_CODE_V2: a 2-byte topic length
RECORD_FIXED_SIZE: Final = 91  # IPv4 born and store hosts
DEFAULT_COMPRESS_LEVEL: Final = 5  # the 4.9 producer's default zip level (rocketmq.message.compressLevel)
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"
COMPRESSION_TYPE_MASK: Final = 0x700  # sysFlag bits 8-10 (facts §0); 0 (4.x) and 3 mean zlib
_ZLIB_COMPRESSION_TYPES: Final = (0, 3)

_INT16 = (-(1 << 15), (1 << 15) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)

Host: TypeAlias = tuple[str, int]
ExtFields: TypeAlias = tuple[tuple[str, str], ...]
Properties: TypeAlias = immutables.Map[str, str]
JsonValue: TypeAlias = str | int | bool | list["JsonValue"] | dict[str, "JsonValue"] | None


class ProtocolError(ValueError):
    """A frame, record or field that does not follow the remoting protocol (facts §8)."""


class WireViolation(ProtocolError):
    """A broker's answer that a client cannot use, as a failure of the wire rule it breaks (spec/wire.md):
    a required field missing, a value of the wrong type, a record that does not follow its layout.
    ``frame`` is the offending frame as received (``describe_frame``)."""

    def __init__(self, rule: str, message: str, frame: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.frame = frame


class RequestCode(enum.IntEnum):
    """Request codes (facts §8, "Request codes")."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ROUTEINFO_BY_TOPIC = 105
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325


# LanguageCode ordinals, the byte of the ROCKETMQ binary header.
LANGUAGE_CODES: Final = {
    "JAVA": 0,
    "CPP": 1,
    "DOTNET": 2,
    "PYTHON": 3,
    "DELPHI": 4,
    "ERLANG": 5,
    "RUBY": 6,
    "OTHER": 7,
    "HTTP": 8,
    "GO": 9,
    "PHP": 10,
    "OMS": 11,
    "RUST": 12,
}
LANGUAGE_NAMES: Final = {code: name for name, code in LANGUAGE_CODES.items()}


def _check_range(value: int, bounds: tuple[int, int], what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{what} is not an integer: {value!r}")
    if not bounds[0] <= value <= bounds[1]:
        raise ProtocolError(f"{what} {value} is out of range [{bounds[0]}, {bounds[1]}]")
    return value


# --- the command -------------------------------------------------------------------------------------------


def _ext_fields(
    value: Mapping[str, str] | Iterable[tuple[str, str]] | None,
) -> ExtFields | None:
    """Freeze extFields as a tuple of (name, value) pairs, keeping their order (a later duplicate wins)."""
    if value is None:
        return None
    items = value.items() if isinstance(value, Mapping) else value
    out: dict[str, str] = {}
    for pair in items:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ProtocolError(f"extFields entry {pair!r} is not a (name, value) pair")
        k, v = pair
        if not isinstance(k, str) or not isinstance(v, str):
            raise ProtocolError(f"extFields entry {k!r}: {v!r} is not a pair of strings")
        out[k] = v
    return tuple(out.items())


@attrs.frozen
class RemotingCommand:
    """One remoting frame: the header's fields and the body (facts §8 "Frame").

    ``ext_fields`` keeps its order (the bytes of a re-encoded frame depend on it) and tells an absent
    ``extFields`` (None) from an empty one (``()``, written ``"extFields":{}``). ``serialize_type_current_rpc``
    picks the header layout: ``"JSON"`` (type 0) or ``"ROCKETMQ"`` (type 1).
    """

    code: int
    language: str = "JAVA"
    version: int = VERSION_4_9_4
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: ExtFields | None = attrs.field(default=None, converter=_ext_fields)
    body: bytes = b""
    serialize_type_current_rpc: str = "JSON"

    @property
    def is_response(self) -> bool:
        """flag bit 0 (facts §8)."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """flag bit 1 (facts §8)."""
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def ext(self) -> dict[str, str]:
        """The extFields as a new dict (empty when absent)."""
        return dict(self.ext_fields or ())

    def get(self, name: str, default: str | None = None) -> str | None:
        """One extFields value, or ``default``."""
        for k, v in self.ext_fields or ():
            if k == name:
                return v
        return default


def response_for(
    request: RemotingCommand,
    code: int,
    *,
    remark: str | None = None,
    ext_fields: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """A response to ``request``: same opaque, flag bit 0 set (facts §8, §10)."""
    return RemotingCommand(
        code=code,
        language=request.language,
        version=request.version,
        opaque=request.opaque,
        flag=FLAG_RESPONSE,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
        serialize_type_current_rpc=request.serialize_type_current_rpc,
    )


def describe_frame(cmd: RemotingCommand, *, body_bytes: int = 48) -> str:
    """A frame as a report shows it: its header as JSON, then its body's length and first bytes in hex."""
    header: dict[str, object] = {"code": cmd.code, "flag": cmd.flag, "opaque": cmd.opaque}
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if cmd.ext_fields is not None:
        header["extFields"] = dict(cmd.ext_fields)
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":"))
    if not cmd.body:
        return f"{text} (no body)"
    head = cmd.body[:body_bytes].hex()
    return f"{text} + body of {len(cmd.body)} bytes: {head}{'…' if len(cmd.body) > body_bytes else ''}"


# --- JSON as fastjson writes it ------------------------------------------------------------------------

_JSON_SHORT_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
# fastjson's SerializeWriter escapes the C0 controls, '"', '\\', DEL and the C1 controls (0x7F-0x9F) and the
# line and paragraph separators U+2028/U+2029; other characters, non-ASCII included, are written as they
# are and the text is then UTF-8 encoded. Its \\u escapes use upper-case hex digits. One deliberate
# difference: a lone surrogate (only a JSON "\\udXXX" escape can produce one) is escaped, so it survives,
# where Java would write "?" for it.
_JSON_ESCAPE_RE: Final = re.compile('["\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]')


def _json_escape(m: re.Match[str]) -> str:
    ch = m.group()
    return _JSON_SHORT_ESCAPES.get(ch) or f"\\u{ord(ch):04X}"


def json_string(s: str) -> str:
    """A JSON string literal as fastjson writes it (the request headers of facts §11 are byte-exact)."""
    return '"' + _JSON_ESCAPE_RE.sub(_json_escape, s) + '"'


def to_json(value: JsonValue) -> str:
    """Compact JSON, fastjson style: no spaces, keys in the given order, strings by ``json_string``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, list):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    return "{" + ",".join(f"{json_string(k)}:{to_json(v)}" for k, v in value.items()) + "}"


def _utf8(s: str) -> bytes:
    # Java's String.getBytes(UTF_8) writes '?' for an unpaired surrogate; so does Python's "replace".
    return s.encode("utf-8", errors="replace")


def _parse_json(raw: bytes, what: str) -> object:
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ProtocolError(f"{what} is not UTF-8: {e}") from None
    except RecursionError:
        raise ProtocolError(f"{what} is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, and int conversions over the digit limit
        raise ProtocolError(f"{what} is not JSON: {e}") from None


# --- frames ------------------------------------------------------------------------------------------------


def _json_header(cmd: RemotingCommand) -> bytes:
    # fastjson writes a bean's properties in alphabetical order and leaves out null ones (facts §11).
    parts = [f'"code":{cmd.code}']
    if cmd.ext_fields is not None:
        ext = ",".join(f"{json_string(k)}:{json_string(v)}" for k, v in cmd.ext_fields)
        parts.append(f'"extFields":{{{ext}}}')
    parts.append(f'"flag":{cmd.flag}')
    parts.append(f'"language":{json_string(cmd.language)}')
    parts.append(f'"opaque":{cmd.opaque}')
    if cmd.remark is not None:
        parts.append(f'"remark":{json_string(cmd.remark)}')
    parts.append(f'"serializeTypeCurrentRPC":{json_string(cmd.serialize_type_current_rpc)}')
    parts.append(f'"version":{cmd.version}')
    return _utf8("{" + ",".join(parts) + "}")


def _binary_header(cmd: RemotingCommand) -> bytes:
    # RocketMQSerializable.rocketMQProtocolEncode: code int16, language byte, version int16, opaque int32,
    # flag int32, remark (int32 length + UTF-8), extFields (int32 length + (int16 kLen, k, int32 vLen, v)*).
    # An empty remark or map is written with length 0 and read back as null.
    if cmd.language not in LANGUAGE_CODES:
        raise ProtocolError(f"language {cmd.language!r} has no ROCKETMQ header code")
    _check_range(cmd.code, _INT16, "code (ROCKETMQ header, int16)")
    _check_range(cmd.version, _INT16, "version (ROCKETMQ header, int16)")
    remark = _utf8(cmd.remark or "")
    ext = bytearray()
    for k, v in cmd.ext_fields or ():
        kb, vb = _utf8(k), _utf8(v)
        if len(kb) > _INT16[1]:
            raise ProtocolError(f"extFields key of {len(kb)} bytes does not fit an int16 length")
        ext += struct.pack(">h", len(kb)) + kb + struct.pack(">i", len(vb)) + vb
    return (
        struct.pack(">hbhii", cmd.code, LANGUAGE_CODES[cmd.language], cmd.version, cmd.opaque, cmd.flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(ext))
        + bytes(ext)
    )


def encode_frame(cmd: RemotingCommand) -> bytes:
    """``int32 length, int32 (serializeType << 24 | headerLength), header, body`` (facts §8 "Frame").

    A JSON header is written as fastjson writes ``RemotingCommand``: keys in the order
    ``code, extFields, flag, language, opaque, remark, serializeTypeCurrentRPC, version``, no spaces,
    ``extFields`` and ``remark`` left out when None, ``extFields`` in its own order. Every request frame of
    facts §11 is reproduced byte for byte. rule: wire/frame
    """
    for name, value in (
        ("code", cmd.code),
        ("opaque", cmd.opaque),
        ("flag", cmd.flag),
        ("version", cmd.version),
    ):
        _check_range(value, _INT32, name)
    kind = SERIALIZE_TYPES.get(cmd.serialize_type_current_rpc)
    if kind is None:
        raise ProtocolError(
            f"serializeTypeCurrentRPC {cmd.serialize_type_current_rpc!r} is neither JSON nor ROCKETMQ"
        )
    header = _json_header(cmd) if kind == JSON_SERIALIZE else _binary_header(cmd)
    if len(header) > 0xFFFFFF:
        raise ProtocolError(f"header of {len(header)} bytes does not fit the 24-bit header length")
    total = 4 + len(header) + len(cmd.body)
    if total + 4 > MAX_FRAME:
        raise ProtocolError(f"frame of {total + 4} bytes exceeds the maximum frame size {MAX_FRAME}")
    return struct.pack(">ii", total, (kind << 24) | len(header)) + header + cmd.body


def decode_frame(buf: bytes, *, max_frame: int = MAX_FRAME) -> RemotingCommand:
    """Decode exactly one complete frame, length prefix included (facts §8 "Frame"). rule: wire/frame"""
    if len(buf) < 8:
        raise ProtocolError(f"frame of {len(buf)} bytes is shorter than its 8-byte prefix")
    total = _frame_length(bytes(buf[:4]), max_frame)
    if total != len(buf) - 4:
        raise ProtocolError(f"frame length field says {total} bytes follow, {len(buf) - 4} do")
    return _decode_payload(bytes(buf[4:]))


def _frame_length(prefix: bytes, max_frame: int) -> int:
    total = int.from_bytes(prefix, "big", signed=True)
    if total < 4:
        raise ProtocolError(f"frame length {total} is less than the 4 bytes of the header-length field")
    if total + 4 > max_frame:
        raise ProtocolError(f"frame of {total + 4} bytes exceeds the maximum frame size {max_frame}")
    return total


def _decode_payload(data: bytes) -> RemotingCommand:
    """The part of a frame after its length: header info, header, body."""
    if len(data) < 4:
        raise ProtocolError("frame too short for its header-length field")
    kind, header_len = data[0], int.from_bytes(data[1:4], "big")
    if header_len > len(data) - 4:
        raise ProtocolError(f"header length {header_len} exceeds the {len(data) - 4} bytes left in the frame")
    header, body = data[4 : 4 + header_len], data[4 + header_len :]
    if kind == JSON_SERIALIZE:
        return _decode_json_header(header, body)
    if kind == ROCKETMQ_SERIALIZE:
        return _decode_binary_header(header, body)
    raise ProtocolError(f"unknown serialize type {kind} (0 = JSON, 1 = ROCKETMQ)")


def _header_int(header: Mapping[str, object], name: str, default: int | None) -> int:
    if name not in header:
        if default is None:
            raise ProtocolError(f"header lacks {name!r}")
        return default
    value = header[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"header field {name!r} is not an integer: {value!r}")
    return _check_range(value, _INT32, f"header field {name!r}")


def _header_str(header: Mapping[str, object], name: str) -> str | None:
    value = header.get(name)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"header field {name!r} is not a string: {value!r}")
    return value


def _decode_json_header(raw: bytes, body: bytes) -> RemotingCommand:
    header = _parse_json(raw, "header")
    if not isinstance(header, dict):
        raise ProtocolError(f"header is not a JSON object but {type(header).__name__}")
    ext = header.get("extFields")
    if ext is not None:
        if not isinstance(ext, dict):
            raise ProtocolError(f"extFields is not a JSON object: {ext!r}")
        bad = [k for k, v in ext.items() if not isinstance(v, str)]
        if bad:
            raise ProtocolError(f"extFields value of {bad[0]!r} is not a string: {ext[bad[0]]!r}")
    language = _header_str(header, "language")
    rpc = _header_str(header, "serializeTypeCurrentRPC")
    if rpc is not None and rpc != "JSON":
        raise ProtocolError(f"serializeTypeCurrentRPC {rpc!r} in a JSON (type 0) header")
    return RemotingCommand(
        code=_header_int(header, "code", None),
        language="JAVA" if language is None else language,
        version=_header_int(header, "version", 0),
        opaque=_header_int(header, "opaque", 0),
        flag=_header_int(header, "flag", 0),
        remark=_header_str(header, "remark"),
        ext_fields=None if ext is None else tuple(ext.items()),
        body=body,
        serialize_type_current_rpc="JSON",
    )


class _Reader:
    """Bounds-checked big-endian reads; every short read is a ``ProtocolError`` naming ``what``."""

    def __init__(self, buf: bytes, pos: int, end: int, what: str) -> None:
        self.buf, self.pos, self.end, self.what = buf, pos, end, what

    def take(self, n: int, field: str) -> bytes:
        if n < 0:
            raise ProtocolError(f"{self.what}: {field} has negative length {n}")
        if self.pos + n > self.end:
            raise ProtocolError(
                f"{self.what}: {field} needs {n} bytes at byte {self.pos}, only {self.end - self.pos} left"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def num(self, fmt: str, field: str) -> int:
        value: int = struct.unpack(">" + fmt, self.take(struct.calcsize(fmt), field))[0]
        return value

    def text(self, n: int, field: str) -> str:
        raw = self.take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"{self.what}: {field} is not UTF-8: {e}") from None


def _decode_binary_header(raw: bytes, body: bytes) -> RemotingCommand:
    r = _Reader(raw, 0, len(raw), "ROCKETMQ header")
    code = r.num("h", "code")
    lang = r.num("B", "language")
    version = r.num("h", "version")
    opaque = r.num("i", "opaque")
    flag = r.num("i", "flag")
    remark_len = r.num("i", "remark length")
    remark = r.text(remark_len, "remark") if remark_len != 0 else None
    ext_len = r.num("i", "extFields length")
    ext: dict[str, str] | None = None
    if ext_len != 0:
        start = r.pos
        r.take(ext_len, "extFields")
        m = _Reader(raw, start, r.pos, "ROCKETMQ extFields")
        ext = {}
        while m.pos < m.end:
            key = m.text(m.num("h", "key length"), "key")
            ext[key] = m.text(m.num("i", "value length"), "value")
    if r.pos != len(raw):
        raise ProtocolError(f"ROCKETMQ header: {len(raw) - r.pos} bytes after extFields")
    if lang not in LANGUAGE_NAMES:
        raise ProtocolError(f"ROCKETMQ header: unknown language code {lang}")
    return RemotingCommand(
        code=code,
        language=LANGUAGE_NAMES[lang],
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type_current_rpc="ROCKETMQ",
    )


class FrameDecoder:
    """Incremental decoding of a byte stream into frames (facts §8 "Frame").

    ``feed`` returns the frames completed by the new bytes. A length prefix out of ``[4, max_frame - 4]`` is
    rejected as soon as its 4 bytes arrive (no waiting for 2 GiB that will never come). After a
    ``ProtocolError`` the stream cannot be resynchronised: every later ``feed`` raises the same error.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame
        self._error: ProtocolError | None = None
        self.bad_bytes = b""  # after a ProtocolError: the first bytes of what could not be read

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[RemotingCommand]:
        return [cmd for _, cmd in self.feed_raw(data)]

    def feed_raw(self, data: bytes) -> list[tuple[bytes, RemotingCommand]]:
        """Like ``feed``, with each frame's exact bytes (length prefix included) beside its command."""
        if self._error is not None:
            raise self._error
        self._buf += data
        out: list[tuple[bytes, RemotingCommand]] = []
        frame = b""
        try:
            while len(self._buf) >= 4:
                frame = b""
                total = _frame_length(bytes(self._buf[:4]), self._max)
                if len(self._buf) < 4 + total:
                    break
                frame = bytes(self._buf[: 4 + total])
                del self._buf[: 4 + total]
                out.append((frame, _decode_payload(frame[4:])))
        except ProtocolError as e:
            self._error = e
            # The frame whose payload could not be read, or the bytes whose length prefix could not be.
            self.bad_bytes = (frame or bytes(self._buf))[:64]
            self._buf.clear()
            raise
        return out

    def finish(self) -> None:
        """End of stream: a ``ProtocolError`` if it ended inside a frame."""
        if self._error is not None:
            raise self._error
        if self._buf:
            raise ProtocolError(f"stream ended inside a frame ({len(self._buf)} bytes of it received)")


def iter_frames(stream: bytes) -> Iterator[RemotingCommand]:
    """All frames of a complete byte string (a ``ProtocolError`` if it ends inside one)."""
    dec = FrameDecoder()
    yield from dec.feed(stream)
    dec.finish()


# --- stored records (facts §8 "Stored record layout") ---------------------------------------------------


def _freeze_props(value: Mapping[str, str]) -> Properties:
    return value if isinstance(value, immutables.Map) else immutables.Map(value)


@attrs.frozen
class WireRecord:
    """One stored message record as the broker sends it (facts §8 "Stored record layout").

    ``body`` is inflated when sysFlag has COMPRESSED (0x1); ``body_crc`` is what the record carries (the
    CRC of the stored, possibly compressed, body). ``properties_string`` is the stored string as it is and
    ``properties`` its lenient decoding (facts §0); a batch record's string may hold a key twice.
    Hosts are ``(ip, port)``; an IPv6 ip is in compressed form.
    """

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: Host
    store_timestamp: int
    store_host: Host
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: Properties = attrs.field(converter=_freeze_props)
    properties_string: str

    @property
    def msg_id(self) -> str:
        """The offset message id (store host + commit-log offset), as the broker computes it (facts §8)."""
        return offset_msg_id(self.store_host[0], self.store_host[1], self.commit_log_offset)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(Prop.UNIQ_KEY)

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def tran_type(self) -> int:
        """``sysFlag & 0xC`` (facts §0)."""
        return transaction_value(self.sys_flag)

    def to_reference(self) -> Record:
        """The reference model's ``Record`` for the same message."""
        return Record(
            commit_log_offset=self.commit_log_offset,
            size=self.total_size,
            topic=self.topic,
            queue_id=self.queue_id,
            queue_offset=self.queue_offset,
            sys_flag=self.sys_flag,
            flag=self.flag,
            body=self.body,
            properties=self.properties,
            born_timestamp=self.born_timestamp,
            store_timestamp=self.store_timestamp,
            born_host=self.born_host,
            store_host=self.store_host,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
        )


def _ip_bytes(ip: str, v6: bool, what: str) -> bytes:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ProtocolError(f"{what} {ip!r} is not an IP address") from None
    if (addr.version == 6) != v6:
        raise ProtocolError(f"{what} {ip!r} is IPv{addr.version} but the sysFlag says IPv{6 if v6 else 4}")
    return addr.packed


def _normal_ip(ip: str) -> str:
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        raise ProtocolError(f"{ip!r} is not an IP address") from None


def _host_bytes(host: Host, v6: bool, what: str) -> bytes:
    ip, port = host
    _check_range(port, _INT32, f"{what} port")
    return _ip_bytes(ip, v6, what) + struct.pack(">i", port)


def _read_host(r: _Reader, v6: bool, field: str) -> Host:
    raw = r.take(16 if v6 else 4, field)
    port = r.num("i", field + " port")
    return str(ipaddress.ip_address(raw)), port


def _compression_type(sys_flag: int) -> int:
    return (sys_flag & COMPRESSION_TYPE_MASK) >> 8


def _inflate(data: bytes, what: str) -> bytes:
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, MAX_BODY)
    except zlib.error as e:
        raise ProtocolError(f"{what}: compressed body does not inflate: {e}") from None
    if d.unconsumed_tail:
        raise ProtocolError(f"{what}: compressed body inflates to more than {MAX_BODY} bytes")
    if not d.eof:
        raise ProtocolError(f"{what}: compressed body is truncated")
    return out


def _stored_body(body: bytes, sys_flag: int, level: int) -> bytes:
    if not sys_flag & COMPRESSED:
        return body
    kind = _compression_type(sys_flag)
    if kind not in _ZLIB_COMPRESSION_TYPES:
        raise ProtocolError(
            f"compression type {kind} (sysFlag bits 8-10) is not zlib; only zlib is supported"
        )
    return zlib.compress(body, level)


def decode_records(body: bytes, *, verify_crc: bool = False) -> list[WireRecord]:
    """Stored records laid end to end: pull (FOUND), view, query and check bodies (facts §8, §11).

    Each record must end exactly where its TOTALSIZE says. IPv6 hosts follow sysFlag 0x10 / 0x20; a
    COMPRESSED (0x1) body is inflated with zlib; the 5.x magic 0xDAA320AB (2-byte topic length) is read too.
    With ``verify_crc`` a BODYCRC that is not ``crc32(stored body) & 0x7FFFFFFF`` is an error.
    rule: wire/record-layout
    """
    buf = bytes(body)
    out: list[WireRecord] = []
    pos = 0
    while pos < len(buf):
        out.append(_decode_record(buf, pos, verify_crc))
        pos += out[-1].total_size
    return out


def decode_record(body: bytes, *, verify_crc: bool = False) -> WireRecord:
    """Exactly one stored record (a view or check body)."""
    records = decode_records(body, verify_crc=verify_crc)
    if len(records) != 1:
        raise ProtocolError(f"expected one stored record, found {len(records)}")
    return records[0]


def _decode_record(buf: bytes, pos: int, verify_crc: bool) -> WireRecord:
    where = f"record at byte {pos}"
    head = _Reader(buf, pos, len(buf), where)
    size = head.num("i", "TOTALSIZE")
    if size < RECORD_FIXED_SIZE:
        raise ProtocolError(f"{where}: TOTALSIZE {size} is less than the fixed {RECORD_FIXED_SIZE} bytes")
    if pos + size > len(buf):
        raise ProtocolError(f"{where}: TOTALSIZE {size} exceeds the {len(buf) - pos} bytes left")
    r = _Reader(buf, head.pos, pos + size, where)
    magic = r.num("i", "MAGIC")
    if magic not in (MAGIC, MAGIC_V2):
        raise ProtocolError(f"{where}: magic {magic & 0xFFFFFFFF:#010x} is neither 0xdaa320a7 nor 0xdaa320ab")
    body_crc = r.num("i", "BODYCRC")
    queue_id = r.num("i", "QUEUEID")
    flag = r.num("i", "FLAG")
    queue_offset = r.num("q", "QUEUEOFFSET")
    commit_log_offset = r.num("q", "PHYSICALOFFSET")
    sys_flag = r.num("i", "SYSFLAG")
    born_timestamp = r.num("q", "BORNTIMESTAMP")
    born_host = _read_host(r, bool(sys_flag & BORNHOST_V6), "BORNHOST")
    store_timestamp = r.num("q", "STORETIMESTAMP")
    store_host = _read_host(r, bool(sys_flag & STOREHOST_V6), "STOREHOST")
    reconsume_times = r.num("i", "RECONSUMETIMES")
    prepared = r.num("q", "PREPAREDTRANSACTIONOFFSET")
    stored = r.take(r.num("i", "BODYLEN"), "BODY")
    topic_len = r.num("h", "TOPICLEN") if magic == MAGIC_V2 else r.num("b", "TOPICLEN")
    topic = r.text(topic_len, "TOPIC")
    properties_string = r.text(r.num("h", "PROPERTIESLEN"), "PROPERTIES")
    if r.pos != pos + size:
        raise ProtocolError(f"{where}: fields end at byte {r.pos}, TOTALSIZE says {pos + size}")
    if verify_crc and body_crc != zlib.crc32(stored) & 0x7FFFFFFF:
        raise ProtocolError(f"{where}: BODYCRC {body_crc} does not match the body")
    payload = stored
    if sys_flag & COMPRESSED:
        kind = _compression_type(sys_flag)
        if kind not in _ZLIB_COMPRESSION_TYPES:
            raise ProtocolError(f"{where}: compression type {kind} (sysFlag bits 8-10) is not supported")
        payload = _inflate(stored, where)
    return WireRecord(
        total_size=size,
        magic=magic,
        body_crc=body_crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commit_log_offset=commit_log_offset,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_timestamp=store_timestamp,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared,
        body=payload,
        topic=topic,
        properties=decode_properties(properties_string),
        properties_string=properties_string,
    )


def _properties_string(properties: Mapping[str, str] | str) -> str:
    return properties if isinstance(properties, str) else encode_properties(properties)


def make_record(
    *,
    topic: str,
    body: bytes,
    properties: Mapping[str, str] | str = "",
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: Host = ("127.0.0.1", 0),
    store_timestamp: int = 0,
    store_host: Host = ("127.0.0.1", 10911),
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    magic: int = MAGIC,
    compress_level: int = DEFAULT_COMPRESS_LEVEL,
) -> WireRecord:
    """A ``WireRecord`` with its derived fields filled in, so that ``decode_records(encode_record(r)) == [r]``.

    TOTALSIZE and BODYCRC are computed; the BORNHOST_V6 / STOREHOST_V6 bits of ``sys_flag`` are set from
    the hosts' address families; a mapping of properties is encoded with ``encode_properties`` (facts §0).
    """
    born_host = (_normal_ip(born_host[0]), born_host[1])
    store_host = (_normal_ip(store_host[0]), store_host[1])
    sys_flag &= ~(BORNHOST_V6 | STOREHOST_V6)
    sys_flag |= (BORNHOST_V6 if ":" in born_host[0] else 0) | (STOREHOST_V6 if ":" in store_host[0] else 0)
    props_string = _properties_string(properties)
    rec = WireRecord(
        total_size=0,
        magic=magic,
        body_crc=0,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commit_log_offset=commit_log_offset,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_timestamp=store_timestamp,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
        body=body,
        topic=topic,
        properties=decode_properties(props_string),
        properties_string=props_string,
    )
    stored = _stored_body(body, sys_flag, compress_level)
    raw = encode_record(rec, compress_level=compress_level)
    return attrs.evolve(rec, total_size=len(raw), body_crc=zlib.crc32(stored) & 0x7FFFFFFF)


def record_from_reference(r: Record, *, properties_string: str | None = None) -> WireRecord:
    """The wire form of a reference-model ``Record`` (for a server that serves the model).

    ``properties_string`` overrides the string encoded from ``r.properties`` (a batch record's stored string
    holds the inner properties and then the wrapper's).
    """
    return make_record(
        topic=r.topic,
        body=r.body,
        properties=r.properties if properties_string is None else properties_string,
        queue_id=r.queue_id,
        flag=r.flag,
        queue_offset=r.queue_offset,
        commit_log_offset=r.commit_log_offset,
        sys_flag=r.sys_flag,
        born_timestamp=r.born_timestamp,
        born_host=r.born_host,
        store_timestamp=r.store_timestamp,
        store_host=r.store_host,
        reconsume_times=r.reconsume_times,
        prepared_transaction_offset=r.prepared_transaction_offset,
    )


def encode_record(rec: WireRecord, *, compress_level: int = DEFAULT_COMPRESS_LEVEL) -> bytes:
    """The stored layout of one record, as the broker writes it (facts §8 "Stored record layout").

    TOTALSIZE and BODYCRC (``zlib.crc32(stored body) & 0x7FFFFFFF``) are computed, not taken from ``rec``;
    the properties are ``rec.properties_string`` as it is; a COMPRESSED body is deflated with zlib at
    ``compress_level``. rule: wire/record-layout
    """
    if rec.magic not in (MAGIC, MAGIC_V2):
        raise ProtocolError(f"magic {rec.magic} is neither MESSAGE_MAGIC_CODE nor its V2")
    stored = _stored_body(rec.body, rec.sys_flag, compress_level)
    topic = _utf8(rec.topic)
    max_topic = _INT16[1] if rec.magic == MAGIC_V2 else 127
    if len(topic) > max_topic:
        raise ProtocolError(f"topic of {len(topic)} bytes is longer than {max_topic}")
    props = _utf8(rec.properties_string)
    if len(props) > _INT16[1]:
        raise ProtocolError(f"properties of {len(props)} bytes are longer than {_INT16[1]}")
    born = _host_bytes(rec.born_host, bool(rec.sys_flag & BORNHOST_V6), "born host")
    store = _host_bytes(rec.store_host, bool(rec.sys_flag & STOREHOST_V6), "store host")
    size = RECORD_FIXED_SIZE - 16 + len(born) + len(store) + len(stored) + len(topic) + len(props)
    size += 1 if rec.magic == MAGIC_V2 else 0
    try:
        return b"".join(
            (
                struct.pack(
                    ">iiiiiqqiq",
                    size,
                    rec.magic,
                    zlib.crc32(stored) & 0x7FFFFFFF,
                    rec.queue_id,
                    rec.flag,
                    rec.queue_offset,
                    rec.commit_log_offset,
                    rec.sys_flag,
                    rec.born_timestamp,
                ),
                born,
                struct.pack(">q", rec.store_timestamp),
                store,
                struct.pack(">iqi", rec.reconsume_times, rec.prepared_transaction_offset, len(stored)),
                stored,
                struct.pack(">h" if rec.magic == MAGIC_V2 else ">b", len(topic)),
                topic,
                struct.pack(">h", len(props)),
                props,
            )
        )
    except struct.error as e:
        raise ProtocolError(f"record field out of range: {e}") from None


# --- offset message ids (facts §8) ---------------------------------------------------------------------

_HEX_RE: Final = re.compile(r"[0-9A-Fa-f]*")


def offset_msg_id(ip: str, port: int, commit_log_offset: int) -> str:
    """Upper-case hex of store IP (4 or 16 bytes), port (int32) and commit-log offset (int64) (facts §8).

    32 characters for IPv4, 56 for IPv6. rule: wire/offset-msg-id
    """
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ProtocolError(f"{ip!r} is not an IP address") from None
    _check_range(port, _INT32, "port")
    _check_range(commit_log_offset, _INT64, "commit-log offset")
    return (addr.packed + struct.pack(">iq", port, commit_log_offset)).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(store IP, port, commit-log offset) of a 32-character (IPv4) or 56-character (IPv6) offset message id.

    rule: wire/offset-msg-id
    """
    if not isinstance(msg_id, str):
        raise ProtocolError(f"offset message id {msg_id!r} is not a string")
    if len(msg_id) not in (32, 56):
        raise ProtocolError(f"offset message id {msg_id!r} is not 32 (IPv4) or 56 (IPv6) hex characters")
    if not _HEX_RE.fullmatch(msg_id):
        raise ProtocolError(f"offset message id {msg_id!r} is not hex")
    raw = bytes.fromhex(msg_id)
    n = len(raw) - 12
    port, offset = struct.unpack(">iq", raw[n:])
    return str(ipaddress.ip_address(raw[:n])), port, offset


# --- batch body (facts §1.4) ---------------------------------------------------------------------------


@attrs.frozen
class BatchMessage:
    """One message inside a SEND_BATCH_MESSAGE body; ``properties`` is its properties string.

    A mapping given for ``properties`` is encoded with ``encode_properties`` (facts §0).
    """

    body: bytes
    properties: str = attrs.field(default="", converter=_properties_string)
    flag: int = 0

    @property
    def props(self) -> dict[str, str]:
        return decode_properties(self.properties)


def encode_batch_body(messages: Iterable[BatchMessage]) -> bytes:
    """``MessageDecoder.encodeMessages``: per message ``TOTALSIZE MAGIC(0) BODYCRC(0) FLAG BODYLEN BODY
    PROPLEN(int16) PROPS`` (facts §1.4)."""
    out = bytearray()
    for i, m in enumerate(messages):
        props = _utf8(m.properties)
        if len(props) > _INT16[1]:
            raise ProtocolError(f"batch message {i}: properties of {len(props)} bytes exceed {_INT16[1]}")
        size = 20 + len(m.body) + 2 + len(props)
        try:
            out += struct.pack(">iiiii", size, 0, 0, m.flag, len(m.body)) + m.body
        except struct.error as e:
            raise ProtocolError(f"batch message {i}: {e}") from None
        out += struct.pack(">h", len(props)) + props
    return bytes(out)


def decode_batch_body(body: bytes) -> list[BatchMessage]:
    """The inverse of ``encode_batch_body`` (facts §1.4). MAGIC and BODYCRC are read and ignored, as the
    broker does; each TOTALSIZE must match its fields."""
    buf = bytes(body)
    out: list[BatchMessage] = []
    pos = 0
    while pos < len(buf):
        where = f"batch message at byte {pos}"
        r = _Reader(buf, pos, len(buf), where)
        size = r.num("i", "TOTALSIZE")
        r.num("i", "MAGIC")
        r.num("i", "BODYCRC")
        flag = r.num("i", "FLAG")
        payload = r.take(r.num("i", "BODYLEN"), "BODY")
        props = r.text(r.num("h", "PROPLEN"), "PROPERTIES")
        if r.pos - pos != size:
            raise ProtocolError(f"{where}: TOTALSIZE {size} but its fields take {r.pos - pos} bytes")
        out.append(BatchMessage(payload, props, flag))
        pos = r.pos
    return out


# --- heart beat body (facts §10) -------------------------------------------------------------------------


@attrs.frozen
class ConsumerData:
    """A consumer group in a HEART_BEAT body; ``subscriptions`` are (topic, tag expression) pairs."""

    group_name: str
    subscriptions: tuple[tuple[str, str], ...] = ()
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    unit_mode: bool = False
    sub_version: int = 0

    def to_json_value(self) -> JsonValue:
        subs: list[JsonValue] = []
        for topic, expression in self.subscriptions:
            tags = [] if expression.strip() in ("", "*") else [t.strip() for t in expression.split("||")]
            tags = [t for t in tags if t]
            subs.append(
                {
                    "classFilterMode": False,
                    "codeSet": [java_string_hash(t) for t in tags],
                    "expressionType": "TAG",
                    "subString": expression,
                    "subVersion": self.sub_version,
                    "tagsSet": list(tags),
                    "topic": topic,
                }
            )
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": subs,
            "unitMode": self.unit_mode,
        }


def heartbeat_body(
    client_id: str, producer_groups: Iterable[str] = (), consumer_groups: Iterable[str | ConsumerData] = ()
) -> bytes:
    """The HEART_BEAT (34) body, keys in fastjson's alphabetical order as recorded (facts §10, §11):
    ``{"clientID":...,"consumerDataSet":[...],"producerDataSet":[{"groupName":...}]}``."""
    consumers: list[JsonValue] = [
        (c if isinstance(c, ConsumerData) else ConsumerData(c)).to_json_value() for c in consumer_groups
    ]
    producers: list[JsonValue] = [{"groupName": g} for g in producer_groups]
    return _utf8(to_json({"clientID": client_id, "consumerDataSet": consumers, "producerDataSet": producers}))


# --- request builders (facts §8 "Headers") ------------------------------------------------------------------


def _s(value: int | bool | str) -> str:
    """An extFields value: every value is a string, booleans ``"true"``/``"false"`` (facts §10)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _request(
    code: int, ext: Iterable[tuple[str, int | bool | str | None]] | None, body: bytes = b""
) -> RemotingCommand:
    fields = None if ext is None else tuple((k, _s(v)) for k, v in ext if v is not None)
    return RemotingCommand(code=code, ext_fields=fields, body=body)


@attrs.frozen
class SendMessageHeader:
    """``SendMessageRequestHeader`` (facts §8); written with long names (code 10) or a..n (310, 320)."""

    producer_group: str
    topic: str
    born_timestamp: int
    queue_id: int = 0
    sys_flag: int = 0
    flag: int = 0
    properties: str = attrs.field(default="", converter=_properties_string)
    reconsume_times: int = 0
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None
    default_topic: str = DEFAULT_TOPIC
    default_topic_queue_nums: int = 4
    broker_name: str | None = None

    def long_fields(self) -> list[tuple[str, int | bool | str | None]]:
        return [
            ("producerGroup", self.producer_group),
            ("topic", self.topic),
            ("defaultTopic", self.default_topic),
            ("defaultTopicQueueNums", self.default_topic_queue_nums),
            ("queueId", self.queue_id),
            ("sysFlag", self.sys_flag),
            ("bornTimestamp", self.born_timestamp),
            ("flag", self.flag),
            ("properties", self.properties),
            ("reconsumeTimes", self.reconsume_times),
            ("unitMode", self.unit_mode),
            ("batch", self.batch),
            ("maxReconsumeTimes", self.max_reconsume_times),
            ("bname", self.broker_name),
        ]

    def v2_fields(self) -> list[tuple[str, int | bool | str | None]]:
        return [
            ("a", self.producer_group),
            ("b", self.topic),
            ("c", self.default_topic),
            ("d", self.default_topic_queue_nums),
            ("e", self.queue_id),
            ("f", self.sys_flag),
            ("g", self.born_timestamp),
            ("h", self.flag),
            ("i", self.properties),
            ("j", self.reconsume_times),
            ("k", self.unit_mode),
            ("l", self.max_reconsume_times),
            ("m", self.batch),
            ("n", self.broker_name),
        ]


def send_message_request(header: SendMessageHeader, body: bytes, *, v2: bool = True) -> RemotingCommand:
    """SEND_MESSAGE_V2 (310, one-letter names) or SEND_MESSAGE (10, long names) (facts §8)."""
    if v2:
        return _request(RequestCode.SEND_MESSAGE_V2, header.v2_fields(), body)
    return _request(RequestCode.SEND_MESSAGE, header.long_fields(), body)


def send_batch_request(header: SendMessageHeader, messages: Iterable[BatchMessage]) -> RemotingCommand:
    """SEND_BATCH_MESSAGE (320): the V2 header with ``m=true``, the body by ``encode_batch_body`` (facts §1.4)."""
    return _request(
        RequestCode.SEND_BATCH_MESSAGE,
        attrs.evolve(header, batch=True).v2_fields(),
        encode_batch_body(messages),
    )


def pull_message_request(
    consumer_group: str,
    topic: str,
    queue_id: int,
    queue_offset: int,
    *,
    max_msg_nums: int = 32,
    sys_flag: int = 4,
    commit_offset: int = 0,
    suspend_timeout_millis: int = 0,
    subscription: str = "*",
    sub_version: int = 0,
    expression_type: str = "TAG",
    max_msg_bytes: int | None = None,
    broker_name: str | None = None,
) -> RemotingCommand:
    """PULL_MESSAGE (11). sysFlag 4 (subscription) lets a pull work without a consumer heart beat (facts §10).
    ``max_msg_bytes`` and ``broker_name`` (``bname``) are what later Java clients add (PullAPIWrapper
    .pullKernelImpl: ``bname`` from 4.9.5, ``maxMsgBytes`` in 5.x); None leaves them out."""
    return _request(
        RequestCode.PULL_MESSAGE,
        [
            ("consumerGroup", consumer_group),
            ("topic", topic),
            ("queueId", queue_id),
            ("queueOffset", queue_offset),
            ("maxMsgNums", max_msg_nums),
            ("sysFlag", sys_flag),
            ("commitOffset", commit_offset),
            ("suspendTimeoutMillis", suspend_timeout_millis),
            ("subscription", subscription),
            ("subVersion", sub_version),
            ("expressionType", expression_type),
            ("maxMsgBytes", max_msg_bytes),
            ("bname", broker_name),
        ],
    )


def consumer_send_msg_back_request(
    group: str,
    offset: int,
    *,
    delay_level: int = 0,
    origin_msg_id: str | None = None,
    origin_topic: str | None = None,
    unit_mode: bool = False,
    max_reconsume_times: int | None = None,
    broker_name: str | None = None,
) -> RemotingCommand:
    """CONSUMER_SEND_MSG_BACK (36); ``offset`` is the commit-log offset (facts §4.1, §8)."""
    return _request(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        [
            ("offset", offset),
            ("group", group),
            ("delayLevel", delay_level),
            ("originMsgId", origin_msg_id),
            ("originTopic", origin_topic),
            ("unitMode", unit_mode),
            ("maxReconsumeTimes", max_reconsume_times),
            ("bname", broker_name),
        ],
    )


def end_transaction_request(
    producer_group: str,
    tran_state_table_offset: int,
    commit_log_offset: int,
    commit_or_rollback: int,
    *,
    msg_id: str,
    transaction_id: str | None = None,
    from_transaction_check: bool = False,
    oneway: bool = True,
    topic: str | None = None,
    broker_name: str | None = None,
) -> RemotingCommand:
    """END_TRANSACTION (37), one-way (flag 2) by default as the Java producer sends it (facts §5.1, §8, §10).

    ``commit_or_rollback``: 8 commit, 12 rollback, 0 unknown. ``topic`` is the 5.x addition, ``broker_name``
    (``bname``) the 4.9.5 one (DefaultMQProducerImpl.endTransaction / checkTransactionState).
    """
    cmd = _request(
        RequestCode.END_TRANSACTION,
        [
            ("producerGroup", producer_group),
            ("tranStateTableOffset", tran_state_table_offset),
            ("commitLogOffset", commit_log_offset),
            ("commitOrRollback", commit_or_rollback),
            ("fromTransactionCheck", from_transaction_check),
            ("msgId", msg_id),
            ("transactionId", transaction_id),
            ("topic", topic),
            ("bname", broker_name),
        ],
    )
    return attrs.evolve(cmd, flag=FLAG_ONEWAY) if oneway else cmd


def get_max_offset_request(topic: str, queue_id: int, *, broker_name: str | None = None) -> RemotingCommand:
    """GET_MAX_OFFSET (30) (facts §8); ``broker_name`` is the ``bname`` of Java clients from 4.9.5."""
    return _request(
        RequestCode.GET_MAX_OFFSET, [("topic", topic), ("queueId", queue_id), ("bname", broker_name)]
    )


def view_message_request(commit_log_offset: int, *, topic: str | None = None) -> RemotingCommand:
    """VIEW_MESSAGE_BY_ID (33): ``offset`` is a commit-log offset (facts §8); ``topic`` is the 5.x Java
    client's addition (MQClientAPIImpl.viewMessage(addr, topic, phyoffset, ...)), None leaves it out."""
    return _request(RequestCode.VIEW_MESSAGE_BY_ID, [("topic", topic), ("offset", commit_log_offset)])


def query_message_request(
    topic: str,
    key: str,
    *,
    max_num: int = 32,
    begin_timestamp: int = 0,
    end_timestamp: int,
    unique_key: bool | None = None,
) -> RemotingCommand:
    """QUERY_MESSAGE (12); ``unique_key`` adds ``_UNIQUE_KEY_QUERY``, ``true`` (a UNIQ_KEY query) or ``false``
    (by KEYS), as the Java client always does (MQClientAPIImpl.queryMessage); None leaves it out (facts §8)."""
    return _request(
        RequestCode.QUERY_MESSAGE,
        [
            ("topic", topic),
            ("key", key),
            ("maxNum", max_num),
            ("beginTimestamp", begin_timestamp),
            ("endTimestamp", end_timestamp),
            (UNIQUE_KEY_QUERY, unique_key),
        ],
    )


def heartbeat_request(
    client_id: str, producer_groups: Iterable[str] = (), consumer_groups: Iterable[str | ConsumerData] = ()
) -> RemotingCommand:
    """HEART_BEAT (34): empty extFields (``{}``, as recorded) and the JSON body of ``heartbeat_body``."""
    return _request(RequestCode.HEART_BEAT, (), heartbeat_body(client_id, producer_groups, consumer_groups))


def subscription_group_request(group: str, *, retry_queue_nums: int, retry_max_times: int) -> RemotingCommand:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), what ``mqadmin updateSubGroup`` sends: a
    ``SubscriptionGroupConfig`` as the JSON body (AdminBrokerProcessor.updateAndCreateSubscriptionGroup,
    4.9.7 and 5.5.0), the other fields at the class's defaults."""
    body: dict[str, JsonValue] = {
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "groupName": group,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": retry_max_times,
        "retryQueueNums": retry_queue_nums,
        "whichBrokerWhenConsumeSlowly": 1,
    }
    return _request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, (), _utf8(to_json(body)))


def get_route_request(topic: str) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC (105), to a name server."""
    return _request(RequestCode.GET_ROUTEINFO_BY_TOPIC, [("topic", topic)])


def check_transaction_state_request(
    record: WireRecord,
    *,
    tran_state_table_offset: int,
    commit_log_offset: int,
    msg_id: str | None,
    transaction_id: str | None,
    offset_msg_id: str | None,
    opaque: int = 0,
) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE (39) as the broker sends it: one-way, the message record as body (facts §10)."""
    cmd = _request(
        RequestCode.CHECK_TRANSACTION_STATE,
        [
            ("commitLogOffset", commit_log_offset),
            ("msgId", msg_id),
            ("tranStateTableOffset", tran_state_table_offset),
            ("offsetMsgId", offset_msg_id),
            ("transactionId", transaction_id),
        ],
        encode_record(record),
    )
    return attrs.evolve(cmd, flag=FLAG_ONEWAY, opaque=opaque)


# --- response parsers ---------------------------------------------------------------------------------------

_INT_RE: Final = re.compile(r"[+-]?[0-9]+")


def _int_field(cmd: RemotingCommand, name: str, *, required: bool = False) -> int | None:
    value = cmd.get(name)
    if value is None:
        if required:
            raise ProtocolError(f"code {cmd.code} frame lacks extFields {name!r}")
        return None
    if not _INT_RE.fullmatch(value):
        raise ProtocolError(f"extFields {name!r} is not an integer: {value!r}")
    return _check_range(int(value), _INT64, f"extFields {name!r}")


def _bool_field(cmd: RemotingCommand, name: str) -> bool | None:
    value = cmd.get(name)
    return None if value is None else value.strip().lower() == "true"  # Boolean.parseBoolean


def _expect_response(cmd: RemotingCommand) -> None:
    if not cmd.is_response:
        raise ProtocolError(f"code {cmd.code} frame with flag {cmd.flag} is not a response")


@attrs.frozen
class Reply:
    """A response that carries only a code and a remark (heart beat, send-back, end-transaction)."""

    code: int
    remark: str | None

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS


@attrs.frozen
class SendResponse:
    """``SendMessageResponseHeader`` (facts §8, §10). ``msg_id`` is the offset message id, comma-joined ids
    for a batch; the fields are None when the broker did not send them (an error)."""

    code: int
    remark: str | None
    msg_id: str | None
    queue_id: int | None
    queue_offset: int | None
    transaction_id: str | None = None
    region: str | None = None
    trace_on: bool | None = None

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS

    @property
    def msg_ids(self) -> tuple[str, ...]:
        return tuple(self.msg_id.split(",")) if self.msg_id else ()

    @property
    def commit_log_offsets(self) -> tuple[int, ...]:
        """The commit-log offsets of ``msg_ids`` (the last 16 hex digits of each; facts §10)."""
        return tuple(parse_offset_msg_id(m)[2] for m in self.msg_ids)


def parse_reply(cmd: RemotingCommand) -> Reply:
    with judged(cmd, "wire/request-response"):
        _expect_response(cmd)
        return Reply(cmd.code, cmd.remark)


# Send answers that mean "stored": the broker names the record it wrote (facts §8; 4.9.8
# SendMessageProcessor.handlePutMessageResult: sendOK for PUT_OK and the flush / slave timeouts).
STORED_CODES: Final = frozenset(
    {Code.SUCCESS, Code.FLUSH_DISK_TIMEOUT, Code.FLUSH_SLAVE_TIMEOUT, Code.SLAVE_NOT_AVAILABLE}
)
# Pull answers that carry the queue's offsets (wire/pull-response: FOUND, NOT_FOUND, RETRY, OFFSET_MOVED).
PULL_OFFSET_CODES: Final = frozenset(
    {Code.SUCCESS, Code.PULL_NOT_FOUND, Code.PULL_RETRY_IMMEDIATELY, Code.PULL_OFFSET_MOVED}
)


@contextlib.contextmanager
def judged(cmd: RemotingCommand, rule: str) -> Iterator[None]:
    """Read ``cmd``: a ``ProtocolError`` raised inside becomes a ``WireViolation`` of ``rule`` (one that is
    already a violation keeps its own rule), carrying the frame."""
    try:
        yield
    except WireViolation as e:
        if e.frame is None:
            raise WireViolation(e.rule, str(e), describe_frame(cmd)) from None
        raise
    except ProtocolError as e:
        raise WireViolation(rule, f"code {cmd.code} answer: {e}", describe_frame(cmd)) from None


def _required(cmd: RemotingCommand, names: Sequence[str], rule: str, what: str) -> None:
    missing = [n for n in names if cmd.get(n) is None]
    if missing:
        raise WireViolation(
            rule, f"{what} answered {_code_name(cmd.code)} lacks {', '.join(missing)}", describe_frame(cmd)
        )


def _code_name(code: int) -> str:
    try:
        return f"{Code(code).name} ({code})"
    except ValueError:
        return str(code)


def parse_send_response(cmd: RemotingCommand) -> SendResponse:
    """The response to 10, 310 or 320 (facts §8, §10). A stored code must name the record written: msgId,
    queueId and queueOffset (wire/send-headers); each msgId an offset message id (wire/offset-msg-id)."""
    with judged(cmd, "wire/send-headers"):
        _expect_response(cmd)
        msg_id = cmd.get("msgId")
        if cmd.code in STORED_CODES:
            _required(cmd, ("msgId", "queueId", "queueOffset"), "wire/send-headers", "a send")
            if not msg_id:
                raise WireViolation(
                    "wire/send-headers", f"a send answered {_code_name(cmd.code)} has an empty msgId"
                )
        if msg_id:
            for m in msg_id.split(","):
                try:
                    parse_offset_msg_id(m)
                except ProtocolError as e:
                    raise WireViolation("wire/offset-msg-id", f"send answer: {e}") from None
        return SendResponse(
            code=cmd.code,
            remark=cmd.remark,
            msg_id=msg_id,
            queue_id=_int_field(cmd, "queueId"),
            queue_offset=_int_field(cmd, "queueOffset"),
            transaction_id=cmd.get("transactionId"),
            region=cmd.get(Prop.MSG_REGION),
            trace_on=_bool_field(cmd, Prop.TRACE_ON),
        )


@attrs.frozen
class PullResponse:
    """``PullMessageResponseHeader`` and the records of a FOUND pull (facts §8, §10)."""

    code: int
    remark: str | None
    next_begin_offset: int | None
    min_offset: int | None
    max_offset: int | None
    suggest_which_broker_id: int | None
    records: tuple[WireRecord, ...] = ()

    @property
    def found(self) -> bool:
        return self.code == Code.SUCCESS


def parse_pull_response(cmd: RemotingCommand) -> PullResponse:
    """The response to PULL_MESSAGE (11); the body is decoded only for code 0 (FOUND). A code that answers
    about the queue carries its offsets (wire/pull-response); the records follow wire/record-layout."""
    with judged(cmd, "wire/pull-response"):
        _expect_response(cmd)
        if cmd.code in PULL_OFFSET_CODES:
            _required(
                cmd,
                ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"),
                "wire/pull-response",
                "a pull",
            )
        if cmd.code == Code.SUCCESS and not cmd.body:
            raise WireViolation(
                "wire/pull-response", "a pull answered SUCCESS (0) has no records in its body"
            )
        with judged(cmd, "wire/record-layout"):
            records = decode_records(cmd.body) if cmd.code == Code.SUCCESS else []
        return PullResponse(
            code=cmd.code,
            remark=cmd.remark,
            next_begin_offset=_int_field(cmd, "nextBeginOffset"),
            min_offset=_int_field(cmd, "minOffset"),
            max_offset=_int_field(cmd, "maxOffset"),
            suggest_which_broker_id=_int_field(cmd, "suggestWhichBrokerId"),
            records=tuple(records),
        )


@attrs.frozen
class MaxOffsetResponse:
    """The response to GET_MAX_OFFSET (30): the ConsumeQueue's next offset (facts §2, §8)."""

    code: int
    remark: str | None
    offset: int | None

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS


def parse_max_offset_response(cmd: RemotingCommand) -> MaxOffsetResponse:
    """A SUCCESS names the queue's max offset (dispatch/max-offset)."""
    with judged(cmd, "dispatch/max-offset"):
        _expect_response(cmd)
        return MaxOffsetResponse(
            cmd.code, cmd.remark, _int_field(cmd, "offset", required=cmd.code == Code.SUCCESS)
        )


@attrs.frozen
class ViewMessageResponse:
    """The response to VIEW_MESSAGE_BY_ID (33): one record when code is 0 (facts §8)."""

    code: int
    remark: str | None
    record: WireRecord | None

    @property
    def found(self) -> bool:
        return self.record is not None


def parse_view_message_response(cmd: RemotingCommand) -> ViewMessageResponse:
    """A SUCCESS carries one record (wire/record-layout)."""
    with judged(cmd, "wire/record-layout"):
        _expect_response(cmd)
        record = decode_record(cmd.body) if cmd.code == Code.SUCCESS else None
        return ViewMessageResponse(cmd.code, cmd.remark, record)


@attrs.frozen
class QueryMessageResponse:
    """The response to QUERY_MESSAGE (12); code 22 when nothing is found (facts §8)."""

    code: int
    remark: str | None
    index_last_update_timestamp: int | None
    index_last_update_phyoffset: int | None
    records: tuple[WireRecord, ...] = ()

    @property
    def found(self) -> bool:
        return self.code == Code.SUCCESS


def parse_query_message_response(cmd: RemotingCommand) -> QueryMessageResponse:
    """A SUCCESS carries the records found (wire/record-layout)."""
    with judged(cmd, "put/commit-log-lookup"):
        _expect_response(cmd)
        with judged(cmd, "wire/record-layout"):
            records = decode_records(cmd.body) if cmd.code == Code.SUCCESS else []
        return QueryMessageResponse(
            code=cmd.code,
            remark=cmd.remark,
            index_last_update_timestamp=_int_field(cmd, "indexLastUpdateTimestamp"),
            index_last_update_phyoffset=_int_field(cmd, "indexLastUpdatePhyoffset"),
            records=tuple(records),
        )


@attrs.frozen
class CheckTransactionRequest:
    """CHECK_TRANSACTION_STATE (39) from the broker: header fields and the half message (facts §5.1, §10).

    The offsets refer to the put-back copy of the half message; answer with END_TRANSACTION
    ``fromTransactionCheck=true`` and these offsets. ``topic`` is the 5.x addition.
    """

    opaque: int
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None
    transaction_id: str | None
    offset_msg_id: str | None
    record: WireRecord
    topic: str | None = None

    @property
    def producer_group(self) -> str | None:
        return self.record.properties.get(Prop.PGROUP)


def parse_check_transaction_request(cmd: RemotingCommand) -> CheckTransactionRequest:
    if cmd.code != RequestCode.CHECK_TRANSACTION_STATE or cmd.is_response:
        raise ProtocolError(f"code {cmd.code} frame with flag {cmd.flag} is not CHECK_TRANSACTION_STATE")
    offset_id = cmd.get("offsetMsgId")
    if offset_id:
        parse_offset_msg_id(offset_id)
    return CheckTransactionRequest(
        opaque=cmd.opaque,
        tran_state_table_offset=_int_field(cmd, "tranStateTableOffset", required=True) or 0,
        commit_log_offset=_int_field(cmd, "commitLogOffset", required=True) or 0,
        msg_id=cmd.get("msgId"),
        transaction_id=cmd.get("transactionId"),
        offset_msg_id=offset_id,
        record=decode_record(cmd.body),
        topic=cmd.get("topic"),
    )


# --- route (name server) --------------------------------------------------------------------------------


@attrs.frozen
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@attrs.frozen
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: tuple[tuple[int, str], ...]  # (brokerId, "ip:port"), brokerId 0 is the master


@attrs.frozen
class TopicRoute:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None


@attrs.frozen
class RouteResponse:
    """The name server's answer to GET_ROUTEINFO_BY_TOPIC (105); ``route`` is None unless code is 0."""

    code: int
    remark: str | None
    route: TopicRoute | None


_JSON_STRING_RE: Final = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BARE_INT_KEY_RE: Final = re.compile(r"([{,]\s*)(-?[0-9]+)(\s*:)")


def _quote_int_keys(text: str) -> str:
    """fastjson writes a ``Map<Long, String>`` (``brokerAddrs``) with bare integer keys: ``{0:"..."}``."""
    out: list[str] = []
    pos = 0
    for m in _JSON_STRING_RE.finditer(text):
        out.append(_BARE_INT_KEY_RE.sub(r'\1"\2"\3', text[pos : m.start()]))
        out.append(m.group())
        pos = m.end()
    out.append(_BARE_INT_KEY_RE.sub(r'\1"\2"\3', text[pos:]))
    return "".join(out)


def _obj(value: object, what: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} is not a JSON object")
    return value


def _list(value: object, what: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"{what} is not a JSON array")
    return value


def _jint(d: Mapping[str, object], key: str, what: str, default: int | None = None) -> int:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{what}.{key} is not an integer: {value!r}")
    return value


def _jstr(d: Mapping[str, object], key: str, what: str) -> str:
    value = d.get(key)
    if not isinstance(value, str):
        raise ProtocolError(f"{what}.{key} is not a string: {value!r}")
    return value


def parse_route(body: bytes) -> TopicRoute:
    """``TopicRouteData`` JSON (fastjson, bare integer keys in ``brokerAddrs``)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"route body is not UTF-8: {e}") from None
    root = _obj(_parse_json(_utf8(_quote_int_keys(text)), "route body"), "route body")
    queues = []
    for q in _list(root.get("queueDatas"), "queueDatas"):
        qd = _obj(q, "queueData")
        queues.append(
            QueueData(
                broker_name=_jstr(qd, "brokerName", "queueData"),
                read_queue_nums=_jint(qd, "readQueueNums", "queueData"),
                write_queue_nums=_jint(qd, "writeQueueNums", "queueData"),
                perm=_jint(qd, "perm", "queueData"),
                topic_sys_flag=_jint(qd, "topicSysFlag", "queueData", 0),
            )
        )
    brokers = []
    for b in _list(root.get("brokerDatas"), "brokerDatas"):
        bd = _obj(b, "brokerData")
        addrs = []
        for k, v in _obj(bd.get("brokerAddrs", {}), "brokerAddrs").items():
            if not _INT_RE.fullmatch(k) or not isinstance(v, str):
                raise ProtocolError(f"brokerAddrs entry {k!r}: {v!r} is not brokerId: address")
            addrs.append((int(k), v))
        brokers.append(
            BrokerData(
                cluster=_jstr(bd, "cluster", "brokerData"),
                broker_name=_jstr(bd, "brokerName", "brokerData"),
                broker_addrs=tuple(sorted(addrs)),
            )
        )
    conf = root.get("orderTopicConf")
    if conf is not None and not isinstance(conf, str):
        raise ProtocolError(f"orderTopicConf is not a string: {conf!r}")
    return TopicRoute(tuple(queues), tuple(brokers), conf)


def parse_route_response(cmd: RemotingCommand) -> RouteResponse:
    _expect_response(cmd)
    route = parse_route(cmd.body) if cmd.code == Code.SUCCESS else None
    return RouteResponse(cmd.code, cmd.remark, route)


__all__: Sequence[str] = [
    "LANGUAGE_CODES",
    "MAGIC",
    "MAGIC_V2",
    "MAX_FRAME",
    "BatchMessage",
    "BrokerData",
    "CheckTransactionRequest",
    "ConsumerData",
    "FrameDecoder",
    "MaxOffsetResponse",
    "ProtocolError",
    "PullResponse",
    "QueryMessageResponse",
    "QueueData",
    "RemotingCommand",
    "Reply",
    "RequestCode",
    "RouteResponse",
    "SendMessageHeader",
    "SendResponse",
    "TopicRoute",
    "ViewMessageResponse",
    "WireRecord",
    "WireViolation",
    "check_transaction_state_request",
    "consumer_send_msg_back_request",
    "decode_batch_body",
    "decode_frame",
    "decode_record",
    "decode_records",
    "describe_frame",
    "encode_batch_body",
    "encode_frame",
    "encode_record",
    "end_transaction_request",
    "get_max_offset_request",
    "get_route_request",
    "heartbeat_body",
    "heartbeat_request",
    "iter_frames",
    "json_string",
    "judged",
    "make_record",
    "offset_msg_id",
    "parse_check_transaction_request",
    "parse_max_offset_response",
    "parse_offset_msg_id",
    "parse_pull_response",
    "parse_query_message_response",
    "parse_reply",
    "parse_route",
    "parse_route_response",
    "parse_send_response",
    "parse_view_message_response",
    "pull_message_request",
    "query_message_request",
    "record_from_reference",
    "response_for",
    "send_batch_request",
    "send_message_request",
    "to_json",
    "view_message_request",
]

"""A short probe of a broker's wire, judged frame by frame by ``wirecheck`` (spec/wire.md).

``probe(host, port)`` opens one connection and makes the exchanges every wire rule speaks of: a
HEART_BEAT that registers a producer group, sends with the long (10) and the one-letter (310) header
names and a batch (320), a pull, a VIEW and a QUERY, an unknown request code, a one-way request, a half
message whose CHECK_TRANSACTION_STATE it waits for, and END_TRANSACTION both UNKNOW (no answer) and
COMMIT. It keeps the raw bytes of every request and answer and of every request the broker started,
and returns ``wirecheck``'s findings, each naming its rule. It builds its frames with a few lines of
its own (a JSON header and a body), not with the remoting adapter's codec, so a bug shared by that codec
and a broker does not hide.

``FaultProxy`` sits between a client and a broker and rewrites frames on the way (a ``WireFault``):
the wire mutants of ``mutants.py`` are the served reference seen through one. Nothing here raises on
what a broker sends: a frame that cannot be read is a finding.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import attrs

from rmqspec.reference.config import BrokerConfig

from .wirecheck import WireFinding, check_broker_request, check_exchange, parse_frame

# A broker configured so that the probe sees a check within a second: the kill matrix serves the
# reference (and the wire mutants) with it.
PROBE_CONFIG = BrokerConfig(
    "1s 2s 3s", transaction_timeout_ms=200, transaction_check_interval_ms=300, transaction_check_max=5
)
PROBE_GROUP = "PG_rmqspec_probe"
CONSUMER_GROUP = "CG_rmqspec_probe"
_MAGIC = -626843481


def encode(code: int, ext: dict[str, str], body: bytes = b"", *, opaque: int, flag: int = 0) -> bytes:
    """A remoting frame with a JSON header (facts §8 "Frame")."""
    header = {
        "code": code,
        "language": "JAVA",
        "version": 409,
        "opaque": opaque,
        "flag": flag,
        "extFields": ext,
    }
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


def _props(**kv: str) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in kv.items())


def _batch_body(messages: list[tuple[bytes, str]]) -> bytes:
    """SEND_BATCH_MESSAGE's body: TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLEN, BODY, PROPLEN, PROPS each."""
    out = b""
    for body, props in messages:
        p = props.encode("utf-8")
        size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(p)
        crc = zlib.crc32(body) & 0x7FFFFFFF
        out += struct.pack(">iiiii", size, _MAGIC, crc, 0, len(body)) + body + struct.pack(">h", len(p)) + p
    return out


@attrs.frozen
class ProbeResult:
    findings: tuple[WireFinding, ...]
    exchanges: int  # requests made (and judged)
    broker_requests: int  # requests the broker started (checks), judged too

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.rule for f in self.findings))


class _Connection:
    """One client connection: send a frame, read frames by their length prefix, keep what the broker
    started on its own."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.buffer = b""
        self.started: list[bytes] = []  # requests the broker sent on its own
        self.opaque = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def next_opaque(self) -> int:
        self.opaque += 1
        return self.opaque

    def _read_frame(self, deadline: float) -> bytes | None:
        want: int | None = None
        while True:
            if want is None and len(self.buffer) >= 4:
                want = 4 + struct.unpack(">i", self.buffer[:4])[0]
            if want is not None and len(self.buffer) >= want:
                frame, self.buffer = self.buffer[:want], self.buffer[want:]
                return frame
            left = deadline - time.monotonic()
            if left <= 0:
                if self.buffer:  # a frame whose length prefix promised more than came
                    frame, self.buffer = self.buffer, b""
                    return frame
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                frame, self.buffer = self.buffer, b""
                return frame or None
            self.buffer += chunk

    def answer(self, wait_s: float) -> bytes | None:
        """The next frame that is not a request the broker started, within ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            frame = self._read_frame(deadline)
            if frame is None:
                return None
            parsed = parse_frame(frame)
            if (
                not isinstance(parsed, WireFinding)
                and not parsed.flag & 1
                and parsed.header.get("code") == 39
            ):
                self.started.append(frame)
                continue
            return frame

    def wait_started(self, code: int, wait_s: float) -> bytes | None:
        deadline = time.monotonic() + wait_s
        while True:
            for seen in self.started:
                parsed = parse_frame(seen)
                if not isinstance(parsed, WireFinding) and parsed.header.get("code") == code:
                    return seen
            frame = self._read_frame(deadline)
            if frame is None:
                return None
            read = parse_frame(frame)
            if not isinstance(read, WireFinding) and not read.flag & 1:
                self.started.append(frame)


def probe(host: str, port: int, *, timeout_s: float = 3.0, check_wait_s: float = 5.0) -> ProbeResult:
    """Make the probe's exchanges with the broker at ``host:port``; judge every frame.

    ``check_wait_s``: how long to wait for the check of the half message (its transactionTimeOut plus
    one transactionCheckInterval, on the broker's settings).
    """
    findings: list[WireFinding] = []
    exchanges = 0
    try:
        conn = _Connection(host, port, timeout_s)
    except OSError as e:
        return ProbeResult((WireFinding("wire/frame", f"cannot connect to {host}:{port}: {e}"),), 0, 0)
    now = str(int(time.time() * 1000))
    run = f"{int(time.time() * 1000) % 10**9:09d}"
    topic = f"WireProbe{run}"

    def ask(
        code: int, ext: dict[str, str], body: bytes = b"", *, oneway: bool = False, wait: float | None = None
    ) -> dict[str, Any] | None:
        nonlocal exchanges
        exchanges += 1
        request = encode(code, ext, body, opaque=conn.next_opaque(), flag=2 if oneway else 0)
        try:
            conn.sock.sendall(request)
        except OSError as e:
            findings.append(WireFinding("wire/request-response", f"request code {code}: cannot send: {e}"))
            return None
        answer = conn.answer(wait if wait is not None else (0.3 if oneway else timeout_s))
        findings.extend(check_exchange(request, answer))
        parsed = parse_frame(answer) if answer is not None else None
        if parsed is None or isinstance(parsed, WireFinding):
            return None
        return {"code": parsed.header.get("code"), "ext": parsed.ext, "body": parsed.body}

    try:
        heartbeat = {
            "clientID": f"rmqspec-probe-{run}",
            "producerDataSet": [{"groupName": PROBE_GROUP}],
            "consumerDataSet": [],
        }
        ask(34, {}, json.dumps(heartbeat).encode())
        long_names = {
            "producerGroup": PROBE_GROUP,
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": now,
            "flag": "0",
            "properties": _props(UNIQ_KEY=f"{run}A".rjust(32, "0"), WAIT="true"),
            "reconsumeTimes": "0",
            "unitMode": "false",
            "batch": "false",
        }
        sent = ask(10, long_names, b"probe-long-names")

        def v2(props: str, sys_flag: int = 0, batch: bool = False) -> dict[str, str]:
            return {
                "a": PROBE_GROUP,
                "b": topic,
                "c": "TBW102",
                "d": "4",
                "e": "0",
                "f": str(sys_flag),
                "g": now,
                "h": "0",
                "i": props,
                "j": "0",
                "k": "false",
                "m": "true" if batch else "false",
            }

        ask(310, v2(_props(UNIQ_KEY=f"{run}B".rjust(32, "0"), WAIT="true")), b"probe-short-names")
        batch = _batch_body(
            [
                (b"probe-batch-1", _props(UNIQ_KEY=f"{run}C".rjust(32, "0"))),
                (b"probe-batch-2", _props(UNIQ_KEY=f"{run}D".rjust(32, "0"))),
            ]
        )
        ask(320, v2("", batch=True), batch)
        pull = {
            "consumerGroup": CONSUMER_GROUP,
            "topic": topic,
            "queueId": "0",
            "queueOffset": "0",
            "maxMsgNums": "32",
            "sysFlag": "4",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
            "expressionType": "TAG",
        }
        ask(11, pull)
        ask(11, dict(pull, topic=f"NoSuchTopic{run}"))
        msg_id = (sent or {}).get("ext", {}).get("msgId", "")
        if len(msg_id) >= 16:
            with contextlib.suppress(ValueError):
                ask(33, {"offset": str(int(msg_id[-16:], 16))})
        query = {
            "topic": topic,
            "key": f"{run}A".rjust(32, "0"),
            "maxNum": "32",
            "beginTimestamp": "0",
            "endTimestamp": str(2**62),
            "_UNIQUE_KEY_QUERY": "true",
        }
        ask(12, query)
        ask(9999, {})  # a code the broker does not know
        ask(34, {}, json.dumps(heartbeat).encode(), oneway=True)  # a one-way request: no answer
        half = _props(UNIQ_KEY=f"{run}E".rjust(32, "0"), WAIT="true", TRAN_MSG="true", PGROUP=PROBE_GROUP)
        ask(310, v2(half, sys_flag=4), b"probe-half")
        check = conn.wait_started(39, check_wait_s)
        if check is None:
            findings.append(
                WireFinding(
                    "wire/check-request",
                    f"no CHECK_TRANSACTION_STATE within {check_wait_s:.1f} s of the half message",
                )
            )
        else:
            parsed = parse_frame(check)
            ext = {} if isinstance(parsed, WireFinding) else parsed.ext
            end = {
                "producerGroup": PROBE_GROUP,
                "tranStateTableOffset": ext.get("tranStateTableOffset", "0"),
                "commitLogOffset": ext.get("commitLogOffset", "0"),
                "fromTransactionCheck": "true",
                "msgId": ext.get("msgId", ""),
                "transactionId": ext.get("transactionId", ""),
            }
            ask(37, dict(end, commitOrRollback="0"), wait=0.3)  # UNKNOW: no answer
            ask(37, dict(end, commitOrRollback="8"))
        for frame in conn.started:
            findings.extend(check_broker_request(frame))
        return ProbeResult(tuple(findings), exchanges, len(conn.started))
    finally:
        conn.close()


# --- faults on the wire -------------------------------------------------------------------------------


@attrs.frozen
class WireFault:
    """A rewrite of the frames between a client and a broker.

    ``to_broker(frame)`` gives what reaches the broker (None: nothing) and what the client gets back at
    once (None: nothing); ``to_client(frame)`` gives what reaches the client of a frame the broker sent.
    """

    to_client: Callable[[bytes], bytes] = lambda f: f
    to_broker: Callable[[bytes], tuple[bytes | None, bytes | None]] = lambda f: (f, None)


def rewrite_header(frame: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    """The frame with its JSON header changed (a frame that is not one passes unchanged)."""
    parsed = parse_frame(frame)
    if isinstance(parsed, WireFinding):
        return frame
    header = dict(parsed.header)
    change(header)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return struct.pack(">ii", 4 + len(raw) + len(parsed.body), len(raw)) + raw + parsed.body


def rewrite_body(frame: bytes, change: Callable[[dict[str, Any], bytes], bytes]) -> bytes:
    parsed = parse_frame(frame)
    if isinstance(parsed, WireFinding):
        return frame
    body = change(parsed.header, parsed.body)
    raw = json.dumps(parsed.header, separators=(",", ":")).encode("utf-8")
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


class FaultProxy:
    """``with FaultProxy(host, port, fault) as (host, port)``: a loopback port that forwards to the
    broker, frame by frame, through ``fault``."""

    def __init__(self, host: str, port: int, fault: WireFault) -> None:
        self.upstream = (host, port)
        self.fault = fault
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> tuple[str, int]:
        t = threading.Thread(target=self._accept, name="rmqspec-fault-proxy", daemon=True)
        t.start()
        self.threads.append(t)
        host, port = self.server.getsockname()[:2]
        return str(host), int(port)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self.server.close()
        for t in self.threads:
            t.join(2)

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                broker = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            lock = threading.Lock()
            for src, dst, way in ((client, broker, "up"), (broker, client, "down")):
                t = threading.Thread(target=self._pump, args=(src, dst, client, lock, way), daemon=True)
                t.start()
                self.threads.append(t)

    def _pump(
        self, src: socket.socket, dst: socket.socket, client: socket.socket, lock: threading.Lock, way: str
    ) -> None:
        src.settimeout(0.2)
        buffer = b""
        try:
            while not self.stop.is_set():
                frames, buffer = _split(buffer)
                for frame in frames:
                    if way == "up":
                        onward, back = self.fault.to_broker(frame)
                        if onward is not None:
                            dst.sendall(onward)
                        if back is not None:
                            with lock:
                                client.sendall(back)
                    else:
                        with lock:
                            dst.sendall(self.fault.to_client(frame))
                try:
                    chunk = src.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                buffer += chunk
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def _split(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The whole frames at the start of ``buffer``, and what is left after them."""
    frames = []
    while len(buffer) >= 4:
        want = 4 + struct.unpack(">i", buffer[:4])[0]
        if len(buffer) < want:
            break
        frames.append(buffer[:want])
        buffer = buffer[want:]
    return frames, buffer

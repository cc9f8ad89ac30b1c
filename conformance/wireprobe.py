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

from .wirecheck import SEND_CODES, WireFinding, check_broker_request, check_exchange, parse_frame, show

# A broker configured so that the probe sees a check within a second: the kill matrix serves the
# reference (and the wire mutants) with it.
PROBE_CONFIG = BrokerConfig(
    "1s 2s 3s", transaction_timeout_ms=200, transaction_check_interval_ms=300, transaction_check_max=5
)
PROBE_GROUP = "PG_rmqspec_probe"
CONSUMER_GROUP = "CG_rmqspec_probe"
_MAGIC = -626843481


def encode(code: int, ext: dict[str, str], body: bytes = b"", *, opaque: int, flag: int = 0) -> bytes:
    """A remoting frame with a JSON header (facts §8 "Frame"), with every field Apache's Java client writes
    in it: RemotingSerializable.encode (fastjson) of RemotingCommand writes code, extFields, flag, language,
    opaque, serializeTypeCurrentRPC and version (remark only when set), in that (sorted) order. A strict
    broker closes the connection on a header without serializeTypeCurrentRPC."""
    header = {
        "code": code,
        "extFields": ext,
        "flag": flag,
        "language": "JAVA",
        "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": 409,
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
    started_ms: int = 0  # when it began (epoch ms)
    seconds: float = 0.0
    # Why the probe stopped before its end (None: it ran to the end): the broker stopped answering, so a
    # request it did not answer says nothing about the rule of that request.
    stopped: str | None = None

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.rule for f in self.findings))

    def diagnoses(self) -> tuple[Diagnosis, ...]:
        """The findings named once per rule, in the order they showed."""
        return diagnose(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "exchanges": self.exchanges,
            "broker_requests": self.broker_requests,
            "stopped": self.stopped,
            "seconds": round(self.seconds, 3),
            "diagnoses": [d.to_json() for d in self.diagnoses()],
            "findings": [attrs.asdict(f) for f in self.findings],
        }


# The requests the probe makes, by code: what a report calls them.
REQUEST_NAMES: dict[int, str] = {
    10: "SEND_MESSAGE",
    310: "SEND_MESSAGE_V2",
    320: "SEND_BATCH_MESSAGE",
    11: "PULL_MESSAGE",
    12: "QUERY_MESSAGE",
    30: "GET_MAX_OFFSET",
    33: "VIEW_MESSAGE_BY_ID",
    34: "HEART_BEAT",
    36: "CONSUMER_SEND_MSG_BACK",
    37: "END_TRANSACTION",
    39: "CHECK_TRANSACTION_STATE",
}


@attrs.frozen
class Diagnosis:
    """A protocol failure named once: its rule, one line that says it, and the requests it concerns
    (``codes`` empty: every request, as a frame or a header the broker cannot read)."""

    rule: str
    line: str
    codes: tuple[int, ...]
    findings: int
    frame: str | None = None

    @property
    def every_request(self) -> bool:
        return not self.codes

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "line": self.line,
            "requests": "every request" if self.every_request else [_request(c) for c in self.codes],
            "findings": self.findings,
            "frame": self.frame,
        }


def _request(code: int) -> str:
    return REQUEST_NAMES.get(code, f"request code {code}")


def diagnose(findings: tuple[WireFinding, ...]) -> tuple[Diagnosis, ...]:
    """Group findings by rule: one diagnosis each, its line the first finding's message and where else
    the same rule broke. A finding of no particular request (a frame, a header no request can use)
    concerns every request."""
    by_rule: dict[str, list[WireFinding]] = {}
    for f in findings:
        by_rule.setdefault(f.rule, []).append(f)
    out = []
    for rule, group in by_rule.items():
        every = any(f.code is None for f in group)
        codes = () if every else tuple(dict.fromkeys(f.code for f in group if f.code is not None))
        line = group[0].message
        if len(group) > 1:
            where = "every request" if every else ", ".join(_request(c) for c in codes)
            line += f" (and {len(group) - 1} more finding(s) of this rule; on {where})"
        out.append(Diagnosis(rule, line, codes, len(group), next((f.frame for f in group if f.frame), None)))
    return tuple(out)


class _Connection:
    """One client connection: send a frame, read frames by their length prefix, keep what the broker
    started on its own."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.buffer = b""
        self.started: list[bytes] = []  # requests the broker sent on its own
        self.opaque = 0
        self.seen_bytes = False  # the peer sent something
        self.closed = False  # the peer closed the connection

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def alive(self) -> bool:
        """Whether the peer has sent anything on this connection that is still open."""
        return self.seen_bytes and not self.closed

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
                self.closed = True
                frame, self.buffer = self.buffer, b""
                return frame or None
            self.seen_bytes = True
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


# Requests the probe makes whose well-formed header no broker refuses with SYSTEM_ERROR (the reference never
# does): such an answer means the broker could not read the header (wire/request-response: "a request
# whose processing throws (a header the processor cannot use) is answered SYSTEM_ERROR").
_HEADER_READ = {10: "SEND_MESSAGE", 310: "SEND_MESSAGE_V2", 320: "SEND_BATCH_MESSAGE", 11: "PULL_MESSAGE"}


def _upper_camel(ext: dict[str, str]) -> dict[str, str]:
    return {k[:1].upper() + k[1:]: v for k, v in ext.items()}


def probe(host: str, port: int, *, timeout_s: float = 3.0, check_wait_s: float = 5.0) -> ProbeResult:
    """Make the probe's exchanges with the broker at ``host:port``; judge every frame.

    ``check_wait_s``: how long to wait for the check of the half message (its transactionTimeOut plus
    one transactionCheckInterval, on the broker's settings). A broker that answers nothing at all is one
    finding, and the rest is not tried; one that refuses well-formed headers with SYSTEM_ERROR is one
    finding (wire/send-headers) that says so, and whether the same request with its keys in UpperCamel
    was read; exchanges that need an earlier one to have worked (the check of a half message that was
    not stored) are left out rather than reported as findings of their own.
    """
    start = time.time()
    result = _probe(host, port, timeout_s, check_wait_s)
    return attrs.evolve(result, started_ms=int(start * 1000), seconds=time.time() - start)


def _probe(host: str, port: int, timeout_s: float, check_wait_s: float) -> ProbeResult:
    findings: list[WireFinding] = []
    exchanges = 0
    try:
        conn = _Connection(host, port, timeout_s)
    except OSError as e:
        return ProbeResult((WireFinding("wire/frame", f"cannot connect to {host}:{port}: {e}"),), 0, 0)
    now = str(int(time.time() * 1000))
    run = f"{int(time.time() * 1000) % 10**9:09d}"
    topic = f"WireProbe{run}"
    refused: list[tuple[int, str]] = []  # (request code, remark) of well-formed headers answered SYSTEM_ERROR
    heartbeat = {
        "clientID": f"rmqspec-probe-{run}",
        "producerDataSet": [{"groupName": PROBE_GROUP}],
        "consumerDataSet": [],
    }

    def answers() -> bool:
        """Whether the broker still answers a HEART_BEAT on this connection."""
        request = encode(34, {}, json.dumps(heartbeat).encode(), opaque=conn.next_opaque())
        try:
            conn.sock.sendall(request)
        except OSError:
            return False
        return conn.answer(timeout_s) is not None

    def reopen(code: int) -> None:
        """A new connection after the broker closed one on request ``code``; it registers the producer group
        again (a check goes to a connection of the group). Raises _Closing if that one is closed too."""
        nonlocal conn
        started, opaque = conn.started, conn.opaque
        conn.close()
        try:
            conn = _Connection(host, port, timeout_s)
        except OSError as e:
            raise _Closing(f"after the broker closed the connection on request code {code}: {e}") from None
        conn.started, conn.opaque = started, opaque
        with contextlib.suppress(OSError):
            conn.sock.sendall(encode(34, {}, json.dumps(heartbeat).encode(), opaque=conn.next_opaque()))
        if conn.answer(timeout_s) is None and conn.closed:
            raise _Closing(
                f"the broker also closed a new connection on its first HEART_BEAT (after code {code})"
            )

    def ask(
        code: int,
        ext: dict[str, str],
        body: bytes = b"",
        *,
        oneway: bool = False,
        wait: float | None = None,
        judge: bool = True,
    ) -> dict[str, Any] | None:
        nonlocal exchanges
        exchanges += 1
        request = encode(code, ext, body, opaque=conn.next_opaque(), flag=2 if oneway else 0)
        try:
            conn.sock.sendall(request)
        except OSError as e:
            findings.append(
                WireFinding("wire/request-response", f"request code {code}: cannot send: {e}", code=code)
            )
            return None
        answer = conn.answer(wait if wait is not None else (0.3 if oneway else timeout_s))
        if answer is None and conn.closed:
            # Not "no answer": the broker closed the connection on this frame. A finding that shows the
            # frame; the probe goes on over a new connection (the frames after it are judged too).
            findings.append(
                WireFinding(
                    "wire/request-response",
                    f"request code {code}: the broker closed the connection on this request without answering"
                    " it (the frame shown is the request)",
                    code=code,
                    frame=show(request),
                )
            )
            reopen(code)
            return None
        found = check_exchange(request, answer) if judge else []
        if answer is None and found and not answers():
            # Not this request's fault: the broker answers nothing any more. Nothing after is judged.
            raise _Stopped(
                f"no answer to request code {code} within {timeout_s:g} s, nor to a HEART_BEAT after it"
            )
        findings.extend(found)
        parsed = parse_frame(answer) if answer is not None else None
        if parsed is None or isinstance(parsed, WireFinding):
            return None
        out = {
            "code": parsed.header.get("code"),
            "ext": parsed.ext,
            "body": parsed.body,
            "remark": parsed.header.get("remark"),
        }
        if judge and code in _HEADER_READ and out["code"] == 1:
            refused.append((code, str(parsed.header.get("remark") or "")))
        return out

    try:
        if ask(34, {}, json.dumps(heartbeat).encode()) is None and not conn.alive():
            return ProbeResult(tuple(findings), exchanges, 0)  # no frame, closed: the rest would only wait
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
        stored = ask(310, v2(half, sys_flag=4), b"probe-half")
        if any(code in SEND_CODES for code, _ in refused):  # sends refused: the header, not one request
            findings.append(_header_finding(refused, ask, long_names, run))
        else:
            decoding = _decoding_finding(ask, long_names, v2, run)
            if decoding is not None:
                findings.append(decoding)
        if stored is None or stored.get("code") != 0:
            pass  # no half message stored: there is nothing to check, and nothing to end
        elif (check := conn.wait_started(39, check_wait_s)) is None:
            if not answers():  # a check that never came is evidence only while the broker answers
                raise _Stopped(f"no CHECK_TRANSACTION_STATE within {check_wait_s:.1f} s, nor an answer after")
            findings.append(
                WireFinding(
                    "wire/check-request",
                    f"no CHECK_TRANSACTION_STATE within {check_wait_s:.1f} s of the half message",
                    code=39,
                )
            )
            # END_TRANSACTION is still judged: a commit of the half message by its send's offsets.
            ext = stored.get("ext", {})
            half_id = str(ext.get("msgId", ""))
            if len(half_id) >= 16 and str(ext.get("queueOffset", "")).isdigit():
                end = {
                    "producerGroup": PROBE_GROUP,
                    "tranStateTableOffset": str(ext["queueOffset"]),
                    "commitLogOffset": str(int(half_id[-16:], 16)) if _is_hex(half_id[-16:]) else "0",
                    "fromTransactionCheck": "false",
                    "msgId": half_id,
                    "transactionId": f"{run}E".rjust(32, "0"),
                    "commitOrRollback": "8",
                }
                ask(37, end)
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
    except _Stopped as e:
        return ProbeResult(tuple(findings), exchanges, len(conn.started), stopped=str(e))
    except _Closing:
        # The broker closes every connection: the finding naming the frame is the verdict; nothing more
        # can be exchanged, and nothing is left unjudged for a reason other than that finding.
        return ProbeResult(tuple(findings), exchanges, len(conn.started))
    finally:
        conn.close()


class _Stopped(Exception):
    """The broker stopped answering during the probe."""


class _Closing(Exception):
    """The broker closed the connection on a request (a finding says which) and then a new one too."""


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def _header_finding(
    refused: list[tuple[int, str]],
    ask: Callable[..., dict[str, Any] | None],
    long_names: dict[str, str],
    run: str,
) -> WireFinding:
    """One finding for well-formed headers answered SYSTEM_ERROR, and what the broker reads instead: the
    same SEND_MESSAGE with its keys in UpperCamel (``ProducerGroup``, ``Topic``, ...)."""
    names = ", ".join(dict.fromkeys(_HEADER_READ[code] for code, _ in refused))
    remark = refused[0][1].strip().splitlines()[0] if refused[0][1].strip() else "no remark"
    text = f"requests with the header keys RocketMQ names were answered SYSTEM_ERROR ({names}: {remark!r})"
    upper = dict(long_names, properties=_props(UNIQ_KEY=f"{run}F".rjust(32, "0"), WAIT="true"))
    retried = ask(10, _upper_camel(upper), b"probe-upper-camel", judge=False)  # a diagnosis, not judged
    if retried is not None and retried.get("code") == 0:
        text += (
            "; the same SEND_MESSAGE with its keys in UpperCamel (ProducerGroup, Topic, ...) was stored: "
            "the broker reads header keys in UpperCamel, not as RocketMQ names them (producerGroup, topic, "
            "a, b, ...)"
        )
    else:
        text += ": the broker does not read the request header"
    return WireFinding("wire/send-headers", text)


# How many times the decoding probe sends each spelling of one message.
DECODE_TRIES = 3
# Answers that say the broker is busy or its store slow, not what it read: SYSTEM_BUSY, FLUSH_DISK_TIMEOUT,
# SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT, SERVICE_NOT_AVAILABLE (ResponseCode, 4.9.x and 5.x).
TRANSIENT_CODES = frozenset({2, 10, 11, 12, 14})


def _decoding_finding(
    ask: Callable[..., dict[str, Any] | None],
    long_names: dict[str, str],
    v2: Callable[[str], dict[str, str]],
    run: str,
) -> WireFinding | None:
    """Header decoding probed directly, whatever the answers were: the same message sent several times
    as SEND_MESSAGE (the keys as RocketMQ names them: ``producerGroup``, ``topic``, ...), as
    SEND_MESSAGE_V2 (its short keys ``a``, ``b``, ...) and with the long keys in UpperCamel. A broker
    that reads its headers answers every copy of one spelling alike and stores both of RocketMQ's; a
    finding when identical requests are answered differently (decoding that depends on something else,
    such as a map's order), or when one of RocketMQ's spellings is stored and the other refused. Not
    judged as exchanges of their own: this is a diagnosis of the header, said once."""
    answers: dict[str, list[tuple[int, str]]] = {"SEND_MESSAGE": [], "SEND_MESSAGE_V2": []}
    for i in range(DECODE_TRIES):
        uniq = _props(UNIQ_KEY=f"{run}L{i}".rjust(32, "0"), WAIT="true")
        for name, code, ext in (
            ("SEND_MESSAGE", 10, dict(long_names, properties=uniq)),
            ("SEND_MESSAGE_V2", 310, v2(_props(UNIQ_KEY=f"{run}S{i}".rjust(32, "0"), WAIT="true"))),
        ):
            answer = ask(code, ext, b"probe-decoding", judge=False)
            if answer is None:
                return None  # unanswered: the frame checks say so; nothing to tell about decoding
            code_got = int(answer.get("code", -1))
            if code_got not in TRANSIENT_CODES:  # a busy broker says nothing about its decoding
                answers[name].append((code_got, _remark(answer)))
    said: list[str] = []
    for name, got in answers.items():
        codes = [c for c, _ in got]
        if len(set(codes)) > 1:
            said.append(
                f"the same {name} sent {len(got)} times was answered {_codes(got)}: its decoding depends on "
                "something other than the request (such as the order of a map's keys)"
            )
    long_ok = any(c == 0 for c, _ in answers["SEND_MESSAGE"])
    short_ok = any(c == 0 for c, _ in answers["SEND_MESSAGE_V2"])
    if long_ok != short_ok:
        bad = "SEND_MESSAGE_V2" if long_ok else "SEND_MESSAGE"
        keys = "a, b, c, ..." if bad == "SEND_MESSAGE_V2" else "producerGroup, topic, ..."
        said.append(
            f"{bad} (keys {keys}) was answered {_codes(answers[bad])} where the same message in the other "
            "spelling RocketMQ's clients use was stored"
        )
    if not long_ok and not short_ok:
        upper = dict(long_names, properties=_props(UNIQ_KEY=f"{run}U".rjust(32, "0"), WAIT="true"))
        retried = ask(10, _upper_camel(upper), b"probe-upper-camel", judge=False)
        if retried is not None and retried.get("code") == 0:
            said.append(
                f"every send as RocketMQ's clients spell it was answered {_codes(answers['SEND_MESSAGE'])}, "
                "and the same SEND_MESSAGE with its keys in UpperCamel (ProducerGroup, Topic, ...) was stored"
            )
    if not said:
        return None
    return WireFinding(
        "wire/send-headers",
        "the broker does not read request header keys as RocketMQ's clients write them: " + "; ".join(said),
    )


def _remark(answer: dict[str, Any]) -> str:
    return str(answer.get("remark") or "")


def _codes(got: list[tuple[int, str]]) -> str:
    seen = dict.fromkeys(f"{c}" + (f" ({r.strip().splitlines()[0]!r})" if r.strip() else "") for c, r in got)
    return ", ".join(seen)


# --- faults on the wire -------------------------------------------------------------------------------


@attrs.frozen
class WireFault:
    """A rewrite of the frames between a client and a broker.

    ``to_broker(frame)`` gives what reaches the broker (None: nothing) and what the client gets back at
    once (None: nothing); ``to_client(frame)`` gives what reaches the client of a frame the broker sent.
    """

    to_client: Callable[[bytes], bytes | None] = lambda f: f  # None: the frame never reaches the client
    to_broker: Callable[[bytes], tuple[bytes | None, bytes | None]] = lambda f: (f, None)


# What a FaultProxy is given: one fault for every connection, or a factory of one per connection (a fault
# that keeps state about a connection's requests, such as the opaques of the ones it must not answer).
Faulty = WireFault | Callable[[], WireFault]


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
    """``with FaultProxy(host, port, fault) as (host, port)``: a port (loopback, any free one unless
    ``listen`` says) that forwards to the broker, frame by frame, through ``fault`` (a ``WireFault``, or a
    factory that makes one for each connection)."""

    def __init__(
        self, host: str, port: int, fault: Faulty, *, listen: tuple[str, int] = ("127.0.0.1", 0)
    ) -> None:
        self.upstream = (host, port)
        self.fault = fault
        self.server = socket.create_server(listen)
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
            fault = self.fault if isinstance(self.fault, WireFault) else self.fault()
            for src, dst, way in ((client, broker, "up"), (broker, client, "down")):
                t = threading.Thread(
                    target=self._pump, args=(src, dst, client, lock, way, fault), daemon=True
                )
                t.start()
                self.threads.append(t)

    def _pump(
        self,
        src: socket.socket,
        dst: socket.socket,
        client: socket.socket,
        lock: threading.Lock,
        way: str,
        fault: WireFault,
    ) -> None:
        src.settimeout(0.2)
        buffer = b""
        try:
            while not self.stop.is_set():
                frames, buffer = _split(buffer)
                for frame in frames:
                    if way == "up":
                        onward, back = fault.to_broker(frame)
                        if onward is not None:
                            dst.sendall(onward)
                        if back is not None:
                            with lock:
                                client.sendall(back)
                    else:
                        out = fault.to_client(frame)
                        if out is not None:
                            with lock:
                                dst.sendall(out)
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

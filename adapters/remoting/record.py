"""Record wire vectors: a fixed script of exchanges with a running broker, every frame kept byte for byte.

``record(host, port, ...)`` drives one connection through sends (plain, delayed, half, batch), pulls (found,
not found, unknown topic, bad queue), send-back (retry and DLQ), END_TRANSACTION (commit, rollback, wrong
group, and the answer to a check), VIEW_MESSAGE_BY_ID, QUERY_MESSAGE, GET_MAX_OFFSET and HEART_BEAT, and
waits for one CHECK_TRANSACTION_STATE the broker starts itself. It returns the kept frames as ``Vector``
values; ``write_jsonl`` writes them in the format of tests/vectors/README.md (one JSON object a line:
case, description, direction, frame_hex, header, body_hex, notes).

Exchanges that only wait for the broker (polling a max offset until a message is visible, the clean-up of a
half message) go over the same connection but are not kept, so ``opaque`` values have gaps.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs

from rmqspec.reference.constants import Prop

from .client import RemotingClient
from .codec import (
    FLAG_RESPONSE,
    BatchMessage,
    RemotingCommand,
    WireRecord,
    decode_records,
    parse_check_transaction_request,
    parse_offset_msg_id,
)

PG = "PG_wire"
PG_TX = "PG_wire_tx"
CG = "CG_wire"
TOPIC = "WireTopic"
DELAY_TOPIC = "WireDelayTopic"
BATCH_TOPIC = "WireBatchTopic"
TX_TOPIC = "WireTxTopic"
# Codes whose response body is stored records, and the request codes of those responses.
_RECORD_BODIES = {11, 12, 33}


class RecordError(RuntimeError):
    """The broker did not do what the script needs next (a message never became visible, no check came)."""


@attrs.frozen
class Vector:
    case: str
    description: str
    direction: str  # request, response or broker-request
    frame: bytes
    header: dict[str, object]
    body: bytes
    notes: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "case": self.case,
            "description": self.description,
            "direction": self.direction,
            "frame_hex": self.frame.hex(),
            "header": self.header,
            "body_hex": self.body.hex(),
        }
        if self.notes:
            out["notes"] = self.notes
        return out


def _header_json(frame: bytes) -> dict[str, object]:
    header_len = int.from_bytes(frame[5:8], "big")
    value = json.loads(frame[8 : 8 + header_len].decode("utf-8"))
    if not isinstance(value, dict):
        raise RecordError("a frame's header is not a JSON object")
    return value


def summarize(records: list[WireRecord]) -> str:
    """A one-line account of stored records, for a vector's notes."""
    parts = []
    for r in records:
        props = json.dumps(dict(r.properties), ensure_ascii=False)
        body = r.body.decode("utf-8", "replace")
        parts.append(
            f"topic={r.topic} queueId={r.queue_id} queueOffset={r.queue_offset} "
            f"commitLogOffset={r.commit_log_offset} sysFlag={r.sys_flag} reconsumeTimes={r.reconsume_times} "
            f"preparedTransactionOffset={r.prepared_transaction_offset} body={json.dumps(body)} "
            f"properties={props}"
        )
    return f"{len(records)} stored record(s): " + " | ".join(parts)


def uniq_key() -> str:
    return os.urandom(16).hex().upper()


class Recorder:
    """Keeps every frame of one connection (through the client's tap) and the ones the script names."""

    def __init__(self) -> None:
        self.sent: dict[int, tuple[bytes, RemotingCommand]] = {}
        self.responses: dict[int, tuple[bytes, RemotingCommand]] = {}
        self.broker_requests: list[tuple[bytes, RemotingCommand]] = []
        self.last_opaque = 0
        self.vectors: list[Vector] = []

    def tap(self, direction: str, frame: bytes, cmd: RemotingCommand) -> None:
        if direction == "sent":
            if not cmd.flag & FLAG_RESPONSE:
                self.sent[cmd.opaque] = (frame, cmd)
                self.last_opaque = cmd.opaque
        elif cmd.is_response:
            self.responses[cmd.opaque] = (frame, cmd)
        else:
            self.broker_requests.append((frame, cmd))

    def _vector(
        self,
        case: str,
        description: str,
        direction: str,
        frame: bytes,
        cmd: RemotingCommand,
        notes: str | None,
    ) -> Vector:
        auto = None
        if direction != "request" and cmd.body and (cmd.code == 0 or direction == "broker-request"):
            request = self.sent.get(cmd.opaque)
            if direction == "broker-request" or (request is not None and request[1].code in _RECORD_BODIES):
                try:
                    auto = summarize(decode_records(cmd.body))
                except ValueError as e:
                    auto = f"body does not decode as stored records: {e}"
        text = " ".join(t for t in (notes, auto) if t) or None
        return Vector(case, description, direction, frame, _header_json(frame), cmd.body, text)

    def keep(
        self,
        case: str,
        request: str,
        response: str | None = None,
        *,
        request_notes: str | None = None,
        response_notes: str | None = None,
    ) -> None:
        """Keep the last request sent (and its response, unless it was one-way) under ``case``."""
        frame, cmd = self.sent[self.last_opaque]
        self.vectors.append(self._vector(case, request, "request", frame, cmd, request_notes))
        if response is not None:
            rframe, rcmd = self.responses[cmd.opaque]
            self.vectors.append(self._vector(case, response, "response", rframe, rcmd, response_notes))

    def keep_broker_request(
        self, case: str, description: str, frame: bytes, cmd: RemotingCommand, notes: str
    ) -> None:
        self.vectors.append(self._vector(case, description, "broker-request", frame, cmd, notes))


async def _until(what: str, timeout: float, probe: Callable[[], Awaitable[bool]]) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise RecordError(f"{what} within {timeout:.0f} s")
        await asyncio.sleep(0.05)


async def _visible(c: RemotingClient, topic: str, queue: int, count: int, timeout: float = 30.0) -> None:
    async def probe() -> bool:
        r = await c.get_max_offset(topic, queue)
        return (r.offset or 0) >= count

    await _until(f"{topic} queue {queue} did not reach {count} message(s)", timeout, probe)


def _clo(msg_id: str) -> int:
    return parse_offset_msg_id(msg_id)[2]


async def _script(
    c: RemotingClient, rec: Recorder, checks: asyncio.Queue[RemotingCommand], check_wait: float
) -> None:
    def props(**kv: str) -> dict[str, str]:
        return {**kv, Prop.UNIQ_KEY: uniq_key(), "WAIT": "true"}

    # plain sends and a pull of both
    p1 = {"KEYS": "k-v1", "TAGS": "tagA", Prop.UNIQ_KEY: uniq_key(), "WAIT": "true"}
    s1 = await c.send_message(PG, TOPIC, b"hello-v1", properties=p1, v2=False)
    rec.keep(
        "send_message_ok",
        "SEND_MESSAGE (10) with the long-named SendMessageRequestHeader fields, to a topic auto-created from TBW102.",
        "SUCCESS response to SEND_MESSAGE: msgId (offset message id), queueId, queueOffset.",
        request_notes="First message of a fresh broker: auto-creates WireTopic.",
    )
    s2 = await c.send_message(
        PG,
        TOPIC,
        b"hello-v2",
        properties={"KEYS": "k-v2", "TAGS": "tagB", Prop.UNIQ_KEY: uniq_key(), "WAIT": "true"},
    )
    rec.keep(
        "send_message_v2_ok",
        "SEND_MESSAGE_V2 (310) with the one-letter SendMessageRequestHeaderV2 fields.",
        "SUCCESS response to SEND_MESSAGE_V2.",
    )
    await _visible(c, TOPIC, 0, 2)
    await c.pull(CG, TOPIC, 0, 0)
    rec.keep(
        "pull_found_two",
        "PULL_MESSAGE (11) from offset 0 of WireTopic queue 0, sysFlag 4 (subscription only, no suspend).",
        "FOUND response whose body is the two stored records, concatenated as in the commit log.",
    )
    # a delayed message, before it is due
    sd = await c.send_message(PG, DELAY_TOPIC, b"hello-delay", properties=props(DELAY="2", TAGS="tagD"))
    rec.keep(
        "send_delay_level_2",
        "SEND_MESSAGE_V2 with property DELAY=2 (2 s under this broker's level table).",
        "SUCCESS response; msgId and queueOffset refer to the copy in SCHEDULE_TOPIC_XXXX queue 1.",
    )
    await c.pull(CG, DELAY_TOPIC, 0, 0)
    rec.keep(
        "pull_before_due",
        "PULL_MESSAGE from offset 0 of the delayed message's real topic, right after the send.",
        "PULL_NOT_FOUND (19) response: the real topic's queue is still empty.",
    )
    await c.view_message(_clo(sd.msg_id or ""))
    rec.keep(
        "view_message_schedule_copy",
        "VIEW_MESSAGE_BY_ID (33) with the commit-log offset taken from the delayed send's msgId.",
        "SUCCESS response whose body is the stored schedule copy (topic SCHEDULE_TOPIC_XXXX).",
    )
    # refusals
    await c.pull(CG, "NoSuchTopic", 0, 0)
    rec.keep(
        "pull_unknown_topic",
        "PULL_MESSAGE for a topic the broker does not have.",
        "TOPIC_NOT_EXIST (17) response.",
    )
    await c.pull(CG, TOPIC, 9, 0)
    rec.keep(
        "pull_queue_id_out_of_range",
        "PULL_MESSAGE with queueId 9 on a topic with fewer read queues.",
        "Error response naming the illegal queueId.",
    )
    await c.send_message(PG, TOPIC, b"bad-queue", properties=props(), queue_id=9)
    rec.keep(
        "send_queue_id_out_of_range",
        "SEND_MESSAGE_V2 with queueId 9 on a topic with fewer write queues.",
        "Error response naming the illegal queueId.",
    )
    await c.send_message(PG, "SCHEDULE_TOPIC_XXXX", b"forbidden", properties=props())
    rec.keep(
        "send_forbidden_system_topic",
        "SEND_MESSAGE_V2 straight to SCHEDULE_TOPIC_XXXX.",
        "Refusal: clients may not send to the schedule topic.",
    )
    # a batch
    batch = [
        BatchMessage(f"batch-{i}".encode(), {"KEYS": f"kb{i}", Prop.UNIQ_KEY: uniq_key(), "WAIT": "true"})
        for i in range(3)
    ]
    await c.send_batch(PG, BATCH_TOPIC, batch, properties={"WAIT": "true"})
    rec.keep(
        "send_batch_3",
        "SEND_BATCH_MESSAGE (320) with a V2 header (m=true) and a body of 3 encoded messages.",
        "SUCCESS response: msgId is the three offset message ids joined by commas.",
    )
    await _visible(c, BATCH_TOPIC, 0, 3)
    await c.pull(CG, BATCH_TOPIC, 0, 0)
    rec.keep(
        "pull_batch",
        "PULL_MESSAGE of the batch topic from offset 0.",
        "FOUND response with three stored records.",
    )
    # transactions
    await c.heartbeat([PG_TX])
    rec.keep(
        "heart_beat_producer",
        "HEART_BEAT (34) whose JSON body registers producer group PG_wire_tx for this connection.",
        "SUCCESS response to HEART_BEAT.",
    )

    async def half(body: bytes) -> tuple[str, int, int]:
        key = uniq_key()
        r = await c.send_message(
            PG_TX,
            TX_TOPIC,
            body,
            sys_flag=4,
            properties={"TRAN_MSG": "true", "PGROUP": PG_TX, Prop.UNIQ_KEY: key, "WAIT": "true"},
        )
        if r.code != 0 or r.msg_id is None or r.queue_offset is None:
            raise RecordError(f"half message refused: code {r.code} {r.remark}")
        return key, r.queue_offset, _clo(r.msg_id)

    key, qo, clo = await half(b"tx-commit")
    rec.keep(
        "send_half_message",
        "SEND_MESSAGE_V2 of a transactional half message: sysFlag 4 (PREPARED), TRAN_MSG=true, PGROUP.",
        "SUCCESS response; msgId and queueOffset refer to the record in RMQ_SYS_TRANS_HALF_TOPIC.",
    )
    await c.end_transaction(PG_TX, qo, clo, 8, msg_id=key, transaction_id=key, oneway=False)
    rec.keep(
        "end_transaction_commit",
        "END_TRANSACTION (37) commitOrRollback=8 (COMMIT) as a two-way request.",
        "SUCCESS response to the commit.",
    )
    await _visible(c, TX_TOPIC, 0, 1)
    await c.pull(CG, TX_TOPIC, 0, 0)
    rec.keep(
        "pull_committed",
        "PULL_MESSAGE of the transaction's real topic after the commit.",
        "FOUND response: the committed message, sysFlag 8, preparedTransactionOffset = the half's offset.",
    )
    key, qo, clo = await half(b"tx-rollback")
    await c.end_transaction(PG_TX, qo, clo, 12, msg_id=key, transaction_id=key, oneway=False)
    rec.keep(
        "end_transaction_rollback",
        "END_TRANSACTION commitOrRollback=12 (ROLLBACK) as a two-way request.",
        "Response to the rollback; nothing is written to the real topic.",
    )
    key, qo, clo = await half(b"tx-wrong-group")
    await c.end_transaction("PG_wire_other", qo, clo, 8, msg_id=key, transaction_id=key, oneway=False)
    rec.keep(
        "end_transaction_wrong_group",
        "END_TRANSACTION commit naming a producer group other than the half message's PGROUP.",
        "Error response: the producer group is wrong.",
    )
    await c.end_transaction(PG_TX, qo, clo, 12, msg_id=key, transaction_id=key, oneway=False)  # clean up
    # send-back: one to the retry topic, one to the DLQ
    await c.consumer_send_msg_back(
        CG,
        _clo(s1.msg_id or ""),
        delay_level=0,
        origin_msg_id=p1[Prop.UNIQ_KEY],
        origin_topic=TOPIC,
        max_reconsume_times=16,
    )
    rec.keep(
        "consumer_send_msg_back",
        "CONSUMER_SEND_MSG_BACK (36) with delayLevel 0 (the broker picks 3 + reconsumeTimes).",
        "SUCCESS response; the message goes to %RETRY%CG_wire through SCHEDULE_TOPIC_XXXX level 3.",
    )
    await c.consumer_send_msg_back(
        CG, _clo(s2.msg_id or ""), delay_level=-1, origin_topic=TOPIC, max_reconsume_times=16
    )
    rec.keep(
        "consumer_send_msg_back_dlq",
        "CONSUMER_SEND_MSG_BACK with delayLevel -1: straight to the dead-letter queue.",
        "SUCCESS response; the message is stored in %DLQ%CG_wire queue 0.",
    )
    await _visible(c, "%DLQ%" + CG, 0, 1)
    await c.pull(CG, "%DLQ%" + CG, 0, 0)
    rec.keep(
        "pull_dlq", "PULL_MESSAGE from %DLQ%CG_wire queue 0.", "FOUND response with the dead-lettered record."
    )
    await _visible(c, DELAY_TOPIC, 0, 1)
    await c.pull(CG, DELAY_TOPIC, 0, 0)
    rec.keep(
        "pull_after_due",
        "PULL_MESSAGE of the delayed message's real topic once it is due.",
        "FOUND response with the delivered record (it keeps DELAY, REAL_TOPIC and REAL_QID).",
    )
    await _visible(c, "%RETRY%" + CG, 0, 1)
    await c.pull(CG, "%RETRY%" + CG, 0, 0)
    rec.keep(
        "pull_retry",
        "PULL_MESSAGE from %RETRY%CG_wire queue 0 after the level-3 delay.",
        "FOUND response with the retry record (reconsumeTimes 1, RETRY_TOPIC, ORIGIN_MESSAGE_ID).",
    )
    # lookups
    await c.get_max_offset(TOPIC, 0)
    rec.keep(
        "get_max_offset",
        "GET_MAX_OFFSET (30) of WireTopic queue 0.",
        "SUCCESS response with extFields.offset.",
    )
    await c.view_message(_clo(s2.msg_id or ""))
    rec.keep(
        "view_message_by_id_found",
        "VIEW_MESSAGE_BY_ID (33) with the commit-log offset from SEND_MESSAGE_V2's msgId.",
        "SUCCESS response whose body is the one stored record.",
    )
    await c.view_message(1 << 40)
    rec.keep(
        "view_message_by_id_not_found",
        "VIEW_MESSAGE_BY_ID with a commit-log offset beyond the end of the commit log.",
        "Error response: no message at that offset.",
    )

    async def indexed() -> bool:
        return (await c.query_message(TOPIC, p1[Prop.UNIQ_KEY])).found

    await _until("the index never found the first message", 30.0, indexed)
    await c.query_message(TOPIC, p1[Prop.UNIQ_KEY])
    rec.keep(
        "query_message_by_uniq_key",
        "QUERY_MESSAGE (12) by UNIQ_KEY with _UNIQUE_KEY_QUERY=true.",
        "SUCCESS response with the index's update time and offset and the matching record.",
    )
    await c.query_message(TOPIC, uniq_key())
    rec.keep(
        "query_message_not_found", "QUERY_MESSAGE for a key no message has.", "QUERY_NOT_FOUND (22) response."
    )
    # a check the broker starts itself
    t_half = time.monotonic()
    await half(b"tx-checked")
    try:
        check = await asyncio.wait_for(checks.get(), check_wait)
    except TimeoutError:
        raise RecordError(
            f"no CHECK_TRANSACTION_STATE within {check_wait:.0f} s of an unresolved half message"
        ) from None
    waited = time.monotonic() - t_half
    frame = next(f for f, cmd in rec.broker_requests if cmd is check)
    req = parse_check_transaction_request(check)
    rec.keep_broker_request(
        "check_transaction_state",
        "CHECK_TRANSACTION_STATE (39) sent one-way by the broker to the registered producer connection.",
        frame,
        check,
        f"Arrived {waited:.2f} s after the half message was sent. Header offsets refer to the put-back copy.",
    )
    await c.end_transaction(
        PG_TX,
        req.tran_state_table_offset,
        req.commit_log_offset,
        8,
        msg_id=req.msg_id or "",
        transaction_id=req.transaction_id,
        from_transaction_check=True,
        oneway=True,
    )
    rec.keep(
        "end_transaction_from_check",
        "One-way END_TRANSACTION (flag 2) answering the check with COMMIT, fromTransactionCheck=true.",
    )
    await _visible(c, TX_TOPIC, 0, 2)
    await c.pull(CG, TX_TOPIC, 0, 1)
    rec.keep(
        "pull_committed_after_check",
        "PULL_MESSAGE of the transaction topic from offset 1 after the checked commit.",
        "FOUND response with the message committed through the check.",
    )


async def record_async(
    host: str, port: int, *, version: int, check_wait: float = 60.0, timeout: float = 5.0
) -> list[Vector]:
    """Run the script against the broker at ``host:port``; the kept frames, in order."""
    rec = Recorder()
    checks: asyncio.Queue[RemotingCommand] = asyncio.Queue()

    def on_request(cmd: RemotingCommand) -> None:
        if cmd.code == 39:
            checks.put_nowait(cmd)

    client = RemotingClient(
        handler=on_request, timeout=timeout, version=version, tap=rec.tap, client_id="127.0.0.1@wire-vectors"
    )
    await client.connect(host, port)
    try:
        await _script(client, rec, checks, check_wait)
    finally:
        await client.close()
    return rec.vectors


def record(host: str, port: int, *, version: int, check_wait: float = 60.0) -> list[Vector]:
    return asyncio.run(record_async(host, port, version=version, check_wait=check_wait))


def write_jsonl(vectors: list[Vector], path: Path) -> None:
    lines = [json.dumps(v.to_json(), ensure_ascii=False, separators=(",", ":")) for v in vectors]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

"""rmqspec's remoting client sends, for every request kind, every header field Apache's Java client sets.

Each typed call of ``RemotingClient`` runs against a stand-in broker on 127.0.0.1 that answers with the
recorded 4.9.4 responses; the frame the client wrote is compared with what Apache's Java client
(rocketmq-client) writes for the same request at the client's protocol version:

* the frame fields: ``language`` JAVA, ``version`` (MQVersion.CURRENT_VERSION of that client),
  ``serializeTypeCurrentRPC`` JSON, and the one-way flag where Java sends one-way;
* the set of ``extFields`` names: each expected set below is derived from the Java source at a release tag
  (path and method cited beside it). RemotingCommand.makeCustomHeaderToNet writes every non-null field of
  the header class and its superclasses (so ``bname`` of RpcRequestHeader, from 4.9.5), and primitive
  booleans always.

tests/vectors/rocketmq-4.9.4.jsonl holds frames labelled ``"language":"JAVA"``, ``"version":401``, but they
were not written by Apache's Java client (README-4.9.4.md says "the recording client"): the extFields keep
the header classes' declaration order where Java's HashMap would not, HEART_BEAT carries ``"extFields":{}``
where Java's ``createRequestCommand(HEART_BEAT, null)`` has none, END_TRANSACTION outside a check is two-way
with a ``transactionId`` where 4.9.x's producer is one-way without one (the 4.9.x broker's send response has
no transactionId, SendMessageProcessor), and a QUERY_MESSAGE by KEYS lacks ``_UNIQUE_KEY_QUERY``, which
MQClientAPIImpl.queryMessage always adds. Where their field sets agree with the Java source they are
asserted to agree, so the test uses them as a second witness.

Deliberate differences from the Java client, asserted so they cannot grow silently:
* HEART_BEAT has ``"extFields":{}`` (as 5.x's ``new HeartbeatRequestHeader()`` has; 4.x writes none);
* END_TRANSACTION outside a check carries ``transactionId`` (the half's UNIQ_KEY, as 5.x's producer sends it
  from the broker's send response; 4.9.x leaves it out);
* the remoting target sends COMMIT and ROLLBACK two-way to see the broker's answer (the Java producer
  sends every END_TRANSACTION one-way); the client sends one-way by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from rmqspec.adapters.remoting.client import RemotingClient
from rmqspec.adapters.remoting.codec import (
    BatchMessage,
    FrameDecoder,
    RemotingCommand,
    decode_frame,
    encode_frame,
)

pytestmark = [pytest.mark.wire, pytest.mark.timeout(60)]

VECTORS = Path(__file__).resolve().parent / "vectors" / "rocketmq-4.9.4.jsonl"
ROWS: list[dict[str, Any]] = [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]
BY = {(r["case"], r["direction"]): r for r in ROWS}

V494, V497, V550 = 401, 407, 513  # MQVersion.Version ordinals (common/.../MQVersion.java)

# --- the Java client's field sets, by request kind --------------------------------------------------------

# rocketmq-all-4.9.4 client/.../DefaultMQProducerImpl.sendKernelImpl sets producerGroup, topic, defaultTopic,
# defaultTopicQueueNums, queueId, sysFlag, bornTimestamp, flag, properties, reconsumeTimes(0), unitMode,
# batch (maxReconsumeTimes only on a %RETRY% topic); MQClientAPIImpl.sendMessage converts it with
# SendMessageRequestHeaderV2.createSendMessageRequestHeaderV2 (a..m; k and m are primitive booleans).
SEND_V2_494 = frozenset("abcdefghijkm")
# rocketmq-all-4.9.7: the same, plus requestHeader.setBname(mq.getBrokerName()) -> v2.n = v1.getBname().
SEND_V2_497 = SEND_V2_494 | {"n"}
SEND_V1_494 = frozenset(
    [
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
        "properties",
        "reconsumeTimes",
        "unitMode",
        "batch",
    ]
)
# rocketmq-all-4.9.4 client/.../PullAPIWrapper.pullKernelImpl: 11 setters; 4.9.7 adds setBname;
# 5.3.3 (the newest 5.x tag in the stored apache/rocketmq) adds setMaxMsgBytes and setBrokerName (bname).
PULL_494 = frozenset(
    [
        "consumerGroup",
        "topic",
        "queueId",
        "queueOffset",
        "maxMsgNums",
        "sysFlag",
        "commitOffset",
        "suspendTimeoutMillis",
        "subscription",
        "subVersion",
        "expressionType",
    ]
)
PULL_497 = PULL_494 | {"bname"}
PULL_5 = PULL_497 | {"maxMsgBytes"}
# MQAdminImpl.queryMessage sets topic, key, maxNum, beginTimestamp, endTimestamp;
# MQClientAPIImpl.queryMessage: request.addExtField(MixAll.UNIQUE_MSG_QUERY_FLAG, isUnqiueKey.toString()).
QUERY = frozenset(["topic", "key", "maxNum", "beginTimestamp", "endTimestamp", "_UNIQUE_KEY_QUERY"])
# MQClientAPIImpl.getMaxOffset: topic, queueId (4.9.7 and 5.3.3: + setBname / setBrokerName).
MAX_OFFSET_494 = frozenset({"topic", "queueId"})
MAX_OFFSET_497 = MAX_OFFSET_494 | {"bname"}
# MQClientAPIImpl.viewMessage: setOffset (5.3.3: viewMessage(addr, topic, phyoffset, ...) also setTopic).
VIEW_494 = frozenset({"offset"})
VIEW_5 = VIEW_494 | {"topic"}
# MQClientAPIImpl.consumerSendMessageBack: group, originTopic, offset, delayLevel, originMsgId,
# maxReconsumeTimes, and unitMode (primitive boolean); 4.9.7 and 5.3.3 add setBname / setBrokerName.
SEND_BACK_494 = frozenset(
    ["offset", "group", "delayLevel", "originMsgId", "originTopic", "unitMode", "maxReconsumeTimes"]
)
SEND_BACK_497 = SEND_BACK_494 | {"bname"}
# DefaultMQProducerImpl.checkTransactionState (the answer to a check): commitLogOffset, producerGroup,
# tranStateTableOffset, fromTransactionCheck(true), msgId (the message's UNIQ_KEY), transactionId (the
# check header's), commitOrRollback; 4.9.7 adds setBname(checkRequestHeader.getBname()) (null: a 4.9.7
# broker's check has no bname), 5.3.3 adds setTopic and setBrokerName (the 5.x check carries bname).
END_CHECK_494 = frozenset(
    [
        "producerGroup",
        "tranStateTableOffset",
        "commitLogOffset",
        "commitOrRollback",
        "fromTransactionCheck",
        "msgId",
        "transactionId",
    ]
)
END_CHECK_5 = END_CHECK_494 | {"topic", "bname"}
# DefaultMQProducerImpl.endTransaction (after the local transaction): transactionId =
# sendResult.getTransactionId() (null on 4.9.x, whose SendMessageProcessor never sets it; the UNIQ_KEY on
# 5.x, SendMessageProcessor: responseHeader.setTransactionId(MessageClientIDSetter.getUniqID(msg))),
# commitLogOffset, commitOrRollback, producerGroup, tranStateTableOffset, msgId = sendResult.getMsgId(),
# fromTransactionCheck (Boolean, default false); 4.9.7 adds setBname, 5.3.3 setTopic and setBrokerName.
END_494 = END_CHECK_494 - {"transactionId"}
END_497 = END_494 | {"bname"}
END_5 = END_CHECK_494 | {"topic", "bname"}

Call = Callable[[RemotingClient], Awaitable[object]]
HALF_UNIQ = "F845E08B87B54928BD0FBBB49BF5EB1A"


def _calls() -> dict[str, tuple[str, Call]]:
    """Request kind -> (the recorded case whose response answers it, the typed call as Java would make it)."""
    return {
        "send_v2": (
            "send_message_v2_ok",
            lambda c: c.send_message("PG", "T", b"x", properties={"TAGS": "a"}),
        ),
        "send_v1": (
            "send_message_ok",
            lambda c: c.send_message("PG", "T", b"x", properties={"WAIT": "true"}, v2=False),
        ),
        "send_batch": (
            "send_batch_3",
            lambda c: c.send_batch("PG", "T", [BatchMessage(b"a")], properties={"WAIT": "true"}),
        ),
        "pull": ("pull_found_two", lambda c: c.pull("CG", "T", 0, 0, max_msg_nums=32, max_msg_bytes=1 << 20)),
        "query_uniq": ("query_message_by_uniq_key", lambda c: c.query_message("T", HALF_UNIQ)),
        "query_keys": ("query_message_not_found", lambda c: c.query_message("T", "k", unique_key=False)),
        "max_offset": ("get_max_offset", lambda c: c.get_max_offset("T", 0)),
        "view": ("view_message_by_id_found", lambda c: c.view_message(192, topic="T")),
        "heartbeat": ("heart_beat_producer", lambda c: c.heartbeat(["PG"])),
        "send_back": (
            "consumer_send_msg_back",
            lambda c: c.consumer_send_msg_back(
                "CG", 2969, origin_msg_id="M", origin_topic="T", max_reconsume_times=16
            ),
        ),
        "end": (
            "end_transaction_commit",
            lambda c: c.end_transaction(
                "PG", 0, 1249, 8, msg_id=HALF_UNIQ, transaction_id=HALF_UNIQ, topic="T", oneway=True
            ),
        ),
        "end_from_check": (
            "end_transaction_from_check",
            lambda c: c.end_transaction(
                "PG",
                4,
                4513,
                8,
                msg_id=HALF_UNIQ,
                transaction_id=HALF_UNIQ,
                from_transaction_check=True,
                topic="T",
            ),
        ),
    }


CODES = {
    "send_v2": 310,
    "send_v1": 10,
    "send_batch": 320,
    "pull": 11,
    "query_uniq": 12,
    "query_keys": 12,
    "max_offset": 30,
    "view": 33,
    "heartbeat": 34,
    "send_back": 36,
    "end": 37,
    "end_from_check": 37,
}

# kind -> the Java client's extFields names at 4.9.4, 4.9.7 and 5.x (see the citations above).
JAVA: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {
    "send_v2": (SEND_V2_494, SEND_V2_497, SEND_V2_497),
    "send_v1": (SEND_V1_494, SEND_V1_494 | {"bname"}, SEND_V1_494 | {"bname"}),
    "send_batch": (SEND_V2_494, SEND_V2_497, SEND_V2_497),
    "pull": (PULL_494, PULL_497, PULL_5),
    "query_uniq": (QUERY, QUERY, QUERY),
    "query_keys": (QUERY, QUERY, QUERY),
    "max_offset": (MAX_OFFSET_494, MAX_OFFSET_497, MAX_OFFSET_497),
    "view": (VIEW_494, VIEW_494, VIEW_5),
    "heartbeat": (frozenset(), frozenset(), frozenset()),
    "send_back": (SEND_BACK_494, SEND_BACK_497, SEND_BACK_497),
    "end": (END_494, END_497, END_5),
    "end_from_check": (END_CHECK_494, END_CHECK_494, END_CHECK_5),
}
# What our client adds beyond Java's set, on purpose (module docstring).
EXTRA: dict[tuple[str, int], frozenset[str]] = {
    ("end", V494): frozenset({"transactionId"}),
    ("end", V497): frozenset({"transactionId"}),
    # A 4.9.7 broker's check has no bname, so Java's answer has none; ours names the broker it knows.
    ("end_from_check", V497): frozenset({"bname"}),
}
# The 4.9.4 recording's kinds whose field set differs from the Java client's (module docstring).
RECORDING_DIFFERS = {"query_keys", "end"}


async def _sent_frames(version: int, broker_name: str | None) -> dict[str, RemotingCommand]:
    """Run every typed call against a stand-in broker; the frame each call wrote, by kind."""
    calls = _calls()
    received: list[RemotingCommand] = []
    answers = {
        code: decode_frame(bytes.fromhex(BY[(case, "response")]["frame_hex"]))
        for kind, (case, _) in calls.items()
        if (case, "response") in BY
        for code in [CODES[kind]]
    }
    answers[37] = decode_frame(bytes.fromhex(BY[("end_transaction_rollback", "response")]["frame_hex"]))

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dec = FrameDecoder()
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                for cmd in dec.feed(data):
                    received.append(cmd)
                    if not cmd.is_oneway:
                        writer.write(encode_frame(attrs.evolve(answers[cmd.code], opaque=cmd.opaque)))
                        await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = RemotingClient(timeout=2.0, version=version, broker_name=broker_name, client_id="127.0.0.1@1")
    sent: dict[str, RemotingCommand] = {}
    try:
        await client.connect("127.0.0.1", port)
        for kind, (_, call) in calls.items():
            before = len(received)
            await call(client)
            async with asyncio.timeout(2):
                while len(received) == before:
                    await asyncio.sleep(0.01)
            sent[kind] = received[before]
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
    return sent


@pytest.mark.parametrize(("version", "column"), [(V494, 0), (V497, 1), (V550, 2)])
def test_every_request_kind_carries_every_field_the_java_client_sets(version: int, column: int) -> None:
    sent = asyncio.run(_sent_frames(version, "broker-a"))
    assert set(sent) == set(JAVA)
    for kind, cmd in sent.items():
        assert cmd.code == CODES[kind], kind
        # The frame's own fields, as RemotingCommand.createRequestCommand + MQClientAPIImpl set them.
        assert (cmd.language, cmd.version, cmd.serialize_type_current_rpc) == ("JAVA", version, "JSON"), kind
        raw = encode_frame(cmd)
        assert b'"serializeTypeCurrentRPC":"JSON"' in raw and b'"language":"JAVA"' in raw, kind
        java = JAVA[kind][column]
        ours = frozenset(cmd.ext)
        assert java <= ours, f"{kind} at version {version} lacks {sorted(java - ours)}"
        assert ours - java == EXTRA.get((kind, version), frozenset()), f"{kind}: extra {sorted(ours - java)}"
        assert all(v != "" for v in cmd.ext.values()), kind
    # END_TRANSACTION carries the send result's msgId (the half's UNIQ_KEY), never an empty one, and is
    # one-way as DefaultMQProducerImpl.endTransaction / checkTransactionState send it.
    for kind in ("end", "end_from_check"):
        assert sent[kind].get("msgId") == HALF_UNIQ and sent[kind].is_oneway, kind
    assert sent["query_keys"].get("_UNIQUE_KEY_QUERY") == "false"
    assert sent["query_uniq"].get("_UNIQUE_KEY_QUERY") == "true"


def test_without_a_broker_name_a_4_9_7_client_leaves_bname_out_rather_than_send_it_empty() -> None:
    sent = asyncio.run(_sent_frames(V497, None))
    assert all("bname" not in cmd.ext and cmd.get("n") is None for cmd in sent.values())


def test_the_4_9_4_recording_agrees_with_the_java_field_sets_except_where_documented() -> None:
    """The recorded frames (a second witness, not Java's own) have Java's 4.9.4 field sets, except the two
    kinds the module docstring names; those differ exactly as it says."""
    for kind, (case, _) in _calls().items():
        recorded = frozenset(BY[(case, "request")]["header"].get("extFields") or {})
        if kind in RECORDING_DIFFERS:
            continue
        assert recorded == JAVA[kind][0], kind
    assert JAVA["query_keys"][0] - frozenset(_ext("query_message_not_found")) == {"_UNIQUE_KEY_QUERY"}
    assert frozenset(_ext("end_transaction_commit")) - JAVA["end"][0] == {"transactionId"}
    assert BY[("end_transaction_commit", "request")]["header"]["flag"] == 0  # Java's is one-way (2)
    heartbeat = bytes.fromhex(BY[("heart_beat_producer", "request")]["frame_hex"])
    assert b'"extFields":{}' in heartbeat  # Java 4.9.4 writes no extFields for a header-less request


def _ext(case: str) -> dict[str, str]:
    return dict(BY[(case, "request")]["header"].get("extFields") or {})

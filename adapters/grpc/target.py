"""``grpc://HOST:PORT``: a 5.x broker judged through its proxy's gRPC protocol, the adapter contract's way.

What the protocol lets a client do, the target does: send a message (with tags, keys, user properties, a
delivery time, or as a transactional half message), end a transaction, answer the proxy's check of an
orphaned transaction (on the producer's telemetry stream), and receive and acknowledge messages as a simple
consumer. What it does not, the target declares it lacks (``GRPC_LACKS``), so those scenarios are skipped
with the feature named: choosing a queue, reading a queue by offset, the broker's own properties, flags,
codes and remarks, batches, consumer send-back, view and query by id, delay levels.

How the contract's operations map:

* ``Send``: one ``SendMessage``; ``UNIQ_KEY`` is the message id, ``TAGS`` the tag, ``KEYS`` the keys,
  ``TIMER_DELIVER_MS`` the delivery timestamp, ``TRAN_MSG=true`` the TRANSACTION type; the proxy picks the
  queue, and the target creates every topic it uses with one queue (``UPDATE_AND_CREATE_TOPIC`` through the
  broker's remoting port, ``admin``), so that queue is queue 0 and a scenario's default queue is the one used.
* ``Pull`` of queue 0 from offset 0: every message of the topic received so far by the scenario's consumer
  group (each ``ReceiveMessage`` pops what is visible and the target acknowledges it at once), in queue
  order: what a pull of the topic's only queue from its start returns.
* ``EndTx``: ``EndTransaction`` of the half message the request names (by its message id).
* ``Heartbeat``: the producer group's topics get a producer telemetry stream (the proxy's producer group of a
  topic is the topic itself); checks arrive as ``RecoverOrphanedTransactionCommand``s on it.

Names are namespaced as the remoting target does, so scenarios on one proxy do not meet.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import attrs

from rmqspec.adapters.remoting.client import RemotingClient, RemotingError
from rmqspec.adapters.remoting.codec import RemotingCommand, RequestCode
from rmqspec.adapters.remoting.target import Namespace
from rmqspec.conformance.contract import (
    ALL_FEATURES,
    CheckEvent,
    Clock,
    Feature,
    Response,
    TargetError,
    TargetInfo,
)
from rmqspec.conformance.scenarios import SYSTEM_PROPERTIES
from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import Code, Prop, TxAction
from rmqspec.reference.model import EndTx, Heartbeat, Op, Pull, Send
from rmqspec.reference.records import Record, props

from .client import OK, GrpcClient, GrpcError, code_name, make_message, to_ms

# What a 5.x gRPC client cannot do or see (conformance.contract.Feature).
GRPC_LACKS = frozenset(
    {
        Feature.QUEUE_CHOICE,
        Feature.PULL_OFFSET,
        Feature.REMOTING_DETAIL,
        Feature.DELAY,
        Feature.BATCH,
        Feature.SENDBACK,
        Feature.RETRY_SEND,
        Feature.VIEW,
        Feature.QUERY,
        Feature.RESTART,
        Feature.CLOCK_SKEW,
        Feature.FAST_FORWARD,
        Feature.OWN_BROKER,
    }
)
GRPC_FEATURES = ALL_FEATURES - GRPC_LACKS
RECEIVE_POLL_MS = 200  # how long one receive waits for a message (the proxy's minimum is its own setting)
INVISIBLE_MS = 30_000  # a received message is acknowledged at once; this only bounds a lost ack


@attrs.frozen
class GrpcProfile:
    """Where the proxy is and what the suite must know of it."""

    host: str
    port: int
    config: BrokerConfig = attrs.field(factory=lambda: BrokerConfig(profile=Profile.V5))
    admin: tuple[str, int] | None = None  # the broker's remoting address, to create topics
    name: str | None = None
    timeout_s: float = 5.0
    epsilon_ms: int = 1000


@attrs.define
class _Sent:
    topic: str
    message_id: str
    transaction_id: str


class GrpcTarget:
    """A broker behind a 5.x proxy, on the wall clock, in a namespace of its own."""

    def __init__(self, profile: GrpcProfile, name: str | None = None) -> None:
        self.profile = profile
        self.ns = Namespace.fresh()
        self.client = GrpcClient(profile.host, profile.port, profile.timeout_s)
        self._info = TargetInfo(
            name=name or profile.name or f"grpc://{profile.host}:{profile.port}",
            clock=Clock.WALL,
            config=profile.config,
            features=GRPC_FEATURES,
            isolated=False,
        )
        self.lock = threading.Lock()
        self.topics: set[str] = set()
        self.sent: dict[str, _Sent] = {}  # UNIQ_KEY -> what its send answered
        self.received: dict[str, list[Record]] = {}  # topic -> every message received, in queue order
        self.consumers: set[tuple[str, str]] = set()
        self.online: set[str] = set()  # producer groups (scenario names) with a telemetry stream
        self.group_topics: dict[str, set[str]] = {}  # producer group -> topics of its half messages
        self.producers: dict[str, Any] = {}  # topic -> its producer telemetry stream
        self.checks: list[CheckEvent] = []

    @property
    def info(self) -> TargetInfo:
        return self._info

    def now(self) -> int:
        return int(time.time() * 1000)

    def advance_to(self, t: int) -> list[CheckEvent]:
        delay = (t - self.now()) / 1000
        if delay > 0:
            time.sleep(delay)
        with self.lock:
            out, self.checks = self.checks, []
        return out

    def restart(self, config: BrokerConfig | None = None) -> None:
        raise TargetError("a grpc:// target cannot restart its broker (feature restart)")

    def close(self) -> None:
        self.client.close()

    # -- operations ----------------------------------------------------------------------------------------

    def execute(self, op: Op) -> Response:
        try:
            match op:
                case Send(message=m):
                    return self._send(m)
                case Pull(topic=topic, queue_id=0, offset=0, group=group):
                    return self._pull(topic, group)
                case EndTx(request=r):
                    return self._end_tx(r.transaction_id or "", r.action, r.from_check)
                case Heartbeat(group=g, online=on, consumer=False):
                    self._heartbeat(g, on)
                    return Response(int(Code.SUCCESS))
        except GrpcError as e:
            raise TargetError(f"{self.info.name}: {e}") from None
        raise TargetError(f"{self.info.name}: the gRPC protocol has no operation like {type(op).__name__}")

    def _ensure_topic(self, topic: str) -> None:
        if topic in self.topics:
            return
        admin = self.profile.admin
        if admin is not None:
            create_topic(admin, topic, self.profile.timeout_s)
        self.topics.add(topic)

    def _send(self, m: Any) -> Response:
        topic = self.ns.topic(m.topic)
        self._ensure_topic(topic)
        p = dict(m.properties)
        uniq = p.pop(Prop.UNIQ_KEY, "")
        tag = p.pop(Prop.TAGS, None)
        keys = p.pop(Prop.KEYS, "").split()
        deliver = p.pop(Prop.TIMER_DELIVER_MS, None)
        transactional = p.pop(Prop.TRAN_MSG, "").lower() == "true"
        for k in (Prop.WAIT, Prop.PGROUP):
            p.pop(k, None)
        system = sorted(k for k in p if k in SYSTEM_PROPERTIES)
        if system:
            raise TargetError(f"{self.info.name}: a gRPC client cannot set {', '.join(system)}")
        if transactional:
            self.group_topics.setdefault(m.producer_group, set()).add(topic)
            if m.producer_group in self.online:
                self._producer(topic, m.producer_group)
        message = make_message(
            topic,
            m.body,
            message_id=uniq,
            tag=tag,
            keys=keys,
            user_properties=p,
            delivery_ms=None if deliver is None else int(deliver),
            transactional=transactional,
            born_ms=self.now() if m.born_timestamp is None else m.born_timestamp,
        )
        resp = self.client.send(message)
        entry = resp.entries[0] if resp.entries else None
        status = entry.status if entry is not None else resp.status
        if status.code != OK or entry is None:
            return Response(int(Code.SYSTEM_ERROR), f"{code_name(status.code)}: {status.message}")
        with self.lock:
            self.sent[uniq] = _Sent(topic, entry.message_id, entry.transaction_id)
        return Response(
            int(Code.SUCCESS),
            None,
            {"queue_id": 0, "queue_offset": int(entry.offset), "msg_id": entry.message_id},
        )

    def _pull(self, topic_name: str, group_name: str) -> Response:
        topic = self.ns.topic(topic_name)
        self._ensure_topic(topic)
        group = self.ns.group(group_name)
        if (group, topic) not in self.consumers:
            if self.profile.admin is not None:
                create_group(self.profile.admin, group, self.profile.timeout_s)
            self.client.open_consumer(group, topic)
            self.consumers.add((group, topic))
        got = self.client.receive(group, topic, 32, INVISIBLE_MS, RECEIVE_POLL_MS)
        for message in got:
            self.client.ack(group, topic, message)
        with self.lock:
            seen = self.received.setdefault(topic, [])
            have = {(r.queue_id, r.queue_offset) for r in seen}
            for message in got:
                rec = self.ns.in_record(to_record(message))
                if (rec.queue_id, rec.queue_offset) not in have:
                    seen.append(rec)
            seen.sort(key=lambda r: (r.queue_id, r.queue_offset))
            records = tuple(seen)
        if not records:
            return Response(int(Code.PULL_NOT_FOUND), "no message received")
        return Response(int(Code.SUCCESS), None, {}, records)

    def _end_tx(self, uniq: str, action: TxAction, from_check: bool) -> Response:
        if action == TxAction.UNKNOW:
            return Response(0, None, {}, (), no_response=True)  # the protocol has no "unknown" resolution
        with self.lock:
            sent = self.sent.get(uniq)
        if sent is None:
            raise TargetError(f"{self.info.name}: END_TRANSACTION of {uniq}, which this target never sent")
        resp = self.client.end_transaction(
            sent.topic, sent.message_id, sent.transaction_id, action == TxAction.COMMIT, from_check
        )
        if resp.status.code != OK:
            return Response(int(Code.SYSTEM_ERROR), f"{code_name(resp.status.code)}: {resp.status.message}")
        return Response(int(Code.SUCCESS))

    def _heartbeat(self, group: str, online: bool) -> None:
        if online:
            self.online.add(group)
            for topic in self.group_topics.get(group, set()):
                self._producer(topic, group)
        else:
            self.online.discard(group)
            for topic in self.group_topics.get(group, set()):
                stream = self.producers.pop(topic, None)
                if stream is not None:
                    stream.close()

    def _producer(self, topic: str, group: str) -> None:
        if topic in self.producers:
            return

        def on_command(cmd: Any) -> None:
            if not cmd.HasField("recover_orphaned_transaction_command"):
                return
            c = cmd.recover_orphaned_transaction_command
            rec = self.ns.in_record(to_record(c.message))
            with self.lock:
                uniq = rec.uniq_key or ""
                known = self.sent.get(uniq)
                self.sent[uniq] = _Sent(
                    known.topic if known else topic, c.message.system_properties.message_id, c.transaction_id
                )
                self.checks.append(CheckEvent(self.now(), group, 0, 0, rec))

        self.producers[topic] = self.client.open_producer([topic], on_command)


def to_record(message: Any) -> Record:
    """A received message as a record: what the gRPC protocol shows of it (user properties, tag, keys, id)."""
    sp = message.system_properties
    p: dict[str, str] = dict(message.user_properties)
    if sp.tag:
        p[Prop.TAGS] = sp.tag
    if sp.keys:
        p[Prop.KEYS] = " ".join(sp.keys)
    p[Prop.UNIQ_KEY] = sp.message_id
    return Record(
        commit_log_offset=0,
        size=0,
        topic=message.topic.name,
        queue_id=int(sp.queue_id),
        queue_offset=int(sp.queue_offset),
        sys_flag=0,
        flag=0,
        body=bytes(message.body),
        properties=props(p),
        born_timestamp=to_ms(sp.born_timestamp),
        store_timestamp=to_ms(sp.store_timestamp),
        born_host=("0.0.0.0", 0),
        store_host=("0.0.0.0", 0),
        reconsume_times=max(0, int(sp.delivery_attempt) - 1),
        prepared_transaction_offset=0,
    )


UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200  # RequestCode: the body is the SubscriptionGroupConfig as JSON


def create_topic(admin: tuple[str, int], topic: str, timeout_s: float) -> None:
    """UPDATE_AND_CREATE_TOPIC (17) with one read and one write queue, through the broker's remoting port
    (the proxy takes only topics that exist)."""
    fields = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": "1",
        "writeQueueNums": "1",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }
    _admin(
        admin, RemotingCommand(code=int(RequestCode.UPDATE_AND_CREATE_TOPIC), ext_fields=fields), timeout_s
    )


def create_group(admin: tuple[str, int], group: str, timeout_s: float) -> None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) with the broker's defaults (the proxy's consumers must name
    a group that exists)."""
    body = json.dumps(
        {
            "groupName": group,
            "consumeEnable": True,
            "consumeFromMinEnable": True,
            "consumeBroadcastEnable": True,
            "retryQueueNums": 1,
            "retryMaxTimes": 16,
            "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1,
            "notifyConsumerIdsChangedEnable": True,
        }
    ).encode()
    _admin(
        admin, RemotingCommand(code=UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ext_fields={}, body=body), timeout_s
    )


def _admin(admin: tuple[str, int], cmd: RemotingCommand, timeout_s: float) -> None:
    async def run() -> int:
        client = RemotingClient(timeout=timeout_s)
        await client.connect(*admin)
        try:
            resp = await client.invoke(cmd)
            if resp.code != 0:
                raise TargetError(f"admin request {cmd.code} to {admin[0]}:{admin[1]} failed: {resp.remark}")
            return resp.code
        finally:
            await client.close()

    try:
        asyncio.run(run())
    except (OSError, RemotingError) as e:
        raise TargetError(f"admin request {cmd.code} to {admin[0]}:{admin[1]} failed: {e}") from None

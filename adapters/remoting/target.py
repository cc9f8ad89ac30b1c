"""The remoting adapter: the adapter contract (docs/adapter-contract.md) for a broker reached over TCP.

A ``RemotingTarget`` is a wall-clock target (the suite waits; it cannot step the broker's clock or
restart it). It runs the asyncio ``RemotingClient`` on a loop of its own in a background thread, so the
suite's synchronous calls (``execute``, ``advance_to``) are plain blocking calls with timeouts.

Isolation. A real broker keeps everything it ever stored, and one broker serves every scenario of a run,
so each target puts its own **namespace** in front of the names a scenario uses: topic ``T`` becomes
``<ns>T``, group ``CG`` becomes ``<ns>CG``, ``%RETRY%CG`` becomes ``%RETRY%<ns>CG``; answers are translated
back (topics, and the properties that name a topic or a group). System topics are never renamed, and
neither is a name that would become illegal with the prefix (too long, or illegal already): the broker
refuses those as they are, which is what the scenario tests. Queue offsets therefore start at 0 for every
scenario, as on a fresh broker; commit-log offsets do not, and nothing in the suite assumes they do.

Producer groups. Each producer group a scenario registers (``Heartbeat``) gets a connection of its own
that sends the HEART_BEAT, so that the broker's CHECK_TRANSACTION_STATE requests for that group arrive on
it; ``Heartbeat(online=False)`` closes that connection (the broker forgets a closed channel). Like the
Java client (``MQClientInstance``: every 30 s), the connection heartbeats again every
``HEARTBEAT_INTERVAL_S`` while it is open: a broker drops a producer channel that sent no heartbeat for
120 s (``ProducerManager``: "remove expired channel") and then checks nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

import attrs

from rmqspec.conformance.contract import (
    LOGICAL_ONLY,
    CheckEvent,
    Clock,
    Feature,
    ProtocolFailure,
    Response,
    TargetError,
    TargetInfo,
)
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    SYS_CONSUMER_GROUP_PREFIX,
    Code,
    Prop,
    TxAction,
)
from rmqspec.reference.model import (
    ConsumerSendBack,
    EndTx,
    GetMaxOffset,
    Heartbeat,
    Op,
    Pull,
    QueryUniqKey,
    Send,
    SendBatch,
    ViewMessage,
)
from rmqspec.reference.properties import encode_properties
from rmqspec.reference.records import Record, props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.state import GroupConfig

from .client import MalformedFrame, RemotingClient, RemotingError
from .codec import (
    BatchMessage,
    ProtocolError,
    RemotingCommand,
    SendMessageHeader,
    WireRecord,
    WireViolation,
    parse_check_transaction_request,
    parse_send_response,
    send_batch_request,
    subscription_group_request,
)
from .profile import TargetProfile

T = TypeVar("T")

HEARTBEAT_INTERVAL_S = 30.0  # the Java client's heartbeatBrokerInterval
# A wait longer than this on a broker that fast-forwards jumps, up to this margin before its end.
FAST_FORWARD_MIN_MS = 2000
FAST_FORWARD_MARGIN_MS = 1000

# Names the broker treats specially: never namespaced.
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "BenchmarkTest",
        "DefaultCluster",
        "DefaultCluster_REPLY_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC",  # 5.4.0+ forbids sending there (put/forbidden-topic)
        "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC",
    }
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # 5.x TopicValidator.isSystemTopic: rmq_sys_wheel_timer and its kin
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789%|_-")
_MAX_NAME = 127  # topic length limit (facts §1.1); groups are checked by the same validator
# Properties whose values are topic or group names (translated both ways).
_TOPIC_PROPS = (Prop.REAL_TOPIC, Prop.RETRY_TOPIC)
_GROUP_PROPS = (Prop.PGROUP,)


@attrs.frozen
class Namespace:
    """The prefix one target puts in front of every topic and group name it uses."""

    prefix: str

    @staticmethod
    def fresh() -> Namespace:
        return Namespace(f"S{os.urandom(4).hex().upper()}_")

    def _ok(self, name: str) -> bool:
        return (
            bool(name)
            and name not in SYSTEM_TOPICS
            and not name.startswith(SYSTEM_TOPIC_PREFIX)
            and set(name) <= _TOPIC_CHARS
            and len(self.prefix) + len(name) <= _MAX_NAME
            and not name.startswith(self.prefix)
        )

    def group(self, name: str) -> str:
        # A CID_RMQ_SYS_ group is one the broker always creates (sendback/group-lookup): a prefix in
        # front would make it an ordinary group, and the scenario would no longer test that.
        if name.startswith(SYS_CONSUMER_GROUP_PREFIX):
            return name
        return self.prefix + name if self._ok(name) else name

    def topic(self, name: str) -> str:
        for special in (RETRY_PREFIX, DLQ_PREFIX):
            if name.startswith(special):
                inner = name.removeprefix(special)
                return special + self.group(inner) if self._ok(special + self.prefix + inner) else name
        return self.prefix + name if self._ok(name) else name

    def strip_group(self, name: str) -> str:
        return name.removeprefix(self.prefix)

    def strip_topic(self, name: str) -> str:
        for special in (RETRY_PREFIX, DLQ_PREFIX):
            if name.startswith(special):
                return special + name.removeprefix(special).removeprefix(self.prefix)
        return name.removeprefix(self.prefix)

    def out_props(self, p: Mapping[str, str]) -> dict[str, str]:
        """Properties as the broker should see them."""
        d = dict(p)
        for k in _TOPIC_PROPS:
            if k in d:
                d[k] = self.topic(d[k])
        for k in _GROUP_PROPS:
            if k in d:
                d[k] = self.group(d[k])
        return d

    def in_record(self, r: Record) -> Record:
        """A record as the scenario named things."""
        d = dict(r.properties)
        for k in _TOPIC_PROPS:
            if k in d:
                d[k] = self.strip_topic(d[k])
        for k in _GROUP_PROPS:
            if k in d:
                d[k] = self.strip_group(d[k])
        return attrs.evolve(r, topic=self.strip_topic(r.topic), properties=props(d))


class _Loop:
    """An asyncio loop in a daemon thread; ``run`` blocks the caller until a coroutine finishes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rmqspec-remoting", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.loop.is_running():
            self.loop.close()


async def _parsed(call: Awaitable[RemotingCommand], parse: Callable[[RemotingCommand], T]) -> T:
    return parse(await call)


def _wire_to_record(w: WireRecord) -> Record:
    return w.to_reference()


class FastForward(Protocol):
    """A broker clock the suite may move forward at once (a served model's, on a broker of its own)."""

    def jump(self, to: int) -> None:
        """Move the clock to ``to``, the broker living through the time between."""
        ...

    def next_check(self, limit: int) -> int | None:
        """The first moment up to ``limit`` at which the broker sends a check request, or None."""
        ...

    def next_service(self, limit: int) -> int | None:
        """The first moment up to ``limit`` at which the broker's services change anything, or None."""
        ...


class RemotingTarget:
    """A broker over the remoting protocol, on the wall clock, isolated by a fresh namespace."""

    def __init__(
        self,
        profile: TargetProfile,
        *,
        namespace: Namespace | None = None,
        name: str | None = None,
        restarter: Callable[[BrokerConfig | None], None] | None = None,
        skewer: Callable[[int], None] | None = None,
        clock: Callable[[], int] | None = None,
        fast: FastForward | None = None,
        isolated: bool = False,
    ) -> None:
        self.profile = profile
        self.restarter = restarter  # restarts the broker (a target the suite started itself)
        self.skewer = skewer  # steps the broker's clock (a served model, a broker under libfaketime)
        # The clock this client and its broker share (a served model's, which fast-forwards), and what
        # moves it forward at once to a time (None: the wall clock, which only waits).
        self.clock = clock
        self.fast = fast
        self.ns = namespace or Namespace.fresh()
        self.timeout = profile.timeout_s
        self._info = TargetInfo(
            name=name or f"remoting://{profile.host}:{profile.port}",
            clock=Clock.WALL,
            config=profile.config,
            features=self.features_of(profile)
            | ({Feature.RESTART} if restarter is not None else set())
            | ({Feature.CLOCK_SKEW} if skewer is not None else set())
            | ({Feature.FAST_FORWARD} if fast is not None else set()),
            # True only for a broker started empty for this one client (a served broker of its own)
            isolated=isolated,
        )
        self._loop = _Loop()
        self._checks: list[CheckEvent] = []
        self._checks_lock = threading.Lock()
        self._producers: dict[str, RemotingClient] = {}
        self._beats: dict[str, asyncio.Task[None]] = {}
        self._reconnect_lock = threading.Lock()
        self._groups_made: set[str] = set()
        self._client = self._connect(None)

    @staticmethod
    def features_of(profile: TargetProfile) -> frozenset[Feature]:
        """What a broker over the wire offers: everything but the logical clock's, restart, a clock the suite
        steps and a broker of a scenario's own (a target that starts brokers adds those), less ``lacks``."""
        return (
            frozenset(Feature)
            - LOGICAL_ONLY
            - {Feature.RESTART, Feature.OWN_BROKER, Feature.CLOCK_SKEW, Feature.FAST_FORWARD}
            - profile.lacks
        )

    # --- connections ---------------------------------------------------------------------------------

    def _new_client(self, group: str | None) -> RemotingClient:
        return RemotingClient(
            timeout=self.timeout,
            handler=None if group is None else self._check_handler(group),
            language=self.profile.language,
        )

    def _connect(self, group: str | None) -> RemotingClient:
        client = self._new_client(group)
        try:
            self._loop.run(client.connect(self.profile.host, self.profile.port), self.timeout + 1)
        except (RemotingError, OSError, TimeoutError) as e:
            where = f"{self.profile.host}:{self.profile.port}"
            raise TargetError(str(e) if where in str(e) else f"cannot connect to {where}: {e}") from e
        return client

    def _check_handler(self, group: str) -> Any:
        def handle(cmd: RemotingCommand) -> None:
            try:
                req = parse_check_transaction_request(cmd)
            except ProtocolError:
                return None  # not a check request: the Java client ignores what it does not know
            record = self.ns.in_record(_wire_to_record(req.record))
            event = CheckEvent(
                # When it arrived: the body's store time is the original half message's (facts §5.4).
                self.now(),
                self.ns.strip_group(req.producer_group or group),
                req.tran_state_table_offset,
                req.commit_log_offset,
                record,
            )
            with self._checks_lock:
                self._checks.append(event)
            return None

        return handle

    def _call(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """Run one call. An answer that breaks the protocol is a ``ProtocolFailure`` of the rule it breaks
        (with the frame); no answer within the timeout, or a connection lost first, a ``TargetError``."""
        try:
            return self._loop.run(coro, self.timeout + 1)
        except WireViolation as e:
            raise ProtocolFailure(f"{what}: {e}", e.rule, e.frame) from e
        except MalformedFrame as e:
            raise ProtocolFailure(f"{what}: {e}", e.rule, e.frame) from e
        except (RemotingError, ProtocolError, TimeoutError, OSError) as e:
            raise TargetError(f"{what}: {type(e).__name__}: {e}") from e

    # --- the contract ----------------------------------------------------------------------------------

    @property
    def info(self) -> TargetInfo:
        return self._info

    def now(self) -> int:
        return self.clock() if self.clock is not None else int(time.time() * 1000)

    def next_service_at(self, limit: int) -> int | None:
        """When the broker's services next change anything (a delivery, a check, a discard), up to
        ``limit``, on a broker that fast-forwards (None: it does not, or nothing happens)."""
        return None if self.fast is None else self.fast.next_service(limit)

    def next_check_at(self, limit: int) -> int | None:
        """When the broker sends its next check request, up to ``limit``, on a broker that fast-forwards
        (it knows; None: it does not, or sends none): a wait for checks jumps there instead of polling."""
        return None if self.fast is None else self.fast.next_check(limit)

    def skew_clock(self, ms: int) -> None:
        """Step the broker's clock by ``ms`` (only a broker whose clock the suite controls: ``skewer``)."""
        if self.skewer is None:
            raise TargetError("this broker's clock cannot be stepped (feature clock-skew)")
        self.skewer(ms)

    def advance_to(self, t: int) -> list[CheckEvent]:
        if self.fast is not None and t - self.now() > FAST_FORWARD_MIN_MS:
            # the last FAST_FORWARD_MARGIN_MS pass in real time: the broker's services run on the wall
            # clock around the moment the scenario's next step waits for, as without the jump
            self.fast.jump(t - FAST_FORWARD_MARGIN_MS)
        while (left := t - self.now()) > 0:
            time.sleep(min(left, 100) / 1000)
        with self._checks_lock:
            out, self._checks = self._checks, []
        return out

    def restart(self, config: BrokerConfig | None = None) -> None:
        """Restart the broker (only a broker the suite started: ``restarter``), then reconnect: the
        client's connection, and each online producer group's with its heartbeat."""
        if self.restarter is None:
            raise TargetError("a remoting target cannot restart its broker (feature restart)")
        groups = list(self._producers)
        for group in groups:
            self._stop_beat(group)
        for client in [self._client, *self._producers.values()]:
            with contextlib.suppress(Exception):
                self._loop.run(client.close(), 2)
        self._producers.clear()
        self.restarter(config)
        if config is not None:
            self.profile = attrs.evolve(self.profile, config=config)
            self._info = attrs.evolve(self._info, config=config)
        self._client = self._connect(None)
        for group in groups:
            self._heartbeat(group, True)

    def close(self) -> None:
        for group in list(self._beats):
            self._stop_beat(group)
        for client in [self._client, *self._producers.values()]:
            with contextlib.suppress(Exception):
                self._loop.run(client.close(), 2)
        self._producers.clear()
        self._loop.stop()

    def _live_client(self) -> RemotingClient:
        """The client connection, opened again first when it was lost (a broker that restarted): an
        operation is sent only on a live connection, so a lost one never makes an operation's outcome
        unknown by itself; while the broker is down the reconnect fails and the operation is not sent."""
        with self._reconnect_lock:
            if not self._client.connected:
                with contextlib.suppress(Exception):
                    self._loop.run(self._client.close(), 2)
                self._client = self._connect(None)
            return self._client

    def _group_settings(self) -> tuple[int, int] | None:
        """retryQueueNums and retryMaxTimes the model gives a group it creates, when they are not what a
        broker gives one (None: they are, or the broker creates no group by itself)."""
        cfg = self.profile.config
        wanted = GroupConfig(cfg.retry_queue_nums, cfg.retry_max_times)
        if not cfg.auto_create_subscription_group or wanted == GroupConfig():  # SubscriptionGroupConfig's
            return None
        return wanted.retry_queue_nums, wanted.retry_max_times

    def _make_group(self, c: RemotingClient, op: Op) -> None:
        """Subscription-group settings are no broker.conf key: the model creates each group with the
        config's, so the suite creates the group of an operation (a pull's, a send-back's, a retry send's)
        with them before the broker would create it with its defaults."""
        settings = self._group_settings()
        match op:
            case Pull(group=g) | ConsumerSendBack(request=SendBack(group=g)):
                group: str | None = g
            case Send(message=m) if m.topic.startswith(RETRY_PREFIX):
                group = m.topic[len(RETRY_PREFIX) :]
            case _:
                group = None
        if settings is None or group is None or group in self._groups_made:
            return
        name = self.ns.group(group)
        cmd = subscription_group_request(name, retry_queue_nums=settings[0], retry_max_times=settings[1])
        reply = self._call(c.invoke(cmd), "update and create subscription group")
        if reply.code != 0:
            raise TargetError(
                f"UPDATE_AND_CREATE_SUBSCRIPTIONGROUP of {name} (retryQueueNums={settings[0]}, retryMaxTimes="
                f"{settings[1]}) answered code {reply.code} {reply.remark or ''}".rstrip()
            )
        self._groups_made.add(group)

    def execute(self, op: Op) -> Response:
        ns = self.ns
        c = self._live_client()
        self._make_group(c, op)
        match op:
            case Send(message=m):
                body_props = ns.out_props(m.properties)
                r = self._call(
                    c.send_message(
                        ns.group(m.producer_group),
                        ns.topic(m.topic),
                        m.body,
                        properties=encode_properties(props(body_props)),
                        queue_id=m.queue_id,
                        sys_flag=m.sys_flag,
                        flag=m.flag,
                        # born on this client's clock (a served broker's may have jumped ahead of the wall)
                        born_timestamp=self.now() if m.born_timestamp is None else m.born_timestamp,
                        reconsume_times=m.reconsume_times or 0,
                        max_reconsume_times=m.max_reconsume_times,
                        default_topic_queue_nums=m.default_topic_queue_nums,
                        version=m.version,
                    ),
                    "send",
                )
                return self._send_response(r.code, r.remark, r.queue_id, r.queue_offset, r.msg_id)
            case SendBatch(batch=b):
                header = SendMessageHeader(
                    producer_group=ns.group("PG"),
                    topic=ns.topic(b.topic),
                    born_timestamp=self.now() if b.born_timestamp is None else b.born_timestamp,
                    queue_id=b.queue_id,
                    sys_flag=b.sys_flag,
                    properties=encode_properties(props(ns.out_props(b.properties))),
                    default_topic_queue_nums=b.default_topic_queue_nums,
                )
                entries = [
                    BatchMessage(e.body, encode_properties(props(ns.out_props(e.properties))), e.flag)
                    for e in b.entries
                ]
                cmd = send_batch_request(header, entries)
                r = self._call(_parsed(c.invoke(cmd), parse_send_response), "send batch")
                return self._send_response(r.code, r.remark, r.queue_id, r.queue_offset, r.msg_id)
            case Pull(topic=topic, queue_id=q, offset=off, max_msgs=n, group=g):
                p = self._call(c.pull(ns.group(g), ns.topic(topic), q, off, max_msg_nums=n), "pull")
                fields: dict[str, object] = {}
                if p.next_begin_offset is not None:
                    fields = {
                        "next_begin_offset": p.next_begin_offset,
                        "min_offset": p.min_offset,
                        "max_offset": p.max_offset,
                    }
                records = tuple(ns.in_record(_wire_to_record(w)) for w in p.records)
                return Response(p.code, p.remark, fields, records)
            case ConsumerSendBack(request=sb):
                rep = self._call(
                    c.consumer_send_msg_back(
                        ns.group(sb.group),
                        sb.offset,
                        delay_level=sb.delay_level,
                        origin_msg_id=sb.origin_msg_id,
                        origin_topic=None if sb.origin_topic is None else ns.topic(sb.origin_topic),
                        max_reconsume_times=sb.max_reconsume_times,
                        version=sb.version,
                    ),
                    "send back",
                )
                return Response(rep.code, rep.remark)
            case EndTx(request=et):
                oneway = et.action not in (TxAction.COMMIT, TxAction.ROLLBACK)
                reply = self._call(
                    c.end_transaction(
                        ns.group(et.producer_group),
                        et.tran_state_table_offset,
                        et.commit_log_offset,
                        int(et.action),
                        # Java's producer sends the send result's msgId, the half's UNIQ_KEY, which is
                        # also what every caller gives as transaction_id (never an empty msgId if known).
                        msg_id=et.msg_id or et.transaction_id or "",
                        transaction_id=et.transaction_id,
                        from_transaction_check=et.from_check,
                        oneway=oneway,
                    ),
                    "end transaction",
                )
                if reply is None:
                    return Response(0, None, no_response=True)
                return Response(reply.code, reply.remark)
            case Heartbeat(group=g, online=online, consumer=True):
                if not online:
                    return Response(0)  # nothing to unregister: the suite's consumers hold no channel
                rep = self._call(c.heartbeat((), [self.ns.group(g)]), "consumer heart beat")
                return Response(rep.code, rep.remark)
            case Heartbeat(group=g, online=online):
                return self._heartbeat(g, online)
            case GetMaxOffset(topic=topic, queue_id=q):
                mo = self._call(c.get_max_offset(ns.topic(topic), q), "get max offset")
                return Response(mo.code, mo.remark, {} if mo.offset is None else {"offset": mo.offset})
            case ViewMessage(commit_log_offset=off):
                v = self._call(c.view_message(off), "view message")
                viewed = () if v.record is None else (ns.in_record(_wire_to_record(v.record)),)
                return Response(v.code, v.remark, {}, viewed)
            case QueryUniqKey(topic=topic, uniq_key=key):
                qm = self._call(
                    c.query_message(ns.topic(topic), key, end_timestamp=self.now()), "query message"
                )
                found = tuple(ns.in_record(_wire_to_record(w)) for w in qm.records)
                return Response(qm.code, qm.remark, {}, found)
        raise TargetError(f"operation {type(op).__name__} is not supported by the remoting adapter")

    def _send_response(
        self,
        code: int,
        remark: str | None,
        queue_id: int | None,
        queue_offset: int | None,
        msg_id: str | None,
    ) -> Response:
        if code not in (
            Code.SUCCESS,
            Code.FLUSH_DISK_TIMEOUT,
            Code.FLUSH_SLAVE_TIMEOUT,
            Code.SLAVE_NOT_AVAILABLE,
        ):
            return Response(code, remark)
        return Response(code, remark, {"queue_id": queue_id, "queue_offset": queue_offset, "msg_id": msg_id})

    def _heartbeat(self, group: str, online: bool) -> Response:
        if not online:
            self._stop_beat(group)
            client = self._producers.pop(group, None)
            if client is not None:
                self._call(client.close(), "close producer connection")
            return Response(0)
        client = self._producers.get(group)
        if client is not None and not client.connected:  # the broker restarted: connect again
            self._stop_beat(group)
            with contextlib.suppress(Exception):
                self._loop.run(client.close(), 2)
            client = None
        if client is None:
            client = self._producers[group] = self._connect(group)
        rep = self._call(client.heartbeat([self.ns.group(group)]), "heart beat")
        if group not in self._beats:
            self._beats[group] = self._loop.run(self._start_beat(client, group), self.timeout)
        return Response(rep.code, rep.remark)

    async def _start_beat(self, client: RemotingClient, group: str) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._beat(client, group))

    async def _beat(self, client: RemotingClient, group: str) -> None:
        """Heartbeat ``group`` every HEARTBEAT_INTERVAL_S, as a real producer does, until cancelled; a
        lost connection (the broker restarted) is opened again first, as the Java client does."""
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            with contextlib.suppress(RemotingError, ProtocolError, TimeoutError, OSError):
                if not client.connected:
                    await client.close()
                    client = self._new_client(group)
                    await client.connect(self.profile.host, self.profile.port)
                    self._producers[group] = client
                await client.heartbeat([self.ns.group(group)])

    def _stop_beat(self, group: str) -> None:
        task = self._beats.pop(group, None)
        if task is not None:
            self._loop.loop.call_soon_threadsafe(task.cancel)

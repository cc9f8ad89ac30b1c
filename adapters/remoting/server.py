"""``rmqspec serve``: the reference model (or a mutant) behind the RocketMQ remoting protocol, on TCP.

The broker side of the same codec the client uses: requests are decoded into the model's operations,
run on a ``WallClockTarget`` (the model on the wall clock), and answered with the headers and bodies a
4.9.4 broker sends (the recorded frames in shared/wire-vectors are the reference for field names and
order). The broker's own services run on a ticker every ``tick_ms``; a CHECK_TRANSACTION_STATE the model
sends goes, one-way, to a connection that registered the message's producer group with HEART_BEAT. A
closed connection unregisters its groups (the model then sees the producer go offline).

Only loopback is served by default; the server keeps no state but the model's, in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections import defaultdict
from collections.abc import Callable

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.conformance.contract import CheckEvent, Response
from rmqspec.reference.batch import Batch, BatchEntry
from rmqspec.reference.constants import Code, TxAction
from rmqspec.reference.javanum import parse_int, parse_long
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
from rmqspec.reference.properties import decode_properties
from rmqspec.reference.put import Message
from rmqspec.reference.records import Record, props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

from .codec import (
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    check_transaction_state_request,
    decode_batch_body,
    encode_frame,
    encode_record,
    record_from_reference,
    response_for,
)

log = logging.getLogger(__name__)

Host = tuple[str, int]
_COMMIT_OR_ROLLBACK_WRONG = (
    "org.apache.rocketmq.remoting.exception.RemotingCommandException: commitOrRollback field wrong"
)
# A header without producerGroup: null, which equals no PGROUP. A property value never holds \x02 (the
# properties separator), so this string cannot equal one either.
_NO_GROUP = "\x02"


class BadRequest(ValueError):
    """A request whose header cannot be read as the model's operation; answered with SYSTEM_ERROR."""


def _field(ext: dict[str, str], *names: str, default: str | None = None) -> str | None:
    for n in names:
        if n in ext:
            return ext[n]
    return default


def _number(raw: str, name: str, long: bool) -> int:
    """A header number as RemotingCommand.decodeCommandCustomHeader (or a FastCodesHeader) reads it:
    ``Integer.parseInt`` or ``Long.parseLong``, so no spaces, no underscores. rule: wire/send-headers"""
    value = parse_long(raw) if long else parse_int(raw)
    if value is None:
        raise BadRequest(f"{name} {raw!r} is not a number")
    return value


def _int(ext: dict[str, str], *names: str, default: int | None = None, long: bool = False) -> int:
    raw = _field(ext, *names)
    if raw is None:
        if default is None:
            raise BadRequest(f"the header lacks {names[0]}")
        return default
    return _number(raw, names[0], long)


def _opt_int(ext: dict[str, str], *names: str) -> int | None:
    raw = _field(ext, *names)
    if raw is None or raw == "":
        return None
    return _number(raw, names[0], False)


def _reconsume_field(ext: dict[str, str], short: str, name: str) -> int | None:
    """An Integer field of a send header as the broker reads it (rule: sendback/retry-send-dlq): the V2 short
    name through Integer.parseInt in SendMessageRequestHeaderV2.decode, where a bad value fails the
    request; the long name through RemotingCommand.decodeCommandCustomHeader, which logs a value
    Integer.parseInt refuses and leaves the field null."""
    if short in ext:
        value = parse_int(ext[short])
        if value is None:
            raise BadRequest(f"{name} {ext[short]!r} is not a number")
        return value
    return parse_int(ext.get(name))


def _bool(ext: dict[str, str], *names: str) -> bool:
    return (_field(ext, *names) or "false").lower() == "true"


def _str(ext: dict[str, str], *names: str) -> str:
    raw = _field(ext, *names)
    if raw is None:
        raise BadRequest(f"the header lacks {names[0]}")
    return raw


def _records_body(records: tuple[Record, ...]) -> bytes:
    return b"".join(encode_record(record_from_reference(r)) for r in records)


class Server:
    """One model served to any number of connections."""

    def __init__(self, target: WallClockTarget, *, tick_ms: int = 5) -> None:
        self.target = target
        self.tick_ms = tick_ms
        self.groups: dict[str, list[asyncio.StreamWriter]] = defaultdict(list)  # producer group -> channels
        self.connections = 0
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._opaque = 0
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> Host:
        self._server = await asyncio.start_server(self._serve, host, port)
        self._ticker = asyncio.create_task(self._tick())
        sock = self._server.sockets[0].getsockname()
        return str(sock[0]), int(sock[1])

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):  # a broker that stops drops its connections
                writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    # --- the broker's services ----------------------------------------------------------------------

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.tick_ms / 1000)
            try:
                checks = self.target.advance_to(self.target.now())
            except Exception:  # a model bug must not kill the server silently
                log.exception("the broker's services failed")
                continue
            for c in checks:
                await self._send_check(c)

    async def _send_check(self, c: CheckEvent) -> None:
        """One-way, to one channel of the group, the put-back copy as body. rule: wire/check-request"""
        channels = self.groups.get(c.group) or []
        if not channels:
            return
        m = c.message
        self._opaque += 1
        cmd = check_transaction_state_request(
            record_from_reference(m),
            tran_state_table_offset=c.tran_state_table_offset,
            commit_log_offset=c.commit_log_offset,
            msg_id=m.uniq_key,
            transaction_id=m.uniq_key,
            offset_msg_id=m.msg_id,
            opaque=self._opaque,
        )
        writer = channels[self._opaque % len(channels)]  # the broker picks one channel of the group
        with contextlib.suppress(ConnectionError):
            writer.write(encode_frame(cmd))
            await writer.drain()

    # --- connections -----------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        peer = writer.get_extra_info("peername") or ("127.0.0.1", 0)
        host: Host = (str(peer[0]), int(peer[1]))
        mine: set[str] = set()
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                try:
                    commands = decoder.feed(data)
                except ProtocolError as e:
                    log.warning("closing %s:%d: %s", host[0], host[1], e)
                    break
                for cmd in commands:
                    if cmd.is_response:
                        continue  # answers to our one-way checks do not exist; ignore strays
                    self.requests += 1
                    answer = self.handle(cmd, host, writer, mine)
                    if answer is not None and not cmd.is_oneway:
                        writer.write(encode_frame(answer))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # the server is closing
            pass
        finally:
            self._writers.discard(writer)
            for g in mine:
                self._unregister(g, writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _unregister(self, group: str, writer: asyncio.StreamWriter) -> None:
        channels = self.groups.get(group, [])
        if writer in channels:
            channels.remove(writer)
        if not channels:
            self.groups.pop(group, None)
            self.target.execute(Heartbeat(group, online=False))

    # --- requests ------------------------------------------------------------------------------------------

    def handle(
        self, cmd: RemotingCommand, peer: Host, writer: asyncio.StreamWriter, mine: set[str]
    ) -> RemotingCommand | None:
        """The answer to one request (None: none is sent). rule: wire/request-response"""
        handler = self._handlers().get(cmd.code)
        if handler is None:
            return response_for(
                cmd, Code.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {cmd.code} not supported"
            )
        try:
            if cmd.code == RequestCode.HEART_BEAT:
                return self._heartbeat(cmd, writer, mine)
            if cmd.code == RequestCode.UNREGISTER_CLIENT:
                group = cmd.ext.get("producerGroup")
                if group and group in mine:
                    mine.discard(group)
                    self._unregister(group, writer)
                return response_for(cmd, Code.SUCCESS)
            return handler(cmd, peer)
        except BadRequest as e:
            return response_for(cmd, Code.SYSTEM_ERROR, remark=str(e))

    def _handlers(self) -> dict[int, Callable[[RemotingCommand, Host], RemotingCommand | None]]:
        return {
            RequestCode.SEND_MESSAGE: self._send,
            RequestCode.SEND_MESSAGE_V2: self._send,
            RequestCode.SEND_BATCH_MESSAGE: self._send,
            RequestCode.PULL_MESSAGE: self._pull,
            RequestCode.CONSUMER_SEND_MSG_BACK: self._send_back,
            RequestCode.END_TRANSACTION: self._end_tx,
            RequestCode.HEART_BEAT: self._send,  # handled in ``handle``
            RequestCode.UNREGISTER_CLIENT: self._send,  # handled in ``handle``
            RequestCode.GET_MAX_OFFSET: self._max_offset,
            RequestCode.VIEW_MESSAGE_BY_ID: self._view,
            RequestCode.QUERY_MESSAGE: self._query,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self._subscription_group,
        }

    def _subscription_group(self, cmd: RemotingCommand, peer: Host) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): a SubscriptionGroupConfig as JSON; the model keeps a
        group's retryQueueNums and retryMaxTimes (AdminBrokerProcessor.updateAndCreateSubscriptionGroup)."""
        try:
            body = json.loads(cmd.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise BadRequest(f"the body is not a SubscriptionGroupConfig in JSON: {e}") from None
        if not isinstance(body, dict) or not isinstance(body.get("groupName"), str):
            raise BadRequest("the body is not a SubscriptionGroupConfig in JSON (no groupName)")
        values = [body.get("retryQueueNums", 1), body.get("retryMaxTimes", 16)]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise BadRequest(f"retryQueueNums and retryMaxTimes must be integers, got {values}")
        self.target.update_group(body["groupName"], int(values[0]), int(values[1]))
        return response_for(cmd, Code.SUCCESS)

    def _run(self, op: Op) -> Response:
        return self.target.execute(op)

    def _send(self, cmd: RemotingCommand, peer: Host) -> RemotingCommand:
        """SEND_MESSAGE (long names), SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (a..n). rule: wire/send-headers"""
        e = cmd.ext
        topic = _str(e, "b", "topic")
        properties = props(decode_properties(_field(e, "i", "properties") or ""))
        queue_id = _int(e, "e", "queueId")
        sys_flag = _int(e, "f", "sysFlag", default=0)
        born = _int(e, "g", "bornTimestamp", long=True)
        queue_nums = _int(e, "d", "defaultTopicQueueNums", default=4)
        op: Op
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE or _bool(e, "m", "batch"):
            try:
                inner = decode_batch_body(cmd.body)
            except ProtocolError as err:
                raise BadRequest(f"the batch body cannot be read: {err}") from None
            entries = tuple(BatchEntry(m.body, props(m.props), m.flag) for m in inner)
            batch = Batch(topic, entries, queue_id, sys_flag, properties, born, peer, queue_nums)
            op = SendBatch(batch)
        else:
            message = Message(
                topic=topic,
                body=cmd.body,
                properties=properties,
                queue_id=queue_id,
                sys_flag=sys_flag,
                flag=_int(e, "h", "flag", default=0),
                born_timestamp=born,
                born_host=peer,
                producer_group=_field(e, "a", "producerGroup") or "",
                reconsume_times=_reconsume_field(e, "j", "reconsumeTimes"),
                max_reconsume_times=_reconsume_field(e, "l", "maxReconsumeTimes"),
                default_topic_queue_nums=queue_nums,
                version=cmd.version,
            )
            op = Send(message)
        r = self._run(op)
        # The send answer's MSG_REGION (the broker's regionId) and TRACE_ON, as SendMessageProcessor sets them.
        ext: list[tuple[str, str]] = [("MSG_REGION", self.target.info.config.region_id), ("TRACE_ON", "true")]
        if "msg_id" in r.fields:
            ext = [
                *ext,
                ("msgId", str(r.fields["msg_id"])),
                ("queueId", str(r.fields["queue_id"])),
                ("queueOffset", str(r.fields["queue_offset"])),
            ]
        return response_for(cmd, r.code, remark=r.remark, ext_fields=ext)

    def _pull(self, cmd: RemotingCommand, peer: Host) -> RemotingCommand:
        """Offsets in the header, records in the body. rule: wire/pull-response"""
        e = cmd.ext
        op = Pull(
            _str(e, "topic"),
            _int(e, "queueId"),
            _int(e, "queueOffset", long=True),
            _int(e, "maxMsgNums", default=32),
            _str(e, "consumerGroup"),
            client=peer,  # the remark of pull/queue-id-range names the connection's address
        )
        r = self._run(op)
        if "next_begin_offset" not in r.fields:
            return response_for(cmd, r.code, remark=r.remark)
        ext = [
            ("maxOffset", str(r.fields["max_offset"])),
            ("minOffset", str(r.fields["min_offset"])),
            ("nextBeginOffset", str(r.fields["next_begin_offset"])),
            ("suggestWhichBrokerId", "0"),
        ]
        remark = r.remark or ("FOUND" if r.code == Code.SUCCESS else None)
        return response_for(cmd, r.code, remark=remark, ext_fields=ext, body=_records_body(r.records))

    def _send_back(self, cmd: RemotingCommand, peer: Host) -> RemotingCommand:
        e = cmd.ext
        req = SendBack(
            group=_str(e, "group"),
            offset=_int(e, "offset", long=True),
            delay_level=_int(e, "delayLevel", default=0),
            # decodeCommandCustomHeader leaves a value Integer.parseInt refuses null: the group's limit
            # applies (rule: sendback/max-reconsume-times)
            max_reconsume_times=parse_int(e.get("maxReconsumeTimes")),
            origin_msg_id=_field(e, "originMsgId"),
            origin_topic=_field(e, "originTopic"),
            version=cmd.version,
        )
        r = self._run(ConsumerSendBack(req))
        return response_for(cmd, r.code, remark=r.remark)

    def _end_tx(self, cmd: RemotingCommand, peer: Host) -> RemotingCommand | None:
        """END_TRANSACTION as EndTransactionProcessor decodes it. rule: wire/end-transaction

        decodeCommandCustomHeader logs and skips a field it cannot read (a missing one, or a number
        Integer.parseInt / Long.parseLong refuses), leaving it null; then checkFields refuses a type that
        is not 0, 8 or 12 (RemotingCommandException) and unboxing a null type throws. UNKNOW is answered
        by nothing, whatever the other fields; a null offset throws where it is first compared, a null
        producer group equals no record's PGROUP. Exceptions are answered SYSTEM_ERROR with their
        description (the first stack frame the broker appends is left out).
        """
        e = cmd.ext
        action_num = parse_int(e.get("commitOrRollback"))
        if action_num is None:
            return response_for(cmd, Code.SYSTEM_ERROR, remark="java.lang.NullPointerException")
        if action_num not in (TxAction.UNKNOW, TxAction.COMMIT, TxAction.ROLLBACK):
            return response_for(cmd, Code.SYSTEM_ERROR, remark=_COMMIT_OR_ROLLBACK_WRONG)
        action = TxAction(action_num)
        commit_log_offset = parse_long(e.get("commitLogOffset"))
        table_offset = parse_long(e.get("tranStateTableOffset"))
        if action != TxAction.UNKNOW and commit_log_offset is None:
            return response_for(cmd, Code.SYSTEM_ERROR, remark="java.lang.NullPointerException")
        req = EndTransaction(
            producer_group=e.get("producerGroup", _NO_GROUP),
            tran_state_table_offset=-1 if table_offset is None else table_offset,
            commit_log_offset=-1 if commit_log_offset is None else commit_log_offset,
            action=action,
            from_check=_bool(e, "fromTransactionCheck"),
            msg_id=_field(e, "msgId"),
            transaction_id=_field(e, "transactionId"),
        )
        r = self._run(EndTx(req))
        if r.no_response:
            return None
        remark = r.remark
        if table_offset is None and remark == "The transaction state table offset wrong":
            remark = "java.lang.NullPointerException"  # the null offset is unboxed where it is compared
        return response_for(cmd, r.code, remark=remark)

    def _heartbeat(
        self, cmd: RemotingCommand, writer: asyncio.StreamWriter, mine: set[str]
    ) -> RemotingCommand:
        """Each producer group named makes this connection one of its channels. rule: wire/heartbeat"""
        try:
            data = json.loads(cmd.body.decode("utf-8")) if cmd.body else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            return response_for(cmd, Code.SYSTEM_ERROR, remark=f"the heart beat body is not JSON: {err}")
        producers = data.get("producerDataSet") if isinstance(data, dict) else None
        for p in producers if isinstance(producers, list) else []:
            group = p.get("groupName") if isinstance(p, dict) else None
            if not isinstance(group, str) or not group:
                continue
            channels = self.groups[group]
            if writer not in channels:
                channels.append(writer)
            mine.add(group)
            self._run(Heartbeat(group))
        consumers = data.get("consumerDataSet") if isinstance(data, dict) else None
        for c in consumers if isinstance(consumers, list) else []:
            group = c.get("groupName") if isinstance(c, dict) else None
            if isinstance(group, str) and group:
                self._run(Heartbeat(group, consumer=True))  # rule: sendback/retry-topic
        return response_for(cmd, Code.SUCCESS)

    def _max_offset(self, cmd: RemotingCommand, peer: Host) -> RemotingCommand:
        e = cmd.ext
        r = self._run(GetMaxOffset(_str(e, "topic"), _int(e, "queueId")))
        ext = [("offset", str(r.fields["offset"]))] if "offset" in r.fields else None
        return response_for(cmd, r.code, remark=r.remark, ext_fields=ext)

    def _view(self, cmd: RemotingCommand, peer: Host) -> RemotingCommand:
        r = self._run(ViewMessage(_int(cmd.ext, "offset", long=True)))
        return response_for(cmd, r.code, remark=r.remark, body=_records_body(r.records[:1]))

    def _query(self, cmd: RemotingCommand, peer: Host) -> RemotingCommand:
        e = cmd.ext
        if not _bool(e, "_UNIQUE_KEY_QUERY"):
            return response_for(
                cmd, Code.REQUEST_CODE_NOT_SUPPORTED, remark="rmqspec serve answers queries by UNIQ_KEY only"
            )
        r = self._run(QueryUniqKey(_str(e, "topic"), _str(e, "key")))
        ext = [("indexLastUpdatePhyoffset", "0"), ("indexLastUpdateTimestamp", "0")]
        return response_for(cmd, r.code, remark=r.remark, ext_fields=ext, body=_records_body(r.records))


class BackgroundServer:
    """A ``Server`` on a loop of its own in a daemon thread: ``with BackgroundServer(t) as (host, port)``."""

    def __init__(self, target: WallClockTarget, host: str = "127.0.0.1", port: int = 0) -> None:
        self.target, self.host, self.port = target, host, port
        self.loop = asyncio.new_event_loop()
        self.server = Server(target)
        self.thread = threading.Thread(target=self.loop.run_forever, name="rmqspec-serve", daemon=True)

    def __enter__(self) -> Host:
        self.thread.start()
        fut = asyncio.run_coroutine_threadsafe(self.server.start(self.host, self.port), self.loop)
        return fut.result(10)

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def serve_forever(
    target: WallClockTarget,
    host: str,
    port: int,
    *,
    ready: Callable[[Host], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (or forever)."""
    server = Server(target)
    bound = await server.start(host, port)
    if ready is not None:
        ready(bound)
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await server.close()

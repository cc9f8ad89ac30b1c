"""An asyncio client of the RocketMQ 4.x remoting protocol (facts §8, §10), on top of ``codec``.

One TCP connection. Requests get an ``opaque`` counting up from 1 and are matched to their response by it;
every call has a timeout (``RemotingTimeout``); losing the connection fails every pending call with
``ConnectionLost``. Requests the broker starts itself (CHECK_TRANSACTION_STATE, code 39, flag 2) go to a
handler; a two-way broker request is answered with what the handler returns.

The typed methods return the codec's small result types and do not raise on a broker error code: the
result's ``code`` says what the broker answered (a conformance suite wants to see it).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType

import attrs

from rmqspec.reference.constants import DEFAULT_TOPIC, Code

from .codec import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    VERSION_4_9_4,
    VERSION_4_9_5,
    VERSION_5_0_0,
    BatchMessage,
    ConsumerData,
    FrameDecoder,
    MaxOffsetResponse,
    ProtocolError,
    PullResponse,
    QueryMessageResponse,
    RemotingCommand,
    Reply,
    RouteResponse,
    SendMessageHeader,
    SendResponse,
    ViewMessageResponse,
    consumer_send_msg_back_request,
    encode_frame,
    end_transaction_request,
    get_max_offset_request,
    get_route_request,
    heartbeat_request,
    parse_max_offset_response,
    parse_pull_response,
    parse_query_message_response,
    parse_reply,
    parse_route_response,
    parse_send_response,
    parse_view_message_response,
    pull_message_request,
    query_message_request,
    response_for,
    send_batch_request,
    send_message_request,
    view_message_request,
)

log = logging.getLogger(__name__)

RequestHandler = Callable[[RemotingCommand], Awaitable[RemotingCommand | None] | RemotingCommand | None]
"""Called with each request the broker starts; for a two-way request, the returned command is the answer."""

FrameTap = Callable[[str, bytes, RemotingCommand], None]
"""Called with ``("sent", frame, command)`` for every frame written and ``("received", frame, command)`` for
every frame read, ``frame`` being the exact bytes on the wire (the wire-vector recorder uses it)."""

DEFAULT_TIMEOUT = 3.0  # seconds, the Java client's default send timeout
_MAX_OPAQUE = (1 << 31) - 1


class RemotingError(Exception):
    """Base of the client's errors."""


class RemotingTimeout(RemotingError, TimeoutError):
    """No response within the call's timeout."""


class ConnectionLost(RemotingError, ConnectionError):
    """The connection is closed, was lost, or was never opened; pending calls fail with this."""


class MalformedFrame(ConnectionLost):
    """The peer sent bytes that are not a frame (wire/frame): the stream cannot be read on, so the
    connection is dropped and pending calls fail with this. ``frame`` shows the first bytes (hex)."""

    rule = "wire/frame"

    def __init__(self, message: str, frame: str) -> None:
        super().__init__(message)
        self.frame = frame


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def default_client_id() -> str:
    """``ip@pid``, the shape of the Java client's id."""
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}@{os.getpid()}"


class RemotingClient:
    """A remoting connection to one broker (or name server).

    ``timeout`` is the default of every call (seconds); ``language`` and ``version`` go into every request
    header (the recorded frames use ``"JAVA"`` and 401; facts §10 notes ``"PYTHON"`` is accepted too).

    The typed calls send the header fields Apache's Java client of ``version`` sets (tests/test_wire_java_client.py
    cites each): from 4.9.5 (403) a ``bname`` (``broker_name``, the broker's name in the route; left out
    while it is None), from 5.0.0 (413) END_TRANSACTION's ``topic``.
    """

    def __init__(
        self,
        *,
        handler: RequestHandler | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        language: str = "JAVA",
        version: int = VERSION_4_9_4,
        client_id: str | None = None,
        tap: FrameTap | None = None,
        broker_name: str | None = None,
    ) -> None:
        self.handler = handler
        self.broker_name = broker_name
        self.tap = tap
        self.timeout = timeout
        self.language = language
        self.version = version
        self.client_id = client_id or default_client_id()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._handler_tasks: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()
        self._opaque = 0
        self._lost: ConnectionLost | None = ConnectionLost("not connected")
        self.peer: tuple[str, int] | None = None

    # --- connection ------------------------------------------------------------------------------------

    async def connect(self, host: str, port: int, *, timeout: float | None = None) -> None:
        """Open the TCP connection (within ``timeout``)."""
        if self._writer is not None:
            raise RemotingError("already connected")
        t = self.timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(t):
                self._reader, self._writer = await asyncio.open_connection(host, port)
        except TimeoutError:
            raise RemotingTimeout(f"connecting to {host}:{port} took more than {t} s") from None
        except OSError as e:
            raise ConnectionLost(f"cannot connect to {host}:{port}: {e}") from e
        self.peer = (host, port)
        self._lost = None
        self._read_task = asyncio.create_task(
            self._read_loop(FrameDecoder()), name=f"remoting-read-{host}:{port}"
        )

    @property
    def connected(self) -> bool:
        return self._lost is None

    async def close(self) -> None:
        """Close the connection; pending calls fail with ``ConnectionLost``. Safe to call twice."""
        self._fail_all(ConnectionLost("client closed"))
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for t in list(self._handler_tasks):
            t.cancel()
        await self._close_writer()

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        writer.close()
        with contextlib.suppress(OSError, TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(1.0):
                await writer.wait_closed()

    def _fail_all(self, error: ConnectionLost) -> None:
        if self._lost is None:
            self._lost = error
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)

    async def _read_loop(self, decoder: FrameDecoder) -> None:
        assert self._reader is not None
        where = f"{self.peer[0]}:{self.peer[1]}" if self.peer else "peer"
        try:
            while True:
                data = await self._reader.read(65536)
                if not data:
                    try:
                        decoder.finish()
                    except ProtocolError as e:  # closed halfway through a frame: lost, not malformed
                        raise ConnectionLost(f"connection to {where} closed by the peer: {e}") from None
                    raise ConnectionLost(f"connection to {where} closed by the peer")
                for frame, cmd in decoder.feed_raw(data):
                    if self.tap is not None:
                        self.tap("received", frame, cmd)
                    self._dispatch(cmd)
        except ConnectionLost as e:
            self._fail_all(e)
        except ProtocolError as e:
            raw = decoder.bad_bytes
            shown = f"{len(raw)} bytes: {raw.hex()}" if raw else "no bytes kept"
            self._fail_all(MalformedFrame(f"connection to {where} dropped: not a frame: {e}", shown))
        except OSError as e:
            self._fail_all(ConnectionLost(f"connection to {where} lost: {e}"))
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            fut = self._pending.pop(cmd.opaque, None)
            if fut is None:
                log.debug("response with opaque %d matches no pending call (late?)", cmd.opaque)
            elif not fut.done():
                fut.set_result(cmd)
            return
        task = asyncio.create_task(self._handle(cmd))
        self._handler_tasks.add(task)
        task.add_done_callback(self._handler_tasks.discard)

    async def _handle(self, request: RemotingCommand) -> None:
        """Run the handler on a broker-started request; answer a two-way one as the Java client does."""
        answer: RemotingCommand | None
        if self.handler is None:
            answer = response_for(
                request, Code.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {request.code} not supported"
            )
        else:
            try:
                result = self.handler(request)
                answer = await result if inspect.isawaitable(result) else result
            except Exception as e:
                log.exception("handler failed on request code %d", request.code)
                answer = response_for(request, Code.SYSTEM_ERROR, remark=f"{type(e).__name__}: {e}")
        if request.is_oneway or answer is None:
            return
        reply = attrs.evolve(answer, opaque=request.opaque, flag=answer.flag | FLAG_RESPONSE)
        try:
            async with asyncio.timeout(self.timeout):
                await self._write(encode_frame(reply), reply)
        except (RemotingError, ProtocolError, TimeoutError) as e:
            log.warning("could not answer request code %d (opaque %d): %s", request.code, request.opaque, e)

    # --- raw calls ------------------------------------------------------------------------------------

    def _next_opaque(self) -> int:
        self._opaque = self._opaque + 1 if self._opaque < _MAX_OPAQUE else 1
        return self._opaque

    def _stamp(self, cmd: RemotingCommand, flag: int, version: int | None = None) -> RemotingCommand:
        return attrs.evolve(
            cmd,
            opaque=self._next_opaque(),
            flag=flag,
            language=self.language,
            version=self.version if version is None else version,
        )

    async def _write(self, frame: bytes, cmd: RemotingCommand) -> None:
        async with self._write_lock:
            if self._lost is not None or self._writer is None:
                raise self._lost or ConnectionLost("not connected")
            if self.tap is not None:
                self.tap("sent", frame, cmd)
            try:
                self._writer.write(frame)
                await self._writer.drain()
            except OSError as e:
                error = ConnectionLost(f"write failed: {e}")
                self._fail_all(error)
                raise error from e

    async def invoke(
        self, cmd: RemotingCommand, timeout: float | None = None, *, version: int | None = None
    ) -> RemotingCommand:
        """Send ``cmd`` as a two-way request (a fresh opaque, flag 0) and wait for its response.
        ``version`` overrides the client's protocol version for this request (the broker reads some
        header fields only from a version on, e.g. send-back's maxReconsumeTimes from V3_4_9)."""
        if self._lost is not None:
            raise self._lost
        request = self._stamp(cmd, cmd.flag & ~(FLAG_ONEWAY | FLAG_RESPONSE), version)
        frame = encode_frame(request)
        t = self.timeout if timeout is None else timeout
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[request.opaque] = fut
        try:
            async with asyncio.timeout(t):
                await self._write(frame, request)
                return await fut
        except TimeoutError:
            raise RemotingTimeout(
                f"no response to request code {request.code} (opaque {request.opaque}) within {t} s"
            ) from None
        finally:
            self._pending.pop(request.opaque, None)
            if fut.done() and not fut.cancelled():
                # A failed write also failed this request's future (_fail_all) before it was awaited:
                # retrieve it, or asyncio prints "Future exception was never retrieved" and a traceback.
                fut.exception()

    async def invoke_oneway(self, cmd: RemotingCommand, timeout: float | None = None) -> None:
        """Send ``cmd`` one-way (flag bit 1); returns once written. No response comes (facts §8)."""
        if self._lost is not None:
            raise self._lost
        request = self._stamp(cmd, (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE)
        frame = encode_frame(request)
        t = self.timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(t):
                await self._write(frame, request)
        except TimeoutError:
            raise RemotingTimeout(f"one-way request code {cmd.code} not written within {t} s") from None

    # --- typed calls (facts §8 headers) ---------------------------------------------------------------

    def _bname(self, version: int | None = None) -> str | None:
        """The ``bname`` field a Java client of this version sets (RpcRequestHeader, from 4.9.5), or None."""
        return self.broker_name if (self.version if version is None else version) >= VERSION_4_9_5 else None

    async def send_message(
        self,
        producer_group: str,
        topic: str,
        body: bytes,
        *,
        properties: Mapping[str, str] | str = "",
        queue_id: int = 0,
        sys_flag: int = 0,
        flag: int = 0,
        born_timestamp: int | None = None,
        reconsume_times: int = 0,
        max_reconsume_times: int | None = None,
        unit_mode: bool = False,
        default_topic: str = DEFAULT_TOPIC,
        default_topic_queue_nums: int = 4,
        broker_name: str | None = None,
        v2: bool = True,
        version: int | None = None,
        timeout: float | None = None,
    ) -> SendResponse:
        """SEND_MESSAGE_V2 (310), or SEND_MESSAGE (10) with ``v2=False``."""
        header = SendMessageHeader(
            producer_group=producer_group,
            topic=topic,
            born_timestamp=_now_ms() if born_timestamp is None else born_timestamp,
            queue_id=queue_id,
            sys_flag=sys_flag,
            flag=flag,
            properties=properties,
            reconsume_times=reconsume_times,
            unit_mode=unit_mode,
            max_reconsume_times=max_reconsume_times,
            default_topic=default_topic,
            default_topic_queue_nums=default_topic_queue_nums,
            broker_name=self._bname(version) if broker_name is None else broker_name,
        )
        request = send_message_request(header, body, v2=v2)
        return parse_send_response(await self.invoke(request, timeout, version=version))

    async def send_batch(
        self,
        producer_group: str,
        topic: str,
        messages: Iterable[BatchMessage],
        *,
        properties: Mapping[str, str] | str = "",
        queue_id: int = 0,
        born_timestamp: int | None = None,
        default_topic: str = DEFAULT_TOPIC,
        default_topic_queue_nums: int = 4,
        timeout: float | None = None,
    ) -> SendResponse:
        """SEND_BATCH_MESSAGE (320); ``properties`` are the batch wrapper's (facts §1.4)."""
        header = SendMessageHeader(
            producer_group=producer_group,
            topic=topic,
            born_timestamp=_now_ms() if born_timestamp is None else born_timestamp,
            queue_id=queue_id,
            properties=properties,
            default_topic=default_topic,
            default_topic_queue_nums=default_topic_queue_nums,
            broker_name=self._bname(),
        )
        return parse_send_response(await self.invoke(send_batch_request(header, messages), timeout))

    async def pull(
        self,
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
        timeout: float | None = None,
    ) -> PullResponse:
        """PULL_MESSAGE (11). With a long poll, give a ``timeout`` above ``suspend_timeout_millis``."""
        cmd = pull_message_request(
            consumer_group,
            topic,
            queue_id,
            queue_offset,
            max_msg_nums=max_msg_nums,
            sys_flag=sys_flag,
            commit_offset=commit_offset,
            suspend_timeout_millis=suspend_timeout_millis,
            subscription=subscription,
            sub_version=sub_version,
            expression_type=expression_type,
            # 5.x Java clients always set maxMsgBytes (DefaultMQPushConsumer.pullBatchSizeInBytes, 256 KiB by
            # default); the 5.x broker does not read it (PullMessageProcessor), 4.x clients do not send it.
            max_msg_bytes=(256 * 1024 if max_msg_bytes is None else max_msg_bytes)
            if self.version >= VERSION_5_0_0
            else None,
            broker_name=self._bname(),
        )
        return parse_pull_response(await self.invoke(cmd, timeout))

    async def consumer_send_msg_back(
        self,
        group: str,
        offset: int,
        *,
        delay_level: int = 0,
        origin_msg_id: str | None = None,
        origin_topic: str | None = None,
        unit_mode: bool = False,
        max_reconsume_times: int | None = None,
        version: int | None = None,
        timeout: float | None = None,
    ) -> Reply:
        """CONSUMER_SEND_MSG_BACK (36); ``offset`` is the message's commit-log offset (facts §4.1).
        The broker reads ``maxReconsumeTimes`` only from a request of ``version`` >= 121 (V3_4_9)."""
        cmd = consumer_send_msg_back_request(
            group,
            offset,
            delay_level=delay_level,
            origin_msg_id=origin_msg_id,
            origin_topic=origin_topic,
            unit_mode=unit_mode,
            max_reconsume_times=max_reconsume_times,
            broker_name=self._bname(version),
        )
        return parse_reply(await self.invoke(cmd, timeout, version=version))

    async def end_transaction(
        self,
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
        timeout: float | None = None,
    ) -> Reply | None:
        """END_TRANSACTION (37): one-way (returns None) as the Java producer sends it, or two-way (facts §10).

        ``msg_id`` is what the Java producer puts there: the send result's msgId, i.e. the half message's
        UNIQ_KEY (DefaultMQProducerImpl.endTransaction: ``setMsgId(sendResult.getMsgId())``; a check's answer:
        the checked message's UNIQ_KEY). ``topic`` (the half message's real topic) is sent from 5.0.0."""
        cmd = end_transaction_request(
            producer_group,
            tran_state_table_offset,
            commit_log_offset,
            commit_or_rollback,
            msg_id=msg_id,
            transaction_id=transaction_id,
            from_transaction_check=from_transaction_check,
            oneway=oneway,
            topic=topic if self.version >= VERSION_5_0_0 else None,
            broker_name=self._bname(),
        )
        if oneway:
            await self.invoke_oneway(cmd, timeout)
            return None
        return parse_reply(await self.invoke(cmd, timeout))

    async def heartbeat(
        self,
        producer_groups: Iterable[str] = (),
        consumer_groups: Iterable[str | ConsumerData] = (),
        *,
        timeout: float | None = None,
    ) -> Reply:
        """HEART_BEAT (34): registers producer groups (needed for transaction checks) and consumers (facts §10)."""
        cmd = heartbeat_request(self.client_id, producer_groups, consumer_groups)
        return parse_reply(await self.invoke(cmd, timeout))

    async def get_max_offset(
        self, topic: str, queue_id: int, *, timeout: float | None = None
    ) -> MaxOffsetResponse:
        """GET_MAX_OFFSET (30)."""
        cmd = get_max_offset_request(topic, queue_id, broker_name=self._bname())
        return parse_max_offset_response(await self.invoke(cmd, timeout))

    async def view_message(
        self, commit_log_offset: int, *, topic: str | None = None, timeout: float | None = None
    ) -> ViewMessageResponse:
        """VIEW_MESSAGE_BY_ID (33) by commit-log offset; ``topic`` is sent from 5.0.0, as Java's client does."""
        cmd = view_message_request(commit_log_offset, topic=topic if self.version >= VERSION_5_0_0 else None)
        return parse_view_message_response(await self.invoke(cmd, timeout))

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        unique_key: bool = True,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int | None = None,
        timeout: float | None = None,
    ) -> QueryMessageResponse:
        """QUERY_MESSAGE (12); by UNIQ_KEY (``_UNIQUE_KEY_QUERY=true``) by default, else by KEYS
        (``_UNIQUE_KEY_QUERY=false``: the Java client always sends the flag)."""
        cmd = query_message_request(
            topic,
            key,
            max_num=max_num,
            begin_timestamp=begin_timestamp,
            end_timestamp=_now_ms() if end_timestamp is None else end_timestamp,
            unique_key=unique_key,
        )
        return parse_query_message_response(await self.invoke(cmd, timeout))

    async def get_route(self, topic: str, *, timeout: float | None = None) -> RouteResponse:
        """GET_ROUTEINFO_BY_TOPIC (105); meaningful on a connection to a name server."""
        return parse_route_response(await self.invoke(get_route_request(topic), timeout))

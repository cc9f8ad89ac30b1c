"""One codec for what a history holds: operations, responses, records and check requests as JSON values.

Every place that writes or reads a history (``history.RecordingTarget``, ``history.load``, the checker,
the trace format) goes through these functions, so an operation means the same thing everywhere:

* ``op_to_json(op)`` / ``op_from_json(d)``: a ``rmqspec.reference.model.Op`` as ``{"f": kind, ...}``,
  every field of the operation (for a send, every field of ``Message``). In a history event the kind is
  the event's ``f`` and the rest its ``value`` (``op_arguments``, ``event_op``).
* ``record_to_json`` / ``record_from_json``: a stored record as a consumer decodes it.
* ``response_to_json`` / ``response_from_json``: a target's ``Response``.
* ``check_to_json`` / ``check_from_json``: a CHECK_TRANSACTION_STATE the broker sent.
* ``response_of(observation)``: the wire view of what the model answered (what an in-process target
  returns).

A body is ``"body": text`` when it is UTF-8, else ``"body_base64"``: nothing is lost on the way. Reading
is strict: an unknown kind, a missing or extra field, or a value of the wrong type raises ``CodecError``
with one line that names the field. Fields added in history format 2 (``flag``, ``born_timestamp``,
``version``, ... of a send) take their defaults when absent, which is how format 1 is read.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any, Final

from rmqspec.reference.batch import Batch, BatchEntry
from rmqspec.reference.constants import Code, Prop, TxAction
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
from rmqspec.reference.observations import (
    Ack,
    BatchOk,
    EndTxOk,
    Found,
    MaxOffset,
    NoResponse,
    Observation,
    PullResult,
    Rejected,
    SendBackOk,
    SendOk,
)
from rmqspec.reference.pull import DEFAULT_CLIENT
from rmqspec.reference.put import Message
from rmqspec.reference.records import Props, Record, props, stored_size
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

from .contract import CheckEvent, Response

# The operation kinds a history may hold, and what the broker reports on its own.
OP_KINDS: Final = (
    "send",
    "send_half",
    "send_batch",
    "pull",
    "send_back",
    "end_tx",
    "heartbeat",
    "max_offset",
    "view",
    "query",
)
RESTART: Final = "restart"  # not an Op: the suite restarts the broker (invoke / ok)
CHECK: Final = "check"  # not an Op: a CHECK_TRANSACTION_STATE the broker sent (process -1)
EVENT_KINDS: Final = (*OP_KINDS, RESTART, CHECK)


class CodecError(ValueError):
    """A JSON value that is not what the codec writes; the message is one line naming the field."""


# --- small readers ------------------------------------------------------------------------------------


class _Fields:
    """Reads a JSON object field by field, then refuses fields nobody read."""

    def __init__(self, d: object, what: str) -> None:
        if not isinstance(d, Mapping):
            raise CodecError(f"{what}: expected a JSON object, got {type(d).__name__}")
        self.d = d
        self.what = what
        self.read: set[str] = set()

    def _get(self, key: str) -> object:
        self.read.add(key)
        return self.d.get(key)

    def has(self, key: str) -> bool:
        return key in self.d

    def num(self, key: str, default: int | None = None) -> int:
        v = self._get(key)
        if v is None:
            if default is None:
                raise CodecError(f"{self.what}: missing {key!r}")
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise CodecError(f"{self.what}: {key!r} must be a whole number, not {v!r}")
        return v

    def opt_num(self, key: str) -> int | None:
        v = self._get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise CodecError(f"{self.what}: {key!r} must be a whole number or null, not {v!r}")
        return v

    def text(self, key: str, default: str | None = None) -> str:
        v = self._get(key)
        if v is None:
            if default is None:
                raise CodecError(f"{self.what}: missing {key!r}")
            return default
        if not isinstance(v, str):
            raise CodecError(f"{self.what}: {key!r} must be a string, not {v!r}")
        return v

    def opt_text(self, key: str) -> str | None:
        v = self._get(key)
        if v is not None and not isinstance(v, str):
            raise CodecError(f"{self.what}: {key!r} must be a string or null, not {v!r}")
        return v

    def flag(self, key: str, default: bool = False) -> bool:
        v = self._get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise CodecError(f"{self.what}: {key!r} must be true or false, not {v!r}")
        return v

    def props(self, key: str) -> Props:
        v = self._get(key)
        if v is None:
            return props()
        if not isinstance(v, Mapping) or not all(
            isinstance(k, str) and isinstance(x, str) for k, x in v.items()
        ):
            raise CodecError(f"{self.what}: {key!r} must be an object of strings")
        return props(dict(v))

    def body(self) -> bytes:
        text, b64 = self._get("body"), self._get("body_base64")
        if text is not None and b64 is not None:
            raise CodecError(f"{self.what}: both 'body' and 'body_base64'")
        if b64 is not None:
            if not isinstance(b64, str):
                raise CodecError(f"{self.what}: 'body_base64' must be a string")
            try:
                return base64.b64decode(b64, validate=True)
            except (binascii.Error, ValueError):
                raise CodecError(f"{self.what}: 'body_base64' is not base64") from None
        if text is None:
            return b""
        if not isinstance(text, str):
            raise CodecError(f"{self.what}: 'body' must be a string, not {text!r}")
        return text.encode("utf-8")

    def host(self, key: str, default: tuple[str, int]) -> tuple[str, int]:
        v = self._get(key)
        if v is None:
            return default
        if (
            not isinstance(v, list)
            or len(v) != 2
            or not isinstance(v[0], str)
            or isinstance(v[1], bool)
            or not isinstance(v[1], int)
        ):
            raise CodecError(f"{self.what}: {key!r} must be [host, port], not {v!r}")
        return (v[0], v[1])

    def items(self, key: str) -> list[Any]:
        v = self._get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            raise CodecError(f"{self.what}: {key!r} must be a list")
        return v

    def done(self) -> None:
        extra = sorted(str(k) for k in self.d if k not in self.read)
        if extra:
            raise CodecError(f"{self.what}: unknown field(s) {', '.join(extra)}")


def body_json(body: bytes) -> dict[str, str]:
    """``{"body": text}`` for a UTF-8 body, else ``{"body_base64": ...}``."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode("ascii")}


def body_text(body: bytes) -> str:
    """A body for a message: its text, or its base64 when it is not UTF-8."""
    d = body_json(body)
    return d.get("body", d.get("body_base64", ""))


def _host(h: tuple[str, int]) -> list[object]:
    return [h[0], h[1]]


# --- operations ------------------------------------------------------------------------------------------


def op_kind(op: Op) -> str:
    """The kind of an operation: a send with ``TRAN_MSG=true`` is ``send_half``."""
    match op:
        case Send(message=m):
            return "send_half" if m.properties.get(Prop.TRAN_MSG) == "true" else "send"
        case SendBatch():
            return "send_batch"
        case Pull():
            return "pull"
        case ConsumerSendBack():
            return "send_back"
        case EndTx():
            return "end_tx"
        case Heartbeat():
            return "heartbeat"
        case GetMaxOffset():
            return "max_offset"
        case ViewMessage():
            return "view"
        case QueryUniqKey():
            return "query"
    raise TypeError(f"not an operation: {op!r}")


def op_to_json(op: Op) -> dict[str, Any]:
    """The operation as ``{"f": kind, ...every field}``; ``op_from_json`` reads it back."""
    f = op_kind(op)
    d: dict[str, Any] = {"f": f}
    match op:
        case Send(message=m, queue_choice=c):
            d |= {"topic": m.topic, **body_json(m.body), "properties": dict(m.properties)}
            d |= {"queue": m.queue_id, "sys_flag": m.sys_flag, "flag": m.flag}
            d |= {"born_timestamp": m.born_timestamp, "born_host": _host(m.born_host)}
            d |= {"group": m.producer_group, "reconsume_times": m.reconsume_times}
            d |= {"max_reconsume_times": m.max_reconsume_times}
            d |= {"default_topic_queue_nums": m.default_topic_queue_nums, "version": m.version}
            d |= {"queue_choice": c}
        case SendBatch(batch=b, queue_choice=c):
            d |= {"topic": b.topic, "queue": b.queue_id, "sys_flag": b.sys_flag}
            d["messages"] = [
                {**body_json(e.body), "properties": dict(e.properties), "flag": e.flag, "topic": e.topic}
                for e in b.entries
            ]
            d |= {"properties": dict(b.properties), "born_timestamp": b.born_timestamp}
            d |= {"born_host": _host(b.born_host), "default_topic_queue_nums": b.default_topic_queue_nums}
            d |= {"queue_choice": c}
        case Pull(topic=t, queue_id=q, offset=o, max_msgs=n, group=g, client=client):
            d |= {"topic": t, "queue": q, "offset": o, "max": n, "group": g, "client": _host(client)}
        case ConsumerSendBack(request=r, queue_choice=c):
            d |= {"group": r.group, "offset": r.offset, "delay_level": r.delay_level}
            d |= {"max_reconsume_times": r.max_reconsume_times, "origin_msg_id": r.origin_msg_id}
            d |= {"origin_topic": r.origin_topic, "version": r.version, "queue_choice": c}
        case EndTx(request=r):
            d |= {"group": r.producer_group, "table_offset": r.tran_state_table_offset}
            d |= {"commit_log_offset": r.commit_log_offset, "action": int(r.action)}
            d |= {"from_check": r.from_check, "msg_id": r.msg_id, "transaction_id": r.transaction_id}
        case Heartbeat(group=g, online=on, consumer=c):
            d |= {"group": g, "online": on}
            if c:  # a consumer's heartbeat; absent for a producer's (histories before it read the same)
                d["consumer"] = True
        case GetMaxOffset(topic=t, queue_id=q):
            d |= {"topic": t, "queue": q}
        case ViewMessage(commit_log_offset=o):
            d |= {"offset": o}
        case QueryUniqKey(topic=t, uniq_key=k):
            d |= {"topic": t, "key": k}
    return d


def op_arguments(op: Op) -> tuple[str, dict[str, Any]]:
    """The kind and the arguments of an operation, as a history's invoke event holds them."""
    d = op_to_json(op)
    return d.pop("f"), d


def _send(r: _Fields) -> Send:
    m = Message(
        topic=r.text("topic"),
        body=r.body(),
        properties=r.props("properties"),
        queue_id=r.num("queue", 0),
        sys_flag=r.num("sys_flag", 0),
        flag=r.num("flag", 0),
        born_timestamp=r.opt_num("born_timestamp"),
        born_host=r.host("born_host", ("127.0.0.1", 50000)),
        producer_group=r.text("group", "PG"),
        reconsume_times=r.opt_num("reconsume_times"),
        max_reconsume_times=r.opt_num("max_reconsume_times"),
        default_topic_queue_nums=r.num("default_topic_queue_nums", 4),
        version=r.num("version", 401),
    )
    return Send(m, r.num("queue_choice", 0))


def _batch_entry(d: object, n: int) -> BatchEntry:
    r = _Fields(d, f"send_batch message {n}")
    entry = BatchEntry(r.body(), r.props("properties"), r.num("flag", 0), r.opt_text("topic"))
    r.done()
    return entry


def _send_batch(r: _Fields) -> SendBatch:
    topic = r.text("topic")
    entries = tuple(_batch_entry(m, n) for n, m in enumerate(r.items("messages")))
    b = Batch(
        topic=topic,
        entries=entries,
        queue_id=r.num("queue", 0),
        sys_flag=r.num("sys_flag", 0),
        properties=r.props("properties"),
        born_timestamp=r.opt_num("born_timestamp"),
        born_host=r.host("born_host", ("127.0.0.1", 50000)),
        default_topic_queue_nums=r.num("default_topic_queue_nums", 4),
    )
    return SendBatch(b, r.num("queue_choice", 0))


def _pull(r: _Fields) -> Pull:
    return Pull(
        r.text("topic"),
        r.num("queue", 0),
        r.num("offset", 0),
        r.num("max", 32),
        r.text("group", "CG"),
        r.host("client", DEFAULT_CLIENT),
    )


def _send_back(r: _Fields) -> ConsumerSendBack:
    req = SendBack(
        group=r.text("group"),
        offset=r.num("offset"),
        delay_level=r.num("delay_level", 0),
        max_reconsume_times=r.opt_num("max_reconsume_times"),
        origin_msg_id=r.opt_text("origin_msg_id"),
        origin_topic=r.opt_text("origin_topic"),
        version=r.num("version", 401),
    )
    return ConsumerSendBack(req, r.num("queue_choice", 0))


def _end_tx(r: _Fields) -> EndTx:
    raw = r.num("action")
    try:
        action = TxAction(raw)
    except ValueError:
        raise CodecError(f"{r.what}: 'action' {raw} is not 0, 8 or 12") from None
    req = EndTransaction(
        producer_group=r.text("group"),
        tran_state_table_offset=r.num("table_offset"),
        commit_log_offset=r.num("commit_log_offset"),
        action=action,
        from_check=r.flag("from_check"),
        msg_id=r.opt_text("msg_id"),
        transaction_id=r.opt_text("transaction_id"),
    )
    return EndTx(req)


_READERS: dict[str, Callable[[_Fields], Op]] = {
    "send": _send,
    "send_half": _send,
    "send_batch": _send_batch,
    "pull": _pull,
    "send_back": _send_back,
    "end_tx": _end_tx,
    "heartbeat": lambda r: Heartbeat(r.text("group"), r.flag("online", True), r.flag("consumer", False)),
    "max_offset": lambda r: GetMaxOffset(r.text("topic"), r.num("queue", 0)),
    "view": lambda r: ViewMessage(r.num("offset")),
    "query": lambda r: QueryUniqKey(r.text("topic"), r.text("key")),
}


def op_from_json(d: Mapping[str, Any]) -> Op:
    """The operation ``op_to_json`` wrote. Raises ``CodecError`` (one line) for anything else."""
    if not isinstance(d, Mapping):
        raise CodecError(f"an operation must be a JSON object, not {type(d).__name__}")
    f = d.get("f")
    reader = _READERS.get(f) if isinstance(f, str) else None
    if reader is None:
        raise CodecError(f"unknown operation {f!r} (known: {', '.join(OP_KINDS)})")
    r = _Fields(d, str(f))
    r.read.add("f")
    op = reader(r)
    r.done()
    return op


def event_op(f: str, value: Mapping[str, Any]) -> Op:
    """The operation of a history's invoke event (kind ``f``, arguments ``value``)."""
    if not isinstance(value, Mapping):
        raise CodecError(f"{f}: the invoke's value must be a JSON object")
    if "f" in value:
        raise CodecError(f"{f}: unknown field(s) f")
    return op_from_json({"f": f, **value})


# --- records, responses, checks ------------------------------------------------------------------------


def record_to_json(r: Record) -> dict[str, Any]:
    return {
        "topic": r.topic,
        "queue_id": r.queue_id,
        "queue_offset": r.queue_offset,
        "commit_log_offset": r.commit_log_offset,
        "size": r.size,
        "sys_flag": r.sys_flag,
        "flag": r.flag,
        **body_json(r.body),
        "properties": dict(r.properties),
        "born_timestamp": r.born_timestamp,
        "store_timestamp": r.store_timestamp,
        "born_host": _host(r.born_host),
        "store_host": _host(r.store_host),
        "reconsume_times": r.reconsume_times,
        "prepared_transaction_offset": r.prepared_transaction_offset,
        "msg_id": r.msg_id,
    }


def _host_of_msg_id(msg_id: str | None) -> tuple[str, int] | None:
    """The store host an IPv4 offset message id names (format 1 recorded no store host)."""
    if msg_id is None or len(msg_id) != 32:
        return None
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        return None
    return ".".join(str(b) for b in raw[:4]), int.from_bytes(raw[4:8], "big")


def record_from_json(d: object, what: str = "record") -> Record:
    r = _Fields(d, what)
    topic = r.text("topic")
    body = r.body()
    properties = r.props("properties")
    msg_id = r.opt_text("msg_id")
    store_host = r.host("store_host", _host_of_msg_id(msg_id) or ("127.0.0.1", 10911))
    rec = Record(
        commit_log_offset=r.num("commit_log_offset"),
        size=r.num("size", stored_size(body, topic, properties)),
        topic=topic,
        queue_id=r.num("queue_id"),
        queue_offset=r.num("queue_offset"),
        sys_flag=r.num("sys_flag", 0),
        flag=r.num("flag", 0),
        body=body,
        properties=properties,
        born_timestamp=r.num("born_timestamp", 0),
        store_timestamp=r.num("store_timestamp"),
        born_host=r.host("born_host", ("127.0.0.1", 50000)),
        store_host=store_host,
        reconsume_times=r.num("reconsume_times", 0),
        prepared_transaction_offset=r.num("prepared_transaction_offset", 0),
    )
    r.done()
    return rec


def response_to_json(resp: Response) -> dict[str, Any]:
    return {
        "code": resp.code,
        "remark": resp.remark,
        "fields": dict(resp.fields),
        "records": [record_to_json(r) for r in resp.records],
        "no_response": resp.no_response,
    }


def response_from_json(d: object, what: str = "response") -> Response:
    r = _Fields(d, what)
    code = r.num("code")
    remark = r.opt_text("remark")
    fields = r._get("fields")
    if fields is None:
        fields = {}
    if not isinstance(fields, Mapping) or not all(isinstance(k, str) for k in fields):
        raise CodecError(f"{what}: 'fields' must be an object")
    for k, v in fields.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | str)):
            raise CodecError(f"{what}: field {k!r} must be a number or a string, not {v!r}")
    records = tuple(record_from_json(x, f"{what} record {n}") for n, x in enumerate(r.items("records")))
    resp = Response(code, remark, dict(fields), records, r.flag("no_response"))
    r.done()
    if resp.no_response and (code != 0 or fields or records):
        # history/judged-answers: a request sent one-way has no answer to record
        raise CodecError(f"{what}: no_response (sent one-way) with a code, fields or records: an answer")
    return resp


def check_to_json(c: CheckEvent) -> dict[str, Any]:
    return {
        "group": c.group,
        "table_offset": c.tran_state_table_offset,
        "commit_log_offset": c.commit_log_offset,
        "message": record_to_json(c.message),
    }


def check_from_json(d: object, time: int) -> CheckEvent:
    r = _Fields(d, "check")
    c = CheckEvent(
        time,
        r.text("group", ""),
        r.num("table_offset"),
        r.num("commit_log_offset"),
        record_from_json(r._get("message"), "check message"),
    )
    r.done()
    return c


# --- what the model answered, as a target answers it ---------------------------------------------------


def response_of(obs: Observation) -> Response:
    """The wire view of a model observation: what an in-process target returns for it."""
    match obs:
        case Rejected(code=c, remark=r):
            return Response(int(c), r)
        case SendOk(queue_id=q, queue_offset=o, msg_id=m, code=c):
            return Response(int(c), None, {"queue_id": q, "queue_offset": o, "msg_id": m})
        case BatchOk(queue_id=q, queue_offset=o, msg_id=m, code=c):
            return Response(int(c), None, {"queue_id": q, "queue_offset": o, "msg_id": m})
        case PullResult():
            fields = {
                "next_begin_offset": obs.next_begin_offset,
                "min_offset": obs.min_offset,
                "max_offset": obs.max_offset,
            }
            # PullMessageProcessor's remark is the GetMessageStatus name (pull/status-codes)
            return Response(int(obs.code), obs.status.value, fields, obs.records)
        case SendBackOk(code=c):
            return Response(int(c))
        case EndTxOk(code=c, remark=r):
            return Response(int(c), r)
        case NoResponse():
            return Response(0, None, no_response=True)
        case Found(records=rs, code=c):
            return Response(int(c), None, {}, rs)
        case MaxOffset(offset=o, code=c):
            return Response(int(c), None, {"offset": o})
        case Ack(code=c):
            return Response(int(c))
    raise TypeError(f"unexpected observation {obs!r}")


def code_name(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return str(code)

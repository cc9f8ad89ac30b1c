"""Histories: every operation recorded as invoke / ok / fail / info, with times (Knossos/Jepsen style).

``RecordingTarget`` wraps any target and records what it is asked and what it answers. A history is a
list of ``Event`` values, written as JSON Lines by ``save`` and read back by ``load``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs

from rmqspec.reference.config import BrokerConfig
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
from rmqspec.reference.records import Record

from .contract import CheckEvent, Response, Target, TargetError, TargetInfo

HISTORY_VERSION = 1
TYPES = ("invoke", "ok", "fail", "info")


@attrs.frozen
class Event:
    """One line of a history. ``process`` -1 marks what the broker did on its own (a check request)."""

    index: int
    process: int
    type: str
    f: str
    value: dict[str, Any]
    time: int

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
            "time": self.time,
        }


class HistoryError(ValueError):
    """A history file that cannot be read; names the file and line."""


def record_json(r: Record) -> dict[str, Any]:
    return {
        "topic": r.topic,
        "queue_id": r.queue_id,
        "queue_offset": r.queue_offset,
        "commit_log_offset": r.commit_log_offset,
        "sys_flag": r.sys_flag,
        "flag": r.flag,
        "body": r.body.decode("utf-8", errors="replace"),
        "properties": dict(r.properties),
        "born_timestamp": r.born_timestamp,
        "store_timestamp": r.store_timestamp,
        "reconsume_times": r.reconsume_times,
        "prepared_transaction_offset": r.prepared_transaction_offset,
        "msg_id": r.msg_id,
    }


def op_json(op: Op) -> tuple[str, dict[str, Any]]:
    """The operation's name and its arguments as JSON values."""
    match op:
        case Send(message=m, queue_choice=_):
            kind = "send_half" if m.properties.get("TRAN_MSG") == "true" else "send"
            return kind, {
                "topic": m.topic,
                "queue": m.queue_id,
                "body": m.body.decode("utf-8", errors="replace"),
                "properties": dict(m.properties),
                "sys_flag": m.sys_flag,
                "group": m.producer_group,
                "reconsume_times": m.reconsume_times,
                "max_reconsume_times": m.max_reconsume_times,
            }
        case SendBatch(batch=b):
            return "send_batch", {
                "topic": b.topic,
                "queue": b.queue_id,
                "messages": [
                    {"body": e.body.decode("utf-8", errors="replace"), "properties": dict(e.properties)}
                    for e in b.entries
                ],
                "properties": dict(b.properties),
            }
        case Pull(topic=t, queue_id=q, offset=o, max_msgs=n, group=g):
            return "pull", {"topic": t, "queue": q, "offset": o, "max": n, "group": g}
        case ConsumerSendBack(request=r):
            return "send_back", {
                "group": r.group,
                "offset": r.offset,
                "delay_level": r.delay_level,
                "max_reconsume_times": r.max_reconsume_times,
                "version": r.version,
            }
        case EndTx(request=r):
            return "end_tx", {
                "group": r.producer_group,
                "table_offset": r.tran_state_table_offset,
                "commit_log_offset": r.commit_log_offset,
                "action": int(r.action),
                "from_check": r.from_check,
                "transaction_id": r.transaction_id,
            }
        case Heartbeat(group=g, online=on):
            return "heartbeat", {"group": g, "online": on}
        case GetMaxOffset(topic=t, queue_id=q):
            return "max_offset", {"topic": t, "queue": q}
        case ViewMessage(commit_log_offset=o):
            return "view", {"offset": o}
        case QueryUniqKey(topic=t, uniq_key=k):
            return "query", {"topic": t, "key": k}
    raise TypeError(f"not an operation: {op!r}")


def response_json(resp: Response) -> dict[str, Any]:
    return {
        "code": resp.code,
        "remark": resp.remark,
        "fields": dict(resp.fields),
        "records": [record_json(r) for r in resp.records],
        "no_response": resp.no_response,
    }


def check_json(c: CheckEvent) -> dict[str, Any]:
    return {
        "group": c.group,
        "table_offset": c.tran_state_table_offset,
        "commit_log_offset": c.commit_log_offset,
        "message": record_json(c.message),
    }


class RecordingTarget:
    """A target that records a history of everything that passes through it."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.events: list[Event] = []

    @property
    def info(self) -> TargetInfo:
        return self.target.info

    def now(self) -> int:
        return self.target.now()

    def _add(self, process: int, type_: str, f: str, value: dict[str, Any], time: int) -> None:
        self.events.append(Event(len(self.events), process, type_, f, value, time))

    def note(self, process: int, type_: str, f: str, value: dict[str, Any]) -> None:
        """Record something that happened outside ``execute`` (a broker restart the suite caused)."""
        self._add(process, type_, f, value, self.target.now())

    def advance_to(self, t: int) -> list[CheckEvent]:
        checks = self.target.advance_to(t)
        for c in checks:
            self._add(-1, "ok", "check", check_json(c), c.time)
        return checks

    def execute(self, op: Op, process: int = 0) -> Response:
        f, args = op_json(op)
        self._add(process, "invoke", f, args, self.target.now())
        try:
            resp = self.target.execute(op)
        except TargetError as e:
            self._add(process, "info", f, {"error": str(e)}, self.target.now())
            raise
        kind = "ok" if resp.code == 0 or f == "pull" else "fail"
        self._add(process, kind, f, response_json(resp), self.target.now())
        return resp

    def restart(self, config: BrokerConfig | None = None) -> None:
        t = self.target.now()
        self._add(0, "invoke", "restart", {"delay_levels": list(config.delay_levels)} if config else {}, t)
        self.target.restart(config)
        self._add(0, "ok", "restart", {}, self.target.now())

    def close(self) -> None:
        self.target.close()


def save(events: Iterable[Event], path: Path, meta: dict[str, Any] | None = None) -> None:
    with path.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"rmqspec_history": HISTORY_VERSION, **(meta or {})}) + "\n")
        for e in events:
            fh.write(json.dumps(e.to_json(), ensure_ascii=False) + "\n")


def load(path: Path) -> tuple[dict[str, Any], list[Event]]:
    """Read a history file; every malformed line is an error naming the file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise HistoryError(f"{path}: cannot read: {e.strerror}") from None
    if not lines:
        raise HistoryError(f"{path}: empty file (expected a header line)")
    try:
        meta = json.loads(lines[0])
    except json.JSONDecodeError as e:
        raise HistoryError(f"{path}:1: not JSON: {e.msg}") from None
    if not isinstance(meta, dict) or meta.get("rmqspec_history") != HISTORY_VERSION:
        raise HistoryError(f"{path}:1: not an rmqspec history header (version {HISTORY_VERSION})")
    events = list(_parse(path, lines[1:]))
    return meta, events


def _parse(path: Path, lines: list[str]) -> Iterator[Event]:
    for n, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if d["type"] not in TYPES:
                raise ValueError(f"type {d['type']!r} is not one of {', '.join(TYPES)}")
            yield Event(
                int(d["index"]),
                int(d["process"]),
                str(d["type"]),
                str(d["f"]),
                dict(d["value"]),
                int(d["time"]),
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise HistoryError(f"{path}:{n}: bad event: {e}") from None

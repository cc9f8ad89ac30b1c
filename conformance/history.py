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
from rmqspec.reference.model import Op

from .codec import CHECK, RESTART, check_to_json, op_arguments, response_to_json
from .contract import CheckEvent, ProtocolFailure, Response, Target, TargetError, TargetInfo

# 2: every field of an operation is recorded (a send's flag, born timestamp, version, ...), bodies that
# are not UTF-8 as base64, records with their size and hosts. Format 1 is read too: what it did not
# record takes the codec's defaults.
HISTORY_VERSION = 2
READABLE_VERSIONS = (1, 2)
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
            self._add(-1, "ok", CHECK, check_to_json(c), c.time)
        return checks

    def execute(self, op: Op, process: int = 0) -> Response:
        f, args = op_arguments(op)
        self._add(process, "invoke", f, args, self.target.now())
        try:
            resp = self.target.execute(op)
        except ProtocolFailure as e:  # an answer that breaks the protocol: the checker names its rule
            self._add(process, "info", f, protocol_failure_to_json(e), self.target.now())
            raise
        except TargetError as e:
            self._add(process, "info", f, {"error": str(e)}, self.target.now())
            raise
        kind = "ok" if resp.code == 0 or f == "pull" else "fail"
        self._add(process, kind, f, response_to_json(resp), self.target.now())
        return resp

    def restart(self, config: BrokerConfig | None = None, graceful: bool | None = None) -> None:
        """Restart the target; ``graceful`` (a target that can stop either way, ``restart_ways``): an
        orderly stop (True) or a crash (False), recorded on both events as the chaos workload does."""
        t = self.target.now()
        value: dict[str, Any] = {"delay_levels": list(config.delay_levels)} if config else {}
        how: dict[str, Any] = {} if graceful is None else {"graceful": graceful}
        self._add(0, "invoke", RESTART, {**value, **how}, t)
        if graceful is None:
            self.target.restart(config)
        else:
            self.target.restart(config, graceful=graceful)  # type: ignore[call-arg]
        self._add(0, "ok", RESTART, how, self.target.now())

    def close(self) -> None:
        self.target.close()


def protocol_failure_to_json(e: ProtocolFailure) -> dict[str, Any]:
    """An ``info`` completion of an operation whose answer broke the protocol: the error, the rule it
    breaks and the frame as received (the checker reports it as ``malformed-answer``)."""
    return {"error": str(e), "rule": e.rule, "frame": e.frame}


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
        raise HistoryError(f"{path}:1: not JSON: {e}") from None
    if not isinstance(meta, dict) or "rmqspec_history" not in meta:
        raise HistoryError(f'{path}:1: not an rmqspec history header (no "rmqspec_history" version)')
    if meta["rmqspec_history"] not in READABLE_VERSIONS:
        raise HistoryError(
            f"{path}:1: history format {meta['rmqspec_history']!r} is not one this rmqspec reads "
            f"({', '.join(map(str, READABLE_VERSIONS))})"
        )
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

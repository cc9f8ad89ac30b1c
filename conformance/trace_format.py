"""The trace format (schema version 1): histories as rows, in JSON Lines or Parquet, one schema.

A trace holds any number of histories (``history_id``). Each row is one event of a history
(``history.Event``: invoke / ok / fail / info, with its time) or, for a pull that found messages, one
row per record it returned (``type = "rec"``, right after the pull's ``ok`` row). Scalar columns hold
what the keyed checker needs; ``value`` holds the rest as JSON, so a history can be rebuilt exactly
and judged by the full history checker. Documented in docs/traces.md.

JSON Lines: the first line is the header ``{"rmqspec_trace": 1, ...}``, then one JSON object per row
with the columns below (``value`` a JSON object). Parquet: the same columns (``value`` a JSON string),
and the file's key-value metadata ``rmqspec_trace = 1``. Reading never drops anything: a bad line or
row is an error naming the file and the line (or row), and the reader counts what it read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rmqspec.reference.config import (
    BROKER_CONF_KEYS,
    FIVE_ONLY_KEYS,
    BrokerConfig,
    ConfigError,
    Profile,
    config_from_broker_conf,
)

from .history import TYPES, Event

SCHEMA_VERSION = 1
ROW_TYPES = (*TYPES, "rec")

# column -> (type, meaning). Times are epoch milliseconds; -1 means "not applicable" for numbers.
COLUMNS: dict[str, tuple[str, str]] = {
    "history_id": ("string", "the history the row belongs to"),
    "index": ("int64", "the event's index in its history (a record row: its pull's ok event)"),
    "process": ("int32", "the client process; -1 for what the broker did on its own (a check request)"),
    "type": ("string", "invoke, ok, fail, info, or rec (a record a pull returned)"),
    "f": ("string", "send, send_half, send_batch, pull, send_back, end_tx, heartbeat, check, record, ..."),
    "time": ("int64", "when it happened, ms (a record row: its pull's completion)"),
    "topic": ("string", "the topic named by the operation, or the record's topic; '' when none"),
    "queue": ("int32", "the queue id"),
    "group": ("string", "producer or consumer group; '' when none"),
    "uniq": ("string", "UNIQ_KEY of the message (send, record, check) or the transaction id (end_tx)"),
    "delay": ("int32", "DELAY of a send or a record; delayLevel of a send-back; 0 when none"),
    "code": ("int32", "response code of ok/fail rows; -1 otherwise"),
    "offset": (
        "int64",
        "queue offset: of a send result, a record, a pull request (invoke) or the next one (ok)",
    ),
    "store_time": ("int64", "a record's store timestamp; -1 otherwise"),
    "reconsume": ("int32", "a record's reconsumeTimes; -1 otherwise"),
    "clo": ("int64", "commit-log offset: of a send result, a record, a send-back or end_tx request, a check"),
    "aux": (
        "int64",
        "send: 1 for a half message; pull ok: maxOffset; end_tx: action; check: check times; "
        "send_back: maxReconsumeTimes (-1: none); record: sysFlag",
    ),
    "value": ("string", "everything else of the event, as JSON (a record row: the whole record)"),
}
NAMES = tuple(COLUMNS)


class TraceError(ValueError):
    """A trace that cannot be read as written; names the file and the line or row."""


def _int(v: object, default: int = -1) -> int:
    if v is None or v == "":
        return default
    try:
        return int(v)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return default


def _offset_of(msg_id: object) -> int:
    s = str(msg_id or "").split(",")[0]
    try:
        return int(s[-16:], 16) if len(s) >= 16 else -1
    except ValueError:
        return -1


def rows_of(history_id: str, events: Sequence[Event]) -> Iterator[dict[str, Any]]:
    """The rows of one history."""
    for e in events:
        v = dict(e.value)
        row: dict[str, Any] = {
            "history_id": history_id,
            "index": e.index,
            "process": e.process,
            "type": e.type,
            "f": e.f,
            "time": e.time,
            "topic": "",
            "queue": -1,
            "group": "",
            "uniq": "",
            "delay": 0,
            "code": -1,
            "offset": -1,
            "store_time": -1,
            "reconsume": -1,
            "clo": -1,
            "aux": -1,
        }
        records = v.pop("records", None) if e.type != "invoke" else None
        if records == []:
            v["records"] = []  # nothing to split out: the value keeps its empty list
        if e.type == "invoke":
            props = v.get("properties") or {}
            row.update(
                topic=str(v.get("topic", "")),
                queue=_int(v.get("queue")),
                group=str(v.get("group", "")),
                uniq=str(props.get("UNIQ_KEY") or v.get("transaction_id") or v.get("key") or ""),
            )
            if e.f in ("send", "send_half"):
                row.update(delay=_int(props.get("DELAY"), 0), aux=1 if e.f == "send_half" else 0)
            elif e.f == "pull":
                row.update(offset=_int(v.get("offset")))
            elif e.f == "send_back":
                row.update(clo=_int(v.get("offset")), delay=_int(v.get("delay_level"), 0))
                row.update(aux=_int(v.get("max_reconsume_times")))
            elif e.f == "end_tx":
                row.update(clo=_int(v.get("commit_log_offset")), offset=_int(v.get("table_offset")))
                row.update(aux=_int(v.get("action")))
        elif e.f == "check":
            m = v.get("message") or {}
            p = m.get("properties") or {}
            row.update(
                topic=str(m.get("topic", "")),
                queue=_int(m.get("queue_id")),
                group=str(v.get("group", "")),
                uniq=str(p.get("UNIQ_KEY", "")),
                clo=_int(v.get("commit_log_offset")),
                offset=_int(v.get("table_offset")),
                aux=_int(p.get("TRANSACTION_CHECK_TIMES")),
            )
        elif e.type in ("ok", "fail"):
            fields = v.get("fields") or {}
            row.update(code=_int(v.get("code")))
            if e.f == "pull":
                row.update(offset=_int(fields.get("next_begin_offset")), aux=_int(fields.get("max_offset")))
            elif "queue_offset" in fields:
                row.update(
                    queue=_int(fields.get("queue_id")),
                    offset=_int(fields.get("queue_offset")),
                    clo=_offset_of(fields.get("msg_id")),
                )
        row["value"] = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        yield row
        for r in records or []:
            p = r.get("properties") or {}
            yield {
                "history_id": history_id,
                "index": e.index,
                "process": e.process,
                "type": "rec",
                "f": "record",
                "time": e.time,
                "topic": str(r.get("topic", "")),
                "queue": _int(r.get("queue_id")),
                "group": "",
                "uniq": str(p.get("UNIQ_KEY", "")),
                "delay": _int(p.get("DELAY"), 0),
                "code": -1,
                "offset": _int(r.get("queue_offset")),
                "store_time": _int(r.get("store_timestamp")),
                "reconsume": _int(r.get("reconsume_times")),
                "clo": _int(r.get("commit_log_offset")),
                "aux": _int(r.get("sys_flag")),
                "value": json.dumps(r, separators=(",", ":"), ensure_ascii=False),
            }


def events_of(rows: Iterable[dict[str, Any]]) -> list[Event]:
    """Rebuild one history's events from its rows (records re-attached to their pull's completion)."""
    events: list[Event] = []
    for row in rows:
        if row["type"] == "rec":
            if not events or events[-1].f != "pull":
                raise TraceError(f"history {row['history_id']}: a record row that follows no pull")
            events[-1].value.setdefault("records", []).append(json.loads(row["value"]))  # in pull order
            continue
        value = json.loads(row["value"]) if row["value"] else {}
        events.append(
            Event(int(row["index"]), int(row["process"]), row["type"], row["f"], value, int(row["time"]))
        )
    return events


# --- files ------------------------------------------------------------------------------------------


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]], meta: dict[str, Any] | None = None) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"rmqspec_trace": SCHEMA_VERSION, **(meta or {})}) + "\n")
        for row in rows:
            out = dict(row)
            out["value"] = json.loads(row["value"]) if row["value"] else {}
            fh.write(json.dumps(out, separators=(",", ":"), ensure_ascii=False) + "\n")
            n += 1
    return n


def write_parquet(
    path: Path,
    rows: Iterable[dict[str, Any]],
    row_group_size: int = 200_000,
    meta: dict[str, Any] | None = None,
) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32()}
    metadata = {b"rmqspec_trace": str(SCHEMA_VERSION).encode()}
    for key, value in (meta or {}).items():
        metadata[f"rmqspec_{key}".encode()] = json.dumps(value).encode()
    schema = pa.schema([pa.field(name, types[t]) for name, (t, _) in COLUMNS.items()], metadata=metadata)
    cols: dict[str, list[Any]] = {name: [] for name in NAMES}
    n = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for row in rows:
            for name in NAMES:
                cols[name].append(row[name])
            n += 1
            if len(cols["index"]) >= row_group_size:
                writer.write_table(pa.table(cols, schema=schema))
                cols = {name: [] for name in NAMES}
        if cols["index"]:
            writer.write_table(pa.table(cols, schema=schema))
    return n


def _check_row(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise TraceError(f"{where}: a row must be a JSON object")
    missing = [c for c in NAMES if c not in row]
    if missing:
        raise TraceError(f"{where}: missing column(s) {', '.join(missing)}")
    if row["type"] not in ROW_TYPES:
        raise TraceError(f"{where}: type {row['type']!r} is not one of {', '.join(ROW_TYPES)}")
    for name, (t, _) in COLUMNS.items():
        v = row[name]
        if name == "value":
            if not isinstance(v, dict | str):
                raise TraceError(f"{where}: value must be a JSON object")
            row[name] = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        elif t == "string":
            if not isinstance(v, str):
                raise TraceError(f"{where}: {name} must be a string, not {v!r}")
        elif isinstance(v, bool) or not isinstance(v, int):
            raise TraceError(f"{where}: {name} must be a whole number, not {v!r}")
    return row


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSON Lines trace; the first bad line raises ``TraceError`` naming file and line."""
    try:
        fh = path.open("r", encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    with fh:
        header = fh.readline()
        try:
            meta = json.loads(header)
        except json.JSONDecodeError as e:
            raise TraceError(f"{path}:1: not JSON: {e}") from None
        if not isinstance(meta, dict) or meta.get("rmqspec_trace") != SCHEMA_VERSION:
            raise TraceError(f"{path}:1: not an rmqspec trace header (schema version {SCHEMA_VERSION})")
        for n, line in enumerate(fh, start=2):
            if not line.strip():
                raise TraceError(f"{path}:{n}: empty line")
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceError(f"{path}:{n}: not JSON: {e}") from None
            yield _check_row(row, f"{path}:{n}")


def read_parquet_table(path: Path, schema_only: bool = False) -> Any:
    """A Parquet trace as a pyarrow table, its schema checked (names and types). ``schema_only``: the
    file's metadata (``num_rows``, schema) without reading the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (OSError, ValueError, pa.ArrowException) as e:
        raise TraceError(f"{path}: not a readable Parquet file: {e}") from None
    meta = pf.schema_arrow.metadata or {}
    if meta.get(b"rmqspec_trace") != str(SCHEMA_VERSION).encode():
        raise TraceError(f"{path}: no rmqspec_trace = {SCHEMA_VERSION} in the file's metadata")
    missing = [c for c in NAMES if c not in pf.schema_arrow.names]
    if missing:
        raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
    types = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32()}
    for name, (t, _) in COLUMNS.items():
        got = pf.schema_arrow.field(name).type
        if got != types[t]:
            raise TraceError(f"{path}: column {name} is {got}, not {t} (the trace schema, docs/traces.md)")
    if schema_only:
        return pf.metadata
    try:
        return pf.read(columns=list(NAMES))
    except (OSError, ValueError, pa.ArrowException) as e:
        raise TraceError(f"{path}: cannot read: {e}") from None


def config_to_json(config: BrokerConfig) -> dict[str, Any]:
    """A broker's settings as a trace records them: broker.conf names, and the spec profile."""
    out: dict[str, Any] = {"profile": config.profile.value}
    for key, field in BROKER_CONF_KEYS.items():
        if key in FIVE_ONLY_KEYS and config.profile is not Profile.V5:
            continue  # the timer's settings exist on 5.x brokers only
        value = getattr(config, field)
        out[key] = config.describe() if field == "delay_levels" else value
    return out


def config_from_json(data: Any, where: str) -> BrokerConfig:
    if not isinstance(data, dict):
        raise TraceError(f"{where}: the recorded settings are not a mapping")
    values = dict(data)
    try:
        profile = Profile(str(values.pop("profile", "4.9")))
        return config_from_broker_conf(values, profile)
    except (ValueError, ConfigError) as e:
        raise TraceError(f"{where}: the recorded settings cannot be read: {e}") from None


def recorded_config(path: Path) -> BrokerConfig | None:
    """The broker settings a trace file records (``rmqspec traces generate`` writes them), or None."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            meta = pq.ParquetFile(path).schema_arrow.metadata or {}
        except (OSError, ValueError) as e:
            raise TraceError(f"{path}: not a readable Parquet file: {e}") from None
        raw = meta.get(b"rmqspec_config")
        if raw is None:
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            raise TraceError(f"{path}: the recorded settings are not JSON") from None
        return config_from_json(data, str(path))
    try:
        with path.open("r", encoding="utf-8") as fh:
            header = json.loads(fh.readline())
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}:1: cannot read the header: {e}") from None
    if isinstance(header, dict) and "config" in header:
        return config_from_json(header["config"], f"{path}:1")
    return None


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of either format, by extension (.jsonl or .parquet)."""
    if path.suffix == ".parquet":
        table = read_parquet_table(path)
        for n, row in enumerate(table.to_pylist(), start=1):
            yield _check_row(row, f"{path}: row {n}")
    elif path.suffix == ".jsonl":
        yield from read_jsonl(path)
    else:
        raise TraceError(f"{path}: a trace file ends in .jsonl or .parquet")


def trace_files(path: Path) -> list[Path]:
    """The trace files at ``path`` (a file, or a folder of them)."""
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".parquet"))
        if not files:
            raise TraceError(f"{path}: no .jsonl or .parquet trace files in this folder")
        return files
    raise TraceError(f"{path}: no such file or folder")

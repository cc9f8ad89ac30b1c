"""The history checker decomposed by key, as column operations: for traces too large for one replay.

The full checker (``checker.check_history``) replays a history on the model, one event after another,
which is exact but sequential. This module checks the rules whose verdict depends only on the events of
one key, plus a few facts about other keys that a first pass computes (docs/traces.md argues why the
split is sound):

by message (history, UNIQ_KEY), the lifecycle rules
  * ``schedule/due-time``: a delayed message's copy is stored no earlier than invoke + delay and no
    later than completion + delay + epsilon, and is seen by a pull that reads its queue to the end
    after that (else it is late);
  * ``put/send-result`` (duplicate delivery): a message appears in its topic at one queue offset only;
  * ``transaction/half-message`` and ``transaction/rollback``: a half message is visible in its topic
    only from a commit on;
  * ``sendback/delay-level`` and ``sendback/dlq-route``: a message sent back with reconsumeTimes r
    reappears with r + 1 in ``%RETRY%<group>`` after level 3 + r (or the level asked for), or in
    ``%DLQ%<group>`` at once when r >= the limit or the level is negative;

by queue (history, topic, queue)
  * ``dispatch/in-order``: one offset of a queue holds one message;

by delay level (history, level)
  * ``schedule/fifo-per-level``: messages of one level are delivered in the order they were sent.

Cross-key facts, computed first: the completion of each operation (by history and process), the
message a send-back names (by commit-log offset), and the last time each queue was read to its end.

Every string column (history, type, operation, topic, group, UNIQ_KEY) is replaced by an integer code
into one shared :class:`Vocab` before anything is judged: joins, groupings and comparisons then run on
integers, and strings come back only in the anomalies' text. A Parquet trace is read as dictionary
columns (:func:`read_coded`), so its strings are never hashed row by row; a frame of strings (a Spark
partition, a test) is coded by :func:`encode`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pandas as pd

from rmqspec.reference.config import BrokerConfig

from .trace_format import NAMES, TraceError, read_parquet_table

ANOMALY_COLUMNS = ["history_id", "rule", "name", "uniq", "detail"]
DEFAULT_RETRY_MAX = 16
PULL_NOT_FOUND = 19
COMMIT, ROLLBACK = 8, 12
# The trace columns that hold strings (coded), and those the keyed checks read (not ``value``).
STRING_COLUMNS = ("history_id", "type", "f", "topic", "group", "uniq")
KEYED_COLUMNS = tuple(c for c in NAMES if c != "value")

Codes = np.ndarray[Any, np.dtype[np.int64]]


@attrs.frozen(eq=False)
class Vocab:
    """Code -> string for every coded column; a string not in a trace has code -1 (it matches nothing)."""

    words: np.ndarray[Any, np.dtype[np.object_]]
    index: pd.Index = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "index", pd.Index(self.words))

    def code(self, word: str) -> int:
        return int(self.index.get_indexer([word])[0])

    def codes(self, words: Sequence[str] | np.ndarray[Any, Any]) -> Codes:
        if len(words) == 0:
            return np.empty(0, dtype=np.int64)
        out: Codes = self.index.get_indexer(np.asarray(words, dtype=object)).astype(np.int64)
        return out

    def decode(self, codes: pd.Series | np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.object_]]:
        c = np.asarray(codes, dtype=np.int64)
        out = np.empty(len(c), dtype=object)
        ok = c >= 0
        out[ok] = self.words[c[ok]]
        out[~ok] = ""
        return out

    def starts_with(self, prefix: str) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """By code: whether the word starts with ``prefix``."""
        return np.fromiter((str(w).startswith(prefix) for w in self.words), dtype=bool, count=len(self.words))

    def prefixed(self, prefix: str, codes: pd.Series | np.ndarray[Any, Any]) -> Codes:
        """The code of ``prefix + word`` for each code (-1 where that string is in no column)."""
        c = np.asarray(codes, dtype=np.int64)
        if len(c) == 0:
            return np.empty(0, dtype=np.int64)
        present, back = np.unique(c, return_inverse=True)
        words = [prefix + (str(self.words[k]) if k >= 0 else "") for k in present]
        out: Codes = self.codes(words)[back]
        return out


def _from_words(columns: dict[str, np.ndarray[Any, Any]]) -> tuple[dict[str, Codes], Vocab]:
    """One code space for several string columns (object arrays)."""
    names = list(columns)
    sizes = [len(columns[c]) for c in names]
    allw = np.concatenate([columns[c] for c in names]) if names else np.empty(0, dtype=object)
    codes, uniques = pd.factorize(allw, use_na_sentinel=True)
    out: dict[str, Codes] = {}
    at = 0
    for name, size in zip(names, sizes, strict=True):
        out[name] = codes[at : at + size].astype(np.int64)
        at += size
    return out, Vocab(np.asarray(uniques, dtype=object))


def encode(df: pd.DataFrame) -> tuple[pd.DataFrame, Vocab]:
    """A frame of trace rows with its string columns as codes of one vocabulary."""
    present = [c for c in STRING_COLUMNS if c in df.columns]
    for c in present:
        if df[c].isna().any():
            raise TraceError(f"column {c} has a missing value (the trace schema has none, docs/traces.md)")
    codes, vocab = _from_words({c: df[c].to_numpy(dtype=object) for c in present})
    out = df.copy(deep=False)
    for c in present:
        out[c] = codes[c]
    return out, vocab


def recode(df: pd.DataFrame, vocab: Vocab, columns: Iterable[str]) -> pd.DataFrame:
    """String columns of a small frame (cross-key facts computed elsewhere) as codes of ``vocab``."""
    out = df.copy()
    for c in columns:
        out[c] = vocab.codes(df[c].to_numpy(dtype=object))
    return out


def read_coded(path: Path) -> tuple[pd.DataFrame, Vocab]:
    """A Parquet trace (schema checked as everywhere) as a coded frame: its string columns are read as
    Parquet stores them, one dictionary per column, and the dictionaries are merged into one vocabulary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    read_parquet_table(path, schema_only=True)  # names, types and the trace marker, with clear errors
    try:
        table = pq.read_table(path, columns=list(KEYED_COLUMNS), read_dictionary=list(STRING_COLUMNS))
        table = table.unify_dictionaries()
    except (OSError, ValueError, pa.ArrowException) as e:
        raise TraceError(f"{path}: cannot read: {e}") from None
    data: dict[str, Any] = {}
    dicts: dict[str, np.ndarray[Any, Any]] = {}
    indices: dict[str, np.ndarray[Any, Any]] = {}
    for name in KEYED_COLUMNS:
        col = table.column(name)
        if col.null_count:
            raise TraceError(
                f"{path}: column {name} has {col.null_count} missing value(s) (the trace schema has none)"
            )
        if name in STRING_COLUMNS:
            chunks = col.chunks
            dicts[name] = (
                chunks[0].dictionary.to_numpy(zero_copy_only=False) if chunks else np.empty(0, dtype=object)
            )
            indices[name] = (
                np.concatenate([ch.indices.to_numpy(zero_copy_only=False) for ch in chunks])
                if chunks
                else np.empty(0, dtype=np.int64)
            )
        else:
            data[name] = col.to_numpy()
    words, vocab = _from_words({c: dicts[c].astype(object) for c in STRING_COLUMNS})
    for name in STRING_COLUMNS:
        data[name] = words[name][indices[name]] if len(indices[name]) else np.empty(0, dtype=np.int64)
    return pd.DataFrame(data, columns=list(KEYED_COLUMNS)), vocab


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in ANOMALY_COLUMNS})


def _anomalies(frame: pd.DataFrame, v: Vocab, rule: str, name: str, detail: Any) -> pd.DataFrame:
    if frame.empty:
        return _empty()
    return pd.DataFrame(
        {
            "history_id": v.decode(frame["history_id"].to_numpy()),
            "rule": rule,
            "name": name,
            "uniq": v.decode(frame["uniq"].to_numpy()) if "uniq" in frame else "",
            "detail": np.asarray(detail, dtype=object),
        }
    )


# --- pass 1: facts that cross keys -----------------------------------------------------------------


def pair_completions(ops: pd.DataFrame, v: Vocab) -> pd.DataFrame:
    """Invoke rows with their completion (``ctime``, ``ccode``, ``coffset``, ``caux``; -1 if none)."""
    ops = ops[(ops["type"].to_numpy() != v.code("rec")) & (ops["process"].to_numpy() >= 0)]
    hist = ops["history_id"].to_numpy()
    proc = ops["process"].to_numpy()
    order = np.lexsort((ops["index"].to_numpy(), proc, hist))
    h, p = hist[order], proc[order]
    types = ops["type"].to_numpy()[order]
    nxt_same = np.zeros(len(order), dtype=bool)
    if len(order) > 1:
        nxt_same[:-1] = (h[1:] == h[:-1]) & (p[1:] == p[:-1])
    is_inv = types == v.code("invoke")
    nxt_type = np.full(len(order), -1, dtype=np.int64)
    nxt_type[:-1] = types[1:]
    done = nxt_same & is_inv & ((nxt_type == v.code("ok")) | (nxt_type == v.code("fail")))
    inv = ops.iloc[order[is_inv]].reset_index(drop=True)
    for col, src in (("ctime", "time"), ("ccode", "code"), ("coffset", "offset"), ("caux", "aux")):
        vals = ops[src].to_numpy()[order].astype(np.int64)
        shifted = np.full(len(order), -1, dtype=np.int64)
        shifted[:-1] = vals[1:]
        inv[col] = np.where(done, shifted, -1)[is_inv]
    return inv


def read_prefix(rec: pd.DataFrame) -> pd.DataFrame:
    """Per (history, topic, queue): n such that every offset below n was read by some pull."""
    keys = ["history_id", "topic", "queue"]
    d = rec[[*keys, "offset"]].drop_duplicates().sort_values([*keys, "offset"])
    d = d.assign(rank=d.groupby(keys, sort=False).cumcount())
    return d[d["offset"] == d["rank"]].groupby(keys, sort=False).size().rename("prefix").reset_index()


def read_ends(inv: pd.DataFrame, rec: pd.DataFrame, v: Vocab) -> pd.DataFrame:
    """Per (history, topic, queue): the last invoke time of a pull that found the queue read to its end.

    The end (``PULL_NOT_FOUND`` at ``maxOffset``) counts only if every offset below that max was read by
    some pull: a client that started past an offset never saw what is there (rule: dispatch/in-order).
    """
    up = inv[
        (inv["f"] == v.code("pull")) & (inv["ccode"] == PULL_NOT_FOUND) & (inv["coffset"] == inv["caux"])
    ]
    up = up.merge(read_prefix(rec), on=["history_id", "topic", "queue"], how="left")
    up = up[up["caux"] <= up["prefix"].fillna(0)]
    return (
        up.groupby(["history_id", "topic", "queue"], sort=False)["time"]
        .max()
        .rename("read_end")
        .reset_index()
    )


def resolve_send_backs(inv: pd.DataFrame, rec: pd.DataFrame, v: Vocab) -> pd.DataFrame:
    """Send-back invokes with the message they name: its uniq, reconsumeTimes and topic (by offset)."""
    sb = inv[inv["f"] == v.code("send_back")].drop(columns=["uniq", "reconsume"], errors="ignore")
    first = rec.drop_duplicates(["history_id", "clo"])[["history_id", "clo", "uniq", "reconsume", "topic"]]
    first = first.rename(columns={"topic": "from_topic"})
    sb = sb.merge(first, on=["history_id", "clo"], how="inner")
    return sb.drop_duplicates(["history_id", "clo"])  # the first send-back of a record is judged


# --- pass 2: by message ---------------------------------------------------------------------------


def _delays(config: BrokerConfig) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.array([0, *config.delay_levels], dtype=np.int64)


def _first_seen(rec: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return rec.groupby(keys, sort=False).agg(store=("store_time", "min"), seen=("time", "min")).reset_index()


def _texts(fmt: str, values: Any) -> list[str]:
    return [fmt.format(x) for x in np.asarray(values).tolist()]


def check_lifecycle(
    inv: pd.DataFrame, rec: pd.DataFrame, ends: pd.DataFrame, config: BrokerConfig, eps: int, v: Vocab
) -> pd.DataFrame:
    """The by-message rules on rows that hold every event of their messages (any partition by uniq)."""
    out: list[pd.DataFrame] = []
    delays = _delays(config)
    top = len(config.delay_levels)
    f = inv["f"].to_numpy()
    # schedule/due-time
    sends = inv[(f == v.code("send")) & (inv["delay"].to_numpy() > 0) & (inv["ccode"].to_numpy() == 0)].copy()
    if not sends.empty:
        d = delays[np.clip(sends["delay"].to_numpy(), 1, top)]
        sends["earliest"] = sends["time"].to_numpy() + d
        sends["latest"] = sends["ctime"].to_numpy() + d + eps
        seen = _first_seen(rec, ["history_id", "uniq", "topic"])
        m = sends.merge(seen, on=["history_id", "uniq", "topic"], how="left")
        m = m.merge(ends, on=["history_id", "topic", "queue"], how="left")
        early = m[(m["store"] < m["earliest"]) | (m["seen"] < m["earliest"])]
        out.append(
            _anomalies(early, v, "schedule/due-time", "early-delivery", _texts("due {}", early["earliest"]))
        )
        late = m[(m["store"] > m["latest"]) | (m["store"].isna() & (m["read_end"] > m["latest"]))]
        out.append(
            _anomalies(late, v, "schedule/due-time", "late-delivery", _texts("due by {}", late["latest"]))
        )
    # put/send-result: one queue offset per message and topic (retry and DLQ copies are many on purpose)
    percent = v.starts_with("%")
    rtopic = rec["topic"].to_numpy()
    plain = rec[~percent[rtopic]] if len(rec) else rec
    if not plain.empty:
        n = plain.groupby(["history_id", "uniq", "topic"], sort=False)["offset"].nunique().reset_index()
        dup = n[n["offset"] > 1]
        out.append(
            _anomalies(
                dup, v, "put/send-result", "duplicate-delivery", _texts("in {}", v.decode(dup["topic"]))
            )
        )
    # transaction/half-message, transaction/rollback
    halves = inv[(f == v.code("send_half")) & (inv["ccode"].to_numpy() == 0)][["history_id", "uniq", "topic"]]
    if not halves.empty:
        ends_tx = inv[f == v.code("end_tx")]
        keys = ["history_id", "uniq"]
        commit = ends_tx[ends_tx["aux"] == COMMIT].groupby(keys)["time"].min().rename("commit")
        rolled = ends_tx[ends_tx["aux"] == ROLLBACK].groupby(keys)["time"].min().rename("rollback")
        seen = _first_seen(rec, ["history_id", "uniq", "topic"])
        m = halves.merge(seen, on=["history_id", "uniq", "topic"], how="inner")
        m = m.merge(commit.reset_index(), on=keys, how="left")
        m = m.merge(rolled.reset_index(), on=keys, how="left")
        bad = m[m["commit"].isna() | (m["store"] < m["commit"])]
        rolled_back = bad["rollback"].notna() & bad["commit"].isna()
        rb = bad[rolled_back]
        vh = bad[~rolled_back]
        out.append(_anomalies(rb, v, "transaction/rollback", "rollback-visible", v.decode(rb["topic"])))
        out.append(
            _anomalies(vh, v, "transaction/half-message", "visible-half-message", v.decode(vh["topic"]))
        )
    # sendback/delay-level, sendback/dlq-route
    sb = inv[
        (f == v.code("send_back")) & (inv["ccode"].to_numpy() == 0) & (inv["uniq"].to_numpy() != v.code(""))
    ]
    sb = sb.copy()
    if not sb.empty:
        aux = sb["aux"].to_numpy()
        limit = np.where(aux >= 0, aux, DEFAULT_RETRY_MAX)
        r = sb["reconsume"].to_numpy()
        delay = sb["delay"].to_numpy()
        dlq = (delay < 0) | (r >= limit)
        level = np.clip(np.where(delay > 0, delay, 3 + r), 1, top)
        d = np.where(dlq, 0, delays[level])
        group = sb["group"].to_numpy()
        to_dlq, to_retry = v.prefixed("%DLQ%", group), v.prefixed("%RETRY%", group)
        sb["dlq"] = dlq
        sb["want"] = np.where(dlq, to_dlq, to_retry)
        sb["other"] = np.where(dlq, to_retry, to_dlq)
        sb["earliest"] = sb["time"].to_numpy() + d
        sb["latest"] = sb["ctime"].to_numpy() + d + eps
        sb["next"] = r + 1
        copies = rec[percent[rtopic]]
        seen = _first_seen(copies, ["history_id", "uniq", "topic", "reconsume"]).rename(
            columns={"reconsume": "next"}
        )
        m = sb.merge(
            seen.rename(columns={"topic": "want"}), on=["history_id", "uniq", "want", "next"], how="left"
        )
        wrong = m.merge(
            seen.rename(columns={"topic": "other", "store": "ostore", "seen": "oseen"}),
            on=["history_id", "uniq", "other", "next"],
            how="inner",
        )
        out.append(
            _anomalies(
                wrong, v, "sendback/dlq-route", "wrong-dlq", _texts("found in {}", v.decode(wrong["other"]))
            )
        )
        ends0 = ends[ends["queue"] == 0].rename(columns={"topic": "want"}).drop(columns=["queue"])
        m = m.merge(ends0, on=["history_id", "want"], how="left")
        early = m[(m["store"] < m["earliest"]) | (m["seen"] < m["earliest"])]
        late = m[(m["store"] > m["latest"]) | (m["store"].isna() & (m["read_end"] > m["latest"]))]
        late = late[
            ~late.set_index(["history_id", "uniq"]).index.isin(wrong.set_index(["history_id", "uniq"]).index)
        ]
        for frame, name in ((early, "early-delivery"), (late, "late-delivery")):
            is_dlq = frame["dlq"].to_numpy(dtype=bool)
            dl, rt = frame[is_dlq], frame[~is_dlq]
            # the topic by name, which need not be in the trace (a copy never seen)
            out.append(
                _anomalies(dl, v, "sendback/dlq-route", name, _texts("%DLQ%{}", v.decode(dl["group"])))
            )
            out.append(
                _anomalies(rt, v, "sendback/delay-level", name, _texts("%RETRY%{}", v.decode(rt["group"])))
            )
    frames = [fr for fr in out if not fr.empty]
    return pd.concat(frames, ignore_index=True) if frames else _empty()


# --- pass 2: by queue and by level -----------------------------------------------------------------


def check_queues(rec: pd.DataFrame, v: Vocab) -> pd.DataFrame:
    """dispatch/in-order on rows that hold every record of their queues."""
    if rec.empty:
        return _empty()
    n = rec.groupby(["history_id", "topic", "queue", "offset"], sort=False)["uniq"].nunique().reset_index()
    bad = n[n["uniq"] > 1].assign(uniq=-1)
    where = [f"{t}:{q}" for t, q in zip(v.decode(bad["topic"]), bad["queue"].tolist(), strict=True)]
    return _anomalies(bad, v, "dispatch/in-order", "inconsistent-queue", where)


def check_levels(inv: pd.DataFrame, rec: pd.DataFrame, config: BrokerConfig, v: Vocab) -> pd.DataFrame:
    """schedule/fifo-per-level on rows that hold every delayed send of their levels and its copies."""
    sends = inv[(inv["f"] == v.code("send")) & (inv["delay"] > 0) & (inv["ccode"] == 0)].copy()
    if sends.empty:
        return _empty()
    sends["level"] = np.clip(sends["delay"].to_numpy(), 1, len(config.delay_levels))
    seen = _first_seen(rec, ["history_id", "uniq", "topic"])
    m = sends.merge(seen, on=["history_id", "uniq", "topic"], how="inner").sort_values(
        ["history_id", "level", "index"]
    )
    before = m.groupby(["history_id", "level"], sort=False)["store"].cummax().shift(1)
    same = (m["history_id"] == m["history_id"].shift(1)) & (m["level"] == m["level"].shift(1))
    bad = m[same & (m["store"] < before)]
    return _anomalies(bad, v, "schedule/fifo-per-level", "fifo-violation", _texts("level {}", bad["level"]))


def check_coded(df: pd.DataFrame, v: Vocab, config: BrokerConfig, eps: int) -> pd.DataFrame:
    """Every keyed rule on a coded frame that holds whole histories (the one-process path)."""
    inv = pair_completions(df, v)
    rec = df[df["type"].to_numpy() == v.code("rec")]
    sb = resolve_send_backs(inv, rec, v)
    inv = pd.concat([inv[inv["f"] != v.code("send_back")], sb], ignore_index=True)
    ends = read_ends(inv, rec, v)
    parts = [
        check_lifecycle(inv, rec, ends, config, eps, v),
        check_queues(rec, v),
        check_levels(inv, rec, config, v),
    ]
    frames = [f for f in parts if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else _empty()


def check_frame(df: pd.DataFrame, config: BrokerConfig, eps: int) -> pd.DataFrame:
    """Every keyed rule on a frame of trace rows (strings) that holds whole histories."""
    coded, vocab = encode(df)
    return check_coded(coded, vocab, config, eps)

"""The keyed trace checker as it stood before it ran on integer codes (pandas on string columns): kept
unchanged as the oracle of tests/test_trace_keyed_differential.py, which requires the coded checker to
give the same anomalies on the reference's traces and on every mutant's.

Its original docstring follows.

The history checker decomposed by key, vectorised with pandas: for traces too large for one replay.


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
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rmqspec.reference.config import BrokerConfig

ANOMALY_COLUMNS = ["history_id", "rule", "name", "uniq", "detail"]
DEFAULT_RETRY_MAX = 16
PULL_NOT_FOUND = 19
COMMIT, ROLLBACK = 8, 12


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in ANOMALY_COLUMNS})


def _anomalies(frame: pd.DataFrame, rule: str, name: str, detail: pd.Series) -> pd.DataFrame:
    if frame.empty:
        return _empty()
    return pd.DataFrame(
        {
            "history_id": frame["history_id"].to_numpy(),
            "rule": rule,
            "name": name,
            "uniq": frame["uniq"].to_numpy() if "uniq" in frame else "",
            "detail": detail.to_numpy(),
        }
    )


# --- pass 1: facts that cross keys -----------------------------------------------------------------


def pair_completions(ops: pd.DataFrame) -> pd.DataFrame:
    """Invoke rows with their completion (``ctime``, ``ccode``, ``coffset``, ``caux``; -1 if none)."""
    ops = ops[(ops["type"] != "rec") & (ops["process"] >= 0)]
    hist = pd.factorize(ops["history_id"])[0]
    order = np.lexsort((ops["index"].to_numpy(), ops["process"].to_numpy(), hist))
    o = ops.iloc[order].reset_index(drop=True)
    h = hist[order]
    nxt_same = np.zeros(len(o), dtype=bool)
    if len(o) > 1:
        nxt_same[:-1] = (h[1:] == h[:-1]) & (o["process"].to_numpy()[1:] == o["process"].to_numpy()[:-1])
    is_inv = (o["type"] == "invoke").to_numpy()
    nxt_type = o["type"].shift(-1).fillna("").to_numpy()
    done = nxt_same & is_inv & np.isin(nxt_type, ["ok", "fail"])
    inv = o[is_inv].copy()
    for col, src in (("ctime", "time"), ("ccode", "code"), ("coffset", "offset"), ("caux", "aux")):
        shifted = o[src].shift(-1).fillna(-1).astype("int64").to_numpy()
        inv[col] = np.where(done, shifted, -1)[is_inv]
    return inv


def read_prefix(rec: pd.DataFrame) -> pd.DataFrame:
    """Per (history, topic, queue): n such that every offset below n was read by some pull."""
    keys = ["history_id", "topic", "queue"]
    d = rec[[*keys, "offset"]].drop_duplicates().sort_values([*keys, "offset"])
    d = d.assign(rank=d.groupby(keys, sort=False).cumcount())
    return d[d["offset"] == d["rank"]].groupby(keys, sort=False).size().rename("prefix").reset_index()


def read_ends(inv: pd.DataFrame, rec: pd.DataFrame) -> pd.DataFrame:
    """Per (history, topic, queue): the last invoke time of a pull that found the queue read to its end.

    The end (``PULL_NOT_FOUND`` at ``maxOffset``) counts only if every offset below that max was read by
    some pull: a client that started past an offset never saw what is there (rule: dispatch/in-order).
    """
    up = inv[(inv["f"] == "pull") & (inv["ccode"] == PULL_NOT_FOUND) & (inv["coffset"] == inv["caux"])]
    up = up.merge(read_prefix(rec), on=["history_id", "topic", "queue"], how="left")
    up = up[up["caux"] <= up["prefix"].fillna(0)]
    return (
        up.groupby(["history_id", "topic", "queue"], sort=False)["time"]
        .max()
        .rename("read_end")
        .reset_index()
    )


def resolve_send_backs(inv: pd.DataFrame, rec: pd.DataFrame) -> pd.DataFrame:
    """Send-back invokes with the message they name: its uniq, reconsumeTimes and topic (by offset)."""
    sb = inv[inv["f"] == "send_back"].drop(columns=["uniq", "reconsume"], errors="ignore")
    first = rec.drop_duplicates(["history_id", "clo"])[["history_id", "clo", "uniq", "reconsume", "topic"]]
    first = first.rename(columns={"topic": "from_topic"})
    sb = sb.merge(first, on=["history_id", "clo"], how="inner")
    return sb.drop_duplicates(["history_id", "clo"])  # the first send-back of a record is judged


# --- pass 2: by message ---------------------------------------------------------------------------


def _delays(config: BrokerConfig) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.array([0, *config.delay_levels], dtype=np.int64)


def _first_seen(rec: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return rec.groupby(keys, sort=False).agg(store=("store_time", "min"), seen=("time", "min")).reset_index()


def check_lifecycle(
    inv: pd.DataFrame, rec: pd.DataFrame, ends: pd.DataFrame, config: BrokerConfig, eps: int
) -> pd.DataFrame:
    """The by-message rules on rows that hold every event of their messages (any partition by uniq)."""
    out: list[pd.DataFrame] = []
    delays = _delays(config)
    top = len(config.delay_levels)
    # schedule/due-time
    sends = inv[(inv["f"] == "send") & (inv["delay"] > 0) & (inv["ccode"] == 0)].copy()
    if not sends.empty:
        d = delays[np.clip(sends["delay"].to_numpy(), 1, top)]
        sends["earliest"] = sends["time"].to_numpy() + d
        sends["latest"] = sends["ctime"].to_numpy() + d + eps
        seen = _first_seen(rec, ["history_id", "uniq", "topic"])
        m = sends.merge(seen, on=["history_id", "uniq", "topic"], how="left")
        m = m.merge(ends, on=["history_id", "topic", "queue"], how="left")
        early = m[(m["store"] < m["earliest"]) | (m["seen"] < m["earliest"])]
        out.append(
            _anomalies(
                early, "schedule/due-time", "early-delivery", early["earliest"].map(lambda t: f"due {t}")
            )
        )
        late = m[(m["store"] > m["latest"]) | (m["store"].isna() & (m["read_end"] > m["latest"]))]
        out.append(
            _anomalies(
                late, "schedule/due-time", "late-delivery", late["latest"].map(lambda t: f"due by {t}")
            )
        )
    # put/send-result: one queue offset per message and topic (retry and DLQ copies are many on purpose)
    plain = rec[~rec["topic"].str.startswith("%")]
    if not plain.empty:
        n = plain.groupby(["history_id", "uniq", "topic"], sort=False)["offset"].nunique().reset_index()
        dup = n[n["offset"] > 1]
        out.append(
            _anomalies(dup, "put/send-result", "duplicate-delivery", dup["topic"].map(lambda t: f"in {t}"))
        )
    # transaction/half-message, transaction/rollback
    halves = inv[(inv["f"] == "send_half") & (inv["ccode"] == 0)][["history_id", "uniq", "topic"]]
    if not halves.empty:
        ends_tx = inv[inv["f"] == "end_tx"]
        commit = (
            ends_tx[ends_tx["aux"] == COMMIT].groupby(["history_id", "uniq"])["time"].min().rename("commit")
        )
        rolled = (
            ends_tx[ends_tx["aux"] == ROLLBACK]
            .groupby(["history_id", "uniq"])["time"]
            .min()
            .rename("rollback")
        )
        seen = _first_seen(rec, ["history_id", "uniq", "topic"])
        m = halves.merge(seen, on=["history_id", "uniq", "topic"], how="inner")
        m = m.merge(commit.reset_index(), on=["history_id", "uniq"], how="left")
        m = m.merge(rolled.reset_index(), on=["history_id", "uniq"], how="left")
        bad = m[m["commit"].isna() | (m["store"] < m["commit"])]
        rb = bad[bad["rollback"].notna() & bad["commit"].isna()]
        vh = bad[~(bad["rollback"].notna() & bad["commit"].isna())]
        out.append(_anomalies(rb, "transaction/rollback", "rollback-visible", rb["topic"]))
        out.append(_anomalies(vh, "transaction/half-message", "visible-half-message", vh["topic"]))
    # sendback/delay-level, sendback/dlq-route
    sb = inv[(inv["f"] == "send_back") & (inv["ccode"] == 0) & (inv["uniq"] != "")].copy()
    if not sb.empty:
        limit = np.where(sb["aux"].to_numpy() >= 0, sb["aux"].to_numpy(), DEFAULT_RETRY_MAX)
        r = sb["reconsume"].to_numpy()
        dlq = (sb["delay"].to_numpy() < 0) | (r >= limit)
        level = np.clip(np.where(sb["delay"].to_numpy() > 0, sb["delay"].to_numpy(), 3 + r), 1, top)
        d = np.where(dlq, 0, delays[level])
        sb["want"] = np.where(dlq, "%DLQ%", "%RETRY%") + sb["group"]
        sb["other"] = np.where(dlq, "%RETRY%", "%DLQ%") + sb["group"]
        sb["earliest"] = sb["time"].to_numpy() + d
        sb["latest"] = sb["ctime"].to_numpy() + d + eps
        sb["next"] = r + 1
        copies = rec[rec["topic"].str.startswith("%")]
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
        rule = np.where(wrong["want"].str.startswith("%DLQ%"), "sendback/dlq-route", "sendback/dlq-route")
        for rl in sorted(set(rule)):
            w = wrong[rule == rl]
            out.append(_anomalies(w, rl, "wrong-dlq", w["other"].map(lambda t: f"found in {t}")))
        ends0 = ends[ends["queue"] == 0].rename(columns={"topic": "want"}).drop(columns=["queue"])
        m = m.merge(ends0, on=["history_id", "want"], how="left")
        is_dlq = m["want"].str.startswith("%DLQ%")
        early = m[(m["store"] < m["earliest"]) | (m["seen"] < m["earliest"])]
        late = m[(m["store"] > m["latest"]) | (m["store"].isna() & (m["read_end"] > m["latest"]))]
        late = late[
            ~late.set_index(["history_id", "uniq"]).index.isin(wrong.set_index(["history_id", "uniq"]).index)
        ]
        for frame, name in ((early, "early-delivery"), (late, "late-delivery")):
            dl = frame[is_dlq.loc[frame.index]]
            rt = frame[~is_dlq.loc[frame.index]]
            out.append(_anomalies(dl, "sendback/dlq-route", name, dl["want"]))
            out.append(_anomalies(rt, "sendback/delay-level", name, rt["want"]))
    frames = [f for f in out if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else _empty()


# --- pass 2: by queue and by level -----------------------------------------------------------------


def check_queues(rec: pd.DataFrame) -> pd.DataFrame:
    """dispatch/in-order on rows that hold every record of their queues."""
    if rec.empty:
        return _empty()
    n = rec.groupby(["history_id", "topic", "queue", "offset"], sort=False)["uniq"].nunique().reset_index()
    bad = n[n["uniq"] > 1].assign(uniq="")
    return _anomalies(
        bad, "dispatch/in-order", "inconsistent-queue", bad["topic"] + ":" + bad["queue"].astype(str)
    )


def check_levels(inv: pd.DataFrame, rec: pd.DataFrame, config: BrokerConfig) -> pd.DataFrame:
    """schedule/fifo-per-level on rows that hold every delayed send of their levels and its copies."""
    sends = inv[(inv["f"] == "send") & (inv["delay"] > 0) & (inv["ccode"] == 0)].copy()
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
    return _anomalies(
        bad, "schedule/fifo-per-level", "fifo-violation", bad["level"].map(lambda lv: f"level {lv}")
    )


def check_frame(df: pd.DataFrame, config: BrokerConfig, eps: int) -> pd.DataFrame:
    """Every keyed rule on a frame that holds whole histories (the one-process path)."""
    inv = pair_completions(df)
    rec = df[df["type"] == "rec"]
    sb = resolve_send_backs(inv, rec)
    inv = pd.concat([inv[inv["f"] != "send_back"], sb], ignore_index=True)
    ends = read_ends(inv, rec)
    parts = [check_lifecycle(inv, rec, ends, config, eps), check_queues(rec), check_levels(inv, rec, config)]
    frames = [f for f in parts if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else _empty()

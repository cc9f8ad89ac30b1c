"""Trace verification at scale: the history checker on PySpark (or one process, or a process pool).

Two modes (docs/traces.md):

* ``whole``: every history is judged by the full history checker (``checker.check_history``), the
  exact oracle. Histories are independent, so files are spread over the workers; a history must not
  span two files (``rmqspec traces generate`` never splits one). Two Spark engines run the same worker
  code: ``rdd`` (``RDD.mapPartitions`` over the file list) and ``pandas`` (``DataFrame.mapInPandas``
  over a one-column frame of file paths); the benchmark measured both and ``rdd`` is the default.
* ``keyed``: the column checks of ``trace_keyed``. ``local``, ``pool`` and Spark ``rdd`` check whole
  files (a Spark task per file, no shuffle: a history lies in one file, so every key's rows do).
  Spark ``pandas`` splits the trace by key (message, queue, level) so that one huge history is checked
  in parallel: Spark SQL pairs invocations with completions (a window by history and process), resolves
  send-backs (a join on the commit-log offset) and finds the last read-to-end of every queue, then
  ``mapInPandas`` runs the same checks on partitions hash-partitioned by each rule's key.

Worker functions are module-level and import only the package, so they run on any cluster that has
rmqspec installed. Every run counts rows read and rows checked and refuses to report a verdict when
they differ.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pandas as pd

from rmqspec.reference.config import BrokerConfig

from .checker import check_history
from .trace_format import (
    COLUMNS,
    NAMES,
    TraceError,
    config_to_json,
    events_of,
    read_parquet_table,
    read_rows,
    recorded_config,
    trace_files,
)
from .trace_gen import TRACE_CONFIG
from .trace_keyed import (
    ANOMALY_COLUMNS,
    Vocab,
    check_coded,
    check_levels,
    check_lifecycle,
    check_queues,
    encode,
    read_coded,
    recode,
)

RESULT_COLUMNS = ["file", "history_id", "verdict", "rows", "events", "anomalies", "lateness"]


@attrs.frozen
class VerifyResult:
    mode: str
    engine: str
    files: int
    histories: int
    rows_read: int
    rows_checked: int
    verdicts: dict[str, int]
    by_rule: dict[str, int]
    failed: tuple[str, ...]
    lateness: tuple[tuple[int, int], ...]  # (delay level, ms late) samples
    ladder: tuple[tuple[int, int], ...]  # (reconsumeTimes of the copy, ms from send-back to copy)
    seconds: float
    # (history, rule, anomaly, message) of every anomaly of a failed history (whole mode), and the settings
    # the traces were judged by (broker.conf names)
    anomalies: tuple[tuple[str, str, str, str], ...] = ()
    config: dict[str, Any] = attrs.field(factory=dict)

    @property
    def passed(self) -> bool:
        return self.rows_read == self.rows_checked and set(self.verdicts) <= {"pass"}

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "engine": self.engine,
            "files": self.files,
            "histories": self.histories,
            "rows_read": self.rows_read,
            "rows_checked": self.rows_checked,
            "verdicts": self.verdicts,
            "anomalies_by_rule": self.by_rule,
            "failed_histories": list(self.failed[:1000]),
            "failed_count": len(self.failed),
            "judged_against": self.config,
            "anomalies": [
                {"history": h, "rule": rule, "name": name, "message": msg}
                for h, rule, name, msg in self.anomalies
            ],
            "seconds": round(self.seconds, 3),
            "passed": self.passed,
        }


# --- the worker: whole histories of one file -----------------------------------------------------


def _lateness(events_rows: list[dict[str, Any]], config: BrokerConfig) -> list[tuple[int, int]]:
    """(level, ms late) of each delayed message's delivered copy, from a history's rows."""
    sends: dict[tuple[str, str], tuple[int, int]] = {}
    for r in events_rows:
        if r["type"] == "invoke" and r["f"] == "send" and r["delay"] > 0:
            sends[(r["uniq"], r["topic"])] = (r["time"], min(r["delay"], len(config.delay_levels)))
    out = []
    seen = set()
    for r in events_rows:
        if r["type"] == "rec" and (r["uniq"], r["topic"]) in sends and (r["uniq"], r["topic"]) not in seen:
            seen.add((r["uniq"], r["topic"]))
            t, level = sends[(r["uniq"], r["topic"])]
            out.append((level, r["store_time"] - t - config.delay_levels[level - 1]))
    return out


def _ladder(events_rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    by_clo: dict[int, tuple[str, int]] = {}
    for r in events_rows:
        if r["type"] == "rec" and r["clo"] >= 0:
            by_clo.setdefault(r["clo"], (r["uniq"], r["reconsume"]))
    backs = [
        (by_clo[r["clo"]], r["time"])
        for r in events_rows
        if r["type"] == "invoke" and r["f"] == "send_back" and r["clo"] in by_clo
    ]
    copies: dict[tuple[str, int], int] = {}
    for r in events_rows:
        if r["type"] == "rec" and r["topic"].startswith("%"):
            copies.setdefault((r["uniq"], r["reconsume"]), r["store_time"])
    return [(rc + 1, copies[(u, rc + 1)] - t) for (u, rc), t in backs if (u, rc + 1) in copies]


def check_file(path: str, eps: int, config: BrokerConfig = TRACE_CONFIG) -> Iterator[dict[str, Any]]:
    """One result row per history in ``path`` (histories judged whole), plus the count of rows read."""
    current: str | None = None
    rows: list[dict[str, Any]] = []
    done: set[str] = set()

    def judge(hid: str, rs: list[dict[str, Any]]) -> dict[str, Any]:
        if hid in done:
            raise TraceError(f"{path}: history {hid} is not contiguous (its rows are split)")
        done.add(hid)
        events = events_of(rs)
        v = check_history(events, config, epsilon_ms=eps)
        return {
            "file": path,
            "history_id": hid,
            "verdict": v.status,
            "rows": len(rs),
            "events": v.total,
            "anomalies": json.dumps([[a.rule, a.name, a.message] for a in v.anomalies]),
            "lateness": json.dumps({"late": _lateness(rs, config), "ladder": _ladder(rs)}),
        }

    for row in read_rows(Path(path)):
        if row["history_id"] != current:
            if current is not None:
                yield judge(current, rows)
            current, rows = row["history_id"], []
        rows.append(row)
    if current is not None:
        yield judge(current, rows)


def check_files(
    paths: Iterable[str], eps: int, config: BrokerConfig = TRACE_CONFIG
) -> Iterator[dict[str, Any]]:
    for p in paths:
        yield from check_file(p, eps, config)


def _mapinpandas_worker(eps: int, config: BrokerConfig) -> Any:
    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:  # one row per file: batches never split a file
            rows = list(check_files(frame["path"].tolist(), eps, config))
            out = pd.DataFrame(rows, columns=RESULT_COLUMNS)
            yield pd.DataFrame({c: out[c].to_numpy(dtype=object) for c in RESULT_COLUMNS})

    return run


# --- engines ---------------------------------------------------------------------------------------


def spark_session(master: str, app: str = "rmqspec traces verify") -> Any:
    import sys
    import warnings

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # PySpark 4.x warns on every worker that pandas 3 is newer than it knows; the paths used here work.
    quiet = "ignore:PySpark does not yet fully support pandas:FutureWarning"
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), quiet]))
    warnings.filterwarnings(
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )
    # No console progress bars: they flood `make bench` and reports.
    try:
        spark = (
            SparkSession.builder.master(master)
            .appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "8")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
    except Exception as e:  # JAVA_GATEWAY_EXITED, a bad master URL, no Java: say which, in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TraceError(
            f"cannot start Spark with --master {master}: {first} (use local[N], spark://HOST:PORT, or "
            "--engine local to check without Spark)"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _collect_whole(
    files: list[str], eps: int, engine: str, spark: Any | None, workers: int, config: BrokerConfig
) -> list[dict[str, Any]]:
    if engine == "local":
        return list(check_files(files, eps, config))
    if engine == "pool":
        from multiprocessing import Pool

        with Pool(workers) as pool:
            parts = pool.starmap(_pool_job, [(f, eps, config) for f in files])
        return [r for part in parts for r in part]
    assert spark is not None
    if engine == "rdd":
        sc = spark.sparkContext
        rdd = sc.parallelize(files, len(files)).mapPartitions(lambda it: check_files(list(it), eps, config))
        return list(rdd.collect())
    if engine == "pandas":
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        schema = StructType(
            [
                StructField("file", StringType()),
                StructField("history_id", StringType()),
                StructField("verdict", StringType()),
                StructField("rows", LongType()),
                StructField("events", LongType()),
                StructField("anomalies", StringType()),
                StructField("lateness", StringType()),
            ]
        )
        paths = spark.createDataFrame([(f,) for f in files], ["path"]).repartition(len(files))
        out = paths.mapInPandas(_mapinpandas_worker(eps, config), schema=schema)
        return [r.asDict() for r in out.collect()]
    raise ValueError(f"unknown engine {engine!r}")


def _pool_job(path: str, eps: int, config: BrokerConfig) -> list[dict[str, Any]]:
    return list(check_file(path, eps, config))


def count_rows(files: list[str]) -> int:
    """Rows in the files, counted independently of the checking (the read == checked assertion)."""
    n = 0
    for f in files:
        p = Path(f)
        if p.suffix == ".parquet":
            n += read_parquet_table(p, schema_only=True).num_rows
        else:
            try:
                with p.open("rb") as fh:
                    n += sum(1 for _ in fh) - 1
            except OSError as e:
                raise TraceError(f"{p}: cannot read: {e.strerror or e}") from None
    return n


def _worker_error(e: BaseException) -> TraceError | None:
    """The TraceError a Spark worker raised (it reaches the driver as a Java or Python exception whose
    text holds the worker's traceback), so that bad input gives the same one line on every engine."""
    text = str(e)
    marker = "TraceError: "
    if marker not in text:
        return None
    line = text[text.rindex(marker) + len(marker) :].splitlines()[0].strip()
    return TraceError(line)


def verify(
    path: Path,
    *,
    mode: str = "whole",
    engine: str = "rdd",
    master: str = "local[*]",
    eps: int = 0,
    workers: int = 2,
    spark: Any | None = None,
    config: BrokerConfig | None = None,
) -> VerifyResult:
    """Verify the traces at ``path``. ``config``: the broker settings to judge them by; None: the settings
    the first file records (``traces generate`` writes them), else the generator's (TRACE_CONFIG)."""
    start = time.perf_counter()
    files = [str(p) for p in trace_files(path)]
    if config is None:
        config = (recorded_config(Path(files[0])) if files else None) or TRACE_CONFIG
    rows_read = count_rows(files)
    own = None
    if engine in ("rdd", "pandas") and spark is None:
        spark = own = spark_session(master)
    try:
        if mode == "keyed":
            return _verify_keyed(files, rows_read, eps, engine, spark, start, config, workers)
        results = _collect_whole(files, eps, engine, spark, workers, config)
    except TraceError:
        raise
    except Exception as e:  # a worker's TraceError comes back wrapped by Spark
        worker = _worker_error(e)
        if worker is None:
            raise
        raise worker from None
    finally:
        if own is not None:
            own.stop()
    verdicts: dict[str, int] = {}
    by_rule: dict[str, int] = {}
    failed = []
    late: list[tuple[int, int]] = []
    ladder: list[tuple[int, int]] = []
    found: list[tuple[str, str, str, str]] = []
    for r in results:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        if r["verdict"] != "pass":
            failed.append(str(r["history_id"]))
        for rule, name, msg in json.loads(r["anomalies"]):
            by_rule[rule] = by_rule.get(rule, 0) + 1
            found.append((str(r["history_id"]), str(rule), str(name), str(msg)))
        extra = json.loads(r["lateness"])
        late.extend((int(a), int(b)) for a, b in extra["late"])
        ladder.extend((int(a), int(b)) for a, b in extra["ladder"])
    return VerifyResult(
        "whole",
        engine,
        len(files),
        len(results),
        rows_read,
        sum(int(r["rows"]) for r in results),
        dict(sorted(verdicts.items())),
        dict(sorted(by_rule.items())),
        tuple(sorted(failed)),
        tuple(late),
        tuple(ladder),
        time.perf_counter() - start,
        tuple(sorted(found)),
        config_to_json(config),
    )


# --- keyed mode ------------------------------------------------------------------------------------


def _load_coded(path: str) -> tuple[pd.DataFrame, Vocab]:
    p = Path(path)
    if p.suffix == ".parquet":
        return read_coded(p)
    return encode(pd.DataFrame(list(read_rows(p)), columns=list(NAMES)))


def _keyed_file(path: str, eps: int, config: BrokerConfig) -> tuple[pd.DataFrame, int, list[str]]:
    """One file's keyed verdicts (a history lies in one file, docs/traces.md): its anomalies, its rows
    and the histories it holds."""
    df, vocab = _load_coded(path)
    anomalies = check_coded(df, vocab, config, eps)
    held = vocab.decode(pd.unique(df["history_id"].to_numpy())).tolist()
    return anomalies, len(df), [str(h) for h in held]


def _keyed_files(
    paths: Iterable[str], eps: int, config: BrokerConfig
) -> Iterator[tuple[str, list[Any], int, list[str]]]:
    """A Spark task's files, each judged by ``_keyed_file``: (file, anomaly rows, rows, histories)."""
    for path in paths:
        anomalies, rows, held = _keyed_file(path, eps, config)
        yield (
            path,
            [tuple(str(x) for x in r) for r in anomalies[ANOMALY_COLUMNS].itertuples(index=False)],
            rows,
            held,
        )


def _keyed_local(
    files: list[str], eps: int, config: BrokerConfig, workers: int, spark: Any | None = None
) -> tuple[pd.DataFrame, int, int]:
    """Keyed mode over whole files: in this process, a process pool, or Spark tasks (one per file, no
    shuffle: a history lies in one file, so every key's rows do)."""
    if spark is not None:
        sc = spark.sparkContext
        rdd = sc.parallelize(files, len(files)).mapPartitions(lambda it: _keyed_files(list(it), eps, config))
        got = {path: (rows, n, held) for path, rows, n, held in rdd.collect()}
        parts = [
            (pd.DataFrame(got[f][0], columns=ANOMALY_COLUMNS), got[f][1], got[f][2])
            for f in files
            if f in got
        ]
    elif workers > 1 and len(files) > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(min(workers, len(files))) as pool:
            parts = pool.starmap(_keyed_file, [(f, eps, config) for f in files])
    else:
        parts = [_keyed_file(f, eps, config) for f in files]
    where: dict[str, str] = {}
    for f, (_, _, held) in zip(files, parts, strict=True):
        for h in held:
            if h in where:
                raise TraceError(
                    f"{f}: history {h} is also in {where[h]} (a history's rows are in one file, docs/traces.md)"
                )
            where[h] = f
    frames = [a for a, _, _ in parts if not a.empty]
    anomalies = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=ANOMALY_COLUMNS)
    return anomalies, sum(n for _, n, _ in parts), len(where)


def _verify_keyed(
    files: list[str],
    rows_read: int,
    eps: int,
    engine: str,
    spark: Any | None,
    start: float,
    config: BrokerConfig,
    workers: int = 1,
) -> VerifyResult:
    if engine in ("local", "pool"):
        anomalies, checked, histories = _keyed_local(files, eps, config, workers if engine == "pool" else 1)
    elif engine == "rdd":
        anomalies, checked, histories = _keyed_local(files, eps, config, 1, spark)
    else:
        assert spark is not None
        anomalies, checked, histories = _keyed_spark(spark, files, eps, config)
    by_rule = anomalies.groupby("rule").size().to_dict() if len(anomalies) else {}
    failed = tuple(sorted(set(anomalies["history_id"]))) if len(anomalies) else ()
    verdicts = {"pass": histories - len(failed)} if histories > len(failed) else {}
    if failed:
        verdicts["fail"] = len(failed)
    return VerifyResult(
        "keyed",
        engine,
        len(files),
        histories,
        rows_read,
        checked,
        verdicts,
        {str(k): int(v) for k, v in sorted(by_rule.items())},
        failed,
        (),
        (),
        time.perf_counter() - start,
        tuple(
            sorted(
                (str(h), str(rule), str(name), f"{uniq}: {detail}")
                for h, rule, name, uniq, detail in anomalies[ANOMALY_COLUMNS].itertuples(index=False)
            )
        )
        if len(anomalies)
        else (),
        config_to_json(config),
    )


def _anomaly_schema() -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField(c, StringType()) for c in ANOMALY_COLUMNS])


def _lifecycle_worker(ends: pd.DataFrame, eps: int, config: BrokerConfig) -> Any:
    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        frame, vocab = encode(_whole_partition(frames))
        kind = frame["type"].to_numpy()
        inv = frame[kind == vocab.code("invoke")]
        rec = frame[kind == vocab.code("rec")]
        coded_ends = recode(ends, vocab, ("history_id", "topic"))
        yield _for_arrow(check_lifecycle(inv, rec, coded_ends, config, eps, vocab))

    return run


def _for_arrow(df: pd.DataFrame) -> pd.DataFrame:
    """Anomalies as plain object columns (pandas 3's Arrow-backed strings confuse PySpark 4.x)."""
    return pd.DataFrame({c: df[c].astype(str).to_numpy(dtype=object) for c in ANOMALY_COLUMNS})


def _whole_partition(frames: Iterator[pd.DataFrame]) -> pd.DataFrame:
    """mapInPandas hands a partition over in Arrow batches; a key's rows may span two of them."""
    batches = list(frames)
    return pd.concat(batches, ignore_index=True) if batches else pd.DataFrame(columns=list(NAMES))


def _queue_worker(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    frame, vocab = encode(_whole_partition(frames))
    yield _for_arrow(check_queues(frame, vocab))


def _level_worker(config: BrokerConfig) -> Any:
    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        frame, vocab = encode(_whole_partition(frames))
        kind = frame["type"].to_numpy()
        inv = frame[kind == vocab.code("invoke")]
        rec = frame[kind == vocab.code("rec")]
        yield _for_arrow(check_levels(inv, rec, config, vocab))

    return run


def _keyed_spark(
    spark: Any, files: list[str], eps: int, config: BrokerConfig
) -> tuple[pd.DataFrame, int, int]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    parquet = [f for f in files if f.endswith(".parquet")]
    if len(parquet) != len(files):
        raise TraceError(
            "keyed mode on Spark reads Parquet traces: write Parquet (traces generate --format parquet), or check JSON Lines with --engine local"
        )
    df = spark.read.parquet(*parquet)
    checked = df.count()
    histories = df.select("history_id").distinct().count()
    ops = df.filter((F.col("type") != "rec") & (F.col("process") >= 0))
    w = Window.partitionBy("history_id", "process").orderBy("index")
    nxt = {
        c: F.lead(src).over(w)
        for c, src in (
            ("ctime", "time"),
            ("ccode", "code"),
            ("coffset", "offset"),
            ("caux", "aux"),
            ("ntype", "type"),
        )
    }
    inv = ops.select("*", *[v.alias(k) for k, v in nxt.items()])
    done = F.col("ntype").isin("ok", "fail")
    for c in ("ctime", "ccode", "coffset", "caux"):
        inv = inv.withColumn(c, F.when(done, F.col(c)).otherwise(F.lit(-1)).cast("long"))
    inv = inv.filter(F.col("type") == "invoke").drop("ntype")
    rec = df.filter(F.col("type") == "rec")
    first = rec.dropDuplicates(["history_id", "clo"]).select(
        "history_id", "clo", F.col("uniq").alias("r_uniq"), F.col("reconsume").alias("r_reconsume")
    )
    sb = (
        inv.filter(F.col("f") == "send_back")
        .join(first, ["history_id", "clo"], "inner")
        .dropDuplicates(["history_id", "clo"])
        .withColumn("uniq", F.col("r_uniq"))
        .withColumn("reconsume", F.col("r_reconsume").cast("int"))
        .drop("r_uniq", "r_reconsume")
    )
    inv = inv.filter(F.col("f") != "send_back").unionByName(sb)
    up = inv.filter((F.col("f") == "pull") & (F.col("ccode") == 19) & (F.col("coffset") == F.col("caux")))
    # A read to the end counts only if every offset below its max was read (trace_keyed.read_ends).
    qkeys = ["history_id", "topic", "queue"]
    distinct = rec.select(*qkeys, "offset").distinct()
    ranked = distinct.withColumn(
        "rank", F.row_number().over(Window.partitionBy(*qkeys).orderBy("offset")) - 1
    )
    prefix = ranked.filter(F.col("offset") == F.col("rank")).groupBy(*qkeys).agg(F.count("*").alias("prefix"))
    up = up.join(prefix, qkeys, "left").filter(F.col("caux") <= F.coalesce(F.col("prefix"), F.lit(0)))
    ends = up.groupBy(*qkeys).agg(F.max("time").alias("read_end")).toPandas()
    cols = [*NAMES, "ctime", "ccode", "coffset", "caux"]
    rec_full = rec.select(
        *[
            F.lit(-1).cast("long").alias(c) if c in ("ctime", "ccode", "coffset", "caux") else F.col(c)
            for c in cols
        ]
    )
    both = inv.select(*cols).unionByName(rec_full)
    # enough partitions that each fits a worker's pandas comfortably (about 400,000 rows each)
    parts = max(2, spark.sparkContext.defaultParallelism * 2, checked // 400_000)
    schema = _anomaly_schema()
    life = both.repartition(parts, "history_id", "uniq").mapInPandas(
        _lifecycle_worker(ends, eps, config), schema=schema
    )
    queues = rec.repartition(parts, "history_id", "topic", "queue").mapInPandas(_queue_worker, schema=schema)
    levels = both.filter(((F.col("f") == "send") & (F.col("delay") > 0)) | (F.col("type") == "rec"))
    levels = levels.repartition(1, "history_id").mapInPandas(_level_worker(config), schema=schema)
    out = life.unionByName(queues).unionByName(levels).toPandas()
    return out, int(checked), int(histories)


def plot(result: VerifyResult, out_dir: Path, eps: int = 0) -> list[Path]:
    """PNG plots (conformance/plots.py): lateness per level against the allowed window, and the retry
    ladder against the spec's delays, judged by the settings the traces were."""
    from .plots import plot_ladder, plot_lateness
    from .trace_format import config_from_json

    config = config_from_json(result.config, "the verified traces") if result.config else TRACE_CONFIG
    late: dict[int, list[int]] = {}
    for level, ms in result.lateness:
        late.setdefault(level, []).append(ms)
    title = f"{result.histories} histories"
    return [
        plot_lateness(late, eps, out_dir / "lateness.png", title).path,
        plot_ladder(list(result.ladder), [], config, out_dir / "retry-ladder.png", title).path,
    ]


__all__ = ["COLUMNS", "VerifyResult", "check_file", "plot", "spark_session", "verify"]

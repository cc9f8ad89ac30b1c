"""The coded keyed checker (trace_keyed) against the pandas-on-strings one it replaced
(tests/oracles/keyed_strings.py): the same anomalies, to the text, on the reference's traces and on the
traces of every mutant of the model (issue 15: "verdicts of the new checkers equal the old ones")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from oracles import keyed_strings

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.mutants import MUTANTS
from rmqspec.conformance.trace_format import TraceError, rows_of, write_parquet
from rmqspec.conformance.trace_gen import TRACE_CONFIG, generate_history
from rmqspec.conformance.trace_keyed import check_coded, check_frame, read_coded
from rmqspec.conformance.trace_spark import verify

SEEDS = range(3)
EVENTS = 150


def _rows(mutant: str | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for seed in SEEDS:
        events = generate_history(seed, EVENTS, mutant=mutant, make_target=InProcessTarget)
        rows.extend(rows_of(f"{seed}-{mutant}", events))
    return rows


def _anomalies(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    return sorted(
        tuple(str(x) for x in row) for row in frame[keyed_strings.ANOMALY_COLUMNS].itertuples(index=False)
    )


def _model_mutants() -> list[str]:
    out = []
    for name, m in sorted(MUTANTS.items()):
        try:
            m.model(TRACE_CONFIG)
        except Exception:  # a wire mutant: its fault is in frames, not in the model the traces run
            continue
        out.append(name)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("mutant", [None, *_model_mutants()])
def test_coded_keyed_checker_equals_the_string_one(mutant: str | None) -> None:
    rows = _rows(mutant)
    old = _anomalies(keyed_strings.check_frame(pd.DataFrame(rows), TRACE_CONFIG, 0))
    new = _anomalies(check_frame(pd.DataFrame(rows), TRACE_CONFIG, 0))
    assert new == old


def test_the_parquet_path_reads_the_same_codes(tmp_path: Path) -> None:
    """Dictionary columns merged into one vocabulary judge as the string frame does (a mutant that fails)."""
    rows = _rows("retry-level-off-by-one") + _rows(None)
    path = tmp_path / "t.parquet"
    write_parquet(path, rows)
    coded, vocab = read_coded(path)
    old = _anomalies(keyed_strings.check_frame(pd.DataFrame(rows), TRACE_CONFIG, 0))
    assert old, "the mutant's traces should fail"
    assert _anomalies(check_coded(coded, vocab, TRACE_CONFIG, 0)) == old


def test_a_history_in_two_files_is_refused(tmp_path: Path) -> None:
    rows = _rows(None)
    write_parquet(tmp_path / "a.parquet", rows)
    write_parquet(tmp_path / "b.parquet", rows[:10])
    with pytest.raises(TraceError, match=r"is also in .*a history's rows are in one file"):
        verify(tmp_path, mode="keyed", engine="local")


def test_edited_traces_for_the_rules_no_mutant_breaks_here() -> None:
    """dispatch/in-order and schedule/fifo-per-level, which these mutants' short traces do not break:
    a record read again with another UNIQ_KEY (one offset, two messages) and a later delayed copy stored earlier."""
    rows = _rows(None)
    recs = [r for r in rows if r["type"] == "rec"]
    edited = [dict(r) for r in rows]
    queue_rec = next(i for i, r in enumerate(rows) if r["type"] == "rec" and not r["topic"].startswith("%"))
    edited.append(dict(rows[queue_rec], uniq="someone-else"))  # the same offset read again, another message
    delayed = [r for r in recs if r["delay"] > 0 and not r["topic"].startswith("%")]
    assert delayed, "the reference traces deliver delayed messages"
    for r in edited:
        if r["type"] == "rec" and r["delay"] > 0 and r["uniq"] == delayed[-1]["uniq"]:
            r["store_time"] = 0  # the last delayed copy stored before every other one of its level
    old = _anomalies(keyed_strings.check_frame(pd.DataFrame(edited), TRACE_CONFIG, 0))
    names = {a[2] for a in old}
    assert {"inconsistent-queue", "fifo-violation"} <= names, names
    assert _anomalies(check_frame(pd.DataFrame(edited), TRACE_CONFIG, 0)) == old

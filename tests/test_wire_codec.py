"""The remoting codec against the 60 frames recorded from Apache RocketMQ 4.9.4 (shared/wire-vectors)."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqspec.adapters.remoting.codec import (
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    decode_frame,
    decode_records,
    encode_frame,
    encode_record,
    parse_offset_msg_id,
)
from rmqspec.reference.records import offset_msg_id

VECTORS = Path(__file__).resolve().parents[2] / "shared" / "wire-vectors" / "rocketmq-4.9.4.jsonl"
pytestmark = pytest.mark.skipif(not VECTORS.exists(), reason="shared/wire-vectors not beside the checkout")


def vectors() -> list[dict[str, Any]]:
    if not VECTORS.exists():
        return []
    return [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]


ROWS = vectors()


@pytest.mark.parametrize("row", [r for r in ROWS if r["direction"] == "request"], ids=lambda r: r["case"])
def test_requests_encode_byte_for_byte(row: dict[str, Any]) -> None:
    h = row["header"]
    cmd = RemotingCommand(
        code=h["code"],
        opaque=h["opaque"],
        flag=h["flag"],
        ext_fields=h.get("extFields"),
        body=bytes.fromhex(row["body_hex"]),
        language=h["language"],
        version=h["version"],
    )
    assert encode_frame(cmd).hex() == row["frame_hex"]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['case']}-{r['direction']}")
def test_every_frame_decodes(row: dict[str, Any]) -> None:
    cmd = decode_frame(bytes.fromhex(row["frame_hex"]))
    h = row["header"]
    assert (cmd.code, cmd.opaque, cmd.flag) == (h["code"], h["opaque"], h["flag"])
    assert cmd.remark == h.get("remark")
    assert dict(cmd.ext_fields or {}) == h.get("extFields", {}) or h.get("extFields") is None
    assert cmd.body.hex() == row["body_hex"]
    assert cmd.is_response == (row["direction"] == "response")
    assert cmd.is_oneway == (h["flag"] == 2)


_SUMMARY = re.compile(
    r"topic=(\S+) queueId=(\d+) queueOffset=(\d+) commitLogOffset=(\d+) sysFlag=(\d+) "
    r"reconsumeTimes=(\d+) preparedTransactionOffset=(\d+) body=\"([^\"]*)\" properties=(\{[^}]*\})"
)


@pytest.mark.parametrize(
    "row",
    [r for r in ROWS if "stored record" in r.get("notes", "") or "message(s) encoded" in r.get("notes", "")],
    ids=lambda r: r["case"],
)
def test_records_match_the_recorded_summaries(row: dict[str, Any]) -> None:
    records = decode_records(bytes.fromhex(row["body_hex"]))
    summaries = _SUMMARY.findall(row["notes"])
    assert len(records) == len(summaries) > 0
    for rec, s in zip(records, summaries, strict=True):
        topic, qid, qoff, clo, sys_flag, reconsume, prepared, body, props_json = s
        assert (rec.topic, rec.queue_id, rec.queue_offset, rec.commit_log_offset) == (
            topic,
            int(qid),
            int(qoff),
            int(clo),
        )
        assert (rec.sys_flag, rec.reconsume_times, rec.prepared_transaction_offset) == (
            int(sys_flag),
            int(reconsume),
            int(prepared),
        )
        assert rec.body.decode() == body
        assert dict(rec.properties) == json.loads(props_json)
        # Re-encoding gives the same bytes up to the properties, whose order is Java HashMap order on the
        # broker; decoding the re-encoded record gives the same record.
        again = encode_record(rec)
        original = bytes.fromhex(row["body_hex"])
        start = sum(r.size for r in records[: records.index(rec)])
        fixed = (
            rec.size
            - len("".join(f"{k}{v}" for k, v in rec.properties.items()).encode())
            - 2 * len(rec.properties)
            + 1
        )
        assert decode_records(again)[0].properties == rec.properties
        if row["case"] == "pull_batch":
            # A batch record's stored string is its own properties, then the wrapper's: WAIT appears twice,
            # so the broker's record is longer than the de-duplicated re-encoding (by "\x02WAIT\x01true").
            assert rec.size - len(again) == len("\x02WAIT\x01true")
            continue
        assert len(again) == rec.size
        assert again[:fixed] == original[start : start + fixed]
        assert decode_records(again) == [rec]


def test_offset_msg_ids_round_trip() -> None:
    assert parse_offset_msg_id("7F00000100002A9F0000000000000D9A") == ("127.0.0.1", 10911, 3482)
    assert offset_msg_id(("127.0.0.1", 10911), 3482) == "7F00000100002A9F0000000000000D9A"
    with pytest.raises(ProtocolError, match="32 hex"):
        parse_offset_msg_id("ABC")
    with pytest.raises(ProtocolError, match="not hex"):
        parse_offset_msg_id("Z" * 32)


def test_stream_decoder_splits_and_joins_frames() -> None:
    frames = b"".join(bytes.fromhex(r["frame_hex"]) for r in ROWS[:6])
    dec = FrameDecoder()
    got = [c for i in range(0, len(frames), 7) for c in dec.feed(frames[i : i + 7])]
    assert [c.opaque for c in got] == [r["header"]["opaque"] for r in ROWS[:6]]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_decoders_raise_only_protocol_errors(data: bytes) -> None:
    for decode in (decode_frame, decode_records, lambda d: list(FrameDecoder().feed(d))):
        with contextlib.suppress(ProtocolError):
            decode(data)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_vectors_raise_only_protocol_errors(data: st.DataObject) -> None:
    row = data.draw(st.sampled_from(ROWS))
    frame = bytearray(bytes.fromhex(row["frame_hex"]))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        cmd = decode_frame(bytes(frame))
        if cmd.body and row["body_hex"]:
            decode_records(cmd.body)


def test_model_record_sizes_match_the_broker() -> None:
    """The model's commit-log offsets are byte offsets: its records are as long as 4.9.4's."""
    from rmqspec.reference.batch import Batch, BatchEntry
    from rmqspec.reference.model import Model
    from rmqspec.reference.put import Message
    from rmqspec.reference.records import props

    by_case = {(r["case"], r["direction"]): r for r in ROWS}
    recorded = decode_records(bytes.fromhex(by_case[("pull_found_two", "response")]["body_hex"]))
    batch = decode_records(bytes.fromhex(by_case[("pull_batch", "response")]["body_hex"]))
    model = Model()
    state = model.initial()
    for r in recorded:
        p = {k: v for k, v in r.properties.items() if k != "CLUSTER"}
        state, sent = model.send(state, Message(r.topic, r.body, props(p, WAIT="true")), 0)
        assert sent.record.size == r.size  # type: ignore[union-attr]
    entries = tuple(
        BatchEntry(r.body, props({k: v for k, v in r.properties.items() if k != "CLUSTER"})) for r in batch
    )
    state, out = model.send_batch(state, Batch(batch[0].topic, entries, properties=props(WAIT="true")), 0)
    assert [r.size for r in out.records] == [r.size for r in batch]  # type: ignore[union-attr]

"""The wire vectors recorded from Apache RocketMQ 4.9.7 and 5.5.0 by rmqspec's recorder (tests/vectors).

Every frame decodes with our codec; every request re-encodes byte for byte; every stored-record body decodes
with its CRC checked; every response parses with the typed parser of its request. The differences between
the versions that tests/vectors/README.md lists are asserted here, so the README cannot drift from the files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmqspec.adapters.remoting.codec import (
    MAGIC,
    FrameDecoder,
    RemotingCommand,
    decode_frame,
    decode_records,
    encode_frame,
    parse_check_transaction_request,
    parse_max_offset_response,
    parse_pull_response,
    parse_query_message_response,
    parse_reply,
    parse_send_response,
    parse_view_message_response,
)

VECTORS = Path(__file__).resolve().parent / "vectors"
VERSIONS = {"4.9.7": 407, "5.5.0": 513}
Row = dict[str, Any]


def rows(version: str) -> list[Row]:
    path = VECTORS / f"rocketmq-{version}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def by_case(version: str) -> dict[tuple[str, str], Row]:
    return {(r["case"], r["direction"]): r for r in rows(version)}


def frame(row: Row) -> RemotingCommand:
    return decode_frame(bytes.fromhex(row["frame_hex"]))


PARSERS: dict[int, Callable[[RemotingCommand], object]] = {
    10: parse_send_response,
    310: parse_send_response,
    320: parse_send_response,
    11: parse_pull_response,
    12: parse_query_message_response,
    30: parse_max_offset_response,
    33: parse_view_message_response,
    34: parse_reply,
    36: parse_reply,
    37: parse_reply,
}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_frame_decodes_to_the_header_and_body_the_file_states(version: str) -> None:
    data = rows(version)
    assert len(data) == 60
    assert len({(r["case"], r["direction"]) for r in data}) == 60
    stream = b"".join(bytes.fromhex(r["frame_hex"]) for r in data)
    assert len(FrameDecoder().feed(stream)) == 60  # the frames also split cleanly as one stream
    for r in data:
        cmd = frame(r)
        h = r["header"]
        assert (cmd.code, cmd.flag, cmd.opaque, cmd.language, cmd.version) == (
            h["code"],
            h["flag"],
            h["opaque"],
            h["language"],
            h["version"],
        ), r["case"]
        assert cmd.remark == h.get("remark")
        assert cmd.ext == h.get("extFields", {})
        assert cmd.body.hex() == r["body_hex"]
        assert cmd.serialize_type_current_rpc == "JSON"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_request_re_encodes_byte_for_byte_and_carries_the_release_version(version: str) -> None:
    for r in rows(version):
        cmd = frame(r)
        if r["direction"] == "request":
            assert encode_frame(cmd).hex() == r["frame_hex"], r["case"]
            assert cmd.version == VERSIONS[version]
            assert cmd.flag in (0, 2)
        else:
            assert cmd.version == VERSIONS[version]  # the broker writes its own MQVersion


@pytest.mark.parametrize("version", VERSIONS)
def test_every_response_parses_and_pairs_with_its_request(version: str) -> None:
    table = by_case(version)
    for (case, direction), r in table.items():
        if direction != "response":
            continue
        request = frame(table[(case, "request")])
        response = frame(r)
        assert response.is_response and response.opaque == request.opaque
        PARSERS[request.code](response)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_stored_record_body_decodes_with_its_crc(version: str) -> None:
    count = 0
    for r in rows(version):
        cmd = frame(r)
        holds_records = (
            r["direction"] == "response"
            and cmd.code == 0
            and cmd.body
            and "stored record" in r.get("notes", "")
        ) or r["direction"] == "broker-request"
        if not holds_records:
            continue
        records = decode_records(cmd.body, verify_crc=True)
        assert records and all(rec.magic == MAGIC for rec in records)
        assert f"{len(records)} stored record(s)" in r["notes"]
        count += len(records)
    assert count == 14


@pytest.mark.parametrize("version", VERSIONS)
def test_the_broker_started_check_parses(version: str) -> None:
    table = by_case(version)
    check = parse_check_transaction_request(frame(table[("check_transaction_state", "broker-request")]))
    assert check.record.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert check.record.topic == "WireTxTopic"
    answer = frame(table[("end_transaction_from_check", "request")])
    assert answer.is_oneway
    assert answer.get("commitLogOffset") == str(check.commit_log_offset)
    assert answer.get("tranStateTableOffset") == str(check.tran_state_table_offset)
    # 5.5.0 names the half topic, not the real one, in the header's topic.
    assert check.topic == ("RMQ_SYS_TRANS_HALF_TOPIC" if version == "5.5.0" else None)


def test_the_three_recordings_cover_the_same_exchanges() -> None:
    old = [json.loads(line) for line in (VECTORS / "rocketmq-4.9.4.jsonl").read_text().splitlines()]
    keys = {(r["case"], r["direction"]) for r in old}
    assert set(by_case("4.9.7")) == keys == set(by_case("5.5.0"))


def ext(version: str, case: str, direction: str = "response") -> dict[str, str]:
    return frame(by_case(version)[(case, direction)]).ext


def records_of(version: str, case: str) -> list[dict[str, str]]:
    return [dict(r.properties) for r in decode_records(frame(by_case(version)[(case, "response")]).body)]


def test_what_differs_between_4_9_7_and_5_5_0_on_the_wire() -> None:
    """The list in tests/vectors/README.md, one assertion each."""
    # Send responses: 5.5.0 adds transactionId (the message's UNIQ_KEY).
    assert "transactionId" not in ext("4.9.7", "send_message_v2_ok")
    sent = by_case("5.5.0")[("send_message_v2_ok", "request")]["header"]
    uniq = dict(p.split("\x01") for p in sent["extFields"]["i"].split("\x02") if p)["UNIQ_KEY"]
    assert ext("5.5.0", "send_message_v2_ok")["transactionId"] == uniq
    # Pull responses: 5.5.0 adds topicSysFlag and groupSysFlag.
    assert {"topicSysFlag", "groupSysFlag"} <= set(ext("5.5.0", "pull_found_two"))
    assert not {"topicSysFlag", "groupSysFlag"} & set(ext("4.9.7", "pull_found_two"))
    # A queueId out of range: SYSTEM_ERROR (1) on 4.9.7, INVALID_PARAMETER (29) on 5.5.0, for pull and send.
    for case in ("pull_queue_id_out_of_range", "send_queue_id_out_of_range"):
        assert frame(by_case("4.9.7")[(case, "response")]).code == 1
        assert frame(by_case("5.5.0")[(case, "response")]).code == 29
    # HEART_BEAT: 5.5.0 answers with IS_SUPPORT_HEART_BEAT_V2 and IS_SUB_CHANGE.
    assert ext("4.9.7", "heart_beat_producer") == {}
    assert set(ext("5.5.0", "heart_beat_producer")) == {"IS_SUPPORT_HEART_BEAT_V2", "IS_SUB_CHANGE"}
    # CHECK_TRANSACTION_STATE: 5.5.0 adds topic and bname; its body carries __transactionId__.
    check = "check_transaction_state"
    assert {"topic", "bname"} <= set(ext("5.5.0", check, "broker-request"))
    assert not {"topic", "bname"} & set(ext("4.9.7", check, "broker-request"))
    body = decode_records(frame(by_case("5.5.0")[(check, "broker-request")]).body)[0]
    assert body.properties["__transactionId__"] == body.properties["UNIQ_KEY"]
    # Stored single messages: 4.9.7 drops WAIT=true and adds CLUSTER; 5.5.0 keeps WAIT and adds
    # CLUSTER, TRACE_ON and MSG_REGION.
    (v2_497,) = records_of("4.9.7", "view_message_by_id_found")
    (v2_550,) = records_of("5.5.0", "view_message_by_id_found")
    assert "WAIT" not in v2_497 and v2_497["CLUSTER"] == "DefaultCluster"
    assert v2_550["WAIT"] == "true" and {"CLUSTER", "TRACE_ON", "MSG_REGION"} <= set(v2_550)
    # Batch messages: 4.9.7 adds CLUSTER to each; 5.5.0 stores them as sent.
    assert all("CLUSTER" in p for p in records_of("4.9.7", "pull_batch"))
    assert not any("CLUSTER" in p for p in records_of("5.5.0", "pull_batch"))
    # A committed transaction message: 4.9.7 keeps REAL_TOPIC and REAL_QID from the half message; 5.5.0
    # clears them and carries __transactionId__.
    (c497,) = records_of("4.9.7", "pull_committed")
    (c550,) = records_of("5.5.0", "pull_committed")
    assert c497["REAL_TOPIC"] == "WireTxTopic" and c497["REAL_QID"] == "0" and "__transactionId__" not in c497
    assert (
        "REAL_TOPIC" not in c550 and "REAL_QID" not in c550 and c550["__transactionId__"] == c550["UNIQ_KEY"]
    )
    # The rest is alike: the same codes for the same requests otherwise.
    for key, r in by_case("4.9.7").items():
        if key[0] in ("pull_queue_id_out_of_range", "send_queue_id_out_of_range"):
            continue
        assert frame(by_case("5.5.0")[key]).code == frame(r).code, key

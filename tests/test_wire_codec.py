"""The remoting codec against the 60 frames recorded from Apache RocketMQ 4.9.4 (facts §8, §10, §11).

Every request is re-encoded byte for byte, both from its recorded header and from the typed builders; every
frame decodes and re-encodes to its own bytes; every response and the broker's request parse into typed
results; every stored record decodes to the summary in the recording's notes and re-encodes byte for byte.
Hypothesis checks the round trips of frames, records, batch bodies and offset message ids.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqspec.adapters.remoting.codec import (
    LANGUAGE_CODES,
    MAGIC,
    MAGIC_V2,
    MAX_FRAME,
    BatchMessage,
    ConsumerData,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    SendMessageHeader,
    WireRecord,
    WireViolation,
    check_transaction_state_request,
    consumer_send_msg_back_request,
    decode_batch_body,
    decode_frame,
    decode_record,
    decode_records,
    describe_frame,
    encode_batch_body,
    encode_frame,
    encode_record,
    end_transaction_request,
    get_max_offset_request,
    heartbeat_body,
    heartbeat_request,
    iter_frames,
    json_string,
    make_record,
    offset_msg_id,
    parse_check_transaction_request,
    parse_max_offset_response,
    parse_offset_msg_id,
    parse_pull_response,
    parse_query_message_response,
    parse_reply,
    parse_route,
    parse_send_response,
    parse_view_message_response,
    pull_message_request,
    query_message_request,
    record_from_reference,
    response_for,
    send_batch_request,
    send_message_request,
    view_message_request,
)
from rmqspec.reference.constants import Code
from rmqspec.reference.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from rmqspec.reference.records import offset_msg_id as reference_offset_msg_id

# The 4.9.4 recording (tests/vectors/README-4.9.4.md), kept in the repo.
VECTORS = Path(__file__).resolve().parent / "vectors" / "rocketmq-4.9.4.jsonl"

Row = dict[str, Any]


def vectors() -> list[Row]:
    return [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]


ROWS = vectors()
BY = {(r["case"], r["direction"]): r for r in ROWS}
REQUESTS = [r for r in ROWS if r["direction"] == "request"]
RESPONSES = [r for r in ROWS if r["direction"] == "response"]


def frame(case: str, direction: str = "response") -> bytes:
    return bytes.fromhex(BY[(case, direction)]["frame_hex"])


def cmd_of(case: str, direction: str = "response") -> RemotingCommand:
    return decode_frame(frame(case, direction))


def test_the_vectors_are_all_there() -> None:
    assert len(ROWS) == 60
    assert {r["direction"] for r in ROWS} == {"request", "response", "broker-request"}
    assert len(BY) == 60  # (case, direction) is unique


# --- frames -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", REQUESTS, ids=lambda r: r["case"])
def test_requests_encode_byte_for_byte_from_their_header(row: Row) -> None:
    h = row["header"]
    cmd = RemotingCommand(
        code=h["code"],
        language=h["language"],
        version=h["version"],
        opaque=h["opaque"],
        flag=h["flag"],
        remark=h.get("remark"),
        ext_fields=h.get("extFields"),
        body=bytes.fromhex(row["body_hex"]),
        serialize_type_current_rpc=h["serializeTypeCurrentRPC"],
    )
    assert encode_frame(cmd).hex() == row["frame_hex"]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['case']}-{r['direction']}")
def test_every_frame_decodes_and_re_encodes_to_its_bytes(row: Row) -> None:
    raw = bytes.fromhex(row["frame_hex"])
    cmd = decode_frame(raw)
    h = row["header"]
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version) == (
        h["code"],
        h["opaque"],
        h["flag"],
        h["language"],
        h["version"],
    )
    assert cmd.serialize_type_current_rpc == h["serializeTypeCurrentRPC"] == "JSON"
    assert cmd.remark == h.get("remark")
    if "extFields" in h:
        assert cmd.ext_fields is not None
        assert list(cmd.ext_fields) == list(h["extFields"].items())  # order kept
    else:
        assert cmd.ext_fields is None
    assert cmd.body.hex() == row["body_hex"]
    assert cmd.is_response == (row["direction"] == "response")
    assert cmd.is_oneway == (h["flag"] == 2)
    assert encode_frame(cmd) == raw


def test_absent_and_empty_ext_fields_stay_apart() -> None:
    assert cmd_of("view_message_schedule_copy").ext_fields is None  # no "extFields" key at all
    assert cmd_of("pull_unknown_topic").ext_fields == ()  # "extFields":{}
    assert cmd_of("heart_beat_producer", "request").ext_fields == ()
    assert b'"extFields":{}' in encode_frame(RemotingCommand(34, ext_fields={}))
    assert b"extFields" not in encode_frame(RemotingCommand(34))


def test_stream_decoder_splits_and_joins_frames() -> None:
    stream = b"".join(bytes.fromhex(r["frame_hex"]) for r in ROWS)
    for step in (1, 7, 4096):
        dec = FrameDecoder()
        got = [c for i in range(0, len(stream), step) for c in dec.feed(stream[i : i + step])]
        dec.finish()
        assert [c.opaque for c in got] == [r["header"]["opaque"] for r in ROWS]
        assert dec.buffered == 0
    assert [c.code for c in iter_frames(stream)] == [r["header"]["code"] for r in ROWS]


def test_stream_decoder_reports_a_stream_that_ends_inside_a_frame() -> None:
    dec = FrameDecoder()
    assert dec.feed(frame("get_max_offset")[:-3]) == []
    assert dec.buffered > 0
    with pytest.raises(ProtocolError, match="ended inside a frame"):
        dec.finish()


def test_stream_decoder_stays_failed_after_an_error() -> None:
    dec = FrameDecoder()
    with pytest.raises(ProtocolError, match="serialize type 9"):
        dec.feed(struct.pack(">ii", 6, 9 << 24 | 2) + b"{}")
    with pytest.raises(ProtocolError, match="serialize type 9"):
        dec.feed(frame("get_max_offset"))


# --- typed request builders ----------------------------------------------------------------------------


_LONG_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "bname",
}


def _send_header(ext: dict[str, str], v2: bool) -> SendMessageHeader:
    f = {letter: ext.get(letter if v2 else name) for letter, name in _LONG_NAMES.items()}
    assert f["l"] is None and f["n"] is None  # not in the recording
    return SendMessageHeader(
        producer_group=str(f["a"]),
        topic=str(f["b"]),
        default_topic=str(f["c"]),
        default_topic_queue_nums=int(str(f["d"])),
        queue_id=int(str(f["e"])),
        sys_flag=int(str(f["f"])),
        born_timestamp=int(str(f["g"])),
        flag=int(str(f["h"])),
        properties=str(f["i"]),
        reconsume_times=int(str(f["j"])),
        unit_mode=f["k"] == "true",
        batch=f["m"] == "true",
    )


def build_request(row: Row) -> RemotingCommand:
    """The request of ``row``, made by the typed builder of its code from the recorded values."""
    h = row["header"]
    e: dict[str, str] = h.get("extFields") or {}
    body = bytes.fromhex(row["body_hex"])
    code = h["code"]
    cmd: RemotingCommand
    if code == 10:
        cmd = send_message_request(_send_header(e, v2=False), body, v2=False)
    elif code == 310:
        cmd = send_message_request(_send_header(e, v2=True), body)
    elif code == 320:
        cmd = send_batch_request(_send_header(e, v2=True), decode_batch_body(body))
    elif code == 11:
        cmd = pull_message_request(
            e["consumerGroup"],
            e["topic"],
            int(e["queueId"]),
            int(e["queueOffset"]),
            max_msg_nums=int(e["maxMsgNums"]),
            sys_flag=int(e["sysFlag"]),
            commit_offset=int(e["commitOffset"]),
            suspend_timeout_millis=int(e["suspendTimeoutMillis"]),
            subscription=e["subscription"],
            sub_version=int(e["subVersion"]),
            expression_type=e["expressionType"],
        )
    elif code == 12:
        cmd = query_message_request(
            e["topic"],
            e["key"],
            max_num=int(e["maxNum"]),
            begin_timestamp=int(e["beginTimestamp"]),
            end_timestamp=int(e["endTimestamp"]),
            unique_key={"true": True, "false": False}.get(e.get("_UNIQUE_KEY_QUERY", "")),
        )
    elif code == 30:
        cmd = get_max_offset_request(e["topic"], int(e["queueId"]))
    elif code == 33:
        cmd = view_message_request(int(e["offset"]))
    elif code == 34:
        hb = json.loads(body)
        cmd = heartbeat_request(
            hb["clientID"],
            [p["groupName"] for p in hb["producerDataSet"]],
            [c["groupName"] for c in hb["consumerDataSet"]],
        )
    elif code == 36:
        cmd = consumer_send_msg_back_request(
            e["group"],
            int(e["offset"]),
            delay_level=int(e["delayLevel"]),
            origin_msg_id=e["originMsgId"],
            origin_topic=e["originTopic"],
            unit_mode=e["unitMode"] == "true",
            max_reconsume_times=int(e["maxReconsumeTimes"]),
        )
    elif code == 37:
        cmd = end_transaction_request(
            e["producerGroup"],
            int(e["tranStateTableOffset"]),
            int(e["commitLogOffset"]),
            int(e["commitOrRollback"]),
            msg_id=e["msgId"],
            transaction_id=e["transactionId"],
            from_transaction_check=e["fromTransactionCheck"] == "true",
            oneway=h["flag"] == 2,
        )
    else:
        raise AssertionError(f"no builder for request code {code}")
    return attrs.evolve(cmd, opaque=h["opaque"])


@pytest.mark.parametrize("row", REQUESTS, ids=lambda r: r["case"])
def test_typed_builders_reproduce_every_request(row: Row) -> None:
    assert encode_frame(build_request(row)).hex() == row["frame_hex"]


def test_builders_write_every_value_as_a_string() -> None:
    h = SendMessageHeader("PG", "T", 1, unit_mode=True, max_reconsume_times=3, broker_name="broker-a")
    v2 = send_message_request(h, b"x")
    assert (
        v2.ext["k"] == "true" and v2.ext["l"] == "3" and v2.ext["n"] == "broker-a" and v2.ext["m"] == "false"
    )
    assert list(v2.ext) == list("abcdefghijklmn")
    v1 = send_message_request(h, b"x", v2=False)
    assert v1.code == 10 and v1.ext["unitMode"] == "true" and v1.ext["maxReconsumeTimes"] == "3"
    assert v1.ext["bname"] == "broker-a"
    assert all(isinstance(v, str) for v in v1.ext.values())
    assert send_batch_request(h, [BatchMessage(b"a")]).ext["m"] == "true"
    two_way = end_transaction_request("PG", 1, 2, 8, msg_id="M", oneway=False)
    assert two_way.flag == 0 and "transactionId" not in two_way.ext
    assert end_transaction_request("PG", 1, 2, 12, msg_id="M").flag == 2
    assert query_message_request("T", "k", end_timestamp=5).get("_UNIQUE_KEY_QUERY") is None
    assert (
        query_message_request("T", "k", end_timestamp=5, unique_key=True).get("_UNIQUE_KEY_QUERY") == "true"
    )


def test_a_mapping_of_properties_is_encoded_without_a_trailing_separator() -> None:
    h = SendMessageHeader("PG", "T", 1, properties={"KEYS": "k", "WAIT": "true"})
    assert h.properties == "KEYS\x01k\x02WAIT\x01true"


# --- responses -------------------------------------------------------------------------------------------


def test_send_responses() -> None:
    ok = parse_send_response(cmd_of("send_message_ok"))
    assert (ok.code, ok.msg_id, ok.queue_id, ok.queue_offset) == (0, "7F00000100002A9F0000000000000000", 0, 0)
    assert (ok.region, ok.trace_on, ok.transaction_id, ok.ok) == ("DefaultRegion", True, None, True)
    v2 = parse_send_response(cmd_of("send_message_v2_ok"))
    assert (v2.queue_offset, v2.commit_log_offsets) == (1, (192,))
    delayed = parse_send_response(cmd_of("send_delay_level_2"))
    assert (delayed.queue_id, delayed.queue_offset, delayed.commit_log_offsets) == (0, 0, (384,))
    batch = parse_send_response(cmd_of("send_batch_3"))
    assert (
        batch.commit_log_offsets == (634, 839, 1044) and batch.queue_offset == 0 and len(batch.msg_ids) == 3
    )
    bad_queue = parse_send_response(cmd_of("send_queue_id_out_of_range"))
    assert (bad_queue.code, bad_queue.msg_id, bad_queue.queue_id, bad_queue.ok) == (1, None, None, False)
    assert bad_queue.remark is not None and bad_queue.remark.startswith("request queueId[9] is illegal")
    forbidden = parse_send_response(cmd_of("send_forbidden_system_topic"))
    assert (forbidden.code, forbidden.remark) == (
        16,
        "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden.",
    )


def test_pull_responses() -> None:
    found = parse_pull_response(cmd_of("pull_found_two"))
    assert (found.code, found.remark, found.found) == (0, "FOUND", True)
    assert (found.next_begin_offset, found.min_offset, found.max_offset, found.suggest_which_broker_id) == (
        2,
        0,
        2,
        0,
    )
    assert [r.body for r in found.records] == [b"hello-v1", b"hello-v2"]
    before = parse_pull_response(cmd_of("pull_before_due"))
    assert (before.code, before.remark, before.next_begin_offset, before.records) == (
        19,
        "NO_MESSAGE_IN_QUEUE",
        0,
        (),
    )
    unknown = parse_pull_response(cmd_of("pull_unknown_topic"))
    assert (unknown.code, unknown.next_begin_offset, unknown.found) == (17, None, False)
    assert parse_pull_response(cmd_of("pull_queue_id_out_of_range")).code == 1
    assert len(parse_pull_response(cmd_of("pull_batch")).records) == 3


def test_other_responses() -> None:
    assert parse_max_offset_response(cmd_of("get_max_offset")).offset == 2
    view = parse_view_message_response(cmd_of("view_message_by_id_found"))
    assert view.found and view.record is not None and view.record.commit_log_offset == 192
    missing = parse_view_message_response(cmd_of("view_message_by_id_not_found"))
    assert (missing.code, missing.record, missing.remark) == (
        1,
        None,
        "can not find message by the offset, 1099511627776",
    )
    query = parse_query_message_response(cmd_of("query_message_by_uniq_key"))
    assert (query.code, query.index_last_update_phyoffset, len(query.records)) == (0, 4192, 1)
    assert query.records[0].uniq_key == "883ADDB32F9845EDA766D89B5F934D28"
    none = parse_query_message_response(cmd_of("query_message_not_found"))
    assert (none.code, none.records, none.index_last_update_timestamp) == (22, (), 0)
    assert parse_reply(cmd_of("heart_beat_producer")).ok
    assert parse_reply(cmd_of("end_transaction_commit")) == parse_reply(cmd_of("consumer_send_msg_back"))
    assert parse_reply(cmd_of("end_transaction_rollback")).remark == "not set any response code"
    assert parse_reply(cmd_of("end_transaction_wrong_group")).remark == "The producer group wrong"


PARSERS: dict[int, Callable[[RemotingCommand], Any]] = {
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


@pytest.mark.parametrize("row", RESPONSES, ids=lambda r: r["case"])
def test_every_response_parses_with_the_parser_of_its_request(row: Row) -> None:
    request_code = BY[(row["case"], "request")]["header"]["code"]
    result = PARSERS[request_code](decode_frame(bytes.fromhex(row["frame_hex"])))
    assert result.code == row["header"]["code"]


def test_parsers_reject_a_request_frame() -> None:
    with pytest.raises(ProtocolError, match="not a response"):
        parse_send_response(cmd_of("send_message_ok", "request"))
    with pytest.raises(ProtocolError, match="not CHECK_TRANSACTION_STATE"):
        parse_check_transaction_request(cmd_of("send_message_ok"))


def test_parsers_reject_malformed_numbers() -> None:
    offsets = {"suggestWhichBrokerId": "0", "minOffset": "0", "maxOffset": "3", "nextBeginOffset": "12x"}
    bad = response_for(RemotingCommand(11), int(Code.PULL_NOT_FOUND), ext_fields=offsets)
    with pytest.raises(WireViolation, match="'nextBeginOffset' is not an integer") as caught:
        parse_pull_response(bad)
    assert caught.value.rule == "wire/pull-response" and '"nextBeginOffset":"12x"' in str(caught.value.frame)
    with pytest.raises(WireViolation, match="lacks extFields 'offset'") as caught:
        parse_max_offset_response(response_for(RemotingCommand(30), 0, ext_fields={}))
    assert caught.value.rule == "dispatch/max-offset"
    stored = {"msgId": "ABC", "queueId": "0", "queueOffset": "0"}
    with pytest.raises(WireViolation, match="not 32") as caught:
        parse_send_response(response_for(RemotingCommand(310), 0, ext_fields=stored))
    assert caught.value.rule == "wire/offset-msg-id"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"queueId": "0", "queueOffset": "0"}, "lacks msgId"),
        ({"msgId": "", "queueId": "0", "queueOffset": "0"}, "empty msgId"),
        ({"msgId": "0A00000100002A9F0000000000000000"}, "lacks queueId, queueOffset"),
    ],
)
def test_a_stored_send_must_name_its_record(fields: dict[str, str], message: str) -> None:
    """wire/send-headers: a send answered SUCCESS names msgId, queueId and queueOffset; the violation
    carries the frame as received."""
    with pytest.raises(WireViolation, match=message) as caught:
        parse_send_response(response_for(RemotingCommand(310), 0, ext_fields=fields))
    assert caught.value.rule == "wire/send-headers"
    assert caught.value.frame is not None and caught.value.frame.startswith('{"code":0,"flag":1')
    # A refusal names no record: nothing is required of it.
    refused = parse_send_response(response_for(RemotingCommand(310), int(Code.SYSTEM_ERROR)))
    assert refused.msg_id is None


def test_a_pull_found_must_carry_records_and_offsets() -> None:
    with pytest.raises(WireViolation, match="lacks suggestWhichBrokerId, nextBeginOffset") as caught:
        parse_pull_response(response_for(RemotingCommand(11), int(Code.PULL_NOT_FOUND)))
    assert caught.value.rule == "wire/pull-response"
    offsets = {"suggestWhichBrokerId": "0", "minOffset": "0", "maxOffset": "3", "nextBeginOffset": "1"}
    with pytest.raises(WireViolation, match="no records in its body"):
        parse_pull_response(response_for(RemotingCommand(11), 0, ext_fields=offsets))
    with pytest.raises(WireViolation) as caught:
        parse_pull_response(response_for(RemotingCommand(11), 0, ext_fields=offsets, body=b"\x00" * 10))
    assert caught.value.rule == "wire/record-layout" and "body of 10 bytes" in str(caught.value.frame)
    # An error code carries nothing to check.
    assert parse_pull_response(response_for(RemotingCommand(11), int(Code.SYSTEM_ERROR))).records == ()


def test_describe_frame_shows_the_header_and_the_start_of_the_body() -> None:
    cmd = response_for(RemotingCommand(11), 0, ext_fields={"a": "1"}, body=bytes(range(60)))
    shown = describe_frame(cmd, body_bytes=4)
    assert shown == '{"code":0,"flag":1,"opaque":0,"extFields":{"a":"1"}} + body of 60 bytes: 00010203…'
    assert describe_frame(RemotingCommand(34, remark="x")).endswith("(no body)")


# --- the broker's own request and the answer to it --------------------------------------------------------


def test_check_transaction_state_parses_and_its_answer_is_the_recorded_end_transaction() -> None:
    raw = cmd_of("check_transaction_state", "broker-request")
    assert raw.is_oneway and not raw.is_response
    check = parse_check_transaction_request(raw)
    assert (check.opaque, check.tran_state_table_offset, check.commit_log_offset) == (105, 4, 4513)
    assert check.offset_msg_id == "7F00000100002A9F00000000000011A1"
    assert parse_offset_msg_id(check.offset_msg_id)[2] == check.commit_log_offset
    assert check.msg_id == check.transaction_id == check.record.uniq_key == "F88761E77BBD41D9987E5D28DCFA2FE1"
    rec = check.record
    assert (rec.topic, rec.queue_offset, rec.commit_log_offset, rec.body) == (
        "WireTxTopic",
        4,
        4513,
        b"tx-checked",
    )
    assert rec.properties["TRANSACTION_CHECK_TIMES"] == "1" and check.producer_group == "PG_wire_tx"
    assert check.topic is None
    answer = end_transaction_request(
        check.producer_group,
        check.tran_state_table_offset,
        check.commit_log_offset,
        8,
        msg_id=check.msg_id,
        transaction_id=check.transaction_id,
        from_transaction_check=True,
    )
    assert encode_frame(attrs.evolve(answer, opaque=46)) == frame("end_transaction_from_check", "request")
    rebuilt = check_transaction_state_request(
        rec,
        tran_state_table_offset=4,
        commit_log_offset=4513,
        msg_id=check.msg_id,
        transaction_id=check.transaction_id,
        offset_msg_id=check.offset_msg_id,
        opaque=105,
    )
    assert encode_frame(rebuilt) == frame("check_transaction_state", "broker-request")


# --- stored records --------------------------------------------------------------------------------------

_SUMMARY = re.compile(
    r"topic=(\S+) queueId=(\d+) queueOffset=(\d+) commitLogOffset=(\d+) sysFlag=(\d+) "
    r"reconsumeTimes=(\d+) preparedTransactionOffset=(\d+) body=\"([^\"]*)\" properties=(\{[^}]*\})"
)
RECORD_ROWS = [
    r for r in ROWS if "stored record" in r.get("notes", "") or "message(s) encoded" in r.get("notes", "")
]


def test_the_record_rows_are_the_ones_the_readme_names() -> None:
    assert {r["case"] for r in RECORD_ROWS} == {
        "pull_found_two",
        "view_message_schedule_copy",
        "pull_batch",
        "pull_committed",
        "pull_dlq",
        "pull_after_due",
        "pull_retry",
        "view_message_by_id_found",
        "query_message_by_uniq_key",
        "check_transaction_state",
        "pull_committed_after_check",
    }


@pytest.mark.parametrize("row", RECORD_ROWS, ids=lambda r: r["case"])
def test_records_match_the_recorded_summaries_and_re_encode_byte_for_byte(row: Row) -> None:
    body = bytes.fromhex(row["body_hex"])
    records = decode_records(body, verify_crc=True)
    summaries = _SUMMARY.findall(row["notes"])
    assert len(records) == len(summaries) > 0
    assert row["notes"].count("stored record") + row["notes"].count("message(s) encoded") == 1
    assert f"{len(records)} " in row["notes"]
    pos = 0
    for rec, s in zip(records, summaries, strict=True):
        topic, qid, qoff, clo, sys_flag, reconsume, prepared, text, props_json = s
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
        assert rec.body.decode() == text
        assert dict(rec.properties) == json.loads(props_json)
        assert rec.magic == MAGIC and rec.body_crc == zlib.crc32(rec.body) & 0x7FFFFFFF
        assert rec.born_host[0] == rec.store_host[0] == "127.0.0.1" and rec.store_host[1] == 10911
        assert rec.msg_id == offset_msg_id("127.0.0.1", 10911, rec.commit_log_offset)
        assert rec.total_size == 91 + len(rec.body) + len(rec.topic) + len(rec.properties_string.encode())
        assert encode_record(rec) == body[pos : pos + rec.total_size]
        pos += rec.total_size
    assert pos == len(body)


def test_a_batch_record_stores_wait_twice_and_the_decoded_map_once() -> None:
    rec = parse_pull_response(cmd_of("pull_batch")).records[0]
    assert rec.properties_string.count("WAIT\x01true") == 2
    assert dict(rec.properties)["WAIT"] == "true"
    assert rec.properties_string.startswith("KEYS\x01bk0\x02UNIQ_KEY\x01")
    assert rec.properties_string.endswith("\x02CLUSTER\x01DefaultCluster\x02WAIT\x01true")
    # From the reference model's Record, the stored string has to be given to reproduce the bytes.
    assert encode_record(
        record_from_reference(rec.to_reference(), properties_string=rec.properties_string)
    ) == (encode_record(rec))
    assert len(encode_record(record_from_reference(rec.to_reference()))) == rec.total_size - len(
        "\x02WAIT\x01true"
    )


def test_offsets_agree_across_exchanges() -> None:
    """Send responses, later requests and stored properties point at the same commit-log offsets."""
    two = parse_pull_response(cmd_of("pull_found_two")).records
    assert [r.msg_id for r in two] == [
        parse_send_response(cmd_of("send_message_ok")).msg_id,
        parse_send_response(cmd_of("send_message_v2_ok")).msg_id,
    ]
    batch = parse_pull_response(cmd_of("pull_batch")).records
    assert (
        tuple(r.commit_log_offset for r in batch)
        == parse_send_response(cmd_of("send_batch_3")).commit_log_offsets
    )
    schedule_copy = parse_view_message_response(cmd_of("view_message_schedule_copy")).record
    assert schedule_copy is not None
    assert schedule_copy.msg_id == parse_send_response(cmd_of("send_delay_level_2")).msg_id
    half = parse_send_response(cmd_of("send_half_message"))
    commit = cmd_of("end_transaction_commit", "request")
    assert commit.get("commitLogOffset") == str(half.commit_log_offsets[0])  # facts §10: last 16 hex digits
    assert commit.get("tranStateTableOffset") == str(half.queue_offset)
    committed = parse_pull_response(cmd_of("pull_committed")).records[0]
    assert committed.prepared_transaction_offset == half.commit_log_offsets[0] and committed.tran_type == 8
    dlq = parse_pull_response(cmd_of("pull_dlq")).records[0]
    back_dlq = cmd_of("consumer_send_msg_back_dlq", "request")
    assert parse_offset_msg_id(dlq.properties["ORIGIN_MESSAGE_ID"])[2] == int(back_dlq.get("offset") or -1)
    retry = parse_pull_response(cmd_of("pull_retry")).records[0]
    back = cmd_of("consumer_send_msg_back", "request")
    assert parse_offset_msg_id(retry.properties["ORIGIN_MESSAGE_ID"])[2] == int(back.get("offset") or -1)
    after = parse_pull_response(cmd_of("pull_committed_after_check")).records[0]
    check = parse_check_transaction_request(cmd_of("check_transaction_state", "broker-request"))
    assert after.prepared_transaction_offset == check.commit_log_offset


def test_to_reference_keeps_every_field() -> None:
    rec = parse_pull_response(cmd_of("pull_retry")).records[0]
    ref = rec.to_reference()
    assert (ref.size, ref.topic, ref.reconsume_times, ref.msg_id, ref.uniq_key) == (
        rec.total_size,
        rec.topic,
        1,
        rec.msg_id,
        rec.uniq_key,
    )
    assert reference_offset_msg_id(rec.store_host, rec.commit_log_offset) == rec.msg_id
    assert record_from_reference(ref, properties_string=rec.properties_string) == rec
    assert record_from_reference(ref).properties == rec.properties


# --- batch and heart-beat bodies ----------------------------------------------------------------------------


def test_the_recorded_batch_body() -> None:
    body = bytes.fromhex(BY[("send_batch_3", "request")]["body_hex"])
    messages = decode_batch_body(body)
    assert [m.body for m in messages] == [b"batch-0", b"batch-1", b"batch-2"]
    assert [m.props["KEYS"] for m in messages] == ["bk0", "bk1", "bk2"]
    assert all(m.flag == 0 and m.properties.endswith(PROPERTY_SEPARATOR) for m in messages)
    assert encode_batch_body(messages) == body
    assert struct.unpack_from(">iiiii", body) == (90, 0, 0, 0, 7)


def test_batch_body_errors() -> None:
    one = encode_batch_body([BatchMessage(b"abc", {"K": "v"})])
    with pytest.raises(ProtocolError, match="TOTALSIZE 99 but its fields take"):
        decode_batch_body(struct.pack(">i", 99) + one[4:])
    with pytest.raises(ProtocolError, match="PROPERTIES needs"):
        decode_batch_body(one[:-1])


def test_the_recorded_heart_beat_body() -> None:
    recorded = bytes.fromhex(BY[("heart_beat_producer", "request")]["body_hex"])
    assert heartbeat_body("127.0.0.1@wire-vectors", ["PG_wire_tx"]) == recorded
    body = json.loads(heartbeat_body("c", [], [ConsumerData("CG", (("T", "a || b"),))]))
    (consumer,) = body["consumerDataSet"]
    assert list(body) == ["clientID", "consumerDataSet", "producerDataSet"]
    assert consumer["groupName"] == "CG" and consumer["consumeType"] == "CONSUME_PASSIVELY"
    (sub,) = consumer["subscriptionDataSet"]
    assert sub["tagsSet"] == ["a", "b"] and sub["codeSet"] == [97, 98] and sub["subString"] == "a || b"
    assert json.loads(heartbeat_body("c", [], ["CG"]))["consumerDataSet"][0]["subscriptionDataSet"] == []


# --- offset message ids ----------------------------------------------------------------------------------


def test_offset_msg_ids() -> None:
    assert parse_offset_msg_id("7F00000100002A9F0000000000000D9A") == ("127.0.0.1", 10911, 3482)
    assert offset_msg_id("127.0.0.1", 10911, 3482) == "7F00000100002A9F0000000000000D9A"
    assert parse_offset_msg_id("7f00000100002a9f0000000000000d9a") == ("127.0.0.1", 10911, 3482)
    v6 = offset_msg_id("::1", 10911, 5)
    assert len(v6) == 56 and parse_offset_msg_id(v6) == ("::1", 10911, 5)
    for bad, why in [
        ("ABC", "32"),
        ("Z" * 32, "not hex"),
        (" " + "0" * 31, "not hex"),
        ("0" * 33, "32"),
    ]:
        with pytest.raises(ProtocolError, match=why):
            parse_offset_msg_id(bad)
    with pytest.raises(ProtocolError, match="not an IP address"):
        offset_msg_id("localhost", 1, 1)
    with pytest.raises(ProtocolError, match="out of range"):
        offset_msg_id("127.0.0.1", 1, 1 << 63)


@given(st.ip_addresses(), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_offset_msg_ids_round_trip(ip: Any, port: int, offset: int) -> None:
    s = offset_msg_id(str(ip), port, offset)
    assert s == s.upper() and len(s) == (32 if ip.version == 4 else 56)
    assert parse_offset_msg_id(s) == (str(ip), port, offset)
    if ip.version == 4 and port >= 0 and offset >= 0:
        assert reference_offset_msg_id((str(ip), port), offset) == s


# --- JSON as fastjson writes it ------------------------------------------------------------------------------


def test_json_strings_are_escaped_as_fastjson_does() -> None:
    assert json_string("\x01\x02") == '"\\u0001\\u0002"'  # as in the recorded properties
    assert json_string('a"b\\c/') == '"a\\"b\\\\c/"'
    assert json_string("\b\t\n\f\r") == '"\\b\\t\\n\\f\\r"'
    assert json_string("\x0b\x1f\x7f\x9f") == '"\\u000B\\u001F\\u007F\\u009F"'  # upper-case hex digits
    assert json_string("\xa0é中\u2028\u2029😀") == '"\xa0é中\\u2028\\u2029😀"'
    assert json_string("\ud800") == '"\\uD800"'  # a lone surrogate survives (Java would write "?")
    lone = RemotingCommand(1, remark="\udfff", ext_fields={"\ud800": "x"})
    assert decode_frame(encode_frame(lone)) == lone
    header = encode_frame(RemotingCommand(0, remark="é\n", flag=1))[8:]
    assert b'"remark":"\xc3\xa9\\n"' in header  # non-ASCII as raw UTF-8
    assert json.loads(header)["remark"] == "é\n"


# --- the ROCKETMQ binary header (serialize type 1) -----------------------------------------------------


def test_the_binary_header_layout() -> None:
    cmd = RemotingCommand(
        310, "PYTHON", 401, 7, 0, "hi", {"a": "b", "ké": "v"}, b"body", serialize_type_current_rpc="ROCKETMQ"
    )
    raw = encode_frame(cmd)
    ext = struct.pack(">h", 1) + b"a" + struct.pack(">i", 1) + b"b" + struct.pack(">h", 3) + "ké".encode()
    ext += struct.pack(">i", 1) + b"v"
    header = struct.pack(">hbhiii", 310, 3, 401, 7, 0, 2) + b"hi" + struct.pack(">i", len(ext)) + ext
    assert raw == struct.pack(">ii", 4 + len(header) + 4, 1 << 24 | len(header)) + header + b"body"
    assert decode_frame(raw) == cmd
    empty = RemotingCommand(1, remark="", ext_fields={}, serialize_type_current_rpc="ROCKETMQ")
    assert decode_frame(encode_frame(empty)) == attrs.evolve(empty, remark=None, ext_fields=None)


def test_binary_header_limits() -> None:
    with pytest.raises(ProtocolError, match="int16"):
        encode_frame(RemotingCommand(40000, serialize_type_current_rpc="ROCKETMQ"))
    with pytest.raises(ProtocolError, match="no ROCKETMQ header code"):
        encode_frame(RemotingCommand(1, language="COBOL", serialize_type_current_rpc="ROCKETMQ"))
    with pytest.raises(ProtocolError, match="neither JSON nor ROCKETMQ"):
        encode_frame(RemotingCommand(1, serialize_type_current_rpc="XML"))


# --- malformed input: ProtocolError naming the problem ---------------------------------------------------


def _json_frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), kind << 24 | len(header)) + header + body


MALFORMED_FRAMES = [
    (b"\x00\x00", "shorter than its 8-byte prefix"),
    (struct.pack(">ii", 100, 2) + b"{}", "says 100 bytes follow, 6 do"),
    (struct.pack(">ii", -5, 0), "less than the 4 bytes"),
    (struct.pack(">ii", MAX_FRAME, 0), "exceeds the maximum frame size"),
    (struct.pack(">ii", 6, 50) + b"{}", "header length 50 exceeds"),
    (_json_frame(b"{}", kind=2), "unknown serialize type 2"),
    (_json_frame(b"{nope"), "not JSON"),
    (_json_frame(b"[1]"), "not a JSON object but list"),
    (_json_frame(b"\xff\xfe"), "not UTF-8"),
    (_json_frame(b"[" * 100_000), "nested too deeply"),
    (_json_frame(b'{"code":1' + b"0" * 5000 + b"}"), "not JSON"),
    (_json_frame(b'{"flag":1}'), "lacks 'code'"),
    (_json_frame(b'{"code":"10"}'), "'code' is not an integer"),
    (_json_frame(b'{"code":true}'), "'code' is not an integer"),
    (_json_frame(b'{"code":1.5}'), "'code' is not an integer"),
    (_json_frame(b'{"code":4294967296}'), "out of range"),
    (_json_frame(b'{"code":1,"extFields":[]}'), "extFields is not a JSON object"),
    (_json_frame(b'{"code":1,"extFields":{"a":1}}'), "extFields value of 'a' is not a string"),
    (_json_frame(b'{"code":1,"remark":5}'), "'remark' is not a string"),
    (_json_frame(b'{"code":1,"language":null,"serializeTypeCurrentRPC":"ROCKETMQ"}'), "in a JSON"),
    (_json_frame(b"\x00", kind=1), "ROCKETMQ header: code needs 2 bytes"),
    (
        _json_frame(struct.pack(">hbhiii", 1, 99, 1, 1, 0, 0) + struct.pack(">i", 0), kind=1),
        "unknown language code 99",
    ),
    (_json_frame(struct.pack(">hbhiii", 1, 0, 1, 1, 0, -3), kind=1), "negative length -3"),
    (
        _json_frame(struct.pack(">hbhiii", 1, 0, 1, 1, 0, 1) + b"\xff" + struct.pack(">i", 0), kind=1),
        "not UTF-8",
    ),
    (
        _json_frame(struct.pack(">hbhiiii", 1, 0, 1, 1, 0, 0, 7) + struct.pack(">h", 9) + b"abcde", kind=1),
        "key needs 9 bytes",
    ),
    (_json_frame(struct.pack(">hbhiiii", 1, 0, 1, 1, 0, 0, 0) + b"!", kind=1), "1 bytes after extFields"),
]


@pytest.mark.parametrize(("data", "message"), MALFORMED_FRAMES, ids=lambda x: "")
def test_malformed_frames_name_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(message)):
        decode_frame(data)
    dec = FrameDecoder()  # the stream decoder fails too: at once, or at the end of the stream
    with pytest.raises(ProtocolError):
        dec.feed(data)
        dec.finish()


def test_an_oversized_length_is_rejected_before_its_bytes_arrive() -> None:
    dec = FrameDecoder()
    with pytest.raises(ProtocolError, match="exceeds the maximum frame size"):
        dec.feed(struct.pack(">i", 0x7FFFFFFF))
    assert FrameDecoder().feed(struct.pack(">i", MAX_FRAME - 4)) == []  # the largest allowed: wait for it
    with pytest.raises(ProtocolError, match="exceeds the maximum frame size"):
        encode_frame(RemotingCommand(1, body=b"\0" * MAX_FRAME))


def _a_record(**kw: Any) -> bytes:
    return encode_record(make_record(topic="T", body=b"hello", properties={"K": "v"}, **kw))


def _patch(raw: bytes, at: int, fmt: str, value: int) -> bytes:
    b = bytearray(raw)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


# The IPv4 layout of _a_record(): SYSFLAG at 36, BODYLEN at 84, body "hello" at 88, TOPICLEN at 93, topic
# "T" at 94, PROPERTIESLEN at 95, "K\x01v" at 97; 100 bytes.
MALFORMED_RECORDS = [
    (_a_record()[:50], "TOTALSIZE 100 exceeds the 50 bytes left"),
    (_patch(_a_record(), 0, ">i", 10), "TOTALSIZE 10 is less than"),
    (_patch(_a_record(), 4, ">i", 0x1234), "magic 0x00001234"),
    (_patch(_a_record(), 84, ">i", 99), "BODY needs 99 bytes at byte 88, only 12 left"),
    (_patch(_a_record(), 84, ">i", -1), "BODY has negative length -1"),
    (_patch(_a_record(), 93, ">b", -2), "TOPIC has negative length -2"),
    (_patch(_a_record(), 95, ">h", 2), "fields end at byte 99, TOTALSIZE says 100"),
    (_patch(_a_record(), 93, ">b", 5), "PROPERTIESLEN needs 2 bytes"),
    (_a_record() + b"\0\0", "TOTALSIZE needs 4 bytes at byte 100"),
    (_patch(_a_record(), 94, ">B", 0xFF), "TOPIC is not UTF-8"),
    (_patch(_a_record(), 8, ">i", 1), "BODYCRC 1 does not match"),
    (_patch(_a_record(), 36, ">i", 1), "does not inflate"),
    (_patch(_a_record(), 36, ">i", 1 | 1 << 8), "compression type 1"),
    (_patch(_a_record(), 36, ">i", 0x10), "BODY needs 55247222 bytes"),  # a 20-byte IPv6 born host
]


@pytest.mark.parametrize(("data", "message"), MALFORMED_RECORDS, ids=lambda x: "")
def test_malformed_records_name_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(message)):
        decode_records(data, verify_crc=True)


def test_the_unpatched_record_decodes() -> None:
    assert [r.body for r in decode_records(_a_record(), verify_crc=True)] == [b"hello"]
    assert decode_record(_a_record(sys_flag=1)).body == b"hello"
    with pytest.raises(ProtocolError, match="expected one stored record, found 2"):
        decode_record(_a_record() * 2)


def test_a_truncated_or_bomb_compressed_body_is_rejected() -> None:
    truncated = make_record(topic="T", body=b"x" * 1000, sys_flag=1)
    stored = zlib.compress(b"x" * 1000)[:-4]
    raw = encode_record(attrs.evolve(truncated, sys_flag=0, body=stored))
    with pytest.raises(ProtocolError, match="truncated"):
        decode_records(_patch(raw, 36, ">i", 1))
    bomb = zlib.compress(b"\0" * (MAX_FRAME + 1), 9)
    raw = encode_record(make_record(topic="T", body=bomb))
    with pytest.raises(ProtocolError, match="inflates to more than"):
        decode_records(_patch(raw, 36, ">i", 1))


def test_record_encoding_limits() -> None:
    with pytest.raises(ProtocolError, match="longer than 127"):
        encode_record(make_record(topic="T" * 128, body=b""))
    assert (
        decode_record(encode_record(make_record(topic="T" * 128, body=b"", magic=MAGIC_V2))).topic
        == "T" * 128
    )
    with pytest.raises(ProtocolError, match="properties of 40000 bytes"):
        encode_record(make_record(topic="T", body=b"", properties="x" * 40000))
    rec = make_record(topic="T", body=b"")
    with pytest.raises(ProtocolError, match="is IPv4 but the sysFlag says IPv6"):
        encode_record(attrs.evolve(rec, sys_flag=0x10))
    with pytest.raises(ProtocolError, match="out of range"):
        encode_record(attrs.evolve(rec, queue_id=1 << 40))


# --- round trips (Hypothesis) ------------------------------------------------------------------------------

SEPS = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)
prop_text = st.text(min_size=1, max_size=20).filter(lambda s: not any(c in s for c in SEPS))
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
hosts = st.tuples(st.ip_addresses().map(str), int32)


@st.composite
def records(draw: st.DrawFn) -> WireRecord:
    magic = draw(st.sampled_from([MAGIC, MAGIC_V2]))
    limit = 127 if magic == MAGIC else 300
    return make_record(
        topic=draw(st.text(max_size=limit).filter(lambda t: len(t.encode()) <= limit)),
        body=draw(st.binary(max_size=300)),
        properties=draw(st.one_of(st.dictionaries(prop_text, prop_text, max_size=5), st.text(max_size=50))),
        queue_id=draw(int32),
        flag=draw(int32),
        queue_offset=draw(int64),
        commit_log_offset=draw(int64),
        sys_flag=draw(st.integers(0, 0xFF) | st.integers(0, 0xFF).map(lambda f: f | 0x301)),
        born_timestamp=draw(int64),
        born_host=draw(hosts),
        store_timestamp=draw(int64),
        store_host=draw(hosts),
        reconsume_times=draw(int32),
        prepared_transaction_offset=draw(int64),
        magic=magic,
    )


@settings(max_examples=100, deadline=None)
@given(st.lists(records(), min_size=1, max_size=3))
def test_records_round_trip(recs: list[WireRecord]) -> None:
    raw = b"".join(encode_record(r) for r in recs)
    assert decode_records(raw, verify_crc=True) == recs
    assert [len(encode_record(r)) for r in recs] == [r.total_size for r in recs]


@settings(max_examples=50, deadline=None)
@given(records())
def test_record_sizes_and_host_flags(rec: WireRecord) -> None:
    v6 = (":" in rec.born_host[0], ":" in rec.store_host[0])
    assert (bool(rec.sys_flag & 0x10), bool(rec.sys_flag & 0x20)) == v6
    if rec.magic == MAGIC and not any(v6) and not rec.sys_flag & 1:
        assert rec.total_size == 91 + len(rec.body) + len(rec.topic.encode()) + len(
            rec.properties_string.encode()
        )


@given(st.lists(st.builds(BatchMessage, st.binary(max_size=50), st.text(max_size=30), int32), max_size=5))
def test_batch_bodies_round_trip(messages: list[BatchMessage]) -> None:
    assert decode_batch_body(encode_batch_body(messages)) == messages


ext_pairs = st.dictionaries(st.text(max_size=12), st.text(max_size=30), max_size=6)


@st.composite
def commands(draw: st.DrawFn, binary: bool) -> RemotingCommand:
    num = st.integers(-(2**15), 2**15 - 1) if binary else int32
    return RemotingCommand(
        code=draw(num),
        language=draw(st.sampled_from(sorted(LANGUAGE_CODES)) if binary else st.text(max_size=10)),
        version=draw(num),
        opaque=draw(int32),
        flag=draw(int32),
        remark=draw(st.none() | st.text(max_size=40)),
        ext_fields=draw(st.none() | ext_pairs),
        body=draw(st.binary(max_size=64)),
        serialize_type_current_rpc="ROCKETMQ" if binary else "JSON",
    )


@settings(max_examples=200)
@given(commands(binary=False))
def test_json_frames_round_trip(cmd: RemotingCommand) -> None:
    raw = encode_frame(cmd)
    assert decode_frame(raw) == cmd
    assert FrameDecoder().feed(raw + raw) == [cmd, cmd]


@settings(max_examples=200)
@given(commands(binary=True))
def test_binary_frames_round_trip(cmd: RemotingCommand) -> None:
    expected = attrs.evolve(cmd, remark=cmd.remark or None, ext_fields=cmd.ext_fields or None)
    assert decode_frame(encode_frame(cmd)) == expected


# --- the model's records are as long as the broker's -----------------------------------------------------


def test_model_record_sizes_match_the_broker() -> None:
    """The model's commit-log offsets are byte offsets: its records are as long as 4.9.4's."""
    from rmqspec.reference.batch import Batch, BatchEntry
    from rmqspec.reference.model import Model
    from rmqspec.reference.put import Message
    from rmqspec.reference.records import props

    recorded = parse_pull_response(cmd_of("pull_found_two")).records
    batch = parse_pull_response(cmd_of("pull_batch")).records
    model = Model()
    state = model.initial()
    for r in recorded:
        p = {k: v for k, v in r.properties.items() if k != "CLUSTER"}
        state, sent = model.send(state, Message(r.topic, r.body, props(p, WAIT="true")), 0)
        assert sent.record.size == r.total_size  # type: ignore[union-attr]
    entries = tuple(
        BatchEntry(r.body, props({k: v for k, v in r.properties.items() if k != "CLUSTER"})) for r in batch
    )
    state, out = model.send_batch(state, Batch(batch[0].topic, entries, properties=props(WAIT="true")), 0)
    assert [r.size for r in out.records] == [r.total_size for r in batch]  # type: ignore[union-attr]


# --- route (name server) ------------------------------------------------------------------------------------


def test_route_data_with_bare_integer_keys() -> None:
    body = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"}],"filterServerTable":{},"orderTopicConf":"x{0:1,2:3}",'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    route = parse_route(body)
    assert route.broker_datas[0].broker_addrs == ((0, "127.0.0.1:10911"), (1, "127.0.0.1:10921"))
    assert route.order_topic_conf == "x{0:1,2:3}"  # inside a string: left alone
    q = route.queue_datas[0]
    assert (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) == ("broker-a", 4, 4, 6)
    with pytest.raises(ProtocolError, match=r"queueData\.perm is not an integer"):
        parse_route(b'{"queueDatas":[{"brokerName":"b","perm":"6","readQueueNums":4,"writeQueueNums":4}]}')
    with pytest.raises(ProtocolError, match="route body is not a JSON object"):
        parse_route(b"[]")

"""What the served model says on the wire where the broker's remoting code decides, written from the source.

RemotingCommand.decodeCommandCustomHeader (4.9.0–4.9.8, 5.5.0) logs and skips a header field it cannot
read, leaving it null, then calls checkFields; EndTransactionRequestHeader.checkFields refuses a type that
is not 0, 8 or 12; NettyRemotingAbstract answers an exception with SYSTEM_ERROR (a two-way request).
"""

from __future__ import annotations

import pytest

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.adapters.remoting.codec import RemotingCommand, encode_frame
from rmqspec.adapters.remoting.server import Server
from rmqspec.conformance.wirecheck import check_exchange
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.constants import Code
from rmqspec.reference.model import Model

PEER = ("127.0.0.1", 50000)


def _server() -> Server:
    return Server(WallClockTarget(Model(BrokerConfig())))


def _end_tx(server: Server, **fields: str) -> RemotingCommand | None:
    cmd = RemotingCommand(37, opaque=9, ext_fields=fields)
    return server.handle(cmd, PEER, None, set())  # type: ignore[arg-type]  # no heartbeat: no writer


def _half(server: Server) -> tuple[str, str]:
    """A half message sent; its (queue offset, commit-log offset)."""
    send = {
        "a": "PG",
        "b": "TxWireT",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "4",
        "g": "0",
        "h": "0",
        "i": "TRAN_MSG\x01true\x02PGROUP\x01PG\x02UNIQ_KEY\x01" + "A" * 32 + "\x02",
    }
    answer = server.handle(RemotingCommand(310, opaque=1, ext_fields=send, body=b"t"), PEER, None, set())  # type: ignore[arg-type]
    assert answer is not None and answer.code == Code.SUCCESS
    return answer.ext["queueOffset"], str(int(answer.ext["msgId"][-16:], 16))


@pytest.mark.parametrize("kind", ["7", "4", "-8"])
def test_a_type_other_than_0_8_12_is_a_system_error(kind: str) -> None:
    """EndTransactionRequestHeader.checkFields (4.9.8 ~L46): RemotingCommandException("commitOrRollback
    field wrong"), thrown while decoding: SYSTEM_ERROR, not silence (the spec said no answer)."""
    answer = _end_tx(
        _server(), producerGroup="PG", tranStateTableOffset="0", commitLogOffset="0", commitOrRollback=kind
    )
    assert answer is not None and answer.code == Code.SYSTEM_ERROR
    assert answer.remark is not None and answer.remark.endswith("commitOrRollback field wrong")


@pytest.mark.parametrize("kind", ["0", "00", "+0"])
def test_unknow_in_any_spelling_integer_parse_int_reads_is_not_answered(kind: str) -> None:
    assert _end_tx(_server(), producerGroup="PG", commitOrRollback=kind) is None


@pytest.mark.parametrize("kind", [None, " 8", "8_0", "x"])
def test_a_type_java_cannot_read_is_null_and_unboxing_it_throws(kind: str | None) -> None:
    """decodeCommandCustomHeader swallows the NumberFormatException (or the missing field); checkFields
    then compares a null Integer: NullPointerException, SYSTEM_ERROR."""
    fields = {"producerGroup": "PG", "tranStateTableOffset": "0", "commitLogOffset": "0"}
    if kind is not None:
        fields["commitOrRollback"] = kind
    answer = _end_tx(_server(), **fields)
    assert answer is not None and answer.code == Code.SYSTEM_ERROR


def test_null_fields_of_a_commit_fail_where_the_broker_reads_them() -> None:
    """processRequest (4.9.8): a null commitLogOffset is unboxed by the lookup; a null producerGroup
    equals no PGROUP; a null tranStateTableOffset is unboxed in checkPrepareMessage; msgId, although
    @CFNotNull, is only logged: its absence changes nothing."""
    server = _server()
    table, clo = _half(server)
    answer = _end_tx(server, producerGroup="PG", tranStateTableOffset=table, commitOrRollback="8")
    assert answer is not None and (answer.code, answer.remark) == (
        Code.SYSTEM_ERROR,
        "java.lang.NullPointerException",
    )
    answer = _end_tx(server, tranStateTableOffset=table, commitLogOffset=clo, commitOrRollback="8")
    assert answer is not None and (answer.code, answer.remark) == (
        Code.SYSTEM_ERROR,
        "The producer group wrong",
    )
    answer = _end_tx(server, producerGroup="PG", commitLogOffset=clo, commitOrRollback="8")
    assert answer is not None and (answer.code, answer.remark) == (
        Code.SYSTEM_ERROR,
        "java.lang.NullPointerException",
    )
    answer = _end_tx(
        server, producerGroup="PG", tranStateTableOffset=table, commitLogOffset=clo, commitOrRollback="8"
    )
    assert answer is not None and answer.code == Code.SUCCESS


@pytest.mark.parametrize(("field", "value"), [("e", " 0"), ("g", "1_000"), ("e", "99999999999")])
def test_header_numbers_are_read_as_java_reads_them(field: str, value: str) -> None:
    """SendMessageRequestHeaderV2.decode (4.9.4+ FastCodesHeader): Integer.parseInt / Long.parseLong throw
    on these; Python's int() accepts the first two."""
    server = _server()
    send = {
        "a": "PG",
        "b": "T",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "0",
        "h": "0",
        field: value,
    }
    answer = server.handle(RemotingCommand(310, opaque=1, ext_fields=send, body=b"x"), PEER, None, set())  # type: ignore[arg-type]
    assert answer is not None and answer.code == Code.SYSTEM_ERROR


def test_wirecheck_expects_an_answer_to_a_bad_type_and_silence_for_unknow_spelled_any_way() -> None:
    def req(kind: str) -> bytes:
        ext = {
            "producerGroup": "PG",
            "tranStateTableOffset": "0",
            "commitLogOffset": "0",
            "commitOrRollback": kind,
        }
        return encode_frame(RemotingCommand(37, opaque=3, ext_fields=ext))

    def resp(code: int) -> bytes:
        return encode_frame(RemotingCommand(code, opaque=3, flag=1))

    assert check_exchange(req("00"), None) == []
    assert [f.rule for f in check_exchange(req("00"), resp(0))] == ["wire/end-transaction"]
    # wire/end-transaction: any type but UNKNOW sent two-way MUST be answered (a bad one SYSTEM_ERROR)
    assert [f.rule for f in check_exchange(req("7"), None)] == ["wire/end-transaction"]
    assert [f.rule for f in check_exchange(req("8"), None)] == ["wire/end-transaction"]
    assert check_exchange(req("7"), resp(1)) == []
    assert [f.rule for f in check_exchange(req("7"), resp(0))] == ["wire/end-transaction"]

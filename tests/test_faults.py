"""The broken-broker zoo (conformance/faults.py): each wire fault rewrites the frames it says it does, a
matrix row judges a run by its first root cause, and the command line never crashes on a broker that
answers wrongly or not at all: ``rmqspec faults``, ``rmqspec serve --fault``, and exit code 3 with the
report written when a broker stops answering.

The slow tests run the whole suite over TCP against every fault (the matrix ``rmqspec faults`` prints)
and check that each names its rule as the first root cause, with at most ``MAX_ROOT_CAUSES``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.adapters.remoting.codec import (
    RemotingCommand,
    decode_frame,
    decode_records,
    encode_frame,
    encode_record,
    record_from_reference,
    response_for,
)
from rmqspec.adapters.remoting.profile import load_profile
from rmqspec.adapters.remoting.server import BackgroundServer
from rmqspec.adapters.remoting.target import RemotingTarget
from rmqspec.cli import app
from rmqspec.conform import FaultRunner, fault_matrix
from rmqspec.conformance import faults as zoo
from rmqspec.conformance.contract import ProtocolFailure
from rmqspec.conformance.faults import FAULTS, MAX_ROOT_CAUSES, FaultRow, crashed, judge
from rmqspec.conformance.scenario_run import ScenarioResult, StepFailure
from rmqspec.conformance.scenarios import catalogue
from rmqspec.conformance.specdoc import load_spec
from rmqspec.conformance.suite import Report, Showing, shared_symptoms
from rmqspec.conformance.wirecheck import WireFinding
from rmqspec.conformance.wireprobe import FaultProxy, ProbeResult, WireFault
from rmqspec.reference.model import Model, Send
from rmqspec.reference.put import Message
from rmqspec.reference.records import props

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "short-levels.yaml"


# --- the zoo ----------------------------------------------------------------------------------------------


def test_the_zoo_has_at_least_ten_faults_each_expecting_a_rule_of_the_spec() -> None:
    ids = load_spec().ids
    assert len(FAULTS) >= 10
    for f in FAULTS.values():
        if f.expect == "fail":
            assert f.rule in ids and set(f.symptoms) <= ids, f.name
        else:
            assert f.expect == "unknown" and f.kind == "hang", f.name
    kinds = {f.kind for f in FAULTS.values()}
    assert {"protocol", "behaviour", "hang"} <= kinds


def test_an_unknown_fault_names_the_command_that_lists_them() -> None:
    with pytest.raises(KeyError, match="rmqspec faults --list"):
        zoo.fault("nope")


# --- the wire faults, frame by frame ----------------------------------------------------------------------


def _frame(cmd: RemotingCommand) -> bytes:
    return encode_frame(cmd)


def _cmd(frame: bytes | None) -> RemotingCommand:
    assert frame is not None
    return decode_frame(frame)


def _ext(frame: bytes | None) -> dict[str, str]:
    return dict(_cmd(frame).ext_fields or ())


def _wire(name: str) -> WireFault:
    """A fresh fault of ``name`` as one connection of its proxy gets it."""
    f = FAULTS[name].wire_fault()
    assert f is not None, name
    return f if isinstance(f, WireFault) else f()


SEND_EXT = {"producerGroup": "PG", "topic": "T", "queueId": "0", "sysFlag": "0", "properties": ""}


def test_upper_camel_only_drops_the_keys_rocketmq_names_and_reads_upper_camel_ones() -> None:
    fault = _wire("header-keys-upper-camel")
    onward, back = fault.to_broker(_frame(RemotingCommand(10, opaque=1, ext_fields=SEND_EXT)))
    assert back is None and _ext(onward) == {}
    upper = {"ProducerGroup": "PG", "Topic": "T", "A": "x"}
    onward, _ = fault.to_broker(_frame(RemotingCommand(10, opaque=2, ext_fields=upper)))
    assert _ext(onward) == {"producerGroup": "PG", "topic": "T", "a": "x"}
    answer = _frame(response_for(RemotingCommand(10, opaque=1), 0, ext_fields={"msgId": "X"}))
    assert fault.to_client(answer) == answer  # answers pass unchanged


def test_empty_msg_id_blanks_the_msg_id_of_answers_only() -> None:
    fault = _wire("send-msg-id-empty")
    ext = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "0"}
    answer = fault.to_client(_frame(response_for(RemotingCommand(310, opaque=4), 0, ext_fields=ext)))
    assert _ext(answer) == {**ext, "msgId": ""}
    request = _frame(RemotingCommand(310, opaque=4, ext_fields={"msgId": "A"}))
    assert fault.to_client(request) == request


def test_end_tx_never_answered_swallows_the_answer_to_a_two_way_end_transaction_only() -> None:
    fault = _wire("end-tx-never-answered")
    two_way = _frame(RemotingCommand(37, opaque=7, ext_fields={"commitOrRollback": "8"}))
    one_way = _frame(RemotingCommand(37, opaque=8, flag=2, ext_fields={"commitOrRollback": "8"}))
    assert fault.to_broker(two_way) == (two_way, None)  # the broker applies it
    assert fault.to_broker(one_way) == (one_way, None)
    assert fault.to_client(_frame(response_for(RemotingCommand(37, opaque=7), 0))) is None
    other = _frame(response_for(RemotingCommand(37, opaque=9), 0))  # not a request it kept
    assert fault.to_client(other) == other
    # a connection of its own keeps its own opaques
    assert _wire("end-tx-never-answered").to_client(_frame(response_for(RemotingCommand(37, opaque=7), 0)))


@pytest.mark.parametrize(
    ("name", "code", "remark"),
    [("pull-always-error", 11, "pull failed"), ("heartbeat-refused", 34, "heart beat refused")],
)
def test_a_refusing_fault_answers_system_error_to_its_requests(name: str, code: int, remark: str) -> None:
    fault = _wire(name)
    fault.to_broker(_frame(RemotingCommand(code, opaque=3)))
    found = response_for(RemotingCommand(code, opaque=3), 0, ext_fields={"maxOffset": "1"}, body=b"x")
    answer = _cmd(fault.to_client(_frame(found)))
    assert (answer.code, answer.remark, answer.opaque, answer.body) == (1, remark, 3, b"")
    assert answer.is_response
    untouched = _frame(response_for(RemotingCommand(code, opaque=4), 0))
    assert fault.to_client(untouched) == untouched


def test_queue_offset_off_by_one_shifts_the_answers_to_plain_sends_only() -> None:
    fault = _wire("queue-offset-off-by-one")
    half = {**SEND_EXT, "sysFlag": "4", "properties": "TRAN_MSG\x01true\x02"}
    delayed = {"a": "PG", "b": "T", "e": "0", "f": "0", "i": "DELAY\x013\x02"}  # SEND_MESSAGE_V2's keys
    for opaque, ext in ((1, SEND_EXT), (2, half), (3, delayed)):
        fault.to_broker(_frame(RemotingCommand(310 if opaque == 3 else 10, opaque=opaque, ext_fields=ext)))
    offsets = []
    for opaque in (1, 2, 3):
        answer = response_for(RemotingCommand(10, opaque=opaque), 0, ext_fields={"queueOffset": "5"})
        offsets.append(_cmd(fault.to_client(_frame(answer))).get("queueOffset"))
    assert offsets == ["6", "5", "5"]


def test_no_check_requests_drops_check_transaction_state_and_nothing_else() -> None:
    fault = _wire("no-check-requests")
    check = _frame(RemotingCommand(39, opaque=1, flag=2, ext_fields={"msgId": "X"}))
    assert fault.to_client(check) is None
    answer = _frame(response_for(RemotingCommand(39, opaque=1), 0))
    assert fault.to_client(answer) == answer


def test_property_names_lower_case_rewrites_each_record_and_keeps_the_layout() -> None:
    model = Model()
    state, _ = model.send(model.initial(), Message("T", b"a", props(KEYS="k", DELAY="0", Custom="v")), 0)
    state, _ = model.send(state, Message("T", b"bb", props(TAGS="t")), 0)
    records = [r for r in state.store.records.values() if r.topic == "T"]
    body = b"".join(encode_record(record_from_reference(r)) for r in records)
    fault = _wire("property-names-lower-case")
    found = response_for(RemotingCommand(11, opaque=2), 0, body=body)
    rewritten = decode_records(_cmd(fault.to_client(_frame(found))).body)
    assert [w.body for w in rewritten] == [b"a", b"bb"]
    assert [dict(w.properties) for w in rewritten] == [
        {k.lower(): v for k, v in r.properties.items()} for r in records
    ]
    refused = _frame(response_for(RemotingCommand(11, opaque=2), 1, body=body))
    assert fault.to_client(refused) == refused  # only answers that carry records


def test_silent_after_n_requests_answers_nothing_more_on_any_connection() -> None:
    fault = zoo.silent_after(2)()
    assert isinstance(fault, WireFault)
    answer = _frame(response_for(RemotingCommand(30, opaque=1), 0))
    for opaque in (1, 2):
        request = _frame(RemotingCommand(30, opaque=opaque))
        assert fault.to_broker(request) == (request, None)
    assert fault.to_client(answer) is None  # two requests seen: silent from now on
    assert fault.to_broker(_frame(RemotingCommand(30, opaque=3))) == (None, None)


def test_a_proxy_gives_each_connection_a_fault_of_its_own() -> None:
    made: list[WireFault] = []

    def factory() -> WireFault:
        made.append(WireFault())
        return made[-1]

    with (
        BackgroundServer(WallClockTarget(Model())) as (host, port),
        FaultProxy(host, port, factory) as (proxy_host, proxy_port),
    ):
        for _ in range(2):
            with socket.create_connection((proxy_host, proxy_port), timeout=2):
                pass
        deadline = time.monotonic() + 5
        while len(made) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(made) == 2 and made[0] is not made[1]


def test_a_malformed_answer_is_a_protocol_failure_of_its_rule_with_the_frame() -> None:
    """Through the remoting target: a send answered SUCCESS with an empty msgId raises ProtocolFailure of
    wire/send-headers carrying the frame as received, not a crash and not an unknown outcome."""
    profile = load_profile(PROFILE, "127.0.0.1:1")
    wire = FAULTS["send-msg-id-empty"].wire_fault()
    assert wire is not None
    with (
        BackgroundServer(WallClockTarget(Model(profile.config))) as (host, port),
        FaultProxy(host, port, wire) as (proxy_host, proxy_port),
    ):
        import attrs

        target = RemotingTarget(attrs.evolve(profile, host=proxy_host, port=proxy_port), name="faulty")
        try:
            with pytest.raises(ProtocolFailure) as caught:
                target.execute(Send(Message("T", b"x", props(UNIQ_KEY="0" * 32))))
        finally:
            target.close()
    assert caught.value.rule == "wire/send-headers"
    assert caught.value.frame is not None and '"msgId":""' in caught.value.frame


# --- judging a run ----------------------------------------------------------------------------------------


def _report(
    failures: dict[str, str] | None = None,
    *,
    findings: tuple[WireFinding, ...] = (),
    outcome: str = "pass",
) -> Report:
    """A report whose scenarios (the first few of the catalogue) fail with the given rules, one each, in
    order; without failures, one scenario that ends with ``outcome``. ``findings``: the wire probe's."""
    scenarios = catalogue()
    results = []
    if failures:
        for n, rule in enumerate(failures.values()):
            step = StepFailure(1, "send", f"broke {rule}", rule, None, None)
            results.append(ScenarioResult(scenarios[n], "fail", "", (step,), (), 1, float(n)))
    else:
        reason = "no answer within 5 s" if outcome == "unknown" else ""
        results.append(ScenarioResult(scenarios[0], outcome, reason, (), (), 1))
    probe = ProbeResult(findings, 13, 1, 0) if findings else None
    return Report("served:fault:x", tuple(results), None, 0, 1.0, mode="workload", probe=probe)


def test_a_run_that_names_the_fault_s_rule_first_is_diagnosed() -> None:
    rep = _report(findings=(WireFinding("wire/send-headers", "an empty msgId", code=310),))
    row = judge(FAULTS["send-msg-id-empty"], rep)
    assert (row.outcome, row.first, row.root_causes, row.exit_code) == (
        "diagnosed",
        "wire/send-headers",
        1,
        1,
    )
    assert row.ok and "an empty msgId" in row.line


def test_a_declared_symptom_first_is_diagnosed_too() -> None:
    rep = _report(findings=(WireFinding("wire/check-request", "no CHECK_TRANSACTION_STATE", code=39),))
    assert judge(FAULTS["no-check-requests"], rep).ok


def test_wrong_rule_missed_imprecise_and_unknown() -> None:
    delay = FAULTS["delay-ignored"]
    assert (
        judge(delay, _report({"a": "put/send-result", "b": "put/delay-eligibility"})).outcome == "wrong-rule"
    )
    assert judge(delay, _report(outcome="pass")).outcome == "missed"
    assert judge(delay, _report(outcome="unknown")).outcome == "unknown"
    many = {
        str(n): rule for n, rule in enumerate(["put/delay-eligibility", "a/b", "c/d", "e/f", "g/h", "i/j"])
    }
    row = judge(delay, _report(many))
    assert (row.outcome, row.first, row.root_causes) == ("imprecise", "put/delay-eligibility", 6)
    assert judge(delay, _report(dict(list(many.items())[:MAX_ROOT_CAUSES]))).ok


def test_a_broker_that_stops_answering_is_diagnosed_by_exit_3_and_what_was_not_judged() -> None:
    silent = FAULTS["silent-after-600"]
    row = judge(silent, _report(outcome="unknown"))
    assert (row.outcome, row.exit_code, row.first) == ("diagnosed", 3, None)
    assert "no answer within 5 s" in row.line
    assert judge(silent, _report({"a": "put/send-result"})).outcome == "wrong-outcome"
    assert judge(silent, _report(outcome="pass")).outcome == "missed"


def test_a_crash_is_a_row_with_where_it_happened() -> None:
    try:
        raise ValueError("boom")
    except ValueError as e:
        row = crashed(FAULTS["delay-ignored"], e)
    assert row.outcome == "crashed" and row.exit_code is None
    assert row.line.startswith("ValueError: boom (at ") and "test_faults.py" in row.line


def test_the_matrix_always_finishes_and_keeps_the_zoo_s_order() -> None:
    def run(name: str) -> FaultRow:
        if name == "delay-ignored":
            raise RuntimeError("a runner bug")
        return judge(FAULTS[name], _report(outcome="pass"))

    seen: list[tuple[int, int, str]] = []
    rows = zoo.fault_matrix(
        run, ["send-msg-id-empty", "delay-ignored"], progress=lambda n, t, name: seen.append((n, t, name))
    )
    assert [(r.fault, r.outcome) for r in rows] == [
        ("send-msg-id-empty", "missed"),
        ("delay-ignored", "crashed"),
    ]
    assert seen == [(1, 2, "send-msg-id-empty"), (2, 2, "delay-ignored")]
    assert zoo.matrix_summary(rows)["crashed"] == 1


def _showing(source: str, rule: str, symptom: str | None, t: int) -> Showing:
    return Showing(
        source,
        rule,
        "checks",
        "step 3 (checks)",
        "expected 1 check request(s), got 0",
        time=t,
        symptom=symptom,
    )


def test_a_symptom_shared_by_the_scenarios_of_several_rules_is_one_root_cause() -> None:
    timeout = "transaction/check-timeout"
    shared = shared_symptoms(
        [
            _showing("a", "transaction/check-immunity", timeout, 1),
            _showing("b", "transaction/check-interval", timeout, 2),
            _showing("c", "put/send-result", None, 3),
        ]
    )
    assert [x.rule for x in shared] == [timeout, timeout, "put/send-result"]
    alone = shared_symptoms([_showing("a", "transaction/check-immunity", timeout, 1)])
    assert [x.rule for x in alone] == ["transaction/check-immunity"]  # one rule: the precise diagnosis
    beside = shared_symptoms(
        [_showing("a", "transaction/check-immunity", timeout, 1), _showing("b", timeout, None, 2)]
    )
    assert [x.rule for x in beside] == [timeout, timeout]


def test_a_pull_answered_system_error_is_a_symptom_of_what_a_pull_answers() -> None:
    """pull-always-error: the clock-stepping scenarios (judged by their steps alone) failed on their own
    rules, two root causes more than the fault has; the symptom folds them into pull/status-codes. A pull
    answered with a normal status at the wrong time stays the scenario's own rule (a broker that ignores
    the deliver-clamp is not a pull bug)."""
    from rmqspec.conformance.scenario_run import step_symptom

    assert (
        step_symptom("pull", "code: expected SUCCESS, got SYSTEM_ERROR (pull failed)") == "pull/status-codes"
    )
    assert step_symptom("pull", "code: expected SUCCESS, got PULL_NOT_FOUND (NO_MESSAGE_IN_QUEUE)") is None
    assert step_symptom("send", "code: expected SUCCESS, got SYSTEM_ERROR") is None


# --- the command line -------------------------------------------------------------------------------------


def test_faults_list_and_usage_errors() -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["faults", "--list"])
    assert listed.exit_code == 0
    for name, f in FAULTS.items():
        assert name in listed.output and (f.rule or "unknown") in listed.output
    assert runner.invoke(app, ["faults", "--only", "nope"]).exit_code == 2
    missing = runner.invoke(app, ["faults", "--profile", "no/such.yaml"])
    assert missing.exit_code == 2 and "no profile" in missing.output
    assert runner.invoke(app, ["serve", "--fault", "nope", "--port", "0"]).exit_code == 2


@pytest.mark.wire
def test_serve_fault_serves_the_broken_broker_over_tcp() -> None:
    """``rmqspec serve --fault NAME``: the reference behind the fault, on the port it prints."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rmqspec",
            "serve",
            "--fault",
            "send-msg-id-empty",
            "--port",
            "0",
            "--seconds",
            "30",
            "--profile",
            str(PROFILE),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving fault:send-msg-id-empty on 127.0.0.1:" in line, line + (
            proc.stderr.read() if proc.stderr else ""
        )
        port = int(line.split("127.0.0.1:", 1)[1].split()[0])
        import attrs

        profile = attrs.evolve(load_profile(PROFILE, "127.0.0.1:1"), port=port)
        target = RemotingTarget(profile, name="served fault")
        try:
            with pytest.raises(ProtocolFailure, match="empty msgId"):
                target.execute(Send(Message("T", b"x", props(UNIQ_KEY="1" * 32))))
        finally:
            target.close()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def quick_profile(tmp_path: Path) -> Path:
    """short-levels with a 1 s request timeout: a silent broker is found out quickly."""
    text = PROFILE.read_text(encoding="utf-8").replace("timeout: 5", "timeout: 1")
    path = tmp_path / "quick.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def silent_broker() -> Iterator[tuple[str, int]]:
    """The reference that answers 40 requests, then nothing (a hung broker that keeps its connections)."""
    with (
        BackgroundServer(WallClockTarget(Model(load_profile(PROFILE, "127.0.0.1:1").config))) as (host, port),
        FaultProxy(host, port, zoo.silent_after(40)()) as address,
    ):
        yield address


@pytest.mark.wire
@pytest.mark.timeout(240)
def test_a_broker_that_stops_answering_ends_with_exit_3_and_the_report(
    silent_broker: tuple[str, int], quick_profile: Path, tmp_path: Path
) -> None:
    host, port = silent_broker
    report = tmp_path / "report.json"
    start = time.monotonic()
    result = CliRunner().invoke(
        app,
        [
            "conform",
            "--target",
            f"remoting://{host}:{port}",
            "--profile",
            str(quick_profile),
            "--scenario",
            "put/",
            "--workload-seconds",
            "3",
            "--report",
            str(report),
            "--save-dir",
            str(tmp_path / "failures"),
        ],
    )
    took = time.monotonic() - start
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output and "UNKNOWN" in result.output
    doc: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    assert doc["exit_code"] == 3 and doc["unjudged"], doc["summary"]
    assert any("no response" in line or "answers nothing" in line for line in doc["unjudged"])
    assert took < 200


class _Mute:
    """A port that accepts connections and never sends a byte (or, ``http``, answers every one with an
    HTTP 400 and closes it)."""

    def __init__(self, http: bool = False) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.http = http
        self.stop = threading.Event()
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            if self.http:
                conn.settimeout(2)
                try:
                    conn.recv(100)
                    conn.sendall(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                except OSError:
                    pass
                conn.close()
            else:
                self.held.append(conn)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        for c in self.held:
            c.close()
        self.server.close()


@pytest.mark.wire
@pytest.mark.parametrize(("http", "says"), [(False, "no RocketMQ reply"), (True, "an HTTP server")])
def test_a_port_that_is_no_broker_ends_quickly_with_exit_2_and_one_line(
    http: bool, says: str, quick_profile: Path, tmp_path: Path
) -> None:
    mute = _Mute(http)
    report = tmp_path / "report.json"
    start = time.monotonic()
    try:
        result = CliRunner().invoke(
            app,
            [
                "conform",
                "--target",
                f"remoting://127.0.0.1:{mute.port}",
                "--profile",
                str(quick_profile),
                "--report",
                str(report),
            ],
        )
    finally:
        mute.close()
    assert result.exit_code == 2 and says in result.output, result.output
    assert "Traceback" not in result.output
    assert json.loads(report.read_text(encoding="utf-8"))["exit_code"] == 2
    assert time.monotonic() - start < 30


# --- the matrix over TCP ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FaultRow]:
    """The whole suite over TCP against every fault, three at once (what `rmqspec faults` runs)."""
    out = tmp_path_factory.mktemp("faults")
    runner = FaultRunner(profile=PROFILE, workload_seconds=5, report_dir=out)
    return {r.fault: r for r in fault_matrix(runner, workers=3)}


@pytest.mark.slow
@pytest.mark.wire
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", list(FAULTS))
def test_the_suite_over_tcp_names_the_fault_s_rule_first(name: str, matrix: dict[str, FaultRow]) -> None:
    row = matrix[name]
    f = FAULTS[name]
    assert row.ok, f"{name}: {row.outcome}: first {row.first}, {row.root_causes} root causes: {row.line}"
    if f.expect == "fail":
        assert row.exit_code == 1 and row.first in f.rules
    else:
        assert row.exit_code == 3
    assert row.root_causes <= MAX_ROOT_CAUSES
    assert row.report is not None
    doc = json.loads(Path(row.report).read_text(encoding="utf-8"))
    assert doc["exit_code"] == row.exit_code
    if doc["root_causes"]:
        first = doc["root_causes"][0]
        assert first["rule"] == row.first and first["first"]["message"]
        assert "consequence_count" in first

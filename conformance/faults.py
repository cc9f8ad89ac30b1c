"""The broken-broker zoo: faults of the kinds real re-implementations of RocketMQ have, for testing the suite.

A ``Fault`` is the reference served over TCP (``rmqspec serve --fault NAME``, ``rmqspec conform --target
served:fault:NAME``) with one thing wrong: its model is a mutant's (``mutant``: a behaviour), or its frames
pass through a ``WireFault`` (``wire``: the protocol), or both. Each declares the rule a suite run must
name as its first root cause, and the rules it may show first instead (``symptoms``, each with the reason
where it is declared), like ``Mutant.symptoms``. ``rmqspec faults`` runs the whole suite over TCP against
every fault and checks that it finishes, names the right rule first and reports no more than a handful
of root causes.

A fault that ``expects`` "unknown" is a broker that stops answering: the run must end with no verdict
(exit 3) and say what could not be judged.

Nothing here imports the adapters: the wire faults rewrite frames with ``wireprobe``'s helpers, and
``fault_matrix`` runs the suite through a function the caller passes (the command line serves each
fault over TCP in this process: ``rmqspec.conform.FaultRunner``).
"""

from __future__ import annotations

import json
import struct
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Final

import attrs

from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

from .mutants import MUTANTS
from .suite import EXIT_FAIL, EXIT_UNKNOWN, Report
from .wirecheck import WireFinding, parse_frame
from .wireprobe import Faulty, WireFault, rewrite_body, rewrite_header

# How many root-cause rules a run against one fault may report and still be precise.
MAX_ROOT_CAUSES: Final = 5


@attrs.frozen
class Fault:
    name: str
    rule: str
    description: str
    # Rules a run may name first instead, each declared with the reason (the bug shows there first).
    symptoms: tuple[str, ...] = ()
    mutant: str | None = None  # the model served is this mutant's; None: the reference
    wire: Callable[[], Faulty] | None = None  # a fresh fault on the frames for each run
    expect: str = "fail"  # "fail": its rule named first; "unknown": no verdict (exit 3)

    @property
    def rules(self) -> tuple[str, ...]:
        """The rules a run may name as its first root cause: its own, then its symptoms."""
        return (self.rule, *self.symptoms)

    @property
    def kind(self) -> str:
        """ "protocol" (its rule is a wire/... rule), "behaviour" (any other rule, whether planted in the
        model or by rewriting frames) or "hang" (a broker that stops answering)."""
        if self.expect == "unknown":
            return "hang"
        return "protocol" if self.rule.startswith("wire/") else "behaviour"

    def model(self, config: BrokerConfig) -> Model:
        return MUTANTS[self.mutant].model(config) if self.mutant is not None else Model(config)

    def wire_fault(self) -> Faulty | None:
        return None if self.wire is None else self.wire()


FAULTS: dict[str, Fault] = {}


def _add(f: Fault) -> None:
    if f.name in FAULTS:
        raise ValueError(f"two faults named {f.name}")
    if f.mutant is not None and f.mutant not in MUTANTS:
        raise ValueError(f"fault {f.name}: no mutant {f.mutant}")
    FAULTS[f.name] = f


# --- frame helpers ------------------------------------------------------------------------------------


def frame_header(frame: bytes) -> dict[str, Any] | None:
    parsed = parse_frame(frame)
    return None if isinstance(parsed, WireFinding) else parsed.header


def is_response(h: dict[str, Any]) -> bool:
    return bool(int(h.get("flag", 0)) & 1)


def _ext(h: dict[str, Any]) -> dict[str, Any]:
    ext = h.get("extFields")
    if not isinstance(ext, dict):
        ext = h["extFields"] = {}
    return ext


class Answered:
    """Per connection: the opaques of the two-way requests of some codes, so that their answers can be
    changed."""

    def __init__(self, codes: frozenset[int]) -> None:
        self.codes = codes
        self.opaques: set[int] = set()
        self.lock = threading.Lock()

    def to_broker(self, frame: bytes) -> tuple[bytes | None, bytes | None]:
        h = frame_header(frame)
        two_way = h is not None and not int(h.get("flag", 0)) & 3  # a request that expects an answer
        if h is not None and two_way and int(h.get("code", -1)) in self.codes:
            with self.lock:
                self.opaques.add(int(h.get("opaque", 0)))
        return frame, None

    def answers(self, h: dict[str, Any]) -> bool:
        """Whether ``h`` answers one of the requests kept (and forgets it)."""
        if not is_response(h):
            return False
        with self.lock:
            opaque = int(h.get("opaque", -1))
            if opaque in self.opaques:
                self.opaques.discard(opaque)
                return True
        return False


# --- the protocol ---------------------------------------------------------------------------------------


def _upper_camel_only(frame: bytes) -> tuple[bytes | None, bytes | None]:
    """The broker reads a request's header keys only in UpperCamel (``ProducerGroup``, ``Topic``, ``A``):
    a key as RocketMQ names it (``producerGroup``, ``a``) is one it does not see."""
    h = frame_header(frame)
    if h is None or is_response(h):
        return frame, None

    def change(header: dict[str, Any]) -> None:
        ext = header.get("extFields")
        if isinstance(ext, dict):
            header["extFields"] = {k[:1].lower() + k[1:]: v for k, v in ext.items() if k[:1].isupper()}

    return rewrite_header(frame, change), None


def _empty_msg_id(frame: bytes) -> bytes | None:
    def change(h: dict[str, Any]) -> None:
        if is_response(h) and "msgId" in _ext(h):
            _ext(h)["msgId"] = ""

    return rewrite_header(frame, change)


def _end_tx_unanswered() -> WireFault:
    """A two-way END_TRANSACTION is applied, and its answer never sent."""
    kept = Answered(frozenset({37}))

    def to_client(frame: bytes) -> bytes | None:
        h = frame_header(frame)
        return None if h is not None and kept.answers(h) else frame

    return WireFault(to_client=to_client, to_broker=kept.to_broker)


def _pull_always_error() -> WireFault:
    """Every PULL_MESSAGE is answered SYSTEM_ERROR, whatever the queue holds."""
    kept = Answered(frozenset({11}))

    def to_client(frame: bytes) -> bytes | None:
        h = frame_header(frame)
        if h is None or not kept.answers(h):
            return frame
        return _answer(h, 1, "pull failed")

    return WireFault(to_client=to_client, to_broker=kept.to_broker)


def _answer(h: dict[str, Any], code: int, remark: str) -> bytes:
    """A response of ``code`` with ``remark``, no extFields and no body, in place of the one ``h`` heads."""
    header = {
        "code": code,
        "language": h.get("language", "JAVA"),
        "version": h.get("version", 0),
        "opaque": int(h.get("opaque", 0)),
        "flag": 1,
        "remark": remark,
    }
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return struct.pack(">ii", 4 + len(raw), len(raw)) + raw


def _heartbeat_refused() -> WireFault:
    """HEART_BEAT answered SYSTEM_ERROR; the broker registers the connection all the same."""
    kept = Answered(frozenset({34}))

    def to_client(frame: bytes) -> bytes | None:
        h = frame_header(frame)
        return _answer(h, 1, "heart beat refused") if h is not None and kept.answers(h) else frame

    return WireFault(to_client=to_client, to_broker=kept.to_broker)


def _plain_send(h: dict[str, Any]) -> bool:
    """Whether ``h`` heads a SEND_MESSAGE (V2) of a plain message: not transactional, no DELAY (its
    header keys as RocketMQ names them, long or V2's short ones)."""
    if is_response(h) or int(h.get("code", -1)) not in (10, 310):
        return False
    ext = h.get("extFields")
    if not isinstance(ext, dict):
        return False
    sys_flag = str(ext.get("sysFlag", ext.get("f", "0")))
    properties = str(ext.get("properties", ext.get("i", "")))
    names = {kv.split("\x01", 1)[0] for kv in properties.split("\x02") if kv}
    return (not sys_flag.isdigit() or int(sys_flag) & 0xC == 0) and not names & {"DELAY", "TRAN_MSG"}


def _queue_offset_plus_one() -> WireFault:
    """The answer to a plain send names the queue's offset after the message (queueOffset + 1), as an
    implementation that answers with the queue's new max offset does."""
    opaques: set[int] = set()
    lock = threading.Lock()

    def to_broker(frame: bytes) -> tuple[bytes | None, bytes | None]:
        h = frame_header(frame)
        if h is not None and _plain_send(h) and not int(h.get("flag", 0)) & 2:
            with lock:
                opaques.add(int(h.get("opaque", 0)))
        return frame, None

    def change(h: dict[str, Any]) -> None:
        with lock:
            if not is_response(h) or int(h.get("opaque", -1)) not in opaques:
                return
            opaques.discard(int(h.get("opaque", -1)))
        ext = _ext(h)
        if str(ext.get("queueOffset", "")).lstrip("-").isdigit():
            ext["queueOffset"] = str(int(ext["queueOffset"]) + 1)

    return WireFault(to_client=lambda frame: rewrite_header(frame, change), to_broker=to_broker)


def _no_check_requests(frame: bytes) -> bytes | None:
    """CHECK_TRANSACTION_STATE never reaches a producer: the broker's check service runs (its put-back
    copies, counts and discards as ever), but no check request leaves it."""
    h = frame_header(frame)
    return None if h is not None and not is_response(h) and int(h.get("code", -1)) == 39 else frame


def _records_rewritten(body: bytes, change: Callable[[str], str]) -> bytes | None:
    """Stored records (wire/record-layout) with each properties string changed; None: not records."""
    out = b""
    pos = 0
    while pos < len(body):
        if len(body) - pos < 91:
            return None
        total = struct.unpack_from(">i", body, pos)[0]
        if total < 91 or pos + total > len(body):
            return None
        rec = body[pos : pos + total]
        magic = struct.unpack_from(">i", rec, 4)[0]
        sys_flag = struct.unpack_from(">i", rec, 36)[0]
        p = 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 4 + 8
        try:
            p += 4 + struct.unpack_from(">i", rec, p)[0]
            if magic == -626843477:
                p += 2 + struct.unpack_from(">h", rec, p)[0]
            else:
                p += 1 + rec[p]
            length = struct.unpack_from(">h", rec, p)[0]
            props = rec[p + 2 : p + 2 + length].decode("utf-8")
        except (struct.error, IndexError, UnicodeDecodeError):
            return None
        new = change(props).encode("utf-8")
        rest = rec[p + 2 + length :]
        head = rec[:p]
        size = len(head) + 2 + len(new) + len(rest)
        out += struct.pack(">i", size) + head[4:] + struct.pack(">h", len(new)) + new + rest
        pos += total
    return out


def _lower_names(props: str) -> str:
    pairs = [kv.split("\x01", 1) for kv in props.split("\x02") if kv]
    return "".join(f"{k.lower()}\x01{v[0] if v else ''}\x02" for k, *v in pairs)


def _property_names_lower_case(frame: bytes) -> bytes | None:
    """The broker writes property names in lower case in every record it returns (pull, view, query and
    the check request's body): ``uniq_key``, ``delay``, ``real_topic``."""

    def change(header: dict[str, Any], body: bytes) -> bytes:
        code = int(header.get("code", -1))
        if not body or (is_response(header) and code != 0) or (not is_response(header) and code != 39):
            return body
        rewritten = _records_rewritten(body, _lower_names)
        return body if rewritten is None else rewritten

    return rewrite_body(frame, change)


def silent_after(requests: int) -> Callable[[], Faulty]:
    """After ``requests`` requests (all connections together), the broker answers nothing more: it keeps
    its connections open and reads what comes, as a hung process does."""

    def per_run() -> Faulty:
        seen = [0]
        lock = threading.Lock()

        def silent() -> bool:
            with lock:
                return seen[0] >= requests

        def to_broker(frame: bytes) -> tuple[bytes | None, bytes | None]:
            h = frame_header(frame)
            with lock:
                if h is not None and not is_response(h):
                    seen[0] += 1
                if seen[0] > requests:
                    return None, None
            return frame, None

        def to_client(frame: bytes) -> bytes | None:
            return None if silent() else frame

        return WireFault(to_client=to_client, to_broker=to_broker)

    return per_run


def _per_connection(make: Callable[[], WireFault]) -> Callable[[], Faulty]:
    return lambda: make


def _mutant_wire(name: str) -> Callable[[], Faulty]:
    wire = MUTANTS[name].wire
    assert wire is not None, name
    return lambda: wire


# --- the zoo ------------------------------------------------------------------------------------------------

_add(
    Fault(
        "header-keys-upper-camel",
        "wire/send-headers",
        "request header keys are read only in UpperCamel (ProducerGroup, Topic, A, B, ...)",
        wire=lambda: WireFault(to_broker=_upper_camel_only),
    )
)
# symptom wire/offset-msg-id: an empty msgId is also not an offset message id.
_add(
    Fault(
        "send-msg-id-empty",
        "wire/send-headers",
        "a send's answer carries an empty msgId",
        symptoms=("wire/offset-msg-id",),
        wire=lambda: WireFault(to_client=_empty_msg_id),
    )
)
_add(
    Fault(
        "end-tx-never-answered",
        "wire/end-transaction",
        "a two-way END_TRANSACTION (commit, rollback) is applied but never answered",
        wire=_per_connection(_end_tx_unanswered),
    )
)
_add(
    Fault(
        "commit-invisible",
        "transaction/committed-message",
        "a commit answers SUCCESS and resolves the half message, but the message never becomes visible",
        mutant="commit-invisible",
    )
)
# symptom wire/check-request: the wire probe waits for the check of its half message first.
_add(
    Fault(
        "no-check-requests",
        "transaction/check-timeout",
        "the broker never sends CHECK_TRANSACTION_STATE (its check service runs, no request leaves it)",
        symptoms=("wire/check-request",),
        wire=lambda: WireFault(to_client=_no_check_requests),
    )
)
_add(
    Fault(
        "delay-ignored",
        "put/delay-eligibility",
        "DELAY is ignored: a delayed message is stored in its topic at once",
        mutant="delay-ignored",
    )
)
_add(
    Fault(
        "send-back-not-scheduled",
        "sendback/through-schedule",
        "a send-back stores the retry copy in %RETRY% at once, not through the schedule topic",
        mutant="retry-not-scheduled",
    )
)
_add(
    Fault(
        "pull-always-error",
        "pull/status-codes",
        "every PULL_MESSAGE is answered SYSTEM_ERROR",
        wire=_per_connection(_pull_always_error),
    )
)
_add(
    Fault(
        "queue-offset-off-by-one",
        "put/send-result",
        "a plain send's answer names queueOffset + 1 (the queue's next offset, not the message's)",
        wire=_per_connection(_queue_offset_plus_one),
    )
)
_add(
    Fault(
        "property-names-lower-case",
        "put/stored-properties",
        "records come back with their property names in lower case (uniq_key, delay, real_topic)",
        wire=lambda: WireFault(to_client=_property_names_lower_case),
    )
)
_add(
    Fault(
        "pull-without-max-offset",
        "wire/pull-response",
        "a pull's answer lacks maxOffset",
        wire=_mutant_wire("pull-without-max-offset"),
    )
)
_add(
    Fault(
        "heartbeat-refused",
        "wire/heartbeat",
        "HEART_BEAT is answered SYSTEM_ERROR (the connection is registered all the same)",
        wire=_per_connection(_heartbeat_refused),
    )
)
SILENT_AFTER: Final = 600
_add(
    Fault(
        f"silent-after-{SILENT_AFTER}",
        "",
        f"after {SILENT_AFTER} requests the broker answers nothing more (a hung broker)",
        wire=silent_after(SILENT_AFTER),
        expect="unknown",
    )
)


def fault(name: str) -> Fault:
    """The fault named ``name``; KeyError with the names when there is none."""
    if name not in FAULTS:
        raise KeyError(f"unknown fault {name!r}; `rmqspec faults --list` shows the {len(FAULTS)} names")
    return FAULTS[name]


# --- the matrix -------------------------------------------------------------------------------------------

# How a run against a fault ended, judged against what the fault expects.
DIAGNOSED: Final = (
    "diagnosed"  # its rule named first (or, expecting unknown: exit 3, what was not judged said)
)
OUTCOMES: Final = {
    DIAGNOSED: "the right rule named first, with at most MAX_ROOT_CAUSES root causes",
    "wrong-rule": "the run failed, but its first root cause is another rule",
    "imprecise": f"the right rule first, but more than {MAX_ROOT_CAUSES} root causes",
    "missed": "the run passed: the fault went unseen",
    "unknown": "no verdict (exit 3) where a failure was expected",
    "wrong-outcome": "a verdict where a broker that stops answering should leave none (exit 3)",
    "crashed": "the run did not finish with a report (an error of rmqspec's own)",
}


@attrs.frozen
class FaultRow:
    """One fault's line of the matrix."""

    fault: str
    kind: str
    expected: str  # the rule it must name first, or "unknown" (exit 3)
    outcome: str  # a key of OUTCOMES
    exit_code: int | None  # None: crashed
    first: str | None  # the rule of the first root cause the report names
    root_causes: int
    line: str  # the first root cause as the report says it, what could not be judged, or the error
    seconds: float = 0.0
    report: str | None = None  # where the run's report was written

    @property
    def ok(self) -> bool:
        return self.outcome == DIAGNOSED

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "ok": self.ok}


def judge(f: Fault, rep: Report, *, seconds: float = 0.0, report: str | None = None) -> FaultRow:
    """The matrix row of ``rep``, the report of a suite run against ``f``."""
    roots = rep.root_causes
    first = roots[0] if roots else None
    code = rep.exit_code
    if f.expect == "unknown":
        line = "; ".join(rep.unjudged) or (first.line() if first is not None else rep.summary())
        if code != EXIT_UNKNOWN:
            outcome = "missed" if code == 0 else "wrong-outcome"
        elif not rep.unjudged:
            outcome = "wrong-outcome"  # exit 3 without saying what could not be judged
        elif len(roots) > MAX_ROOT_CAUSES:
            outcome = "imprecise"
        else:
            outcome = DIAGNOSED
    else:
        line = first.line() if first is not None else ("; ".join(rep.unjudged) or rep.summary())
        if code == 0:
            outcome = "missed"
        elif code == EXIT_UNKNOWN:
            outcome = "unknown"
        elif code != EXIT_FAIL or first is None or first.rule not in f.rules:
            outcome = "wrong-rule"
        elif len(roots) > MAX_ROOT_CAUSES:
            outcome = "imprecise"
        else:
            outcome = DIAGNOSED
    return FaultRow(
        f.name,
        f.kind,
        f.rule if f.expect == "fail" else "unknown",
        outcome,
        code,
        first.rule if first is not None else None,
        len(roots),
        line,
        seconds,
        report,
    )


def crashed(f: Fault, error: BaseException, *, seconds: float = 0.0) -> FaultRow:
    """The row of a run that ended in an exception instead of a report: where it was raised, said."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return FaultRow(
        f.name,
        f.kind,
        f.rule if f.expect == "fail" else "unknown",
        "crashed",
        None,
        None,
        0,
        f"{type(error).__name__}: {error}{where}",
        seconds,
    )


def fault_matrix(
    run: Callable[[str], FaultRow],
    names: Sequence[str] | None = None,
    *,
    workers: int = 1,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[FaultRow]:
    """``run`` (the suite against one fault, as a row) for every fault or those ``names``, in the zoo's
    order; ``workers`` > 1 runs that many at once, each in a process of its own (``run`` must pickle).
    A ``run`` that raises gives a crashed row: the matrix always finishes."""
    chosen = [fault(n) for n in (names or list(FAULTS))]
    total = len(chosen)
    rows: dict[str, FaultRow] = {}

    def done(row: FaultRow) -> None:
        rows[row.fault] = row
        if progress is not None:
            progress(len(rows), total, row.fault)

    if workers <= 1 or total <= 1:
        for f in chosen:
            try:
                done(run(f.name))
            except Exception as e:
                done(crashed(f, e))
    else:
        with ProcessPoolExecutor(max_workers=min(workers, total)) as pool:
            futures = {pool.submit(run, f.name): f for f in chosen}
            for future in as_completed(futures):
                f = futures[future]
                try:
                    done(future.result())
                except Exception as e:
                    done(crashed(f, e))
    return [rows[f.name] for f in chosen]


def matrix_summary(rows: Sequence[FaultRow]) -> dict[str, int]:
    """How many rows ended each way."""
    return {k: sum(r.outcome == k for r in rows) for k in OUTCOMES}

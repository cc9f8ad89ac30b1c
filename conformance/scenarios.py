"""The scenario catalogue: named, rule-tagged scenarios (the spec's examples and more) run on any target.

A scenario is a YAML mapping (``name``, ``config``, ``profile``, ``features``, ``steps``); each step has
one operation key, an optional ``at`` (ms since the scenario started), an optional ``as`` (a name bound
to the message it sends) and an optional ``expect`` (a partial match of the response). The vocabulary
is documented in docs/scenarios.md; ``rmqspec scenarios dump`` exports the catalogue as JSON.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rmqspec.reference.batch import Batch, BatchEntry, client_check
from rmqspec.reference.config import BROKER_CONF_KEYS, BrokerConfig, ConfigError, Profile
from rmqspec.reference.constants import NOT_ALLOWED_SEND_TOPICS, Code, Prop, TxAction
from rmqspec.reference.model import (
    ConsumerSendBack,
    EndTx,
    GetMaxOffset,
    Heartbeat,
    Op,
    Pull,
    QueryUniqKey,
    Send,
    SendBatch,
    ViewMessage,
)
from rmqspec.reference.put import Message
from rmqspec.reference.records import Record, props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

from .contract import CheckEvent, Clock, Feature, Response, Target, TargetError
from .specdoc import Spec, load_spec

_CONFIG_KEYS = BROKER_CONF_KEYS

OPS: dict[str, Feature] = {
    "send": Feature.SEND,
    "send_half": Feature.TRANSACTION,
    "send_batch": Feature.BATCH,
    "pull": Feature.SEND,
    "send_back": Feature.SENDBACK,
    "end_tx": Feature.TRANSACTION,
    "heartbeat": Feature.HEARTBEAT,
    "offline": Feature.HEARTBEAT,
    "checks": Feature.TRANSACTION_CHECK,
    "restart": Feature.RESTART,
    "max_offset": Feature.SEND,
    "view": Feature.VIEW,
    "query": Feature.QUERY,
    "batch_client": Feature.BATCH,
    "wait": Feature.SEND,
    "skew": Feature.CLOCK_SKEW,
}


class ScenarioError(ValueError):
    """A scenario that cannot be run as written (unknown key, bad reference); names the step."""


@attrs.frozen
class Scenario:
    id: str
    rules: tuple[str, ...]
    steps: tuple[Mapping[str, Any], ...]
    config: Mapping[str, Any] = attrs.field(factory=dict)
    profile: str | None = None
    features: frozenset[Feature] = frozenset()
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "rules": list(self.rules),
            "config": dict(self.config),
            "profile": self.profile,
            "features": sorted(f.value for f in self.features),
            "steps": [dict(s) for s in self.steps],
            "source": self.source,
        }

    def broker_config(self) -> BrokerConfig:
        return broker_config(self.config, self.profile)


def broker_config(config: Mapping[str, Any], profile: str | None = None) -> BrokerConfig:
    kwargs: dict[str, Any] = {}
    for key, value in config.items():
        if key not in _CONFIG_KEYS:
            raise ScenarioError(f"unknown config key {key!r} (known: {', '.join(sorted(_CONFIG_KEYS))})")
        kwargs[_CONFIG_KEYS[key]] = value
    if profile is not None:
        try:
            kwargs["profile"] = Profile(profile)
        except ValueError:
            raise ScenarioError(f"unknown profile {profile!r} (known: 4.9, 5.x)") from None
    try:
        return BrokerConfig(**kwargs)
    except (ConfigError, TypeError) as e:
        raise ScenarioError(f"bad config: {e}") from None


def make_scenario(
    data: Mapping[str, Any], rule: str | None, source: str, default_id: str | None = None
) -> Scenario:
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{source}: a scenario must be a mapping")
    name = data.get("name")
    steps = data.get("steps")
    if not isinstance(name, str) or not isinstance(steps, list):
        raise ScenarioError(f"{source}: a scenario needs a 'name' and a list of 'steps'")
    rules = ([rule] if rule else []) + list(data.get("rules", [])) + list(data.get("also", []))
    features: set[Feature] = set()
    for i, step in enumerate(steps):
        if not isinstance(step, Mapping):
            raise ScenarioError(f"{source}: step {i + 1} is not a mapping")
        ops = [k for k in step if k in OPS]
        extra = [k for k in step if k not in OPS and k not in ("at", "as", "expect", "note")]
        if len(ops) != 1 or extra:
            raise ScenarioError(
                f"{source}: step {i + 1} must have exactly one operation ({', '.join(OPS)}); "
                f"got {', '.join(map(str, step))}"
            )
        features.add(OPS[ops[0]])
        if ops[0] == "send" and "DELAY" in (step["send"] or {}).get("props", {}):
            features.add(Feature.DELAY)
    for f in data.get("features", []):
        try:
            features.add(Feature(f))
        except ValueError:
            raise ScenarioError(f"{source}: unknown feature {f!r}") from None
    sid = f"{rule}#{name}" if rule else (default_id or name)
    scenario = Scenario(
        id=sid,
        rules=tuple(dict.fromkeys(rules)),
        steps=tuple(steps),
        config=dict(data.get("config", {}) or {}),
        profile=data.get("profile"),
        features=frozenset(features),
        source=source,
    )
    scenario.broker_config()  # validates the config now, naming the scenario
    return scenario


def spec_scenarios(spec: Spec | None = None) -> list[Scenario]:
    """Every executable example of the spec, as a scenario."""
    spec = spec or load_spec()
    out = []
    for rule in spec.rules:
        for ex in rule.examples:
            try:
                out.append(make_scenario(ex.scenario, rule.id, f"{ex.file}:{ex.line}"))
            except ScenarioError as e:
                raise ScenarioError(f"{rule.id}#{ex.name}: {e}") from None
    return out


def catalogue(spec: Spec | None = None) -> list[Scenario]:
    """The whole catalogue: the spec's examples plus the extra scenarios of conformance/catalogue/."""
    from importlib import resources

    scenarios = spec_scenarios(spec)
    extra_dir = resources.files("rmqspec.conformance") / "catalogue"
    import yaml

    for entry in sorted(extra_dir.iterdir(), key=lambda p: p.name) if extra_dir.is_dir() else []:
        if not entry.name.endswith(".yaml"):
            continue
        docs = yaml.safe_load(entry.read_text(encoding="utf-8")) or []
        for doc in docs:
            scenarios.append(
                make_scenario(doc, None, f"catalogue/{entry.name}", f"catalogue/{doc.get('name')}")
            )
    ids = [s.id for s in scenarios]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ScenarioError(f"duplicate scenario ids: {', '.join(sorted(dupes))}")
    return scenarios


def dump(scenarios: Iterable[Scenario], path: Path | None = None) -> str:
    """The catalogue as language-neutral JSON (``rmqspec scenarios dump``)."""
    doc = {
        "format": "rmqspec-scenarios",
        "version": 1,
        "time_unit": "ms since scenario start",
        "scenarios": [s.to_json() for s in scenarios],
    }
    text = json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False)
    if path is not None:
        path.write_text(text + "\n", encoding="utf-8")
    return text


# --- running ---------------------------------------------------------------------------------------------


@attrs.frozen
class StepFailure:
    step: int
    operation: str
    message: str


@attrs.frozen
class ScenarioResult:
    scenario: Scenario
    outcome: str  # "pass", "fail", "skip", "unknown"
    reason: str = ""
    failures: tuple[StepFailure, ...] = ()

    @property
    def rules(self) -> tuple[str, ...]:
        return self.scenario.rules


@attrs.define
class _Sent:
    uniq: str
    group: str
    response: Response
    kind: str


def _uniq(seed: str, n: int) -> str:
    return hashlib.sha256(f"{seed}/{n}".encode()).hexdigest()[:32].upper()


def _offset_of(msg_id: str) -> int:
    return int(msg_id.split(",")[0][-16:], 16)


class _Runner:
    def __init__(self, scenario: Scenario, target: Target, epsilon_ms: int, salt: str) -> None:
        self.s = scenario
        self.t = target
        self.eps = epsilon_ms
        self.salt = salt
        self.t0 = target.now()
        self.sent: dict[str, _Sent] = {}
        self.uniq_name: dict[str, str] = {}
        self.pulled: dict[str, list[Record]] = {}
        self.checks: list[CheckEvent] = []  # received since the last `checks` step
        self.all_checks: list[CheckEvent] = []
        self.failures: list[StepFailure] = []
        self.counter = 0
        self.wall = target.info.clock is Clock.WALL
        self.shared = not target.info.isolated
        self.system_queue = False  # the current step's offsets are those of a system topic's queue
        self.inconclusive: list[str] = []

    # -- helpers --
    def fail(self, i: int, op: str, msg: str) -> None:
        self.failures.append(StepFailure(i + 1, op, msg))

    def ref(self, name: str, i: int) -> _Sent:
        if name not in self.sent:
            raise ScenarioError(f"{self.s.id} step {i + 1}: unknown ref {name!r}")
        return self.sent[name]

    def resolve(self, value: Any, i: int) -> Any:
        if isinstance(value, str) and value.startswith("$"):
            kind, _, name = value[1:].partition(":")
            sent = self.ref(name, i)
            if kind == "msgid":
                return str(sent.response.fields.get("msg_id", ""))
            if kind == "pulled":
                seen = self.pulled.get(sent.uniq)
                if not seen:
                    raise ScenarioError(f"{self.s.id} step {i + 1}: {name!r} was never pulled")
                return seen[0].msg_id
            if kind == "uniq":
                return sent.uniq
            raise ScenarioError(f"{self.s.id} step {i + 1}: unknown placeholder {value!r}")
        return value

    def new_uniq(self) -> str:
        self.counter += 1
        return _uniq(self.salt + self.s.id, self.counter)

    # -- operations --
    def build(self, op: str, a: Mapping[str, Any], i: int, name: str | None) -> Op | None:
        now = self.t.now()
        if op in ("send", "send_half"):
            p = {k: str(self.resolve(v, i)) for k, v in (a.get("props") or {}).items()}
            if "tags" in a:
                p[Prop.TAGS] = str(a["tags"])
            if "keys" in a:
                p[Prop.KEYS] = str(a["keys"])
            p.setdefault(Prop.UNIQ_KEY, self.new_uniq())
            p.setdefault(Prop.WAIT, "true")
            group = str(a.get("group", "PG"))
            sys_flag = int(a.get("sys_flag", 0))
            if op == "send_half":
                p[Prop.TRAN_MSG] = "true"
                p[Prop.PGROUP] = group
                sys_flag |= 4
            born = now + int(a["born"]) - (now - self.t0) if "born" in a else None
            return Send(
                Message(
                    topic=str(a["topic"]),
                    body=str(a.get("body", "")).encode(),
                    properties=props(p),
                    queue_id=int(a.get("queue", 0)),
                    sys_flag=sys_flag,
                    flag=int(a.get("flag", 0)),
                    born_timestamp=born,
                    producer_group=group,
                    reconsume_times=a.get("reconsume_times"),
                    max_reconsume_times=a.get("max_reconsume_times"),
                    version=int(a.get("version", 401)),
                )
            )
        if op == "send_batch":
            entries = []
            for m in a.get("messages", []):
                p = {k: str(v) for k, v in (m.get("props") or {}).items()}
                p.setdefault(Prop.UNIQ_KEY, self.new_uniq())
                p.setdefault(Prop.WAIT, "true")
                entries.append(BatchEntry(str(m.get("body", "")).encode(), props(p)))
            wrapper = {k: str(v) for k, v in (a.get("props") or {}).items()}
            return SendBatch(
                Batch(
                    topic=str(a["topic"]),
                    entries=tuple(entries),
                    queue_id=int(a.get("queue", 0)),
                    sys_flag=int(a.get("sys_flag", 0)),
                    properties=props(wrapper),
                )
            )
        if op == "pull":
            return Pull(
                str(a["topic"]),
                int(a.get("queue", 0)),
                int(a.get("offset", 0)),
                int(a.get("max", 32)),
                str(a.get("group", "CG")),
            )
        if op == "send_back":
            if "offset" in a:
                offset = int(a["offset"])
            else:
                sent = self.ref(str(a["ref"]), i)
                seen = self.pulled.get(sent.uniq)
                if not seen:
                    raise ScenarioError(
                        f"{self.s.id} step {i + 1}: send_back of {a['ref']!r} before any pull of it"
                    )
                offset = seen[-1].commit_log_offset
            return ConsumerSendBack(
                SendBack(
                    group=str(a.get("group", "CG")),
                    offset=offset,
                    delay_level=int(a.get("delay_level", 0)),
                    max_reconsume_times=a.get("max_reconsume_times"),
                    version=int(a.get("version", 401)),
                )
            )
        if op == "end_tx":
            sent = self.ref(str(a["ref"]), i)
            action = TxAction[str(a.get("action", "commit")).upper()]
            table = int(sent.response.fields.get("queue_offset", -1))  # type: ignore[call-overload]
            clo = _offset_of(str(sent.response.fields.get("msg_id", "0" * 32)))
            from_check = bool(a.get("from_check", False))
            if a.get("via_check"):
                mine = [c for c in self.all_checks + self.checks if c.message.uniq_key == sent.uniq]
                if not mine:
                    raise ScenarioError(
                        f"{self.s.id} step {i + 1}: no check request received for {a['ref']!r}"
                    )
                table, clo, from_check = mine[-1].tran_state_table_offset, mine[-1].commit_log_offset, True
            table = int(a.get("table_offset", table))
            clo = int(a.get("commit_log_offset", clo))
            return EndTx(
                EndTransaction(
                    producer_group=str(a.get("group", sent.group)),
                    tran_state_table_offset=table,
                    commit_log_offset=clo,
                    action=action,
                    from_check=from_check,
                    transaction_id=sent.uniq,
                )
            )
        if op in ("heartbeat", "offline"):
            return Heartbeat(str(a.get("group", "PG")), op == "heartbeat")
        if op == "max_offset":
            return GetMaxOffset(str(a["topic"]), int(a.get("queue", 0)))
        if op == "view":
            if "offset" in a:
                return ViewMessage(int(a["offset"]))
            return ViewMessage(_offset_of(str(self.ref(str(a["ref"]), i).response.fields.get("msg_id"))))
        if op == "query":
            return QueryUniqKey(str(a["topic"]), self.ref(str(a["ref"]), i).uniq)
        raise ScenarioError(f"{self.s.id} step {i + 1}: unknown operation {op!r}")

    def run(self) -> ScenarioResult:
        for i, step in enumerate(self.s.steps):
            op = next(k for k in step if k in OPS)
            args = step[op] or {}
            if "at" in step:
                self.checks.extend(self.t.advance_to(self.t0 + int(step["at"])))
            expect = step.get("expect")
            if op == "wait":
                continue
            if op == "restart":
                changed = dict(self.s.config, **(args or {}))
                self.t.restart(broker_config(changed, self.s.profile) if args else None)
                continue
            if op == "skew":
                skew = getattr(self.t, "skew_clock", None)
                if skew is None:
                    return ScenarioResult(self.s, "skip", "target cannot step its clock (feature clock-skew)")
                skew(int(args.get("ms", 0)))
                continue
            if op == "checks":
                self.check_checks(i, self.checks, expect)
                self.all_checks.extend(self.checks)
                self.checks = []
                continue
            if op == "batch_client":
                self.batch_client(i, args, expect)
                continue
            try:
                built = self.build(op, args, i, step.get("as"))
            except ScenarioError as e:
                # The step needs something the target did not produce (a check, a pulled copy): the
                # scenario fails here. On the reference this surfaces authoring mistakes too.
                self.fail(i, op, str(e))
                return ScenarioResult(self.s, "fail", str(e), tuple(self.failures))
            assert built is not None
            self.system_queue = self.shared and _in_system_queue(built)
            deadline = self.t.now() + (self.eps if self.wall else 0)
            while True:
                try:
                    resp = self.t.execute(built)
                except TargetError as e:
                    return ScenarioResult(
                        self.s, "unknown", f"step {i + 1} ({op}): {e}", tuple(self.failures)
                    )
                if self.observed_too_late(step, op, resp, expect):
                    resp = Response(int(Code.PULL_NOT_FOUND), "stored after the step's time")
                problems = self.match_response(resp, expect, i) if expect is not None else []
                # On a wall clock, reads of what dispatch builds (consume queues, the index) may lag the
                # put by up to epsilon (the reput service is asynchronous): read again until then.
                if not problems or not self.wall or op not in _DISPATCHED_READS or self.t.now() >= deadline:
                    break
                self.checks.extend(self.t.advance_to(self.t.now() + 20))
            self.note_records(resp)
            for p in problems:
                self.fail(i, op, p)
            if op in ("send", "send_half", "send_batch") and "as" in step:
                if isinstance(built, Send):
                    uniq = built.message.properties[Prop.UNIQ_KEY]
                    group = built.message.producer_group
                    self.sent[str(step["as"])] = _Sent(uniq, group, resp, op)
                elif isinstance(built, SendBatch):
                    for n, entry in enumerate(built.batch.entries):
                        self.sent[f"{step['as']}.{n}"] = _Sent(
                            entry.properties[Prop.UNIQ_KEY], "PG", resp, op
                        )
        outcome = "fail" if self.failures else "pass"
        return ScenarioResult(self.s, outcome, "", tuple(self.failures))

    def observed_too_late(self, step: Mapping[str, Any], op: str, resp: Response, expect: Any) -> bool:
        """On a wall clock a step runs a little after its ``at``. A pull meant to show that nothing is
        there yet at ``at`` that finds only messages the broker stored after ``at`` saw the queue too late,
        not a violation: the queue was empty at ``at``."""
        if not (self.wall and op == "pull" and "at" in step and isinstance(expect, Mapping)):
            return False
        want = expect.get("code")
        if want not in ("PULL_NOT_FOUND", int(Code.PULL_NOT_FOUND)) or resp.code != Code.SUCCESS:
            return False
        limit = self.t0 + int(step["at"])
        return bool(resp.records) and all(r.store_timestamp > limit for r in resp.records)

    def note_records(self, resp: Response) -> None:
        for r in resp.records:
            if r.uniq_key is not None:
                self.pulled.setdefault(r.uniq_key, []).append(r)

    def batch_client(self, i: int, a: Mapping[str, Any], expect: Any) -> None:
        entries = tuple(
            BatchEntry(
                str(m.get("body", "x")).encode(),
                props({k: str(v) for k, v in (m.get("props") or {}).items()}),
                topic=m.get("topic"),
            )
            for m in a.get("messages", [])
        )
        err = client_check(entries, str(a.get("topic", "T")))
        want = (expect or {}).get("error")
        if want is None and err is not None:
            self.fail(i, "batch_client", f"expected the client to accept the batch, it refused: {err}")
        elif want is not None and (err is None or str(want) not in err):
            self.fail(i, "batch_client", f"expected a client error containing {want!r}, got {err!r}")

    # -- matching --
    def match_response(self, resp: Response, expect: Mapping[str, Any], i: int) -> list[str]:
        out: list[str] = []
        for key, want in expect.items():
            if key == "code":
                want_code = Code[want] if isinstance(want, str) else int(want)
                if resp.code != want_code:
                    out.append(
                        f"code: expected {_code_name(want_code)}, got {_code_name(resp.code)} ({resp.remark})"
                    )
            elif key == "remark":
                if resp.remark != want:
                    out.append(f"remark: expected {want!r}, got {resp.remark!r}")
            elif key == "no_response":
                if resp.no_response != bool(want):
                    out.append(f"no_response: expected {want}, got {resp.no_response}")
            elif key == "messages":
                out.extend(self.match_messages(resp.records, want, i))
            elif key == "msg_id_count":
                n = len(str(resp.fields.get("msg_id", "")).split(","))
                if n != int(want):
                    out.append(f"msg_id_count: expected {want}, got {n}")
            elif key in (
                "queue_id",
                "queue_offset",
                "offset",
                "next_begin_offset",
                "min_offset",
                "max_offset",
            ):
                if key != "queue_id" and self.system_queue:
                    continue  # a shared broker's system queues hold other clients' entries too
                if resp.fields.get(key) != want:
                    out.append(f"{key}: expected {want}, got {resp.fields.get(key)}")
            else:
                raise ScenarioError(f"{self.s.id} step {i + 1}: unknown expectation {key!r}")
        return out

    def match_messages(
        self, records: Sequence[Record], want: Sequence[Mapping[str, Any]], i: int
    ) -> list[str]:
        if len(records) != len(want):
            names = [self.uniq_to_name(r.uniq_key) for r in records]
            return [f"messages: expected {len(want)}, got {len(records)} {names}"]
        out: list[str] = []
        for n, (rec, w) in enumerate(zip(records, want, strict=True)):
            for key, value in w.items():
                got: Any
                if key == "ref":
                    sent = self.ref(str(value), i)
                    if rec.uniq_key != sent.uniq:
                        out.append(f"message {n}: expected {value}, got {self.uniq_to_name(rec.uniq_key)}")
                    continue
                if key == "props":
                    for pk, pv in value.items():
                        got = rec.properties.get(pk)
                        exp = None if pv is None else str(self.resolve(pv, i))
                        if got != exp:
                            out.append(f"message {n}: property {pk}: expected {exp!r}, got {got!r}")
                    continue
                if key == "body":
                    got, value = rec.body.decode(errors="replace"), str(value)
                elif key == "store_at":
                    got, value = rec.store_timestamp - self.t0, int(value)
                    if self.wall:
                        if not value <= got <= value + self.eps:
                            out.append(
                                f"message {n}: stored at +{got} ms, allowed [{value}, {value + self.eps}]"
                            )
                        continue
                elif key == "new_offset_from":
                    sent = self.ref(str(value), i)
                    orig = _offset_of(str(sent.response.fields.get("msg_id", "0" * 32)))
                    if rec.commit_log_offset == orig:
                        out.append(f"message {n}: expected a new commit-log offset, got the original {orig}")
                    continue
                elif key == "prepared_offset_of":
                    sent = self.ref(str(value), i)
                    got, value = (
                        rec.prepared_transaction_offset,
                        _offset_of(str(sent.response.fields.get("msg_id"))),
                    )
                elif key == "queue_offset" and self.shared and rec.topic in NOT_ALLOWED_SEND_TOPICS:
                    continue  # a shared broker's system queues hold other clients' entries too
                elif key in ("topic", "queue_id", "queue_offset", "sys_flag", "reconsume_times", "flag"):
                    got = getattr(rec, key)
                else:
                    raise ScenarioError(f"{self.s.id} step {i + 1}: unknown message expectation {key!r}")
                if got != value:
                    out.append(f"message {n}: {key}: expected {value!r}, got {got!r}")
        return out

    def uniq_to_name(self, uniq: str | None) -> str:
        for name, sent in self.sent.items():
            if sent.uniq == uniq:
                return name
        return str(uniq)

    def check_checks(self, i: int, got: list[CheckEvent], expect: Any) -> None:
        if expect is None:
            return
        want = expect if isinstance(expect, list) else expect.get("requests", [])
        if len(got) != len(want):
            names = [self.uniq_to_name(c.message.uniq_key) for c in got]
            self.fail(i, "checks", f"expected {len(want)} check request(s), got {len(got)} {names}")
            return
        for n, (chk, w) in enumerate(zip(got, want, strict=True)):
            if "ref" in w:
                sent = self.ref(str(w["ref"]), i)
                if chk.message.uniq_key != sent.uniq:
                    self.fail(
                        i,
                        "checks",
                        f"check {n}: expected {w['ref']}, got {self.uniq_to_name(chk.message.uniq_key)}",
                    )
                if w.get("new_offsets") and chk.commit_log_offset == _offset_of(
                    str(sent.response.fields.get("msg_id"))
                ):
                    self.fail(i, "checks", f"check {n}: expected the offsets of a put-back copy")
            if "check_times" in w:
                t = chk.message.properties.get(Prop.TRANSACTION_CHECK_TIMES)
                if t != str(w["check_times"]):
                    self.fail(
                        i,
                        "checks",
                        f"check {n}: TRANSACTION_CHECK_TIMES expected {w['check_times']}, got {t}",
                    )
            if "at" in w and not self.wall and chk.time - self.t0 != int(w["at"]):
                self.fail(i, "checks", f"check {n}: expected at +{w['at']} ms, got +{chk.time - self.t0} ms")
            if "topic" in w and chk.message.topic != w["topic"]:
                self.fail(i, "checks", f"check {n}: topic expected {w['topic']}, got {chk.message.topic}")


def _code_name(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return str(code)


_DISPATCHED_READS = frozenset({"pull", "max_offset", "query"})


def _in_system_queue(op: Op) -> bool:
    """Whether the offsets answered to ``op`` are positions in a system topic's queue (delayed or half
    sends are stored in SCHEDULE_TOPIC_XXXX or RMQ_SYS_TRANS_HALF_TOPIC; reads name the topic)."""
    match op:
        case Send(message=m):
            p = m.properties
            return (p.get(Prop.DELAY, "0") not in ("", "0") and m.sys_flag & 12 != 12) or m.sys_flag & 12 == 4
        case Pull(topic=t) | GetMaxOffset(topic=t):
            return t in NOT_ALLOWED_SEND_TOPICS
    return False


def run_scenario(
    scenario: Scenario,
    make_target: Callable[[BrokerConfig], Target],
    *,
    features: frozenset[Feature] | None = None,
    profile: Profile | None = None,
    epsilon_ms: int = 500,
    salt: str = "",
) -> ScenarioResult:
    """Run one scenario on a fresh target made for the scenario's configuration."""
    cfg = scenario.broker_config()
    if profile is not None and cfg.profile is not profile:
        return ScenarioResult(scenario, "skip", f"profile {cfg.profile.value} (target is {profile.value})")
    if features is not None:
        missing = scenario.features - features
        if missing:
            return ScenarioResult(
                scenario, "skip", "target lacks " + ", ".join(sorted(f.value for f in missing))
            )
    try:
        target = make_target(cfg)
    except TargetError as e:
        return ScenarioResult(scenario, "unknown", f"the target could not be made: {e}")
    try:
        return _Runner(scenario, target, epsilon_ms, salt or str(time.time_ns())).run()
    finally:
        target.close()

"""The scenario catalogue: named, rule-tagged scenarios (the spec's examples and more) run on any target.

A scenario is a YAML mapping (``name``, ``config``, ``profile``, ``features``, ``steps``); each step has
one operation key, an optional ``at`` (ms since the scenario started), an optional ``as`` (a name bound
to the message it sends) and an optional ``expect`` (a partial match of the response). The vocabulary
is documented in docs/scenarios.md; ``rmqspec scenarios dump`` exports the catalogue as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rmqspec.reference.config import (
    BROKER_CONF_KEYS,
    FIVE_ONLY_KEYS,
    BrokerConfig,
    ConfigError,
    Profile,
    release_key,
    release_line,
)
from rmqspec.reference.constants import Code

from .contract import LOGICAL_ONLY, Feature
from .scenario_expr import ExprError, parse_need
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


# Properties a client of the 5.x gRPC protocol sets and sees: its own (user) properties, tags, keys, the
# message id (UNIQ_KEY) and the delivery time (TIMER_DELIVER_MS); every other name RocketMQ keeps for itself
# (MessageConst.STRING_HASH_SET, 5.5.0) only a remoting client reaches.
SYSTEM_PROPERTIES = frozenset(
    [
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "ORIGIN_GROUP",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
        "_SYS_MSG_PRIORITY_",
        "__LITE_TOPIC",
        "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "__transactionId__",
        "INNER_MULTI_DISPATCH",
        "__SHARDINGKEY",
    ]
)
GRPC_SEND_PROPERTIES = frozenset({"TAGS", "KEYS", "UNIQ_KEY", "TIMER_DELIVER_MS"})
GRPC_SEEN_PROPERTIES = frozenset({"TAGS", "KEYS", "UNIQ_KEY"})
_ANSWER_CODES = frozenset({"SUCCESS", "PULL_NOT_FOUND", 0, 19})
_SYSTEM_TOPIC_NAMES = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "rmq_sys_wheel_timer",
    }
)


def wire_features(op: str, step: Mapping[str, Any]) -> set[Feature]:
    """What a step needs of the remoting protocol beyond what a 5.x gRPC client can do or see: a queue
    of its own choosing, reads by queue and offset, and the broker's own properties, flags and answers."""
    out: set[Feature] = set()
    args = step.get(op) or {}
    expect = step.get("expect")
    if not isinstance(args, Mapping):
        return out
    topic = args.get("topic")
    if isinstance(topic, str) and ("%" in topic or "|" in topic):
        out.add(Feature.REMOTING_DETAIL)  # the proxy reads "%" as a namespace separator
    for k, v in (args.get("props") or {}).items():
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in f"{k}{v}"):
            out.add(Feature.REMOTING_DETAIL)  # the proxy refuses control characters in properties
    if op in ("send", "send_half"):
        if args.get("queue", 0) not in (0, None):
            out.add(Feature.QUEUE_CHOICE)
        props = args.get("props") or {}
        if any(k in SYSTEM_PROPERTIES and k not in GRPC_SEND_PROPERTIES for k in props) or any(
            k in args
            for k in ("sys_flag", "flag", "born", "reconsume_times", "max_reconsume_times", "version")
        ):
            out.add(Feature.REMOTING_DETAIL)
    if op == "pull" and (
        args.get("queue", 0) != 0 or args.get("offset", 0) != 0 or args.get("topic") in _SYSTEM_TOPIC_NAMES
    ):
        out.add(Feature.PULL_OFFSET)
    if op == "max_offset":
        out.add(Feature.PULL_OFFSET)
    if op == "end_tx" and any(
        k in args
        for k in (
            "table_offset",
            "commit_log_offset",
            "table_offset_delta",
            "commit_log_offset_delta",
            "from_check",
            "group",
        )
    ):
        out.add(Feature.REMOTING_DETAIL)
    if (
        op == "checks"
        and isinstance(expect, list)
        and any(isinstance(c, Mapping) and ("check_times" in c or "new_offsets" in c) for c in expect)
    ):
        out.add(Feature.REMOTING_DETAIL)
    if isinstance(expect, Mapping):
        if ("code" in expect and expect["code"] not in _ANSWER_CODES) or "remark" in expect:
            out.add(Feature.REMOTING_DETAIL)
        if any(k in expect for k in ("next_begin_offset", "min_offset", "max_offset", "offset")):
            out.add(Feature.PULL_OFFSET)
        if expect.get("queue_id", 0) != 0:
            out.add(Feature.QUEUE_CHOICE)
        for m in expect.get("messages") or []:
            if not isinstance(m, Mapping):
                continue
            if any(
                k in m
                for k in ("sys_flag", "flag", "reconsume_times", "prepared_offset_of", "new_offset_from")
            ):
                out.add(Feature.REMOTING_DETAIL)
            if m.get("topic") in _SYSTEM_TOPIC_NAMES:
                out.add(Feature.PULL_OFFSET)
            if m.get("queue_id", 0) != 0:
                out.add(Feature.QUEUE_CHOICE)
            p = m.get("props") or {}
            if isinstance(p, Mapping) and any(
                k in SYSTEM_PROPERTIES and k not in GRPC_SEEN_PROPERTIES for k in p
            ):
                out.add(Feature.REMOTING_DETAIL)
    return out


# The smallest clock step a wall-clock suite can show: the steps around it come some milliseconds apart
# and a broker's clock runs on in between, so a smaller step back changes nothing the next step can see.
WALL_SKEW_RESOLUTION_MS = 1000


def _fine_skew(args: object) -> bool:
    """A ``skew`` step's change is finer than a wall clock shows (Feature.FINE_CLOCK)."""
    ms = args.get("ms", 0) if isinstance(args, Mapping) else 0
    return isinstance(ms, int) and abs(ms) < WALL_SKEW_RESOLUTION_MS


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
    # What the scenario needs of the settings beyond a level it names (``interval > timeout``): a
    # target whose settings do not meet one skips it, naming it (docs/scenarios.md).
    needs: tuple[str, ...] = ()
    # The releases the scenario's expected answers hold for (``releases: "5.0.0–5.1.0"``): ranges of one
    # line, first and last included. Empty: every release of its profile. A target of one release outside
    # them skips it; the model runs it as the last release of the last range (docs/spec-format.md).
    releases: tuple[tuple[str, str], ...] = ()

    def covers(self, release: str) -> bool:
        """The scenario's expected answers hold on ``release`` (True when it names no releases)."""
        if not self.releases:
            return True
        k = release_key(release)
        return any(release_key(a) <= k <= release_key(b) for a, b in self.releases)

    def release_skip(self, config: BrokerConfig | None) -> str | None:
        """Why a target of one release (``config.release`` set: a real broker) skips this scenario."""
        if config is None or config.release is None or self.covers(config.release):
            return None
        shown = ", ".join(a if a == b else f"{a}–{b}" for a, b in self.releases)
        return f"written for releases {shown} (the target is {config.release})"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "rules": list(self.rules),
            "config": dict(self.config),
            "profile": self.profile,
            "features": sorted(f.value for f in self.features),
            "logical_only": bool(self.features & LOGICAL_ONLY),
            "steps": [dict(s) for s in self.steps],
            "source": self.source,
            "needs": list(self.needs),
            "releases": [list(r) for r in self.releases],
        }

    def broker_config(self, base: BrokerConfig | None = None) -> BrokerConfig:
        """The settings the scenario runs with: its own ``config`` over ``base`` (default: the defaults)."""
        cfg = broker_config(self.config, self.profile, base)
        if self.releases and cfg.release is None and not self.covers(cfg.effective_release):
            # the model, free to be any release of its line: the scenario's newest
            cfg = attrs.evolve(cfg, release=self.releases[-1][1])
        return cfg

    def unmet_settings(self, target: BrokerConfig) -> str | None:
        """Why a broker with the fixed settings ``target`` cannot run this scenario (None: it can).

        A scenario's ``config`` names only the settings it really depends on (a broker that refuses to
        create topics, say); everything else it reads from the target through ``=EXPR`` values."""
        if self.profile is not None and Profile(self.profile) is not target.profile:
            return f"written for profile {self.profile} (the target's profile is {target.profile.value})"
        want = self.broker_config(target)
        for key in self.config:
            field = _CONFIG_KEYS[key]
            if getattr(want, field) != getattr(target, field):
                shown = want.describe() if field == "delay_levels" else getattr(want, field)
                has = target.describe() if field == "delay_levels" else getattr(target, field)
                # The fact only: what to do about it depends on the target, which says it once per run
                # (suite.run_wall's hints, from the target's CannotDeploy).
                return f"needs {key}={shown} (the target has {has})"
        return None


def broker_config(
    config: Mapping[str, Any], profile: str | None = None, base: BrokerConfig | None = None
) -> BrokerConfig:
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
    five_only = sorted(set(config) & FIVE_ONLY_KEYS)
    line = kwargs.get("profile", base.profile if base is not None else Profile.V4_9)
    if five_only and line is not Profile.V5:
        raise ScenarioError(f'{five_only[0]} is a 5.x setting: the scenario needs profile: "5.x"')
    try:
        return attrs.evolve(base, **kwargs) if base is not None else BrokerConfig(**kwargs)
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
        extra = [k for k in step if k not in OPS and k not in ("at", "as", "expect", "note", "until")]
        if len(ops) != 1 or extra:
            raise ScenarioError(
                f"{source}: step {i + 1} must have exactly one operation ({', '.join(OPS)}); "
                f"got {', '.join(map(str, step))}"
            )
        if "as" in step and not isinstance(step["as"], str):
            raise ScenarioError(
                f"{source}: step {i + 1}: 'as' must be a name, not {step['as']!r} (YAML reads on, off, yes and "
                "no as booleans: quote them)"
            )
        features.add(OPS[ops[0]])
        if ops[0] == "send" and "DELAY" in (step["send"] or {}).get("props", {}):
            features.add(Feature.DELAY)
        features |= wire_features(ops[0], step)
        if ops[0] == "skew" and _fine_skew(step["skew"]):
            features.add(Feature.FINE_CLOCK)
    for f in data.get("features", []):
        try:
            features.add(Feature(f))
        except ValueError:
            raise ScenarioError(f"{source}: unknown feature {f!r}") from None
    needs = data.get("needs", []) or []
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        raise ScenarioError(f"{source}: 'needs' is a list of comparisons such as \"interval > timeout\"")
    for text in needs:
        try:
            parse_need(text)
        except ExprError as e:
            raise ScenarioError(f"{source}: {e}") from None
    releases = parse_releases(data.get("releases"), source)
    sid = f"{rule}#{name}" if rule else (default_id or name)
    scenario = Scenario(
        id=sid,
        rules=tuple(dict.fromkeys(rules)),
        steps=tuple(steps),
        config=dict(data.get("config", {}) or {}),
        profile=data.get("profile"),
        features=frozenset(features),
        source=source,
        needs=tuple(needs),
        releases=releases,
    )
    line = broker_config({}, scenario.profile).profile
    for a, b in releases:
        for r in (a, b):
            if release_line(r) is not line:
                raise ScenarioError(f"{source}: release {r} is not of the scenario's profile ({line.value})")
    scenario.broker_config()  # validates the config now, naming the scenario
    return scenario


def parse_releases(raw: object, source: str) -> tuple[tuple[str, str], ...]:
    """A scenario's ``releases``: comma-separated releases (``5.1.1``) or ranges (``5.0.0–5.1.0``, an en
    dash or a hyphen), each range forwards; None gives ()."""
    if raw is None:
        return ()
    if not isinstance(raw, str) or not raw.strip():
        raise ScenarioError(f"{source}: 'releases' is a string such as \"5.0.0–5.1.0\"")
    out: list[tuple[str, str]] = []
    for item in (x.strip() for x in raw.split(",")):
        a, _, b = item.replace("–", "-").partition("-")
        a, b = a.strip(), (b.strip() or a.strip())
        try:
            if release_key(b) < release_key(a):
                raise ScenarioError(f"{source}: the release range {item!r} runs backwards")
        except ConfigError as e:
            raise ScenarioError(f"{source}: 'releases': {e}") from None
        out.append((a, b))
    return tuple(out)


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

    spec = spec or load_spec()
    scenarios = spec_scenarios(spec)
    known = {r.id for r in spec.rules}
    extra_dir = resources.files("rmqspec.conformance") / "catalogue"
    import yaml

    for entry in sorted(extra_dir.iterdir(), key=lambda p: p.name) if extra_dir.is_dir() else []:
        if not entry.name.endswith(".yaml"):
            continue
        docs = yaml.safe_load(entry.read_text(encoding="utf-8")) or []
        for doc in docs:
            made = make_scenario(doc, None, f"catalogue/{entry.name}", f"catalogue/{doc.get('name')}")
            unknown = [r for r in made.rules if r not in known]
            if unknown:
                raise ScenarioError(
                    f"catalogue/{entry.name}: scenario {made.id} names {', '.join(unknown)}, which no spec "
                    "file defines"
                )
            scenarios.append(made)
    ids = [s.id for s in scenarios]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ScenarioError(f"duplicate scenario ids: {', '.join(sorted(dupes))}")
    return scenarios


# Values that are one broker's own, not the spec's: its identity and names (facts §6). A scenario that
# expects one of them as a literal holds only on a broker named so; it reads the target's value instead
# (``=cluster``, scenario_expr.py), or pins the setting in its ``config`` (a broker with another value
# then skips it, saying so). By the property the broker always writes from a setting (CLUSTER replaces
# what the client sent, put/stored-properties; a 4.9 broker keeps a client's MSG_REGION, so that one is
# found by its value), and by the value itself: setting, and how a scenario reads it ("" where it cannot).
BROKER_VALUE_PROPS: dict[str, tuple[str, str]] = {
    "CLUSTER": ("brokerClusterName", "=cluster"),
}
BROKER_VALUES: dict[str, tuple[str, str]] = {
    "DefaultCluster": ("brokerClusterName", "=cluster"),
    "DefaultRegion": ("regionId", "=region"),
    "TBW102": ("the auto-create template topic (defaultTopic)", ""),
    "broker-a": ("brokerName", ""),
}


def portability_problems(scenario: Scenario) -> list[str]:
    """Where ``scenario`` expects a value its profile does not state (a broker's cluster, region, name
    or template topic as a literal), one line each: ``id step N: ...``."""
    out: list[str] = []

    def found(step: int, what: str, setting: str, expr: str) -> None:
        if setting not in scenario.config:
            fix = f"write {expr!r} (the target's own value)" if expr else "read it from the target's settings"
            out.append(f"{scenario.id} step {step}: expects {what}, one broker's {setting}: {fix}")

    def walk(value: Any, path: str, step: int) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                key = str(k)
                if key in BROKER_VALUE_PROPS and isinstance(v, str) and not v.startswith("="):
                    found(step, f"{key} {v!r}", *BROKER_VALUE_PROPS[key])
                else:
                    walk(v, f"{path}.{key}", step)
        elif isinstance(value, list | tuple):
            for n, v in enumerate(value):
                walk(v, f"{path}[{n}]", step)
        elif isinstance(value, str) and value in BROKER_VALUES:
            found(step, f"{value!r} at {path}", *BROKER_VALUES[value])

    for n, step in enumerate(scenario.steps, start=1):
        if "expect" in step:
            walk(step["expect"], "expect", n)
    return out


def dump(scenarios: Iterable[Scenario], path: Path | None = None) -> str:
    """The catalogue as language-neutral JSON (``rmqspec scenarios dump``)."""
    doc = {
        "format": "rmqspec-scenarios",
        "version": 2,
        "time_unit": "ms since scenario start",
        "codes": {c.name: int(c) for c in Code},
        "scenarios": [s.to_json() for s in scenarios],
    }
    text = json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False)
    if path is not None:
        path.write_text(text + "\n", encoding="utf-8")
    return text


if TYPE_CHECKING:
    from .scenario_run import Plan, ScenarioResult, StepFailure, dry_run, run_scenario  # noqa: F401


def __getattr__(name: str) -> Any:
    # The runner lives in .scenario_run (it imports this module); its names are reachable from here too.
    if name in ("run_scenario", "ScenarioResult", "StepFailure", "Plan", "dry_run"):
        from . import scenario_run

        return getattr(scenario_run, name)
    raise AttributeError(name)

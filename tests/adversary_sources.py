"""The accepted histories the adversary perturbs, each with how the history checker judges it: the
reference's own (generated on a logical clock, seeded), the good fixtures, the served and the real-broker
fixtures, each read with the settings its header names."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.conformance.checker import Verdict, check_history
from rmqspec.conformance.history import Event, load
from rmqspec.conformance.trace_gen import TRACE_CONFIG, generate_history
from rmqspec.reference.config import BrokerConfig, Profile, config_from_broker_conf

FIXTURES = Path(__file__).parent / "fixtures"
GENERATED_SEEDS = range(8)
GENERATED_EVENTS = 150

Judge = Callable[[Sequence[Event]], Verdict]


@attrs.frozen
class Source:
    name: str
    events: tuple[Event, ...]
    judge: Judge


def _judge_fixture(meta: dict[str, Any]) -> Judge:
    config = BrokerConfig(**meta.get("config", {}))
    eps = int(meta["epsilon_ms"])
    phase = meta.get("check_phase_ms", 0)
    return lambda events: check_history(events, config, epsilon_ms=eps, check_phase_ms=phase)


def _judge_broker(meta: dict[str, Any]) -> Judge:
    broker: dict[str, Any] = dict(meta["broker"])
    config = config_from_broker_conf(broker, Profile(broker.pop("profile")))
    eps = int(meta["epsilon_ms"])
    return lambda events: check_history(events, config, epsilon_ms=eps, shared=True)


@functools.cache
def sources() -> tuple[Source, ...]:
    out: list[Source] = []
    for seed in GENERATED_SEEDS:
        events = generate_history(seed, GENERATED_EVENTS, make_target=InProcessTarget)
        out.append(
            Source(
                f"reference-{seed}",
                tuple(events),
                lambda ev: check_history(ev, TRACE_CONFIG, epsilon_ms=100),
            )
        )
    for path in sorted((FIXTURES / "histories" / "good").glob("*.jsonl")):
        meta, events = load(path)
        out.append(Source(f"good/{path.stem}", tuple(events), _judge_fixture(meta)))
    for folder in ("real", "served"):
        for path in sorted((FIXTURES / folder).glob("*.jsonl")):
            meta, events = load(path)
            judge = _judge_broker(meta) if "broker" in meta else _judge_fixture(meta)
            out.append(Source(f"{folder}/{path.stem}", tuple(events), judge))
    return tuple(out)

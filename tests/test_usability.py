"""What a new user meets (issue 27): hints that are true and said once, plain output, exact errors."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from rich.console import Console

from rmqspec import commands
from rmqspec.adapters.apache import launcher
from rmqspec.adapters.inprocess import InProcessTarget
from rmqspec.adapters.remoting.deploy import FixedRemoting, settings_hint
from rmqspec.adapters.remoting.profile import TargetProfile
from rmqspec.conformance.contract import Feature, Target
from rmqspec.conformance.scenarios import Scenario, catalogue
from rmqspec.conformance.suite import Deployment, WallOptions, run_wall
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

SHORT = BrokerConfig("1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s")


@attrs.frozen
class _Main:
    """The main broker of a remoting:// target: nothing runs on it in these tests."""

    config: BrokerConfig
    can_restart: bool = False

    def target(self) -> Target:
        return InProcessTarget(Model(self.config))

    def restart_broker(self, graceful: bool) -> bool | None:
        return None

    def close(self) -> None:
        pass


@attrs.frozen
class _Fixed:
    """A remoting:// target as FixedRemoting is, but without a socket: every other setting is refused
    with FixedRemoting's own words."""

    remote: FixedRemoting

    @property
    def name(self) -> str:
        return self.remote.name

    @property
    def config(self) -> BrokerConfig:
        return self.remote.config

    @property
    def epsilon_ms(self) -> int:
        return 1000

    @property
    def features(self) -> frozenset[Feature]:
        return self.remote.features

    def open(self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False) -> Deployment:
        if config != self.config:
            self.remote.open(config)  # raises CannotDeploy
        return _Main(config)


def _needing_other_settings(base: BrokerConfig, features: frozenset[Feature]) -> Sequence[Scenario]:
    out = [
        s
        for s in catalogue()
        if s.config
        and s.features <= features
        and s.profile in (None, base.profile.value)
        and s.unmet_settings(base) is not None
    ]
    assert len(out) >= 3, "the catalogue has scenarios that need settings of their own"
    return out


def _report_text(rep: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    buf = io.StringIO()
    monkeypatch.setattr(commands, "_out", lambda: Console(file=buf, width=300, soft_wrap=True))
    commands._print_report(rep)
    return buf.getvalue()


def test_skips_for_settings_name_the_need_and_the_hint_is_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "running", lambda cache=None: [])
    remote = FixedRemoting(TargetProfile("broker.example", 10911, SHORT), "remoting://broker.example:10911")
    wanted = _needing_other_settings(SHORT, remote.features)
    rep = run_wall(_Fixed(remote), wanted, lambda cfg: InProcessTarget(Model(cfg)), WallOptions())
    skips = [r for r in rep.scenarios if r.outcome == "skip"]
    assert len(skips) == len(wanted)
    for r in skips:
        assert r.reason.startswith("needs ") and "(the target has " in r.reason, r.reason
        assert "rmqspec broker start" not in r.reason and "--set" not in r.reason
    assert len(rep.hints) == 1
    (hint,) = rep.hints
    # A broker rmqspec did not start: change its own configuration and the profile's `broker:` to match.
    assert "did not start" in hint and "broker.conf" in hint and "`broker:` section has KEY: VALUE" in hint
    assert "rmqspec broker start" not in hint and "--set" not in hint
    text = _report_text(rep, monkeypatch)
    assert text.count(hint) == 1
    assert text.count("SKIP ") == len(wanted)
    assert rep.to_json()["hints"] == [hint]


def test_hint_names_broker_start_only_for_a_broker_rmqspec_started(monkeypatch: pytest.MonkeyPatch) -> None:
    ours = launcher.BrokerState(
        "4.9.7", 4242, None, "127.0.0.1", 10911, None, "/tmp/rmqspec-broker-x", None, None, 0.0, False
    )
    monkeypatch.setattr(launcher, "running", lambda cache=None: [ours])
    hint = settings_hint(TargetProfile("localhost", 10911, SHORT))
    assert "was started by `rmqspec broker start`" in hint
    assert "rmqspec broker stop --store /tmp/rmqspec-broker-x" in hint
    assert "rmqspec broker start --version 4.9.7 --profile COPY --port 10911" in hint
    assert "--set" not in hint
    # Another port: a broker rmqspec did not start.
    other = settings_hint(TargetProfile("localhost", 10999, SHORT))
    assert "did not start" in other and "rmqspec broker start" not in other

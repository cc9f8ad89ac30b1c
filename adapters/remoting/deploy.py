"""Wall-clock suite targets over the remoting protocol: a broker someone else runs, and the reference
served in this process. Both implement ``rmqspec.conformance.suite.WallTarget``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.conformance.contract import Feature, Target, TargetError
from rmqspec.conformance.suite import CannotDeploy
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

from .profile import TargetProfile
from .server import BackgroundServer
from .target import FastForward, RemotingTarget


@attrs.define
class RemotingDeployment:
    """One broker at ``profile``'s address. ``restarter`` restarts it (a broker the suite started);
    ``skewer`` steps its clock (the served model's)."""

    profile: TargetProfile
    name: str
    restarter: Callable[[BrokerConfig | None], None] | None = None
    closer: Callable[[], None] | None = None
    skewer: Callable[[int], None] | None = None
    clock: Callable[[], int] | None = None  # the clock the broker and its clients share (served)
    fast: FastForward | None = None  # moves that clock forward (a served broker of its own)
    isolated: bool = False  # started empty for one scenario, nobody else on it (a served broker of its own)

    @property
    def config(self) -> BrokerConfig:
        return self.profile.config

    @property
    def can_restart(self) -> bool:
        return self.restarter is not None

    def target(self) -> Target:
        return RemotingTarget(
            self.profile,
            name=self.name,
            restarter=self.restarter,
            skewer=self.skewer,
            clock=self.clock,
            fast=self.fast,
            isolated=self.isolated,
        )

    def restart_broker(self, graceful: bool) -> bool | None:
        if self.restarter is None:
            raise TargetError(f"{self.name}: the suite cannot restart this broker")
        self.restarter(None)
        return None

    def close(self) -> None:
        if self.closer is not None:
            self.closer()
            self.closer = None


@attrs.frozen
class FixedRemoting:
    """``remoting://HOST:PORT``: a broker with fixed settings, as the profile declares them."""

    profile: TargetProfile
    name: str

    @property
    def config(self) -> BrokerConfig:
        return self.profile.config

    @property
    def epsilon_ms(self) -> int:
        return self.profile.epsilon_ms

    @property
    def features(self) -> frozenset[Feature]:
        return RemotingTarget.features_of(self.profile)

    def open(
        self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False
    ) -> RemotingDeployment:
        if config != self.profile.config:
            raise CannotDeploy(settings_hint(self.profile))
        return RemotingDeployment(self.profile, self.name)


def settings_hint(profile: TargetProfile) -> str:
    """What to do about a scenario a ``remoting://`` broker cannot run with its settings (the skip names
    the ``KEY=VALUE`` it needs): one text for the whole run. rmqspec changes no broker's settings; it can
    only say how, and ``rmqspec broker start`` is named only for a broker it started itself."""
    from rmqspec.adapters.apache.launcher import running

    local = {"127.0.0.1", "localhost", "::1"}
    ours = next(
        (
            s
            for s in running()
            if s.port == profile.port and (s.host == profile.host or {s.host, profile.host} <= local)
        ),
        None,
    )
    also = "; or run them on --target apache:VERSION or served, which start a broker with each scenario's settings"
    if ours is not None:
        return (
            f"the broker at {profile.host}:{profile.port} was started by `rmqspec broker start` "
            f"(Apache RocketMQ {ours.version}, store {ours.dir}) with the profile's settings: to run a "
            "scenario skipped as 'needs KEY=VALUE', put KEY: VALUE under `broker:` in a copy of the profile, "
            f"stop this broker (rmqspec broker stop --store {ours.dir}), start one with that profile "
            f"(rmqspec broker start --version {ours.version} --profile COPY --port {profile.port}) and run "
            f"conform again with --profile COPY{also}"
        )
    return (
        f"rmqspec does not change the settings of a broker it did not start: {profile.host}:{profile.port} "
        "is judged by what its profile declares under `broker:`, and that must be what the broker runs "
        "with. To run a scenario skipped as 'needs KEY=VALUE', set KEY=VALUE in that broker's own "
        "configuration (broker.conf), restart it, and pass a --profile whose `broker:` section has "
        f"KEY: VALUE{also}"
    )


@attrs.frozen
class Served:
    """``served`` / ``served:mutant:NAME``: ``rmqspec serve`` in this process on a free loopback port,
    judged over TCP exactly as a remote broker is; it can start another with other settings, and
    restart one (the model's restart, which keeps the store)."""

    profile: TargetProfile
    name: str
    model: Callable[[BrokerConfig], Model]

    @property
    def config(self) -> BrokerConfig:
        return self.profile.config

    @property
    def epsilon_ms(self) -> int:
        return self.profile.epsilon_ms

    @property
    def features(self) -> frozenset[Feature]:
        return RemotingTarget.features_of(self.profile) | {
            Feature.RESTART,
            Feature.OWN_BROKER,
            Feature.CLOCK_SKEW,
            Feature.FAST_FORWARD,
        }

    def open(
        self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False
    ) -> RemotingDeployment:
        wall = WallClockTarget(self.model(config), name=self.name)
        server = BackgroundServer(wall)
        host, port = server.__enter__()
        return RemotingDeployment(
            attrs.evolve(self.profile, host=host, port=port, config=config),
            self.name,
            restarter=wall.restart,
            closer=lambda: server.__exit__(None, None, None),
            skewer=wall.skew_clock if skewable else None,
            clock=wall.now,
            # the clock jumps for everyone on the broker: only on one a single scenario uses
            fast=ServedFastForward(wall) if exclusive else None,
            isolated=exclusive,
        )


# How long a check request the served broker sent at the end of a jump gets to reach its client (the server
# ticks every 5 ms) before the clock jumps on.
DELIVERY_WAIT_S = 0.05


@attrs.frozen
class ServedFastForward:
    """The served model's clock, moved forward at once (``FastForward``)."""

    wall: WallClockTarget

    def jump(self, to: int) -> None:
        """Leg by leg: each leg ends where the broker sends a check request, which then gets to arrive."""
        while self.wall.fast_forward(to):
            time.sleep(DELIVERY_WAIT_S)

    def next_check(self, limit: int) -> int | None:
        return self.wall.next_check(limit)

    def next_service(self, limit: int) -> int | None:
        return self.wall.next_service(limit)

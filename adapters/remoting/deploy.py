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
            raise CannotDeploy(
                "a remoting:// broker runs with the settings its profile declares; start one with the "
                "scenario's settings, or use an apache: or served target"
            )
        return RemotingDeployment(self.profile, self.name)


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

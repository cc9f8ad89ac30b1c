"""Wall-clock suite targets over the remoting protocol: a broker someone else runs, and the reference
served in this process. Both implement ``rmqspec.conformance.suite.WallTarget``.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.conformance.contract import Feature, Target, TargetError
from rmqspec.conformance.suite import CannotDeploy
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model

from .profile import TargetProfile
from .server import BackgroundServer
from .target import RemotingTarget


@attrs.define
class RemotingDeployment:
    """One broker at ``profile``'s address. ``restarter`` restarts it (a broker the suite started);
    ``skewer`` steps its clock (the served model's)."""

    profile: TargetProfile
    name: str
    restarter: Callable[[BrokerConfig | None], None] | None = None
    closer: Callable[[], None] | None = None
    skewer: Callable[[int], None] | None = None

    @property
    def config(self) -> BrokerConfig:
        return self.profile.config

    @property
    def can_restart(self) -> bool:
        return self.restarter is not None

    def target(self) -> Target:
        return RemotingTarget(self.profile, name=self.name, restarter=self.restarter, skewer=self.skewer)

    def restart_broker(self, graceful: bool) -> None:
        if self.restarter is None:
            raise TargetError(f"{self.name}: the suite cannot restart this broker")
        self.restarter(None)

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
        )

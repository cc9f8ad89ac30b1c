"""``apache:VERSION`` as a suite target: real Apache RocketMQ brokers that rmqspec starts, judges and stops.

The main broker runs with the profile's settings; a scenario that pins other settings gets a broker of
its own started with them; a scenario that restarts the broker gets one of its own too, so that nobody
else's operations are cut by the restart. Every broker is stopped when the suite is done with it.
Implements ``rmqspec.conformance.suite.WallTarget``.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from rmqspec.adapters.remoting.profile import ProfileError, TargetProfile, load_profile
from rmqspec.adapters.remoting.target import RemotingTarget
from rmqspec.conformance.contract import Feature, Target, TargetError
from rmqspec.conformance.suite import CannotDeploy
from rmqspec.reference.config import BrokerConfig

from . import clock
from .config import BrokerConfError, model_keys
from .launcher import ApacheBroker, BrokerError
from .versions import UnknownVersion, pinned


@attrs.define
class ApacheDeployment:
    """One started broker."""

    broker: ApacheBroker
    name: str
    timeout_s: float
    epsilon_ms: int

    @property
    def config(self) -> BrokerConfig:
        return self.broker.effective_config

    @property
    def can_restart(self) -> bool:
        return True

    def profile(self) -> TargetProfile:
        return self.broker.target_profile(timeout_s=self.timeout_s, epsilon_ms=self.epsilon_ms)

    def target(self) -> Target:
        skewer = self._skew if self.broker.faketime is not None else None
        return RemotingTarget(self.profile(), name=self.name, restarter=self._restart_with, skewer=skewer)

    def _skew(self, ms: int) -> None:
        try:
            self.broker.skew_clock(ms)
        except BrokerError as e:
            raise TargetError(str(e)) from None

    def _restart_with(self, config: BrokerConfig | None) -> None:
        try:
            self.broker.restart(config, graceful=True)
        except BrokerError as e:
            raise TargetError(str(e)) from None

    def restart_broker(self, graceful: bool) -> bool | None:
        try:
            self.broker.restart(graceful=graceful)
        except BrokerError as e:
            raise TargetError(str(e)) from None
        return self.broker.last_stop_orderly

    def close(self) -> None:
        self.broker.stop(graceful=False)  # its store is temporary: nothing to keep but the logs


@attrs.frozen
class ApacheTarget:
    """``apache:VERSION`` with a target profile (its ``broker:`` settings, epsilon and timeout)."""

    version: str
    profile: TargetProfile
    name: str
    boot_timeout_s: float = 90.0

    @property
    def config(self) -> BrokerConfig:
        return self.profile.config

    @property
    def epsilon_ms(self) -> int:
        return self.profile.epsilon_ms

    @property
    def features(self) -> frozenset[Feature]:
        skew = {Feature.CLOCK_SKEW} if self.can_skew else set()
        return RemotingTarget.features_of(self.profile) | {Feature.RESTART, Feature.OWN_BROKER} | skew

    @property
    def can_skew(self) -> bool:
        """A broker's clock can be stepped here: libfaketime is installed (clock.py)."""
        try:
            return clock.libfaketime() is not None
        except clock.ClockError:
            return False

    def open(
        self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False
    ) -> ApacheDeployment:
        line = pinned(self.version).line
        if config.profile is not line:
            raise CannotDeploy(
                f"Apache RocketMQ {self.version} is a {line.value} broker, not {config.profile.value}"
            )
        try:
            model_keys(config)  # the settings a real broker can be given
        except BrokerConfError as e:
            raise CannotDeploy(str(e)) from None
        try:
            broker = ApacheBroker(self.version, config, boot_timeout=self.boot_timeout_s, skewable=skewable)
        except BrokerError as e:
            raise CannotDeploy(str(e)) from None
        try:
            broker.start()
        except BrokerError as e:
            broker.stop(graceful=False)
            raise TargetError(str(e)) from None
        except BaseException:
            broker.stop(graceful=False)
            raise
        return ApacheDeployment(broker, self.name, self.profile.timeout_s, self.profile.epsilon_ms)


def apache_target(version: str, profile: Path | None) -> ApacheTarget:
    """The target ``apache:VERSION`` names; the profile's release line must be the version's."""
    try:
        row = pinned(version)
    except UnknownVersion as e:
        raise ValueError(str(e)) from None
    try:
        tp = load_profile(profile, "127.0.0.1:10911")
    except ProfileError as e:
        raise ValueError(str(e)) from None
    tp = attrs.evolve(tp, config=attrs.evolve(tp.config, profile=row.line, release=row.version))
    return ApacheTarget(row.version, tp, f"apache:{row.version}")

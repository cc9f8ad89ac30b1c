"""gRPC suite targets: ``grpc://HOST:PORT`` (a 5.x proxy someone else runs) and ``apache-proxy:VERSION``
(the real Apache RocketMQ proxy in local mode, embedding its broker, which rmqspec starts and stops).
Both implement ``rmqspec.conformance.suite.WallTarget``.
"""

from __future__ import annotations

import attrs

from rmqspec.conformance.contract import Feature, Target, TargetError
from rmqspec.conformance.suite import CannotDeploy
from rmqspec.reference.config import BrokerConfig, Profile

from .target import GRPC_FEATURES, GrpcProfile, GrpcTarget


class GrpcSpecError(ValueError):
    """A ``grpc://`` address or ``apache-proxy:`` version that cannot be used; says why."""


def parse_grpc(spec: str) -> tuple[str, int, tuple[str, int] | None]:
    """``grpc://HOST:PORT[?admin=HOST:PORT]``: the proxy, and the broker's remoting address (to create
    the topics a scenario uses; without it they must exist)."""
    rest = spec.removeprefix("grpc://")
    address, _, query = rest.partition("?")

    def hostport(text: str, what: str) -> tuple[str, int]:
        host, sep, port = text.strip("/").rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise GrpcSpecError(f"--target {spec!r}: {what} must be HOST:PORT with a port from 1 to 65535")
        return host, int(port)

    host, port = hostport(address, "the proxy address")
    admin = None
    if query:
        key, sep, value = query.partition("=")
        if key != "admin" or not sep:
            raise GrpcSpecError(
                f"--target {spec!r}: the only option is ?admin=HOST:PORT (the broker's remoting port)"
            )
        admin = hostport(value, "admin")
    return host, port, admin


@attrs.define
class GrpcDeployment:
    """One proxy: each scenario gets a fresh client (its own namespace, streams and consumer groups)."""

    profile: GrpcProfile
    name: str
    closer: object = None

    @property
    def config(self) -> BrokerConfig:
        return self.profile.config

    @property
    def can_restart(self) -> bool:
        return False

    def target(self) -> Target:
        return GrpcTarget(self.profile, self.name)

    def restart_broker(self, graceful: bool) -> bool | None:
        raise TargetError(f"{self.name}: the suite does not restart a broker behind a gRPC proxy")

    def close(self) -> None:
        stop = self.closer
        self.closer = None
        if callable(stop):
            stop()


@attrs.frozen
class FixedGrpc:
    """``grpc://HOST:PORT``: a proxy with fixed settings, as the profile declares them."""

    profile: GrpcProfile
    name: str

    @property
    def config(self) -> BrokerConfig:
        return self.profile.config

    @property
    def epsilon_ms(self) -> int:
        return self.profile.epsilon_ms

    @property
    def features(self) -> frozenset[Feature]:
        return GRPC_FEATURES

    def open(
        self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False
    ) -> GrpcDeployment:
        if config != self.profile.config:
            raise CannotDeploy(
                "rmqspec does not change the settings of a proxy's broker it did not start: a grpc:// "
                "target is judged by what its profile declares under `broker:`. To run a scenario skipped "
                "as 'needs KEY=VALUE', set KEY=VALUE in that broker's configuration, restart it, and pass a "
                "--profile whose `broker:` section has KEY: VALUE; or use --target apache-proxy:VERSION, "
                "which starts one with each scenario's settings"
            )
        return GrpcDeployment(self.profile, self.name)


@attrs.frozen
class ApacheProxyTarget:
    """``apache-proxy:VERSION``: the real proxy in local mode, its broker started with the settings."""

    version: str
    profile: GrpcProfile
    name: str
    boot_timeout_s: float = 120.0

    @property
    def config(self) -> BrokerConfig:
        return self.profile.config

    @property
    def epsilon_ms(self) -> int:
        return self.profile.epsilon_ms

    @property
    def features(self) -> frozenset[Feature]:
        return GRPC_FEATURES

    def open(
        self, config: BrokerConfig, *, exclusive: bool = False, skewable: bool = False
    ) -> GrpcDeployment:
        from rmqspec.adapters.apache.config import BrokerConfError, model_keys
        from rmqspec.adapters.apache.launcher import ApacheBroker, BrokerError

        if config.profile is not Profile.V5:
            raise CannotDeploy(
                f"the Apache RocketMQ {self.version} proxy serves a 5.x broker, not {config.profile.value}"
            )
        try:
            model_keys(config)
        except BrokerConfError as e:
            raise CannotDeploy(str(e)) from None
        broker = ApacheBroker(self.version, config, proxy=True, boot_timeout=self.boot_timeout_s)
        try:
            broker.start()
        except BrokerError as e:
            broker.stop(graceful=False)
            raise TargetError(str(e)) from None
        except BaseException:
            broker.stop(graceful=False)
            raise
        grpc_address = broker.grpc_address
        admin = broker.address
        assert grpc_address is not None and admin is not None
        prof = attrs.evolve(
            self.profile,
            host=grpc_address[0],
            port=grpc_address[1],
            admin=admin,
            config=broker.effective_config,
        )
        return GrpcDeployment(prof, self.name, closer=lambda: broker.stop(graceful=False))

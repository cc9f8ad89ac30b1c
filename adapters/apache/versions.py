"""The Apache RocketMQ versions rmqspec runs, pinned: one row per version, with what launching it takes.

Every version here is resolved from Maven Central by name (``org.apache.rocketmq:rocketmq-broker:<v>`` and
its runtime dependencies; see ``maven.py``); nothing else is downloaded. Adding a version is one row.
"""

from __future__ import annotations

import attrs

from rmqspec.reference.config import Profile

# Java 17 closes java.base to reflection; the 4.9.x store and Netty reach into these packages (mapped-file
# cleaning, the epoll selector's key set). jdk.internal.ref is needed to restart on an existing store.
OPENS_4_9: tuple[str, ...] = tuple(
    f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
    for pkg in ("java.nio", "sun.nio.ch", "java.lang", "java.util", "jdk.internal.ref", "jdk.internal.misc")
)


class UnknownVersion(ValueError):
    """A version that is not in the pinned table; the message lists the pinned ones."""


@attrs.frozen
class ApacheVersion:
    """One pinned Apache RocketMQ release and how to launch its broker."""

    version: str
    line: Profile  # the spec profile this release belongs to
    java_opts: tuple[str, ...]  # JVM flags the release needs on Java 17
    logging: (
        str  # which of our logback configs it reads: "4.9" (plain logback) or "5" (RocketMQ's shaded one)
    )
    proxy: bool  # rocketmq-proxy (gRPC) exists for this release
    mq_version: int  # MQVersion.Version ordinal: the "version" a client of this release puts in its headers
    notes: str

    @property
    def artifacts(self) -> tuple[str, ...]:
        """The Maven artifacts resolved for this version: the broker, and the proxy where there is one."""
        return ("rocketmq-broker", "rocketmq-proxy") if self.proxy else ("rocketmq-broker",)


PINNED: dict[str, ApacheVersion] = {
    v.version: v
    for v in (
        ApacheVersion(
            "4.9.7",
            Profile.V4_9,
            OPENS_4_9,
            "4.9",
            False,
            407,
            "The 4.9 line. 4.9.8, the version the default profile's facts were read at, is not on Maven "
            "Central (its metadata lists 4.9.0-4.9.5 and 4.9.7); 4.9.7 differs from 4.9.8 in the broker, "
            "store, common, remoting and client main sources only by AdminBrokerProcessor's config black list "
            "and MQVersion, so it stands for 4.9.8.",
        ),
        ApacheVersion(
            "5.5.0",
            Profile.V5,
            (),
            "5",
            True,
            513,
            "The newest 5.x that resolves from Maven Central (5.5.1 lacks rocketmq-client, -srvutil, -filter "
            "and -auth 5.5.1). Needs no --add-opens on Java 17 (booted, restarted after SIGTERM and after "
            "SIGKILL without them).",
        ),
    )
}
DEFAULT_VERSION = "4.9.7"


def pinned(version: str) -> ApacheVersion:
    """The pinned row of ``version``, or ``UnknownVersion`` naming the pinned ones."""
    try:
        return PINNED[version]
    except KeyError:
        known = ", ".join(PINNED)
        hint = " (4.9.8 is not on Maven Central: use 4.9.7)" if version == "4.9.8" else ""
        raise UnknownVersion(f"Apache RocketMQ {version!r} is not pinned{hint}; pinned: {known}") from None

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


def mq_version(version: str) -> int:
    """``MQVersion.Version.V<a>_<b>_<c>.ordinal()``: the enum lists a SNAPSHOT and a release per version, 4.9.0
    is ordinal 393 and 5.0.0 is 413, each minor of 5.x holding ten patch versions (common/MQVersion.java)."""
    major, minor, patch = (int(x) for x in version.split("."))
    if (major, minor) == (4, 9):
        return 393 + 2 * patch
    if major == 5:
        return 413 + 20 * minor + 2 * patch
    raise ValueError(f"no MQVersion ordinal known for {version!r}")


def _row(
    version: str,
    notes: str,
    *,
    java_opts: tuple[str, ...] | None = None,
    logging: str | None = None,
    proxy: bool | None = None,
) -> ApacheVersion:
    """A release of the 4.9 line (plain logback) or of 5.x (by default RocketMQ's shaded logback and the proxy
    beside the broker); by default with the --add-opens of OPENS_4_9: 5.1.1 needs them too (its broker, started
    again on its store, died with IllegalAccessError: UtilAll cannot access sun.nio.ch.DirectBuffer), and
    they are given to every 5.x before 5.5.0, which was shown to need none."""
    four = version.startswith("4.9.")
    return ApacheVersion(
        version,
        Profile.V4_9 if four else Profile.V5,
        OPENS_4_9 if java_opts is None else java_opts,
        ("4.9" if four else "5") if logging is None else logging,
        not four if proxy is None else proxy,
        mq_version(version),
        notes,
    )


BOOTED_4_9 = (
    "Booted on Java 17 with the 4.9 line's --add-opens and logback_broker.xml, answered a send and a pull "
    "(2026-11-27)."
)

PINNED: dict[str, ApacheVersion] = {
    v.version: v
    for v in (
        _row(
            "4.9.0",
            BOOTED_4_9,
        ),
        _row(
            "4.9.1",
            BOOTED_4_9,
        ),
        _row(
            "4.9.2",
            BOOTED_4_9,
        ),
        _row(
            "4.9.3",
            BOOTED_4_9,
        ),
        _row(
            "4.9.4",
            BOOTED_4_9,
        ),
        _row(
            "4.9.5",
            BOOTED_4_9,
        ),
        _row(
            "4.9.7",
            "The 4.9 line. 4.9.8, the version the default profile's facts were read at, is not on Maven "
            "Central (its metadata lists 4.9.0-4.9.5 and 4.9.7); 4.9.7 differs from 4.9.8 in the broker, "
            "store, common, remoting and client main sources only by AdminBrokerProcessor's config black list "
            "and MQVersion, so it stands for 4.9.8.",
        ),
        _row(
            "5.0.0",
            "Logs through plain logback from conf/logback_broker.xml as 4.9 does (its classpath has "
            "logback-classic 1.2.10, not RocketMQ's shaded one) and runs with the 4.9 --add-opens; booted on "
            "Java 17, answered a send and a pull (2026-11-27). Its proxy reads its home only from the "
            "environment (RMQ_PROXY_HOME) and logback from there (conf/logback_proxy.xml): with both it runs.",
            java_opts=OPENS_4_9,
            logging="4.9",
        ),
        _row("5.1.0", "Resolves (broker and proxy); RocketMQ's shaded logback from here on."),
        _row(
            "5.1.1",
            "Booted, answered the matrix's scenarios and ran its proxy (2026-11-27); started again on its store "
            "it needs the --add-opens of OPENS_4_9 (without them: IllegalAccessError, UtilAll cannot access "
            "sun.nio.ch.DirectBuffer).",
        ),
        _row("5.1.3", "Resolves (broker and proxy)."),
        _row(
            "5.1.4",
            "Broker only: rocketmq-proxy 5.1.4 is not on Maven Central (its metadata lists 5.0.0, 5.1.0, 5.1.1, 5.1.3, 5.2.0, 5.3.3, 5.4.0, 5.5.0).",
            proxy=False,
        ),
        _row(
            "5.2.0",
            "Ran the matrix's scenarios with the 4.9 --add-opens, restarts included, and its proxy "
            "(2026-11-27).",
        ),
        _row("5.3.0", "Broker only: rocketmq-proxy 5.3.0 is not on Maven Central.", proxy=False),
        _row("5.3.1", "Broker only: rocketmq-proxy 5.3.1 is not on Maven Central.", proxy=False),
        _row("5.3.2", "Broker only: rocketmq-proxy 5.3.2 is not on Maven Central.", proxy=False),
        _row("5.3.3", "Resolves (broker and proxy)."),
        _row("5.4.0", "Resolves (broker and proxy)."),
        _row(
            "5.5.0",
            "The newest 5.x that resolves from Maven Central (5.5.1 lacks rocketmq-client, -srvutil, -filter "
            "and -auth 5.5.1). Needs no --add-opens on Java 17 (booted, restarted after SIGTERM and after "
            "SIGKILL without them).",
            java_opts=(),
        ),
    )
}
# The releases `make test` runs its real-broker suite on (CI's 90 minutes); every pinned one runs in
# `make conform-matrix`.
SUITE: tuple[str, ...] = ("4.9.7", "5.5.0")
# Releases tried and not pinned, with why (issue 26): a release here is not run anywhere.
NOT_PINNED: dict[str, str] = {
    "4.9.6": "is not on Maven Central (rocketmq-broker's maven-metadata.xml lists no 4.9.6)",
    "4.9.8": "is not on Maven Central: use 4.9.7, which stands for it (see its row)",
    "5.1.2": "is not on Maven Central (rocketmq-broker's maven-metadata.xml lists no 5.1.2)",
    "5.3.4": "does not resolve: rocketmq-broker 5.3.4 is on Maven Central, but its rocketmq-remoting, -client, "
    "-srvutil, -filter, -auth and -tiered-store 5.3.4 are not",
    "5.5.1": "does not resolve: rocketmq-broker 5.5.1 is on Maven Central, but its rocketmq-client, -srvutil, "
    "-filter and -auth 5.5.1 are not (nor rocketmq-proxy 5.5.1)",
}
DEFAULT_VERSION = "4.9.7"


def pinned(version: str) -> ApacheVersion:
    """The pinned row of ``version``, or ``UnknownVersion`` naming the pinned ones."""
    try:
        return PINNED[version]
    except KeyError:
        known = ", ".join(PINNED)
        hint = f" ({version} {NOT_PINNED[version]})" if version in NOT_PINNED else ""
        raise UnknownVersion(f"Apache RocketMQ {version!r} is not pinned{hint}; pinned: {known}") from None

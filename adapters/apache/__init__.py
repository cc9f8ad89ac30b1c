"""Real Apache RocketMQ brokers as targets: pinned versions from Maven Central, started by rmqspec.

``ApacheBroker`` (launcher.py) starts one version on one store, in a network namespace of its own when it
can; ``maven.py`` resolves a version's jars into the cache; ``config.py`` writes broker.conf from the model's
``BrokerConfig``; ``versions.py`` is the pinned table.
"""

from .launcher import ApacheBroker, BrokerError, BrokerState, running, sweep
from .maven import ResolveError, cache_root, fetch, resolve
from .versions import DEFAULT_VERSION, PINNED, ApacheVersion, UnknownVersion, pinned

__all__ = [
    "DEFAULT_VERSION",
    "PINNED",
    "ApacheBroker",
    "ApacheVersion",
    "BrokerError",
    "BrokerState",
    "ResolveError",
    "UnknownVersion",
    "cache_root",
    "fetch",
    "pinned",
    "resolve",
    "running",
    "sweep",
]

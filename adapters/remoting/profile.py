"""Target profiles: what the suite must know about a broker it reaches over the wire.

A profile is a small YAML file (format version 1, documented in docs/guides/test-your-broker.md)::

    version: 1
    name: apache-rocketmq-4.9.4          # shown in reports
    address: 127.0.0.1:10911             # or give it with --target remoting://HOST:PORT
    profile: "4.9"                       # the spec profile the broker claims: "4.9" or "5.x"
    broker:                              # the broker's own settings, by their broker.conf names
      messageDelayLevel: "1s 2s 3s"
      transactionTimeOut: 3000
      transactionCheckInterval: 5000
      transactionCheckMax: 3
    lacks: [batch]                       # features the broker does not offer (their checks are skipped)
    timeout: 5                           # seconds for one request
    epsilon: 1000                        # ms a due message may be late before it is a violation

Settings left out have the broker's defaults (facts §6). A bad file gives a ``ProfileError`` naming the
file and the key.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

import attrs
import yaml

from rmqspec.conformance.contract import Feature
from rmqspec.reference.config import BrokerConfig, ConfigError, Profile, config_from_broker_conf

PROFILE_VERSION = 1
DEFAULT_PORT = 10911
_KEYS = {"version", "name", "address", "profile", "broker", "lacks", "timeout", "epsilon", "language"}


class ProfileError(ValueError):
    """A target profile or address that cannot be used; the message names the file and the problem."""


@attrs.frozen
class TargetProfile:
    host: str
    port: int
    config: BrokerConfig = attrs.field(factory=BrokerConfig)
    name: str | None = None
    lacks: frozenset[Feature] = frozenset()
    timeout_s: float = 5.0
    epsilon_ms: int = 1000
    language: str = "JAVA"


def parse_address(address: str, what: str = "address") -> tuple[str, int]:
    """``HOST:PORT`` (``HOST`` alone means port 10911)."""
    host, sep, port_text = address.strip().rpartition(":")
    if not sep:
        host, port_text = address.strip(), str(DEFAULT_PORT)
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ProfileError(f"{what} {address!r} is not HOST:PORT with a port from 1 to 65535")
    return host, int(port_text)


def shipped_profiles() -> dict[str, Path]:
    """The profiles that come with rmqspec (the checkout's profiles/, a wheel's package data), by name."""
    folder = importlib.resources.files("rmqspec") / "profiles"
    if not folder.is_dir():
        return {}
    return {
        Path(f.name).stem: Path(str(f))
        for f in sorted(folder.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".yaml")
    }


def resolve_profile(path: Path) -> Path:
    """``--profile``'s file: a path that exists, else a shipped profile by its name (``short-levels``,
    ``short-levels.yaml`` or the guides' ``profiles/short-levels.yaml``, from any folder)."""
    if path.exists() or path.parent not in (Path("."), Path("profiles")):
        return path
    name = path.name.removesuffix(".yaml")
    shipped = shipped_profiles()
    if name in shipped:
        return shipped[name]
    raise ProfileError(
        f"{path}: no such file, and no shipped profile {name!r} (shipped: {', '.join(shipped) or 'none'})"
    )


def load_profile(path: Path | None, address: str | None = None) -> TargetProfile:
    """The profile in ``path`` (None: all defaults; a name: a shipped profile), with ``address``
    (``HOST:PORT``) taking precedence."""
    data: dict[str, Any] = {}
    where = "target profile"
    if path is not None:
        path = resolve_profile(path)
        where = str(path)
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise ProfileError(f"{path}: cannot read: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ProfileError(f"{path}: not valid YAML: {e}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ProfileError(f"{path}: a profile is a mapping of keys such as 'broker' and 'address'")
        data = loaded
    unknown = sorted(set(map(str, data)) - _KEYS)
    if unknown:
        raise ProfileError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    if data.get("version", PROFILE_VERSION) != PROFILE_VERSION:
        raise ProfileError(f"{where}: version {data['version']!r} is not supported (this rmqspec reads 1)")
    addr = address or data.get("address")
    if not isinstance(addr, str):
        raise ProfileError(f"{where}: no address: give 'address: HOST:PORT' or --target remoting://HOST:PORT")
    host, port = parse_address(addr, f"{where}: address")
    try:
        profile = Profile(str(data.get("profile", "4.9")))
    except ValueError:
        raise ProfileError(f"{where}: profile {data.get('profile')!r} is not '4.9' or '5.x'") from None
    broker = data.get("broker") or {}
    if not isinstance(broker, dict):
        raise ProfileError(f"{where}: 'broker' must map broker.conf names to values")
    try:
        config = config_from_broker_conf({str(k): v for k, v in broker.items()}, profile)
    except ConfigError as e:
        raise ProfileError(f"{where}: broker: {e}") from None
    lacks_raw = data.get("lacks") or []
    if not isinstance(lacks_raw, list):
        raise ProfileError(f"{where}: 'lacks' must be a list of feature names")
    lacks: set[Feature] = set()
    for item in lacks_raw:
        try:
            lacks.add(Feature(str(item)))
        except ValueError:
            known = ", ".join(f.value for f in Feature)
            raise ProfileError(f"{where}: lacks: unknown feature {item!r} (known: {known})") from None
    timeout = data.get("timeout", 5)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ProfileError(f"{where}: timeout must be a number of seconds > 0, not {timeout!r}")
    epsilon = data.get("epsilon", 1000)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int) or epsilon < 0:
        raise ProfileError(f"{where}: epsilon must be whole milliseconds >= 0, not {epsilon!r}")
    name = data.get("name")
    language = data.get("language", "JAVA")
    if not isinstance(language, str) or not language:
        raise ProfileError(f"{where}: language must be a name such as JAVA")
    return TargetProfile(
        host,
        port,
        config,
        None if name is None else str(name),
        frozenset(lacks),
        float(timeout),
        epsilon,
        language,
    )

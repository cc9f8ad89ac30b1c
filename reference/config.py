"""Broker configuration of the model: the delay level table and the defaults of facts §6.

rule: config/delay-level-table, config/defaults
"""

from __future__ import annotations

import enum
import re
from typing import Any

import attrs

from .javanum import parse_int, parse_long

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# java.lang.String.trim() removes every character up to U+0020 (spaces and the ASCII controls).
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))


class ConfigError(ValueError):
    """A configuration value the broker would refuse; the message names the bad item."""


def java_split_on_space(text: str) -> list[str]:
    """``text.split(" ")`` as Java does it: no match gives ``[text]``; trailing empty strings are dropped."""
    parts = text.split(" ")
    if len(parts) == 1:
        return parts  # no separator in the text: the text itself, even when it is ""
    while parts and not parts[-1]:
        parts.pop()
    return parts


def _wrap_long(value: int) -> int:
    """A Java ``long`` product: wraps modulo 2**64 instead of growing."""
    return (value + 2**63) % 2**64 - 2**63


def parse_delay_levels(text: str, *, trim: bool = False) -> tuple[int, ...]:
    """``parseDelayLevel`` of ``messageDelayLevel`` (the value the broker holds) into delays in ms.

    Java: ``levelString.split(" ")``; per item the last character is the unit (s, m, h, d) and the rest
    goes to ``Long.parseLong`` (a sign is allowed: "+5s" is 5 s, "-5s" is -5000 ms), the delay is
    ``unit * number`` as a Java long. Level n is item n (1-based). A value of only spaces has no items: zero
    levels. Any exception (an empty item, a number Java refuses, an unknown unit) makes the parse fail and
    the broker does not load; the model raises ConfigError naming the item. ``trim``: 5.2.0 and later trim
    string settings when they load them (``MixAll.properties2Object``). rule: config/delay-level-table
    """
    if trim:
        text = text.strip(_JAVA_TRIM)
    delays: list[int] = []
    for index, item in enumerate(java_split_on_space(text), start=1):
        where = f"messageDelayLevel item {index} {item!r}"
        if not item:
            raise ConfigError(
                f"messageDelayLevel item {index} is empty (items are separated by single spaces): "
                "the broker's parseDelayLevel fails on it and the store does not load"
            )
        unit, digits = item[-1], item[:-1]
        number = parse_long(digits) if ord(unit) <= 0xFFFF else None  # Java cuts one UTF-16 unit
        if number is None:
            raise ConfigError(
                f"{where}: {digits!r} is not a number to Long.parseLong (the broker does not load)"
            )
        if unit not in _UNITS:
            raise ConfigError(f"{where}: unknown unit {unit!r} (use s, m, h or d; the broker does not load)")
        delays.append(_wrap_long(number * _UNITS[unit]))
    return tuple(delays)


class Profile(enum.Enum):
    """Which RocketMQ release line the model describes. 4.9.x is the default profile."""

    V4_9 = "4.9"
    V5 = "5.x"


# The release each line's profile follows when no finer release is named (facts §6).
LINE_RELEASE = {Profile.V4_9: "4.9.8", Profile.V5: "5.5.0"}
_RELEASE_RE = re.compile(r"^\d+\.\d+\.\d+$")


def release_key(release: str) -> tuple[int, int, int]:
    """``"5.1.1"`` as a comparable tuple; a ConfigError for anything that is not X.Y.Z."""
    if not _RELEASE_RE.match(release):
        raise ConfigError(f"{release!r} is not a release (X.Y.Z, e.g. 5.1.1)")
    a, b, c = (int(x) for x in release.split("."))
    return a, b, c


def release_line(release: str) -> Profile | None:
    """The profile a release belongs to: 4.9.x is the 4.9 line, 5.x.y the 5.x line; None for any other."""
    major, minor, _ = release_key(release)
    if (major, minor) == (4, 9):
        return Profile.V4_9
    return Profile.V5 if major == 5 else None


def _levels(value: str | tuple[int, ...], config: Any) -> tuple[int, ...]:
    """The level table from the setting; 5.x trims the text first (5.2.0+ ``properties2Object``)."""
    if isinstance(value, str):
        return parse_delay_levels(value, trim=config.profile is Profile.V5)
    return tuple(value)


def snap_timer_precision(value: int) -> int:
    """``MessageStoreConfig.setTimerPrecisionMs`` (5.x): the largest of 100, 200, 500 and 1000 ms that is not
    above the value, 100 for anything below 200. broker.conf goes through the setter (``properties2Object``),
    so the broker runs with the snapped value. rule: timer/precision
    """
    candidates = (100, 200, 500, 1000)
    for i in range(1, len(candidates)):
        if value < candidates[i]:
            return candidates[i - 1]
    return candidates[-1]


# TimerMessageStore: the wheel has TIMER_WHEEL_TTL_DAY * DAY_SECS slots whatever the precision; a roll
# window outside [2, slots - TIMER_BLANK_SLOTS] is replaced by slots - TIMER_BLANK_SLOTS.
TIMER_WHEEL_SLOTS = 7 * 24 * 3600
TIMER_BLANK_SLOTS = 60


def _check_interval_default(config: Any) -> int:
    """``transactionCheckInterval``: 60 s in 4.9.x; 30 s from 5.1.1 (BrokerConfig).

    rule: config/defaults, transaction/check-interval
    """
    return 30_000 if config.profile is Profile.V5 else 60_000


@attrs.frozen
class BrokerConfig:
    """Configuration that changes observable behaviour, with the defaults of the profile's release
    (4.9.8, or 5.5.0 for the 5.x profile; facts §6).

    rule: config/defaults
    """

    # Set first (keyword only) so that the fields below can depend on it.
    profile: Profile = attrs.field(default=Profile.V4_9, kw_only=True)
    # The exact release within the line, where behaviour differs inside it (a rule's Versions line names
    # a boundary such as 5.1.1). None: the release the line's profile follows (LINE_RELEASE). A real broker's
    # target sets its own release; a scenario with ``releases`` sets one it covers (docs/spec-format.md).
    release: str | None = attrs.field(default=None, kw_only=True)
    # mypy's attrs plugin does not know attrs.Converter; the parameter takes a str or a tuple of ms.
    delay_levels: tuple[int, ...] = attrs.field(
        default=DEFAULT_DELAY_LEVELS,
        converter=attrs.Converter(_levels, takes_self=True),  # type: ignore[misc]
    )
    transaction_timeout_ms: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval_ms: int = attrs.field(
        default=attrs.Factory(_check_interval_default, takes_self=True)
    )
    file_reserved_time_h: int = 72
    max_message_size: int = 4 * 1024 * 1024
    reject_transaction_message: bool = False
    auto_create_topic: bool = True
    auto_create_subscription_group: bool = True
    # BrokerConfig.defaultTopicQueueNums: the queue count of the template topic TBW102 (8). The
    # sender's own defaultTopicQueueNums (4 from the Java client) travels in each request.
    default_topic_queue_nums: int = 8
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_writable: bool = True
    cluster_name: str = "DefaultCluster"
    # BrokerConfig.regionId (MixAll.DEFAULT_TRACE_REGION_ID, both lines): what a send stores as MSG_REGION on
    # 5.x (put/stored-properties).
    region_id: str = "DefaultRegion"
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    # 5.x MessageStoreConfig timer settings (5.5.0 defaults); the 4.9 profile has no timer and ignores them.
    # rule: timer/disabled, timer/precision, timer/max-delay, timer/roll, timer/restart
    timer_wheel_enable: bool = True
    timer_precision_ms: int = attrs.field(default=1000, converter=snap_timer_precision)
    timer_max_delay_sec: int = 3 * 24 * 3600
    timer_roll_window_slot: int = 2 * 24 * 3600
    timer_flush_interval_ms: int = 1000

    def __attrs_post_init__(self) -> None:
        if self.release is not None and release_line(self.release) is not self.profile:
            raise ConfigError(f"release {self.release} is not of the {self.profile.value} line")

    @property
    def effective_release(self) -> str:
        """The release the model behaves as: ``release``, or the one the line's profile follows."""
        return self.release if self.release is not None else LINE_RELEASE[self.profile]

    def since(self, release: str) -> bool:
        """The model behaves as ``release`` or a later one (only meaningful within the profile's line)."""
        return release_key(self.effective_release) >= release_key(release)

    @property
    def max_delay_level(self) -> int:
        return len(self.delay_levels)

    def delay_ms(self, level: int) -> int | None:
        """Delay of a level, or None when the level is not in the table."""
        if 1 <= level <= len(self.delay_levels):
            return self.delay_levels[level - 1]
        return None

    def describe(self) -> str:
        return " ".join(_fmt(ms) for ms in self.delay_levels)

    @property
    def timer_roll_slots(self) -> int:
        """The roll window the timer runs with, in slots (``TimerMessageStore``'s bounds). rule: timer/roll"""
        limit = TIMER_WHEEL_SLOTS - TIMER_BLANK_SLOTS
        slots = self.timer_roll_window_slot
        return limit if slots > limit or slots < 2 else slots


def _fmt(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms // 1000}s"


# broker.conf names of the settings the model knows (BrokerConfig / MessageStoreConfig field names).
BROKER_CONF_KEYS: dict[str, str] = {
    "messageDelayLevel": "delay_levels",
    "transactionTimeOut": "transaction_timeout_ms",
    "transactionCheckMax": "transaction_check_max",
    "transactionCheckInterval": "transaction_check_interval_ms",
    "retryMaxTimes": "retry_max_times",
    "retryQueueNums": "retry_queue_nums",
    "rejectTransactionMessage": "reject_transaction_message",
    "autoCreateSubscriptionGroup": "auto_create_subscription_group",
    "autoCreateTopicEnable": "auto_create_topic",
    "fileReservedTime": "file_reserved_time_h",
    "maxMessageSize": "max_message_size",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "brokerClusterName": "cluster_name",
    "regionId": "region_id",
    "timerWheelEnable": "timer_wheel_enable",
    "timerPrecisionMs": "timer_precision_ms",
    "timerMaxDelaySec": "timer_max_delay_sec",
    "timerRollWindowSlot": "timer_roll_window_slot",
    "timerFlushIntervalMs": "timer_flush_interval_ms",
}
# Keys a 4.9.x broker does not have (MessageStoreConfig fields added in 5.0.0): a 4.9 profile refuses them.
FIVE_ONLY_KEYS = frozenset(
    {
        "timerWheelEnable",
        "timerPrecisionMs",
        "timerMaxDelaySec",
        "timerRollWindowSlot",
        "timerFlushIntervalMs",
    }
)


def conf_keys(profile: Profile) -> dict[str, str]:
    """The broker.conf names a broker of ``profile``'s release line reads, with the model's field names."""
    if profile is Profile.V5:
        return dict(BROKER_CONF_KEYS)
    return {k: v for k, v in BROKER_CONF_KEYS.items() if k not in FIVE_ONLY_KEYS}


_BOOL_FIELDS = {
    "reject_transaction_message",
    "auto_create_subscription_group",
    "auto_create_topic",
    "timer_wheel_enable",
}
# Settings the broker declares as Java long (Long.parseLong); the other numbers are int (Integer.parseInt).
_LONG_FIELDS = {"transaction_timeout_ms", "transaction_check_interval_ms"}


def config_from_broker_conf(values: dict[str, object], profile: Profile = Profile.V4_9) -> BrokerConfig:
    """A ``BrokerConfig`` from broker.conf-style settings; an unknown key or a bad value is a ConfigError.

    A number given as a string is read as ``MixAll.properties2Object`` reads it (``Integer.parseInt`` or
    ``Long.parseLong``: no spaces, no underscores). Where Java refuses the text the broker silently keeps
    its default; the model refuses the setting instead, saying so, rather than run with a value the file
    does not show.
    """
    kwargs: dict[str, object] = {"profile": profile}
    for key, value in values.items():
        field = BROKER_CONF_KEYS.get(key)
        if field is None:
            raise ConfigError(f"unknown setting {key!r} (known: {', '.join(sorted(BROKER_CONF_KEYS))})")
        if key in FIVE_ONLY_KEYS and profile is not Profile.V5:
            raise ConfigError(f'{key} is a 5.x setting (MessageStoreConfig\'s timer): use profile "5.x"')
        if field == "delay_levels":
            if not isinstance(value, str):
                raise ConfigError(f"{key} must be a string such as '1s 5s 10s', not {value!r}")
        elif field in ("cluster_name", "region_id"):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{key} must be a non-empty string, not {value!r}")
        elif field in _BOOL_FIELDS:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise ConfigError(f"{key} must be true or false, not {value!r}")
        else:
            if isinstance(value, str):
                parsed = parse_long(value) if field in _LONG_FIELDS else parse_int(value)
                if parsed is None:
                    raise ConfigError(
                        f"{key} {value!r} is not a number to Java "
                        f"({'Long.parseLong' if field in _LONG_FIELDS else 'Integer.parseInt'}): "
                        "a broker ignores the setting and keeps its default"
                    )
                value = parsed
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{key} must be a whole number >= 0, not {value!r}")
        kwargs[field] = value
    try:
        return BrokerConfig(**kwargs)  # type: ignore[arg-type]
    except TypeError as e:
        raise ConfigError(str(e)) from None

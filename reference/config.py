"""Broker configuration of the model: the delay level table and the defaults of facts §6.

rule: config/delay-level-table, config/defaults
"""

from __future__ import annotations

import enum

import attrs

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class ConfigError(ValueError):
    """A configuration value the broker would refuse; the message names the bad item."""


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """Parse ``messageDelayLevel`` (items split on single spaces, unit s/m/h/d last) into delays in ms.

    Level n is item n (1-based). The broker fails to load on an unknown unit; the model raises
    ConfigError naming the item. rule: config/delay-level-table
    """
    if not text.strip(" "):
        raise ConfigError("messageDelayLevel is empty: at least one level such as '1s' is required")
    delays: list[int] = []
    items = text.split(" ")
    while items and not items[-1]:  # Java's String.split drops trailing empty strings
        items.pop()
    for index, item in enumerate(items, start=1):
        if not item:
            raise ConfigError(
                f"messageDelayLevel item {index} is empty (items are separated by single spaces)"
            )
        unit = item[-1]
        if unit not in _UNITS:
            raise ConfigError(
                f"messageDelayLevel item {index} {item!r}: unknown unit {unit!r} (use s, m, h or d)"
            )
        number = item[:-1]
        if not number.isdigit():
            raise ConfigError(f"messageDelayLevel item {index} {item!r}: {number!r} is not a whole number")
        delays.append(int(number) * _UNITS[unit])
    return tuple(delays)


class Profile(enum.Enum):
    """Which RocketMQ release line the model describes. 4.9.x is the default profile."""

    V4_9 = "4.9"
    V5 = "5.x"


def _levels(value: str | tuple[int, ...]) -> tuple[int, ...]:
    return parse_delay_levels(value) if isinstance(value, str) else tuple(value)


@attrs.frozen
class BrokerConfig:
    """Configuration that changes observable behaviour, with the 4.9.8 defaults (facts §6).

    rule: config/defaults
    """

    delay_levels: tuple[int, ...] = attrs.field(default=DEFAULT_DELAY_LEVELS, converter=_levels)
    profile: Profile = Profile.V4_9
    transaction_timeout_ms: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval_ms: int = 60_000
    file_reserved_time_h: int = 72
    max_message_size: int = 4 * 1024 * 1024
    reject_transaction_message: bool = False
    auto_create_topic: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 4
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_writable: bool = True
    cluster_name: str = "DefaultCluster"
    store_host: tuple[str, int] = ("127.0.0.1", 10911)

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


def _fmt(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms // 1000}s"

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
    # 60 s on 4.9.8; 30 s from 5.1.1 (the 5.x profile, 5.5.0). rule: transaction/check-interval
    transaction_check_interval_ms: int = attrs.field(
        default=attrs.Factory(lambda self: 30_000 if self.profile is Profile.V5 else 60_000, takes_self=True)
    )
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
}
_BOOL_FIELDS = {"reject_transaction_message", "auto_create_subscription_group", "auto_create_topic"}


def config_from_broker_conf(values: dict[str, object], profile: Profile = Profile.V4_9) -> BrokerConfig:
    """A ``BrokerConfig`` from broker.conf-style settings; an unknown key or a bad value is a ConfigError."""
    kwargs: dict[str, object] = {"profile": profile}
    for key, value in values.items():
        field = BROKER_CONF_KEYS.get(key)
        if field is None:
            raise ConfigError(f"unknown setting {key!r} (known: {', '.join(sorted(BROKER_CONF_KEYS))})")
        if field == "delay_levels":
            if not isinstance(value, str):
                raise ConfigError(f"{key} must be a string such as '1s 5s 10s', not {value!r}")
        elif field == "cluster_name":
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{key} must be a non-empty string, not {value!r}")
        elif field in _BOOL_FIELDS:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise ConfigError(f"{key} must be true or false, not {value!r}")
        else:
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{key} must be a whole number >= 0, not {value!r}")
        kwargs[field] = value
    try:
        return BrokerConfig(**kwargs)  # type: ignore[arg-type]
    except TypeError as e:
        raise ConfigError(str(e)) from None

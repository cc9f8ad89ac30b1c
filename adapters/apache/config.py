"""broker.conf for a real Apache RocketMQ broker, generated from the model's ``BrokerConfig``.

Every setting the model knows (``reference.config.BROKER_CONF_KEYS``) is written out explicitly, so the
broker and the profile the suite judges it by cannot disagree; rmqspec's fixed keys (names, role, flush, paths,
address) follow. After the broker starts, ``check_logged`` compares the file with the values the broker logs
back at start (every 4.9/5.x broker prints its whole configuration, ``key=value``, to its log).

Two model settings are not broker.conf keys: ``retryMaxTimes`` and ``retryQueueNums`` belong to each
subscription group (``SubscriptionGroupConfig``, defaults 16 and 1). They are not written; the suite's
remoting client creates each group it uses with the config's values before the broker would create it
with its defaults (``RemotingTarget._make_group``, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.state import GroupConfig

from .versions import ApacheVersion

BROKER_NAME = "broker-a"
COMMIT_LOG_FILE_SIZE = 64 * 1024 * 1024  # small commit-log files: a fresh store starts fast
SEND_QUEUE_WAIT_MS = 3000  # BrokerConfig.waitTimeMillsInSendQueue (4.9.x and 5.x; default 200)
PERM_READ, PERM_WRITE = 4, 2
# Subscription-group settings of the model, with the broker's defaults (SubscriptionGroupConfig).
# Keys not compared with what the broker runs with (none today).
_NOT_LOGGED: frozenset[str] = frozenset()


class BrokerConfError(ValueError):
    """A configuration a real broker cannot be given; the message names the setting."""


def _bool(value: bool) -> str:
    return "true" if value else "false"


# SubscriptionGroupConfig's defaults (4.9.7, 5.5.0): what a broker gives a group it creates by itself.
GROUP_KEYS = {"retry_max_times": "retryMaxTimes", "retry_queue_nums": "retryQueueNums"}


def group_settings(config: BrokerConfig) -> list[str]:
    """The subscription-group settings of ``config`` a broker would not give its groups by itself
    (``key=value``): no broker.conf key sets them; only a client that creates its groups can."""
    defaults = GroupConfig()  # SubscriptionGroupConfig's, as the model states them
    return [
        f"{key}={getattr(config, field)}"
        for field, key in GROUP_KEYS.items()
        if getattr(config, field) != getattr(defaults, field)
    ]


def model_keys(config: BrokerConfig) -> dict[str, str]:
    """The model's settings as broker.conf keys and values (the ones a broker reads at start)."""
    # retryQueueNums and retryMaxTimes are no broker.conf keys but each subscription group's
    # (SubscriptionGroupConfig): the suite's client creates the groups it uses with the config's values
    # (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, adapters/remoting/target.py), so they are not written here.
    for level, ms in enumerate(config.delay_levels, start=1):
        if ms % 1000:
            raise BrokerConfError(
                f"delay level {level} is {ms} ms: messageDelayLevel items are whole seconds, minutes, hours or days"
            )
    keys = {
        "brokerClusterName": config.cluster_name,
        "regionId": config.region_id,
        # No level at all: one blank, which ScheduleMessageService.parseDelayLevel splits into no items
        # (an empty value would fail its parse, and the broker would not start), config/delay-level-table.
        "messageDelayLevel": config.describe() or " ",
        "transactionTimeOut": str(config.transaction_timeout_ms),
        "transactionCheckInterval": str(config.transaction_check_interval_ms),
        "transactionCheckMax": str(config.transaction_check_max),
        "rejectTransactionMessage": _bool(config.reject_transaction_message),
        "autoCreateTopicEnable": _bool(config.auto_create_topic),
        "autoCreateSubscriptionGroup": _bool(config.auto_create_subscription_group),
        "maxMessageSize": str(config.max_message_size),
        "defaultTopicQueueNums": str(config.default_topic_queue_nums),
        "fileReservedTime": str(config.file_reserved_time_h),
        "brokerPermission": str(PERM_READ | (PERM_WRITE if config.broker_writable else 0)),
    }
    if config.profile is Profile.V5:  # MessageStoreConfig's timer (5.0.0+); a 4.9 broker has none
        keys.update(
            {
                "timerWheelEnable": _bool(config.timer_wheel_enable),
                "timerPrecisionMs": str(config.timer_precision_ms),
                "timerMaxDelaySec": str(config.timer_max_delay_sec),
                "timerRollWindowSlot": str(config.timer_roll_window_slot),
                "timerFlushIntervalMs": str(config.timer_flush_interval_ms),
            }
        )
    return keys


def broker_conf(
    config: BrokerConfig, *, version: ApacheVersion, host: str, port: int, store: Path
) -> dict[str, str]:
    """Every key of the broker.conf rmqspec writes, in file order (``version`` for keys a line adds)."""
    del version  # the keys follow the config's release line (its profile), which the version's must be
    if not 3 <= port <= 65534:
        raise BrokerConfError(f"port {port}: the broker also listens on port-2 and port+1, so use 3-65534")
    conf = model_keys(config)
    conf.update(
        {
            "brokerName": BROKER_NAME,
            "brokerId": "0",
            "brokerIP1": host,
            "listenPort": str(port),
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "storePathRootDir": str(store),
            "storePathCommitLog": str(store / "commitlog"),
            "mappedFileSizeCommitLog": str(COMMIT_LOG_FILE_SIZE),
            # A send waits up to this long in the broker's send queue before it is answered SYSTEM_BUSY
            # ([TIMEOUT_CLEAN_QUEUE], default 200 ms): with 16 scenarios at once on a 2-core machine the
            # default refused sends no rule is about. Flow control is outside the spec.
            "waitTimeMillsInSendQueue": str(SEND_QUEUE_WAIT_MS),
        }
    )
    return conf


def _escape(value: str) -> str:
    # java.util.Properties: a backslash escapes, leading blanks are dropped, a line ends the value.
    if "\n" in value or "\r" in value:
        raise BrokerConfError(f"a broker.conf value cannot hold a line break: {value!r}")
    out = value.replace("\\", "\\\\")
    return "\\" + out if out[:1] in (" ", "\t", "\f") else out


def render(conf: Mapping[str, str], header: str = "") -> str:
    """The text of a broker.conf (java.util.Properties format)."""
    lines = [f"# {ln}" for ln in header.splitlines()]
    lines += [f"{k}={_escape(v)}" for k, v in conf.items()]
    return "\n".join(lines) + "\n"


_LOGGED = re.compile(r" RocketmqBroker - ([A-Za-z][A-Za-z0-9_.]*)=(.*)$")


def logged_values(log_text: str) -> dict[str, list[str]]:
    """Every ``key=value`` line the broker logged (a key the broker prints twice keeps both values)."""
    out: dict[str, list[str]] = {}
    for line in log_text.splitlines():
        m = _LOGGED.search(line)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2))
    return out


def parse_properties_text(text: str) -> dict[str, str]:
    """The ``key=value`` lines of a GET_BROKER_CONFIG body (``MixAll.properties2String``: no escaping)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and not key.startswith("#"):
            out[key] = value
    return out


def check_logged(conf: Mapping[str, str], log_text: str, wire: Mapping[str, str] | None = None) -> list[str]:
    """The keys whose value the broker runs with differs from ``conf`` (or cannot be found), one line each.

    The broker's log is read first: it prints every field of its config objects, so a key it does not know
    is not there. 5.x prints only the fields a class declares, not the inherited ``BrokerIdentity`` ones
    (brokerClusterName, brokerName, brokerId); those are looked up in ``wire``, the broker's answer to
    GET_BROKER_CONFIG (where a field's live value overrides what the file said).
    """
    seen = logged_values(log_text)
    problems: list[str] = []
    for key, want in conf.items():
        if key in _NOT_LOGGED:
            continue
        got = seen.get(key)
        if got is None and wire is not None and key in wire:
            got = [wire[key]]
        if got is None:
            problems.append(f"{key}: broker.conf says {want!r}, the broker did not log it")
        elif want not in got:
            problems.append(f"{key}: broker.conf says {want!r}, the broker runs with {got[-1]!r}")
    return problems

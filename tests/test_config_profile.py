"""broker.conf settings into a ``BrokerConfig`` (reference/config.py), without a broker.

A broker.conf is a Java properties file: every value arrives as a string ("true", "6000"), and a
profile may also give real booleans and numbers. The defaults and the level table are those of facts §3.1
and §6.
"""

from __future__ import annotations

import pytest

from rmqspec.reference.config import (
    DEFAULT_DELAY_LEVELS,
    BrokerConfig,
    ConfigError,
    Profile,
    config_from_broker_conf,
    parse_delay_levels,
)


def test_every_broker_conf_key_reaches_its_field() -> None:
    cfg = config_from_broker_conf(
        {
            "messageDelayLevel": "1s 2m 3h 1d",
            "transactionTimeOut": "3000",
            "transactionCheckMax": 3,
            "transactionCheckInterval": "5000",
            "retryMaxTimes": "2",
            "retryQueueNums": "0",  # facts §4.1 step 3: 0 is meaningful (send-back drops the message)
            "rejectTransactionMessage": "TRUE",
            "autoCreateSubscriptionGroup": "false",
            "autoCreateTopicEnable": False,
            "fileReservedTime": "48",
            "maxMessageSize": 1024,
            "defaultTopicQueueNums": "8",
            "brokerClusterName": "C1",
        },
        Profile.V5,
    )
    assert cfg.delay_levels == (1000, 120_000, 10_800_000, 86_400_000)
    assert cfg.profile is Profile.V5
    assert (cfg.transaction_timeout_ms, cfg.transaction_check_max, cfg.transaction_check_interval_ms) == (
        3000,
        3,
        5000,
    )
    assert (cfg.retry_max_times, cfg.retry_queue_nums) == (2, 0)
    assert cfg.reject_transaction_message is True
    assert cfg.auto_create_subscription_group is False and cfg.auto_create_topic is False
    assert (cfg.file_reserved_time_h, cfg.max_message_size, cfg.default_topic_queue_nums) == (48, 1024, 8)
    assert cfg.cluster_name == "C1"


def test_an_empty_conf_gives_the_4_9_8_defaults() -> None:
    """Facts §6: the defaults of BrokerConfig / MessageStoreConfig."""
    cfg = config_from_broker_conf({})
    assert cfg == BrokerConfig()
    assert cfg.profile is Profile.V4_9
    assert (cfg.transaction_timeout_ms, cfg.transaction_check_max, cfg.transaction_check_interval_ms) == (
        6000,
        15,
        60_000,
    )
    assert cfg.max_delay_level == 18


@pytest.mark.parametrize("value", ["true", "True", True])
def test_true_in_any_case(value: object) -> None:
    assert config_from_broker_conf({"rejectTransactionMessage": value}).reject_transaction_message is True


@pytest.mark.parametrize("value", ["false", "FALSE", False])
def test_false_in_any_case(value: object) -> None:
    cfg = config_from_broker_conf({"autoCreateTopicEnable": value})
    assert cfg.auto_create_topic is False


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rejectTransactionMessage", "yes"),
        ("rejectTransactionMessage", 1),
        ("transactionTimeOut", "-1"),
        ("transactionTimeOut", -5),
        ("transactionTimeOut", True),
        ("transactionTimeOut", "6s"),
        ("transactionTimeOut", 1.5),
        ("messageDelayLevel", 5),
        ("messageDelayLevel", "1s 5x"),
        ("brokerClusterName", ""),
        ("brokerClusterName", 7),
        ("noSuchSetting", "1"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key if key != "messageDelayLevel" or value == 5 else "item 2"):
        config_from_broker_conf({key: value})


@pytest.mark.parametrize(("key", "value"), [("fileReservedTime", " 48 "), ("transactionTimeOut", "3_000")])
def test_numbers_java_cannot_read_are_refused(key: str, value: str) -> None:
    """MixAll.properties2Object: Integer.parseInt / Long.parseLong of the text; when Java refuses it the
    broker keeps its default without a word, so the model refuses the setting and says why."""
    with pytest.raises(ConfigError, match=f"{key} .*keeps its default"):
        config_from_broker_conf({key: value})


def test_zero_is_a_whole_number() -> None:
    assert config_from_broker_conf({"transactionCheckMax": "0"}).transaction_check_max == 0
    assert config_from_broker_conf({"maxMessageSize": 0}).max_message_size == 0


def test_delay_levels_and_their_description() -> None:
    """Facts §3.1: the default table, level n = item n, units s/m/h/d."""
    cfg = BrokerConfig()
    assert cfg.describe() == DEFAULT_DELAY_LEVELS
    assert [cfg.delay_ms(n) for n in (0, 1, 2, 5, 17, 18, 19)] == [
        None,
        1000,
        5000,
        60_000,
        3_600_000,
        7_200_000,
        None,
    ]
    assert BrokerConfig("1d 2h 3m 90s 4s").describe() == "1d 2h 3m 90s 4s"


def test_the_default_profiles_follow_their_release() -> None:
    """transactionCheckInterval is 60 s in 4.9.8 and 30 s in 5.5.0 (BrokerConfig, 30 s since 5.1.1);
    TBW102 has BrokerConfig.defaultTopicQueueNums = 8 queues in both."""
    assert BrokerConfig().transaction_check_interval_ms == 60_000
    assert BrokerConfig(profile=Profile.V5).transaction_check_interval_ms == 30_000
    assert config_from_broker_conf({}, Profile.V5).transaction_check_interval_ms == 30_000
    assert (
        BrokerConfig(profile=Profile.V5, transaction_check_interval_ms=5000).transaction_check_interval_ms
        == 5000
    )
    assert BrokerConfig().default_topic_queue_nums == 8


def test_trailing_spaces_are_dropped_like_java_split() -> None:
    assert parse_delay_levels("1s 5s ") == (1000, 5000)
    assert parse_delay_levels("1s 5s  ") == (1000, 5000)
    with pytest.raises(ConfigError, match="item 2 is empty"):
        parse_delay_levels("1s  5s")
    with pytest.raises(ConfigError, match="item 3"):
        parse_delay_levels("1s 5s 7")


# --- messageDelayLevel as ScheduleMessageService.parseDelayLevel reads it (4.9.0-4.9.8, 5.0.0-5.5.0) --------


def test_a_sign_is_part_of_the_number() -> None:
    """Long.parseLong accepts a leading sign: "+5s" is 5 s, "-5s" is -5000 ms (due as soon as it is stored)."""
    assert parse_delay_levels("+5s -5s -0s") == (5000, -5000, 0)


def test_only_spaces_is_a_table_without_levels() -> None:
    """A value "   " splits into an empty array in Java (trailing empty strings dropped): the parse succeeds with
    zero levels. "" does not split at all: one empty item, and the broker does not load."""
    assert parse_delay_levels("   ") == ()
    assert BrokerConfig("   ").max_delay_level == 0
    with pytest.raises(ConfigError, match="item 1 is empty"):
        parse_delay_levels("")


@pytest.mark.parametrize(
    ("text", "item"),
    [
        (" 1s", "item 1 is empty"),  # a leading space makes an empty first item
        ("1s \u00b2s", "item 2 '\u00b2s'"),  # SUPERSCRIPT TWO is not a digit to Java
        ("1s 5_0s", "item 2 '5_0s'"),
        ("1s 3 s", "item 2 '3'"),
        ("1s s", "item 2 's'"),
        ("1s 5x", "unknown unit 'x'"),
    ],
)
def test_items_the_broker_cannot_load_are_named(text: str, item: str) -> None:
    with pytest.raises(ConfigError, match=item):
        parse_delay_levels(text)


def test_unicode_digits_are_numbers_and_the_product_wraps_like_a_java_long() -> None:
    assert parse_delay_levels("\u0665s") == (5000,)  # ARABIC-INDIC DIGIT FIVE
    # 9223372036854775807 * 1000 overflows a long: Java keeps the low 64 bits.
    assert parse_delay_levels("9223372036854775807s") == (-1000,)


def test_five_x_trims_the_setting_before_parsing() -> None:
    """5.2.0 and later trim String settings when they load them (MixAll.properties2Object), so outer
    spaces never reach parseDelayLevel; a value of only spaces becomes "" and the broker does not load."""
    assert BrokerConfig(" 1s 5s ", profile=Profile.V5).delay_levels == (1000, 5000)
    with pytest.raises(ConfigError, match="item 1 is empty"):
        BrokerConfig(" 1s 5s", profile=Profile.V4_9)
    with pytest.raises(ConfigError, match="item 1 is empty"):
        BrokerConfig("   ", profile=Profile.V5)

"""broker.conf generation, the readback check, the pinned table and the Maven cache (no broker, no Maven)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmqspec.adapters.apache import maven
from rmqspec.adapters.apache.config import (
    BrokerConfError,
    broker_conf,
    check_logged,
    logged_values,
    model_keys,
    parse_properties_text,
    render,
)
from rmqspec.adapters.apache.launcher import ApacheBroker, BrokerError, BrokerState, pid_alive
from rmqspec.adapters.apache.netns import Netns
from rmqspec.adapters.apache.versions import DEFAULT_VERSION, PINNED, UnknownVersion, pinned
from rmqspec.adapters.remoting.profile import load_profile
from rmqspec.reference.config import (
    BROKER_CONF_KEYS,
    FIVE_ONLY_KEYS,
    BrokerConfig,
    Profile,
    conf_keys,
    config_from_broker_conf,
)

REPO = Path(__file__).resolve().parents[1]
SHORT = REPO / "profiles" / "short-levels.yaml"
V497 = PINNED["4.9.7"]


def conf_of(config: BrokerConfig, host: str = "10.213.1.2", port: int = 10911) -> dict[str, str]:
    return broker_conf(config, version=V497, host=host, port=port, store=Path("/s/store"))


def test_the_short_levels_profile_becomes_the_broker_conf_it_names() -> None:
    config = load_profile(SHORT, "127.0.0.1:10911").config
    conf = conf_of(config)
    assert conf["messageDelayLevel"] == " ".join(f"{n}s" for n in range(1, 19))
    assert conf["transactionTimeOut"] == "3000"
    assert conf["transactionCheckInterval"] == "5000"
    assert conf["transactionCheckMax"] == "3"
    assert conf["autoCreateTopicEnable"] == "true" and conf["autoCreateSubscriptionGroup"] == "true"
    assert conf["brokerIP1"] == "10.213.1.2" and conf["listenPort"] == "10911"
    assert conf["brokerRole"] == "ASYNC_MASTER" and conf["flushDiskType"] == "ASYNC_FLUSH"
    assert conf["brokerId"] == "0" and conf["brokerName"] == "broker-a"
    assert conf["storePathRootDir"] == "/s/store" and conf["storePathCommitLog"] == "/s/store/commitlog"
    assert int(conf["mappedFileSizeCommitLog"]) == 64 * 1024 * 1024


def test_every_model_default_is_written_out_so_the_broker_cannot_fall_back_to_its_own() -> None:
    keys = model_keys(BrokerConfig())
    # Every broker.conf key the model knows, except the two subscription-group settings (checked below).
    assert set(keys) >= set(conf_keys(Profile.V4_9)) - {"retryMaxTimes", "retryQueueNums"}
    assert keys["transactionCheckInterval"] == "60000"  # the 4.9 default; a 5.x broker's own is 30000
    assert keys["defaultTopicQueueNums"] == str(BrokerConfig().default_topic_queue_nums)
    assert keys["brokerPermission"] == "6"
    assert model_keys(BrokerConfig(broker_writable=False))["brokerPermission"] == "4"
    assert not set(keys) & FIVE_ONLY_KEYS  # a 4.9 broker has no timer


def test_a_five_broker_gets_the_timer_settings_too() -> None:
    config = BrokerConfig(profile=Profile.V5, timer_precision_ms=300, timer_roll_window_slot=2)
    keys = model_keys(config)
    assert set(keys) >= set(BROKER_CONF_KEYS) - {"retryMaxTimes", "retryQueueNums"}
    assert keys["timerWheelEnable"] == "true"
    assert keys["timerPrecisionMs"] == "200"  # setTimerPrecisionMs snaps 300 to 200: the broker runs with 200
    assert keys["timerMaxDelaySec"] == "259200" and keys["timerRollWindowSlot"] == "2"
    assert keys["timerFlushIntervalMs"] == "1000"
    assert keys["transactionCheckInterval"] == "30000"


def test_a_broker_conf_read_back_gives_the_same_model_config() -> None:
    config = BrokerConfig(
        "2s 4s 6s", transaction_timeout_ms=1500, max_message_size=1024, file_reserved_time_h=1
    )
    keys: dict[str, object] = {k: v for k, v in model_keys(config).items() if k in BROKER_CONF_KEYS}
    assert config_from_broker_conf(keys) == config


def test_group_settings_are_not_broker_conf_keys() -> None:
    """retryQueueNums and retryMaxTimes belong to each SubscriptionGroupConfig: not written to broker.conf
    (a broker would ignore them); the remoting client creates the groups with them (test_remoting_target)."""
    keys = model_keys(BrokerConfig(retry_queue_nums=0, retry_max_times=3))
    assert keys == model_keys(BrokerConfig())


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        (BrokerConfig((1500,)), "delay level 1 is 1500 ms"),
    ],
)
def test_a_config_a_real_broker_cannot_take_is_refused_by_name(config: BrokerConfig, fragment: str) -> None:
    with pytest.raises(BrokerConfError, match=fragment):
        model_keys(config)


def test_a_table_without_levels_is_written_as_one_escaped_blank() -> None:
    """An empty value fails ScheduleMessageService.parseDelayLevel (4.9.7: "".split(" ") is one empty item,
    whose unit substring throws) and the broker does not start; one blank splits into no items at all,
    a table without levels (config/delay-level-table#only-spaces-is-a-table-without-levels, which a
    real 4.9.7 broker passes). java.util.Properties drops a leading blank unless it is escaped."""
    keys = model_keys(BrokerConfig(()))
    assert keys["messageDelayLevel"] == " "
    assert "messageDelayLevel=\\ \n" in render({"messageDelayLevel": keys["messageDelayLevel"]})


@pytest.mark.parametrize("port", [0, 2, 65535, 70000])
def test_a_port_without_room_for_port_minus_2_and_plus_1_is_refused(port: int) -> None:
    with pytest.raises(BrokerConfError, match=f"port {port}"):
        conf_of(BrokerConfig(), port=port)


def test_render_writes_java_properties_with_backslashes_escaped() -> None:
    text = render({"a": "1s 2s", "storePathRootDir": "C:\\x y", "lead": " x"}, "line one\nline two")
    assert text == "# line one\n# line two\na=1s 2s\nstorePathRootDir=C:\\\\x y\nlead=\\ x\n"
    with pytest.raises(BrokerConfError, match="line break"):
        render({"a": "x\ny"})


LOG = """\
2026-11-23 18:06:24.092 INFO  [main] RocketmqBroker - brokerIP1=10.213.1.2
2026-11-23 18:06:24.093 INFO  [main] RocketmqBroker - messageDelayLevel=1s 2s
2026-11-23 18:06:24.094 INFO  [main] RocketmqBroker - listenPort=10911
2026-11-23 18:06:24.094 INFO  [main] RocketmqBroker - listenPort=10912
2026-11-23 18:06:24.095 INFO  [main] RocketmqStore - transactionTimeOut=1
2026-11-23 18:06:24.096 INFO  [main] RocketmqBroker - brokerPermission=4
"""


def test_the_values_a_broker_logs_at_start_are_read_per_key() -> None:
    seen = logged_values(LOG)
    assert seen["messageDelayLevel"] == ["1s 2s"]
    assert seen["listenPort"] == ["10911", "10912"]  # two config objects print the same name
    assert "transactionTimeOut" not in seen  # only the RocketmqBroker logger prints the config


def test_check_logged_names_each_key_the_broker_runs_differently_or_does_not_know() -> None:
    conf = {
        "brokerIP1": "10.213.1.2",
        "messageDelayLevel": "1s 2s",
        "listenPort": "10912",
        "brokerPermission": "6",
        "brokerName": "broker-a",
        "brokerClusterName": "DefaultCluster",
        "typoKey": "1",
    }
    wire = {"brokerName": "broker-a", "brokerClusterName": "OtherCluster"}
    problems = check_logged(conf, LOG, wire)
    assert problems == [
        "brokerPermission: broker.conf says '6', the broker runs with '4'",
        "brokerClusterName: broker.conf says 'DefaultCluster', the broker runs with 'OtherCluster'",
        "typoKey: broker.conf says '1', the broker did not log it",
    ]
    assert check_logged({"brokerIP1": "10.213.1.2"}, LOG) == []


def test_get_broker_config_bodies_are_key_value_lines() -> None:
    text = "brokerName=broker-a\nmessageDelayLevel=1s 2s\nrocketmqHome=/x=y\n\nnot a pair\n"
    assert parse_properties_text(text) == {
        "brokerName": "broker-a",
        "messageDelayLevel": "1s 2s",
        "rocketmqHome": "/x=y",
    }


def test_the_pinned_table() -> None:
    assert DEFAULT_VERSION == "4.9.7"
    assert pinned("4.9.7").line is Profile.V4_9 and pinned("5.5.0").line is Profile.V5
    assert any("jdk.internal.ref" in flag for flag in pinned("4.9.7").java_opts)
    assert pinned("5.5.0").java_opts == ()
    assert pinned("5.5.0").artifacts == ("rocketmq-broker", "rocketmq-proxy")
    assert pinned("4.9.7").mq_version == 407 and pinned("5.5.0").mq_version == 513
    with pytest.raises(UnknownVersion, match=r"4\.9\.8 is not on Maven Central: use 4\.9\.7"):
        pinned("4.9.8")
    with pytest.raises(UnknownVersion, match=r"pinned: 4\.9\.0, .*4\.9\.7, .*5\.5\.0$"):
        pinned("6.0")


def test_the_cache_honours_rmqspec_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQSPEC_CACHE", str(tmp_path / "c"))
    assert maven.cache_root() == (tmp_path / "c").resolve()
    assert maven.version_dir("4.9.7") == (tmp_path / "c" / "apache-rocketmq-4.9.7").resolve()
    monkeypatch.delenv("RMQSPEC_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert maven.cache_root() == (tmp_path / "x" / "rmqspec").resolve()


def test_a_version_is_cached_only_while_its_stamp_and_every_jar_it_lists_are_there(tmp_path: Path) -> None:
    vdir = maven.version_dir("4.9.7", tmp_path)
    assert maven.cached("4.9.7", cache=tmp_path) is None
    (vdir / "lib").mkdir(parents=True)
    for name in ("a.jar", "rocketmq-broker-4.9.7.jar"):
        (vdir / "lib" / name).write_bytes(b"PK")
    (vdir / "classpath-rocketmq-broker.txt").write_text("a.jar\nrocketmq-broker-4.9.7.jar\n")
    cp = maven.cached("4.9.7", cache=tmp_path)
    assert cp is not None and [j.name for j in cp.jars] == ["a.jar", "rocketmq-broker-4.9.7.jar"]
    assert cp.java_arg() == os.pathsep.join(str(j) for j in cp.jars)
    assert maven.resolve("4.9.7", cache=tmp_path, offline=True) == cp  # no Maven once cached
    (vdir / "lib" / "a.jar").unlink()
    assert maven.cached("4.9.7", cache=tmp_path) is None
    with pytest.raises(maven.ResolveError, match=r"4\.9\.7 \(rocketmq-broker\) is not in the cache"):
        maven.resolve("4.9.7", cache=tmp_path, offline=True)


def test_a_4_9_version_has_no_proxy(tmp_path: Path) -> None:
    with pytest.raises(maven.ResolveError, match=r"4\.9\.7 has no rocketmq-proxy"):
        maven.resolve("4.9.7", "rocketmq-proxy", cache=tmp_path)


def test_without_maven_the_error_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(maven.ResolveError, match=r"Apache RocketMQ 5\.5\.0: Maven \(mvn\) is not on PATH"):
        maven.resolve("5.5.0", cache=tmp_path)


def test_a_maven_failure_is_one_line_naming_the_artifact_and_what_maven_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin" / "mvn"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        "echo '[ERROR] Failed to execute goal org.apache.maven.plugins:maven-dependency-plugin:3.6.1:"
        "copy-dependencies (default-cli) on project apache-rocketmq-classpath: Could not resolve dependencies: "
        "Could not find artifact org.apache.rocketmq:rocketmq-broker:jar:4.9.7 in central'\n"
        "echo '[ERROR] -> [Help 1]'\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(maven.ResolveError) as e:
        maven.resolve("4.9.7", cache=tmp_path)
    message = str(e.value)
    assert message.startswith(
        "cannot resolve org.apache.rocketmq:rocketmq-broker:4.9.7 from Maven (exit 1): "
    )
    assert message.endswith(
        "Could not find artifact org.apache.rocketmq:rocketmq-broker:jar:4.9.7 in central"
    )
    assert "\n" not in message
    assert maven.cached("4.9.7", cache=tmp_path) is None


def test_namespace_names_and_addresses() -> None:
    ns = Netns.named("rmqspec-7")
    assert ns is not None and ns.ns_ip == "10.213.7.2" and ns.host_ip == "10.213.7.1"
    assert (
        len(ns.host_if) <= 15 and len(Netns("rmqspec-254", 254).ns_if) <= 15
    )  # Linux's interface name limit
    assert (
        Netns.named("rmqspec-0") is None
        and Netns.named("other-3") is None
        and Netns.named("rmqspec-255") is None
    )


def test_a_state_file_that_is_not_ours_reads_as_none(tmp_path: Path) -> None:
    assert BrokerState.read(tmp_path) is None
    (tmp_path / "rmqspec-broker.json").write_text('{"pid": 1}')
    assert BrokerState.read(tmp_path) is None


def test_pid_alive_tells_a_reused_pid_apart() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(os.getpid(), start=-1) or not Path("/proc").is_dir()
    assert not pid_alive(2**22 + 12345)


# --- the launcher's failures, with a stand-in for java (no JVM, no Maven, no namespace) --------------------


def fake_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, java_script: str) -> Path:
    """A cache holding a one-jar 4.9.7, and JAVA_HOME pointing at a shell script standing in for java."""
    cache = tmp_path / "cache"
    vdir = maven.version_dir("4.9.7", cache)
    (vdir / "lib").mkdir(parents=True)
    (vdir / "lib" / "rocketmq-broker-4.9.7.jar").write_bytes(b"PK")
    (vdir / "classpath-rocketmq-broker.txt").write_text("rocketmq-broker-4.9.7.jar\n")
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n" + java_script)
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(java.parent.parent))
    return cache


def free_port() -> int:
    import socket

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("0.0.0.0", 0))
            port = int(s.getsockname()[1])
        if port < 65000 and all(_free(p) for p in (port - 2, port + 1)):
            return port
    pytest.skip("no free port with free neighbours")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_a_broker_that_exits_while_starting_is_reported_with_its_log_and_the_jvm_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = fake_install(tmp_path, monkeypatch, "echo 'Error: no main class (stand-in)' >&2\nexit 1\n")
    broker = ApacheBroker("4.9.7", store_dir=tmp_path / "b", port=free_port(), isolation="host", cache=cache)
    with pytest.raises(BrokerError) as e:
        broker.start()
    message = str(e.value)
    assert message.startswith("broker 4.9.7 exited with code 1 while starting; its log: ")
    assert str(tmp_path / "b" / "logs" / "broker.log") in message
    assert "Error: no main class (stand-in)" in message and "\n" not in message
    assert not broker.alive and not (tmp_path / "b" / "rmqspec-broker.json").exists()
    conf = (tmp_path / "b" / "broker.conf").read_text()
    assert "brokerIP1=127.0.0.1\n" in conf and f"listenPort={broker.port}\n" in conf


def test_a_broker_that_does_not_answer_in_time_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = fake_install(tmp_path, monkeypatch, "exec sleep 60\n")
    broker = ApacheBroker(
        "4.9.7", store_dir=tmp_path / "b", port=free_port(), isolation="host", cache=cache, boot_timeout=0.5
    )
    with pytest.raises(
        BrokerError, match=rf"did not answer on 127\.0\.0\.1:{broker.port} within 0\.5 s; its log"
    ):
        broker.start()
    pid = broker._pid
    assert pid is not None and not pid_alive(pid)
    assert broker.last_stop is not None and broker.last_stop.startswith("killed (SIGKILL)")


def test_the_proxy_runs_in_local_mode_with_our_config(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="no proxy"):
        ApacheBroker("4.9.7", proxy=True)
    b = ApacheBroker("5.5.0", BrokerConfig(profile=Profile.V5), tmp_path / "b", isolation="host", proxy=True)
    conf = b._proxy_conf()
    assert conf["proxyMode"] == "local" and conf["grpcServerPort"] == 8081
    assert conf["enableTopicMessageTypeCheck"] is False and conf["remotingListenPort"] == 10911 - 3
    if os.environ.get("JAVA_HOME") is None and not any(
        (Path(p) / "java").is_file() for p in os.environ.get("PATH", "").split(os.pathsep)
    ):
        return  # the command names java; nothing else to see without it
    cmd = b._command("cp.jar", tmp_path)
    main = cmd[cmd.index("cp.jar") + 1 :]
    assert main[:3] == ["org.apache.rocketmq.proxy.ProxyStartup", "-pm", "local"]
    assert main[3:5] == ["-bc", str(tmp_path / "broker.conf")] and main[5:] == [
        "-pc",
        str(tmp_path / "rmq-proxy.json"),
    ]

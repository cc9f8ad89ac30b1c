"""The remoting adapter as a real client behaves: heartbeats, reconnection, the request's version."""

from __future__ import annotations

import itertools
import time
from typing import ClassVar

import pytest

from rmqspec.adapters.inprocess import WallClockTarget
from rmqspec.adapters.remoting import target as target_mod
from rmqspec.adapters.remoting.profile import load_profile
from rmqspec.adapters.remoting.server import BackgroundServer
from rmqspec.adapters.remoting.target import RemotingTarget
from rmqspec.conformance.contract import Response
from rmqspec.reference.constants import TxAction
from rmqspec.reference.model import ConsumerSendBack, EndTx, GetMaxOffset, Heartbeat, Op, Pull, Send
from rmqspec.reference.put import Message
from rmqspec.reference.records import props
from rmqspec.reference.sendback import SendBack
from rmqspec.reference.transaction import EndTransaction

pytestmark = pytest.mark.wire


class CountingTarget(WallClockTarget):
    """The served model, remembering every operation it ran."""

    def __init__(self) -> None:
        super().__init__(None)
        self.ops: list[Op] = []

    def execute(self, op: Op) -> Response:
        self.ops.append(op)
        return super().execute(op)


def test_a_registered_producer_heartbeats_again_like_the_java_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(target_mod, "HEARTBEAT_INTERVAL_S", 0.2)
    served = CountingTarget()
    with BackgroundServer(served) as (host, port):
        t = RemotingTarget(load_profile(None, f"{host}:{port}"))
        try:
            assert t.execute(Heartbeat("PG")).code == 0
            time.sleep(1.1)
            beats = [op for op in served.ops if isinstance(op, Heartbeat) and op.online]
            assert len(beats) >= 4  # the explicit one and at least three periodic ones
            t.execute(Heartbeat("PG", online=False))
            time.sleep(0.3)
            after = len([op for op in served.ops if isinstance(op, Heartbeat) and op.online])
            time.sleep(0.5)
            assert len([op for op in served.ops if isinstance(op, Heartbeat) and op.online]) == after
        finally:
            t.close()


def test_the_client_connects_again_after_the_broker_restarted() -> None:
    served = WallClockTarget()
    server = BackgroundServer(served)
    host, port = server.__enter__()
    t = RemotingTarget(load_profile(None, f"{host}:{port}"))
    try:
        assert t.execute(GetMaxOffset("T", 0)).code == 0
        server.__exit__(None, None, None)
        time.sleep(0.2)
        again = BackgroundServer(served, host, port)
        again.__enter__()
        try:
            assert t.execute(GetMaxOffset("T", 0)).code == 0  # no TargetError: a new connection
        finally:
            again.__exit__(None, None, None)
    finally:
        t.close()


def test_the_operation_protocol_version_reaches_the_broker() -> None:
    """A send-back of an old client (version < V3_4_9 = 121) has its header maxReconsumeTimes ignored
    (facts §4.1 step 7): the broker must see the version the operation carries."""
    served = WallClockTarget(None)
    with BackgroundServer(served) as (host, port):
        t = RemotingTarget(load_profile(None, f"{host}:{port}"))
        try:
            sent = t.execute(Send(Message("VerT", b"x", props(UNIQ_KEY="A" * 32, WAIT="true"))))
            assert sent.code == 0
            pulled = t.execute(Pull("VerT", 0, 0, 32, "CG"))
            offset = pulled.records[0].commit_log_offset
            # header max 0: a new client goes to the DLQ at once, an old one is retried (group max 16)
            old = t.execute(ConsumerSendBack(SendBack("CG", offset, 0, max_reconsume_times=0, version=100)))
            assert old.code == 0
            time.sleep(0.1)
            assert t.execute(Pull("%DLQ%CG", 0, 0, 32, "CG")).code != 0
            new = t.execute(ConsumerSendBack(SendBack("CG", offset, 0, max_reconsume_times=0, version=401)))
            assert new.code == 0
            deadline = time.time() + 2
            while time.time() < deadline and not t.execute(Pull("%DLQ%CG", 0, 0, 32, "CG")).records:
                time.sleep(0.05)
            assert t.execute(Pull("%DLQ%CG", 0, 0, 32, "CG")).records
        finally:
            t.close()


def test_group_settings_reach_the_broker_as_a_subscription_group_of_each_group_used() -> None:
    """retryQueueNums is no broker.conf key: a config with 0 makes the client create each group it uses with
    0 before the broker would create it with its default 1; the served broker keeps it, and a send-back
    to such a group stores nothing (sendback/no-retry-queues). With the defaults no group is created."""
    import attrs

    from rmqspec.reference.config import BrokerConfig
    from rmqspec.reference.model import Model
    from rmqspec.reference.state import GroupConfig

    class Admin(WallClockTarget):
        updates: ClassVar[list[str]] = []

        def update_group(self, group: str, retry_queue_nums: int, retry_max_times: int) -> None:
            self.updates.append(group)
            super().update_group(group, retry_queue_nums, retry_max_times)

    config = BrokerConfig(retry_queue_nums=0, retry_max_times=3)
    served = Admin(Model(BrokerConfig()))  # a broker that would create groups with 1 and 16
    with BackgroundServer(served) as (host, port):
        profile = attrs.evolve(load_profile(None, f"{host}:{port}"), config=config)
        t = RemotingTarget(profile)
        try:
            sent = t.execute(Send(Message("T", b"x", props(), queue_id=0)))
            assert sent.code == 0
            assert t.execute(Pull("T", 0, 0, group="G")).code == 0
            made = {g: gc for g, gc in served.state.groups.items() if g.endswith("_G")}
            assert list(made.values()) == [GroupConfig(0, 3)]
            offset = t.execute(Pull("T", 0, 0, group="G")).records[0].commit_log_offset
            assert t.execute(ConsumerSendBack(SendBack("G", offset))).code == 0
            assert not [topic for topic in served.state.topics if topic.startswith("%RETRY%")]
            assert len(served.updates) == 1  # once per group
        finally:
            t.close()
        plain = RemotingTarget(load_profile(None, f"{host}:{port}"))
        try:
            plain.execute(Pull("T", 0, 0, group="H"))
            assert len(served.updates) == 1  # the defaults: the broker creates the group itself
        finally:
            plain.close()


def test_a_served_broker_fast_forwards_living_through_the_time_between() -> None:
    """The served model's clock jumps (a scenario's broker of its own): its check runs happen on the way,
    each jump stopping where a check request goes out, at the run's own time."""
    from rmqspec.reference.config import BrokerConfig
    from rmqspec.reference.model import Model

    config = BrokerConfig(
        transaction_check_interval_ms=60_000, transaction_timeout_ms=6_000, transaction_check_max=3
    )
    wall = WallClockTarget(Model(config))
    wall.execute(Heartbeat("PG"))
    sent = wall.execute(Send(Message("T", b"h", props(TRAN_MSG="true", PGROUP="PG"), sys_flag=4)))
    assert sent.code == 0
    start, real = wall.now(), time.monotonic()
    stops, checks = [], []
    while wall.fast_forward(start + 300_000):
        stops.append(wall.now())
        checks.extend(wall.advance_to(wall.now()))
    checks.extend(wall.advance_to(wall.now()))
    assert time.monotonic() - real < 5  # five minutes of the broker's time
    assert wall.now() >= start + 300_000
    assert len(checks) == 3  # transactionCheckMax, one a run
    # each jump stopped at its run (the clock read just after, a millisecond or so later)
    assert all(0 <= stop - c.time <= 50 for c, stop in zip(checks, stops, strict=False))
    assert all(b.time - a.time >= 60_000 for a, b in itertools.pairwise(checks))


def test_a_scenario_of_rocketmq_default_level_18_runs_on_the_served_reference_in_seconds() -> None:
    """Two hours of the default table on a wall clock: the served broker of its own fast-forwards."""
    from rmqspec.conform import conform
    from rmqspec.conformance.scenarios import catalogue

    wanted = "config/delay-level-table#default-level-18-is-due-after-two-hours"
    scenario = next(s for s in catalogue() if s.id == wanted)
    real = time.monotonic()
    rep = conform("served", scenarios=[scenario], workload_seconds=0, probe=False)
    assert [(r.scenario.id, r.outcome) for r in rep.scenarios] == [(wanted, "pass")]
    assert time.monotonic() - real < 60


def test_end_transaction_carries_the_send_results_msg_id_never_an_empty_one() -> None:
    """Apache's producer puts the send result's msgId (the half's UNIQ_KEY) in END_TRANSACTION
    (DefaultMQProducerImpl.endTransaction: ``setMsgId(sendResult.getMsgId())``); a strict broker refuses
    ``msgId=""``. Operations built by the scenarios, the workload and the state machine carry the UNIQ_KEY
    as transaction_id (and msg_id): the broker sees it as msgId either way."""
    served = CountingTarget()
    uniq = "C" * 32
    with BackgroundServer(served) as (host, port):
        t = RemotingTarget(load_profile(None, f"{host}:{port}"))
        try:
            assert t.execute(Heartbeat("PG")).code == 0
            half = Message(
                "TxT", b"t", props(UNIQ_KEY=uniq, WAIT="true", TRAN_MSG="true", PGROUP="PG"), sys_flag=4
            )
            sent = t.execute(Send(half))
            assert sent.code == 0
            table, offset = int(str(sent.fields["queue_offset"])), int(str(sent.fields["msg_id"])[-16:], 16)
            for req in (
                EndTransaction("PG", table, offset, TxAction.UNKNOW, transaction_id=uniq),
                EndTransaction("PG", table, offset, TxAction.COMMIT, msg_id=uniq, transaction_id=uniq),
            ):
                t.execute(EndTx(req))
            deadline = time.time() + 2
            while time.time() < deadline and len([o for o in served.ops if isinstance(o, EndTx)]) < 2:
                time.sleep(0.05)
            ends = [o.request for o in served.ops if isinstance(o, EndTx)]
            assert [e.msg_id for e in ends] == [uniq, uniq]
        finally:
            t.close()

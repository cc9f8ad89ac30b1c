"""The in-process target: the reference model (or a mutant of it) on a logical clock."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from rmqspec.conformance.codec import response_of
from rmqspec.conformance.contract import (
    ALL_FEATURES,
    LOGICAL_ONLY,
    CheckEvent,
    Clock,
    Response,
    TargetInfo,
)
from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import Model, Op
from rmqspec.reference.observations import (
    CheckRequest,
    Observation,
)
from rmqspec.reference.records import Record
from rmqspec.reference.state import GroupConfig

EPOCH = 1_700_000_000_000  # the logical clock starts here


class InProcessTarget:
    """Drives a ``Model`` directly. Random broker choices are fixed to 0 (a member of the allowed set)."""

    def __init__(
        self,
        model: Model | None = None,
        name: str = "reference",
        start: int = EPOCH,
        config: BrokerConfig | None = None,
    ) -> None:
        """``config``: the settings the target says it has (default: the model's). A configuration mutant
        is a broker set up with ``config`` that reads it wrongly: scenarios written against the settings
        must be told the settings it was given, not the ones it misread."""
        self.model = model or Model()
        self.state = self.model.initial()
        self._now = start
        self._skew = 0  # the broker's clock minus the suite's (skew_clock)
        self._info = TargetInfo(name=name, clock=Clock.LOGICAL, config=config or self.model.config)

    @property
    def info(self) -> TargetInfo:
        return self._info

    def now(self) -> int:
        return self._now

    def skew_clock(self, ms: int) -> None:
        """Step the broker's clock by ``ms`` (negative: back, as NTP may do); the suite's clock goes on."""
        self._skew += ms

    def advance_to(self, t: int) -> list[CheckEvent]:
        if t < self._now:
            return []
        self.state, events = self.model.advance(self.state, self._now + self._skew, t + self._skew)
        self._now = t
        return [
            CheckEvent(e.at, e.group, e.tran_state_table_offset, e.commit_log_offset, e.message)
            for e in events
            if isinstance(e, CheckRequest) and e.sent
        ]

    def execute(self, op: Op) -> Response:
        self.state, obs = self.model.step(self.state, op, self._now + self._skew)
        return to_response(obs)

    def restart(self, config: BrokerConfig | None = None, graceful: bool = False) -> None:
        """A crash, unless ``graceful``: an orderly stop (the 5.x op batch service writes what it holds).
        Either way the broker is back at once on the logical clock."""
        if config is not None:  # restarted with a changed configuration (e.g. a new level table)
            self.model = attrs.evolve(self.model, config=config)
            self.state = attrs.evolve(self.state, config=config)
        self.state = self.model.restart(self.state, self._now + self._skew, orderly=graceful)

    def close(self) -> None:
        pass


def to_response(obs: Observation) -> Response:
    """The wire view of a model observation (the suite's one translation: ``conformance.codec``)."""
    return response_of(obs)


class WallClockTarget:
    """The reference model (or a mutant) on the wall clock: what ``rmqspec serve`` puts behind TCP.

    The broker's services run whenever the target is touched, up to the current time, under a lock, so
    several client threads can use it at once. ``delay_ms`` adds a fixed lateness to every service
    run, for testing a checker's epsilon.
    """

    def __init__(self, model: Model | None = None, name: str = "reference@wall") -> None:
        import threading

        self.model = model or Model()
        self.state = self.model.initial()
        self._lock = threading.RLock()
        # The suite's clock: the wall clock plus the jumps of fast_forward (its clients in this process read
        # it too); the broker's clock is the suite's plus the steps of skew_clock.
        self._offset = 0
        self._last = self._clock()  # the suite time the services have run up to
        self._skew = 0  # the broker's clock minus the suite's (skew_clock)
        self._checks: list[CheckEvent] = []
        self._info = TargetInfo(
            name=name,
            clock=Clock.WALL,
            config=self.model.config,
            features=ALL_FEATURES - LOGICAL_ONLY,
        )

    def _clock(self) -> int:
        import time

        return int(time.time() * 1000) + self._offset

    @property
    def info(self) -> TargetInfo:
        return self._info

    def now(self) -> int:
        return self._clock()

    def skew_clock(self, ms: int) -> None:
        """Step the broker's clock by ``ms`` (negative: back, as NTP may); the wall clock goes on. The
        services run on from the wall time they reached, on the stepped clock, as in process."""
        with self._lock:
            self._catch_up()
            self._skew += ms

    def _catch_up(self) -> int:
        """Run the services up to now; the broker's time now (the wall clock plus the steps)."""
        now = self._clock()
        if now > self._last:
            self.state, events = self.model.advance(self.state, self._last + self._skew, now + self._skew)
            self._last = now
            self._checks.extend(
                CheckEvent(
                    e.at,
                    e.group,
                    e.tran_state_table_offset,
                    e.commit_log_offset,
                    e.message,
                )
                for e in events
                if isinstance(e, CheckRequest) and e.sent
            )
        return now + self._skew

    def fast_forward(self, to: int) -> bool:
        """Move the suite's clock (and so the broker's) forward to ``to`` at once, the broker's services
        living through the time between as they would have in real time. The jump stops early at the
        first moment the broker sends a check request, so that the request reaches its client at its
        own time: then True (the caller lets it arrive, then goes on); False once at ``to``.

        Only for a broker nobody else uses meanwhile (a scenario's broker of its own): the clock jumps
        for everyone who reads it."""
        with self._lock:
            now = self._catch_up() - self._skew
            if to <= now:
                return False
            sent = self.next_check(to)
            stop = to if sent is None else sent
            self._offset += stop - now
            self._catch_up()
            return sent is not None

    def next_check(self, limit: int) -> int | None:
        """The first moment after now and up to ``limit`` (the suite's clock) at which the broker sends a
        check request, if nobody does anything meanwhile; None: none does."""
        return self._next_event(limit, lambda e: isinstance(e, CheckRequest) and e.sent)

    def next_service(self, limit: int) -> int | None:
        """The first moment after now and up to ``limit`` at which the broker's services store or send
        anything (a delivery, a check, a discard), if nobody does anything meanwhile; None: nothing."""
        return self._next_event(limit, lambda e: True)

    def _next_event(self, limit: int, wanted: Callable[[object], bool]) -> int | None:
        with self._lock:
            now = self._catch_up() - self._skew
            if limit <= now:
                return None
            _, ahead = self.model.advance(self.state, now + 1 + self._skew, limit + self._skew)
            times = [t - self._skew for e in ahead if wanted(e) and (t := _event_time(e)) is not None]
            return min(times, default=None)

    def advance_to(self, t: int) -> list[CheckEvent]:
        import time

        while (left := t - self._clock()) > 0:
            time.sleep(min(left, 50) / 1000)
            with self._lock:
                self._catch_up()
        with self._lock:
            self._catch_up()
            out, self._checks = self._checks, []
        return out

    def execute(self, op: Op) -> Response:
        with self._lock:
            now = self._catch_up()
            self.state, obs = self.model.step(self.state, op, now)
            return to_response(obs)

    def update_group(self, group: str, retry_queue_nums: int, retry_max_times: int) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the group's retry settings, created or replaced
        (SubscriptionGroupManager.updateSubscriptionGroupConfig, 4.9.7 and 5.5.0)."""
        with self._lock:
            self._catch_up()
            gc = GroupConfig(retry_queue_nums, retry_max_times)
            self.state = attrs.evolve(self.state, groups=self.state.groups.set(group, gc))

    def restart(self, config: BrokerConfig | None = None, graceful: bool = False) -> None:
        """A crash, unless ``graceful``: an orderly stop (the 5.x op batch service writes what it holds)."""
        with self._lock:
            self._catch_up()  # the services ran until the restart: what they store after it is later
            if config is not None:
                self.model = attrs.evolve(self.model, config=config)
                self.state = attrs.evolve(self.state, config=config)
            self.state = self.model.restart(self.state, self._clock() + self._skew, orderly=graceful)

    def close(self) -> None:
        pass


def _event_time(e: object) -> int | None:
    """When a service event of the model happened: a check's ``at``, else the store time of what it wrote."""
    at = getattr(e, "at", None)
    if isinstance(at, int):
        return at
    copy = getattr(e, "copy", None)
    return copy.store_timestamp if isinstance(copy, Record) else None

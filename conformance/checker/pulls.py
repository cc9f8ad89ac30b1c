"""Reads judged against what the model says is in the queue: PULL_MESSAGE, GET_MAX_OFFSET, VIEW, QUERY.

When a pull is served, the target's queue holds at least the entries that were certainly visible when
the pull began (every expectation of the queue already seen, or required and past its window: the
*floor*) and at most what the model holds when it completes (the *ceiling*: every entry the model
stored by then, less the ones the target never stored, plus the ones only the target stored). The
answer must be one the model gives for some queue length in ``[floor, ceiling]``: FOUND when the
offset is below it, PULL_NOT_FOUND at it (or at 0 of an empty queue), PULL_OFFSET_MOVED above it
(pull/status-codes). The model deletes nothing and every pull reads all tags, so OFFSET_FOUND_NULL and
MESSAGE_WAS_REMOVING (which 4.9.8 answers only for entries whose consume-queue or commit-log file is
gone, sending the consumer past them) are never what it gives. The response's own min and max offsets
must be the queue's (min 0, max within the bounds) and agree with its code.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from rmqspec.reference.constants import (
    OP_TOPIC,
    RETRY_PREFIX,
    SYSTEM_TOPICS,
    TRANS_CHECK_MAX_TIME_TOPIC,
    Code,
)
from rmqspec.reference.model import GetMaxOffset, Pull, QueryUniqKey, ViewMessage
from rmqspec.reference.observations import Found, PullResult, Rejected
from rmqspec.reference.records import Record

from ..codec import code_name
from ..contract import Response
from ..history import Event
from .base import Completion, Queue
from .records import placement_rule
from .transactions import TransactionsMixin


def _int_field(resp: Response, key: str) -> int | None:
    v = resp.fields.get(key)
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


class PullsMixin(TransactionsMixin):
    # -- bounds of a queue's length ----------------------------------------------------------------------

    def counted(self, queue: Queue) -> bool:
        """Whether the model knows how many entries the target's queue holds (retry copies land in a
        queue the broker picks when there are several; a shared broker's system queues hold every
        client's entries)."""
        topic = queue[0]
        if topic.startswith(RETRY_PREFIX) and self.model.config.retry_queue_nums > 1:
            return False
        return not (self.shared and topic in SYSTEM_TOPICS)

    def floor(self, queue: Queue, t: int) -> int:
        """Entries the target certainly holds at ``t``: seen already, or required and past their window."""
        if self.indexed:
            q = self.queue_seen_index.get(queue)
            n, waiting = (q.seen, q.waiting()) if q is not None else (0, [])
        else:
            n, waiting = 0, self.by_queue.get(queue, [])
        for x in waiting:
            if x.seen_at is not None:
                n += 1
            elif not x.optional:
                latest = self.latest(x)
                if latest is not None and latest < t:
                    n += 1
        return n

    def ceiling(self, queue: Queue) -> int | None:
        """The most entries the target may hold now (None: no bound known)."""
        if not self.counted(queue) or queue in self.open_queues or queue[0] in self.open_topics:
            return None
        held = self.state.store.max_offset(*queue) - len(self.phantom_entries.get(queue, ()))
        # a queue the schedule service delivers into may hold copies restarts let it deliver again
        again = self.redelivery_room(queue) if queue in self.delivery_queues else 0
        return held + self.extra_entries[queue] + again

    def note_queue_growth(self, queue: Queue, got: int | None, ceiling: int | None) -> None:
        """A max offset within the ceiling only thanks to the copies restarts may repeat."""
        if got is None or ceiling is None or queue not in self.delivery_queues or not self.restart_spans():
            return
        if ceiling - self.redelivery_room(queue) < got <= ceiling:
            self.allow("restart-queue-growth")

    def topic_certain(self, topic: str, t: int) -> bool:
        """Whether the target certainly has ``topic`` at ``t``: a client operation that made it had
        completed by then (a topic the broker's services made, for a discard or a copy, is certain only
        once something in it is), or something in it was certainly visible."""
        if topic not in self.topic_origin:
            return topic in self.state.topics  # there from the start (or made before the history)
        if topic in self.phantom_topics and not self.real_entries(topic):
            return False
        origin = self.topic_origin[topic]
        done = self.completed.get(origin) if origin is not None else None
        if done is not None and done[1] < t:
            return True
        return any(self.floor(q, t) > 0 for q in self.by_queue if q[0] == topic)

    # -- PULL_MESSAGE ----------------------------------------------------------------------------------

    def apply_pull(self, inv: Event, op: Pull) -> Completion:
        queue = (op.topic, op.queue_id)
        floor = self.floor(queue, inv.time) if self.counted(queue) else 0
        # Applied as a step: a pull may create its consumer group (sendback/group-lookup).
        self.state, answer = self.model.step(self.state, op, inv.time)
        assert isinstance(answer, PullResult | Rejected)
        before = answer

        def complete(resp: Response, e: Event) -> None:
            after = self.model.pull(
                self.state, op.topic, op.queue_id, op.offset, op.max_msgs, op.group, op.client
            )
            self.judge_pull(inv, op, floor, before, after, resp, e)

        return complete

    def judge_pull(
        self,
        inv: Event,
        op: Pull,
        floor: int,
        before: PullResult | Rejected,
        after: PullResult | Rejected,
        resp: Response,
        e: Event,
    ) -> None:
        self.count("pulls")
        queue = (op.topic, op.queue_id)
        code = resp.code
        for i, r in enumerate(resp.records):
            self.on_record(r, e)
            at = (r.topic, r.queue_id, r.queue_offset)
            if at != (op.topic, op.queue_id, op.offset + i):
                # A record of the queue at another offset: its entry points at the wrong record (entry n
                # holds the record stored at queue offset n); a record of another queue: a bad FOUND.
                in_queue = (r.topic, r.queue_id) == queue
                self.report(
                    "wrong-pull-result",
                    "dispatch/in-order" if in_queue else "pull/found",
                    e.index,
                    f"record {i} of a pull of {op.topic}:{op.queue_id} from {op.offset} is {at[0]}:{at[1]} "
                    f"offset {at[2]}, expected offset {op.offset + i}",
                    queues=[queue],
                )
        if code == int(Code.TOPIC_NOT_EXIST):
            if not self.topic_certain(op.topic, inv.time):
                return  # the topic need not exist at the target yet (or at all: it was made for phantoms)
            # The target holds nothing of the topic: what was due in it by now is missing (the cause),
            # the answer follows from that.
            for q in [q for q in self.by_queue if q[0] == op.topic]:
                self.missing_in(op.topic, q[1], inv.time, e.index)
        if isinstance(before, Rejected) or isinstance(after, Rejected):
            # The model refuses the pull (unknown topic, queue out of range) at the invoke or at the
            # completion: the target gives that refusal, or, when the topic came into being meanwhile,
            # what a pull of it answers.
            if code in {int(r.code) for r in (before, after) if isinstance(r, Rejected)}:
                return
            if (
                self.shared
                and op.topic in SYSTEM_TOPICS
                and isinstance(after, Rejected)
                and after.code == Code.TOPIC_NOT_EXIST
            ):
                return  # on a shared broker other clients' discards (or copies) may have made the topic
            if (
                op.topic == TRANS_CHECK_MAX_TIME_TOPIC
                and isinstance(after, Rejected)
                and after.code == Code.TOPIC_NOT_EXIST
                and self.state.tx_discardable
            ):
                return  # the last check run may have discarded its own copy, making the topic (check-discard)
            if isinstance(before, Rejected) and isinstance(after, Rejected):
                self.report(
                    "wrong-pull-status",
                    after.rule,
                    e.index,
                    f"pull of {op.topic}:{op.queue_id} answered {code_name(code)}, expected "
                    f"{code_name(int(after.code))}",
                    queues=[queue],
                    topics=[op.topic],
                )
                return
        max_offset = _int_field(resp, "max_offset")
        # Lost only if every entry the queue held then has been read by some pull: a message stored
        # before this pull began is at an offset below the max it reports (rule: dispatch/in-order).
        # Judged before the status, which a missing message explains.
        if max_offset is not None and self.read_to(op.topic, op.queue_id) >= max_offset:
            self.missing_in(op.topic, op.queue_id, inv.time, e.index)
        self.judge_pull_status(op, floor, resp, e)

    def judge_pull_status(self, op: Pull, floor: int, resp: Response, e: Event) -> None:
        """The code and offsets against the queue's length bounds and against the answer's own offsets.

        rule: pull/status-codes, pull/found
        """
        queue = (op.topic, op.queue_id)
        o, code, n = op.offset, resp.code, len(resp.records)
        ceiling = self.ceiling(queue)
        top = "∞" if ceiling is None else str(ceiling)
        overflow_one = int(self.model.semantics.overflow_one_code())
        allowed: set[int] = set()
        if ceiling is None or o < ceiling:
            allowed.add(int(Code.SUCCESS))
        if o >= floor and (ceiling is None or o <= ceiling):
            allowed.add(overflow_one if o > 0 else int(Code.PULL_NOT_FOUND))
        if o > floor:
            allowed.add(int(Code.PULL_OFFSET_MOVED))
        if code not in allowed:
            self.report(
                "wrong-pull-status",
                "pull/status-codes",
                e.index,
                f"pull of {op.topic}:{op.queue_id} from offset {o} answered {code_name(code)}; the queue held "
                f"between {floor} and {top} entries, so the answer is one of "
                f"{', '.join(sorted(code_name(c) for c in allowed)) or 'none'}",
                queues=[queue],
                topics=[op.topic],
            )
            return
        if code == int(Code.SUCCESS):
            next_begin = _int_field(resp, "next_begin_offset")
            most = max(op.max_msgs, 1)  # a batch of 0 still reads one (pull/found)
            if n == 0 or n > most or next_begin != o + n:
                self.report(
                    "wrong-pull-result",
                    "pull/found",
                    e.index,
                    f"FOUND with {n} records (at most {most}) and nextBeginOffset {next_begin} from {o}",
                    queues=[queue],
                )
        elif n:
            self.report(
                "wrong-pull-result",
                "pull/found",
                e.index,
                f"{code_name(code)} with {n} records",
                queues=[queue],
            )
        max_offset, min_offset = _int_field(resp, "max_offset"), _int_field(resp, "min_offset")
        self.note_queue_growth(queue, max_offset, ceiling)
        if max_offset is None or min_offset is None:
            self.report(
                "wrong-pull-offsets",
                "pull/status-codes",
                e.index,
                f"a pull of {op.topic}:{op.queue_id} answered without minOffset and maxOffset",
                queues=[queue],
            )
            return
        problems = []
        if min_offset != 0:
            problems.append(f"minOffset {min_offset} (nothing is deleted: 0)")
        if max_offset < floor or (ceiling is not None and max_offset > ceiling):
            problems.append(f"maxOffset {max_offset}, the queue held between {floor} and {top}")
        # The code the answer's own max offset calls for.
        if o < max_offset:
            own = int(Code.SUCCESS)
        elif o == max_offset:
            own = overflow_one if o > 0 else int(Code.PULL_NOT_FOUND)
        else:
            own = int(Code.PULL_OFFSET_MOVED)
        if code != own:
            problems.append(
                f"{code_name(code)} does not match its own maxOffset {max_offset} (that is {code_name(own)})"
            )
        elif code == int(Code.PULL_NOT_FOUND) and _int_field(resp, "next_begin_offset") not in (None, o):
            problems.append(
                f"nextBeginOffset {_int_field(resp, 'next_begin_offset')} at the end of the queue, not {o}"
            )
        if problems:
            self.report(
                "wrong-pull-offsets",
                "pull/status-codes",
                e.index,
                f"pull of {op.topic}:{op.queue_id} from {o}: {'; '.join(problems)}",
                queues=[queue],
            )

    # -- GET_MAX_OFFSET ------------------------------------------------------------------------------------

    def apply_max_offset(self, inv: Event, op: GetMaxOffset) -> Completion:
        queue = (op.topic, op.queue_id)
        floor = self.floor(queue, inv.time) if self.counted(queue) else 0

        def complete(resp: Response, e: Event) -> None:
            self.count("offsets")
            if resp.code != int(Code.SUCCESS):
                self.report(
                    "wrong-response",
                    "dispatch/max-offset",
                    e.index,
                    f"GET_MAX_OFFSET of {op.topic}:{op.queue_id}: expected SUCCESS, got {code_name(resp.code)}",
                    queues=[queue],
                )
                return
            got = _int_field(resp, "offset")
            ceiling = self.ceiling(queue)
            self.note_queue_growth(queue, got, ceiling)
            if got is None or got < floor or (ceiling is not None and got > ceiling):
                top = "∞" if ceiling is None else str(ceiling)
                excess = 0  # how many more entries (fewer, when negative) than the model's allow
                if got is not None:
                    excess = got - floor if got < floor else (got - ceiling if ceiling is not None else 0)
                rule, note = self.excess_rule(queue, excess, "dispatch/max-offset")
                self.report(
                    "wrong-max-offset",
                    rule,
                    e.index,
                    f"GET_MAX_OFFSET of {op.topic}:{op.queue_id} answered {got}; the queue held between "
                    f"{floor} and {top} entries{note}",
                    queues=[queue],
                )

        return complete

    # -- VIEW_MESSAGE_BY_ID, QUERY_MESSAGE --------------------------------------------------------------------

    def known_record(self, r: Record) -> Record | None:
        """The model's record a looked-up record is: by its commit-log offset, else among the model's
        records of its UNIQ_KEY (a record without one, such as an op message of RMQ_SYS_TRANS_OP_HALF_TOPIC:
        among the records of its topic and queue) with its topic and body.

        Never the first match: one key may have several such records (the schedule copies of a message
        sent back more than once, one per send-back; op messages that name the same half offset), and the
        record looked up is judged against the one it is, the candidate whose compared fields are its
        own, else the closest (fewest differing fields, then the same queue offset)."""
        model_offset = self.target_to_model.get(r.commit_log_offset)
        if model_offset is not None:
            return self.state.store.lookup(model_offset)
        store = self.state.store
        if r.topic == OP_TOPIC and r.uniq_key is None:
            return self.known_op_record(r)
        if r.uniq_key is not None:
            offsets: Iterable[int] = store.uniq.get(r.uniq_key, ())
        else:
            offsets = (entry[0] for entry in store.cq(r.topic, r.queue_id))
        candidates = [
            m
            for clo in offsets
            if clo not in self.phantoms
            and (m := store.lookup(clo)) is not None
            and m.topic == r.topic
            and m.body == r.body
            and m.uniq_key == r.uniq_key
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda m: (len(lookup_diffs(r, m)), m.queue_offset != r.queue_offset))

    def known_op_record(self, r: Record) -> Record | None:
        """An op message of RMQ_SYS_TRANS_OP_HALF_TOPIC is the model's when every half-queue offset its
        body names (the target's offsets, read as the model's through the half table: the check service's
        put-back copies sit at offsets of their own) is one the model's op messages of that queue name.
        Which ENDs one op message groups is the 5.x batch service's timing (transaction/op-batch: written
        on its tick, several at once), so the body is judged as that set; the other fields against the
        model's op message that shares the most of it."""
        got = op_offsets(r.body)
        if got is None:
            return None
        mapped = {self.half_table_target_to_model.get(o, o) for o in got}
        models = [
            m
            for entry in self.state.store.cq(r.topic, r.queue_id)
            if entry[0] not in self.phantoms and (m := self.state.store.lookup(entry[0])) is not None
        ]
        named = [(m, set(op_offsets(m.body) or ())) for m in models]
        if not named or not mapped <= set().union(*(n for _, n in named)):
            return None
        best, _ = max(named, key=lambda mn: (len(mapped & mn[1]), -abs(mn[0].queue_offset - r.queue_offset)))
        return attrs.evolve(best, body=r.body)

    def compare_lookup(self, r: Record, want: Record | None, what: str, e: Event) -> None:
        if want is None:
            self.report(
                "wrong-lookup-result",
                "put/commit-log-lookup",
                e.index,
                f"{what} returned {r.uniq_key} in {r.topic}, which the model never stored",
                uniq=r.uniq_key,
            )
            return
        diffs = lookup_diffs(r, want)
        if diffs:
            # The same message in another place: the rule that says where the model stored it.
            placed = placement_rule(r, want) if set(diffs) <= {"topic", "queue"} else None
            self.report(
                "wrong-lookup-result",
                placed or "put/commit-log-lookup",
                e.index,
                f"{what} returned {r.uniq_key} with another {', '.join(diffs)} than the model's record"
                + (
                    f" (stored in {r.topic}:{r.queue_id}, the model stores it in {want.topic}:{want.queue_id})"
                    if placed
                    else ""
                ),
                uniq=r.uniq_key,
            )

    def apply_view(self, inv: Event, op: ViewMessage) -> Completion:
        def complete(resp: Response, e: Event) -> None:
            self.count("lookups")
            model_offset = self.target_to_model.get(op.commit_log_offset)
            if model_offset is not None and model_offset not in self.phantoms:
                # A record the target named: it must be found, and be the model's.
                if resp.code != int(Code.SUCCESS) or len(resp.records) != 1:
                    self.report(
                        "wrong-response",
                        "put/commit-log-lookup",
                        e.index,
                        f"VIEW of offset {op.commit_log_offset} (a stored record): {code_name(resp.code)} "
                        f"with {len(resp.records)} record(s), expected SUCCESS with one",
                    )
                    return
                self.compare_lookup(resp.records[0], self.state.store.lookup(model_offset), "VIEW", e)
            elif resp.code == int(Code.SUCCESS):
                # An offset the history never named: whatever is there must be a record the model has.
                for r in resp.records[:1]:
                    self.compare_lookup(r, self.known_record(r), "VIEW", e)
            elif resp.code != int(Code.SYSTEM_ERROR):
                self.report(
                    "wrong-response",
                    "put/commit-log-lookup",
                    e.index,
                    f"VIEW of offset {op.commit_log_offset}: {code_name(resp.code)}, expected SUCCESS or SYSTEM_ERROR",
                )

        return complete

    def apply_query(self, inv: Event, op: QueryUniqKey) -> Completion:
        before = self.model.query(self.state, op.topic, op.uniq_key)
        certain = isinstance(before, Found) and any(
            x.seen_at is not None or (not x.optional and (lt := self.latest(x)) is not None and lt < inv.time)
            for x in self.expectations.get((op.uniq_key, op.topic), ())
        )

        def complete(resp: Response, e: Event) -> None:
            self.count("lookups")
            after = self.model.query(self.state, op.topic, op.uniq_key)
            if certain and resp.code != int(Code.SUCCESS):
                want = "SUCCESS"
            elif isinstance(after, Rejected) and resp.code != int(after.code):
                want = code_name(int(after.code))
            elif resp.code not in (int(Code.SUCCESS), int(Code.QUERY_NOT_FOUND)):
                want = "SUCCESS or QUERY_NOT_FOUND"
            else:
                for r in resp.records:
                    if r.topic != op.topic or r.uniq_key != op.uniq_key:
                        self.report(
                            "wrong-lookup-result",
                            "put/commit-log-lookup",
                            e.index,
                            f"QUERY of {op.uniq_key} in {op.topic} returned {r.uniq_key} in {r.topic}",
                            uniq=op.uniq_key,
                        )
                    else:
                        self.compare_lookup(r, self.known_record(r), "QUERY", e)
                return
            rule, note = "put/commit-log-lookup", ""
            held = [x for x in self.schedule_pending(op.uniq_key) if x.topic == op.topic]
            if (
                resp.code == int(Code.SUCCESS)
                and held
                and any(r.uniq_key == op.uniq_key for r in resp.records)
            ):
                # Found in its topic while the model holds it in the schedule topic: stored at once.
                rule, note = (
                    "put/delay-eligibility",
                    " (the model holds it in the schedule topic until it is due)",
                )
            self.report(
                "wrong-response",
                rule,
                e.index,
                f"QUERY of {op.uniq_key} in {op.topic}: {code_name(resp.code)}, expected {want}{note}",
                uniq=op.uniq_key,
            )

        return complete


def op_offsets(body: bytes) -> list[int] | None:
    """The half-queue offsets an op message's body names ("5" on 4.9.x, "25,27,28," from a 5.x batch);
    None when it is not such a list."""
    try:
        parts = [p for p in body.decode("ascii").split(",") if p]
        return [int(p) for p in parts] if parts and all(p.isdigit() for p in parts) else None
    except UnicodeDecodeError:
        return None


def lookup_diffs(r: Record, want: Record) -> list[str]:
    """The fields a looked-up record is compared on (put/commit-log-lookup) that differ from ``want``'s."""
    return [
        name
        for name, a, b in (
            ("topic", r.topic, want.topic),
            ("queue", r.queue_id, want.queue_id),
            ("body", r.body, want.body),
            ("flag", r.flag, want.flag),
            ("reconsumeTimes", r.reconsume_times, want.reconsume_times),
            ("UNIQ_KEY", r.uniq_key, want.uniq_key),
        )
        if a != b
    ]

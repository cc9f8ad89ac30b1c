"""What the checker concludes: anomalies, the root causes they group into, and the verdict.

Every anomaly names its rule and the event that shows it. An anomaly that follows from an earlier one
(a message the target refused cannot be delivered later; a queue the target filled differently from
the model answers different offsets) carries ``cause``: the index of the anomaly it follows from, so
that a broker's author sees the root causes first and the consequences under them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

# Every anomaly the checker can report: its name, the rule it names by default (an anomaly may name a
# more precise rule: the rule of the expectation it breaks), and what it means. tests/fixtures/histories
# holds a history that produces each one.
ANOMALIES: Final[Mapping[str, tuple[str, str]]] = {
    # the history itself
    "malformed-history": ("history/well-formed", "an event the checker cannot read as a history event"),
    "unknown-operation": ("history/known-operations", "an operation kind the checker does not know"),
    "unjudged-answer": ("history/judged-answers", "an answer the checker cannot judge"),
    # the protocol (the rule the adapter named: a wire/... rule, or the rule defining the answer)
    "malformed-answer": (
        "wire/request-response",
        "an answer a client cannot use: a field missing or of the wrong type, a frame that cannot be read",
    ),
    # when things become visible
    "early-delivery": ("schedule/due-time", "visible before it may be"),
    "late-delivery": ("schedule/due-time", "visible, or still missing, after its window closed"),
    "lost-message": ("put/send-result", "never visible although its queue was read past its window"),
    "duplicate-delivery": ("put/send-result", "delivered again (allowed only after a restart)"),
    "unexpected-message": ("put/send-result", "a message in a topic it was never sent to"),
    "visible-half-message": ("transaction/half-message", "a half message visible before any commit"),
    "rollback-visible": ("transaction/rollback", "visible after a rollback"),
    "early-discard": ("transaction/check-discard", "discarded before the model discards it"),
    "wrong-dlq": ("sendback/dlq-route", "dead-lettered where the model retries, or the reverse"),
    # what a record holds
    "wrong-retry-level": ("sendback/delay-level", "a retry copy's DELAY differs from the model's"),
    "wrong-reconsume-times": ("sendback/reconsume-times", "reconsumeTimes differs"),
    "wrong-properties": ("put/stored-properties", "a compared property differs, is missing or is extra"),
    "wrong-sys-flag": ("transaction/committed-message", "the sysFlag differs"),
    "wrong-prepared-offset": ("transaction/committed-message", "preparedTransactionOffset is not the half's"),
    "wrong-queue": ("put/send-result", "visible in another queue than the model's"),
    "wrong-queue-offset": ("put/queue-offset", "read at another queue offset than its send result named"),
    "wrong-body": ("put/send-result", "the body differs from what was sent"),
    "wrong-flag": ("put/send-result", "the flag differs from what was sent"),
    # answers
    "wrong-send-result": ("put/send-result", "a send response's queue id or queue offset differs"),
    "wrong-response": ("put/send-result", "a response code differs from the model's"),
    "wrong-pull-status": ("pull/status-codes", "a pull's code is not one the model gives for the queue"),
    "wrong-pull-result": ("pull/found", "a record not at the offset the pull reads, or a bad FOUND"),
    "wrong-pull-offsets": ("pull/status-codes", "a pull's min/max offsets are not the queue's"),
    "wrong-max-offset": ("dispatch/max-offset", "GET_MAX_OFFSET is not the queue's max offset"),
    "wrong-lookup-result": ("put/commit-log-lookup", "VIEW or QUERY returned another record"),
    "inconsistent-queue": ("dispatch/in-order", "one queue offset held two different messages"),
    "fifo-violation": ("schedule/fifo-per-level", "a later entry of a level delivered first"),
    # transaction checks
    "early-check": ("transaction/check-timeout", "a check the model does not send then"),
    "missing-check": ("transaction/check-timeout", "a check the model sends that never came"),
    "wrong-check-times": ("transaction/check-times", "TRANSACTION_CHECK_TIMES differs"),
    "wrong-check-message": ("wire/check-request", "a check carries another message than the half's"),
    "check-after-resolution": ("transaction/check-resolved", "a check of a committed or rolled-back message"),
    "repeated-check": (
        "transaction/check-restart",
        "a record checked again after a restart, though the broker had written its progress past it",
    ),
}

# Anomalies about a CHECK_TRANSACTION_STATE the broker sent (or did not): what they show concerns the
# broker's check requests, whatever event they are reported at.
CHECK_ANOMALIES: Final = frozenset(
    {
        "early-check",
        "missing-check",
        "wrong-check-times",
        "wrong-check-message",
        "check-after-resolution",
        "repeated-check",
    }
)

# What a verdict counts in ``checked``: each a kind of comparison with the model that was made.
CHECK_KINDS: Final = (
    "responses",  # a completion's code (and fields) compared with the model's answer
    "records",  # a record a pull returned matched to what the model stored, and compared
    "absences",  # an expectation judged missing after its queue was read past its window
    "pulls",  # a pull's status and offsets judged against the model's queue
    "offsets",  # a GET_MAX_OFFSET judged against the model's queue
    "lookups",  # a VIEW / QUERY answer compared with the model's records
    "checks",  # a CHECK_TRANSACTION_STATE matched to the model's check
    "order",  # a pair of delivered copies of one level compared for FIFO
)


@attrs.frozen
class Anomaly:
    name: str
    rule: str
    event: int  # index of the event that shows it (-1: the history as a whole)
    message: str
    # The anomaly (its index in the verdict's list) whose root this one follows from; None: a cause.
    cause: int | None = None
    # What it is about ("uniq:<UNIQ_KEY>", "queue:<topic>:<id>", "topic:<topic>"): links consequences.
    subjects: tuple[str, ...] = ()

    @property
    def is_cause(self) -> bool:
        return self.cause is None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rule": self.rule,
            "event": self.event,
            "message": self.message,
            "cause": self.cause,
            "subjects": list(self.subjects),
        }


@attrs.frozen
class RootCause:
    """One kind of cause (a rule broken one way), its first showing, and what follows from it."""

    rule: str
    name: str
    first: int  # the index of its first anomaly
    event: int  # the event where it first showed
    message: str  # the first anomaly's message
    causes: tuple[int, ...]  # every anomaly of this kind that is a cause
    consequences: tuple[int, ...]  # every anomaly that follows from one of them

    def to_json(self, anomalies: tuple[Anomaly, ...]) -> dict[str, Any]:
        kinds = Counter(anomalies[i].name for i in self.consequences)
        return {
            "rule": self.rule,
            "name": self.name,
            "event": self.event,
            "message": self.message,
            "occurrences": len(self.causes),
            "consequence_count": len(self.consequences),
            "consequence_kinds": dict(sorted(kinds.items())),
            "anomalies": [anomalies[i].to_json() | {"index": i} for i in self.causes],
            "consequences": [anomalies[i].to_json() | {"index": i} for i in self.consequences],
        }


def root_causes(anomalies: tuple[Anomaly, ...]) -> tuple[RootCause, ...]:
    """The causes grouped by (rule, name), in the order they first showed, with their consequences."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, a in enumerate(anomalies):
        if a.cause is None:
            groups.setdefault((a.rule, a.name), []).append(i)
    root_of = {i: key for key, ids in groups.items() for i in ids}
    following: dict[tuple[str, str], list[int]] = {key: [] for key in groups}
    for i, a in enumerate(anomalies):
        if a.cause is not None:
            root = a.cause
            while anomalies[root].cause is not None:  # a consequence of a consequence
                root = anomalies[root].cause  # type: ignore[assignment]
            following[root_of[root]].append(i)
    out = [
        RootCause(
            rule,
            name,
            ids[0],
            anomalies[ids[0]].event,
            anomalies[ids[0]].message,
            tuple(ids),
            tuple(following[rule, name]),
        )
        for (rule, name), ids in groups.items()
    ]
    return tuple(sorted(out, key=lambda r: (r.event < 0, r.event, r.first)))


# What a verdict concludes; "unknown" is never a pass.
Status = Literal["pass", "fail", "unknown"]


@attrs.frozen
class Verdict:
    """The checker's conclusion. Its truth value is whether it passed: ``assert verdict`` fails on a
    failure and on "unknown"; ``status`` keeps the three-way string."""

    status: Status
    anomalies: tuple[Anomaly, ...]
    consumed: int
    total: int
    reason: str = ""
    hazards: tuple[str, ...] = ()
    # How many comparisons with the model were made, per kind (CHECK_KINDS): a pass with nothing
    # checked is "unknown", never "pass".
    checked: Mapping[str, int] = attrs.field(factory=dict)
    # How often each allowance (allowances.ALLOWANCES) was used: what the target did beyond the model's
    # one exact answer that the spec allows.
    allowances: Mapping[str, int] = attrs.field(factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def __bool__(self) -> bool:
        return self.passed

    @property
    def root_causes(self) -> tuple[RootCause, ...]:
        return root_causes(self.anomalies)

    @property
    def checked_total(self) -> int:
        return sum(self.checked.values())

    def to_json(self) -> dict[str, Any]:
        """Everything: every anomaly (none cut), the root causes first with their consequences."""
        return {
            "status": self.status,
            "passed": self.passed,
            "summary": self.summary(),
            "root_causes": [r.to_json(self.anomalies) for r in self.root_causes],
            "anomalies": [a.to_json() for a in self.anomalies],
            "consumed": self.consumed,
            "total": self.total,
            "reason": self.reason,
            "hazards": list(self.hazards),
            "checked": dict(self.checked),
            "allowances": dict(self.allowances),
        }

    def summary(self) -> str:
        """One paragraph for a broker's author: what was checked, and what to fix first."""
        checked = ", ".join(f"{kind} {n}" for kind, n in self.checked.items() if n) or "nothing"
        seen = f"{self.consumed} of {self.total} events read; compared with the model: {checked}."
        if self.passed:
            text = f"The target behaved as the model allows. {seen}"
            if self.hazards:
                text += f" Allowed but risky behaviour seen: {'; '.join(self.hazards[:3])}."
            if self.allowances:
                used = ", ".join(f"{name} {n}×" for name, n in sorted(self.allowances.items()))
                text += f" Allowances used: {used}."
            return text
        if self.status == "unknown":
            return f"No verdict: {self.reason}. {seen} Nothing wrong was seen, but this is not a pass."
        roots = self.root_causes
        first = roots[0]
        text = (
            f"The target diverges from the model in {len(roots)} way{'s' if len(roots) != 1 else ''}. "
            f"Fix {first.rule} first ({first.name}, first at event {first.event}): {first.message}."
        )
        if first.consequences:
            text += (
                f" {len(first.consequences)} later anomal{'ies' if len(first.consequences) != 1 else 'y'} "
                "follow from it and are listed under it, not as causes of their own."
            )
        if len(first.causes) > 1:
            text += f" The same happened {len(first.causes) - 1} more time(s)."
        if len(roots) > 1:
            rest = "; ".join(f"{r.rule} ({r.name}, {len(r.causes)}×)" for r in roots[1:6])
            more = f" and {len(roots) - 6} more" if len(roots) > 6 else ""
            text += f" Other causes: {rest}{more}."
        return f"{text} {seen}"

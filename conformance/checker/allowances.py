"""Allowances as data: what the checker accepts beyond the model's one exact answer, one row each.

Each row names the allowance, the rule and the source fact it rests on (file and method at a release
tag), the window in which it applies and how often it may apply. The checker code that makes an
allowance names its row (``CheckerBase.allow``), and the verdict counts how often each was used
(``Verdict.allowances``). Every row has a test at its bound (tests/test_checker_restart_bounds.py):
just inside passes, just outside fails. docs/checker.md shows the table ``allowance_table`` renders.

So far the rows are the restart allowances (issue 23, item 1, started there): the other allowances of
the checker (epsilon windows, readings of check rounds, unanswered one-way requests, ...) are still
made in code without a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

_SCHEDULE_4 = "store/src/main/java/org/apache/rocketmq/store/schedule/ScheduleMessageService.java"
_SCHEDULE_5 = "broker/src/main/java/org/apache/rocketmq/broker/schedule/ScheduleMessageService.java"
_CONTROLLER = "broker/src/main/java/org/apache/rocketmq/broker/BrokerController.java"


@attrs.frozen
class Allowance:
    name: str
    rule: str
    source: str  # file and method at a tag
    window: str  # when it applies
    how_often: str  # how often it may apply


ALLOWANCES: Final[Mapping[str, Allowance]] = {
    a.name: a
    for a in (
        Allowance(
            "restart-redelivery",
            "schedule/restart-redelivery",
            f"{_SCHEDULE_4} `start`, `DeliverDelayedMessageTimerTask.executeOnTimeup`, `messageTimeup` "
            f"@ rocketmq-all-4.9.7; {_SCHEDULE_5} `start`, `DeliverDelayedMessageTimerTask.executeOnTimeUp` "
            "@ rocketmq-all-5.5.0",
            "a scheduled copy delivered (first, or again) at most flushDelayOffsetInterval + ε before the "
            "restart's invoke (further back while the broker had been up less than 10 s), or while it "
            "stopped, comes again after the invoke and by the completion + FIRST_DELAY_TIME + ε, with the "
            "first copy's body, flag, sysFlag, queue and properties",
            "once per schedule entry per restart (the model's own copy delivered again takes it)",
        ),
        Allowance(
            "restart-queue-growth",
            "schedule/restart-redelivery",
            f"{_SCHEDULE_4} `start`, `DeliverDelayedMessageTimerTask.executeOnTimeup` @ rocketmq-all-4.9.7",
            "a queue the schedule service delivers into, after a restart: its max offset (a pull's, "
            "GET_MAX_OFFSET) above the model's",
            "one entry per schedule entry whose delivery may have fallen in a restart's window, per restart",
        ),
        Allowance(
            "restart-stretched-window",
            "schedule/restart-redelivery",
            f"{_SCHEDULE_4} `start` (FIRST_DELAY_TIME) @ rocketmq-all-4.9.7; {_CONTROLLER} `shutdown` "
            "@ rocketmq-all-4.9.7",
            "a scheduled (or timer) copy whose window was still open at the restart's invoke: until the "
            "completion + FIRST_DELAY_TIME (a timer copy: one precision) + ε",
            "once per copy per restart",
        ),
        Allowance(
            "restart-unheard-check",
            "transaction/check-restart",
            f"{_CONTROLLER} `shutdown` @ rocketmq-all-4.9.7, `shutdownBasicService` @ rocketmq-all-5.5.0",
            "a check the model makes between the restart's invoke (less ε and the run slack) and its "
            "completion: the remoting server is closed, the copy written, nobody hears it",
            "every check in that window",
        ),
        Allowance(
            "restart-stop-discard",
            "transaction/check-restart",
            f"{_CONTROLLER} `shutdownBasicService` @ rocketmq-all-5.5.0; "
            "common/src/main/java/org/apache/rocketmq/common/ServiceThread.java `shutdown` @ rocketmq-all-5.5.0",
            "the checks after an orderly stop of a half message stored before it, unresolved, whose count "
            "was at most the stop's runs below transactionCheckMax, until a check of it is seen",
            "once per transaction per orderly stop",
        ),
    )
}


def allowance_table() -> str:
    """The rows as a Markdown table (docs/checker.md holds it; a test keeps the two in step)."""
    lines = [
        "| allowance | rule | source | window | how often |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| `{a.name}` | {a.rule} | {a.source} | {a.window} | {a.how_often} |" for a in ALLOWANCES.values()
    ]
    return "\n".join(lines)

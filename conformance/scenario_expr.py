"""Scenario values written against the broker's configuration: ``=EXPR`` strings.

A scenario is portable when its times and expected values follow the target's own settings instead of
one table of numbers. Any string value in a step that starts with ``=`` is an expression, evaluated
when the step runs::

    - at: "=delay(3) - 1"                  # just before a level-3 message sent at 0 is due
      pull: {topic: T}
      expect: {code: PULL_NOT_FOUND}
    - send: {topic: T, body: a, props: {DELAY: "=levels + 1"}}   # one above the highest level
      expect: {code: SUCCESS, queue_id: 0}

The language is integer arithmetic (``+ - * // %``, parentheses, ``min``/``max``) over these names:

| name | value |
|---|---|
| ``levels`` | the number of delay levels (``messageDelayLevel``) |
| ``delay(n)`` | the delay of level ``n`` in ms; a scenario that names a level the table lacks needs a longer table |
| ``timeout`` | ``transactionTimeOut`` (ms) |
| ``interval`` | ``transactionCheckInterval`` (ms) |
| ``check_max`` | ``transactionCheckMax`` |
| ``max_size`` | ``maxMessageSize`` (bytes) |
| ``queues`` | ``defaultTopicQueueNums`` |
| ``retry_max`` | ``retryMaxTimes`` (the group default) |
| ``reserved`` | ``fileReservedTime`` in ms |
| ``flush`` | the schedule offsets' flush interval (ms; 10 000 in every release) |
| ``op_sleep`` | how much later a check run that found op messages checks: 1000 ms on the 5.x profile, 0 on 4.9 |
| ``at(m)`` | when the step that sent ``m`` ran (ms since the scenario started) |
| ``check(m, k)`` | when the ``k``-th check request for ``m`` arrived (ms since start) |
| ``now`` | when this step starts (ms since start) |
| ``precision`` | ``timerPrecisionMs`` (5.x timer) |
| ``timer_max`` | ``timerMaxDelaySec`` in ms |
| ``roll`` | the timer's roll window in ms (``timerRollWindowSlot`` slots of ``precision``) |
| ``timer_flush`` | ``timerFlushIntervalMs`` (the timer's checkpoint interval) |
| ``epoch(x)`` | the target's clock at ``x`` ms since start (epoch ms: a ``TIMER_DELIVER_MS`` value) |
| ``timer_due(x)`` | when a timer message asked for at ``x`` (ms since start) is due: ``epoch(x)`` rounded up to ``precision``, as ms since start |

Settings whose values are text, each a whole expression (``CLUSTER: "=cluster"``) or a template
(``"{=cluster}"``), never in arithmetic: a scenario reads them from the target's profile instead of
asserting one broker's value (``portability_problems`` in :mod:`.scenarios` finds literals):

| name | value |
|---|---|
| ``cluster`` | ``brokerClusterName`` (``DefaultCluster`` unless the profile says otherwise) |
| ``region`` | ``regionId`` (``DefaultRegion`` unless the profile says otherwise) |

A literal string that starts with ``=`` is written ``==...``. Inside a longer string, ``{=EXPR}`` is
replaced by the value: ``DELAY: "0{=levels}"`` is ``"018"`` on a table of 18 levels.

Pure: nothing here talks to a target. :class:`Needs` names a capability a configuration lacks, so the
runner can skip with an actionable reason; :class:`ExprError` is an authoring mistake.
"""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from rmqspec.reference.config import BrokerConfig
from rmqspec.reference.model import semantics_for

FLUSH_DELAY_OFFSET_INTERVAL_MS = 10_000
# CPython 3.11 counts the AST converter's recursion depth per interpreter, not per thread: two scenario threads
# parsing at once fail with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905;
# seen on apache:4.9.7 in the release matrix, 2026-11-27). One parse at a time.
_PARSE_LOCK = threading.Lock()


def _parse(text: str) -> ast.Expression:
    with _PARSE_LOCK:
        return ast.parse(text.strip(), mode="eval")


__all__ = ["Env", "ExprError", "Needs", "evaluate", "is_expr", "need", "parse_need", "resolve"]


class ExprError(ValueError):
    """An expression that is not valid (syntax, unknown name): the scenario is wrong, not the target."""


class Needs(Exception):
    """The configuration lacks what the scenario needs; ``what`` says it, ``fix`` says what to change."""

    def __init__(self, what: str, fix: str) -> None:
        self.what = what
        self.fix = fix
        super().__init__(f"needs {what} ({fix})")


@attrs.frozen
class Env:
    """What expressions can see: the target's configuration and the scenario's timeline so far."""

    config: BrokerConfig
    sent_at: Mapping[str, int] = attrs.field(factory=dict)  # ref -> ms since start of its send step
    checks_at: Mapping[str, tuple[int, ...]] = attrs.field(factory=dict)  # ref -> arrival times
    now: int = 0
    t0: int = 0  # the target's clock (epoch ms) when the scenario started

    def names(self) -> dict[str, int]:
        c = self.config
        return {
            "levels": c.max_delay_level,
            "timeout": c.transaction_timeout_ms,
            "interval": c.transaction_check_interval_ms,
            "check_max": c.transaction_check_max,
            "max_size": c.max_message_size,
            "queues": c.default_topic_queue_nums,
            "retry_max": c.retry_max_times,
            "reserved": c.file_reserved_time_h * 3_600_000,
            "flush": FLUSH_DELAY_OFFSET_INTERVAL_MS,
            "op_sleep": semantics_for(c.profile).check_op_wait_ms() or 0,
            "now": self.now,
            "precision": c.timer_precision_ms,
            "timer_max": c.timer_max_delay_sec * 1000,
            "roll": c.timer_roll_slots * c.timer_precision_ms,
            "timer_flush": c.timer_flush_interval_ms,
        }

    def texts(self) -> dict[str, str]:
        """The settings whose values are text (a whole ``=NAME``, never arithmetic)."""
        return {"cluster": self.config.cluster_name, "region": self.config.region_id}

    def functions(self) -> dict[str, Callable[..., int]]:
        return {
            "delay": self.delay,
            "at": self.at,
            "check": self.check,
            "min": min,
            "max": max,
            "epoch": self.epoch,
            "timer_due": self.timer_due,
        }

    def epoch(self, x: int) -> int:
        return self.t0 + x

    def timer_due(self, x: int) -> int:
        """rule: timer/due-time: a deliver time D is read with the slot before ceil(D / precision)."""
        p = self.config.timer_precision_ms
        return -(-(self.t0 + x) // p) * p - self.t0

    def delay(self, level: int) -> int:
        ms = self.config.delay_ms(level)
        if ms is None:
            have = self.config.max_delay_level
            raise Needs(
                f"a delay table of at least {level} levels (messageDelayLevel has {have})",
                f"give the broker a messageDelayLevel with {level} or more levels",
            )
        return ms

    def at(self, ref: str) -> int:
        if ref not in self.sent_at:
            raise ExprError(f"at({ref}): no step sent a message named {ref!r} before this one")
        return self.sent_at[ref]

    def check(self, ref: str, k: int) -> int:
        times = self.checks_at.get(ref, ())
        if not 1 <= k <= len(times):
            raise ExprError(f"check({ref}, {k}): only {len(times)} check request(s) for {ref!r} so far")
        return times[k - 1]


_BINOPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


_TEMPLATE = re.compile(r"\{=([^{}]*)\}")


def is_expr(value: object) -> bool:
    return isinstance(value, str) and value.startswith("=") and not value.startswith("==")


def evaluate(text: str, env: Env) -> int:
    """The value of ``=EXPR`` (or of ``EXPR``) under ``env``."""
    source = text[1:] if text.startswith("=") else text
    try:
        tree = _parse(source)
    except SyntaxError as e:
        raise ExprError(f"{text!r} is not an expression: {e.msg}") from None
    names, functions = env.names(), env.functions()

    def ev(node: ast.AST) -> int:
        match node:
            case ast.Expression(body=body):
                return ev(body)
            case ast.Constant(value=bool()):
                raise ExprError(f"{text!r}: booleans are not numbers here")
            case ast.Constant(value=int() as v):
                return v
            case ast.Name(id=name) if name in names:
                return names[name]
            case ast.Name(id=name) if name in env.texts():
                raise ExprError(f"{text!r}: {name!r} is text (a setting's name): write it alone, '={name}'")
            case ast.Name(id=name):
                raise ExprError(f"{text!r}: unknown name {name!r} (known: {', '.join(sorted(names))})")
            case ast.UnaryOp(op=ast.USub(), operand=x):
                return -ev(x)
            case ast.UnaryOp(op=ast.UAdd(), operand=x):
                return ev(x)
            case ast.BinOp(left=a, op=op, right=b) if type(op) in _BINOPS:
                left, right = ev(a), ev(b)
                if isinstance(op, ast.FloorDiv | ast.Mod) and right == 0:
                    raise ExprError(f"{text!r}: division by zero")
                return _BINOPS[type(op)](left, right)
            case ast.Call(func=ast.Name(id=fname), args=args, keywords=[]) if fname in functions:
                values: list[Any] = []
                for arg in args:
                    # at(m), check(m, k): a bare name that is not a config name is a message name
                    if isinstance(arg, ast.Name) and arg.id not in names and fname in ("at", "check"):
                        values.append(arg.id)
                    else:
                        values.append(ev(arg))
                try:
                    return int(functions[fname](*values))
                except TypeError as e:
                    raise ExprError(f"{text!r}: {fname}(): {e}") from None
            case ast.Call(func=ast.Name(id=fname)):
                raise ExprError(
                    f"{text!r}: unknown function {fname!r} (known: {', '.join(sorted(functions))})"
                )
        raise ExprError(f"{text!r}: only whole numbers, names, + - * // % and calls are allowed")

    return ev(tree)


def _text_or_number(text: str, env: Env) -> int | str:
    """A text setting named alone (``=cluster``), else the number ``text`` evaluates to."""
    named = env.texts().get(text.removeprefix("=").strip())
    return named if named is not None else evaluate(text, env)


def resolve(value: Any, env: Env) -> Any:
    """``value`` with every ``=EXPR`` string in it (at any depth) replaced by its value."""
    if is_expr(value):
        return _text_or_number(str(value), env)
    if isinstance(value, str) and value.startswith("=="):
        return value[1:]  # "==x" is the literal string "=x"
    if isinstance(value, str) and "{=" in value:  # a template: "0{=levels}" is "018" on 18 levels
        return _TEMPLATE.sub(lambda m: str(_text_or_number(m.group(1), env)), value)
    if isinstance(value, Mapping):
        return {k: resolve(v, env) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [resolve(v, env) for v in value]
    return value


_COMPARE: dict[type[ast.cmpop], tuple[str, Callable[[int, int], bool]]] = {
    ast.Lt: ("<", lambda a, b: a < b),
    ast.LtE: ("<=", lambda a, b: a <= b),
    ast.Gt: (">", lambda a, b: a > b),
    ast.GtE: (">=", lambda a, b: a >= b),
    ast.Eq: ("==", lambda a, b: a == b),
    ast.NotEq: ("!=", lambda a, b: a != b),
}
# The settings behind the names a need may compare, for the skip reason.
_SETTING = {
    "levels": "messageDelayLevel",
    "timeout": "transactionTimeOut",
    "interval": "transactionCheckInterval",
    "check_max": "transactionCheckMax",
    "max_size": "maxMessageSize",
    "queues": "defaultTopicQueueNums",
    "retry_max": "retryMaxTimes",
    "reserved": "fileReservedTime",
}


def parse_need(text: str) -> tuple[str, str, str]:
    """A scenario's ``needs`` entry, ``EXPR OP EXPR`` (OP one of ``< <= > >= == !=``), as its left
    side, operator and right side; ExprError when it is not one comparison."""
    try:
        tree = _parse(text)
    except SyntaxError as e:
        raise ExprError(f"need {text!r} is not a comparison: {e.msg}") from None
    body = tree.body
    if not (isinstance(body, ast.Compare) and len(body.ops) == 1 and type(body.ops[0]) in _COMPARE):
        raise ExprError(f"need {text!r} must be one comparison: EXPR < EXPR (or <=, >, >=, ==, !=)")
    return ast.unparse(body.left), _COMPARE[type(body.ops[0])][0], ast.unparse(body.comparators[0])


def need(text: str, env: Env) -> None:
    """Raise Needs unless the configuration meets ``text`` (a ``needs`` entry: ``interval > timeout``)."""
    left, op, right = parse_need(text)
    a, b = evaluate(left, env), evaluate(right, env)
    if next(f for sym, f in _COMPARE.values() if sym == op)(a, b):
        return
    names = sorted({n.id for n in ast.walk(_parse(text)) if isinstance(n, ast.Name)})
    shown = ", ".join(f"{_SETTING.get(n, n)} {env.names()[n]}" for n in names if n in env.names())
    raise Needs(
        f"settings where {left} {op} {right} (the target has {shown or f'{a} {op} {b} false'})",
        f"run it on a broker whose settings meet {left} {op} {right}",
    )

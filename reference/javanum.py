"""Numbers as Java parses them: ``Integer.parseInt`` and ``Long.parseLong`` (radix 10).

RocketMQ reads numbers from property strings (``DELAY``, ``REAL_QID``, ``TRANSACTION_CHECK_TIMES``,
``CHECK_IMMUNITY_TIME_IN_SECONDS``, op bodies) and from ``messageDelayLevel`` with these two methods, and
what a broker does with a string Java refuses is part of the rules that read it. Python's ``int()``
is more lenient (it strips whitespace and accepts ``_`` between digits), so the model never uses it on
a broker-read string: ``" 3"``, ``"3 "`` and ``"3_0"`` are not numbers to Java.

Java's rules (``java.lang.Integer.parseInt(String, 10)``, the same in every JDK the brokers run on):
an optional leading ``+`` or ``-``, then at least one digit; a digit is any character for which
``Character.digit(c, 10)`` is not -1, which includes the other Unicode decimal digits (``"٣"`` is 3);
the string is read one UTF-16 unit at a time, so a digit outside the Basic Multilingual Plane is not one;
the value must fit the type (``Integer.MIN_VALUE`` .. ``Integer.MAX_VALUE``); anything else throws
``NumberFormatException``. Here a refusal is ``None``.
"""

from __future__ import annotations

import unicodedata

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def _digit(c: str) -> int | None:
    # Character.digit(char, 10): the character's decimal digit value (Unicode category Nd), else -1.
    # Java reads the string one UTF-16 unit at a time, so a digit outside the BMP ("𝟓", U+1D7D3) is two
    # surrogates, neither of them a digit.
    if ord(c) > 0xFFFF or unicodedata.category(c) != "Nd":
        return None
    return unicodedata.decimal(c)  # every Nd character has one (no default: CrossHair's shim takes none)


def _parse(text: str | None, lo: int, hi: int) -> int | None:
    if text is None or text == "":
        return None
    sign, digits = 1, text
    if text[0] in "+-":
        sign, digits = (-1 if text[0] == "-" else 1), text[1:]
    if not digits:
        return None
    value = 0
    for c in digits:
        d = _digit(c)
        if d is None:
            return None
        value = value * 10 + d
    value *= sign
    return value if lo <= value <= hi else None


def parse_int(text: str | None) -> int | None:
    """``Integer.parseInt(text)``, or None where Java throws ``NumberFormatException``."""
    return _parse(text, INT_MIN, INT_MAX)


def parse_long(text: str | None) -> int | None:
    """``Long.parseLong(text)``, or None where Java throws ``NumberFormatException``."""
    return _parse(text, LONG_MIN, LONG_MAX)

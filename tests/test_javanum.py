"""``Integer.parseInt`` / ``Long.parseLong`` as the model reads broker strings (reference/javanum.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqspec.reference.javanum import INT_MAX, INT_MIN, LONG_MAX, parse_int, parse_long


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("+3", 3),
        ("-3", -3),
        ("007", 7),
        ("-0", 0),
        ("\u0663", 3),  # ARABIC-INDIC DIGIT THREE: Character.digit accepts every Nd digit
        ("\uff11\uff12", 12),  # FULLWIDTH 1 2
        ("2147483647", INT_MAX),
        ("-2147483648", INT_MIN),
    ],
)
def test_what_java_accepts(text: str, value: int) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "+",
        "-",
        " 3",
        "3 ",
        "3_0",
        "3.0",
        "0x10",
        "1e3",
        "\u00b2",
        "\U0001d7d3",  # MATHEMATICAL BOLD DIGIT FIVE: Nd, but two UTF-16 surrogates to Java, neither a digit
        "1\U0001d7d3",
        "++3",
        "2147483648",
        "-2147483649",
    ],
)
def test_what_java_refuses(text: str | None) -> None:
    # "\u00b2" (SUPERSCRIPT TWO) is category No, not Nd: Character.digit gives -1.
    assert parse_int(text) is None


def test_long_range() -> None:
    assert parse_long("2147483648") == 2147483648
    assert parse_long(str(LONG_MAX)) == LONG_MAX
    assert parse_long(str(LONG_MAX + 1)) is None


@given(st.integers(INT_MIN, INT_MAX))
def test_every_int_round_trips(n: int) -> None:
    assert parse_int(str(n)) == n


@given(st.text(alphabet="0123456789+- _", max_size=8))
def test_agrees_with_a_strict_ascii_reading(text: str) -> None:
    import re

    strict = re.fullmatch(r"[+-]?[0-9]+", text)
    want = int(text) if strict and INT_MIN <= int(text) <= INT_MAX else None
    assert parse_int(text) == want

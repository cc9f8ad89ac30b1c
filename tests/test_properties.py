"""Properties encoding (facts §0): round trips and the lenient decoder, as Hypothesis properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rmqspec.reference.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    as_read_back,
    decode_properties,
    encode_properties,
    java_string_hash,
)

SEPS = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)
text = st.text(min_size=1).filter(lambda s: not any(c in s for c in SEPS))


@given(st.dictionaries(text, text))
def test_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


@given(st.dictionaries(text, text))
def test_no_trailing_separator(props: dict[str, str]) -> None:
    s = encode_properties(props)
    assert not s.endswith(PROPERTY_SEPARATOR)
    assert s.count(PROPERTY_SEPARATOR) == max(0, len(props) - 1)


@given(st.text())
def test_decoder_never_fails_and_drops_only_what_it_must(s: str) -> None:
    out = decode_properties(s)
    for k, v in out.items():
        assert k and v
        assert NAME_VALUE_SEPARATOR not in k
        assert PROPERTY_SEPARATOR not in k + v


@given(st.lists(st.tuples(text, text), min_size=1))
def test_last_duplicate_wins(pairs: list[tuple[str, str]]) -> None:
    s = PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in pairs)
    expected: dict[str, str] = {}
    for k, v in pairs:
        expected[k] = v
    assert decode_properties(s) == expected


def test_lenient_cases() -> None:
    assert decode_properties("") == {}
    assert decode_properties("a\x01") == {}  # empty value
    assert decode_properties("\x01v") == {}  # empty key
    assert decode_properties("ab") == {}  # shorter than 3
    assert decode_properties("abc") == {}  # no separator
    assert decode_properties("k\x01v\x02\x02K\x01V") == {"k": "v", "K": "V"}
    assert encode_properties({"a": "1", "b": None, "c": "3"}) == "a\x011\x02c\x013"


@given(st.dictionaries(st.text(), st.text()))
def test_read_back_is_what_a_reader_sees(props: dict[str, str]) -> None:
    seen = as_read_back(props)
    assert (seen if seen is not None else props) == decode_properties(encode_properties(props))


def test_java_string_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("tagA") == 3552231  # 116*31^3 + 97*31^2 + 103*31 + 65
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00  # UTF-16 code units, as Java hashes
    assert java_string_hash("d") == 100
    assert java_string_hash("polygenelubricants") == -2147483648  # Java's classic Integer.MIN_VALUE hash

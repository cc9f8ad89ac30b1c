"""Message properties: the ``key \\x01 value \\x02`` string and its lenient decoding (facts §0).

rule: properties/encoding, properties/lenient-decoding
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def encode_properties(props: Mapping[str, str | None] | Iterable[tuple[str, str | None]]) -> str:
    """Join pairs as ``k\\x01v`` with ``\\x02`` between them, no trailing separator; None values skipped.

    rule: properties/encoding
    """
    items = props.items() if isinstance(props, Mapping) else props
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in items if v is not None)


def decode_properties(s: str) -> dict[str, str]:
    """Lenient decoding as MessageDecoder.string2messageProperties does it.

    Segments shorter than 3 characters, with no ``\\x01``, an empty key or an empty value are ignored;
    for a duplicate key the last one wins. rule: properties/lenient-decoding
    """
    out: dict[str, str] = {}
    for seg in s.split(PROPERTY_SEPARATOR):
        if len(seg) < 3:
            continue
        i = seg.find(NAME_VALUE_SEPARATOR)
        if i <= 0:
            continue
        key, value = seg[:i], seg[i + 1 :]
        if not value:
            continue
        out[key] = value
    return out


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` (UTF-16 code units, 32-bit signed), used as the tags code. rule: dispatch/tags-code"""
    h = 0
    for unit in _utf16_units(s):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _utf16_units(s: str) -> Iterable[int]:
    b = s.encode("utf-16-be")
    return (int.from_bytes(b[i : i + 2], "big") for i in range(0, len(b), 2))


def as_read_back(props: Mapping[str, str]) -> dict[str, str] | None:
    """What a reader decodes from the string ``props`` is stored as, or None when that is ``props`` itself.

    A stored record keeps only its properties string, so an entry the lenient decoder drops (empty key or
    value, a key or value holding a separator) is not there for any consumer. rule: properties/lenient-decoding
    """
    for k, v in props.items():
        if (
            not k
            or not v
            or len(k) + len(v) < 2
            or any(c in k or c in v for c in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR))
        ):
            return decode_properties(encode_properties(props))
    return None

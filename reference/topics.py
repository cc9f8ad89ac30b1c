"""Topic names as TopicValidator checks them, per release (facts §0). rule: put/topic-validation

4.9.0-4.9.2 match ``^[%|a-zA-Z0-9_-]+$`` with ``Matcher.matches()`` (the whole name); 4.9.3 and later look
each character up in a 128-entry table. Both accept the same names: ``%``, ``|``, ASCII letters, digits,
``_`` and ``-``. A trailing newline is refused by both (unlike Python's ``$``, which matches before it).
"""

from __future__ import annotations

import unicodedata

from .constants import DLQ_PREFIX, RETRY_PREFIX, TOPIC_MAX_LENGTH

TOPIC_CHARS = frozenset("%|-_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
RETRY_OR_DLQ_TOPIC_MAX_LENGTH = 255  # 5.4.0 and later
_ALLOWED = "^[%|a-zA-Z0-9_-]+$"


def _java_whitespace(c: str) -> bool:
    # Character.isWhitespace: space separators other than the no-break ones, and \t \n \v \f \r \x1c-\x1f.
    if c in "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f":
        return True
    return unicodedata.category(c) in ("Zs", "Zl", "Zp") and c not in "\u00a0\u2007\u202f"


def java_is_blank(text: str) -> bool:
    """UtilAll.isBlank: empty, or only what Java calls white space."""
    return all(_java_whitespace(c) for c in text)


def has_illegal_char(topic: str) -> bool:
    """TopicValidator.isTopicOrGroupIllegal: any character outside the allowed set (Java counts UTF-16
    units, but a character outside the set is outside it either way)."""
    return any(c not in TOPIC_CHARS for c in topic)


def problem_4_9(topic: str) -> str | None:
    """The remark TopicValidator.validateTopic gives at 4.9.8 (and 5.0.0-5.3.3), or None for a valid name."""
    if java_is_blank(topic):
        return "The specified topic is blank."
    if has_illegal_char(topic):
        return f"The specified topic contains illegal characters, allowing only {_ALLOWED}"
    if len(topic) > TOPIC_MAX_LENGTH:  # only ASCII is left here
        return "The specified topic is longer than topic max length."
    return None


def problem_5_5(topic: str) -> str | None:
    """The remark of TopicValidator.validateTopic at 5.4.0-5.5.0: retry and DLQ topics may be 255 long."""
    if java_is_blank(topic):
        return "The specified topic is blank."
    if has_illegal_char(topic):
        return f"The specified topic: {topic}, contains illegal characters, allowing only {_ALLOWED}"
    if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
        if len(topic) > RETRY_OR_DLQ_TOPIC_MAX_LENGTH:
            return (
                f"The specified topic is DLQ or Retry topic: {topic}, and it's longer than topic max length: "
                f"{RETRY_OR_DLQ_TOPIC_MAX_LENGTH}"
            )
    elif len(topic) > TOPIC_MAX_LENGTH:
        return f"The specified topic: {topic}, is longer than topic max length: {TOPIC_MAX_LENGTH}"
    return None

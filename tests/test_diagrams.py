"""The site's diagrams come out of the model: the ladder and the check timeline."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from rmqspec.reference.config import BrokerConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs" / "hooks"))
import diagrams


def test_default_ladder_is_17_deliveries_then_dlq() -> None:
    hops = diagrams.retry_ladder(BrokerConfig())
    deliveries = [h for h in hops if not h["topic"].startswith("%DLQ%")]
    assert len(deliveries) == 17
    assert [h["level"] for h in deliveries[1:]] == [str(level) for level in range(3, 19)]
    assert hops[-1]["topic"] == "%DLQ%CG" and hops[-1]["reconsume"] == 17
    assert deliveries[1]["at"] == 10_000 and deliveries[-1]["at"] == 17_140_000


def test_check_timeline_default_and_offline() -> None:
    events = diagrams.check_timeline(BrokerConfig(), 20 * 60_000)
    checks = [e for e in events if e["what"] == "check"]
    assert [e["times"] for e in checks] == [str(n) for n in range(1, 16)]
    # The service runs at multiples of the interval on the epoch clock: T0 is 20 s past one, so the
    # first run after the 6 s timeout is 40 s after the send, then every 60 s.
    assert checks[0]["at"] == 40_000
    assert [b["at"] - a["at"] for a, b in itertools.pairwise(checks)] == [60_000] * 14
    assert events[-1]["what"] == "discarded (max-checks)" and events[-1]["at"] == 40_000 + 15 * 60_000
    short = BrokerConfig(
        transaction_timeout_ms=3000, transaction_check_interval_ms=5000, transaction_check_max=3
    )
    offline = diagrams.check_timeline(short, 60_000, online=False)
    assert [e["what"] for e in offline] == ["check skipped"] * 3 + ["discarded (max-checks)"]
    assert offline[-1]["at"] == 20_000


def test_page_renders() -> None:
    text = diagrams.page()
    assert "delivered **17 times**" in text
    assert "<svg" in text

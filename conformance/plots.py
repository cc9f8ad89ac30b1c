"""Plots a broker's author wants, from any history (a wall-clock run's workload, a recorded trace):

* **lateness per level**: for each delayed message delivered, how long after its earliest allowed moment
  its copy was stored (the send's invoke time plus the level's delay), as a CDF per level, beside the
  allowed window (0 .. epsilon): a copy left of 0 was early, right of epsilon late;
* **the retry ladder**: for each send-back, the observed time from the send-back to the stored copy
  against the copy's reconsumeTimes, the spec's delay for it drawn as steps (level 3 + reconsumeTimes - 1,
  clamped), retries and dead letters told apart, on an integer axis;
* **checks over time**: every check request a producer received, by message and check count, with the
  check rounds the history shows.

Each plot states how many points it has; a plot with nothing to show says so on the image. Pure in the
sense of the suite: it reads events, writes PNG files, and returns what it drew (for tests).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from rmqspec.reference.config import BrokerConfig

from .history import Event


@attrs.frozen
class Drawn:
    path: Path
    points: int  # what the plot shows (0: it says there was nothing to show)


def _props(d: Any) -> dict[str, str]:
    return dict(d.get("properties") or {}) if isinstance(d, dict) else {}


def lateness(events: Sequence[Event], config: BrokerConfig) -> dict[int, list[int]]:
    """Level -> ms after the earliest allowed store time of each delivered copy of a delayed message."""
    sent: dict[str, tuple[int, int]] = {}  # UNIQ_KEY -> (invoke time, clamped level)
    for e in events:
        if e.type == "invoke" and e.f == "send":
            p = _props(e.value)
            delay = p.get("DELAY", "")
            if delay.isdigit() and int(delay) > 0 and p.get("UNIQ_KEY"):
                level = min(int(delay), config.max_delay_level)
                if level > 0:
                    sent.setdefault(p["UNIQ_KEY"], (e.time, level))
    out: dict[int, list[int]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for e in events:
        if e.type == "ok" and e.f == "pull":
            for r in e.value.get("records") or []:
                uniq = _props(r).get("UNIQ_KEY")
                if (
                    uniq in sent
                    and not str(r.get("topic", "")).startswith("%")
                    and (uniq, r["queue_offset"]) not in seen
                ):
                    seen.add((uniq, int(r["queue_offset"])))
                    t, level = sent[uniq]
                    out[level].append(int(r["store_timestamp"]) - t - config.delay_levels[level - 1])
    return dict(out)


def ladder(
    events: Sequence[Event], config: BrokerConfig
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(reconsumeTimes of the copy, ms from the send-back to the copy) of retried and of dead-lettered
    copies, from the send-backs the history shows."""
    by_offset: dict[int, tuple[str, int]] = {}
    copies: dict[tuple[str, int], tuple[int, bool]] = {}
    for e in events:
        if e.type == "ok" and e.f == "pull":
            for r in e.value.get("records") or []:
                uniq = _props(r).get("UNIQ_KEY", "")
                by_offset.setdefault(int(r["commit_log_offset"]), (uniq, int(r["reconsume_times"])))
                topic = str(r.get("topic", ""))
                if topic.startswith(("%RETRY%", "%DLQ%")):
                    key = (uniq, int(r["reconsume_times"]))
                    copies.setdefault(key, (int(r["store_timestamp"]), topic.startswith("%DLQ%")))
    retried: list[tuple[int, int]] = []
    dead: list[tuple[int, int]] = []
    for e in events:
        if e.type == "invoke" and e.f == "send_back":
            src = by_offset.get(int(e.value.get("offset", -1)))
            if src is None:
                continue
            uniq, rc = src
            copy = copies.get((uniq, rc + 1))
            if copy is not None:
                (dead if copy[1] else retried).append((rc + 1, copy[0] - e.time))
    return retried, dead


def expected_ladder(config: BrokerConfig, up_to: int) -> list[tuple[int, int]]:
    """(reconsumeTimes of the copy, the spec's delay) for delay level 0: level 3 + reconsumeTimes - 1."""
    out = []
    for rc in range(1, up_to + 1):
        level = min(3 + rc - 1, config.max_delay_level)
        if level >= 1:
            out.append((rc, config.delay_levels[level - 1]))
    return out


def checks(events: Sequence[Event]) -> dict[str, list[tuple[int, int]]]:
    """UNIQ_KEY -> (arrival time, TRANSACTION_CHECK_TIMES) of every check request."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e.f == "check" and e.type == "ok":
            p = _props(e.value.get("message"))
            times = p.get("TRANSACTION_CHECK_TIMES", "0")
            out[p.get("UNIQ_KEY", "?")].append((e.time, int(times) if times.isdigit() else 0))
    return dict(out)


def plot_history(
    events: Sequence[Event], config: BrokerConfig, epsilon_ms: int, out_dir: Path, title: str = ""
) -> list[Drawn]:
    """The three plots of a history into ``out_dir``; returns what each shows."""
    from .checker import infer_check_rounds

    out_dir.mkdir(parents=True, exist_ok=True)
    retried, dead = ladder(events, config)
    seen = checks(events)
    rounds = (
        infer_check_rounds(events, config.transaction_check_interval_ms, config.transaction_timeout_ms)
        if seen
        else ()
    )
    t0 = min((e.time for e in events), default=0)
    return [
        plot_lateness(lateness(events, config), epsilon_ms, out_dir / "lateness.png", title),
        plot_ladder(retried, dead, config, out_dir / "retry-ladder.png", title),
        plot_checks(seen, rounds, t0, config, out_dir / "checks.png", title),
    ]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_lateness(late: dict[int, list[int]], epsilon_ms: int, path: Path, title: str = "") -> Drawn:
    """Lateness CDF per level against the allowed window 0 .. epsilon."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    n = 0
    for level in sorted(late):
        xs = sorted(late[level])
        n += len(xs)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=f"level {level} ({len(xs)})")
    ax.axvspan(
        0, max(epsilon_ms, 1), color="tab:green", alpha=0.12, label=f"allowed: 0 .. epsilon {epsilon_ms} ms"
    )
    ax.axvline(0, color="tab:red", lw=1)
    ax.set_xlim(
        left=min([-max(epsilon_ms, 10) // 10] + [min(v) for v in late.values() if v]),
        right=max([max(epsilon_ms, 10) * 1.2] + [max(v) for v in late.values() if v]),
    )
    ax.set_xlabel("ms after the earliest allowed delivery (send time + the level's delay)")
    ax.set_ylabel("share of the level's copies")
    ax.set_title("delivery lateness per level" + (f" — {title}" if title else ""))
    if n:
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.text(0.5, 0.5, "no delayed message delivered", transform=ax.transAxes, ha="center")
    return _save(fig, plt, path, n)


def plot_ladder(
    retried: Sequence[tuple[int, int]],
    dead: Sequence[tuple[int, int]],
    config: BrokerConfig,
    path: Path,
    title: str = "",
) -> Drawn:
    """Observed send-back-to-copy delay per reconsumeTimes, the spec's delay as steps, dead letters apart."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    top = max([rc for rc, _ in [*retried, *dead]] + [1])
    expect = expected_ladder(config, top)
    if expect:
        ax.step(
            [rc for rc, _ in expect],
            [ms / 1000 for _, ms in expect],
            where="mid",
            color="tab:gray",
            label="the spec's delay (level 3 + reconsumeTimes - 1)",
        )
    jitter = _jitter(retried)
    ax.scatter(
        [rc + j for (rc, _), j in zip(retried, jitter, strict=True)],
        [ms / 1000 for _, ms in retried],
        s=10,
        alpha=0.5,
        label=f"retried copies ({len(retried)})",
    )
    if dead:
        ax.scatter(
            [rc for rc, _ in dead],
            [ms / 1000 for _, ms in dead],
            marker="x",
            color="tab:red",
            label=f"dead letters ({len(dead)})",
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("reconsumeTimes of the copy")
    ax.set_ylabel("s from the send-back to the stored copy")
    ax.set_title("retry ladder" + (f" — {title}" if title else ""))
    if retried or dead:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no send-back", transform=ax.transAxes, ha="center")
    return _save(fig, plt, path, len(retried) + len(dead))


def plot_checks(
    seen: dict[str, list[tuple[int, int]]],
    rounds: Sequence[int],
    t0: int,
    config: BrokerConfig,
    path: Path,
    title: str = "",
) -> Drawn:
    """Every check request by message and count over time, with the check rounds seen."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    total = 0
    for i, (_uniq, pts) in enumerate(sorted(seen.items(), key=lambda kv: kv[1][0][0])):
        total += len(pts)
        if i < 200:
            ax.plot(
                [(t - t0) / 1000 for t, _ in pts], [c for _, c in pts], marker="o", ms=3, lw=0.6, alpha=0.7
            )
    for r in rounds:
        ax.axvline((r - t0) / 1000, color="tab:gray", lw=0.4, alpha=0.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("s since the history began (grey: the check rounds the history shows)")
    ax.set_ylabel("TRANSACTION_CHECK_TIMES of the request")
    ax.set_title(
        f"check requests ({len(seen)} messages, interval {config.transaction_check_interval_ms} ms)"
        + (f" — {title}" if title else "")
    )
    if not total:
        ax.text(0.5, 0.5, "no check request", transform=ax.transAxes, ha="center")
    return _save(fig, plt, path, total)


def _jitter(points: Sequence[tuple[int, int]]) -> list[float]:
    """A small, deterministic horizontal spread so that equal points do not collapse into one dot."""
    return [((i * 7919) % 21 - 10) / 60 for i in range(len(points))]


def _save(fig: Any, plt: Any, path: Path, points: int) -> Drawn:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Drawn(path, points)

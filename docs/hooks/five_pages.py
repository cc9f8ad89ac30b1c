"""mkdocs hook: the 5.x pages, generated at build time.

- ``timer.md``: the 5.x timer, with a timeline computed by running the reference model (the 5.x profile):
  messages asked for at various times, the slot each waits in (``TIMER_OUT_MS``), when each is delivered,
  and a roll; as a Mermaid sequence diagram and the same data as a table. A model change that alters them
  changes the page; a model that no longer does what the page says breaks the build (``PluginError``).
- ``five.md``: the 4.9 → 5.x differences, one row per rule, taken from each rule's **Versions** line (the
  part that names 5.x releases) and its **Source** line's ``Observed:`` part, after a hand-written
  introduction (``docs/hooks/five_intro.md``: what the real 5.5.0 broker and proxy showed).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

from rmqspec.reference.config import BrokerConfig, Profile
from rmqspec.reference.constants import TIMER_TOPIC, Prop
from rmqspec.reference.model import Model
from rmqspec.reference.observations import SendOk, TimerDelivered, TimerRolled
from rmqspec.reference.put import Message
from rmqspec.reference.records import props

T0 = 1_700_000_000_000  # the logical clock's origin (epoch ms), a multiple of every precision
TIMER_PAGE = "timer.md"
FIVE_PAGE = "five.md"
_RELEASE = re.compile(r"\b5\.\d+\.\d+\b")


def timer_story(precision: int = 1000, roll_slots: int = 3) -> list[dict[str, Any]]:
    """Run four timer messages on the 5.x model; what happened to each, in ms since the first send."""
    cfg = BrokerConfig(
        "1s 2s", profile=Profile.V5, timer_precision_ms=precision, timer_roll_window_slot=roll_slots
    )
    model = Model(cfg)
    state = model.initial()
    asks = [
        ("a", 300, {Prop.TIMER_DELAY_MS: "2500"}, "TIMER_DELAY_MS 2500"),
        ("b", 300, {Prop.TIMER_DELIVER_MS: str(T0 + 2000)}, "TIMER_DELIVER_MS +2000 (a multiple)"),
        ("c", 400, {Prop.TIMER_DELIVER_MS: str(T0 + 2001)}, "TIMER_DELIVER_MS +2001"),
        (
            "d",
            500,
            {Prop.TIMER_DELAY_SEC: "5"},
            f"TIMER_DELAY_SEC 5 (beyond a roll window of {roll_slots} slots)",
        ),
    ]
    rows: dict[str, dict[str, Any]] = {}
    now = T0
    for name, at, extra, what in asks:
        state, _ = model.advance(state, now, T0 + at)
        now = T0 + at
        state, obs = model.send(state, Message("TimerT", name.encode(), props(UNIQ_KEY=name, **extra)), now)
        if not isinstance(obs, SendOk) or obs.record.topic != TIMER_TOPIC:
            raise PluginError(
                f"timer page: the model did not rewrite message {name} into {TIMER_TOPIC}: {obs}"
            )
        out = int(obs.record.properties[Prop.TIMER_OUT_MS]) - T0
        rows[name] = {"name": name, "sent": at, "what": what, "slot": out, "delivered": None, "rolls": 0}
    state, events = model.advance(state, now, T0 + 20_000)
    for e in events:
        if isinstance(e, TimerRolled):
            rows[e.source.uniq_key or ""]["rolls"] += 1
        elif isinstance(e, TimerDelivered):
            rows[e.copy.uniq_key or ""]["delivered"] = e.copy.store_timestamp - T0
    for r in rows.values():
        if r["delivered"] != r["slot"] + precision:
            raise PluginError(
                f"timer page: message {r['name']} was not delivered one slot after its TIMER_OUT_MS"
            )
    return list(rows.values())


def _s(ms: int) -> str:
    return f"{ms / 1000:g} s"


def timer_mermaid(rows: list[dict[str, Any]]) -> str:
    lines = [
        "sequenceDiagram",
        "    participant P as Producer",
        "    participant B as Broker",
        "    participant W as Timer wheel",
    ]
    events: list[tuple[int, int, str]] = []
    for n, r in enumerate(rows):
        events.append((r["sent"], n, f"    P->>B: {r['name']}: {r['what']} (t = {_s(r['sent'])})"))
        events.append(
            (
                r["sent"],
                n,
                f"    B->>W: {r['name']} into rmq_sys_wheel_timer, slot TIMER_OUT_MS = {_s(r['slot'])}",
            )
        )
        if r["rolls"]:
            events.append(
                (
                    r["sent"],
                    n,
                    f"    Note over W: {r['name']} rolls {r['rolls']}x (put back into the timer topic)",
                )
            )
        events.append(
            (r["delivered"], n, f"    W->>B: {r['name']} delivered to TimerT (t = {_s(r['delivered'])})")
        )
    lines += [text for _t, _n, text in sorted(events, key=lambda e: (e[0], e[1]))]
    return "\n".join(lines)


def timer_page() -> str:
    rows = timer_story()
    out = [
        "# Timer messages (5.x)",
        "",
        "A RocketMQ 5 producer can ask for any delivery time: `TIMER_DELIVER_MS` (an absolute time),",
        "`TIMER_DELAY_MS` or `TIMER_DELAY_SEC` (from now). The broker rewrites such a message into the timer",
        "topic `rmq_sys_wheel_timer` with `TIMER_OUT_MS`, the wheel slot it waits in (its time floored to",
        "`timerPrecisionMs`, one slot earlier when it is a multiple), and delivers it to its real topic once the",
        "slot has passed: never before its time, less than one precision after it. The rules are",
        "[`timer/*`](spec/timer.md); a gRPC client asks for a time with the message's delivery timestamp.",
        "",
        "The timeline below is computed by running the reference model (5.x profile, precision 1 s, a roll",
        "window of 3 slots so that a roll shows) when the site is built:",
        "",
        "```mermaid",
        timer_mermaid(rows),
        "```",
        "",
        "| message | asked with | sent at | `TIMER_OUT_MS` (slot) | rolls | delivered at |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['name']} | {r['what']} | {_s(r['sent'])} | {_s(r['slot'])} | {r['rolls']} | {_s(r['delivered'])} |"
        )
    out += [
        "",
        "Times are seconds after the first send on a clock that starts on a whole second. `a` asks for",
        "2.8 s: slot 2 s, delivered at 3 s. `b` asks for exactly 2 s: slot 1 s, delivered at 2 s, on time.",
        "`c` asks for 2.001 s: slot 2 s, delivered at 3 s. `d` is more than the roll window ahead: the timer",
        "parks it in an intermediate slot, puts it back into the timer topic when that slot passes",
        "(`TIMER_ROLL_TIMES`), and delivers it at its own time all the same.",
        "",
        "What the real Apache RocketMQ 5.5.0 broker showed, and the settings, are on the",
        "[4.9 → 5.x differences](five.md) page; the target profile `profiles/short-levels-5.yaml` runs the",
        "timer scenarios on it (`rmqspec conform --target apache:5.5.0 --profile profiles/short-levels-5.yaml`).",
        "",
    ]
    return "\n".join(out)


def five_page(root: Path) -> str:
    from rmqspec.conformance.specdoc import load_spec

    spec = load_spec(root / "spec")
    intro = (root / "docs" / "hooks" / "five_intro.md").read_text(encoding="utf-8")
    out = [intro.rstrip(), "", "## Every rule's 5.x line", ""]
    out += [
        "Generated from the spec: for each rule, what its **Versions** line says beyond the default profile",
        "(the sentences that name 5.x releases), and the real brokers its **Source** line says confirmed it.",
        "Rules that exist only in 5.x name no 4.9 release.",
        "",
        "| rule | 4.9 → 5.x | observed |",
        "|---|---|---|",
    ]
    for rule in spec.rules:
        sentences = re.split(r"(?<=\.)\s+(?=[0-9A-Z])", rule.versions)
        five = [s for s in sentences if _RELEASE.search(s)]
        if not five:
            continue
        text = " ".join(five).replace("|", "\\|")
        area = rule.id.split("/")[0]
        link = f"[`{rule.id}`](spec/{area}.md#{rule.id.replace('/', '-')})"
        out.append(f"| {link} | {text} | {rule.observed or ''} |")
    return "\n".join(out) + "\n"


def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = _root(config)
    for name in (TIMER_PAGE, FIVE_PAGE):
        if files.get_file_from_path(name) is not None:
            raise PluginError(f"five_pages: docs/{name} would hide the generated page; remove it")
    files.append(File.generated(config, TIMER_PAGE, content=timer_page()))
    files.append(File.generated(config, FIVE_PAGE, content=five_page(root)))
    return files

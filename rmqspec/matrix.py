"""The release matrix (``make conform-matrix``): the scenarios whose expected answer changes across releases,
plus a smoke set, on every pinned Apache RocketMQ release; a rule x release table of what each run showed.

Which release a scenario's expected answers hold on:

* its own range, when it names one (``releases: "5.0.0–5.1.0"`` in the scenario; read through the attribute
  ``Scenario.releases``, pairs of first and last release);
* otherwise the releases on which its rules' ``**Versions:**`` lines claim the behaviour the model's profile
  of the line follows (4.9.8 for the 4.9 line, 5.5.0 for 5.x): from the latest boundary a Versions line
  names inside the line up to that release (:func:`line_claim`). A Versions line that says a release
  behaves otherwise keeps the scenario off that release: the table says "read, not run" there.

A cell of the table is ``pass``, ``fail`` (a run contradicts the rule on a release its Versions line
covers: the matrix run fails), ``skip``/``unknown`` (the run could not show it, with why), ``read, not
run`` (no scenario of the rule can run on that release here) or ``not run`` (the release was not run).
Nothing here starts a broker but :func:`run_release`; the table building is pure (tests/test_matrix.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rmqspec.conformance.contract import Feature
from rmqspec.conformance.scenarios import Scenario
from rmqspec.conformance.specdoc import Spec
from rmqspec.reference.config import Profile

Key = tuple[int, int, int]
# The releases each line's model profile follows, and where each line starts.
LINE_RELEASE: dict[Profile, str] = {Profile.V4_9: "4.9.8", Profile.V5: "5.5.0"}
LINE_START: dict[Profile, str] = {Profile.V4_9: "4.9.0", Profile.V5: "5.0.0"}
PROFILES: dict[Profile, str] = {
    Profile.V4_9: "profiles/short-levels.yaml",
    Profile.V5: "profiles/short-levels-5.yaml",
}
SMOKE_PER_AREA = 3
READ_NOT_RUN = "read, not run"
DIFFERS = "differs, as its Versions line says"
NOT_RUN = "not run"

_RELEASE = re.compile(r"\b(\d+)\.(\d+)\.(\d+)\b")
_RANGE = re.compile(r"\b(\d+\.\d+\.\d+)\s*[–-]\s*(\d+\.\d+\.\d+)\b")
_FROM = re.compile(r"\b(?:from|since)\s+(\d+\.\d+\.\d+)\b", re.IGNORECASE)


class MatrixError(ValueError):
    """Bad input to the matrix (an unknown release, a results file that is not the matrix's)."""


def key(release: str) -> Key:
    m = _RELEASE.fullmatch(release)
    if m is None:
        raise MatrixError(f"{release!r} is not a release (X.Y.Z, e.g. 5.1.1)")
    return int(m[1]), int(m[2]), int(m[3])


def line_of(release: str) -> Profile | None:
    """The model profile of a release's line: 4.9.x the 4.9 profile, 5.y.z the 5.x one; None otherwise."""
    major, minor, _ = key(release)
    if (major, minor) == (4, 9):
        return Profile.V4_9
    return Profile.V5 if major == 5 else None


def shown(k: Key) -> str:
    return ".".join(map(str, k))


def line_claim(versions: str, line: Profile) -> tuple[str, str] | None:
    """The releases of ``line`` (first, last) on which a Versions line claims the behaviour the line's model
    profile follows (4.9.8 or 5.5.0); None when the line names no release of ``line``.

    The claim starts at the latest boundary the text names inside the line: the first release of a range
    that reaches the line's release, a release after a range that ends before it, a "from X", a release
    named alone before the line's release (it behaves otherwise, or the text would not name it). Reading
    prose this way can only narrow a claim: a release it leaves out is shown as "read, not run".
    """
    last = key(LINE_RELEASE[line])
    if "all versions" in versions:
        return LINE_START[line], LINE_RELEASE[line]
    in_line = [k for k in (key(m[0]) for m in _RELEASE.finditer(versions)) if line_of(shown(k)) is line]
    if not in_line:
        return None
    starts: list[Key] = [key(LINE_START[line])]
    ranged: set[int] = set()
    for m in _RANGE.finditer(versions):
        ranged.update(range(m.start(), m.end()))
        a, b = key(m[1]), key(m[2])
        if line_of(m[1]) is not line:
            continue
        if b >= last:
            starts.append(a)
        else:
            starts.append((b[0], b[1], b[2] + 1))
    for m in _FROM.finditer(versions):
        if line_of(m[1]) is line:
            starts.append(key(m[1]))
    for m in _RELEASE.finditer(versions):
        k = key(m[0])
        if m.start() in ranged or line_of(m[0]) is not line or k >= last:
            continue
        if not any(f.start(1) == m.start() for f in _FROM.finditer(versions)):
            starts.append((k[0], k[1], k[2] + 1))
    first = max(starts)
    if first > last:
        return None
    return shown(first), LINE_RELEASE[line]


def has_boundary(versions: str) -> bool:
    """The Versions line names a release inside a line (not only a line's first and model release): the
    expected answer changes across the releases of a line."""
    ends = {*LINE_START.values(), *LINE_RELEASE.values()}
    return any(m[0] not in ends and line_of(m[0]) is not None for m in _RELEASE.finditer(versions))


def scenario_releases(s: Scenario) -> tuple[tuple[str, str], ...]:
    """A scenario's own release ranges (``releases:``), where the scenario format has them; () if none."""
    raw = getattr(s, "releases", ())
    return tuple((str(a), str(b)) for a, b in raw)


@attrs.frozen
class Claim:
    """The releases a scenario's expected answers hold on, and where that was read."""

    ranges: tuple[tuple[str, str], ...]  # empty: no release (every rule's claim left it out)
    source: str  # "scenario" (its own releases) or "versions" (its rules' Versions lines)

    def covers(self, release: str) -> bool:
        k = key(release)
        return any(key(a) <= k <= key(b) for a, b in self.ranges)


def claim(s: Scenario, versions: Mapping[str, str]) -> Claim:
    """Where ``s`` holds: its own ranges, else the intersection of its rules' claims on each line."""
    own = scenario_releases(s)
    if own:
        return Claim(own, "scenario")
    lines = [Profile(s.profile)] if s.profile is not None else list(LINE_RELEASE)
    out: list[tuple[str, str]] = []
    for line in lines:
        lo, hi = key(LINE_START[line]), key(LINE_RELEASE[line])
        for rule in s.rules:
            text = versions.get(rule)
            if text is None:
                continue
            c = line_claim(text, line)
            if c is None:
                lo = (99, 0, 0)
                break
            lo, hi = max(lo, key(c[0])), min(hi, key(c[1]))
        if lo <= hi:
            out.append((shown(lo), shown(hi)))
    return Claim(tuple(out), "versions")


def _quick(s: Scenario) -> bool:
    """A smoke scenario: runs on the shared broker (no settings, restart or clock of its own)."""
    return not s.config and not (s.features & {Feature.RESTART, Feature.OWN_BROKER, Feature.CLOCK_SKEW})


@attrs.frozen
class Selection:
    scenarios: tuple[Scenario, ...]
    why: Mapping[str, str]  # scenario id -> "boundary" or "smoke"


def select(scenarios: Sequence[Scenario], spec: Spec, smoke_per_area: int = SMOKE_PER_AREA) -> Selection:
    """The scenarios of rules with a boundary inside a line, then ``smoke_per_area`` quick ones per area
    (spec file) among the rest, in catalogue order."""
    versions = {r.id: r.versions for r in spec.rules}
    area = {r.id: r.area for r in spec.rules}
    boundary = {rid for rid, text in versions.items() if has_boundary(text)}
    why: dict[str, str] = {}
    for s in scenarios:
        if set(s.rules) & boundary:
            why[s.id] = "boundary"
    per_area: dict[str, int] = {}
    for s in scenarios:
        if s.id in why or not s.rules or not _quick(s):
            continue
        a = area.get(s.rules[0], "")
        if per_area.get(a, 0) < smoke_per_area:
            per_area[a] = per_area.get(a, 0) + 1
            why[s.id] = "smoke"
    return Selection(tuple(s for s in scenarios if s.id in why), why)


def plan(
    selection: Selection, versions: Mapping[str, str], release: str
) -> tuple[list[Scenario], dict[str, str]]:
    """What runs on ``release``: the selected scenarios of its line whose claim covers it; and for the rest,
    why not (scenario id -> reason)."""
    line = line_of(release)
    if line is None:
        raise MatrixError(f"{release} is of no line the spec describes (4.9.x, 5.x)")
    run: list[Scenario] = []
    off: dict[str, str] = {}
    for s in selection.scenarios:
        if s.profile is not None and Profile(s.profile) is not line:
            off[s.id] = f"written for the {s.profile} line"
            continue
        c = claim(s, versions)
        if c.covers(release):
            run.append(s)
        else:
            where = ", ".join(a if a == b else f"{a}–{b}" for a, b in c.ranges) or "no release"
            what = "its releases" if c.source == "scenario" else "its rules' Versions lines claim it on"
            off[s.id] = f"{READ_NOT_RUN}: {what} {where}"
    return run, off


@attrs.frozen
class Outcome:
    """One scenario on one release."""

    scenario: str
    rules: tuple[str, ...]
    outcome: str  # pass, fail, skip, unknown, or READ_NOT_RUN / "other line"
    reason: str = ""
    failed_rules: tuple[str, ...] = ()


@attrs.frozen
class ReleaseRun:
    """What one release did: whether it resolved and booted, and its scenarios' outcomes."""

    release: str
    status: str  # "ran", or why not: "does not resolve: ...", "does not boot: ..."
    outcomes: tuple[Outcome, ...] = ()
    seconds: float = 0.0
    profile: str = ""
    proxy: str = ""  # 5.x: "runs" or why not; "" where there is no proxy or it was not tried
    commit: str = ""  # the rmqspec commit it ran on
    date: str = ""  # when it finished (UTC)

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "status": self.status,
            "profile": self.profile,
            "proxy": self.proxy,
            "commit": self.commit,
            "date": self.date,
            "seconds": round(self.seconds, 1),
            "outcomes": [attrs.asdict(o) for o in self.outcomes],
        }

    @staticmethod
    def from_json(data: Mapping[str, Any], commit: str = "", date: str = "") -> ReleaseRun:
        """``commit``, ``date``: a row written without its own (the document's) are given these."""
        outs = tuple(
            Outcome(
                str(o["scenario"]),
                tuple(o["rules"]),
                str(o["outcome"]),
                str(o.get("reason", "")),
                tuple(o.get("failed_rules", ())),
            )
            for o in data.get("outcomes", ())
        )
        return ReleaseRun(
            str(data["release"]),
            str(data["status"]),
            outs,
            float(data.get("seconds", 0.0)),
            str(data.get("profile", "")),
            str(data.get("proxy", "")),
            str(data.get("commit") or commit),
            str(data.get("date") or date),
        )


def cell(outcomes: Iterable[Outcome], rule: str, claimed: bool = True) -> str:
    """One rule on one release: fail if any scenario of the rule failed on a failure naming it (or naming no
    rule), pass if one passed, else skip / unknown / read, not run, in that order. ``claimed``: the rule's
    Versions line claims the line's model behaviour on this release; a failure where it does not is
    DIFFERS (the release differs, as the line says it does), not a contradiction."""
    mine = [o for o in outcomes if rule in o.rules or rule in o.failed_rules]
    if not mine:
        return NOT_RUN
    if any(o.outcome == "fail" and (rule in o.failed_rules or not o.failed_rules) for o in mine):
        return "fail" if claimed else DIFFERS
    for state in ("pass", "unknown", "skip"):
        if any(o.outcome == state for o in mine):
            return state
    if any(o.outcome == READ_NOT_RUN for o in mine):
        return READ_NOT_RUN
    return NOT_RUN


@attrs.frozen
class Table:
    releases: tuple[str, ...]
    rules: tuple[str, ...]
    cells: Mapping[str, Mapping[str, str]]  # rule -> release -> cell
    contradictions: tuple[tuple[str, str, str], ...]  # (rule, release, scenario) of a failure its rule claims
    # (rule, release, scenario) of a failure on a release the rule's Versions line sets apart
    set_apart: tuple[tuple[str, str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.contradictions


def claims(versions: Mapping[str, str] | None, rule: str, release: str) -> bool:
    """The rule's Versions line claims the line's model behaviour on ``release`` (True without a line)."""
    text = None if versions is None else versions.get(rule)
    line = line_of(release)
    if text is None or line is None:
        return True
    c = line_claim(text, line)
    return c is not None and key(c[0]) <= key(release) <= key(c[1])


def build_table(
    runs: Sequence[ReleaseRun], rules: Sequence[str], versions: Mapping[str, str] | None = None
) -> Table:
    """The rule x release table of ``runs``. A failure is a contradiction when the rule it names claims the
    release in its Versions line (``versions``: rule id -> its line; None: every rule claims every release),
    else it is set apart: the release differs where the spec says it does."""
    cells: dict[str, dict[str, str]] = {r: {} for r in rules}
    bad: list[tuple[str, str, str]] = []
    apart: list[tuple[str, str, str]] = []
    for run in runs:
        for r in rules:
            ok = claims(versions, r, run.release)
            cells[r][run.release] = cell(run.outcomes, r, ok) if run.status == "ran" else NOT_RUN
        for o in run.outcomes:
            if o.outcome == "fail":
                for r in o.failed_rules or o.rules:
                    (bad if claims(versions, r, run.release) else apart).append((r, run.release, o.scenario))
    used = tuple(r for r in rules if any(c != NOT_RUN for c in cells[r].values()))
    return Table(
        tuple(run.release for run in runs),
        used,
        {r: cells[r] for r in used},
        tuple(dict.fromkeys(bad)),
        tuple(dict.fromkeys(apart)),
    )


def outcomes_of(
    report_scenarios: Iterable[Any], off: Mapping[str, str], selection: Selection
) -> list[Outcome]:
    """The outcomes of one release: the report's scenario results and the selected scenarios it did not run."""
    out = [
        Outcome(
            r.scenario.id,
            tuple(r.scenario.rules),
            r.outcome,
            r.reason or "; ".join(f"step {f.step} {f.operation}: {f.message}" for f in r.failures[:3]),
            tuple(r.failed_rules),
        )
        for r in report_scenarios
    ]
    by_id = {s.id: s for s in selection.scenarios}
    for sid, reason in off.items():
        state = READ_NOT_RUN if reason.startswith(READ_NOT_RUN) else "other line"
        out.append(Outcome(sid, tuple(by_id[sid].rules), state, reason))
    return out


def commit_of(root: Path) -> str:
    """The checkout's commit (with "+dirty" when it has uncommitted changes), "unknown" outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def document(runs: Sequence[ReleaseRun], selection: Selection, spec: Spec, commit: str) -> dict[str, Any]:
    """The matrix's JSON (docs/results/matrix.json)."""
    rules = [r.id for r in spec.rules]
    table = build_table(runs, rules, {r.id: r.versions for r in spec.rules})
    return {
        "format": "rmqspec-release-matrix",
        "version": 1,
        "date": _now(),
        "commit": commit,
        "selection": dict(selection.why),
        "releases": [r.to_json() for r in runs],
        "table": {r: dict(table.cells[r]) for r in table.rules},
        "contradictions": [list(c) for c in table.contradictions],
        "set_apart": [list(c) for c in table.set_apart],
    }


_MARK = {"pass": "pass", "fail": "**FAIL**", "skip": "skip", "unknown": "unknown"}


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The site's page of the matrix (docs/release-matrix.md), from its JSON alone."""
    runs = [ReleaseRun.from_json(r, doc["commit"], doc["date"]) for r in doc["releases"]]
    table: Mapping[str, Mapping[str, str]] = doc["table"]
    lines = [
        "# Release matrix",
        "",
        "<!-- written by `make conform-matrix` (rmqspec/matrix.py) from docs/results/matrix.json: do not edit -->",
        "",
        f"Written on {doc['date']} by `make conform-matrix` (its last run at commit `{doc['commit']}`; each "
        "release's row names the date and commit it ran on): on every pinned Apache RocketMQ release, the scenarios of the rules whose **Versions** line names a boundary inside a "
        f"release line ({sum(1 for w in doc['selection'].values() if w == 'boundary')} scenarios) and a "
        f"smoke set ({sum(1 for w in doc['selection'].values() if w == 'smoke')} scenarios, a few per "
        "area). A scenario runs on a release when its own `releases` name it, or else when its rules' "
        "Versions lines claim the behaviour of the line's model profile (4.9.8, 5.5.0) there; elsewhere "
        f"the cell says *{READ_NOT_RUN}*: the claim rests on reading the source at that tag.",
        "",
        "## Releases",
        "",
        "| release | profile | status | proxy (gRPC) | pass | fail | skip | unknown | read, not run | seconds "
        "| run on |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        n = {k: sum(1 for o in run.outcomes if o.outcome == k) for k in ("pass", "fail", "skip", "unknown")}
        rnr = sum(1 for o in run.outcomes if o.outcome == READ_NOT_RUN)
        lines.append(
            f"| {run.release} | {run.profile or '-'} | {run.status} | {run.proxy or '-'} | {n['pass']} | {n['fail']} | {n['skip']} "
            f"| {n['unknown']} | {rnr} | {run.seconds:.0f} | {run.date or '-'} `{run.commit[:12] or '-'}` |"
        )
    contradictions = doc["contradictions"]
    lines += ["", "## Contradictions", ""]
    if contradictions:
        lines += ["| rule | release | scenario |", "|---|---|---|"]
        lines += [f"| `{r}` | {v} | `{s}` |" for r, v, s in contradictions]
    else:
        lines.append("None: no run contradicted a Versions line.")
    apart = doc.get("set_apart", [])
    lines += [
        "",
        "## Failures on releases a Versions line sets apart",
        "",
        "A failure naming a rule whose Versions line says the release behaves otherwise than the line's model "
        "profile: the release differs where the spec says it does (read the failure to see it is that "
        "difference).",
        "",
    ]
    if apart:
        lines += ["| rule | release | scenario |", "|---|---|---|"]
        lines += [f"| `{r}` | {v} | `{s}` |" for r, v, s in apart]
    else:
        lines.append("None.")
    releases = [r.release for r in runs]
    lines += [
        "",
        "## Rule × release",
        "",
        "| rule | " + " | ".join(releases) + " |",
        "|---|" + "---|" * len(releases),
    ]
    for rule, row in table.items():
        cells = [_MARK.get(row.get(v, NOT_RUN), row.get(v, NOT_RUN)) for v in releases]
        lines.append(f"| `{rule}` | " + " | ".join(cells) + " |")
    notes = [
        (run.release, o) for run in runs for o in run.outcomes if o.outcome in ("fail", "skip", "unknown")
    ]
    if notes:
        lines += [
            "",
            "## Why a scenario did not pass",
            "",
            "| release | scenario | outcome | why |",
            "|---|---|---|---|",
        ]
        for release, o in notes:
            why = o.reason.replace("|", "\\|").replace("\n", " ")[:300]
            lines.append(f"| {release} | `{o.scenario}` | {o.outcome} | {why} |")
    return "\n".join(lines) + "\n"


Runner = Callable[[str, list[Scenario], Path], Any]


def run_release(
    release: str,
    selection: Selection,
    versions: Mapping[str, str],
    root: Path,
    out_dir: Path,
    *,
    progress: Callable[[int, int, str], None] | None = None,
    brokers: int = 1,
    commit: str = "",
) -> ReleaseRun:
    """Resolve, boot and run one release's share of the selection (one broker at a time, each stopped)."""
    from rmqspec.adapters.apache.maven import ResolveError, fetch
    from rmqspec.adapters.apache.versions import pinned
    from rmqspec.conform import TargetSpecError, conform

    t0 = time.perf_counter()
    line = line_of(release)
    profile = root / PROFILES[line] if line is not None else None
    try:
        fetch(release)
    except (ResolveError, ValueError) as e:
        return ReleaseRun(release, f"does not resolve: {e}", seconds=time.perf_counter() - t0)
    run, off = plan(selection, versions, release)
    try:
        rep = conform(
            f"apache:{release}",
            scenarios=run,
            examples=0,
            profile=profile,
            workload_seconds=0,
            probe=False,
            save_dir=out_dir / "failures" / f"apache-{release}",
            progress=progress,
            brokers=brokers,
        )
    except TargetSpecError as e:
        return ReleaseRun(release, f"does not boot: {e}", seconds=time.perf_counter() - t0)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"apache-{release}.json").write_text(
        json.dumps(rep.to_json(), indent=1) + "\n", encoding="utf-8"
    )
    outcomes = outcomes_of(rep.scenarios, off, selection)
    rel_profile = str(profile.relative_to(root)) if profile is not None else ""
    proxy = proxy_runs(release, profile) if pinned(release).proxy and profile is not None else ""
    return ReleaseRun(
        release, "ran", tuple(outcomes), time.perf_counter() - t0, rel_profile, proxy, commit, _now()
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def proxy_runs(release: str, profile: Path) -> str:
    """Start the release's proxy (local mode, embedding a broker) with ``profile``'s settings, see it serve
    gRPC, stop it: "runs", or why not."""
    from rmqspec.adapters.apache.launcher import ApacheBroker, BrokerError
    from rmqspec.adapters.apache.maven import ResolveError
    from rmqspec.adapters.remoting.profile import ProfileError, load_profile

    line = line_of(release)
    assert line is not None
    try:
        cfg = load_profile(profile, "127.0.0.1:10911").config
    except ProfileError as e:
        return f"not tried: {e}"
    broker = ApacheBroker(release, attrs.evolve(cfg, profile=line), proxy=True)
    try:
        broker.start()
        return "runs"
    except (BrokerError, ResolveError) as e:
        return f"does not run: {e}"
    finally:
        broker.stop(graceful=False)

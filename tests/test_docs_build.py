"""The docs site builds with ``mkdocs build --strict`` and its spec pages are generated from spec/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SPEC_PUT = """\
# The put path

Intro; see put/delay-clamp and schedule/early.

## put/delay-clamp
**Versions:** 4.9.0–4.9.8 (default profile). 5.x: same.
**Facts:** §1.2

A broker MUST clamp the level (and see schedule/early).

```example
name: clamped
also: [schedule/early]
steps:
  - send: {topic: T, body: a, props: {DELAY: "99"}}
    expect: {code: SUCCESS}
```

## put/queue-offset
**Versions:** 4.9.x.

Offsets are consecutive.
"""

SPEC_SCHEDULE = """\
# Delivery of delayed messages

## schedule/early
**Versions:** 4.9.x.

Never early.
"""


def _site(tmp_path: Path, spec_put: str = SPEC_PUT) -> tuple[subprocess.CompletedProcess[str], Path]:
    root = tmp_path / "project"
    root.mkdir()
    # The guides and the results page link into the real spec, which this small project replaces: links
    # to pages it lacks are reported as info here, everything else stays as strict as the real build.
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert "\nvalidation:\n" in config
    config = config.replace("\nvalidation:\n", "\nvalidation:\n  not_found: info\n")
    (root / "mkdocs.yml").write_text(config, encoding="utf-8")
    shutil.copytree(REPO / "docs", root / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    files = {
        "spec/put.md": spec_put,
        "spec/schedule.md": SPEC_SCHEDULE,
        "reference/model.py": "# rule: put/delay-clamp, schedule/early\n\n# rule: put/queue-offset\n",
        "conformance/checks.py": 'CASES = [dict(rule="put/queue-offset")]\n',
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    site = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(root / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert not (root / "docs" / "spec").exists(), "generated pages must not be written into the source tree"
    return proc, site


@pytest.mark.slow
def test_docs_build_generates_spec_pages_with_rule_anchors(tmp_path: Path) -> None:
    proc, site = _site(tmp_path)
    assert proc.returncode == 0, proc.stderr
    index = (site / "spec" / "index.html").read_text(encoding="utf-8")
    put = (site / "spec" / "put" / "index.html").read_text(encoding="utf-8")
    schedule = (site / "spec" / "schedule" / "index.html").read_text(encoding="utf-8")
    for anchor in ("put-delay-clamp", "put-queue-offset", "schedule-early"):
        assert f'id="{anchor}"' in index
    assert 'id="put-delay-clamp"' in put
    assert 'id="put-queue-offset"' in put
    assert 'id="schedule-early"' in schedule
    # versions, the example as YAML, the traceability lists
    assert "4.9.0–4.9.8 (default profile). 5.x: same." in put
    assert "put/delay-clamp#clamped" in put
    assert "DELAY" in put
    assert "reference/model.py:1" in put
    assert "conformance/checks.py:1" in put
    assert 'href="../schedule/#schedule-early"' in put  # a mention of another rule is a link
    assert "put/delay-clamp#clamped" in schedule  # covered through 'also'
    # the hand-written pages are there too
    for page in ("index.html", "spec-format/index.html", "dependencies/index.html"):
        assert (site / page).is_file()


@pytest.mark.slow
def test_docs_build_fails_on_a_malformed_spec(tmp_path: Path) -> None:
    proc, _ = _site(tmp_path, SPEC_PUT.replace("**Versions:** 4.9.x.\n", ""))
    assert proc.returncode != 0
    assert "spec/put.md:19" in proc.stderr + proc.stdout

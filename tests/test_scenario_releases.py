"""A scenario's ``releases``: parsed, checked against its profile's line, skipped by a target of another
release, and run by the model as a release it covers (docs/spec-format.md, "Releases")."""

from __future__ import annotations

import pytest

from rmqspec.conformance.scenarios import ScenarioError, make_scenario
from rmqspec.reference.config import BrokerConfig, ConfigError, Profile

STEPS = [{"pull": {"topic": "T"}}]


def scenario(releases: object, profile: str = "5.x") -> object:
    return make_scenario(
        {"name": "n", "profile": profile, "releases": releases, "steps": STEPS}, "put/x", "t"
    )


def test_ranges_and_single_releases() -> None:
    s = make_scenario(
        {"name": "n", "profile": "5.x", "releases": "5.0.0–5.1.0, 5.3.1-5.3.3, 5.5.0", "steps": STEPS},
        "put/x",
        "t",
    )
    assert s.releases == (("5.0.0", "5.1.0"), ("5.3.1", "5.3.3"), ("5.5.0", "5.5.0"))
    assert s.covers("5.1.0") and not s.covers("5.1.1") and s.covers("5.3.2") and s.covers("5.5.0")
    assert s.broker_config().release is None  # the model's own release (5.5.0) is covered
    older = make_scenario(
        {"name": "n", "profile": "5.x", "releases": "5.0.0–5.1.0", "steps": STEPS}, "p/x", "t"
    )
    assert older.broker_config().effective_release == "5.1.0"


@pytest.mark.parametrize(
    ("releases", "message"),
    [
        ("5.1.0–5.0.0", "runs backwards"),
        ("5.x", "is not a release"),
        ("", "'releases' is a string"),
        (5, "'releases' is a string"),
        ("4.9.0–4.9.8", "not of the scenario's profile"),
    ],
)
def test_bad_releases_are_one_line_errors(releases: object, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario(releases)


def test_a_target_of_another_release_skips_it() -> None:
    s = make_scenario({"name": "n", "profile": "5.x", "releases": "5.0.0–5.1.0", "steps": STEPS}, "p/x", "t")
    why = s.release_skip(BrokerConfig(profile=Profile.V5, release="5.5.0"))
    assert why == "written for releases 5.0.0–5.1.0 (the target is 5.5.0)"
    assert s.release_skip(BrokerConfig(profile=Profile.V5, release="5.1.0")) is None
    assert s.release_skip(BrokerConfig(profile=Profile.V5)) is None  # the model: no release of its own


def test_a_release_must_be_of_the_profiles_line() -> None:
    with pytest.raises(ConfigError, match=r"not of the 4\.9 line"):
        BrokerConfig(release="5.1.0")
    assert BrokerConfig(profile=Profile.V5, release="5.1.0").since("5.1.0")
    assert not BrokerConfig(profile=Profile.V5, release="5.1.0").since("5.1.1")
    assert BrokerConfig(profile=Profile.V5).since("5.5.0") and BrokerConfig().effective_release == "4.9.8"

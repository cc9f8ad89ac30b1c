"""Plots a broker's author wants (issue 16 item 10): drawn from a real history, not degenerate."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")


def _not_degenerate(path: Path) -> None:
    from matplotlib import image

    pixels = image.imread(str(path))
    assert pixels.shape[0] > 200 and pixels.shape[1] > 400
    flat = pixels.reshape(-1, pixels.shape[-1])[:, :3]
    colours = {tuple((row * 16).astype(int)) for row in flat[:: max(1, len(flat) // 20000)]}
    assert len(colours) > 8, f"{path.name} is nearly one colour"


@pytest.mark.slow
@pytest.mark.wire
def test_a_wall_clock_workload_draws_three_plots_with_points(tmp_path: Path) -> None:
    from rmqspec.conform import conform

    root = Path(__file__).resolve().parents[1]
    rep = conform(
        "served",
        scenarios=[],
        profile=root / "profiles" / "short-levels.yaml",
        workload_seconds=12,
        plots=tmp_path / "plots",
    )
    assert rep.workload is not None
    names = {Path(p).name for p in rep.workload.plots}
    assert names == {"lateness.png", "retry-ladder.png", "checks.png"}
    for p in rep.workload.plots:
        _not_degenerate(Path(p))


def test_the_ladder_tells_retries_from_dead_letters_and_follows_the_spec() -> None:
    from rmqspec.conformance.plots import expected_ladder
    from rmqspec.reference.config import BrokerConfig

    cfg = BrokerConfig("1s 2s 3s 4s 5s")
    # reconsumeTimes 1 is level 3, 2 is level 4, then the table's highest level
    assert expected_ladder(cfg, 4) == [(1, 3000), (2, 4000), (3, 5000), (4, 5000)]


def test_plots_of_nothing_say_so(tmp_path: Path) -> None:
    from rmqspec.conformance.plots import plot_history
    from rmqspec.reference.config import BrokerConfig

    drawn = plot_history([], BrokerConfig(), 100, tmp_path)
    assert [d.points for d in drawn] == [0, 0, 0]
    for d in drawn:
        _not_degenerate(d.path)  # axes, labels and the "nothing to show" note are drawn

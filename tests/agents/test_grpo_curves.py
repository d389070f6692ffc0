"""``hopgym.agents.grpo.plot_curves``: several runs on the same panels, where some runs lack a
curve (only the unanswered-priced GRPO of a habit has the unanswered term)."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")
import matplotlib.pyplot as plt  # noqa: E402

from hopgym.agents.grpo import plot_curves  # noqa: E402


def test_each_run_keeps_its_colour_and_legend_entry_where_another_lacks_a_curve(tmp_path, monkeypatch):
    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figures.append(fig), close(fig)))
    runs = {
        "RFT": [{"step": s, "reward": 0.1 * s} for s in (1, 2)],  # no "kl": not in the second panel
        "GRPO": [{"step": s, "reward": 0.2 * s, "kl": 0.01 * s} for s in (1, 2)],
        "GRPO priced": [{"step": s, "reward": 0.3 * s, "kl": 0.02 * s} for s in (1, 2)],
    }
    path = plot_curves(runs, tmp_path / "c.png", [("reward", "reward"), ("kl", "KL"), ("none", "absent")])
    assert path is not None and path.stat().st_size > 0
    (fig,) = figures
    reward, kl = [ax for ax in fig.axes if ax.get_visible()]  # the panel no run has is left out
    colour = [line.get_color() for line in reward.get_lines()]
    assert len(set(colour)) == 3
    assert [line.get_color() for line in kl.get_lines()] == colour[1:]  # not shifted by RFT's gap
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == list(runs)
    assert [h.get_color() for h in legend.legend_handles] == colour


def test_a_tall_figure_has_its_legend_under_the_title_at_the_top(tmp_path, monkeypatch):
    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figures.append(fig), close(fig)))
    keys = [f"k{i}" for i in range(6)]
    runs = {name: [{"step": s, **dict.fromkeys(keys, s)} for s in (1, 2)] for name in ("GRPO", "RFT")}
    plot_curves(runs, tmp_path / "c.png", keys, title="habit: curves", columns=2)
    plot_curves(runs, tmp_path / "wide.png", keys, title="habit: curves")
    tall, wide = figures
    (legend,) = tall.legends
    assert legend.get_title().get_text() == "habit: curves" and tall._suptitle is None
    assert legend.get_window_extent().y0 > max(ax.get_window_extent().y1 for ax in tall.axes)
    (legend,) = wide.legends  # one row of panels: the title above, the legend below
    assert legend.get_title().get_text() == "" and wide._suptitle.get_text() == "habit: curves"
    assert legend.get_window_extent().y1 < min(ax.get_window_extent().y0 for ax in wide.axes)

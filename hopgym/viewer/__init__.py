"""See what an agent did: the HTML report of trajectory files (``hopgym view``).

:func:`write_report` reads one trajectory file (or two, to compare) written by
``hopgym eval --trajectories`` / :func:`hopgym.agents.evaluate` and writes one self-contained HTML
file: summary metrics and charts, a filterable list of episodes, each episode's timeline, and for two
runs what the second fixed and what it broke. The file format is documented in
:mod:`hopgym.agents.trajectories`.

Example (``write_report`` has a doctest that runs)::

    from hopgym.viewer import write_report
    write_report("run.jsonl", "report.html")                  # one run
    write_report(["before.jsonl", "after.jsonl"])             # before-vs-after.html
"""

from __future__ import annotations

from hopgym.viewer.report import OUTCOMES, outcome, pair_episodes, render_report, write_report

__all__ = ["write_report", "render_report", "pair_episodes", "outcome", "OUTCOMES"]

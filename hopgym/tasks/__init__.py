"""Tasks: questions plus the sources an agent searches, what an env is built from.

- :class:`QATask` (questions, sources, splits) and :class:`Source` (a named retriever with a
  cost), :mod:`.base`.
- :func:`build_task` turns a synthetic world (:mod:`hopgym.corpora.synthetic`) into a task with
  one index per source (:mod:`.synthetic`, with :func:`export_flashrag`); :func:`tiny_task` is
  the hand-written corpus of tests and docs (:mod:`.tiny`).
"""

from __future__ import annotations

from hopgym.tasks.base import QATask, Source
from hopgym.tasks.synthetic import SyntheticTask, build_task, export_flashrag
from hopgym.tasks.tiny import tiny_task

__all__ = ["QATask", "Source", "SyntheticTask", "build_task", "export_flashrag", "tiny_task"]

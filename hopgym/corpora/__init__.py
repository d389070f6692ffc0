"""Data: passages and questions, the synthetic world and the benchmark file formats.

- Types: :class:`Passage`, :class:`QASample`, :class:`Hop` (:mod:`.types`).
- The procedural synthetic world (:mod:`hopgym.corpora.synthetic`): :class:`WorldConfig`,
  :func:`generate_world`, :class:`SyntheticWorld`.
- Real benchmarks and corpora (:mod:`hopgym.corpora.datasets`): a registry of formats and one
  :func:`~hopgym.corpora.datasets.load_dataset`.

Search over these lives in :mod:`hopgym.retrieval`; tasks (questions plus sources) in
:mod:`hopgym.tasks`.
"""

from __future__ import annotations

from hopgym.corpora.synthetic import KINDS, SyntheticWorld, WorldConfig, generate_world
from hopgym.corpora.types import Hop, Passage, QASample

__all__ = ["Passage", "QASample", "Hop", "WorldConfig", "SyntheticWorld", "KINDS", "generate_world"]

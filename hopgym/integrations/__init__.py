"""Adapters that run hopgym envs inside other RL frameworks; one module per framework.

Modules (each imports its framework lazily, on first use, and raises
:class:`~hopgym.errors.DependencyNotInstalled` naming the extra when it is missing):

- :mod:`hopgym.integrations.trl`: TRL's ``GRPOTrainer(environment_factory=...)``
  (``pip install 'hopgym[train]'``).
- :mod:`hopgym.integrations.verifiers`: ``load_environment(env_id, **env_kwargs)``, a verifiers
  (``verifiers.v1``) environment over the env's questions (``pip install 'hopgym[verifiers]'``).
- :mod:`hopgym.integrations.skyrl`: a ``skyrl_gym`` text env, registered as ``"hopgym"``
  (``pip install 'hopgym[skyrl]'``).
- :mod:`hopgym.integrations.gem`: a GEM env, registered as ``"hopgym:<Name>-v1"`` for every
  built-in id (``pip install 'hopgym[gem]'``).
- :mod:`hopgym.integrations.openenv`: hopgym envs as an OpenEnv-compatible service
  (``hopgym serve-env``) and a typed OpenEnv client for it (``pip install 'hopgym[openenv]'``).
- :mod:`hopgym.integrations.verl`: a verl agent loop (``pip install 'hopgym[verl]'``; verl is not
  in ``all``: its tests run where verl imports, on CPU too).

hopgym owns the env, the reward and the data; an adapter only translates one API into another.
Importing this package imports no framework.
"""

from __future__ import annotations

__all__: list[str] = []

"""Adapters to the frameworks people train and serve with, one module each, imported lazily.

- :mod:`hopgym.integrations.trl`: TRL's ``GRPOTrainer(environment_factory=...)``.
- :mod:`hopgym.integrations.openenv`: hopgym envs as an OpenEnv-compatible service
  (``hopgym serve-env``) and a typed OpenEnv client for it.

Importing this package imports none of them, nor any framework.
"""

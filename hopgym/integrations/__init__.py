"""Adapters from hopgym envs to training frameworks; each in its own module, imported on use.

Modules: :mod:`hopgym.integrations.trl` (TRL's ``GRPOTrainer(environment_factory=...)``).
"""

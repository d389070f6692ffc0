"""hopgym's version, in one place: ``pyproject.toml`` reads it from here, and so do the package
and the index manifests (:mod:`hopgym.retrieval.index_store`)."""

__version__ = "0.2.0"

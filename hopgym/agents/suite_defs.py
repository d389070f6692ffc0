"""The evaluation suites of the field, as data: :data:`SUITES` (read by :mod:`hopgym.agents.suites`).

Each suite is a plain dict (no code paths), so that what a paper's protocol fixes is written in
one place and recorded, as it is, in every result file:

- ``sets``: the QA sets in the papers' column order, each with its ``group`` (``general`` or
  ``multihop``, the two averages), its column ``label`` and the ``files`` looked for under the
  data folder, in order: FlashRAG's layout first (``nq/test.jsonl``, ``hotpotqa/dev.jsonl``: one
  ``{id, question, golden_answers}`` record a line), then the original releases' names (HotpotQA's
  ``hotpot_dev_distractor_v1.json``, 2Wiki's ``dev.json``, MuSiQue's
  ``musique_ans_v1.0_dev.jsonl``), whose layouts :func:`hopgym.corpora.datasets.load_dataset`
  detects.
- ``metrics``: the metrics of the papers' table (a table each); the details table shows them all.
- ``top_k``, ``max_turns``, ``protocol``, ``reward``: the env options of the protocol.
- ``retriever``: the retriever the papers used (:class:`~hopgym.retrieval.specs.RetrieverSpec`
  fields); the model files are the user's (``--retriever-model``).
- ``cover_em_max_extra``: cover-EM's bound, tokens an answer may have beyond the gold it covers.

Sources: Search-R1 (Jin et al. 2025, Table 2: EM, E5-base-v2 on wiki-18, top-3, at most 4 turns
in its evaluation script) and FlashRAG (Jin et al. 2024: 5 documents, EM and F1).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SUITES", "SETS"]

#: The seven QA sets of the field's table, in the papers' column order.
SETS: tuple[dict[str, Any], ...] = (
    {"name": "nq", "label": "NQ", "group": "general", "files": ("nq/test.jsonl", "nq/dev.jsonl")},
    {
        "name": "triviaqa",
        "label": "TriviaQA",
        "group": "general",
        "files": ("triviaqa/test.jsonl", "triviaqa/dev.jsonl"),
    },
    {"name": "popqa", "label": "PopQA", "group": "general", "files": ("popqa/test.jsonl",)},
    {
        "name": "hotpotqa",
        "label": "HotpotQA",
        "group": "multihop",
        "files": (
            "hotpotqa/dev.jsonl",
            "hotpotqa/hotpot_dev_distractor_v1.json",
            "hotpot_dev_distractor_v1.json",
        ),
    },
    {
        "name": "2wikimultihopqa",
        "label": "2Wiki",
        "group": "multihop",
        "files": ("2wikimultihopqa/dev.jsonl", "2wikimultihopqa/dev.json", "2wiki/dev.json"),
    },
    {
        "name": "musique",
        "label": "MuSiQue",
        "group": "multihop",
        "files": ("musique/dev.jsonl", "musique/musique_ans_v1.0_dev.jsonl", "musique_ans_v1.0_dev.jsonl"),
    },
    {"name": "bamboogle", "label": "Bamboogle", "group": "multihop", "files": ("bamboogle/test.jsonl",)},
)

#: E5 as its model card prescribes: prefixes on both sides, mean pooling, exact inner product.
_E5 = {
    "kind": "dense",
    "query_prefix": "query: ",
    "passage_prefix": "passage: ",
    "pooling": "mean",
    "index_type": "flat",
}

#: The suites by name.
SUITES: dict[str, dict[str, Any]] = {
    "searchr1": {
        "description": "Search-R1's table: seven sets, EM, e5 top-3 on wiki-18, at most 4 turns, no reward",
        "sets": SETS,
        "metrics": ("em",),
        "top_k": 3,
        "max_turns": 4,
        "protocol": "tags",
        "reward": None,
        "retriever": _E5,
        "cover_em_max_extra": 20,
    },
    "flashrag": {
        "description": "FlashRAG's settings: seven sets, EM and F1, e5 top-5 on wiki-18",
        "sets": SETS,
        "metrics": ("em", "f1"),
        "top_k": 5,
        "max_turns": 4,
        "protocol": "tags",
        "reward": None,
        "retriever": _E5,
        "cover_em_max_extra": 20,
    },
}

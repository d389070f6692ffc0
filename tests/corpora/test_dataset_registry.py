"""The dataset format registry: adding a dataset is one parser and one registration line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import pytest

from hopgym.corpora.datasets import (
    REGISTRY,
    DatasetFormat,
    DatasetFormatError,
    RawSample,
    detect_format,
    get_format,
    load_dataset,
    load_flashrag_qa,
    load_hotpotqa,
    load_qa,
    register_format,
    resolve_format,
)
from hopgym.corpora.datasets.base import get_answers, get_field, get_id

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HOTPOT_ARRAY, WIKI2 = FIX / "hotpotqa_dev.json", FIX / "2wiki_dev.json"
MUSIQUE, BAMBOOGLE = FIX / "musique_dev.jsonl", FIX / "bamboogle_test.jsonl"


# A toy benchmark: {"qid", "question", "answer", "facts": [{"title", "text", "gold"}]}. It has a
# "question" field, like FlashRAG's layout, so detection must try it first.
def parse_trivia(rec, where, line, *, kind="bridge"):
    facts = get_field(rec, "facts", where, line, list)
    paragraphs, support = [], []
    for i, f in enumerate(facts):
        if not isinstance(f, dict) or not isinstance(f.get("text"), str):
            raise DatasetFormatError(where, line, f"facts[{i}].text", "missing or not a string")
        paragraphs.append((str(f.get("title", "")), f["text"]))
        if f.get("gold"):
            support.append(i)
    question = get_field(rec, "question", where, line, str)
    answers = get_answers(get_field(rec, "answer", where, line, str), None, where, line, "answer")
    hops = [(question, answers[0], j, paragraphs[j][0]) for j in support]
    return RawSample(
        get_id(rec, ("qid",), where, line),
        question,
        answers,
        paragraphs,
        support,
        hops,
        kind,
        len(hops),
        {"source": "trivia"},
    )


def detect_trivia(rec):
    return "qid" in rec and "facts" in rec


ROWS = [
    {
        "qid": "t1",
        "question": "Where is the Halden bridge?",
        "answer": "Vandria",
        "facts": [
            {"title": "Halden bridge", "text": "The Halden bridge is in Vandria.", "gold": 1},
            {"title": "Marlow", "text": "Marlow is a town."},
        ],
    },
    {
        "qid": "t2",
        "question": "Who built the Tolva dam?",
        "answer": "Ana Lind",
        "facts": [
            {"title": "Tolva dam", "text": "Ana Lind built the Tolva dam.", "gold": 1},
            {"title": "Marlow", "text": "Marlow is a town."},
        ],
    },
]


@pytest.fixture
def trivia(tmp_path):
    path = tmp_path / "trivia.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    # The one registration line.
    fmt = register_format(
        DatasetFormat(
            "trivia",
            parse_trivia,
            detect_trivia,
            options=("kind",),
            download_hint="trivia.jsonl from the trivia site",
        )
    )
    yield path
    del REGISTRY[fmt.name]


def test_a_registered_format_loads_in_every_mode(trivia):
    ds = load_dataset("trivia", trivia)
    assert ds.name == "trivia" and ds.mode == "distractor" and len(ds) == 2
    s = ds.samples[0]
    assert s.supporting_ids == ("t1:Halden bridge",) and s.answers == ("Vandria",)
    assert [h.doc_id for h in s.decomposition] == ["t1:Halden bridge"]
    assert [p.doc_id for p in ds.by_sample["t2"]] == ["t2:Tolva dam", "t2:Marlow"]
    pooled = load_dataset("trivia", trivia, mode="open")
    assert sum(p.title == "Marlow" for p in pooled.passages) == 1  # shared paragraph, once
    assert load_dataset("trivia", trivia, limit=1, kind="comparison").samples[0].kind == ("comparison")


def test_auto_detection_tries_the_newest_format_first(trivia):
    assert detect_format(trivia) == "trivia"  # not flashrag, though records have a "question"
    assert load_dataset("auto", trivia).name == "trivia"
    assert load_qa(trivia).name == "trivia"
    assert detect_format(BAMBOOGLE) == "flashrag" and detect_format(MUSIQUE) == "musique"


def test_a_registered_format_is_an_env(trivia):
    env = gym.make("hopgym/MultiHopQA-v1", path=str(trivia), reward=None)
    obs, info = env.reset(seed=0)
    assert env.unwrapped.sample.id in ("t1", "t2") and "question" in obs.lower()
    env.close()


def test_registered_parser_errors_name_file_line_and_field(trivia):
    rows = [*ROWS, {"qid": "t3", "question": "Q?", "answer": "A", "facts": [{"title": "x"}]}]
    trivia.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetFormatError) as err:
        load_dataset("trivia", trivia)
    assert (err.value.path, err.value.line, err.value.field) == (str(trivia), 3, "facts[0].text")
    with pytest.warns(UserWarning, match="skipped 1"):
        assert len(load_dataset("trivia", trivia, lenient=True)) == 2


def test_registry_checks_names_options_and_paths(trivia):
    with pytest.raises(ValueError, match="already registered"):
        register_format(DatasetFormat("trivia", parse_trivia))
    with pytest.raises(ValueError, match="reserved"):
        register_format(DatasetFormat("auto", parse_trivia))
    with pytest.raises(ValueError, match="unknown dataset format 'nope'.*trivia"):
        load_dataset("nope", trivia)
    with pytest.raises(TypeError, match=r"no option\(s\) \['hops'\].*\['kind'\]"):
        load_dataset("trivia", trivia, hops=3)
    with pytest.raises(ValueError, match="trivia needs path=.*trivia.jsonl from the trivia site"):
        load_dataset("trivia")
    with pytest.raises(ValueError, match="has questions only"):
        load_dataset("bamboogle", BAMBOOGLE, mode="open")


def test_builtin_table():
    assert {"hotpotqa", "2wiki", "musique", "flashrag", "bamboogle"} <= set(REGISTRY)
    assert get_format("hotpotqa").default_hub_name == "hotpotqa/hotpot_qa"
    assert get_format("flashrag").modes == ("corpus",) and get_format("2wiki").modes == (
        "distractor",
        "open",
        "corpus",
    )
    assert resolve_format("auto", "hotpotqa/hotpot_qa").name == "hotpotqa"
    assert resolve_format("auto", "RUC-NLPIR/FlashRAG_datasets").name == "flashrag"
    assert resolve_format("auto", WIKI2).name == "2wiki"
    # The per-benchmark shortcuts are load_dataset calls.
    assert load_hotpotqa(HOTPOT_ARRAY).samples == load_dataset("hotpotqa", HOTPOT_ARRAY).samples
    renamed = load_flashrag_qa(BAMBOOGLE, name="mine", kind="compositional", hops=2)
    bamboogle = load_dataset("bamboogle", BAMBOOGLE)
    assert renamed.name == "mine" and renamed.samples == bamboogle.samples
    assert dataclasses.replace(get_format("flashrag"), name="x").name == "x"

from __future__ import annotations

import hashlib
import json
import pickle
import re
from collections import Counter

import pytest

from hopgym.corpora.synthetic import (
    BRIDGE_COMPARISONS,
    COMPARISONS,
    INFERENCES,
    KINDS,
    QUESTIONS,
    SENTENCES,
    WorldConfig,
    generate_world,
)
from hopgym.corpora.types import Passage
from hopgym.tasks.synthetic import SyntheticTask, build_task, export_flashrag

SMALL = WorldConfig(n_entities=600, n_questions=150)
ROUTING = WorldConfig(n_entities=1500, n_questions=300, sources=("local", "web"))
ALL_HOPS = WorldConfig(n_entities=1500, n_questions=300, hops=(1, 2, 3, 4), seed=3)


def fresh(config: WorldConfig):
    """Generate without the process cache, to compare two independent generations."""
    return generate_world.__wrapped__(config)


# ------------------------------------------------------------------ determinism
def test_same_config_gives_byte_identical_worlds():
    a, b = fresh(ROUTING), fresh(ROUTING)
    assert a is not b
    assert a.fingerprint() == b.fingerprint()
    assert [p.text for p in a.passages] == [p.text for p in b.passages]
    assert [s.question for s in a.samples] == [s.question for s in b.samples]


def test_different_seeds_give_different_worlds():
    a = fresh(SMALL)
    b = fresh(WorldConfig(n_entities=600, n_questions=150, seed=1))
    assert a.fingerprint() != b.fingerprint()
    assert {p.title for p in a.passages} != {p.title for p in b.passages}


def test_question_count_does_not_change_the_corpus():
    a = fresh(SMALL)
    b = fresh(WorldConfig(n_entities=600, n_questions=40))
    assert [p.text for p in a.passages] == [p.text for p in b.passages]


# ------------------------------------------------------------------ corpus shape
def test_passages_sorted_unique_and_sized():
    w = generate_world(SMALL)
    ids = [p.doc_id for p in w.passages]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) == SMALL.n_entities
    assert all(re.fullmatch(r"e\d{6}", i) for i in ids)
    titles = [p.title for p in w.passages]
    assert len(set(titles)) == len(titles), "titles are unique entity names"
    assert all(isinstance(p, Passage) and p.text.endswith(".") for p in w.passages)


def test_documents_split_into_passages():
    cfg = WorldConfig(n_entities=400, n_questions=60, passages_per_doc=3, seed=2)
    w = generate_world(cfg)
    assert len(w.passages) == 3 * cfg.n_entities
    assert all(re.fullmatch(r"e\d{6}-p[123]", p.doc_id) for p in w.passages)
    for s in w.samples:
        for hop in s.decomposition:
            assert hop.answer in w.documents[hop.doc_id].text


def test_entity_types_and_relations_are_present():
    w = generate_world(WorldConfig())
    text = " ".join(p.text for p in w.passages[:800])
    for phrase in ("film", "company", "university", "was born", "capital", "founded", "father", "population"):
        assert phrase in text


def test_mentions_are_true_facts():
    """Pages that mention other entities (founders' companies, directors' films, siblings,
    children) agree with those entities' own pages."""
    w = generate_world(WorldConfig(n_entities=1500, n_questions=50))
    by_title = {p.title: p.text for p in w.passages}
    checked = Counter()
    for p in w.passages:
        m = re.search(r"(?:He|She) founded (.+?) in (\d{4})\.", p.text)
        if m:
            assert f"{p.title} founded" in by_title[m.group(1)] or f"by {p.title}" in by_title[m.group(1)]
            assert m.group(2) in by_title[m.group(1)]
            checked["founded"] += 1
        m = re.search(r"(?:His|Her) children include (.+?)\.", p.text)
        if m:
            for kid in re.split(r", | and ", m.group(1)):
                assert p.title in by_title[kid]
                checked["children"] += 1
        m = re.search(r"is the (?:brother|sister) of (.+?)\.", p.text)
        if m:
            father = re.search(r"(?:son of|daughter of|father is|father) ([^.]+?)\.", p.text)
            for sib in re.split(r", | and ", m.group(1)):
                assert father.group(1) in by_title[sib]
                checked["siblings"] += 1
    assert min(checked.values()) > 10 and len(checked) == 3


def test_phrasing_variety_one_uses_one_template_per_fact():
    w = generate_world(WorldConfig(n_entities=400, n_questions=30, phrasing_variety=1))
    text = " ".join(p.text for p in w.passages)
    # Distinctive words of the second and third phrasings of a few facts.
    others = (
        "was born in the city of",
        "birthplace is",
        "The company was established by",
        "people live in",
        "inhabitants",
        "is a town located in",
        "lies in",
    )
    assert all(SENTENCES["person.birthplace"][0] != t for t in SENTENCES["person.birthplace"][1:])
    assert not [o for o in others if o in text]
    varied = " ".join(p.text for p in generate_world(SMALL).passages)
    assert all(o in varied for o in others)


def test_distractors_knob():
    hard = generate_world(SMALL)
    easy = generate_world(WorldConfig(n_entities=600, n_questions=150, distractors=0.0))

    def confusables(w):
        return sum("Not to be confused with" in p.text for p in w.passages)

    assert confusables(easy) == 0
    assert confusables(hard) > 20
    # Near-namesakes share name parts: some title is a strict word-prefix of another title.
    titles = {p.title for p in hard.passages}
    assert any(" ".join(t.split()[:-1]) in titles for t in titles if len(t.split()) > 2)


# ------------------------------------------------------------------ questions
def test_every_hop_document_exists_and_states_the_hop_answer():
    for cfg in (SMALL, ROUTING, ALL_HOPS):
        w = generate_world(cfg)
        for s in w.samples:
            assert s.decomposition and len(s.decomposition) == s.hops
            assert set(s.supporting_ids) == {h.doc_id for h in s.decomposition}
            for hop in s.decomposition:
                doc = w.documents[hop.doc_id]
                assert hop.answer in doc.text, (s.question, hop)
                assert hop.query.startswith(doc.title)
                assert hop.answer not in hop.query[len(doc.title) :]
            if s.kind in ("bridge", "compositional", "inference"):
                assert s.decomposition[-1].answer == s.answer
            elif s.answer not in ("yes", "no"):
                assert s.answer in s.question or s.answer in {h.answer for h in s.decomposition}


def test_questions_are_distinct_and_well_formed():
    w = generate_world(ALL_HOPS)
    assert len({s.question for s in w.samples}) == len(w.samples)
    assert len({s.id for s in w.samples}) == len(w.samples)
    for s in w.samples:
        assert s.question.endswith("?") and s.answers and all(a for a in s.answers)
        assert s.kind in KINDS and 1 <= s.hops <= 4


def test_all_kinds_and_hop_counts_occur():
    w = generate_world(ALL_HOPS)
    seen = Counter((s.kind, s.hops) for s in w.samples)
    assert set(seen) == set(ALL_HOPS.kind_hops)


@pytest.mark.parametrize(
    ("kinds", "hops"),
    [
        (("comparison",), (2,)),
        (("inference",), (3,)),
        (("bridge", "compositional"), (1, 4)),
        (("bridge_comparison",), (3, 4)),
    ],
)
def test_kinds_and_hops_knobs_are_respected(kinds, hops):
    w = generate_world(WorldConfig(n_entities=1500, n_questions=60, kinds=kinds, hops=hops))
    assert {s.kind for s in w.samples} == set(kinds)
    assert {s.hops for s in w.samples} <= set(hops)


def test_kind_phrasings():
    w = generate_world(ALL_HOPS)
    by_kind = {k: [s for s in w.samples if s.kind == k] for k in KINDS}
    assert any(s.answer == "yes" for s in by_kind["comparison"] + by_kind["bridge_comparison"])
    assert any(s.answer == "no" for s in by_kind["comparison"] + by_kind["bridge_comparison"])
    assert all(re.fullmatch(r"\d{4}|[\d,]+", s.answer) for s in by_kind["compositional"])
    inference = {t.split("{")[0] for t in INFERENCES.values()}
    assert all(any(s.question.startswith(p) for p in inference) for s in by_kind["inference"])
    people = [s for s in by_kind["bridge"] if s.answers[1:]]
    assert people and all(re.fullmatch(r"[A-Z]\. .+", s.answers[1]) for s in people)
    assert len(COMPARISONS) >= 8 and len(BRIDGE_COMPARISONS) >= 6
    assert all(len(v) >= 1 for v in QUESTIONS.values())


def test_train_and_test_splits_hold_out_entities():
    w = generate_world(WorldConfig(n_entities=3000, n_questions=600))
    train, test = w.split("train"), w.split("test")
    assert len(train) + len(test) == len(w.samples)
    assert 0.1 < len(test) / len(w.samples) < 0.35
    train_docs = {w.documents[d].title for s in train for d in s.supporting_ids}
    test_topics = {t for s in test for t in s.metadata["topics"]}
    assert test_topics and not (test_topics & train_docs)
    with pytest.raises(ValueError, match="train"):
        w.split("dev")


# ------------------------------------------------------------------ sources and routing
def test_source_split_semantics():
    w = generate_world(ROUTING)
    local = {p.doc_id for p in w.source_passages("local")}
    web = {p.doc_id for p in w.source_passages("web")}
    every = {p.doc_id for p in w.passages}
    assert local < every <= web
    assert web - every, "the web adds mirror pages"
    assert 0.2 < len(local) / len(every) < 0.8
    support = {d for s in w.samples for d in s.supporting_ids}
    assert support - local, "local lacks some supporting documents"
    assert support <= web
    for s in w.samples:
        for hop in s.decomposition:
            assert hop.source == ("local" if hop.doc_id in local else "web")
        assert s.metadata["needs_web"] == any(h.source == "web" for h in s.decomposition)
    needs = Counter(s.metadata["needs_web"] for s in w.samples)
    assert needs[True] > 30 and needs[False] > 30
    # Mixed questions need a route in the middle of the chain.
    assert any(len({h.source for h in s.decomposition}) == 2 for s in w.samples)
    assert all(c in w.source_description("local") for c in w.covered_countries)


def test_routing_is_predictable_from_names():
    """Local coverage follows regions, whose names share syllables: the first hop's source is
    far better predicted by the topic's name than by chance."""
    w = generate_world(ROUTING)
    local_titles = {p.title for p in w.source_passages("local")}
    web_only = {p.title for p in w.passages} - local_titles

    def grams(name):
        s = name.lower().replace(" ", "")
        return {s[i : i + 3] for i in range(len(s) - 2)}

    loc, web = Counter(), Counter()
    for t in local_titles:
        loc.update(grams(t))
    for t in web_only:
        web.update(grams(t))
    correct = 0
    for s in w.samples:
        name = s.metadata["topics"][0]
        score = sum(loc[g] / len(local_titles) - web[g] / len(web_only) for g in grams(name))
        correct += (score > 0) == (s.decomposition[0].source == "local")
    assert correct / len(w.samples) > 0.7


def test_single_source_and_full_coverage():
    w = generate_world(SMALL)
    assert w.source_passages("local") == w.passages
    with pytest.raises(ValueError, match="unknown source"):
        w.source_passages("web")
    full = generate_world(
        WorldConfig(n_entities=600, n_questions=50, sources=("local", "web"), local_coverage=1.0)
    )
    assert not any(s.metadata["needs_web"] for s in full.samples)


# ------------------------------------------------------------------ tasks and retrieval
@pytest.mark.parametrize(
    "cfg",
    [
        SMALL,
        ROUTING,
        ALL_HOPS,
        WorldConfig(n_entities=400, n_questions=80, passages_per_doc=2, sources=("local", "web"), seed=4),
    ],
)
def test_every_hop_query_retrieves_its_document_in_top_3(cfg):
    task = build_task(cfg)
    misses = []
    for s in task.samples:
        for hop in s.decomposition:
            got = [p.doc_id for p in task.sources[hop.source].retriever.search(hop.search_query, 3)]
            if hop.doc_id not in got:
                misses.append((hop.search_query, hop.doc_id, got))
            title = task.documents[hop.doc_id].title
            assert hop.answer not in hop.search_query[len(title) :]
    assert not misses


def test_build_task_is_cached_and_shares_indexes():
    task = build_task(ROUTING)
    assert build_task(ROUTING) is task
    assert list(task.sources) == ["local", "web"]
    assert task.sources["local"].cost < task.sources["web"].cost
    assert all(task.sources[n].description for n in task.sources)
    train, test = build_task(ROUTING, split="train"), build_task(ROUTING, split="test")
    assert train.sources["web"].retriever is task.sources["web"].retriever
    assert {s.id for s in train.samples} | {s.id for s in test.samples} == {s.id for s in task.samples}
    assert not {s.id for s in train.samples} & {s.id for s in test.samples}
    with pytest.raises(ValueError, match="split"):
        build_task(ROUTING, split="dev")
    with pytest.raises(ValueError, match="engine"):
        build_task(ROUTING, engine="lucene")


def test_task_pickles_as_its_recipe():
    task = build_task(SMALL, split="train")
    blob = pickle.dumps(task)
    assert len(blob) < 2000
    assert pickle.loads(blob) is task
    assert isinstance(task, SyntheticTask)


def test_rank_bm25_engine_builds_the_same_task():
    cfg = WorldConfig(n_entities=300, n_questions=20)
    a, b = build_task(cfg), build_task(cfg, engine="rank_bm25")
    assert [s.question for s in a.samples] == [s.question for s in b.samples]
    q = a.samples[0].decomposition[0]
    assert q.doc_id in [p.doc_id for p in b.sources["local"].retriever.search(q.search_query, 3)]


def test_export_flashrag(tmp_path):
    paths = export_flashrag(tmp_path, n_entities=300, n_questions=10, sources=("local", "web"))
    assert [p.name for p in paths] == ["local.jsonl", "web.jsonl", "questions.jsonl"]
    rows = [json.loads(x) for x in paths[0].read_text().splitlines()]
    assert rows and set(rows[0]) == {"id", "contents"}
    q = json.loads(paths[2].read_text().splitlines()[0])
    assert q["golden_answers"] and q["metadata"]["decomposition"]
    with pytest.raises(ValueError, match="unknown WorldConfig"):
        export_flashrag(tmp_path, n_entitys=5)


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hops": 0}, "hops"),
        ({"hops": (2, 5)}, "hops"),
        ({"hops": "two"}, "hops"),
        ({"kinds": ("bridge", "riddle")}, "kinds"),
        ({"kinds": ()}, "kinds"),
        ({"kinds": "comparison", "hops": 3}, "no question kind"),
        ({"n_entities": 10}, "n_entities"),
        ({"n_entities": 1000.5}, "n_entities"),
        ({"n_questions": 0}, "n_questions"),
        ({"distractors": 1.5}, "distractors"),
        ({"distractors": True}, "distractors"),
        ({"passages_per_doc": 4}, "passages_per_doc"),
        ({"phrasing_variety": 0}, "phrasing_variety"),
        ({"sources": ("web",)}, "sources"),
        ({"sources": ("local", "cloud")}, "sources"),
        ({"local_coverage": 0.0}, "local_coverage"),
        ({"web_noise": -0.1}, "web_noise"),
        ({"test_fraction": 0.95}, "test_fraction"),
        ({"seed": -1}, "seed"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WorldConfig(**kwargs)


def test_config_normalises_and_hashes():
    a = WorldConfig(hops=3, kinds="bridge", sources="local")
    assert a.hops == (3,) and a.kinds == ("bridge",) and a.sources == ("local",)
    assert hash(a) == hash(WorldConfig(hops=(3,), kinds=("bridge",)))
    assert WorldConfig(kinds=("inference", "bridge")).kinds == ("bridge", "inference")


def test_too_many_questions_for_a_tiny_world_says_how_to_fix():
    with pytest.raises(ValueError, match="increase n_entities"):
        generate_world(WorldConfig(n_entities=100, n_questions=500, kinds="inference", hops=4))


# ------------------------------------------------------------------ byte-identical regression
# SyntheticWorld.fingerprint() and a digest of (id, question, answers) of every question, recorded
# from hopgym 0.1 (commit 8d43176). A change here changes every world users have trained and
# evaluated on: it needs a new env version, not an update of these constants.
FINGERPRINTS = {
    "default": (
        {},
        "0659f1896e074c6c0ea888741ee9685bff0d39c02e2e274a297b53b0ded37ef7",
        "f46e9277d1d3536aa318b212b756b7766fea411f80b269b0d802f9011f6e514e",
    ),
    "web": (
        {"sources": ("local", "web")},
        "821162456509d36a31785da710baf6f238c0242237837e61cbc29303858021c2",
        "f46e9277d1d3536aa318b212b756b7766fea411f80b269b0d802f9011f6e514e",
    ),
    "all_hops": (
        {"hops": (1, 2, 3, 4), "kinds": KINDS},
        "cf2bbc61c3aca12e35fbf1d8a1e966a479b9e61ae7233f1a4ec419569b2fae76",
        "18174c1291ce148ad14864f635719611867b16a84007cb4d944785e332d6fed9",
    ),
    "ppd3": (
        {"passages_per_doc": 3},
        "566796f2cfd4b6f6d778aa6cf14cca6e996ce1c6723ee94f4bd6f524b1fe79ef",
        "f46e9277d1d3536aa318b212b756b7766fea411f80b269b0d802f9011f6e514e",
    ),
    "small300": (
        {"n_entities": 300, "n_questions": 100},
        "f1890a5f738b37f55e99b62035af297a3b36a72e435de266c6808ae3f165d551",
        "292e4a294c5c88135a8ec4ba06a98c6abe73331958f221a27c9fbc36ac60017d",
    ),
    "big20000": (
        {"n_entities": 20000, "n_questions": 500},
        "edbbb93dcde88e1597150a0b346f5a84e866706d791d43c3431d4381fb7fa821",
        "ca98403e12ff36d5a0efa778988ae478d3195b63d12eaf9d40020f3297d9ca89",
    ),
    "seed1": (
        {"seed": 1},
        "40423528566c838358beef57803a2a3ef2899a4f6eae94c587c4e0e7cf1bd6d6",
        "e5f8f146d37b0af365898c35f5829b58c571c6eb6214a1b486b5d5b2c2624d0a",
    ),
    "seed7_web_allhops": (
        {
            "seed": 7,
            "sources": ("local", "web"),
            "hops": (1, 2, 3, 4),
            "n_entities": 1500,
            "n_questions": 400,
        },
        "67dcbbc87631bb9cc99e09016f629068b8c57472976b7bd499b631ffeae26d49",
        "39d52556dd7b1841cc1e892f1caec429696ad1d3cd24cda8c9440bf83ba61206",
    ),
    "seed42_easy": (
        {"seed": 42, "distractors": 0.0, "phrasing_variety": 1, "n_entities": 800, "n_questions": 200},
        "fb5af5254f54f4ff6e70522259d9bd432581cc141f0afcb5e59c60a1fd6be048",
        "df18c7d6e4996ff2d1570a9cedfff6973a72c5046f23f49b4f5ffa36d3582b49",
    ),
    "seed3_ppd2_notest": (
        {"seed": 3, "passages_per_doc": 2, "test_fraction": 0.0, "n_entities": 1000, "n_questions": 300},
        "54000ee0a6c4501ea0af577e77c709c98ec66cd9ea480897908569ae3cfb211f",
        "c55d646dee47738bf572fb826cc908c89e3b2cb264e4e3d3044ec2ebfb53686d",
    ),
    "seed5_cov": (
        {
            "seed": 5,
            "sources": ("local", "web"),
            "local_coverage": 0.8,
            "web_noise": 1.0,
            "distractors": 1.0,
            "n_entities": 2000,
            "n_questions": 300,
        },
        "de45083732eeb113f90d3263aa8254d3d441633c1946683d1aa64b497ec23a2f",
        "e4e7ab41ff1faeb6f059d2c6c9bf30f858fe281a9a763f94a31cada1e176b0ed",
    ),
}


@pytest.mark.parametrize("name", list(FINGERPRINTS))
def test_worlds_are_byte_identical_to_recorded_fingerprints(name):
    kwargs, fingerprint, questions = FINGERPRINTS[name]
    w = fresh(WorldConfig(**kwargs))
    digest = hashlib.sha256(
        json.dumps([[s.id, s.question, list(s.answers)] for s in w.samples]).encode()
    ).hexdigest()
    assert (w.fingerprint(), digest) == (fingerprint, questions)


def test_verified_hop_queries_are_unchanged():
    """build_task's refined hop queries (a BM25 index per source) match the recorded ones."""
    task = build_task(WorldConfig(sources=("local", "web")))
    queries = "\n".join(h.query for s in task.samples for h in s.decomposition)
    assert hashlib.sha256(queries.encode()).hexdigest() == (
        "4f68ae87180b659dda021079352653721a04d7348fa0a5a02b38d2b29d0b85fd"
    )


def test_build_task_takes_a_retriever_spec():
    """Each source is indexed by make_retriever(spec): a dense world checks its hop queries against
    the dense index, pickles as its recipe with the spec, and a server kind is refused."""
    from hopgym.retrieval.specs import RetrieverSpec

    cfg = WorldConfig(n_entities=300, n_questions=20)
    dense = build_task(cfg, retriever={"kind": "dense", "model": "hashing-64"})
    assert dense.retriever_spec == RetrieverSpec(kind="dense", model="hashing-64")
    assert getattr(dense.sources["local"].retriever, "kind", None) == "dense"
    assert dense is not build_task(cfg)
    assert pickle.loads(pickle.dumps(dense)) is dense
    assert build_task(cfg, "rank_bm25").retriever_spec.engine == "rank_bm25"
    with pytest.raises(ValueError, match="export the world"):
        build_task(cfg, retriever="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="given twice"):
        build_task(cfg, engine="bm25s", retriever={"engine": "rank_bm25"})


def test_synthetic_and_tiny_envs_take_retriever():
    import gymnasium as gym

    from hopgym.agents import OracleAgent
    from hopgym.agents.evaluation import evaluate

    env = gym.make("hopgym/Tiny-v1", retriever="hybrid", reward=None)
    assert evaluate(env, OracleAgent(env), episodes=6)["support_recall"] == 1.0
    env = gym.make(
        "hopgym/Synthetic-v1",
        n_entities=300,
        n_questions=20,
        retriever={"kind": "dense", "model": "hashing-64"},
    )
    assert evaluate(env, OracleAgent(env), episodes=20)["em"] == 1.0
    with pytest.raises(ValueError, match="retriever must be one of"):
        gym.make("hopgym/Synthetic-v1", retriever="bm52")

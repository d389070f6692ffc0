"""Semantics of MultiHopQAEnv on the hand-written tiny corpus."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopgym.envs import Answer, MultiHopQAEnv, Route, Search, Think
from hopgym.errors import RetrievalError
from hopgym.tasks.base import QATask, Source
from hopgym.tasks.tiny import TINY_PASSAGES, TINY_SAMPLES, tiny_task
from hopgym.turns import FORMAT_ISSUES, TagsProtocol


def make(**kw) -> MultiHopQAEnv:
    sources = kw.pop("sources", ("local",))
    return MultiHopQAEnv(tiny_task(sources), **kw)


def test_reset_picks_question_by_id_and_hides_gold():
    env = make()
    obs, info = env.reset(seed=0, options={"question_id": "tiny-2"})
    assert info["question"] == "Where was the founder of Qelvor Dynamics born?"
    assert info["question_id"] == "tiny-2" and info["turn"] == 0 and info["sources"] == ("local",)
    assert "Question: Where was the founder" in obs and "Cardell" not in obs


def test_unknown_question_id_raises_key_error_naming_it():
    with pytest.raises(KeyError, match="nope"):
        make().reset(options={"question_id": "nope"})


def test_search_shows_top_k_and_dedups_across_turns():
    env = make(top_k=2)
    env.reset(options={"question_id": "tiny-2"})
    _, reward, term, trunc, info = env.step("<think>founder</think><search>Qelvor Dynamics</search>")
    assert (reward, term, trunc) == (0.0, False, False)
    assert info["action_type"] == "search" and info["query"] == "Qelvor Dynamics"
    assert info["new_ids"] == ["t01", "t02"]
    first = set(info["new_ids"])
    obs, _, _, _, info = env.step(Search("Qelvor Dynamics founded"))
    assert info["retrieved_ids"][:2] == ["t01", "t02"]  # the retriever's own ranking...
    assert not first & set(info["new_ids"])  # ...but only unseen documents are shown
    assert "Doc 1 (Title:" in obs


def test_without_dedup_documents_repeat():
    env = make(top_k=2, dedup=False)
    env.reset(options={"question_id": "tiny-2"})
    ids = [env.step(Search("Qelvor Dynamics"))[4]["new_ids"] for _ in range(2)]
    assert ids[0] == ids[1] == ["t01", "t02"]


def test_max_docs_caps_the_trajectory():
    env = make(top_k=3, max_docs=4)
    env.reset(options={"question_id": "tiny-3"})
    assert len(env.step(Search("Qelvor"))[4]["new_ids"]) == 2
    assert len(env.step(Search("capital population"))[4]["new_ids"]) == 2
    obs, _, _, _, info = env.step(Search("born"))
    assert info["new_ids"] == [] and "limit" in obs


def test_doc_chars_cuts_the_joined_documents():
    env = make(top_k=3, doc_chars=40)
    env.reset(options={"question_id": "tiny-3"})
    obs = env.step(Search("Qelvor Dynamics"))[0]
    body = obs.split("<information>")[1].split("</information>")[0]
    assert len(body) <= 42 and body.endswith("…")


def test_background_k_retrieves_for_the_raw_question():
    env = make(background_k=2)
    obs, info = env.reset(options={"question_id": "tiny-2"})
    assert len(info["new_ids"]) == 2 and "t01" in info["new_ids"]
    assert "<information>Doc 1 (Title:" in obs
    # Background documents count as seen.
    assert "t01" not in env.step(Search("Qelvor Dynamics founder"))[4]["new_ids"]


def test_routing_switches_the_searched_source():
    env = make(sources=("local", "web"))
    env.reset(options={"question_id": "tiny-5"})
    info = env.step(Search("The Glass Orchard film directed"))[4]
    assert "t11" not in info["new_ids"] and info["source"] == "local"
    info = env.step(Route("web"))[4]
    assert info["action_type"] == "route" and info["routed_to"] == "web" and info["source"] == "web"
    info = env.step(Search("The Glass Orchard film directed"))[4]
    assert info["new_ids"][0] == "t11"
    assert info["searches_by_source"] == {"local": 1, "web": 1}


def test_unknown_route_is_invalid_and_lists_sources():
    env = make(sources=("local", "web"))
    env.reset(seed=1)
    obs, _, term, trunc, info = env.step("<route>library</route>")
    assert info["action_type"] == "invalid" and "local, web" in info["invalid_action"]
    assert not term and not trunc and "Invalid turn" in obs and info["source"] == "local"


def test_answer_terminates_and_think_is_free():
    env = make()
    env.reset(seed=0)
    obs, _, term, _, info = env.step(Think("plan"))
    assert (obs, term, info["action_type"]) == ("", False, "think")
    obs, _, term, trunc, info = env.step(Answer("Cardell"))
    assert term and not trunc and info["answer"] == "Cardell"
    # Stepping after the end is reported, not a crash.
    _, _, term, _, info = env.step(Answer("again"))
    assert term and info["action_type"] == "invalid"


def test_step_before_reset_raises():
    with pytest.raises(gym.error.ResetNeeded):
        make().step("<answer>x</answer>")


class _Broken:
    def search(self, query, k):
        raise RetrievalError("backend down")

    def search_batch(self, queries, k):
        raise RetrievalError("backend down")


def test_retrieval_failure_becomes_an_observation():
    task = QATask("broken", TINY_SAMPLES, {"local": Source("local", _Broken())})
    env = MultiHopQAEnv(task)
    env.reset(seed=0)
    obs, _, term, trunc, info = env.step(Search("anything"))
    assert "backend down" in info["retrieval_error"] and "Search failed" in obs
    assert not term and not trunc and info["action_type"] == "search"


def test_render_ansi_returns_the_transcript():
    env = make(render_mode="ansi")
    env.reset(options={"question_id": "tiny-1"})
    env.step(Search("Qelvor Dynamics founded"))
    text = env.render()
    assert "Question: In which year" in text and "<search>Qelvor Dynamics founded</search>" in text
    assert make().render() is None


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"top_k": 0}, "top_k"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_docs": 0}, "max_docs"),
        ({"doc_chars": -1}, "doc_chars"),
        ({"render_mode": "human"}, "render_mode"),
        ({"protocol": "xml"}, "protocol"),
    ],
)
def test_bad_arguments_raise(kw, msg):
    with pytest.raises(ValueError, match=msg):
        make(**kw)


def test_r3_protocol_round_trip():
    env = make(protocol="r3")
    obs, _ = env.reset(options={"question_id": "tiny-2"})
    assert obs.startswith("Solve the question") and obs.endswith("Step 1:\n")
    obs, _, _, _, info = env.step(
        "The problem analysis: find the founder.\nThe retrieval query: Qelvor Dynamics founder"
    )
    assert info["action_type"] == "search" and obs.startswith("\nThe retrieval documents: (1)")
    assert obs.endswith("Step 2:\n")
    info = env.step(Answer("Cardell", think="done"))[4]
    assert info["answer"] == "Cardell"


ACTION_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(
        st.sampled_from(
            [
                "<think>",
                "</think>",
                "<search>",
                "</search>",
                "<answer>",
                "</answer>",
                "<route>",
                "</route>",
                "<information>",
                "web",
                "x",
                " ",
                "\n",
                "The final answer:",
                "The retrieval query:",
            ]
        ),
        max_size=12,
    ).map("".join),
    st.integers(),
    st.none(),
    st.binary(max_size=20),
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(
    actions=st.lists(ACTION_TEXT, min_size=1, max_size=6),
    protocol=st.sampled_from(["tags", "r3"]),
    parse=st.sampled_from(["lenient", "strict"]),
)
def test_any_input_never_raises(actions, protocol, parse):
    env = make(sources=("local", "web"), protocol=protocol, parse=parse)
    env.reset(seed=0)
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        assert isinstance(obs, str) and reward == 0.0 and not (term and trunc)
        assert info["action_type"] in ("think", "search", "route", "answer", "invalid")
        assert (info["invalid_action"] is None) == (info["action_type"] != "invalid")
        assert all(i.code in FORMAT_ISSUES for i in info["format_issues"])
        assert not (info["format_issues"] and info["action_type"] == "invalid")
        assert not (info["truncated_turn"] and info["action_type"] != "invalid")
        if term or trunc:
            break


# ---------------------------------------------------------------------- parse modes and notices
def test_parse_option_picks_the_mode_and_info_reports_issues():
    strict, lenient = make(parse="strict"), make()
    assert strict.protocol.parse_mode == "strict" and lenient.protocol.parse_mode == "lenient"
    assert lenient.options.parse == "lenient"
    turn = "<think>the founder first<search>Qelvor Dynamics founder</search>"
    for env in (strict, lenient):
        env.reset(options={"question_id": "tiny-2"})
    info = strict.step(turn)[4]
    assert info["action_type"] == "invalid" and "unbalanced" in info["invalid_action"]
    assert info["format_issues"] == [] and not info["truncated_turn"]
    obs, _, _, _, info = lenient.step(turn)
    assert info["action_type"] == "search" and info["query"] == "Qelvor Dynamics founder"
    assert [i.code for i in info["format_issues"]] == ["unclosed_think"]
    assert info["think"] == "the founder first" and "Doc 1" in obs
    # An instance's own mode is the default; a contradicting parse= is refused.
    assert make(protocol=TagsProtocol(parse="strict")).options.parse == "strict"
    with pytest.raises(ValueError, match="contradicts"):
        make(protocol=TagsProtocol(parse="strict"), parse="lenient")


@pytest.mark.parametrize("parse", ["lenient", "strict"])
@pytest.mark.parametrize(
    ("protocol", "turn", "says"),
    [
        ("tags", "<think>The founder of Qelvor Dynamics is Maren Oskdal, who", "inside <think>"),
        ("tags", "<think>ok</think><search>Qelvor Dyn", "inside <search>"),
        (
            "r3",
            "The problem analysis: The founder of Qelvor Dynamics is Maren Oskdal, who",
            "inside 'The problem analysis:'",
        ),
    ],
)
def test_a_turn_cut_inside_an_open_tag_is_reported_as_truncated(protocol, turn, says, parse):
    env = make(protocol=protocol, parse=parse)
    env.reset(seed=0)
    obs, _, term, trunc, info = env.step(turn)
    assert info["action_type"] == "invalid" and info["truncated_turn"] and not (term or trunc)
    assert says in info["invalid_action"] and info["invalid_action"] in obs
    assert "cut off at the length limit" in obs and "short" in obs
    # a complete turn that merely lacks an action is not truncated
    info = env.step("<think>ok.</think>" if protocol == "tags" else "The problem analysis: I do not know.")[4]
    assert not info["truncated_turn"]


@pytest.mark.parametrize("protocol", ["tags", "r3"])
@pytest.mark.parametrize("dedup", [True, False])
def test_repeated_query_notice(protocol, dedup):
    env = make(protocol=protocol, dedup=dedup, top_k=1)
    env.reset(options={"question_id": "tiny-2"})
    obs, _, _, _, info = env.step(Search("Qelvor Dynamics founder"))
    assert not info["repeated_query"] and "already searched" not in obs
    # the same words in another order and case are a repeat (query_key, as RedundancyReward)
    obs, _, _, _, info = env.step(Search("founder: qelvor DYNAMICS?"))
    assert info["repeated_query"]
    note = env.protocol.repeat_note(dedup)
    assert note in obs and info["new_ids"]
    if dedup:
        assert "next results" in obs
    else:
        assert "same results again" in obs
    obs, _, _, _, info = env.step(Search("Maren Oskdal born"))
    assert not info["repeated_query"] and "already searched" not in obs


def test_repeated_query_with_nothing_new_says_so():
    env = make(top_k=3)
    env.reset(options={"question_id": "tiny-2"})
    env.step(Search("Qelvor Dynamics"))
    obs = env.step(Search("Qelvor Dynamics"))[0]
    assert "already searched for this, and it finds no new documents" in obs


@pytest.mark.parametrize("protocol", ["tags", "r3"])
def test_notices_can_be_switched_off(protocol):
    env = make(protocol=protocol, repeat_notice=False, last_turn_notice=False, max_turns=3)
    env.reset(options={"question_id": "tiny-2"})
    env.step(Search("Qelvor Dynamics founder"))
    obs, _, _, _, info = env.step(Search("Qelvor Dynamics founder"))
    assert info["repeated_query"] and "already searched" not in obs  # still reported in info
    assert env.protocol.LAST_TURN not in obs


@pytest.mark.parametrize("protocol", ["tags", "r3"])
@pytest.mark.parametrize(
    "action", [Search("Qelvor Dynamics founder"), Think("plan"), "garbage", Route("web")]
)
def test_last_turn_notice_comes_once_when_one_turn_is_left(protocol, action):
    env = make(protocol=protocol, max_turns=3, sources=("local", "web"))
    env.reset(options={"question_id": "tiny-2"})
    first = env.step(action)[0]
    assert env.protocol.LAST_TURN not in first
    obs, _, _, _, info = env.step(action)
    assert info["turns_left"] == 1 and env.protocol.LAST_TURN in obs
    assert env.transcript[-1]["content"] == obs  # the agent's context holds it
    if protocol == "r3":
        assert obs.endswith(f"{env.protocol.LAST_TURN}\nStep 3:\n")
    else:
        assert obs.endswith(f"{env.protocol.LAST_TURN}\n")
    obs, _, _, _, info = env.step(Answer("Cardell"))
    assert info["answer"] == "Cardell" and obs == ""


def test_the_paper_presets_switch_the_notices_off_and_the_others_on():
    for reward, on in [
        ("default", True),
        ("em", True),
        ("f1", True),
        (None, True),
        ("searchr1", False),
        ("search-r1", False),
        ("r3rag", False),
        ("kunlun", False),
    ]:
        env = gym.make("hopgym/Tiny-v1", reward=reward)
        opts = env.unwrapped.options
        assert opts.repeat_notice is on and opts.last_turn_notice is on, reward
        assert opts.parse == "lenient"
    # Explicit values win over the preset's default.
    env = gym.make("hopgym/Tiny-v1", reward="searchr1", repeat_notice=True)
    assert env.unwrapped.options.repeat_notice and not env.unwrapped.options.last_turn_notice
    assert gym.make("hopgym/Tiny-v1", parse="strict").unwrapped.protocol.parse_mode == "strict"


def test_huge_turn_is_invalid():
    env = make()
    env.reset(seed=0)
    info = env.step("<answer>" + "x" * (1 << 20) + "</answer>")[4]
    assert info["action_type"] == "invalid" and "too long" in info["invalid_action"]


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_envs(vector_cls):
    from hopgym.envs.registration import make_task_env

    fns = [lambda: make_task_env(tiny_task(), reward=None) for _ in range(2)]
    # Text observations cannot live in shared memory: AsyncVectorEnv needs shared_memory=False.
    kw = {"shared_memory": False} if vector_cls is gym.vector.AsyncVectorEnv else {}
    venv = vector_cls(fns, **kw)
    obs, info = venv.reset(seed=[1, 2])
    assert len(obs) == 2 and all(o.startswith("Answer the question") for o in obs)
    obs, rew, term, trunc, info = venv.step(["<search>Qelvor</search>", "<answer>x</answer>"])
    assert list(term) == [False, True] and "Doc 1" in obs[0]
    venv.close()


def test_corpus_passages_are_unique():
    assert len({p.doc_id for p in TINY_PASSAGES}) == len(TINY_PASSAGES)


def test_qa_env_reaches_the_text_env_through_wrappers_and_refuses_another_env():
    from hopgym.envs.multihop_qa import qa_env
    from hopgym.errors import InvalidOptionTypeError

    env = gym.make("hopgym/Tiny-v1")
    assert qa_env(env) is env.unwrapped
    with pytest.raises(gym.error.ResetNeeded):
        _ = qa_env(env).current_sample
    env.reset(seed=0, options={"question_id": TINY_SAMPLES[0].id})
    assert qa_env(env).current_sample.id == TINY_SAMPLES[0].id
    with pytest.raises(InvalidOptionTypeError, match="MultiHopQAEnv"):
        qa_env(gym.make("CartPole-v1"))


def test_scripted_agents_read_the_gold_sample_duck_typed():
    """The scripted agents also act through views of sub-envs in other processes: no isinstance."""
    from types import SimpleNamespace

    from hopgym.agents.scripted import OracleAgent, gold_sample

    view = SimpleNamespace(sample=None, source_names=("local",))
    view.unwrapped = view
    with pytest.raises(gym.error.ResetNeeded):
        gold_sample(view)
    view.sample = TINY_SAMPLES[0]
    assert gold_sample(view) is TINY_SAMPLES[0]
    assert isinstance(OracleAgent(view).act("", {"source": "local"}), (Search, Route, Answer))

"""A numeric view of any hopgym text env, for classic RL libraries: :class:`FeaturizedEnv`.

Classes: :class:`FeaturizedEnv`, :class:`QuestionInfo`, :class:`Candidate`.
Functions: :func:`make_featurized` (the entry point of ``hopgym/SyntheticFeaturized-v0``),
:func:`read_question`, :func:`extract_spans`, :func:`sentence_concepts`.

A :class:`FeaturizedEnv` is a ``gym.Wrapper`` around a real hopgym text env (reward wrappers and
all) that steps it with structured actions, so rewards, ``info`` and ``info["reward_terms"]`` are
the text env's own, and ``env.unwrapped`` is the text env's
:class:`~hopgym.envs.multihop_qa.MultiHopQAEnv`. What changes is the interface: the observation
is a ``Box`` of floats and the action is a ``Discrete`` index into a list of candidate actions
built from the current state:

- slot ``0``: search with the question itself;
- slots ``1..K``: search for candidate ``i`` (an entity, title, year or number read from the
  retrieved documents, or an entity/option of the question) plus the relation word to follow
  from it (``"Maren Oskdal born"``);
- slots ``K+1..K+S``: route to source ``j``;
- slots ``K+S+1..2K+S``: answer with candidate ``i``.

``action_masks()`` (the method sb3-contrib's ``MaskablePPO`` calls) marks the sensible choices. A
choice that names no candidate (an empty slot, an index out of range, a non-integer) is stepped as
an *invalid turn* of the text env: it costs a turn, a ``FormatReward`` may penalise it, and nothing
raises. Masked but existing choices (a repeated query, a route to the current source) are executed
as the text env would execute them.

How candidates are read. The question is read by hopgym's question reader
(:func:`hopgym.corpora.questions.read_question`, shared with the iterative agent) into a *chain*
of relations, innermost first ("Where did the director of X study?" -> ``direct, study``). Every
retrieved document gets a *depth* on that chain and every candidate the deepest *level* at which
it sits in a sentence expressing the relation the chain expects there; comparison questions get
the values (years, populations) of their options and yes/no questions the evidence for a shared
value. The policy still has to learn what to do with these features: when to search which
candidate, when to route, when to answer and with what.

Modules: :mod:`.spans` (reading documents), :mod:`.evidence` (candidates and chain evidence),
:mod:`.features` (the observation vector), :mod:`.env` (the wrapper and its factory).
"""

from __future__ import annotations

from hopgym.corpora.questions import CONCEPTS, QuestionInfo, read_question
from hopgym.envs.featurized.env import FeaturizedEnv, make_featurized
from hopgym.envs.featurized.evidence import Candidate
from hopgym.envs.featurized.features import SLOT_FEATURES
from hopgym.envs.featurized.spans import extract_spans, sentence_concepts

__all__ = [
    "FeaturizedEnv",
    "Candidate",
    "QuestionInfo",
    "make_featurized",
    "read_question",
    "extract_spans",
    "sentence_concepts",
    "SLOT_FEATURES",
    "CONCEPTS",
]

"""Pure scoring shared by the reward wrappers, the evaluation harness and the TRL adapters.

Functions: :func:`normalize_answer`, :func:`answer_tokens`, :func:`exact_match`, :func:`token_f1`,
:func:`cover_em`, :func:`is_hedged`, :func:`admissible`, :func:`answer_score`,
:func:`support_recall` (alias :func:`supporting_fact_recall`), :func:`support_precision`,
:func:`bow_similarity`, :func:`query_key`.

Every function that takes ``golds`` accepts one string or a sequence of accepted aliases and returns
the best score over the aliases. Nothing here does I/O or keeps state.

Conventions (documented because they differ in small ways from some peers):

- Normalisation is SQuAD's: lower case, drop ASCII punctuation, drop the articles
  ``a``/``an``/``the``, collapse whitespace.
- A prediction that normalises to the empty string scores 0 on every metric, even against a gold
  that also normalises to empty (so an empty or punctuation-only answer never earns anything).
- ``cover_em`` matches whole tokens (``"lee"`` does not cover ``"leeds"``), unlike a raw substring
  test. Unbounded, it is the "cover exact match" metric peers report; it pays a list of candidates,
  so rewards use :func:`answer_score`, which bounds it and rejects hedged answers.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import filterfalse
from typing import Literal

from hopgym.errors import InvalidOptionError

__all__ = [
    "normalize_answer",
    "answer_tokens",
    "exact_match",
    "token_f1",
    "cover_em",
    "is_hedged",
    "admissible",
    "answer_score",
    "support_recall",
    "support_precision",
    "supporting_fact_recall",
    "bow_similarity",
    "query_key",
    "METRICS",
    "LIST_SEPARATORS",
]

Metric = Literal["em", "f1", "cover_em"]
#: The string metrics :func:`answer_score` knows.
METRICS: tuple[str, ...] = ("em", "f1", "cover_em")

# Punctuation, deleted by str.translate in one C loop.
_DROP_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# The same for ASCII text, on bytes (bytes.translate deletes without a lookup dict: several times
# faster). ASCII text holding only letters, digits, punctuation and white space splits into
# whole words, so the articles are the words "a", "an" and "the"; a control character that is
# not white space (a word boundary without splitting) takes the general path.
_DROP_PUNCT_BYTES = string.punctuation.encode("ascii")
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1b\x7f]")
_IS_ARTICLE = frozenset(("a", "an", "the")).__contains__
_YES_NO = frozenset({"yes", "no", "noanswer"})

#: What separates candidates in a hedged answer ("A, B", "A or B", "A/B"). Word separators are
#: matched with surrounding spaces, case-insensitively.
LIST_SEPARATORS: tuple[str, ...] = (
    ",",
    ";",
    "/",
    "|",
    "&",
    "\n",
    " or ",
    " and ",
    " nor ",
    " vs ",
    " versus ",
    " either ",
)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces.

    Example:
        >>> normalize_answer("  The Glass  Orchard! ")
        'glass orchard'
        >>> normalize_answer("U.S.A.")
        'usa'
    """
    return " ".join(answer_tokens(text))


def answer_tokens(text: str) -> list[str]:
    """The tokens of the normalised text (:func:`normalize_answer`'s words).

    Example:
        >>> answer_tokens("The Glass Orchard")
        ['glass', 'orchard']
    """
    if text.isascii():
        raw = text.lower().encode("ascii").translate(None, _DROP_PUNCT_BYTES)
        if _CONTROL.search(raw) is None:
            return list(filterfalse(_IS_ARTICLE, raw.decode("ascii").split()))
    return _ARTICLES.sub(" ", text.lower().translate(_DROP_PUNCT)).split()


def _golds(golds: str | Iterable[str]) -> list[str]:
    if isinstance(golds, str):
        return [golds]
    out = [g for g in golds if isinstance(g, str)]
    return out


def exact_match(prediction: str, golds: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals a normalised gold alias, else 0.0.

    Example:
        >>> exact_match("the glass orchard", ["The Glass Orchard", "Glass Orchard"])
        1.0
        >>> exact_match("Glass Orchard or Harrow Pier", "The Glass Orchard")
        0.0
        >>> exact_match("", [""])
        0.0
    """
    # Token lists compare as their normalised strings do (tokens hold no white space).
    pred = answer_tokens(prediction)
    if pred:
        for gold in _golds(golds):
            if pred == answer_tokens(gold):
                return 1.0
    return 0.0


def _f1(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:
        return 0.0
    # HotpotQA's rule: a yes/no answer only scores against the same yes/no gold.
    yes_no = (len(pred) == 1 and pred[0] in _YES_NO) or (len(gold) == 1 and gold[0] in _YES_NO)
    if yes_no and pred != gold:
        return 0.0
    common = Counter(pred) & Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: str | Iterable[str]) -> float:
    """Token-level F1 (SQuAD / HotpotQA), the best over the gold aliases.

    Example:
        >>> round(token_f1("Glass Orchard film", "The Glass Orchard"), 3)
        0.8
        >>> token_f1("yes", "no")
        0.0
    """
    pred = answer_tokens(prediction)
    return max((_f1(pred, answer_tokens(g)) for g in _golds(golds)), default=0.0)


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    return any(list(haystack[i : i + n]) == list(needle) for i in range(len(haystack) - n + 1))


def cover_em(prediction: str, golds: str | Iterable[str], *, max_extra_tokens: int | None = None) -> float:
    """1.0 if a gold alias appears as a run of whole tokens in the normalised prediction.

    Args:
        prediction: the answer.
        golds: accepted answers.
        max_extra_tokens: if set, the prediction may have at most this many tokens beyond the
            covered gold (``None``: unbounded, the usual "cover EM" evaluation metric).

    Example:
        >>> cover_em("It was Maren Oskdal.", "Maren Oskdal")
        1.0
        >>> cover_em("Leeds", "Lee")
        0.0
        >>> cover_em("Lorn, Vashti, Cardell, Halvik", "Cardell")
        1.0
        >>> cover_em("Lorn, Vashti, Cardell, Halvik", "Cardell", max_extra_tokens=2)
        0.0
    """
    pred = answer_tokens(prediction)
    if not pred:
        return 0.0
    for g in _golds(golds):
        gold = answer_tokens(g)
        if not gold or not _contains(pred, gold):
            continue
        if max_extra_tokens is None or len(pred) - len(gold) <= max_extra_tokens:
            return 1.0
    return 0.0


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def _separators(text: str) -> set[str]:
    text = _THOUSANDS.sub("", text)  # "1,200,000" is one number, not a list
    low = " " + " ".join(text.lower().split()) + " "
    found = {s for s in LIST_SEPARATORS if s != "\n" and s in low}
    if "\n" in text.strip():
        found.add("\n")
    return found


def is_hedged(prediction: str, gold: str) -> bool:
    """Whether the prediction looks like a list of candidates that ``gold`` is not.

    True when a list separator that the gold does not contain (``,`` ``;`` ``/`` ``|`` ``&`` a
    newline, or the words ``or``/``and``/``nor``/``vs``/``versus``/``either``) splits the
    prediction into at least two parts with words in them. Thousands separators (``1,200,000``)
    and stray punctuation (``Cardell;``) are not lists.

    Example:
        >>> is_hedged("Lorn or Cardell", "Cardell")
        True
        >>> is_hedged("Bosnia and Herzegovina", "Bosnia and Herzegovina")
        False
        >>> is_hedged("Cardell", "Cardell")
        False
        >>> is_hedged("1,200,000", "1200000"), is_hedged("Cardell;", "Cardell")
        (False, False)
    """
    extra = _separators(prediction) - _separators(gold)
    if not extra:
        return False
    text = _THOUSANDS.sub("", prediction).lower()
    chunks = text.splitlines() if "\n" in extra else [text]
    words = sorted((sep for sep in extra if sep != "\n"), key=len, reverse=True)
    splitter = re.compile("|".join(re.escape(sep) for sep in words)) if words else None
    parts: list[str] = []
    for chunk in chunks:
        padded = " " + " ".join(chunk.split()) + " "
        parts.extend(splitter.split(padded) if splitter else [padded])
    return sum(1 for part in parts if normalize_answer(part)) >= 2


def _admissible(n_pred: int, prediction: str, gold: str, hedge_guard: bool, length_guard: bool) -> bool:
    if n_pred == 0:
        return False
    if hedge_guard and is_hedged(prediction, gold):
        return False
    return not (length_guard and n_pred > 2 * len(answer_tokens(gold)) + 8)


def admissible(
    prediction: str, golds: str | Iterable[str], *, hedge_guard: bool = True, length_guard: bool = True
) -> bool:
    """Whether some alias admits the prediction under :func:`answer_score`'s guards.

    Rewards ask a judge only about admissible answers, so a judge cannot be talked into paying
    for a candidate list or a pasted document.

    Example:
        >>> admissible("Lorn", ["Cardell"]), admissible("Lorn or Cardell", ["Cardell"])
        (True, False)
    """
    n_pred = len(answer_tokens(prediction))
    return any(_admissible(n_pred, prediction, g, hedge_guard, length_guard) for g in _golds(golds))


def answer_score(
    prediction: str,
    golds: str | Iterable[str],
    metric: str = "em",
    *,
    hedge_guard: bool = True,
    max_extra_tokens: int = 3,
    length_guard: bool = True,
) -> float:
    """The guarded answer score rewards use: EM, F1 or bounded cover-EM, best over the aliases.

    Guards against the usual exploits (documented in the rewards README):

    - ``hedge_guard``: an answer that lists candidates (:func:`is_hedged` against that alias)
      scores 0 against that alias on F1 and cover-EM. EM needs no guard (a list never equals
      the gold), so ``answer_score(p, g, "em") == exact_match(p, g)`` always.
    - ``cover_em`` is bounded: at most ``max_extra_tokens`` tokens beyond the covered alias.
    - ``length_guard``: an answer longer than ``2 * len(alias) + 8`` tokens scores 0 against that
      alias (pasted documents); EM is unaffected by construction.

    Args:
        prediction: the answer text.
        golds: accepted answers (one string or several aliases).
        metric: ``"em"``, ``"f1"`` or ``"cover_em"``.
        hedge_guard: reject candidate lists.
        max_extra_tokens: the slack of ``cover_em``.
        length_guard: reject answers much longer than the gold.

    Raises:
        hopgym.errors.InvalidOptionError: for an unknown metric or a negative ``max_extra_tokens``.

    Example:
        >>> answer_score("Cardell", ["Cardell"], "em")
        1.0
        >>> answer_score("Cardell or Lorn", ["Cardell"], "f1")
        0.0
        >>> answer_score("the port city of Cardell", ["Cardell"], "cover_em")
        1.0
    """
    if metric not in METRICS:
        raise InvalidOptionError(f"unknown metric {metric!r}; choose one of {list(METRICS)}")
    if max_extra_tokens < 0:
        raise InvalidOptionError(f"max_extra_tokens must be >= 0, got {max_extra_tokens}")
    if metric == "em":  # 0.0 for a prediction without tokens too, normalised once
        return exact_match(prediction, golds)
    n_pred = len(answer_tokens(prediction))
    if n_pred == 0:
        return 0.0
    best = 0.0
    for gold in _golds(golds):
        if not _admissible(n_pred, prediction, gold, hedge_guard, length_guard):
            continue
        if metric == "f1":
            score = token_f1(prediction, gold)
        else:
            score = cover_em(prediction, gold, max_extra_tokens=max_extra_tokens)
        best = max(best, score)
        if best == 1.0:
            break
    return best


def support_recall(retrieved_ids: Iterable[str], supporting_ids: Iterable[str]) -> float:
    """Share of the gold supporting documents that were retrieved.

    Returns 1.0 when there are no supporting ids (nothing was missed).

    Example:
        >>> support_recall(["t01", "t07", "t03"], ["t01", "t03"])
        1.0
        >>> support_recall(["t01"], ["t01", "t03"])
        0.5
    """
    gold = set(supporting_ids)
    if not gold:
        return 1.0
    return len(gold & set(retrieved_ids)) / len(gold)


#: The name the house style uses for :func:`support_recall`.
supporting_fact_recall = support_recall


def support_precision(retrieved_ids: Iterable[str], supporting_ids: Iterable[str]) -> float:
    """Share of the distinct retrieved documents that are gold supporting documents.

    Returns 0.0 when nothing was retrieved.

    Example:
        >>> support_precision(["t01", "t07", "t03", "t01"], ["t01", "t03"])
        0.6666666666666666
        >>> support_precision([], ["t01"])
        0.0
    """
    got = set(retrieved_ids)
    if not got:
        return 0.0
    return len(got & set(supporting_ids)) / len(got)


def bow_similarity(a: str, b: str) -> float:
    """Jaccard similarity of the normalised token sets (STIE's bag-of-words test).

    Two texts with no tokens at all count as identical (1.0).

    Example:
        >>> bow_similarity("Maren Oskdal born", "born Maren Oskdal")
        1.0
        >>> bow_similarity("Maren Oskdal born", "Maren Oskdal father")
        0.5
    """
    sa, sb = set(answer_tokens(a)), set(answer_tokens(b))
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def query_key(query: str) -> frozenset[str]:
    """What makes two search queries the same: their normalised words, in any order.

    The env's repeated-query notice and ``RedundancyReward`` both compare queries by this key.

    Example:
        >>> query_key("Maren Oskdal born?") == query_key("born: the maren oskdal")
        True
        >>> query_key("Maren Oskdal born") == query_key("Maren Oskdal father")
        False
    """
    return frozenset(answer_tokens(query))

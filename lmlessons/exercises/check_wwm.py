"""Checker for ``select_whole_words`` (Google BERT's whole-word masking), in the runner's
pattern (:mod:`lmlessons.exercises._framework`). Any correct random procedure passes: results are
held to properties, never to the reference's draws: no special token or padding, whole words (a
``##`` piece after [CLS] or [SEP] starts one), at most the row's count of pieces, and *maximal*
(no word left out fits). 30 generated batches (:data:`GENERATED`) reach rows without words,
``##`` pieces after [CLS] or [SEP], padding marked only by ``attention_mask``, no mask,
probabilities 0 and 1, caps."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from lmlessons.exercises._cases import DRAWN, RowSpec, gen, random_word_rows, word_batch
from lmlessons.exercises._framework import Case, Mistake, Runner, first_broken, on_empty
from lmlessons.exercises._stats import pct, within
from lmlessons.masking_variants import num_to_predict

SIGNATURE = (
    "select_whole_words(special_tokens_mask, is_continuation, *, attention_mask=None, "
    "mlm_probability=0.15, max_predictions_per_seq=20, generator=None) -> selected   # (B, T) bool"
)

#: Hidden case 1 (and 3): rows of two segments of words (their lengths in pieces), then [PAD]s.
ROWS: list[RowSpec] = [
    (((1, 3, 2, 1, 2), (2, 1, 4)), 0),
    (((2, 2, 1, 3), (1, 2)), 4),
    (((4, 1, 1), (3, 2, 1, 1)), 2),
    (((1, 1, 2, 2, 3, 1), (2,)), 1),
    (((3,), (1, 1)), 9),
    (((2, 1, 2, 1, 2, 1), (1, 2, 1)), 0),
]
#: Hidden case 2, 20 rows of each: 12, 23, 3 and 11 tokens, 3.6, 6.9, 0.9 and 3.3 expected
#: targets at ``mlm_probability=0.3``.
COUNT_ROWS: list[RowSpec] = [
    (((1,) * 10,), 11),
    (((1,) * 12, (1,) * 8), 0),
    (((1,),), 20),
    (((1,) * 9,), 0),
]
#: Hidden case 5: a ``##`` piece right after [CLS] or [SEP] (a negative length), a word of its own.
ORPHAN_ROWS: list[RowSpec] = [(((-1,), (1,)), 0), (((1,), (-1,)), 0), (((1,), (-2, 1)), 0)]
#: Hidden case 6: rows with [PAD]s that ``special_tokens_mask`` does not mark.
PADDED_ROWS: list[RowSpec] = [(((1, 2, 1), (2,)), 12), (((2, 1), (1,)), 14)]


@dataclass(frozen=True)
class OrderTest:
    """300 copies of ``row``: each word's share of the rows it is selected in, and the mistake
    if a share is off."""

    row: RowSpec
    mlm_probability: float
    shares: list[float]
    mistake: str


#: Hidden case 7: twelve 2-piece words, a count of 6: each word in a quarter of the rows.
EQUAL_WORDS = OrderTest((((2,) * 6, (2,) * 6), 0), 0.23, [1 / 4] * 12, "not_random_order")
#: Hidden case 8: a 3-piece word among six 1-piece words, a count of 3: the long word in 1/7.
ONE_LONG_WORD = OrderTest(
    (((3, 1, 1, 1), (1, 1, 1)), 0), 0.27, [1 / 7] + [3 / 7] * 6, "weights_words_by_length"
)


#: The settings of the generated cases, ``(mlm_probability, max_predictions_per_seq,
#: pad_is_special, attention_mask)``: every ``mlm_probability`` (0, 1, 0.5, DRAWN: drawn from the
#: generator) with every cap (none, 20, drawn), padding in ``special_tokens_mask`` too or not,
#: ``attention_mask`` passed or None.
_SETTINGS: list[tuple[float | str, int | str | None, bool, bool]] = [
    (0.0, None, True, False),
    (1.0, None, False, True),
    (0.5, None, True, True),
    (DRAWN, None, True, False),
    (0.0, 20, True, True),
    (1.0, 20, False, True),
    (0.5, 20, True, False),
    (DRAWN, 20, False, True),
    (0.0, DRAWN, True, True),
    (1.0, DRAWN, True, False),
    (0.5, DRAWN, True, True),
    (DRAWN, DRAWN, False, True),
]
#: The generated cases, in order (their rows: :func:`._cases.random_word_rows`): the twelve
#: settings cycled, each time on new rows.
GENERATED = (_SETTINGS * 3)[:30]


@dataclass(frozen=True)
class _Case(Case):
    words: list[list[list[int]]] = field(default_factory=list)  # [row][word]: its positions


def _case(label: str, rows: list[RowSpec], seed: int, attention: bool = True, **kw: Any) -> Any:
    """A case of ``rows`` (:func:`._cases.word_batch`); ``kw``: the call's keyword arguments
    and ``pad_is_special``; ``attention``: pass ``attention_mask`` (else None)."""
    pad_is_special = kw.pop("pad_is_special", True)
    batch = word_batch(rows, pad_is_special=pad_is_special)
    settings = [f"{k}={v}" for k, v in kw.items()]
    if not attention:
        settings.append("attention_mask=None")
    shape = " x ".join(map(str, batch.special.shape))
    text = f"{label} ({shape} positions; {', '.join(settings)})"
    kwargs = dict(kw)
    kwargs["attention_mask"] = batch.attn if attention else None
    return _Case(text, (batch.special, batch.cont), kwargs, seed=seed, words=batch.words)


def _explain(case: Any, exc: BaseException) -> str | None:
    text = str(exc).lower()
    p = case.kwargs.get("mlm_probability", 0.15)
    special, cont = case.args
    orphans = bool((cont & special.roll(1, 1).bool()).any())  # `##` right after [CLS] or [SEP]
    seen = {
        "attention_mask_none": case.kwargs["attention_mask"] is None and "nonetype" in text,
        "int_mask_not_bool": "bool" in text or "bitwise" in text,
        "orphan_piece": isinstance(exc, IndexError) and orphans,
        "fails_when_nothing_selected": on_empty(exc) and (p == 0 or not all(case.words)),
    }
    return next((code for code, hit in seen.items() if hit), None)


def _split_words(case: Any, rows: list[list[bool]], selected: torch.Tensor) -> torch.Tensor:
    """The positions of the words selected only in part."""
    split = torch.zeros_like(selected)
    for r, words in enumerate(case.words):
        for word in words:
            taken = sum(rows[r][t] for t in word)
            if 0 < taken < len(word):
                split[r, word] = True
    return split


def _result(run: Runner, case: Any, budget: bool = True) -> list[list[bool]]:
    """The learner's selection: no special token, no padding, whole words (and the count)."""
    selected = run.call(case, explain=lambda exc: _explain(case, exc))
    run.compare(case, selected, torch.zeros_like(case.args[1]))  # a (B, T) bool tensor
    attention = case.kwargs["attention_mask"]
    rows = selected.tolist()
    padding = False if attention is None else attention == 0
    rules = [
        ("masks_special_tokens", selected & case.args[0].bool(), "are special tokens but selected"),
        ("selects_padding", selected & padding, "are padding, selected"),
        (
            "splits_words",
            _split_words(case, rows, selected),
            "belong to words selected only in part",
        ),
    ]
    first_broken(case, rules, {"is_continuation": case.args[1]})
    if budget:
        _budget(case, rows)
    return rows


def _count_code(n: int, T: int, taken: int, count: int, padded: int, cap: int | None) -> str:
    """Why a row of ``n`` tokens (of ``T``) has ``taken`` pieces instead of ``count``."""
    if n < T and taken == padded != count:
        return "count_from_padded_length"
    if taken > (cap or taken):
        return "ignores_max_predictions"
    return "wrong_count_formula"


def _budget(case: Any, rows: list[list[bool]]) -> None:
    """At most each row's count, and maximal: no word left out fits in what is left."""
    T = case.args[0].shape[1]
    p = case.kwargs.get("mlm_probability", 0.15)
    cap = case.kwargs.get("max_predictions_per_seq", 20)
    attention = case.kwargs["attention_mask"]
    for r, (row, words) in enumerate(zip(rows, case.words)):
        n = T if attention is None else int(attention[r].sum())
        count = num_to_predict(n, p, cap)
        taken = sum(row)
        why = _count_code(n, T, taken, count, num_to_predict(T, p, cap), cap)
        left = [w for w in words if not row[w[0]]]
        fits = [w for w in left if len(w) <= count - taken]
        seen = f"On {case.label}, row {r} ({n} tokens, count {count}): {taken} pieces selected"
        if taken > count:  # `count` words taken, or the last one overshot, or a wrong count
            chosen = [len(w) for w in words if row[w[0]]]
            if len(chosen) == min(count, len(words)):
                code = "counts_words"
            elif taken - max(chosen) < count:
                code = "overshoots_count"
            else:
                code = why
            raise Mistake(code, f"{seen}, in {len(chosen)} words.")
        if fits:
            if any(case.args[1][r, w[0]] for w in fits):
                code = "orphan_piece"
            elif any(len(w) > count - taken for w in left):
                code = "stops_at_first_long_word"
            else:
                code = why
            where = f"the {len(fits[0])}-piece word at position {fits[0][0]} still fits"
            raise Mistake(code, f"{seen}; {where}.")


def _word_hits(run: Runner, label: str, test: OrderTest) -> list[int]:
    """In how many of 300 rows each word of ``test.row`` is selected (held to its shares)."""
    case = _case(label, [test.row] * 300, 5, False, mlm_probability=test.mlm_probability)
    rows = _result(run, case)
    hits = [sum(row[w[0]] for row in rows) for w in case.words[0]]
    if not all(within(h, 300, share) for h, share in zip(hits, test.shares)):
        want = [round(300 * share) for share in test.shares]
        seen = f"row 0's words were selected {hits} times in 300 rows; expected about {want}"
        raise Mistake(test.mistake, f"On {case.label}, {seen}.")
    return hits


def _counts(run: Runner) -> None:
    """Alike rows get the same count: min(cap, max(1, round(length * p))) pieces."""
    rows = [spec for spec in COUNT_ROWS for _ in range(20)]
    counts = _case("hidden case 2", rows, 2, mlm_probability=0.3)
    selected = _result(run, counts, budget=False)
    got = [sorted({sum(row) for row in selected[r : r + 20]}) for r in range(0, 80, 20)]
    if any(len(x) > 1 for x in got):
        raise Mistake("count_not_exact", f"On {counts.label}, 4 x 20 alike rows got {got} pieces.")
    _budget(counts, selected)
    _result(run, _case("hidden case 2b", [(((1,) * 7,), 0)] * 10, 2, mlm_probability=0.5))  # 4.5


def _generated() -> list[Any]:
    """The cases of :data:`GENERATED` (every draw made on every row, used or not)."""
    g = gen(9)
    cases = []
    for i, (p, cap, pad_is_special, attention) in enumerate(GENERATED):
        rows = random_word_rows(g, int(torch.randint(1, 6, (), generator=g)))
        drawn_p = round(float(torch.rand((), generator=g)), 2)
        drawn_cap = int(torch.randint(1, 5, (), generator=g))
        kw: dict[str, Any] = {
            "mlm_probability": drawn_p if p == DRAWN else p,
            "max_predictions_per_seq": drawn_cap if cap == DRAWN else cap,
            "pad_is_special": pad_is_special,
        }
        cases.append(_case(f"generated case {i + 1}", rows, 500 + i, attention, **kw))
    return cases


def check_select_whole_words(run: Runner) -> None:
    first = _case("hidden case 1", ROWS, 0, mlm_probability=0.4)
    _result(run, first, budget=False)
    run.ok("returns a `(B, T)` bool mask; the arguments stay unchanged")
    run.ok("never selects [CLS], [SEP] or padding; every word is selected whole or not at all")
    _counts(run)
    run.ok("the count is min(max_predictions_per_seq, max(1, round(length * p))) pieces")
    capped: dict[str, Any] = {"mlm_probability": 0.3, "max_predictions_per_seq": 5}
    nopad: dict[str, Any] = {"pad_is_special": False}  # padding marked by `attention_mask` only
    cases = [
        _case("hidden case 3", ROWS, 3, mlm_probability=0.4),
        _case("hidden case 4", [(((1, 2) * 10, (2, 1) * 5), 0)] * 4, 4, **capped),
        _case("hidden case 5.1", ORPHAN_ROWS * 10, 10, mlm_probability=0.2),
        _case("hidden case 5.2", ORPHAN_ROWS * 10, 11, mlm_probability=0.4),
        _case("hidden case 6.0", PADDED_ROWS, 6, mlm_probability=0.0, **nopad),
        _case("hidden case 6.1", PADDED_ROWS, 6, mlm_probability=0.5, **nopad),
        *_generated(),
    ]
    for case in cases:
        _result(run, case)
    run.ok("never more pieces than the count; a word that fits is never left out; the cap")
    run.ok("a `##` piece after [CLS] or [SEP] is a word; `attention_mask` excludes padding")
    run.ok("`mlm_probability=0` selects nothing; the same rules on 30 generated batches")
    _word_hits(run, "hidden case 7", EQUAL_WORDS)
    hits = _word_hits(run, "hidden case 8", ONE_LONG_WORD)
    run.ok(f"words in a uniformly random order (a long word: {pct(hits[0], 300)} of rows, 1/7 due)")
    run.generator_contract(lambda seed: _result(run, replace(first, seed=seed)))

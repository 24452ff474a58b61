"""Checker for ``select_whole_words`` (Google BERT's whole-word masking), in the runner's
pattern (:mod:`lmlessons.exercises._framework`). Any correct random procedure passes: results are
held to properties, never to the reference's draws: no special token or padding, whole words (a
``##`` piece after [CLS] or [SEP] starts one), at most the row's count of pieces, and *maximal*
(no word left out fits). 30 generated batches reach rows without words, ``##`` pieces after
[CLS] or [SEP], padding marked only by ``attention_mask``, no mask, probabilities 0 and 1, caps."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from lmlessons.exercises._cases import RowSpec, gen, random_word_rows, word_batch
from lmlessons.exercises._framework import Case, Mistake, Runner, first_broken, on_empty
from lmlessons.exercises._stats import pct, within
from lmlessons.masking_variants import num_to_predict

SIGNATURE = (
    "select_whole_words(special_tokens_mask, is_continuation, *, attention_mask=None, "
    "mlm_probability=0.15, max_predictions_per_seq=20, generator=None) -> selected   # (B, T) bool"
)


@dataclass(frozen=True)
class _Case(Case):
    words: list[list[list[int]]] = field(default_factory=list)  # [row][word]: its positions


def _case(label: str, rows: list[RowSpec], seed: int, attention: bool = True, **kw: Any) -> Any:
    batch = word_batch(rows, pad_is_special=kw.pop("pad_is_special", True))
    text = [f"{k}={v}" for k, v in kw.items()] + ([] if attention else ["attention_mask=None"])
    label += f" ({' x '.join(map(str, batch.special.shape))} positions; {', '.join(text)})"
    kwargs = kw | {"attention_mask": batch.attn if attention else None}
    return _Case(label, (batch.special, batch.cont), kwargs, seed=seed, words=batch.words)


def _explain(case: Any, exc: BaseException) -> str | None:
    text, p, (special, cont) = str(exc).lower(), case.kwargs.get("mlm_probability", 0.15), case.args
    orphans = bool((cont & special.roll(1, 1).bool()).any())  # `##` right after [CLS] or [SEP]
    seen = {
        "attention_mask_none": case.kwargs["attention_mask"] is None and "nonetype" in text,
        "int_mask_not_bool": "bool" in text or "bitwise" in text,
        "orphan_piece": isinstance(exc, IndexError) and orphans,
        "fails_when_nothing_selected": on_empty(exc) and (p == 0 or not all(case.words)),
    }
    return next((code for code, hit in seen.items() if hit), None)


def _result(run: Runner, case: Any, budget: bool = True) -> list[list[bool]]:
    """The learner's selection: no special token, no padding, whole words (and the count)."""
    sel = run.call(case, explain=lambda exc: _explain(case, exc))
    run.compare(case, sel, torch.zeros_like(case.args[1]))  # a (B, T) bool tensor
    attn, rows, split = case.kwargs["attention_mask"], sel.tolist(), torch.zeros_like(sel)
    for r, ws in enumerate(case.words):
        for w in (w for w in ws if 0 < sum(rows[r][t] for t in w) < len(w)):
            split[r, w] = True
    rules = [
        ("masks_special_tokens", sel & case.args[0].bool(), "are special tokens but selected"),
        ("selects_padding", sel & (False if attn is None else attn == 0), "are padding, selected"),
        ("splits_words", split, "belong to words selected only in part"),
    ]
    first_broken(case, rules, {"is_continuation": case.args[1]})
    if budget:
        _budget(case, rows)
    return rows


def _budget(case: Any, rows: list[list[bool]]) -> None:
    """At most each row's count, and maximal: no word left out fits in what is left."""
    kw, T = case.kwargs, case.args[0].shape[1]
    p, cap = kw.get("mlm_probability", 0.15), kw.get("max_predictions_per_seq", 20)
    for r, (row, words) in enumerate(zip(rows, case.words)):
        n = T if kw["attention_mask"] is None else int(kw["attention_mask"][r].sum())
        count, padded, taken = num_to_predict(n, p, cap), num_to_predict(T, p, cap), sum(row)
        why = "ignores_max_predictions" if taken > (cap or taken) else "wrong_count_formula"
        why = "count_from_padded_length" if n < T and taken == padded != count else why
        left = [w for w in words if not row[w[0]]]
        fits = [w for w in left if len(w) <= count - taken]
        seen = f"On {case.label}, row {r} ({n} tokens, count {count}): {taken} pieces selected"
        if taken > count:  # `count` words taken, or the last one overshot, or a wrong count
            chosen = [len(w) for w in words if row[w[0]]]
            code = "overshoots_count" if taken - max(chosen) < count else why
            code = "counts_words" if len(chosen) == min(count, len(words)) else code
            raise Mistake(code, f"{seen}, in {len(chosen)} words.")
        if fits:
            code = "stops_at_first_long_word" if any(len(w) > count - taken for w in left) else why
            code = "orphan_piece" if any(case.args[1][r, w[0]] for w in fits) else code
            where = f"the {len(fits[0])}-piece word at position {fits[0][0]} still fits"
            raise Mistake(code, f"{seen}; {where}.")


def _order(run: Runner) -> None:
    """Words in a uniformly random order: each as likely to come first, whatever its length."""
    tests = [  # row, probability, each word's share of the 300 rows, the mistake otherwise
        ((((2,) * 6, (2,) * 6), 0), 0.23, [1 / 4] * 12, "not_random_order"),  # count 6
        ((((3, 1, 1, 1), (1, 1, 1)), 0), 0.27, [1 / 7] + [3 / 7] * 6, "weights_words_by_length"),
    ]
    for i, (spec, p, shares, code) in enumerate(tests):
        case = _case(f"hidden case {7 + i}", [spec] * 300, 5, False, mlm_probability=p)
        rows = _result(run, case)
        hits = [sum(row[w[0]] for row in rows) for w in case.words[0]]
        if not all(within(h, 300, share) for h, share in zip(hits, shares)):
            want = [round(300 * share) for share in shares]
            seen = f"row 0's words were selected {hits} times in 300 rows; expected about {want}"
            raise Mistake(code, f"On {case.label}, {seen}.")
    run.ok(f"words in a uniformly random order (a long word: {pct(hits[0], 300)} of rows, 1/7 due)")


def check_select_whole_words(run: Runner) -> None:
    rows: list[RowSpec] = [(((1, 3, 2, 1, 2), (2, 1, 4)), 0), (((2, 2, 1, 3), (1, 2)), 4)]
    rows += [(((4, 1, 1), (3, 2, 1, 1)), 2), (((1, 1, 2, 2, 3, 1), (2,)), 1), (((3,), (1, 1)), 9)]
    rows += [(((2, 1, 2, 1, 2, 1), (1, 2, 1)), 0)]
    _result(run, first := _case("hidden case 1", rows, 0, mlm_probability=0.4), budget=False)
    run.ok("returns a `(B, T)` bool mask; the arguments stay unchanged")
    run.ok("never selects [CLS], [SEP] or padding; every word is selected whole or not at all")
    specs: list[RowSpec] = [(((1,) * 10,), 11), (((1,) * 12, (1,) * 8), 0), (((1,),), 20)]
    specs += [(((1,) * 9,), 0)]  # lengths 12, 23, 3, 11: 3.6, 6.9, 0.9, 3.3 expected targets
    counts = _case("hidden case 2", [s for s in specs for _ in range(20)], 2, mlm_probability=0.3)
    sel = _result(run, counts, budget=False)
    got = [sorted({sum(row) for row in sel[r : r + 20]}) for r in range(0, 80, 20)]
    if any(len(x) > 1 for x in got):
        raise Mistake("count_not_exact", f"On {counts.label}, 4 x 20 alike rows got {got} pieces.")
    _budget(counts, sel)
    _result(run, _case("hidden case 2b", [(((1,) * 7,), 0)] * 10, 2, mlm_probability=0.5))  # 4.5
    run.ok("the count is min(max_predictions_per_seq, max(1, round(length * p))) pieces")
    capped: dict[str, Any] = {"mlm_probability": 0.3, "max_predictions_per_seq": 5}
    cases = [replace(first, label=first.label.replace("1", "3", 1), seed=3)]
    cases += [_case("hidden case 4", [(((1, 2) * 10, (2, 1) * 5), 0)] * 4, 4, **capped)]
    o: list[RowSpec] = [(((-1,), (1,)), 0), (((1,), (-1,)), 0), (((1,), (-2, 1)), 0)]  # ## first
    cases += [_case(f"hidden case 5.{i}", o * 10, 9 + i, mlm_probability=i / 5) for i in (1, 2)]
    pad: list[RowSpec] = [(((1, 2, 1), (2,)), 12), (((2, 1), (1,)), 14)]
    nopad: dict[str, Any] = {"pad_is_special": False}  # padding marked by `attention_mask` only
    cases += [_case(f"hidden case 6.{i}", pad, 6, mlm_probability=i / 2, **nopad) for i in (0, 1)]
    g = gen(9)
    for i in range(30):  # generated cases; every third without attention_mask
        rows = random_word_rows(g, int(torch.randint(1, 6, (), generator=g)))
        p = (0.0, 1.0, 0.5, round(float(torch.rand((), generator=g)), 2))[i % 4]
        cap = (None, 20, int(torch.randint(1, 5, (), generator=g)))[i // 4 % 3]
        kw: dict[str, Any] = {"mlm_probability": p, "max_predictions_per_seq": cap}
        kw["pad_is_special"] = i % 3 == 0 or i % 2 == 0  # else marked by attention_mask only
        cases.append(_case(f"generated case {i + 1}", rows, 500 + i, i % 3 != 0, **kw))
    for case in cases:
        _result(run, case)
    run.ok("never more pieces than the count; a word that fits is never left out; the cap")
    run.ok("a `##` piece after [CLS] or [SEP] is a word; `attention_mask` excludes padding")
    run.ok("`mlm_probability=0` selects nothing; the same rules on 30 generated batches")
    _order(run)
    run.generator_contract(lambda seed: _result(run, replace(first, seed=seed)))

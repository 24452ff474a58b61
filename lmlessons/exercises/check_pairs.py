"""Checker for ``make_nsp_pairs`` (Google BERT's next-sentence pairs), in the runner's pattern
(:mod:`lmlessons.exercises._framework`). Token ids are unique, so each row is parsed as
``[CLS] A [SEP] B [SEP] [PAD]...`` (:func:`_row`) and its label held to where A and B come from
(:func:`_labels`); any valid strategy passes. 20 generated corpora reach documents of one
sentence, sentences of one token, two documents and ``max_length=5`` (one token a side)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from lmlessons.exercises._cases import Corpus, gen
from lmlessons.exercises._framework import Case, Mistake, Runner
from lmlessons.exercises._stats import pct, within

SIGNATURE = (
    "make_nsp_pairs(documents, *, cls_token_id, sep_token_id, pad_token_id, max_length, "
    "nsp_probability=0.5, generator=None) -> dict(input_ids, token_type_ids, attention_mask, "
    "next_sentence_label)"
)
KEYS = ("input_ids", "token_type_ids", "attention_mask", "next_sentence_label")
Span = tuple[int, int, int]  # document, first and last position in its token stream


@dataclass(frozen=True)
class _Case(Case):
    corpus: Any = None


def _case(label: str, corpus: Corpus, seed: int, max_length: int = 64, p: float = 0.5) -> Any:
    ids = {"cls_token_id": corpus.cls, "sep_token_id": corpus.sep, "pad_token_id": corpus.pad}
    text = f"{label} ({corpus.describe()}; max_length={max_length}, nsp_probability={p})"
    kw = {**ids, "max_length": max_length, "nsp_probability": p}
    return _Case(text, (corpus.documents,), kw, seed=seed, corpus=corpus)


def _span(tokens: list[int], corpus: Corpus) -> Span | None:
    """Where ``tokens`` come from, if they are consecutive text of one document."""
    at = [corpus.where.get(t, (-1, -1)) for t in tokens]
    if not at or at[0][0] < 0 or at != [(at[0][0], at[0][1] + i) for i in range(len(at))]:
        return None
    return at[0][0], at[0][1], at[-1][1]


def _row(case: Any, r: int, out: dict[str, list], budget: int) -> tuple[Span, Span, int, bool]:
    """Example ``r`` as ``[CLS] A [SEP] B [SEP] [PAD]...``: A's and B's text, label, trimmed?"""
    c, (ids, tt, mask, label) = case.corpus, (out[k][r] for k in KEYS)
    at, seps = f"On {case.label}, example {r}: {ids}", [i for i, t in enumerate(ids) if t == c.sep]
    n, s1 = (seps[1] + 1, seps[0]) if len(seps) == 2 else (len(ids), 0)
    pads, a, b = ids[n:], ids[1:s1], ids[s1 + 1 : n - 1]
    odd = {ids[0], *pads} - set(c.where) - {c.cls, c.sep, c.pad}  # ids of another tokenizer?
    rules = [  # code, broken, what the example shows
        ("missing_cls", ids[0] != c.cls, f"it starts with {ids[0]}, not [CLS] = {c.cls}"),
        ("sep_wrong", len(seps) != 2, f"[SEP] = {c.sep} is at {seps}, not twice"),
        ("padding_wrong", set(pads) - {c.pad}, f"its padding is not [PAD] = {c.pad}"),
        ("attention_mask_wrong", mask != [1] * n + [0] * len(pads), f"the mask is {mask}"),
        ("wrong_segment_ids", tt != [0] * (s1 + 1) + [1] * (n - s1 - 1) + [0] * len(pads), tt),
        ("empty_segment", not a or not b, f"A is {a} and B is {b}"),
        ("segment_not_text", _span(a, c) is None, f"A is {a}: not consecutive text"),
    ]
    for code, broken, seen in rules:
        if broken:
            hard = (odd and code in ("missing_cls", "padding_wrong")) or not seps
            raise Mistake("hard_coded_special_ids" if hard else code, f"{at}; {seen}.")
    if (sb := _span(b, c)) is None:
        places = [c.where.get(t) for t in b]
        scattered = places.count(None) > len(b) / 2 or _runs(places) > max(1, len(b) // 2)
        code = "negative_random_ids" if scattered and label == 1 else "segment_not_text"
        raise Mistake(code, f"{at}; B is {b}: not consecutive text of one document.")
    if label not in (0, 1):
        raise Mistake("wrong_value", f"{at}; the label is {label}: 0 (IsNext) or 1 (NotNext).")
    return _span(a, c), sb, label, len(a) + len(b) == budget  # type: ignore[return-value]


def _runs(x: list[Any]) -> int:
    """Into how many stretches of consecutive text places ``x`` (document, position) fall."""
    return sum(p is None or q is None or p != (q[0], q[1] - 1) for q, p in zip(x, [0, *x]))


def _result(run: Runner, case: Any) -> list[tuple[Span, Span, int, bool]]:
    """The learner's examples on ``case``, parsed, their widths and labels checked."""
    got, most = run.call(case), case.kwargs["max_length"]
    ids = got.get("input_ids") if isinstance(got, dict) else None
    n, width = ids.shape if isinstance(ids, torch.Tensor) and ids.dim() == 2 else (1, 1)
    like = {k: torch.zeros((n, width)[: 1 if k == KEYS[3] else 2], dtype=torch.long) for k in KEYS}
    run.compare(case, got, like)  # a dict of LongTensors, (N, L) and (N,)
    if width > most:
        raise Mistake("ignores_max_length", f"On {case.label}, the examples are {width} wide.")
    out = {k: got[k].tolist() for k in KEYS}
    rows = [_row(case, r, out, most - 3) for r in range(n)]
    if n == 0 or width != (longest := max(map(sum, out[KEYS[2]]), default=0)):
        seen = f"{n} examples of at most {longest} tokens are {width} wide"
        raise Mistake("padding_wrong", f"On {case.label}, {seen}.")
    _labels(case, rows)
    return rows


def _labels(case: Any, rows: list[tuple[Span, Span, int, bool]]) -> None:
    """Label 0: B is the text right after A (after it, if trimmed); 1: from another document."""

    def right(a: Span, b: Span, label: int, trimmed: bool) -> bool:
        after = b[1] > a[2] if trimmed else b[1] == a[2] + 1
        return a[0] != b[0] if label == 1 else a[0] == b[0] and after

    if not (wrong := [r for r, row in enumerate(rows) if not right(*row)]):
        return
    (a, b, label, _), at = rows[wrong[0]], f"On {case.label}, example {wrong[0]}"
    if all(right(*row[:2], 1 - row[2], row[3]) for row in rows):
        raise Mistake("swapped_nsp_labels", f"{at}: every label is the other one.")
    code = "positive_from_other_document" if a[0] != b[0] else "positive_not_continuation"
    where = f"A is tokens {a[1]}..{a[2]} of document {a[0]}, B {b[1]}..{b[2]} of document {b[0]}"
    raise Mistake("negative_same_document" if label else code, f"{at} (label {label}): {where}.")


def check_make_nsp_pairs(run: Runner) -> None:
    corpus = Corpus.make(61, n_docs=24, sentences=(3, 5), tokens=(2, 5))
    _result(run, first := _case("hidden case 1", corpus, 0))
    run.ok("a dict of LongTensors, the four keys; `[CLS] A [SEP] B [SEP]` padded to the longest")
    run.ok("segment ids 0 up to the first [SEP], then 1; mask 1 on real tokens; ids as given")
    run.ok("label 0: B is the text right after A; label 1: B comes from another document")
    two = Corpus.make(71, n_docs=2, sentences=(10, 12), tokens=(2, 4))
    for seed in (0, 1, 2):
        _result(run, _case("hidden case 2", two, seed))
    run.ok("NotNext segments never come from A's own document (two documents, 3 seeds)")
    long = Corpus.make(81, n_docs=8, sentences=(3, 4), tokens=(4, 12))  # some fill the budget
    _result(run, _case("hidden case 3", long, 0, max_length=12))
    run.ok("pairs longer than `max_length` are trimmed, both segments kept non-empty")
    for p in (0.0, 1.0):
        case = _case(f"hidden case {4 + int(p)}", corpus, 3, p=p)
        if wrong := sum(row[2] != p for row in _result(run, case)):
            seen = f"{wrong} labels are {1 - p:g}"
            raise Mistake("ignores_nsp_probability", f"On {case.label}, {seen}.")
    run.ok("`nsp_probability=0` gives only IsNext, `nsp_probability=1` only NotNext")
    n = ones = k = 0
    while n < 400 and k < 40:  # at least 400 examples at nsp_probability=0.3
        labels = [row[2] for row in _result(run, _case("hidden case 6", corpus, 100 + k, p=0.3))]
        n, ones, k = n + len(labels), ones + sum(labels), k + 1
    if not within(ones, n, 0.3):
        seen = f"over {k} calls, {ones} of {n} examples are NotNext ({pct(ones, n)}); expected 30%"
        raise Mistake("ignores_nsp_probability", f"On hidden case 6, {seen}.")
    run.ok(f"NotNext rate {pct(ones, n)} over {n} examples at nsp_probability=0.3")
    for i in range(20):  # generated corpora
        g, size = gen(700 + i), (1, 2, 4, 6)[i % 4]  # sentences of 1 to `size` tokens
        docs = Corpus.make(700 + i, n_docs=2 + i % 5, sentences=(1, 4), tokens=(1, size))
        p = (0.0, 1.0, 0.5, round(float(torch.rand((), generator=g)), 2))[i // 5 % 4]
        _result(run, _case(f"generated case {i + 1}", docs, 800 + i, (5, 6, 9, 64)[i % 4], p))
    run.ok("the same on 20 generated corpora: documents of one sentence, `max_length=5`")
    run.generator_contract(lambda seed: run.call(replace(first, seed=seed)))

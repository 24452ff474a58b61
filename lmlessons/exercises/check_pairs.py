"""Checker for ``make_nsp_pairs`` (Google BERT's next-sentence pairs), in the runner's pattern
(:mod:`lmlessons.exercises._framework`). Token ids are unique, so each row is parsed as
``[CLS] A [SEP] B [SEP] [PAD]...`` (:func:`_row`) and its label held to where A and B come from
(:func:`_labels`); any valid strategy passes. 20 generated corpora (:data:`GENERATED`) reach
documents of one sentence, sentences of one token, two documents and ``max_length=5`` (one token
a side)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch

from lmlessons.exercises._cases import DRAWN, Corpus, gen
from lmlessons.exercises._framework import Case, Mistake, Runner
from lmlessons.exercises._stats import pct, within

SIGNATURE = (
    "make_nsp_pairs(documents, *, cls_token_id, sep_token_id, pad_token_id, max_length, "
    "nsp_probability=0.5, generator=None) -> dict(input_ids, token_type_ids, attention_mask, "
    "next_sentence_label)"
)
KEYS = ("input_ids", "token_type_ids", "attention_mask", "next_sentence_label")
Span = tuple[int, int, int]  # document, first and last position in its token stream


class Example(NamedTuple):
    """One parsed row: where A's and B's text comes from, its label, and whether the pair fills
    the budget (was trimmed)."""

    a: Span
    b: Span
    label: int
    trimmed: bool


@dataclass(frozen=True)
class GeneratedCorpus:
    """A row of :data:`GENERATED`: the corpus (its documents, of 1 to 4 sentences of 1 to
    ``tokens`` tokens) and the call."""

    documents: int
    tokens: int
    max_length: int
    nsp_probability: float | str  # DRAWN: drawn from the case's seeded generator


#: (tokens per sentence at most, max_length): ``max_length=5`` leaves one token a side.
_SHAPES = [(1, 5), (2, 6), (4, 9), (6, 64)]
#: The generated cases, in order (corpus ``i`` is seeded ``700 + i``, the call ``800 + i``): 2 to
#: 6 documents, each shape, ``nsp_probability`` 0 (cases 1-5), 1, 0.5, then drawn (16-20).
GENERATED = [
    GeneratedCorpus(2 + i % 5, *_SHAPES[i % 4], (0.0, 1.0, 0.5, DRAWN)[i // 5]) for i in range(20)
]


@dataclass(frozen=True)
class _Case(Case):
    corpus: Any = None


def _case(label: str, corpus: Corpus, seed: int, max_length: int = 64, p: float = 0.5) -> Any:
    ids = {"cls_token_id": corpus.cls, "sep_token_id": corpus.sep, "pad_token_id": corpus.pad}
    kwargs = {**ids, "max_length": max_length, "nsp_probability": p}
    text = f"{label} ({corpus.describe()}; max_length={max_length}, nsp_probability={p})"
    return _Case(text, (corpus.documents,), kwargs, seed=seed, corpus=corpus)


def _span(tokens: list[int], corpus: Corpus) -> Span | None:
    """Where ``tokens`` come from, if they are consecutive text of one document."""
    at = [corpus.where.get(t, (-1, -1)) for t in tokens]
    if not at or at[0][0] < 0:
        return None
    document, start = at[0]
    if at != [(document, start + i) for i in range(len(at))]:
        return None
    return document, start, at[-1][1]


def _split(ids: list[int], sep: int) -> tuple[list[int], list[int], list[int], int]:
    """``[CLS] A [SEP] B [SEP] [PAD]...``: the [SEP] positions, A, B, and where padding starts."""
    seps = [i for i, t in enumerate(ids) if t == sep]
    end = seps[1] + 1 if len(seps) == 2 else len(ids)  # after the second [SEP]
    first_sep = seps[0] if len(seps) == 2 else 0
    return seps, ids[1:first_sep], ids[first_sep + 1 : end - 1], end


def _layout_rules(c: Corpus, ids: list[int], tt: list[int], mask: list[int]) -> list:
    """``(code, broken, what the example shows)`` for the layout of one example."""
    seps, a, b, end = _split(ids, c.sep)
    pads = ids[end:]
    segments = [0] * (len(a) + 2) + [1] * (end - len(a) - 2) + [0] * len(pads)
    return [
        ("missing_cls", ids[0] != c.cls, f"it starts with {ids[0]}, not [CLS] = {c.cls}"),
        ("sep_wrong", len(seps) != 2, f"[SEP] = {c.sep} is at {seps}, not twice"),
        ("padding_wrong", set(pads) - {c.pad}, f"its padding is not [PAD] = {c.pad}"),
        ("attention_mask_wrong", mask != [1] * end + [0] * len(pads), f"the mask is {mask}"),
        ("wrong_segment_ids", tt != segments, tt),
        ("empty_segment", not a or not b, f"A is {a} and B is {b}"),
        ("segment_not_text", _span(a, c) is None, f"A is {a}: not consecutive text"),
    ]


def _row(case: Any, r: int, out: dict[str, list], budget: int) -> Example:
    """Example ``r`` as ``[CLS] A [SEP] B [SEP] [PAD]...``: A's and B's text, label, trimmed?"""
    c = case.corpus
    ids = out["input_ids"][r]
    label = out["next_sentence_label"][r]
    at = f"On {case.label}, example {r}: {ids}"
    seps, a, b, end = _split(ids, c.sep)
    odd = {ids[0], *ids[end:]} - set(c.where) - {c.cls, c.sep, c.pad}  # another tokenizer's?
    rules = _layout_rules(c, ids, out["token_type_ids"][r], out["attention_mask"][r])
    for code, broken, seen in rules:
        if broken:
            hard = (odd and code in ("missing_cls", "padding_wrong")) or not seps
            raise Mistake("hard_coded_special_ids" if hard else code, f"{at}; {seen}.")
    span_b = _span(b, c)
    if span_b is None:
        places = [c.where.get(t) for t in b]
        scattered = places.count(None) > len(b) / 2 or _runs(places) > max(1, len(b) // 2)
        code = "negative_random_ids" if scattered and label == 1 else "segment_not_text"
        raise Mistake(code, f"{at}; B is {b}: not consecutive text of one document.")
    if label not in (0, 1):
        raise Mistake("wrong_value", f"{at}; the label is {label}: 0 (IsNext) or 1 (NotNext).")
    span_a = _span(a, c)
    assert span_a is not None  # a layout rule
    return Example(span_a, span_b, label, len(a) + len(b) == budget)


def _runs(places: list[Any]) -> int:
    """Into how many stretches of consecutive text ``places`` (document, position) fall."""
    pairs = zip([None, *places], places)  # (the one before, each)
    return sum(p is None or q is None or p != (q[0], q[1] + 1) for q, p in pairs)


def _like(got: Any) -> dict[str, torch.Tensor]:
    """What the result must look like: a dict of LongTensors, ``(N, L)`` and ``(N,)``, with the
    learner's ``N`` and ``L`` (their values are checked by the rules)."""
    ids = got.get("input_ids") if isinstance(got, dict) else None
    n, width = ids.shape if isinstance(ids, torch.Tensor) and ids.dim() == 2 else (1, 1)
    like = {key: torch.zeros((n, width), dtype=torch.long) for key in KEYS[:3]}  # (N, L)
    return {**like, "next_sentence_label": torch.zeros((n,), dtype=torch.long)}  # (N,)


def _result(run: Runner, case: Any) -> list[Example]:
    """The learner's examples on ``case``, parsed, their widths and labels checked."""
    got = run.call(case)
    most = case.kwargs["max_length"]
    like = _like(got)
    run.compare(case, got, like)
    n, width = like["input_ids"].shape
    if width > most:
        raise Mistake("ignores_max_length", f"On {case.label}, the examples are {width} wide.")
    out = {k: got[k].tolist() for k in KEYS}
    rows = [_row(case, r, out, most - 3) for r in range(n)]
    longest = max(map(sum, out["attention_mask"]), default=0)
    if n == 0 or width != longest:
        seen = f"{n} examples of at most {longest} tokens are {width} wide"
        raise Mistake("padding_wrong", f"On {case.label}, {seen}.")
    _labels(case, rows)
    return rows


def _right(example: Example) -> bool:
    """Label 0: B is the text right after A (after it, if trimmed); 1: from another document."""
    a, b, label, trimmed = example
    if label == 1:
        return a[0] != b[0]
    after = b[1] > a[2] if trimmed else b[1] == a[2] + 1
    return a[0] == b[0] and after


def _labels(case: Any, rows: list[Example]) -> None:
    """The first example whose label does not match where its segments come from."""
    wrong = [r for r, row in enumerate(rows) if not _right(row)]
    if not wrong:
        return
    a, b, label, _ = rows[wrong[0]]
    at = f"On {case.label}, example {wrong[0]}"
    if all(_right(row._replace(label=1 - row.label)) for row in rows):
        raise Mistake("swapped_nsp_labels", f"{at}: every label is the other one.")
    where = f"A is tokens {a[1]}..{a[2]} of document {a[0]}, B {b[1]}..{b[2]} of document {b[0]}"
    if label:
        code = "negative_same_document"
    elif a[0] != b[0]:
        code = "positive_from_other_document"
    else:
        code = "positive_not_continuation"
    raise Mistake(code, f"{at} (label {label}): {where}.")


def _nsp_rate(run: Runner, corpus: Corpus) -> str:
    """At least 400 examples at ``nsp_probability=0.3`` (at most 40 calls): about 30% NotNext."""
    examples = 0
    not_next = 0
    calls = 0
    while examples < 400 and calls < 40:
        labels = [
            row.label for row in _result(run, _case("hidden case 6", corpus, 100 + calls, p=0.3))
        ]
        examples += len(labels)
        not_next += sum(labels)
        calls += 1
    if not within(not_next, examples, 0.3):
        seen = f"{not_next} of {examples} examples are NotNext ({pct(not_next, examples)})"
        raise Mistake(
            "ignores_nsp_probability",
            f"On hidden case 6, over {calls} calls, {seen}; expected 30%.",
        )
    return f"NotNext rate {pct(not_next, examples)} over {examples} examples at nsp_probability=0.3"


def _generated(run: Runner) -> None:
    for i, row in enumerate(GENERATED):
        docs = Corpus.make(700 + i, n_docs=row.documents, sentences=(1, 4), tokens=(1, row.tokens))
        p = row.nsp_probability
        if p == DRAWN:
            p = round(float(torch.rand((), generator=gen(700 + i))), 2)
        _result(run, _case(f"generated case {i + 1}", docs, 800 + i, row.max_length, float(p)))


def check_make_nsp_pairs(run: Runner) -> None:
    corpus = Corpus.make(61, n_docs=24, sentences=(3, 5), tokens=(2, 5))
    first = _case("hidden case 1", corpus, 0)
    _result(run, first)
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
    for label, p in (("hidden case 4", 0.0), ("hidden case 5", 1.0)):
        case = _case(label, corpus, 3, p=p)
        wrong = sum(row.label != p for row in _result(run, case))
        if wrong:
            raise Mistake(
                "ignores_nsp_probability", f"On {case.label}, {wrong} labels are {1 - p:g}."
            )
    run.ok("`nsp_probability=0` gives only IsNext, `nsp_probability=1` only NotNext")
    run.ok(_nsp_rate(run, corpus))
    _generated(run)
    run.ok("the same on 20 generated corpora: documents of one sentence, `max_length=5`")
    run.generator_contract(lambda seed: run.call(replace(first, seed=seed)))

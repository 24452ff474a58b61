"""Checker for the ``make_nsp_pairs`` exercise (BERT's next-sentence-prediction data).

The hidden documents use *unique* token ids, so every token of an example tells which document
and which position it came from. For each returned row the checker parses
``[CLS] A [SEP] B [SEP] [PAD]...`` and verifies the special ids, the attention mask, the segment
ids, that A and B are consecutive text, and that B continues A (label 0 = IsNext) or comes from
another document (label 1 = NotNext). Then: truncation to ``max_length``, ``nsp_probability``
(exact at 0 and 1, a binomial rate at 0.3), and the generator. Any valid algorithm passes
(Google's chunks, one pair per sentence boundary, ...), not only the package's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from lmlessons.exercises._cases import Corpus, gen
from lmlessons.exercises._runner import Mistake, Runner, check_seeds, global_rng_changed
from lmlessons.exercises._stats import pct, within

SIGNATURE = (
    "make_nsp_pairs(documents, *, cls_token_id, sep_token_id, pad_token_id, max_length, "
    "nsp_probability=0.5, generator=None) -> dict(input_ids, token_type_ids, attention_mask, "
    "next_sentence_label)"
)
KEYS = ("input_ids", "token_type_ids", "attention_mask", "next_sentence_label")


@dataclass(frozen=True)
class Row:
    index: int
    a_doc: int
    a_span: tuple[int, int]  # first and last stream position of A in its document
    b_doc: int
    b_span: tuple[int, int]
    label: int


class _Case:
    def __init__(self, corpus: Corpus, max_length: int, nsp_probability: float, label: str) -> None:
        self.corpus = corpus
        self.max_length = max_length
        self.nsp_probability = nsp_probability
        self.used_global: str | None = None  # a global generator the first call drew from
        self.text = (
            f"{label} ({corpus.describe()}; max_length={max_length}, "
            f"nsp_probability={nsp_probability})"
        )

    def run(self, run: Runner, seed: int | None) -> dict[str, torch.Tensor]:
        docs = self.corpus.documents
        before = copy.deepcopy(docs)
        out = run.call(
            docs,
            cls_token_id=self.corpus.cls,
            sep_token_id=self.corpus.sep,
            pad_token_id=self.corpus.pad,
            max_length=self.max_length,
            nsp_probability=self.nsp_probability,
            generator=None if seed is None else gen(seed),
            case=self.text,
        )
        if docs != before:
            raise Mistake(
                "modifies_input",
                "modified `documents` in place",
                f"On {self.text}, the `documents` list changed during the call (a sentence was "
                "popped, extended or truncated in place). Copy what you change "
                "(`list(sentence)`), so the same documents can be paired again for the next "
                "epoch.",
            )
        return _unpack(out, self)


def _unpack(out: Any, case: _Case) -> dict[str, torch.Tensor]:
    return _check_shapes(_check_keys(out, case), case)


def _check_keys(out: Any, case: _Case) -> dict[str, Any]:
    """A dict holding every key of :data:`KEYS`."""
    if not isinstance(out, dict):
        what = f"a {type(out).__name__}" + (
            f" of {len(out)} items" if isinstance(out, (tuple, list)) else ""
        )
        raise Mistake(
            "returns_tuple" if isinstance(out, (tuple, list)) else "wrong_return",
            "should return a dict of tensors",
            f"On {case.text}, your function returned {what}. Return a dict with the keys "
            "`input_ids`, `token_type_ids`, `attention_mask` and `next_sentence_label`: the names "
            "`BertForPreTraining` takes, so the batch can be passed as `model(**batch)`.",
        )
    missing = [k for k in KEYS if k not in out]
    if missing:
        raise Mistake(
            "missing_keys",
            "keys are missing from the result",
            f"On {case.text}, the result has no {', '.join(f'`{k}`' for k in missing)}. Return "
            f"all of {', '.join(f'`{k}`' for k in KEYS)}.",
        )
    return out


def _check_shapes(out: dict[str, Any], case: _Case) -> dict[str, torch.Tensor]:
    """LongTensors: ``input_ids`` (N, L) with L <= max_length, the others to match."""
    for k in KEYS:
        v = out[k]
        if not isinstance(v, torch.Tensor) or v.dtype != torch.long:
            what = f"dtype {v.dtype}" if isinstance(v, torch.Tensor) else f"a {type(v).__name__}"
            raise Mistake(
                "wrong_dtype",
                f"`{k}` is not a LongTensor",
                f"On {case.text}, `{k}` is {what}; every entry of the result must be a torch.long "
                "tensor.",
            )
    ids = out["input_ids"]
    if ids.dim() != 2 or ids.shape[0] == 0:
        raise Mistake(
            "wrong_shape",
            "`input_ids` must be a non-empty (N, L) tensor",
            f"On {case.text}, `input_ids` has shape {tuple(ids.shape)}: expected one row per "
            "example, (N, L) with N >= 1.",
        )
    for k in ("token_type_ids", "attention_mask"):
        if tuple(out[k].shape) != tuple(ids.shape):
            raise Mistake(
                "wrong_shape",
                f"`{k}` has the wrong shape",
                f"On {case.text}, `{k}` has shape {tuple(out[k].shape)}, `input_ids` "
                f"{tuple(ids.shape)}; they must match.",
            )
    if tuple(out["next_sentence_label"].shape) != (ids.shape[0],):
        raise Mistake(
            "wrong_shape",
            "`next_sentence_label` has the wrong shape",
            f"On {case.text}, `next_sentence_label` has shape "
            f"{tuple(out['next_sentence_label'].shape)}; expected ({ids.shape[0]},), one label "
            "per example.",
        )
    if ids.shape[1] > case.max_length:
        raise Mistake(
            "ignores_max_length",
            "examples are longer than `max_length`",
            f"On {case.text}, the examples are {ids.shape[1]} tokens wide. Every example, [CLS] "
            f"and both [SEP] included, must fit in `max_length` = {case.max_length}: trim the "
            "pair to `max_length - 3` tokens, one token at a time from the longer side (Google's "
            "`truncate_seq_pair`).",
        )
    return out


def _span(tokens: list[int], corpus: Corpus) -> tuple[int, tuple[int, int]] | None:
    """(document, (first, last) position) if ``tokens`` is consecutive text of one document."""
    places = [corpus.where[t] for t in tokens if t in corpus.where]
    if len(places) != len(tokens):
        return None
    docs = {doc for doc, _ in places}
    positions = [pos for _, pos in places]
    if len(docs) != 1 or positions != list(range(positions[0], positions[0] + len(positions))):
        return None
    return docs.pop(), (positions[0], positions[-1])


def _runs(tokens: list[int], corpus: Corpus) -> int:
    """How many stretches of consecutive document text ``tokens`` falls into (unknown ids count
    as a stretch each): 1 for real text, about ``len(tokens)`` for random ids."""
    runs, prev = 0, None
    for t in tokens:
        here = corpus.where.get(t)
        if here is None or prev is None or here != (prev[0], prev[1] + 1):
            runs += 1
        prev = here
    return runs


def _check_cls(row: list[int], corpus: Corpus, at: str) -> None:
    if row[0] == corpus.cls:
        return
    if corpus.cls not in row and row[0] not in corpus.where:
        raise Mistake(
            "hard_coded_special_ids",
            "[CLS] is not `cls_token_id`",
            f"On {at}, the first id is {row[0]}, but `cls_token_id` is {corpus.cls}. Take the "
            "special ids from the arguments: fixed values such as 1, 2 or 101, 102 belong to one "
            "tokenizer only.",
        )
    raise Mistake(
        "missing_cls",
        "examples must start with [CLS]",
        f"On {at}, the first id is {row[0]}, not `cls_token_id` = {corpus.cls}. Each example is "
        "`[CLS] A [SEP] B [SEP]`.",
    )


def _check_mask_and_padding(row: list[int], m: list[int], corpus: Corpus, at: str) -> int:
    """The number of real tokens ``n``: the mask is n ones then zeros, the rest is [PAD]."""
    n = sum(m)
    if any(v not in (0, 1) for v in m) or m != [1] * n + [0] * (len(m) - n):
        raise Mistake(
            "attention_mask_wrong",
            "the attention mask is wrong",
            f"On {at}, the attention mask is {m}. It must be 1 on every real token ([CLS] through "
            "the final [SEP]) and 0 on padding.",
        )
    padding = row[n:]
    if any(t != corpus.pad for t in padding):
        if len(set(padding)) == 1 and padding[0] not in corpus.where:
            raise Mistake(
                "hard_coded_special_ids",
                "padding is not `pad_token_id`",
                f"On {at}, padding uses id {padding[0]}, but `pad_token_id` is {corpus.pad}. Take "
                "the special ids from the arguments.",
            )
        raise Mistake(
            "padding_wrong",
            "padding is wrong",
            f"On {at}, after the attention mask ends the ids are {padding}; they must all be "
            f"`pad_token_id` = {corpus.pad} (and the attention mask must cover every real token).",
        )
    return n


def _check_seps(row: list[int], n: int, corpus: Corpus, at: str) -> int:
    """The position of the first [SEP]; the second must be the last real token."""
    seps = [i for i in range(n) if row[i] == corpus.sep]
    if len(seps) != 2 or seps[1] != n - 1:
        if not seps and row[n - 1] not in corpus.where:
            raise Mistake(
                "hard_coded_special_ids",
                "[SEP] is not `sep_token_id`",
                f"On {at}, there is no `sep_token_id` = {corpus.sep}; the example ends with "
                f"{row[n - 1]}. Take the special ids from the arguments.",
            )
        raise Mistake(
            "sep_wrong",
            "each example needs exactly two [SEP]",
            f"On {at}, [SEP] appears at positions {seps} of the {n} real tokens. The layout is "
            "`[CLS] A [SEP] B [SEP]`: one [SEP] after A and one as the last real token.",
        )
    return seps[0]


def _check_segments(
    row: list[int], tt: list[int], s1: int, n: int, corpus: Corpus, at: str
) -> tuple[list[int], list[int]]:
    """Segments A and B (non-empty, no special token inside) and their ``token_type_ids``."""
    tokens_a, tokens_b = row[1:s1], row[s1 + 1 : n - 1]
    if not tokens_a or not tokens_b:
        raise Mistake(
            "empty_segment",
            "segment A or B is empty",
            f"On {at}, segment {'A' if not tokens_a else 'B'} is empty. Both segments need at "
            "least one token.",
        )
    expected_types = [0] * (s1 + 1) + [1] * (n - s1 - 1) + [0] * (len(row) - n)
    if tt != expected_types:
        raise Mistake(
            "wrong_segment_ids",
            "wrong segment ids (`token_type_ids`)",
            _segment_message(at, tt, expected_types, s1, n),
        )
    specials = {corpus.cls: "[CLS]", corpus.sep: "[SEP]", corpus.pad: "[PAD]"}
    stray = [t for t in tokens_a + tokens_b if t in specials]
    if stray:
        raise Mistake(
            "sep_wrong",
            "special tokens inside a segment",
            f"On {at}, {specials[stray[0]]} appears inside segment A or B.",
        )
    return tokens_a, tokens_b


def _a_span(tokens_a: list[int], corpus: Corpus, at: str) -> tuple[int, tuple[int, int]]:
    a = _span(tokens_a, corpus)
    if a is None:
        from_docs = all(t in corpus.where for t in tokens_a)
        raise Mistake(
            "a_not_consecutive_text" if from_docs else "a_not_from_documents",
            "segment A is not consecutive text of one document",
            f"On {at}, segment A is {tokens_a}. "
            + (
                "Its tokens come from the documents but not as one consecutive stretch of one "
                "document. A is the first sentence(s) of a chunk of one document, in order."
                if from_docs
                else "Some of its tokens do not occur in the documents at all."
            ),
        )
    return a


def _b_span(tokens_b: list[int], corpus: Corpus, at: str) -> tuple[int, tuple[int, int]]:
    b = _span(tokens_b, corpus)
    if b is not None:
        return b
    known = sum(t in corpus.where for t in tokens_b)
    if known < len(tokens_b) / 2 or _runs(tokens_b, corpus) >= max(2, len(tokens_b) // 2 + 1):
        raise Mistake(
            "negative_random_ids",
            "segment B is made of random token ids",
            f"On {at}, segment B is {tokens_b}: {len(tokens_b) - known} of its {len(tokens_b)} ids "
            "occur nowhere in the documents, and the others are not consecutive text, so B looks "
            "like random ids. A NotNext B must be real text from *another "
            "document* (Google's create_pretraining_data.py): random ids are not language, so the "
            "model could tell them apart without understanding anything.",
        )
    raise Mistake(
        "b_not_consecutive_text",
        "segment B is not consecutive text of one document",
        f"On {at}, segment B is {tokens_b}: its tokens are not one consecutive stretch of one "
        "document (does B run across a document boundary?).",
    )


def _parse_row(r: int, out: dict[str, torch.Tensor], case: _Case) -> Row:
    """Row ``r`` read as ``[CLS] A [SEP] B [SEP] [PAD]...``: where A and B come from, the label."""
    corpus = case.corpus
    row = out["input_ids"][r].tolist()
    at = f"{case.text}, example {r}: {row}"
    _check_cls(row, corpus, at)
    n = _check_mask_and_padding(row, out["attention_mask"][r].tolist(), corpus, at)
    s1 = _check_seps(row, n, corpus, at)
    tokens_a, tokens_b = _check_segments(row, out["token_type_ids"][r].tolist(), s1, n, corpus, at)
    a, b = _a_span(tokens_a, corpus, at), _b_span(tokens_b, corpus, at)
    label = int(out["next_sentence_label"][r])
    if label not in (0, 1):
        raise Mistake(
            "labels_not_binary",
            "`next_sentence_label` must be 0 or 1",
            f"On {at}, the label is {label}; use 0 = IsNext, 1 = NotNext.",
        )
    return Row(r, a[0], a[1], b[0], b[1], label)


def _parse(out: dict[str, torch.Tensor], case: _Case) -> list[Row]:
    return [_parse_row(r, out, case) for r in range(out["input_ids"].shape[0])]


def _segment_message(at: str, got: list[int], expected: list[int], s1: int, n: int) -> str:
    what = []
    if got[0] != 0:
        what.append("[CLS] must be segment 0")
    if got[s1] != 0:
        what.append("the first [SEP] belongs to segment A (0)")
    if got[n - 1] != 1:
        what.append("the final [SEP] belongs to segment B (1)")
    if any(g != 0 for g in got[n:]):
        what.append("padding must be segment 0")
    if any(g != 1 for g in got[s1 + 1 : n - 1]) and got[s1 + 1 : n - 1]:
        what.append("every token of B must be segment 1")
    if any(g != 0 for g in got[1:s1]):
        what.append("every token of A must be segment 0")
    detail = "; ".join(what) if what else "see the expected pattern"
    return (
        f"On {at}, `token_type_ids` is {got}, expected {expected}: {detail}. Segment 0 runs from "
        "[CLS] through the first [SEP], segment 1 covers B and the final [SEP], and padding is 0."
    )


def _check_labels(rows: list[Row], case: _Case, *, strict: bool) -> None:
    """Label 0: B continues A in A's document. Label 1: B comes from another document."""

    def continues(row: Row) -> bool:
        if row.a_doc != row.b_doc:
            return False
        return row.b_span[0] == row.a_span[1] + 1 if strict else row.b_span[0] > row.a_span[1]

    def other(row: Row) -> bool:
        return row.a_doc != row.b_doc

    right = [
        r for r in rows if not ((r.label == 0 and continues(r)) or (r.label == 1 and other(r)))
    ]
    if not right:
        return
    swapped = [
        r for r in rows if not ((r.label == 1 and continues(r)) or (r.label == 0 and other(r)))
    ]
    if not swapped:
        raise Mistake(
            "swapped_nsp_labels",
            "IsNext and NotNext are swapped",
            f"On {case.text}, every example whose B continues A has label 1, and every example "
            "whose B comes from another document has label 0. BERT and transformers use 0 = "
            "IsNext (B follows A) and 1 = NotNext: `BertForPreTraining` reads "
            "`next_sentence_label` that way. (d2l.ai uses the opposite, is_next=True -> 1; "
            "mixing the two silently flips the task.)",
        )
    r = right[0]
    at = f"{case.text}, example {r.index}"
    if r.label == 1:
        how = (
            "B is exactly the text that follows A, so this 'negative' is really a positive"
            if continues(r)
            else "B comes from the same document as A"
        )
        raise Mistake(
            "negative_same_document",
            "a NotNext example takes B from A's own document",
            f"On {at} (label 1 = NotNext), {how}. Draw the NotNext segment from a *different* "
            "document (Google's script picks another document; d2l.ai's random sentence can come "
            "from the same paragraph, and can even be the true next sentence).",
        )
    if r.a_doc != r.b_doc:
        raise Mistake(
            "positive_from_other_document",
            "an IsNext example takes B from another document",
            f"On {at} (label 0 = IsNext), A comes from document {r.a_doc} but B from document "
            f"{r.b_doc}. B must be the text that follows A *in the same document*; the last "
            "sentence of one document and the first of the next are not consecutive text "
            "(pairing sentences 2i and 2i+1 of one flat list crosses document boundaries).",
        )
    raise Mistake(
        "positive_not_continuation",
        "an IsNext example's B does not follow A",
        f"On {at} (label 0 = IsNext), A ends at token {r.a_span[1]} of document {r.a_doc} but B "
        f"starts at token {r.b_span[0]}. B must start right where A ends.",
    )


def _case_full_parse(run: Runner) -> _Case:
    """Hidden case 1: many documents, no truncation: the full parse and the strict label rules.
    Its ``used_global`` records whether the first call drew from a global generator."""
    corpus = Corpus.make(61, n_docs=24, sentences=(3, 5), tokens=(2, 5))
    case = _Case(corpus, max_length=64, nsp_probability=0.5, label="hidden case 1")
    before = run.rng_state()
    out = case.run(run, seed=0)
    case.used_global = global_rng_changed(before)
    run.ok(
        "returns a dict of LongTensors `input_ids`, `token_type_ids`, `attention_mask`, "
        "`next_sentence_label`"
    )
    rows = _parse(out, case)
    run.ok("every example is `[CLS] A [SEP] B [SEP]` + padding, with the ids given as arguments")
    run.ok(
        "segment ids: 0 through the first [SEP], 1 for B and its [SEP], 0 on padding; mask 1 on "
        "real tokens"
    )
    _check_labels(rows, case, strict=True)
    run.ok(
        "label 0 (IsNext): B is the text right after A; label 1 (NotNext): B from another document"
    )
    return case


def _case_two_documents(run: Runner) -> None:
    """Hidden case 2: two long documents: negatives drawn from "any document" hit A's own half
    of the time."""
    two = _Case(
        Corpus.make(71, n_docs=2, sentences=(10, 12), tokens=(2, 4)),
        max_length=64,
        nsp_probability=0.5,
        label="hidden case 2",
    )
    for seed in (0, 1, 2):
        _check_labels(_parse(two.run(run, seed=seed), two), two, strict=True)
    run.ok("NotNext segments never come from A's own document (two-document corpus, 3 seeds)")


def _case_truncation(run: Runner) -> None:
    """Hidden case 3: pairs longer than ``max_length`` are trimmed."""
    short = _Case(
        Corpus.make(81, n_docs=8, sentences=(3, 4), tokens=(4, 8)),
        max_length=12,
        nsp_probability=0.5,
        label="hidden case 3",
    )
    rows = _parse(short.run(run, seed=0), short)
    _check_labels(rows, short, strict=False)
    run.ok("pairs longer than `max_length` are trimmed, both segments kept non-empty")


def _case_exact_probabilities(run: Runner, corpus: Corpus) -> None:
    """Hidden cases 4 and 5: ``nsp_probability`` 0 and 1 give only IsNext, only NotNext."""
    for p in (0.0, 1.0):
        cp = _Case(corpus, max_length=64, nsp_probability=p, label=f"hidden case {5 if p else 4}")
        labels = cp.run(run, seed=3)["next_sentence_label"]
        wrong = int((labels != int(p)).sum())
        if wrong:
            raise Mistake(
                "ignores_nsp_probability",
                "`nsp_probability` is ignored",
                f"On {cp.text}, {wrong} of {len(labels)} labels are {1 - int(p)}; with "
                f"nsp_probability={p} every example must be "
                f"{'NotNext (1)' if p else 'IsNext (0)'}. Draw NotNext with probability "
                "`nsp_probability` per example (not a fixed half). (Google's script also forces "
                "NotNext when a chunk holds a single sentence; this course borrows the next "
                "sentence instead, so that the NotNext rate is exactly `nsp_probability`.)",
            )
    run.ok("`nsp_probability=0` gives only IsNext, `nsp_probability=1` only NotNext")


def _case_notnext_rate(run: Runner, corpus: Corpus) -> None:
    """Hidden case 6: the NotNext rate at ``nsp_probability=0.3`` over at least 400 examples."""
    p = 0.3
    rate_case = _Case(corpus, max_length=64, nsp_probability=p, label="hidden case 6")
    n = ones = seed = 0
    while n < 400 and seed < 40:
        labels = rate_case.run(run, seed=100 + seed)["next_sentence_label"]
        n, ones, seed = n + len(labels), ones + int(labels.sum()), seed + 1
    if not within(ones, n, p):
        raise Mistake(
            "ignores_nsp_probability",
            "the NotNext rate is not `nsp_probability`",
            f"On {rate_case.text}, over {seed} calls, {ones} of {n} examples are NotNext "
            f"({pct(ones, n)}); expected about {p:.0%}.",
        )
    run.ok(f"NotNext rate {pct(ones, n)} over {n} examples at nsp_probability={p}")


def _check_generator(run: Runner, case: _Case) -> None:
    """One seed gives one dataset, different seeds differ, nothing global is drawn from."""
    if case.used_global is not None:
        used = "torch generator" if case.used_global == "torch" else f"{case.used_global} generator"
        raise Mistake(
            "uses_global_rng",
            "`generator` is not used for every random draw",
            f"On {case.text}, with a `generator` passed, your function still drew from the global "
            f"{used}. Pass `generator=generator` to every random call (`torch.rand((), "
            "generator=generator)` for one uniform number), so one seed gives one dataset.",
        )
    check_seeds(
        run,
        lambda seed: case.run(run, seed),
        lambda a, b: all(torch.equal(a[k], b[k]) for k in KEYS),
        not_deterministic=(
            "the same seed gave different pairs",
            f"On {case.text}, two calls with `generator=torch.Generator().manual_seed(0)` gave "
            "different examples. Every random draw must use `generator`.",
        ),
        ignores_generator=f"On {case.text}, generators seeded 0, 1 and 2 gave identical "
        "examples. Use the `generator` you are given.",
    )


def check_make_nsp_pairs(run: Runner) -> None:
    """Run the hidden cases in order; the first failure raises its :class:`Mistake`."""
    case = _case_full_parse(run)
    _case_two_documents(run)
    _case_truncation(run)
    _case_exact_probabilities(run, case.corpus)
    _case_notnext_rate(run, case.corpus)
    _check_generator(run, case)

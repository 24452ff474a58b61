"""Attempts at ``make_nsp_pairs`` (lesson 05, section 6): ``[CLS] A [SEP] B [SEP]`` examples,
label 0 when B continues A in the same document, 1 (with probability ``nsp_probability``) when B
comes from another document; four LongTensors padded with ``pad_token_id`` to the longest
example; nothing longer than ``max_length``; all randomness from ``generator``.

Most attempts are :func:`_nsp` (one pair per sentence boundary) with one part changed: a hook of
:func:`_pairs`, the row ``layout`` of :func:`_build`, or the result. They take ``**kw``, the
exercise's keyword arguments, and pass them on. Structural mistakes (an edited input, a global
draw, float tensors, the reference itself) are in ``battery/_structural.py``.
"""

from __future__ import annotations

import random
from itertools import pairwise

import torch
from torch.nn.utils.rnn import pad_sequence

from battery._attempt import correct, wrong
from lmlessons import truncate_seq_pair

#: A row as parts with their segment id: C [CLS], A, S [SEP], B, then P the padding.
STANDARD = "C0 A0 S0 B1 S1 P0"
KEYS = ("input_ids", "token_type_ids", "attention_mask", "next_sentence_label")


def _u(g) -> float:
    """A uniform number in [0, 1)."""
    return float(torch.rand((), generator=g))


def _randint(n: int, g) -> int:
    """Uniform in [0, n)."""
    return int(torch.randint(n, (), generator=g))


def _other_doc(n_docs: int, d: int, g) -> int:
    """Uniform over the documents other than ``d``."""
    other = _randint(n_docs - 1, g)
    return other + (other >= d)


def _flat(sentences) -> list[int]:
    """The sentences' tokens, in order, in one new list."""
    return [t for s in sentences for t in s]


def _negative(documents, d, g) -> list[int]:
    """A random sentence of a random other document."""
    other = documents[_other_doc(len(documents), d, g)]
    return list(other[_randint(len(other), g)])


def _next(doc, i, g) -> list[int]:
    """The sentence after sentence ``i``."""
    return list(doc[i + 1])


def _truncate(a, b, budget, g):
    """The course's ``truncate_seq_pair`` (the default trim of :func:`_pairs`)."""
    return truncate_seq_pair(a, b, budget, generator=g)


def _pairs(documents, p, budget, g, *, coin=None, negative=_negative, positive=_next, trim=None):
    """One pair per sentence boundary: A = sentence i; B = ``positive(doc, i, g)`` (label 0) or,
    if ``coin() < p``, ``negative(documents, d, g)`` (label 1); ``trim(a, b, budget, g)``."""
    coin = coin or (lambda: _u(g))
    trim = trim or _truncate
    examples = []
    for d, doc in enumerate(documents):
        for i in range(len(doc) - 1):
            a = list(doc[i])
            if coin() < p:
                b, label = negative(documents, d, g), 1
            else:
                b, label = positive(doc, i, g), 0
            examples.append((*trim(a, b, budget, g), label))
    return examples


def _build(examples, cls, sep, pad, *, layout=STANDARD, width=None):
    """Pad ``(a, b, label)`` examples, laid out as ``layout``, into the four LongTensors (to
    ``width``, or the longest row)."""
    parts = [(part[0], int(part[1])) for part in layout.split()]
    rows = []  # per example, (token, segment) pairs
    for a, b, _ in examples:
        tokens = {"C": [cls], "A": a, "S": [sep], "B": b, "P": []}
        rows.append([(t, segment) for part, segment in parts for t in tokens[part]])
    width = width or max(map(len, rows))
    n = len(rows)
    out = {key: torch.zeros((n, width), dtype=torch.long) for key in KEYS[:3]}  # (N, L)
    out["input_ids"][:] = pad
    out["token_type_ids"][:] = dict(parts).get("P", 0)
    for k, row in enumerate(rows):
        out["input_ids"][k, : len(row)] = torch.tensor([t for t, _ in row])
        out["token_type_ids"][k, : len(row)] = torch.tensor([s for _, s in row])
        out["attention_mask"][k, : len(row)] = 1
    out["next_sentence_label"] = torch.tensor([label for *_, label in examples])  # (N,)
    return out


def _nsp(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
    layout=STANDARD,
    budget=None,
    width=None,
    **hooks,
):
    """:func:`_pairs` (``hooks``: its keyword arguments) trimmed to ``budget`` (default: room for
    the layout's [CLS] and [SEP]), then :func:`_build`."""
    if budget is None:
        budget = max_length - layout.count("C") - layout.count("S")
    examples = _pairs(documents, nsp_probability, budget, generator, **hooks)
    return _build(examples, cls_token_id, sep_token_id, pad_token_id, layout=layout, width=width)


# --------------------------------------------------------------------------------------------
# wrong attempts
# --------------------------------------------------------------------------------------------


@wrong("swapped_nsp_labels")
def swapped_labels(documents, **kw):
    """Label 1 for IsNext and 0 for NotNext (d2l.ai's convention)."""
    out = _nsp(documents, **kw)
    return {**out, "next_sentence_label": 1 - out["next_sentence_label"]}  # d2l.ai's is_next = 1


@wrong("negative_same_document")
def negative_from_any_document(documents, **kw):
    """Draws the NotNext document among all documents, the current one included."""

    def negative(docs, d, g):
        other = docs[_randint(len(docs), g)]  # may be the same document
        return list(other[_randint(len(other), g)])

    return _nsp(documents, **kw, negative=negative)


@wrong("negative_random_ids")
def random_token_negatives(documents, **kw):
    """NotNext B = random token ids, not text from another document."""
    vocab = 1 + max(t for doc in documents for s in doc for t in s)

    def negative(docs, d, g):
        return torch.randint(vocab, (len(docs[d][0]),), generator=g).tolist()

    return _nsp(documents, **kw, negative=negative)


@wrong("missing_cls")
def no_cls(documents, **kw):
    """Builds A [SEP] B [SEP] without [CLS]."""
    return _nsp(documents, **kw, layout="A0 S0 B1 S1 P0")


@wrong("sep_wrong")
def no_final_sep(documents, **kw):
    """Builds [CLS] A [SEP] B without the final [SEP]."""
    return _nsp(documents, **kw, layout="C0 A0 S0 B1 P0")


@wrong("wrong_segment_ids")
def first_sep_in_segment_b(documents, **kw):
    """token_type_ids 1 from the first [SEP] on (it belongs to segment 0)."""
    return _nsp(documents, **kw, layout="C0 A0 S1 B1 S1 P0")


@wrong("wrong_segment_ids")
def last_sep_in_segment_a(documents, **kw):
    """token_type_ids 0 on the final [SEP] (it belongs to segment 1)."""
    return _nsp(documents, **kw, layout="C0 A0 S0 B1 S0 P0")


@wrong("wrong_segment_ids")
def segment_one_on_padding(documents, **kw):
    """token_type_ids 1 from B to the end of the row, padding included."""
    return _nsp(documents, **kw, layout="C0 A0 S0 B1 S1 P1")


@wrong("hard_coded_special_ids")
def pads_with_zero(documents, **kw):
    """Pads input_ids with 0 instead of pad_token_id."""
    return _nsp(documents, **{**kw, "pad_token_id": 0})


@wrong("attention_mask_wrong")
def attention_everywhere(documents, **kw):
    """attention_mask all ones, padding included."""
    out = _nsp(documents, **kw)
    return {**out, "attention_mask": torch.ones_like(out["input_ids"])}


@wrong("padding_wrong")
def pads_to_max_length(documents, **kw):
    """Pads every row to max_length instead of the longest example."""
    return _nsp(documents, **kw, width=kw["max_length"])


@wrong("ignores_max_length")
def no_truncation(documents, **kw):
    """Never truncates: long pairs exceed max_length."""
    return _nsp(documents, **kw, trim=lambda a, b, budget, g: (a, b))


@wrong("ignores_max_length")
def budget_forgets_specials(documents, **kw):
    """Truncates A+B to max_length, forgetting the 3 special tokens: rows up to max_length + 3."""
    return _nsp(documents, **kw, budget=kw["max_length"])


@wrong("empty_segment")
def trims_only_b(documents, **kw):
    """Keeps A whole and cuts B to the rest of the budget: B is empty when A is long."""

    def trim(a, b, budget, g):
        a = a[:budget]
        return a, b[: budget - len(a)]

    return _nsp(documents, **kw, trim=trim)


@wrong("empty_segment")
def empty_b_at_document_end(documents, **kw):
    """Also pairs the last sentence of a document, whose IsNext B is empty."""
    padded = [[*doc, []] for doc in documents]  # an empty "sentence" after each document
    return _nsp(padded, **kw, negative=lambda docs, d, g: _negative(documents, d, g))


@wrong("ignores_nsp_probability")
def always_half(documents, **kw):
    """Uses 0.5 whatever nsp_probability says."""
    return _nsp(documents, **{**kw, "nsp_probability": 0.5})


@wrong("uses_global_rng")
def python_random(documents, **kw):
    """Python's random module for the NotNext draws and documents."""

    def negative(docs, d, g):
        other = random.choice([k for k in range(len(docs)) if k != d])
        return list(random.choice(docs[other]))

    return _nsp(documents, **kw, coin=random.random, negative=negative)


@wrong("positive_not_continuation")
def any_later_sentence(documents, **kw):
    """IsNext B is any later sentence of the document, not the next one."""

    def positive(doc, i, g):
        return list(doc[i + 1 + _randint(len(doc) - i - 1, g)])  # any later sentence

    return _nsp(documents, **kw, positive=positive)


@wrong("positive_from_other_document")
def one_stream(documents, *, max_length, nsp_probability=0.5, generator=None, **ids):
    """Pairs consecutive sentences of one stream of all documents: the last sentence of a document
    and the first of the next make an IsNext pair."""
    stream = [(d, s) for d, doc in enumerate(documents) for s in doc]
    examples = []
    for (d, a), (_, after) in pairwise(stream):
        if _u(generator) < nsp_probability:
            b, label = _negative(documents, d, generator), 1
        else:
            b, label = list(after), 0
        examples.append((*_truncate(list(a), b, max_length - 3, generator), label))
    return _build(examples, ids["cls_token_id"], ids["sep_token_id"], ids["pad_token_id"])


@wrong("raised_exception")
def chunk_split_crashes_on_one_sentence(
    documents, *, max_length, nsp_probability=0.5, generator=None, **ids
):
    """Cuts each document once at a random sentence boundary: crashes on a single-sentence
    document."""
    examples = []
    for d, doc in enumerate(documents):
        a_end = 1 + _randint(len(doc) - 1, generator)  # randint(0) fails for a 1-sentence doc
        if _u(generator) < nsp_probability:
            b, label = _negative(documents, d, generator), 1
        else:
            b, label = _flat(doc[a_end:]), 0
        examples.append((*_truncate(_flat(doc[:a_end]), b, max_length - 3, generator), label))
    return _build(examples, ids["cls_token_id"], ids["sep_token_id"], ids["pad_token_id"])


@wrong("wrong_keys")
def labels_key(documents, **kw):
    """Returns the labels under 'labels' instead of 'next_sentence_label'."""
    out = _nsp(documents, **kw)
    out["labels"] = out.pop("next_sentence_label")
    return out


@wrong("uses_global_rng")
def draft_as_written(documents, **unused):
    """A first draft: documents flattened into one list of sentences; sentences 2i and 2i+1 form
    a positive with label 1; the negative pairs sentence 2i with random token ids, label 0;
    [CLS]=1, [SEP]=2, [PAD]=0 hard-coded; no truncation; global RNG; a tuple returned."""
    sentences = [s for doc in documents for s in doc]
    rows, types, labels = [], [], []
    for i in range(len(sentences) // 2):
        a, b = sentences[2 * i], sentences[2 * i + 1]
        for b_seq, lab in ((b, 1), (torch.randint(0, 30000, (len(b),)).tolist(), 0)):
            rows.append([1, *a, 2, *b_seq, 2])
            types.append([0] * (len(a) + 2) + [1] * (len(b_seq) + 1))
            labels.append(lab)
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    seg = torch.tensor([t + [0] * (width - len(t)) for t in types])
    return ids, seg, torch.tensor(labels)


@wrong("delegates_to_course", says="lmlessons.pairs.make_nsp_pairs")
def the_course_make_nsp_pairs(documents, **kw):
    """Calls the course's own make_nsp_pairs (the lesson's setup imports it): nothing written."""
    from lmlessons import make_nsp_pairs

    out = make_nsp_pairs(documents, **kw)
    return {k: out[k] for k in KEYS}


# --------------------------------------------------------------------------------------------
# correct attempts
# --------------------------------------------------------------------------------------------


@correct
def per_boundary(documents, **kw):
    """One pair per sentence boundary, tensors filled by hand."""
    if kw["nsp_probability"] > 0 and len(documents) < 2:
        raise ValueError("documents: NotNext needs at least 2 documents")
    return _nsp(documents, **kw)


@correct
def per_boundary_pad_sequence(documents, *, max_length, nsp_probability=0.5, generator=None, **ids):
    """Labels drawn at once, consecutive NotNext text, pad_sequence."""
    bounds = [(d, i) for d, doc in enumerate(documents) for i in range(len(doc) - 1)]
    labels = (torch.rand(len(bounds), generator=generator) < nsp_probability).long()  # (N,)
    rows, first_b = [], []
    for (d, i), label in zip(bounds, labels.tolist()):
        a, b = list(documents[d][i]), list(documents[d][i + 1])
        if label:
            other = documents[_other_doc(len(documents), d, generator)]
            b = []
            for s in other[_randint(len(other), generator) :]:
                b += s
                if len(a) + len(b) >= max_length - 3:
                    break
        a, b = truncate_seq_pair(a, b, max_length - 3, generator=generator)
        rows.append(
            torch.tensor([ids["cls_token_id"], *a, ids["sep_token_id"], *b, ids["sep_token_id"]])
        )
        first_b.append(len(a) + 2)  # where segment 1 starts
    input_ids = pad_sequence(rows, batch_first=True, padding_value=ids["pad_token_id"])  # (N, L)
    positions = torch.arange(input_ids.shape[1])  # (L,)
    lengths = torch.tensor([len(row) for row in rows]).unsqueeze(1)  # (N, 1)
    starts = torch.tensor(first_b).unsqueeze(1)  # (N, 1)
    return {
        "input_ids": input_ids,
        "token_type_ids": ((positions >= starts) & (positions < lengths)).long(),  # (N, L)
        "attention_mask": (positions < lengths).long(),  # (N, L)
        "next_sentence_label": labels,
    }


@correct
def google_chunks(documents, *, max_length, nsp_probability=0.5, generator=None, **ids):
    """Google-style chunks cut at a random boundary, examples shuffled."""
    budget = max_length - 3
    examples = []
    for d, doc in enumerate(documents):
        chunk = []
        for k, sentence in enumerate(doc):
            chunk.append(sentence)
            if k < len(doc) - 1 and sum(map(len, chunk)) < budget:
                continue
            if len(chunk) >= 2:
                a_end = 1 + _randint(len(chunk) - 1, generator)
                if _u(generator) < nsp_probability:
                    other = documents[_other_doc(len(documents), d, generator)]
                    b, label = _flat(other[_randint(len(other), generator) :]), 1
                else:
                    b, label = _flat(chunk[a_end:]), 0
                examples.append((*_truncate(_flat(chunk[:a_end]), b, budget, generator), label))
            chunk = []
    order = torch.randperm(len(examples), generator=generator).tolist()
    examples = [examples[k] for k in order]
    return _build(examples, ids["cls_token_id"], ids["sep_token_id"], ids["pad_token_id"])

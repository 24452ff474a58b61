"""Attempts at ``make_nsp_pairs`` (lesson 05, section 6): ``[CLS] A [SEP] B [SEP]`` examples,
label 0 when B continues A in the same document, 1 (with probability ``nsp_probability``) when B
comes from another document; four LongTensors padded with ``pad_token_id`` to the longest
example; nothing longer than ``max_length``; all randomness from ``generator``."""

from __future__ import annotations

import random

import torch
from torch.nn.utils.rnn import pad_sequence

from battery._attempt import correct, wrong
from lmlessons import truncate_seq_pair


def _u(g) -> float:
    return float(torch.rand((), generator=g))


def _randint(n: int, g) -> int:
    """Uniform in [0, n)."""
    return int(torch.randint(n, (), generator=g))


def _other_doc(n_docs: int, d: int, g) -> int:
    """Uniform over the documents other than ``d``."""
    other = _randint(n_docs - 1, g)
    return other + (other >= d)


def _pairs(
    documents, nsp_probability, max_num_tokens, g, *, negative=None, positive=None, trim=None
):
    """One pair per sentence boundary: A = sentence i; B = sentence i+1 (label 0) or, with
    probability ``nsp_probability``, ``negative(documents, d, g)`` (label 1)."""
    negative = negative or _negative
    trim = trim or (lambda a, b: truncate_seq_pair(a, b, max_num_tokens, generator=g))
    examples = []
    for d, doc in enumerate(documents):
        for i in range(len(doc) - 1):
            a = list(doc[i])
            if _u(g) < nsp_probability:
                b, label = negative(documents, d, g), 1
            else:
                b = list(doc[i + 1]) if positive is None else positive(doc, i, g)
                label = 0
            a, b = trim(a, b)
            examples.append((a, b, label))
    return examples


def _negative(documents, d, g):
    """A random sentence of a random other document."""
    other = documents[_other_doc(len(documents), d, g)]
    return list(other[_randint(len(other), g)])


def _build(examples, cls, sep, pad, *, seq=None, segments=None, pad_to=None):
    """Pad ``(a, b, label)`` examples into the four LongTensors."""
    seq = seq or (lambda a, b: [cls, *a, sep, *b, sep])
    segments = segments or (lambda a, b, n: [0] * (len(a) + 2) + [1] * (len(b) + 1))
    rows = [seq(a, b) for a, b, _ in examples]
    width = pad_to or max(len(r) for r in rows)
    n = len(rows)
    input_ids = torch.full((n, width), pad, dtype=torch.long)
    token_type_ids = torch.zeros((n, width), dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    for k, ((a, b, _), row) in enumerate(zip(examples, rows)):
        input_ids[k, : len(row)] = torch.tensor(row)
        tt = segments(a, b, width)
        token_type_ids[k, : len(tt)] = torch.tensor(tt)
        attention_mask[k, : len(row)] = 1
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "next_sentence_label": torch.tensor([lab for *_, lab in examples], dtype=torch.long),
    }


def _standard(
    documents,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability,
    generator,
    **pair_kw,
):
    examples = _pairs(documents, nsp_probability, max_length - 3, generator, **pair_kw)
    return _build(examples, cls_token_id, sep_token_id, pad_token_id)


# --------------------------------------------------------------------------------------------
# wrong attempts
# --------------------------------------------------------------------------------------------


@wrong("swapped_nsp_labels")
def swapped_labels(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Label 1 for IsNext and 0 for NotNext (d2l.ai's convention)."""
    out = _standard(
        documents, cls_token_id, sep_token_id, pad_token_id, max_length, nsp_probability, generator
    )
    out["next_sentence_label"] = 1 - out["next_sentence_label"]  # d2l.ai's is_next = 1
    return out


@wrong("negative_same_document")
def negative_from_any_document(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Draws the NotNext document among all documents, the current one included."""

    def negative(docs, d, g):
        other = docs[_randint(len(docs), g)]  # may be the same document
        return list(other[_randint(len(other), g)])

    return _standard(
        documents,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        max_length,
        nsp_probability,
        generator,
        negative=negative,
    )


@wrong("negative_random_ids")
def random_token_negatives(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """NotNext B = random token ids, not text from another document."""
    vocab = 1 + max(t for doc in documents for s in doc for t in s)

    def negative(docs, d, g):
        n = len(docs[d][0])
        return torch.randint(vocab, (n,), generator=g).tolist()

    return _standard(
        documents,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        max_length,
        nsp_probability,
        generator,
        negative=negative,
    )


@wrong("missing_cls")
def no_cls(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Builds A [SEP] B [SEP] without [CLS]."""
    examples = _pairs(documents, nsp_probability, max_length - 2, generator)
    return _build(
        examples,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        seq=lambda a, b: [*a, sep_token_id, *b, sep_token_id],
        segments=lambda a, b, n: [0] * (len(a) + 1) + [1] * (len(b) + 1),
    )


@wrong("sep_wrong")
def no_final_sep(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Builds [CLS] A [SEP] B without the final [SEP]."""
    examples = _pairs(documents, nsp_probability, max_length - 2, generator)
    return _build(
        examples,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        seq=lambda a, b: [cls_token_id, *a, sep_token_id, *b],
        segments=lambda a, b, n: [0] * (len(a) + 2) + [1] * len(b),
    )


@wrong("wrong_segment_ids")
def first_sep_in_segment_b(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """token_type_ids 1 from the first [SEP] on (it belongs to segment 0)."""
    examples = _pairs(documents, nsp_probability, max_length - 3, generator)
    return _build(
        examples,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        segments=lambda a, b, n: [0] * (len(a) + 1) + [1] * (len(b) + 2),
    )


@wrong("wrong_segment_ids")
def segment_one_on_padding(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """token_type_ids 1 from B to the end of the row, padding included."""
    examples = _pairs(documents, nsp_probability, max_length - 3, generator)
    return _build(
        examples,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        segments=lambda a, b, n: [0] * (len(a) + 2) + [1] * (n - len(a) - 2),
    )


@wrong("hard_coded_special_ids")
def pads_with_zero(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Pads input_ids with 0 instead of pad_token_id."""
    return _standard(
        documents, cls_token_id, sep_token_id, 0, max_length, nsp_probability, generator
    )


@wrong("attention_mask_wrong")
def attention_everywhere(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """attention_mask all ones, padding included."""
    out = _standard(
        documents, cls_token_id, sep_token_id, pad_token_id, max_length, nsp_probability, generator
    )
    out["attention_mask"] = torch.ones_like(out["input_ids"])
    return out


@wrong("ignores_max_length")
def no_truncation(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Never truncates: long pairs exceed max_length."""
    return _standard(
        documents,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        max_length,
        nsp_probability,
        generator,
        trim=lambda a, b: (a, b),
    )


@wrong("ignores_max_length")
def budget_forgets_specials(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Truncates A+B to max_length, forgetting the 3 special tokens: examples up to max_length +
    3."""
    examples = _pairs(documents, nsp_probability, max_length, generator)
    return _build(examples, cls_token_id, sep_token_id, pad_token_id)


@wrong("ignores_nsp_probability")
def always_half(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Uses 0.5 whatever nsp_probability says."""
    return _standard(
        documents, cls_token_id, sep_token_id, pad_token_id, max_length, 0.5, generator
    )


@wrong("uses_global_rng")
def python_random(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Python's random module for the NotNext draws and documents."""
    examples = []
    for d, doc in enumerate(documents):
        for i in range(len(doc) - 1):
            if random.random() < nsp_probability:
                other = random.choice([k for k in range(len(documents)) if k != d])
                b, label = list(random.choice(documents[other])), 1
            else:
                b, label = list(doc[i + 1]), 0
            a, b = truncate_seq_pair(list(doc[i]), b, max_length - 3, generator=generator)
            examples.append((a, b, label))
    return _build(examples, cls_token_id, sep_token_id, pad_token_id)


@wrong("positive_not_continuation")
def any_later_sentence(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """IsNext B is any later sentence of the document, not the next one."""

    def positive(doc, i, g):
        return list(doc[i + 1 + _randint(len(doc) - i - 1, g)])  # any later sentence

    return _standard(
        documents,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        max_length,
        nsp_probability,
        generator,
        positive=positive,
    )


@wrong("positive_from_other_document")
def one_stream(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Pairs consecutive sentences of one stream of all documents: the last sentence of a document
    and the first of the next make an IsNext pair."""
    stream = [(d, s) for d, doc in enumerate(documents) for s in doc]
    examples = []
    for i in range(len(stream) - 1):
        d, a = stream[i]
        if _u(generator) < nsp_probability:
            b, label = _negative(documents, d, generator), 1
        else:
            b, label = list(stream[i + 1][1]), 0
        a, b = truncate_seq_pair(list(a), b, max_length - 3, generator=generator)
        examples.append((a, b, label))
    return _build(examples, cls_token_id, sep_token_id, pad_token_id)


@wrong("empty_segment")
def empty_b_at_document_end(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Also pairs the last sentence of a document, whose IsNext B is empty."""
    examples = []
    for d, doc in enumerate(documents):
        for i in range(len(doc)):  # the last sentence too: its B is doc[i+1:i+2] == []
            if _u(generator) < nsp_probability:
                b, label = _negative(documents, d, generator), 1
            else:
                b, label = [t for s in doc[i + 1 : i + 2] for t in s], 0
            a, b = truncate_seq_pair(list(doc[i]), b, max_length - 3, generator=generator)
            examples.append((a, b, label))
    return _build(examples, cls_token_id, sep_token_id, pad_token_id)


@wrong("wrong_dtype")
def bool_labels(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """next_sentence_label is a bool tensor."""
    out = _standard(
        documents, cls_token_id, sep_token_id, pad_token_id, max_length, nsp_probability, generator
    )
    out["next_sentence_label"] = out["next_sentence_label"].bool()  # torch.tensor([is_random])
    return out


@wrong("wrong_keys")
def labels_key(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Returns the labels under 'labels' instead of 'next_sentence_label'."""
    out = _standard(
        documents, cls_token_id, sep_token_id, pad_token_id, max_length, nsp_probability, generator
    )
    out["labels"] = out.pop("next_sentence_label")
    return out


def _google_truncate_in_place(a, b, max_num_tokens, g):
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if _u(g) < 0.5:
            del longer[0]
        else:
            longer.pop()
    return a, b


@wrong("modifies_input")
def trims_document_sentences(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Truncates in place the documents' own sentence lists (no copy), changing the caller's
    documents."""
    examples = []
    for d, doc in enumerate(documents):
        for i in range(len(doc) - 1):
            a = doc[i]  # no copy: the document's own list
            if _u(generator) < nsp_probability:
                other = documents[_other_doc(len(documents), d, generator)]
                b, label = other[_randint(len(other), generator)], 1
            else:
                b, label = doc[i + 1], 0
            a, b = _google_truncate_in_place(a, b, max_length - 3, generator)
            examples.append((list(a), list(b), label))
    return _build(examples, cls_token_id, sep_token_id, pad_token_id)


@wrong("raised_exception")
def chunk_split_crashes_on_one_sentence(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Cuts each document once at a random sentence boundary: crashes on a single-sentence
    document."""
    examples = []
    for d, doc in enumerate(documents):
        a_end = 1 + _randint(len(doc) - 1, generator)  # randint(0) fails for a 1-sentence doc
        a = [t for s in doc[:a_end] for t in s]
        if _u(generator) < nsp_probability:
            b, label = _negative(documents, d, generator), 1
        else:
            b, label = [t for s in doc[a_end:] for t in s], 0
        a, b = truncate_seq_pair(a, b, max_length - 3, generator=generator)
        examples.append((a, b, label))
    return _build(examples, cls_token_id, sep_token_id, pad_token_id)


@wrong("padding_wrong")
def pads_to_max_length(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Pads every row to max_length instead of the longest example."""
    examples = _pairs(documents, nsp_probability, max_length - 3, generator)
    return _build(examples, cls_token_id, sep_token_id, pad_token_id, pad_to=max_length)


@wrong("empty_segment")
def trims_only_b(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Keeps A whole and cuts B to the rest of the budget: B is empty when A is long."""
    budget = max_length - 3

    def trim(a, b):
        a = a[:budget]
        return a, b[: budget - len(a)]

    return _standard(
        documents,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        max_length,
        nsp_probability,
        generator,
        trim=trim,
    )


# --------------------------------------------------------------------------------------------
# correct attempts
# --------------------------------------------------------------------------------------------


@correct
def per_boundary(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """One pair per sentence boundary, tensors filled by hand."""
    if nsp_probability > 0 and len(documents) < 2:
        raise ValueError("documents: NotNext needs at least 2 documents")
    return _standard(
        documents, cls_token_id, sep_token_id, pad_token_id, max_length, nsp_probability, generator
    )


@correct
def per_boundary_pad_sequence(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Labels drawn at once, consecutive NotNext text, pad_sequence."""
    bounds = [(d, i) for d, doc in enumerate(documents) for i in range(len(doc) - 1)]
    labels = (torch.rand(len(bounds), generator=generator) < nsp_probability).long()
    ids, types = [], []
    for (d, i), label in zip(bounds, labels.tolist()):
        a = list(documents[d][i])
        if label:
            other = documents[_other_doc(len(documents), d, generator)]
            b = []
            for s in other[_randint(len(other), generator) :]:
                b += s
                if len(a) + len(b) >= max_length - 3:
                    break
        else:
            b = list(documents[d][i + 1])
        a, b = truncate_seq_pair(a, b, max_length - 3, generator=generator)
        ids.append(torch.tensor([cls_token_id, *a, sep_token_id, *b, sep_token_id]))
        types.append(torch.tensor([0] * (len(a) + 2) + [1] * (len(b) + 1)))
    input_ids = pad_sequence(ids, batch_first=True, padding_value=pad_token_id)
    return {
        "input_ids": input_ids,
        "token_type_ids": pad_sequence(types, batch_first=True, padding_value=0),
        "attention_mask": pad_sequence(
            [torch.ones(len(x), dtype=torch.long) for x in ids], batch_first=True, padding_value=0
        ),
        "next_sentence_label": labels,
    }


@correct
def google_chunks(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Google-style chunks cut at a random boundary, examples shuffled."""
    budget = max_length - 3
    examples = []
    for d, doc in enumerate(documents):
        chunk = []
        for k, sentence in enumerate(doc):
            chunk.append(list(sentence))
            if k < len(doc) - 1 and sum(map(len, chunk)) < budget:
                continue
            if len(chunk) >= 2:
                a_end = 1 + _randint(len(chunk) - 1, generator)
                a = [t for s in chunk[:a_end] for t in s]
                if _u(generator) < nsp_probability:
                    other = documents[_other_doc(len(documents), d, generator)]
                    b = [t for s in other[_randint(len(other), generator) :] for t in s]
                    label = 1
                else:
                    b, label = [t for s in chunk[a_end:] for t in s], 0
                a, b = truncate_seq_pair(a, b, budget, generator=generator)
                examples.append((a, b, label))
            chunk = []
    order = torch.randperm(len(examples), generator=generator).tolist()
    return _build([examples[k] for k in order], cls_token_id, sep_token_id, pad_token_id)


# --------------------------------------------------------------------------------------------
# first drafts and other naive versions
# --------------------------------------------------------------------------------------------


@wrong("uses_global_rng")
def draft_as_written(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
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


@wrong("uses_global_rng")
def draft_as_dict(documents, **kwargs):
    """The first draft's pairs in the exercise's dict (attention mask derived from [PAD]=0)."""
    ids, seg, labels = draft_as_written(documents, **kwargs)
    return {
        "input_ids": ids,
        "token_type_ids": seg,
        "attention_mask": (ids != 0).long(),
        "next_sentence_label": labels,
    }


@wrong("wrong_segment_ids")
def last_sep_in_segment_a(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """token_type_ids 0 on the final [SEP] (it belongs to segment 1)."""
    examples = _pairs(documents, nsp_probability, max_length - 3, generator)
    return _build(
        examples,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        segments=lambda a, b, n: [0] * (len(a) + 2) + [1] * len(b) + [0],
    )


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.pairs.make_nsp_pairs")
def the_course_make_nsp_pairs(documents, **kwargs):
    """Calls the course's own make_nsp_pairs (the lesson's setup imports it): nothing written."""
    from lmlessons import make_nsp_pairs

    out = make_nsp_pairs(documents, **kwargs)
    return {
        k: out[k] for k in ("input_ids", "token_type_ids", "attention_mask", "next_sentence_label")
    }


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(documents, **kwargs):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises import EXERCISES

    return EXERCISES["make_nsp_pairs"].solution(documents, **kwargs)

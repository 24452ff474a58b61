"""Sentence pairs ``[CLS] A [SEP] B [SEP]`` for next-sentence prediction (NSP, BERT) and
sentence-order prediction (SOP, ALBERT), as in Google BERT's ``create_pretraining_data.py``
(``create_instances_from_document``, ``truncate_seq_pair``) and google-research/albert's
(``create_instances_from_document_albert``).

Both builders run the same loop: cut each document into chunks of consecutive sentences, close
to a target length, and split every chunk at a random sentence boundary into A and B.

* NSP (:func:`make_nsp_pairs`): B is the rest of the chunk (``next_sentence_label`` 0 = IsNext)
  or, with probability ``nsp_probability``, text from a *different* document (1 = NotNext).
  Negatives from another document matter: a "random token ids" negative is not language at
  all, and a classifier can tell it apart without understanding anything.
* SOP (:func:`make_sop_pairs`; Lan et al. 2020, "ALBERT", section 4.2): a positive is the two
  segments in their order; a negative is the *same two segments swapped*. Both always come from
  one document, so the topic cannot give the answer away (NSP negatives come from another
  document, usually on another topic, which a model can spot without modelling coherence).
  ``swap_probability=1.0`` gives *only* same-document swapped pairs: the probe that shows an NSP
  model has learned topic rather than coherence.

Deliberate differences from Google's script, so that the label rate equals the probability
exactly: a chunk with a single sentence borrows the document's next sentence (Google forces a
negative there, which pushes the NotNext rate above 0.5), a lone last sentence of a document is
dropped, and the other document is drawn uniformly among the others (no 10 retries that can
end on the same document).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch

from lmlessons._checks import (
    check_generator,
    check_int,
    check_probability,
    check_token_documents,
)
from lmlessons.packing import pad

__all__ = ["truncate_seq_pair", "make_nsp_pairs", "make_sop_pairs"]

Example = tuple[list[int], list[int], int]  # (tokens_a, tokens_b, label)
Chunk = list[list[int]]  # consecutive sentences of one document


def _uniform(g: torch.Generator | None) -> float:
    return float(torch.rand((), generator=g))


def _randint(low: int, high: int, g: torch.Generator | None) -> int:
    """A random int in [low, high] (both inclusive, like Python's ``random.randint``)."""
    return int(torch.randint(low, high + 1, (), generator=g))


def _joined(sentences: Chunk) -> list[int]:
    return [t for s in sentences for t in s]


def truncate_seq_pair(
    tokens_a: Sequence[int],
    tokens_b: Sequence[int],
    max_num_tokens: int,
    *,
    generator: torch.Generator | None = None,
) -> tuple[list[int], list[int]]:
    """Trim the pair to at most ``max_num_tokens`` tokens in total, one token at a time from the
    longer side, from its front or back at random (Google's ``truncate_seq_pair``; trimming both
    ends avoids a bias towards sentence starts). Returns new lists; the inputs are not modified.
    """
    max_num_tokens = check_int("max_num_tokens", max_num_tokens, minimum=2)
    generator = check_generator(generator)
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if _uniform(generator) < 0.5:
            del longer[0]
        else:
            longer.pop()
    return a, b


def _check_pair_args(
    cls_token_id: object, sep_token_id: object, pad_token_id: object, max_length: object
) -> tuple[dict[str, int], int]:
    """The special-token ids (by name) and ``max_length`` of a pair builder, checked."""
    ids = {
        name: check_int(name, value, minimum=0)
        for name, value in (
            ("cls_token_id", cls_token_id),
            ("sep_token_id", sep_token_id),
            ("pad_token_id", pad_token_id),
        )
    }
    max_length = check_int("max_length", max_length)
    if max_length < 5:
        raise ValueError(
            "max_length must be >= 5 to fit [CLS] A [SEP] B [SEP] with one token each in A and B, "
            f"got {max_length}"
        )
    return ids, max_length


def _target_length(max_num_tokens: int, short_seq_prob: float, g: torch.Generator | None) -> int:
    """A chunk's target length: ``max_num_tokens``, or with probability ``short_seq_prob`` a
    random shorter one (Google's ``short_seq_prob``)."""
    target_len = max_num_tokens
    if _uniform(g) < short_seq_prob:
        target_len = _randint(2, max_num_tokens, g)
    return target_len


def _chunk_examples(
    docs: list[list[list[int]]],
    max_num_tokens: int,
    short_seq_prob: float,
    g: torch.Generator | None,
    take: Callable[[Chunk, int, int], tuple[Example, int]],
) -> list[Example]:
    """Google's ``create_instances_from_document`` loop over every document: gather sentences
    until the chunk reaches the document's target length (or the document ends), then
    ``take(chunk, doc_index, target_len)`` draws one example from the chunk (two or more
    sentences) and says how many of its last sentences it did not use: they are put back and
    start the next chunk (Google: ``i -= num_unused_segments``)."""
    examples: list[Example] = []
    for doc_index, doc in enumerate(docs):
        target_len = _target_length(max_num_tokens, short_seq_prob, g)
        chunk: Chunk = []
        chunk_len = 0
        i = 0
        while i < len(doc):
            chunk.append(doc[i])
            chunk_len += len(doc[i])
            if i == len(doc) - 1 or chunk_len >= target_len:
                if len(chunk) == 1:  # decided before any draw, so the label rate stays exact
                    if i + 1 == len(doc):  # a lone last sentence cannot give a pair: drop it
                        break
                    i += 1  # borrow the next sentence, so that the chunk splits into A and B
                    chunk.append(doc[i])
                example, unused = take(chunk, doc_index, target_len)
                examples.append(example)
                i -= unused
                chunk, chunk_len = [], 0
            i += 1
    return examples


def _shuffled(examples: list[Example], g: torch.Generator | None) -> list[Example]:
    """The examples in a random order (Google shuffles instances too); none at all is an error."""
    if not examples:
        raise ValueError("documents produced no pairs: give documents with at least two sentences")
    order = torch.randperm(len(examples), generator=g).tolist()
    return [examples[k] for k in order]


def _pair_batch(
    examples: list[Example], ids: dict[str, int], label_key: str
) -> dict[str, torch.Tensor]:
    """``(A, B, label)`` examples as ``[CLS] A [SEP] B [SEP]`` rows padded by
    :func:`lmlessons.packing.pad` to the longest: ``input_ids`` (padded with
    ``ids["pad_token_id"]``), ``token_type_ids`` (1 for ``B [SEP]``), ``attention_mask``
    ``(N, L)`` and the labels ``(N,)`` under ``label_key``."""
    cls_id, sep_id = ids["cls_token_id"], ids["sep_token_id"]
    rows = [[cls_id, *a, sep_id, *b, sep_id] for a, b, _ in examples]
    segments = [[0] * (len(a) + 2) + [1] * (len(b) + 1) for a, b, _ in examples]
    return {
        "input_ids": pad(rows, ids["pad_token_id"]),  # (N, L)
        "token_type_ids": pad(segments, 0),  # (N, L)
        "attention_mask": pad([[1] * len(r) for r in rows], 0),  # (N, L)
        label_key: torch.tensor([lab for _, _, lab in examples], dtype=torch.long),  # (N,)
    }


def _other_document_segment(
    docs: list[list[list[int]]], doc_index: int, target_b_len: int, g: torch.Generator | None
) -> list[int]:
    """NotNext's B: from a random sentence of another document (uniform over the others), the
    following sentences until ``target_b_len`` tokens or that document's end."""
    other = _randint(0, len(docs) - 2, g)
    other += other >= doc_index  # uniform over the *other* documents
    random_doc = docs[other]
    tokens_b: list[int] = []
    for j in range(_randint(0, len(random_doc) - 1, g), len(random_doc)):
        tokens_b.extend(random_doc[j])
        if len(tokens_b) >= target_b_len:
            break
    return tokens_b


def _nsp_example(
    chunk: Chunk,
    doc_index: int,
    target_len: int,
    *,
    docs: list[list[list[int]]],
    nsp_probability: float,
    max_num_tokens: int,
    g: torch.Generator | None,
) -> tuple[Example, int]:
    """One NSP example from a chunk, and the number of its sentences left unused."""
    is_random_next = _uniform(g) < nsp_probability
    a_end = _randint(1, len(chunk) - 1, g)  # A = chunk[:a_end], at least one sentence each
    tokens_a = _joined(chunk[:a_end])
    unused = 0
    if is_random_next:
        target_b_len = max(1, target_len - len(tokens_a))
        tokens_b = _other_document_segment(docs, doc_index, target_b_len, g)
        unused = len(chunk) - a_end  # chunk[a_end:] was not used: put it back
    else:
        tokens_b = _joined(chunk[a_end:])
    tokens_a, tokens_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, generator=g)
    return (tokens_a, tokens_b, int(is_random_next)), unused


def _sop_example(
    chunk: Chunk,
    doc_index: int,
    target_len: int,
    *,
    swap_probability: float,
    max_num_tokens: int,
    g: torch.Generator | None,
) -> tuple[Example, int]:
    """One SOP example from a chunk (it uses every sentence of the chunk)."""
    a_end = _randint(1, len(chunk) - 1, g)  # cut between sentences, >= 1 each side
    tokens_a, tokens_b = _joined(chunk[:a_end]), _joined(chunk[a_end:])
    swapped = _uniform(g) < swap_probability
    if swapped:  # ALBERT: "we just swap tokens_a and tokens_b"
        tokens_a, tokens_b = tokens_b, tokens_a
    tokens_a, tokens_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, generator=g)
    return (tokens_a, tokens_b, int(swapped)), 0


def make_nsp_pairs(
    documents: Sequence[Sequence[Sequence[int]]],
    *,
    cls_token_id: int,
    sep_token_id: int,
    pad_token_id: int,
    max_length: int,
    nsp_probability: float = 0.5,
    short_seq_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Build NSP examples ``[CLS] A [SEP] B [SEP]`` from tokenized documents.

    Args:
        documents: a list of documents, each a list of sentences, each a list of token ids.
        cls_token_id, sep_token_id, pad_token_id: from the tokenizer (never hard-coded).
        max_length: the longest example, special tokens included (BERT: 128 or 512).
        nsp_probability: chance that B comes from another document (label 1 = NotNext).
        short_seq_prob: chance of a shorter target length (Google: 0.1), so the model also sees
            short sequences at pretraining time.
        generator: a ``torch.Generator``; the same seed gives the same pairs.

    Returns a dict of LongTensors, padded with ``pad_token_id`` to the longest example:
        ``input_ids`` ``(N, L)``, ``token_type_ids`` ``(N, L)`` (0 up to and including the first
        [SEP], 1 for B and its [SEP], 0 on padding), ``attention_mask`` ``(N, L)`` and
        ``next_sentence_label`` ``(N,)`` (0 = IsNext, 1 = NotNext, as in BERT and transformers).
    """
    docs = check_token_documents("documents", documents)
    ids, max_length = _check_pair_args(cls_token_id, sep_token_id, pad_token_id, max_length)
    nsp_probability = check_probability("nsp_probability", nsp_probability)
    short_seq_prob = check_probability("short_seq_prob", short_seq_prob)
    g = check_generator(generator)
    if nsp_probability > 0 and len(docs) < 2:
        raise ValueError(
            "documents must hold at least 2 documents to draw NotNext examples from another "
            "document"
        )
    max_num_tokens = max_length - 3  # room for [CLS], [SEP], [SEP]
    take = partial(
        _nsp_example,
        docs=docs,
        nsp_probability=nsp_probability,
        max_num_tokens=max_num_tokens,
        g=g,
    )
    examples = _chunk_examples(docs, max_num_tokens, short_seq_prob, g, take)
    return _pair_batch(_shuffled(examples, g), ids, "next_sentence_label")


def make_sop_pairs(
    documents: Sequence[Sequence[Sequence[int]]],
    *,
    cls_token_id: int,
    sep_token_id: int,
    pad_token_id: int,
    max_length: int,
    swap_probability: float = 0.5,
    short_seq_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Build SOP examples ``[CLS] A [SEP] B [SEP]`` from tokenized documents.

    A chunk of consecutive sentences of one document is cut at a random sentence boundary into
    two segments; with probability ``swap_probability`` they are put in the wrong order.

    Args:
        documents: a list of documents, each a list of sentences, each a list of token ids.
            A document needs two sentences to give a pair (one document is enough in total).
        cls_token_id, sep_token_id, pad_token_id: from the tokenizer (never hard-coded).
        max_length: the longest example, special tokens included.
        swap_probability: chance that the two segments are swapped (label 1). ALBERT: 0.5.
        short_seq_prob: chance of a shorter target length (Google: 0.1).
        generator: a ``torch.Generator``; the same seed gives the same pairs.

    Returns a dict of LongTensors, padded with ``pad_token_id`` to the longest example:
        ``input_ids`` ``(N, L)``, ``token_type_ids`` ``(N, L)`` (0 for ``[CLS] A [SEP]``, 1 for
        ``B [SEP]``, 0 on padding), ``attention_mask`` ``(N, L)`` and ``sentence_order_label``
        ``(N,)`` (0 = in order, 1 = swapped: transformers' ``AlbertForPreTraining``).
    """
    docs = check_token_documents("documents", documents)
    ids, max_length = _check_pair_args(cls_token_id, sep_token_id, pad_token_id, max_length)
    swap_probability = check_probability("swap_probability", swap_probability)
    short_seq_prob = check_probability("short_seq_prob", short_seq_prob)
    g = check_generator(generator)
    max_num_tokens = max_length - 3  # room for [CLS], [SEP], [SEP]
    take = partial(
        _sop_example, swap_probability=swap_probability, max_num_tokens=max_num_tokens, g=g
    )
    examples = _chunk_examples(docs, max_num_tokens, short_seq_prob, g, take)
    return _pair_batch(_shuffled(examples, g), ids, "sentence_order_label")

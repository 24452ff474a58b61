"""Batches for each training objective, built from documents and a tokenizer, seeded.

* :func:`mlm_batches`: packed ``[CLS] sentences... [SEP]`` sequences, masked afresh each time
  with :func:`lmlessons.mask_tokens` (RoBERTa's *dynamic* masking; BERT masked once, offline).
* :func:`nsp_batches`: ``[CLS] A [SEP] B [SEP]`` pairs from :func:`lmlessons.make_nsp_pairs`
  (new pairs every epoch), then masked: the inputs of ``BertForPreTraining``.
* :func:`sop_batches`: the same with ALBERT's sentence-order pairs
  (:func:`lmlessons.make_sop_pairs`), for the same BERT pair head.
* :func:`clm_batches`: packed sequences with ``labels = input_ids.clone()`` and -100 on padding.
  The labels are *not* shifted: the model (or :func:`lmlessons.clm_loss`) shifts them.

Every function takes ``generator=`` (a ``torch.Generator``): the same seed gives the same
batches, in the same order, on every machine. The defaults (16 sequences of at most 64 tokens)
are sized for live runs of tiny models on a laptop CPU; BERT itself used 256 x 128, then 512.
``epochs=None`` repeats forever (for training with a step or time budget); ``epochs=1`` makes
one pass (for evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import torch

from lmlessons._checks import (
    check_generator,
    check_int,
    check_probability,
    check_replace_probs,
    check_token_documents,
    check_tokenizer,
)
from lmlessons.collator import special_token_ids
from lmlessons.course.corpus import Corpus
from lmlessons.masking import mask_tokens
from lmlessons.packing import pad_documents
from lmlessons.pairs import make_nsp_pairs, make_sop_pairs

__all__ = [
    "tokenize_documents",
    "pack_sequences",
    "mlm_batches",
    "nsp_batches",
    "sop_batches",
    "clm_batches",
    "pair_token_ids",
    "row_batches",
]

Batch = dict[str, torch.Tensor]
Row = TypeVar("Row")
MaskProbs = tuple[float, float, float]  # (mlm_probability, mask_replace_prob, random_replace_prob)


def _documents(documents: object) -> list[list[str]]:
    if isinstance(documents, Corpus):
        return documents.train
    if not isinstance(documents, Sequence) or isinstance(documents, (str, bytes)):
        raise TypeError(
            "documents must be a Corpus or a list of documents (lists of sentence strings), "
            f"got {type(documents).__name__}"
        )
    if len(documents) == 0:
        raise ValueError("documents must not be empty")
    for i, doc in enumerate(documents):
        if isinstance(doc, str) or not isinstance(doc, Sequence):
            raise TypeError(
                f"documents[{i}] must be a list of sentence strings, got {type(doc).__name__} "
                "(wrap a single text as [[text]])"
            )
        for j, s in enumerate(doc):
            if not isinstance(s, str):
                raise TypeError(f"documents[{i}][{j}] must be a str, got {type(s).__name__}")
    return [list(doc) for doc in documents]


def tokenize_documents(
    documents: Corpus | Sequence[Sequence[str]], tokenizer: Any
) -> list[list[list[int]]]:
    """Token ids of every sentence (no special tokens), keeping the document structure.
    Sentences that tokenize to nothing are dropped, and then documents left empty."""
    docs = _documents(documents)
    check_tokenizer(tokenizer)
    flat = [s for doc in docs for s in doc]
    ids = tokenizer(flat, add_special_tokens=False)["input_ids"] if flat else []
    out, k = [], 0
    for doc in docs:
        sents = [ids[k + j] for j in range(len(doc)) if ids[k + j]]
        k += len(doc)
        if sents:
            out.append(sents)
    if not out:
        raise ValueError("documents hold no text the tokenizer turns into tokens")
    return out


def pack_sequences(
    token_documents: Sequence[Sequence[Sequence[int]]],
    *,
    max_length: int,
    cls_token_id: int,
    sep_token_id: int,
) -> list[list[int]]:
    """Pack consecutive sentences of each document into ``[CLS] ... [SEP]`` sequences of at most
    ``max_length`` tokens (RoBERTa's DOC-SENTENCES packing: a sequence never crosses a document
    boundary). A sentence longer than the room left is cut into pieces."""
    max_length = check_int("max_length", max_length, minimum=3)
    room = max_length - 2
    sequences: list[list[int]] = []
    for doc in token_documents:
        current: list[int] = []
        for sent in doc:
            sent = list(sent)
            if current and len(current) + len(sent) > room:
                sequences.append(current)
                current = []
            while len(sent) > room:  # an over-long sentence fills whole sequences by itself
                sequences.append(sent[:room])
                sent = sent[room:]
            current.extend(sent)
        if current:
            sequences.append(current)
    return [[cls_token_id, *seq, sep_token_id] for seq in sequences]


def _check_common(
    batch_size: object, max_length: object, epochs: object, generator: object
) -> tuple[int, int, int | None]:
    batch_size = check_int("batch_size", batch_size, minimum=1)
    max_length = check_int("max_length", max_length, minimum=5)
    if epochs is not None:
        epochs = check_int("epochs", epochs, minimum=1)
    check_generator(generator)
    return batch_size, max_length, epochs


def _check_mask_probs(
    mlm_probability: object, mask_replace_prob: object, random_replace_prob: object
) -> MaskProbs:
    """``(mlm_probability, mask_replace_prob, random_replace_prob)``, checked."""
    p = check_probability("mlm_probability", mlm_probability)
    return (p, *check_replace_probs(mask_replace_prob, random_replace_prob))


def _epochs(epochs: int | None) -> Iterator[int]:
    e = 0
    while epochs is None or e < epochs:
        yield e
        e += 1


def row_batches(
    rows: Sequence[Row],
    batch_size: int,
    generator: torch.Generator | None,
    *,
    epochs: int | None = None,
    drop_last: bool = True,
) -> Iterator[list[Row]]:
    """Batches of ``batch_size`` of ``rows``, in a new random order every pass (a
    ``torch.randperm`` from ``generator``): endless with ``epochs=None``, else ``epochs`` passes.
    ``drop_last``: a pass's incomplete last batch is dropped (every batch has ``batch_size``
    rows); else it is yielded, smaller."""
    batch_size = check_int("batch_size", batch_size, minimum=1)
    generator = check_generator(generator)
    if drop_last and len(rows) < batch_size:
        raise ValueError(f"rows must hold at least batch_size={batch_size} rows, got {len(rows)}")
    last = len(rows) - batch_size + 1 if drop_last else len(rows)
    for _ in _epochs(epochs):
        order = torch.randperm(len(rows), generator=generator).tolist()
        for start in range(0, last, batch_size):
            yield [rows[i] for i in order[start : start + batch_size]]


def _packed(
    documents: Corpus | Sequence[Sequence[str]], tokenizer: Any, max_length: int
) -> list[list[int]]:
    """The documents tokenized and packed into ``[CLS] ... [SEP]`` sequences."""
    return pack_sequences(
        tokenize_documents(documents, tokenizer),
        max_length=max_length,
        cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id,
    )


def _shuffled_batches(
    sequences: list[list[int]],
    batch_size: int,
    pad_token_id: int,
    epochs: int | None,
    generator: torch.Generator | None,
    make_batch: Callable[[Batch], Batch],
) -> Iterator[Batch]:
    """``make_batch`` of every ``batch_size`` sequences padded by
    :func:`lmlessons.packing.pad_documents` (``input_ids``, ``attention_mask`` and ``labels``,
    ``(B, T)`` each), in a new random order every epoch."""
    for rows in row_batches(sequences, batch_size, generator, epochs=epochs, drop_last=False):
        yield make_batch(pad_documents(rows, pad_token_id=pad_token_id))


def _pair_rows(pairs: Batch, batch_size: int) -> Iterator[tuple[slice, Batch]]:
    """Consecutive ``batch_size`` rows of padded pairs (``make_nsp_pairs`` / ``make_sop_pairs``):
    yields ``(rows, batch)``, ``batch`` holding ``input_ids``, ``token_type_ids`` and
    ``attention_mask`` of those rows with the padding they all share trimmed off."""
    n = pairs["input_ids"].shape[0]
    for start in range(0, n, batch_size):
        rows = slice(start, start + batch_size)
        width = int(pairs["attention_mask"][rows].sum(dim=1).max())  # trim shared padding
        yield (
            rows,
            {k: pairs[k][rows, :width] for k in ("input_ids", "token_type_ids", "attention_mask")},
        )


def _mask(
    batch: Batch, tokenizer: Any, special_ids: torch.Tensor, p: MaskProbs, g: torch.Generator | None
) -> Batch:
    # (B, T): [CLS], [SEP], [PAD], ... are never selected
    special = torch.isin(batch["input_ids"], special_ids)
    masked, labels = mask_tokens(
        batch["input_ids"],
        mask_token_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        special_tokens_mask=special,
        mlm_probability=p[0],
        mask_replace_prob=p[1],
        random_replace_prob=p[2],
        generator=g,
    )
    return {**batch, "input_ids": masked, "labels": labels}


def pair_token_ids(tokenizer: Any) -> dict[str, int]:
    """The tokenizer's ``cls_token_id``, ``sep_token_id`` and ``pad_token_id``: the ids
    :func:`lmlessons.make_nsp_pairs` and :func:`lmlessons.make_sop_pairs` take, by those names."""
    return {
        "cls_token_id": tokenizer.cls_token_id,
        "sep_token_id": tokenizer.sep_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _pair_maker(
    make_pairs: Callable[..., Batch],
    token_documents: list[list[list[int]]],
    tokenizer: Any,
    max_length: int,
    generator: torch.Generator | None,
    **probability: float,
) -> Callable[[], Batch]:
    """``make_pairs`` (``make_nsp_pairs`` / ``make_sop_pairs``) on ``token_documents`` with the
    tokenizer's [CLS], [SEP] and [PAD] ids: new pairs at every call."""
    return partial(
        make_pairs,
        token_documents,
        **pair_token_ids(tokenizer),
        max_length=max_length,
        generator=generator,
        **probability,
    )


def _masked_pair_batches(
    make_pairs: Callable[[], Batch],
    label_keys: dict[str, str],
    tokenizer: Any,
    batch_size: int,
    probs: MaskProbs,
    epochs: int | None,
    generator: torch.Generator | None,
) -> Iterator[Batch]:
    """Every epoch new pairs from ``make_pairs()``, cut into batches of ``batch_size`` rows and
    masked. ``label_keys`` maps each batch key to the key of the pair labels it copies."""
    special_ids = special_token_ids(tokenizer)
    for _ in _epochs(epochs):
        pairs = make_pairs()
        for rows, batch in _pair_rows(pairs, batch_size):
            for key, pair_key in label_keys.items():
                batch[key] = pairs[pair_key][rows]  # (B,)
            yield _mask(batch, tokenizer, special_ids, probs, generator)


def mlm_batches(
    documents: Corpus | Sequence[Sequence[str]],
    tokenizer: Any,
    *,
    batch_size: int = 16,
    max_length: int = 64,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    epochs: int | None = None,
    generator: torch.Generator | None = None,
) -> Iterator[Batch]:
    """Masked-LM batches: ``input_ids``, ``token_type_ids`` (zeros), ``attention_mask`` and
    ``labels`` (original id where selected, -100 elsewhere), each ``(B, T)``.

    ``documents``: a :class:`~lmlessons.course.corpus.Corpus` (its training split) or a list of
    documents (lists of sentences). Sequences are shuffled every epoch and re-masked every time.
    """
    batch_size, max_length, epochs = _check_common(batch_size, max_length, epochs, generator)
    probs = _check_mask_probs(mlm_probability, mask_replace_prob, random_replace_prob)
    check_tokenizer(tokenizer)
    sequences = _packed(documents, tokenizer, max_length)
    special_ids = special_token_ids(tokenizer)

    def masked(padded: Batch) -> Batch:
        batch = {
            "input_ids": padded["input_ids"],  # (B, T)
            "token_type_ids": torch.zeros_like(padded["input_ids"]),  # (B, T)
            "attention_mask": padded["attention_mask"],  # (B, T)
        }
        return _mask(batch, tokenizer, special_ids, probs, generator)

    pad = tokenizer.pad_token_id
    return _shuffled_batches(sequences, batch_size, pad, epochs, generator, masked)


def nsp_batches(
    documents: Corpus | Sequence[Sequence[str]],
    tokenizer: Any,
    *,
    batch_size: int = 16,
    max_length: int = 64,
    nsp_probability: float = 0.5,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    epochs: int | None = None,
    generator: torch.Generator | None = None,
) -> Iterator[Batch]:
    """BERT pretraining batches (MLM + NSP): ``input_ids`` (masked), ``token_type_ids`` (0 for
    ``[CLS] A [SEP]``, 1 for ``B [SEP]``), ``attention_mask``, ``labels`` ``(B, T)`` and
    ``next_sentence_label`` ``(B,)`` (0 = IsNext, 1 = NotNext). Each epoch draws new pairs.
    With ``mlm_probability=0`` nothing is masked (NSP only; ``labels`` are all -100)."""
    batch_size, max_length, epochs = _check_common(batch_size, max_length, epochs, generator)
    probs = _check_mask_probs(mlm_probability, mask_replace_prob, random_replace_prob)
    nsp_probability = check_probability("nsp_probability", nsp_probability)
    check_tokenizer(tokenizer)
    token_docs = tokenize_documents(documents, tokenizer)
    if len(token_docs) < 2:
        raise ValueError(
            "NSP needs at least 2 documents (NotNext segments come from another document)"
        )

    make_pairs = _pair_maker(
        make_nsp_pairs,
        token_docs,
        tokenizer,
        max_length,
        generator,
        nsp_probability=nsp_probability,
    )
    labels = {"next_sentence_label": "next_sentence_label"}
    return _masked_pair_batches(make_pairs, labels, tokenizer, batch_size, probs, epochs, generator)


def sop_batches(
    token_documents: Sequence[Sequence[Sequence[int]]],
    tokenizer: Any,
    *,
    batch_size: int = 32,
    max_length: int = 128,
    swap_probability: float = 0.5,
    mlm_probability: float = 0.15,
    epochs: int | None = None,
    generator: torch.Generator | None = None,
) -> Iterator[Batch]:
    """ALBERT-style pretraining batches (MLM + SOP), new pairs every epoch.

    Args:
        token_documents: tokenized documents (:func:`tokenize_documents`).
        tokenizer: gives the special-token ids, ``len(tokenizer)`` and ``all_special_ids``.
        mlm_probability: 0 gives SOP-only batches (``labels`` all -100). Selected tokens are
            replaced 80 / 10 / 10 ([MASK] / random / kept), as in BERT.
        epochs: None repeats forever (train with a step budget); 1 makes one pass (evaluate).

    Yields dicts with ``input_ids`` (masked), ``token_type_ids``, ``attention_mask``,
    ``sentence_order_label`` ``(B,)`` and the same tensor as ``next_sentence_label``, and
    ``labels`` ``(B, T)``: so ``BertForPreTraining``'s pair head (``cls.seq_relationship``, a
    linear layer on the pooled [CLS], which is what ALBERT's ``AlbertSOPHead`` is),
    :func:`lmlessons.course.training.train` and :func:`lmlessons.course.training.evaluate` learn
    and score SOP unchanged (0 = in order, 1 = swapped).
    """
    batch_size, max_length, epochs = _check_common(batch_size, max_length, epochs, generator)
    probs = _check_mask_probs(mlm_probability, 0.8, 0.1)
    swap_probability = check_probability("swap_probability", swap_probability)
    check_tokenizer(tokenizer)
    docs = check_token_documents("token_documents", token_documents)
    if not any(len(doc) >= 2 for doc in docs):  # fail now, not at the first next()
        raise ValueError(
            "token_documents produced no pairs: give documents with at least two sentences"
        )

    make_pairs = _pair_maker(
        make_sop_pairs, docs, tokenizer, max_length, generator, swap_probability=swap_probability
    )
    # the BERT pair head reads next_sentence_label: give it the sentence-order label
    labels = {
        "sentence_order_label": "sentence_order_label",
        "next_sentence_label": "sentence_order_label",
    }
    return _masked_pair_batches(make_pairs, labels, tokenizer, batch_size, probs, epochs, generator)


def _clm_batch(padded: Batch) -> Batch:
    """The padded batch as it is: ``labels`` are already the ids with -100 on padding."""
    return padded


def clm_batches(
    documents: Corpus | Sequence[Sequence[str]],
    tokenizer: Any,
    *,
    batch_size: int = 16,
    max_length: int = 64,
    epochs: int | None = None,
    generator: torch.Generator | None = None,
) -> Iterator[Batch]:
    """Causal-LM batches: ``input_ids``, ``attention_mask`` and ``labels = input_ids.clone()``
    with -100 on padding, each ``(B, T)``. Not shifted (the model shifts). No
    ``token_type_ids``: GPT-2 would add them as extra token embeddings."""
    batch_size, max_length, epochs = _check_common(batch_size, max_length, epochs, generator)
    check_tokenizer(tokenizer)
    sequences = _packed(documents, tokenizer, max_length)
    pad = tokenizer.pad_token_id
    return _shuffled_batches(sequences, batch_size, pad, epochs, generator, _clm_batch)

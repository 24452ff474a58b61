"""Sentence-order prediction (SOP), ALBERT's replacement for next-sentence prediction.

Lan et al. 2020, "ALBERT: A Lite BERT for Self-supervised Learning of Language Representations",
section 4.2, and ``create_instances_from_document_albert`` in google-research/albert's
``create_pretraining_data.py``: a positive is two *consecutive* segments of one document in
their order; a negative is the *same two segments swapped*. Both segments always come from the
same document, so the topic cannot give the answer away (NSP negatives come from another
document, usually on another topic, which a model can spot without modelling coherence).

:func:`make_sop_pairs` follows the conventions of :func:`lmlessons.make_nsp_pairs` (same
chunking, ``short_seq_prob``, :func:`lmlessons.truncate_seq_pair`, shuffling, padding, and the
same deliberate differences from Google's script, so the swap rate is exactly
``swap_probability``). Its label is transformers' ``sentence_order_label`` of
``AlbertForPreTraining``: 0 = original order (A, then B), 1 = swapped (B, then A).

``make_sop_pairs(..., swap_probability=1.0)`` gives *only* same-document swapped-order pairs:
the probe that shows an NSP model has learned topic rather than coherence.

:func:`sop_batches` turns pairs into training batches for ``BertForPreTraining`` and
:func:`lmlessons.train`: the sentence-order label is also given as ``next_sentence_label``, so the
BERT pair head (``cls.seq_relationship``, a linear layer on the pooled [CLS]) learns SOP instead
of NSP, which is what ALBERT's ``AlbertSOPHead`` is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from lmlessons._checks import check_generator, check_int, check_probability
from lmlessons.course.batches import _pair_rows, _special_ids
from lmlessons.masking import mask_tokens
from lmlessons.pairs import (
    _check_documents,
    _check_pair_args,
    _pad_pairs,
    _randint,
    _shuffled,
    _target_length,
    _uniform,
    truncate_seq_pair,
)

__all__ = ["make_sop_pairs", "sop_batches"]


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
        ``(N,)`` (0 = in order, 1 = swapped, as ``AlbertForPreTraining``).
    """
    docs = _check_documents(documents)
    ids, max_length = _check_pair_args(cls_token_id, sep_token_id, pad_token_id, max_length)
    swap_probability = check_probability("swap_probability", swap_probability)
    short_seq_prob = check_probability("short_seq_prob", short_seq_prob)
    g = check_generator(generator)

    max_num_tokens = max_length - 3  # room for [CLS], [SEP], [SEP]
    examples: list[tuple[list[int], list[int], int]] = []
    for doc in docs:
        target_len = _target_length(max_num_tokens, short_seq_prob, g)
        chunk: list[list[int]] = []
        chunk_len = 0
        i = 0
        while i < len(doc):
            chunk.append(doc[i])
            chunk_len += len(doc[i])
            if i == len(doc) - 1 or chunk_len >= target_len:
                if len(chunk) == 1:  # two segments are needed: borrow the next sentence
                    if i + 1 < len(doc):
                        i += 1
                        chunk.append(doc[i])
                    else:  # a lone last sentence has no neighbour in this chunk: drop it
                        chunk, chunk_len = [], 0
                        i += 1
                        continue
                a_end = _randint(1, len(chunk) - 1, g)  # cut between sentences, >= 1 each side
                tokens_a = [t for s in chunk[:a_end] for t in s]
                tokens_b = [t for s in chunk[a_end:] for t in s]
                swapped = _uniform(g) < swap_probability
                if swapped:  # ALBERT: "we just swap tokens_a and tokens_b"
                    tokens_a, tokens_b = tokens_b, tokens_a
                tokens_a, tokens_b = truncate_seq_pair(
                    tokens_a, tokens_b, max_num_tokens, generator=g
                )
                examples.append((tokens_a, tokens_b, int(swapped)))
                chunk, chunk_len = [], 0
            i += 1

    return _pad_pairs(_shuffled(examples, g), ids, "sentence_order_label")


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
) -> Iterator[dict[str, torch.Tensor]]:
    """ALBERT-style pretraining batches (MLM + SOP), new pairs every epoch.

    Args:
        token_documents: tokenized documents (``lmlessons.course.batches.tokenize_documents``).
        tokenizer: gives the special-token ids, ``len(tokenizer)`` and ``all_special_ids``.
        mlm_probability: 0 gives SOP-only batches (``labels`` all -100). Selected tokens are
            replaced 80 / 10 / 10 ([MASK] / random / kept), as in BERT.
        epochs: None repeats forever (train with a step budget); 1 makes one pass (evaluate).

    Yields dicts with ``input_ids`` (masked), ``token_type_ids``, ``attention_mask``, ``labels``
    ``(B, T)``, ``sentence_order_label`` ``(B,)`` and the same tensor as ``next_sentence_label``,
    so ``BertForPreTraining``'s pair head, :func:`lmlessons.course.training.train` and
    :func:`lmlessons.course.training.evaluate` work unchanged (0 = in order, 1 = swapped).
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    if epochs is not None:
        epochs = check_int("epochs", epochs, minimum=1)
    mlm_probability = check_probability("mlm_probability", mlm_probability)
    check_generator(generator)
    for attr in (
        "pad_token_id",
        "cls_token_id",
        "sep_token_id",
        "mask_token_id",
        "all_special_ids",
    ):
        if getattr(tokenizer, attr, None) is None:
            raise ValueError(
                f"tokenizer must define {attr} (a BERT-style tokenizer, e.g. lmlessons.course.tokenizer.load_tokenizer())"
            )
    docs = _check_documents(token_documents)
    special_ids = _special_ids(tokenizer)
    # fail now, not at the first next(): the pair arguments and "some document has 2 sentences"
    max_length = check_int("max_length", max_length)
    if max_length < 5:
        raise ValueError(f"max_length must be >= 5 to fit [CLS] A [SEP] B [SEP], got {max_length}")
    swap_probability = check_probability("swap_probability", swap_probability)
    if not any(len(doc) >= 2 for doc in docs):
        raise ValueError(
            "token_documents produced no pairs: give documents with at least two sentences"
        )

    def batches() -> Iterator[dict[str, torch.Tensor]]:
        epoch = 0
        while epochs is None or epoch < epochs:
            epoch += 1
            pairs = make_sop_pairs(
                docs,
                cls_token_id=tokenizer.cls_token_id,
                sep_token_id=tokenizer.sep_token_id,
                pad_token_id=tokenizer.pad_token_id,
                max_length=max_length,
                swap_probability=swap_probability,
                generator=generator,
            )
            for rows, batch in _pair_rows(pairs, batch_size):
                special = torch.isin(batch["input_ids"], special_ids)  # (B, T) never selected
                batch["input_ids"], batch["labels"] = mask_tokens(
                    batch["input_ids"],
                    mask_token_id=tokenizer.mask_token_id,
                    vocab_size=len(tokenizer),
                    special_tokens_mask=special,
                    mlm_probability=mlm_probability,
                    generator=generator,
                )
                label = pairs["sentence_order_label"][rows]
                batch["sentence_order_label"] = label
                batch["next_sentence_label"] = label
                yield batch

    return batches()

"""Shared by the masking tests (test_masking.py, test_masking_variants.py): random id batches
for hypothesis strategies, a binomial tolerance and a BERT tokenizer built in memory from a
vocabulary (no downloads)."""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st
from tokenizers import Tokenizer, processors

from lmlessons.course.tokenizer import wrap_tokenizer


def draw_ids(draw, vocab: int, min_length: int, max_length: int):
    """For a hypothesis strategy: ``(ids, special, seed, generator)``, ``ids`` a ``(B, T)`` batch
    of ids in ``[5, vocab)`` (1 to 4 rows, ``min_length`` to ``max_length`` columns) drawn with
    ``generator`` (seeded ``seed``, which goes on drawing), ``special`` all False."""
    b = draw(st.integers(1, 4))
    t = draw(st.integers(min_length, max_length))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (b, t), generator=g)
    return ids, torch.zeros(b, t, dtype=torch.bool), seed, g


def binomial_ok(k: int, n: int, p: float, z: float = 5.0) -> bool:
    """Is ``k`` successes out of ``n`` within ``z`` standard deviations (plus one) of ``n p``?"""
    return abs(k - n * p) <= z * math.sqrt(n * p * (1 - p)) + 1


def bert_tokenizer(model, pre_tokenizer):
    """A transformers BERT tokenizer on ``model`` (a ``tokenizers`` model whose vocabulary holds
    [PAD] [UNK] [CLS] [SEP] [MASK]), with BERT's ``[CLS] A [SEP] B [SEP]`` template."""
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizer
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    return wrap_tokenizer(tok)

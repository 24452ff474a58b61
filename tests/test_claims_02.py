"""Behaviour tests of the claims lesson 02 makes about transformers (ledger: docs/claims.md).

Tiny models from configs (no downloads), seeded; each claim is checked by calling the library
and comparing numbers, never by reading its source.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from transformers import BertForMaskedLM, ModernBertForMaskedLM
from transformers.loss.loss_utils import ForCausalLMLoss, ForMaskedLMLoss

from lmlessons import mlm_loss
from lmlessons.course.models import tiny_bert_mlm
from lmlessons.course.tokenizer import load_tokenizer
from tests._tiny import VOCAB, bert_config, modernbert_config, seeded


def _batch(seed: int = 0, rows: int = 3, length: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids (B, T) and labels (B, T) with a few targets per row, -100 elsewhere."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (rows, length), generator=g)
    selected = torch.rand(rows, length, generator=g) < 0.3
    selected[:, 1] = True  # at least one target per row
    return ids, ids.masked_fill(~selected, -100)


def _bert_mlm_loss_and_logits(labels_like=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids, labels = _batch()
    if labels_like is not None:
        labels = labels_like(labels)
    model = seeded(BertForMaskedLM, bert_config())
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    return out.loss, out.logits, labels


def _modern_bert() -> ModernBertForMaskedLM:
    return seeded(ModernBertForMaskedLM, modernbert_config())


def test_claim_02_untrained_bert_mlm() -> None:
    tokenizer = load_tokenizer()
    model = tiny_bert_mlm(tokenizer, seed=0)
    assert type(model) is BertForMaskedLM
    ids = tokenizer(["the dog chased the ball ."], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss
    assert abs(loss.item() - math.log(len(tokenizer))) < 0.5  # random weights: about ln V


def test_claim_02_bert_mlm_is_crossentropyloss() -> None:
    loss, logits, labels = _bert_mlm_loss_and_logits()
    plain = torch.nn.CrossEntropyLoss()(logits.reshape(-1, VOCAB), labels.reshape(-1))
    assert torch.allclose(loss, plain, atol=1e-6)
    empty, _, _ = _bert_mlm_loss_and_logits(lambda y: torch.full_like(y, -100))
    assert torch.isnan(empty)  # a plain mean over zero targets


def test_claim_02_modernbert_loss_function() -> None:
    model = _modern_bert()
    assert model.loss_function is ForMaskedLMLoss
    ids, labels = _batch(seed=1)
    with torch.no_grad():
        mean = model(input_ids=ids, labels=labels)
        share = model(input_ids=ids, labels=labels, num_items_in_batch=40)
    flat = mean.logits.reshape(-1, VOCAB), labels.reshape(-1)
    assert torch.allclose(mean.loss, F.cross_entropy(*flat), atol=1e-5)
    assert torch.allclose(share.loss, F.cross_entropy(*flat, reduction="sum") / 40, atol=1e-5)


def test_claim_02_num_items_fix() -> None:
    ids, labels = _batch(seed=2, rows=4)
    logits = torch.randn(4, ids.shape[1], VOCAB, generator=torch.Generator().manual_seed(3))
    total = int((labels != -100).sum())
    for loss_fn in (ForMaskedLMLoss, ForCausalLMLoss):
        parts = [
            loss_fn(logits[i : i + 2], labels[i : i + 2], VOCAB, num_items_in_batch=total)
            for i in (0, 2)
        ]
        whole = loss_fn(logits, labels, VOCAB, num_items_in_batch=total)
        assert torch.allclose(sum(parts), whole, atol=1e-5)
    masked = ForMaskedLMLoss(logits, labels, VOCAB, num_items_in_batch=total)
    assert torch.allclose(masked, mlm_loss(logits, labels), atol=1e-5)  # sum / all targets

"""Oracle tests: lmlessons' losses equal transformers' on tiny random models (to 1e-5)."""

from __future__ import annotations

import pytest
import torch
from _tiny import VOCAB, bert_config, gpt2_config, seeded
from transformers import (
    BertForMaskedLM,
    BertForPreTraining,
    BertLMHeadModel,
    GPT2LMHeadModel,
)
from transformers.loss.loss_utils import ForCausalLMLoss, ForMaskedLMLoss

from lmlessons import bert_pretraining_loss, clm_loss, mask_tokens, mlm_loss, nsp_loss, shift_labels

B, T = 3, 11
MASK_ID, PAD_ID = 4, 0


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, VOCAB, (B, T), generator=g)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    input_ids[1, -3:] = PAD_ID  # a padded row
    attention_mask[1, -3:] = 0
    return input_ids, attention_mask, g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mlm_loss_equals_bert_for_masked_lm(seed):
    input_ids, attention_mask, g = _batch(seed)
    special = input_ids == PAD_ID
    masked, labels = mask_tokens(
        input_ids,
        mask_token_id=MASK_ID,
        vocab_size=VOCAB,
        special_tokens_mask=special,
        mlm_probability=0.3,
        generator=g,
    )
    assert (labels != -100).any()
    model = seeded(BertForMaskedLM, bert_config(), seed)
    with torch.no_grad():
        out = model(input_ids=masked, attention_mask=attention_mask, labels=labels)
    ours = mlm_loss(out.logits, labels)
    torch.testing.assert_close(ours, out.loss, atol=1e-5, rtol=1e-5)
    ref = ForMaskedLMLoss(out.logits, labels, VOCAB)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "model_cls,config",
    [
        (BertLMHeadModel, bert_config(is_decoder=True)),
        (GPT2LMHeadModel, gpt2_config()),
    ],
)
def test_clm_loss_equals_causal_models(model_cls, config):
    input_ids, attention_mask, _ = _batch(3)
    labels = input_ids.clone()
    labels[attention_mask == 0] = -100  # never learn padding
    model = seeded(model_cls, config, 0)
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(clm_loss(out.logits, labels), out.loss, atol=1e-5, rtol=1e-5)


def test_clm_loss_is_not_the_unshifted_or_double_shifted_loss():
    """The shift matters: the loss with labels as they are, or shifted twice, differs."""
    input_ids, attention_mask, _ = _batch(4)
    labels = input_ids.clone()
    labels[attention_mask == 0] = -100
    model = seeded(GPT2LMHeadModel, gpt2_config(), 1)
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    assert not torch.allclose(mlm_loss(out.logits, labels), out.loss, atol=1e-4)
    assert not torch.allclose(clm_loss(out.logits, shift_labels(labels)), out.loss, atol=1e-4)


@pytest.mark.parametrize("micro", [[1, 2], [2, 1], [1, 1, 1]])
def test_clm_num_items_in_batch_equals_for_causal_lm_loss_and_full_batch(micro):
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(3, 9, VOCAB, generator=g)
    labels = torch.randint(0, VOCAB, (3, 9), generator=g)
    labels[0, 5:] = -100
    labels[2, 2:] = -100  # rows of very different lengths
    n_total = int((shift_labels(labels) != -100).sum())
    full = clm_loss(logits, labels)
    parts, start = [], 0
    for size in micro:
        sl = slice(start, start + size)
        start += size
        ours = clm_loss(logits[sl], labels[sl], num_items_in_batch=n_total)
        ref = ForCausalLMLoss(
            logits[sl], labels[sl], VOCAB, num_items_in_batch=torch.tensor(n_total)
        )
        torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)
        parts.append(ours)
    torch.testing.assert_close(sum(parts), full, atol=1e-6, rtol=1e-5)
    # and the buggy mean of per-micro-batch means does not equal the full batch here
    means, start = [], 0
    for size in micro:
        means.append(clm_loss(logits[start : start + size], labels[start : start + size]))
        start += size
    assert not torch.allclose(torch.stack(means).mean(), full, atol=1e-4)


def test_bert_pretraining_loss_equals_bert_for_pretraining():
    input_ids, attention_mask, g = _batch(5)
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 5:] = 1
    masked, labels = mask_tokens(
        input_ids,
        mask_token_id=MASK_ID,
        vocab_size=VOCAB,
        special_tokens_mask=input_ids == PAD_ID,
        generator=g,
    )
    labels[0, 2] = input_ids[0, 2]  # at least one target
    nsp = torch.tensor([0, 1, 0])
    model = seeded(BertForPreTraining, bert_config(), 0)
    with torch.no_grad():
        out = model(
            input_ids=masked,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            labels=labels,
            next_sentence_label=nsp,
        )
    ours = bert_pretraining_loss(out.prediction_logits, out.seq_relationship_logits, labels, nsp)
    torch.testing.assert_close(ours, out.loss, atol=1e-5, rtol=1e-5)
    parts = mlm_loss(out.prediction_logits, labels) + nsp_loss(out.seq_relationship_logits, nsp)
    torch.testing.assert_close(ours, parts, atol=1e-6, rtol=1e-6)
    weighted = bert_pretraining_loss(
        out.prediction_logits,
        out.seq_relationship_logits,
        labels,
        nsp,
        mlm_weight=0.5,
        nsp_weight=2.0,
    )
    expected = 0.5 * mlm_loss(out.prediction_logits, labels) + 2.0 * nsp_loss(
        out.seq_relationship_logits, nsp
    )
    torch.testing.assert_close(weighted, expected, atol=1e-6, rtol=1e-6)

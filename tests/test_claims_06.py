"""Behaviour tests of the claims lesson 06 makes about transformers (ledger: docs/claims.md).

Tiny models from configs (no downloads), seeded; each claim is checked by calling the library
and comparing numbers, never by reading its source.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import (
    BertForPreTraining,
    BertModel,
    ElectraConfig,
    ElectraForPreTraining,
)
from transformers.models.bert.modeling_bert import BertPooler, BertPreTrainingHeads

from lmlessons.course.checkpoints import checkpoint_metrics, load_checkpoint
from lmlessons.course.models import tiny_bert_pretraining
from lmlessons.course.tokenizer import load_tokenizer
from tests._tiny import VOCAB, bert_config, seeded


def _pretraining_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """input_ids, token_type_ids, attention_mask (B, T); labels (B, T); next_sentence_label (B,)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (4, 12), generator=g)
    selected = torch.rand(4, 12, generator=g) < 0.3
    selected[:, 2] = True
    attention_mask = torch.ones_like(ids)
    attention_mask[0, 9:] = 0
    return {
        "input_ids": ids,
        "token_type_ids": (torch.arange(12) >= 6).long().expand(4, 12),
        "attention_mask": attention_mask,
        "labels": ids.masked_fill(~selected | (attention_mask == 0), -100),
        "next_sentence_label": torch.tensor([0, 1, 1, 0]),
    }


def _inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}


def _pretraining_out() -> tuple[object, dict[str, torch.Tensor]]:
    batch = _pretraining_batch()
    model = seeded(BertForPreTraining, bert_config())
    with torch.no_grad():
        out = model(**batch)
    return out, batch


def _electra() -> ElectraForPreTraining:
    config = ElectraConfig(
        vocab_size=VOCAB,
        embedding_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    return seeded(ElectraForPreTraining, config)


def test_claim_06_two_crossentropy_losses_added() -> None:
    """The MLM mean weighs each masked token 1 / (masked tokens), the NSP mean each pair 1 / B:
    here the two counts differ, so another weighting would give another number."""
    out, batch = _pretraining_out()
    ce = torch.nn.CrossEntropyLoss()
    mlm = ce(out.prediction_logits.reshape(-1, VOCAB), batch["labels"].reshape(-1))
    nsp = ce(out.seq_relationship_logits, batch["next_sentence_label"])
    assert torch.allclose(out.loss, mlm + nsp, atol=1e-5)
    assert int((batch["labels"] != -100).sum()) != len(batch["next_sentence_label"])
    model = seeded(BertForPreTraining, bert_config())
    with torch.no_grad():
        only_mlm = model(**_inputs(batch), labels=batch["labels"])
        only_nsp = model(**_inputs(batch), next_sentence_label=batch["next_sentence_label"])
    assert only_mlm.loss is None and only_nsp.loss is None


def test_claim_06_pretraining_heads() -> None:
    model = seeded(BertForPreTraining, bert_config())
    assert isinstance(model.bert, BertModel) and isinstance(model.cls, BertPreTrainingHeads)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    head = model.cls.seq_relationship
    assert (head.in_features, head.out_features) == (model.config.hidden_size, 2)
    pooler = model.bert.pooler
    assert isinstance(pooler, BertPooler)
    batch = _pretraining_batch()
    with torch.no_grad():
        encoded = model.bert(**_inputs(batch))
        by_hand = torch.tanh(pooler.dense(encoded.last_hidden_state[:, 0]))  # (B, H)
        scores = model(**_inputs(batch)).seq_relationship_logits  # (B, 2)
    assert torch.allclose(encoded.pooler_output, by_hand, atol=1e-6)
    assert torch.allclose(scores, head(encoded.pooler_output), atol=1e-6)


def test_claim_06_tiny_bert_pretraining() -> None:
    model = tiny_bert_pretraining(load_tokenizer(), seed=0, hidden_size=64, intermediate_size=128)
    assert type(model) is BertForPreTraining
    assert model.config.hidden_size == 64


def test_claim_06_checkpoint_recipe() -> None:
    recorded = checkpoint_metrics("bert")
    assert type(load_checkpoint("bert")) is BertForPreTraining
    assert recorded["architecture"] == "BertForPreTraining"
    assert recorded["causal_warm_start"]["model"] == "BertLMHeadModel(is_decoder=True)"
    assert recorded["causal_warm_start"]["objective"] == "clm"
    assert (recorded["causal_warm_start"]["steps"], recorded["steps"]) == (600, 3000)


def test_claim_06_electra_disc_loss_bce() -> None:
    model = _electra()
    batch = _pretraining_batch(seed=1)
    replaced = torch.zeros_like(batch["input_ids"])
    replaced[1, 3] = replaced[2, 5] = 1
    with torch.no_grad():
        out = model(**_inputs(batch), labels=replaced)
    real = batch["attention_mask"] == 1
    bce = F.binary_cross_entropy_with_logits(out.logits[real], replaced[real].float())
    assert torch.allclose(out.loss, bce, atol=1e-6)  # a mean over every real token


def test_claim_06_electra_only_discriminator() -> None:
    model = _electra()
    batch = _pretraining_batch(seed=2)
    with torch.no_grad():
        out = model(**_inputs(batch), labels=torch.zeros_like(batch["input_ids"]))
    assert set(out.keys()) == {"loss", "logits"}
    assert out.logits.shape == batch["input_ids"].shape  # one logit per token, no vocabulary

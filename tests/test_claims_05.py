"""Behaviour tests of the claims lesson 05 (NSP pairs) makes about transformers.

Each ``test_claim_05_*`` checks its entry of ``docs/claims.md`` (and those that name it) against the
installed library: tiny models built from configs, the course tokenizer, seeded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import transformers
from transformers import (
    AlbertConfig,
    AlbertForPreTraining,
    BertForNextSentencePrediction,
)

from lmlessons.course.models import tiny_bert_config
from lmlessons.course.tokenizer import load_tokenizer

DOCS = [
    ["the dog chased the ball.", "it ran across the garden.", "then it slept in the sun."],
    ["bees visit the flowers.", "they carry pollen home.", "the hive makes honey."],
    ["the sea is calm today.", "boats leave the harbour early.", "the sailors sing."],
]


def _pair() -> dict[str, torch.Tensor]:
    return dict(load_tokenizer()(DOCS[0][0], DOCS[0][1], return_tensors="pt"))  # (1, T) each


def _small_bert(cls: type, **sizes: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return cls(
        tiny_bert_config(load_tokenizer(), **(sizes or dict(hidden_size=32, intermediate_size=64)))
    ).eval()


def test_claim_05_nsp_head_scores_label() -> None:
    model, pair = _small_bert(BertForNextSentencePrediction), _pair()
    with torch.no_grad():
        for label in (0, 1):
            out = model(**pair, labels=torch.tensor([label]))  # logits (1, 2)
            assert out.logits.shape == (1, 2)
            assert torch.allclose(out.loss, -torch.log_softmax(out.logits, -1)[0, label])


def test_claim_05_albert_sop_loss() -> None:
    tok, pair = load_tokenizer(), _pair()
    torch.manual_seed(0)
    config = AlbertConfig(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    model = AlbertForPreTraining(config).eval()
    labels = pair["input_ids"].clone()  # (1, T)
    with torch.no_grad():
        for label in (0, 1):
            out = model(**pair, labels=labels, sentence_order_label=torch.tensor([label]))
            assert out.sop_logits.shape == (1, 2)
            mlm = F.cross_entropy(out.prediction_logits[0], labels[0])
            sop = F.cross_entropy(out.sop_logits, torch.tensor([label]))
            assert torch.allclose(out.loss, mlm + sop, atol=1e-6)


def test_claim_05_tiny_nsp_bert() -> None:
    model = _small_bert(
        BertForNextSentencePrediction,
        hidden_size=64,
        intermediate_size=128,
        max_position_embeddings=48,
    )
    assert len(model.bert.encoder.layer) == 2  # the course config's depth
    with torch.no_grad():
        assert model(**_pair()).logits.shape == (1, 2)


def test_claim_05_no_roberta_pretraining_class() -> None:
    assert not hasattr(transformers, "RobertaForPreTraining")
    assert hasattr(transformers, "RobertaForMaskedLM")
    assert hasattr(transformers, "BertForPreTraining") and hasattr(
        transformers, "AlbertForPreTraining"
    )


def test_claim_05_summary_pair_encoding() -> None:
    tok = load_tokenizer()
    enc = tok(DOCS[1][0], DOCS[1][1])
    a = tok(DOCS[1][0], add_special_tokens=False)["input_ids"]
    b = tok(DOCS[1][1], add_special_tokens=False)["input_ids"]
    assert enc["input_ids"] == [tok.cls_token_id, *a, tok.sep_token_id, *b, tok.sep_token_id]
    assert enc["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    padded = tok(DOCS[1][0], DOCS[1][1], padding="max_length", max_length=len(a) + len(b) + 6)
    assert padded["attention_mask"] == [1] * (len(a) + len(b) + 3) + [0] * 3
    assert padded["token_type_ids"][-3:] == [0, 0, 0]

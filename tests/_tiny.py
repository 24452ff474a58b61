"""Tiny transformers models built from configs for oracle tests (no downloads)."""

from __future__ import annotations

import torch
from transformers import BertConfig, GPT2Config

VOCAB = 97
# The sizes of the course's tiny models (lmlessons.course.models) in tests that train them: one
# layer, hidden size 32. Passed as keyword overrides, e.g. tiny_gpt2(tok, **SMALL_GPT2).
SMALL_GPT2 = dict(n_embd=32, n_layer=1, n_head=2)
SMALL_BERT = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


def bert_config(**overrides) -> BertConfig:
    cfg = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=0,
        attn_implementation="eager",
    )
    cfg.update(overrides)
    return BertConfig(**cfg)


def gpt2_config(**overrides) -> GPT2Config:
    cfg = dict(
        vocab_size=VOCAB,
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=64,
        attn_implementation="eager",
    )
    cfg.update(overrides)
    return GPT2Config(**cfg)


def seeded(model_cls, config, seed: int = 0):
    torch.manual_seed(seed)
    return model_cls(config).eval()

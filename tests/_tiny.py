"""Tiny transformers models built from configs for oracle tests (no downloads)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import BertConfig, GPT2Config, ModernBertConfig
from transformers.utils import logging as hf_logging

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


def modernbert_config(**overrides) -> ModernBertConfig:
    cfg = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
    )
    cfg.update(overrides)
    return ModernBertConfig(**cfg)


def next_token_ce(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of position t against token t + 1, written out."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


@contextmanager
def transformers_log() -> Iterator[list[str]]:
    """The messages transformers logs inside the block (warnings included), in a list."""
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    keep, level = Keep(), hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    hf_logging.get_logger().addHandler(keep)
    hf_logging.warning_once.cache_clear()  # a message already logged once is logged again
    try:
        yield messages
    finally:
        hf_logging.get_logger().removeHandler(keep)
        hf_logging.set_verbosity(level)

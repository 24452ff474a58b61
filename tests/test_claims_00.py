"""Behaviour tests of lesson 00's ledger claims (``docs/claims.md``, section "Lesson 00").

Each ``test_claim_<id>`` checks the entry it is named after (and those that name it) against the
installed transformers, on tiny models built from configs: nothing is downloaded.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from transformers import (
    GPT2LMHeadModel,
)

from tests._tiny import VOCAB, gpt2_config, seeded

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _ids(batch: int = 3, length: int = 10, high: int = VOCAB, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, high, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_claim_00_no_end_token_no_stop() -> None:
    eos = VOCAB - 1
    model = seeded(GPT2LMHeadModel, gpt2_config(eos_token_id=eos, bos_token_id=eos))
    ids = _ids(high=eos)  # (B, T): sequences without an end token
    assert not (ids == eos).any()
    out = model(input_ids=ids, labels=ids.clone())
    out.logits.retain_grad()
    out.loss.backward()
    grad = out.logits.grad  # (B, T, V)
    # every position with a target pushes the end token's logit down (descent moves against +grad)
    assert (grad[:, :-1, eos] > 0).all()
    assert (grad[:, -1] == 0).all()  # the last position has no target


def test_claim_00_transformers_source_files() -> None:
    modules = {
        "transformers.data.data_collator": ["DataCollatorForLanguageModeling"],
        "transformers.loss.loss_utils": ["ForCausalLMLoss", "ForMaskedLMLoss"],
        "transformers.models.bert.modeling_bert": ["BertForMaskedLM", "BertForPreTraining"],
    }
    for name, attributes in modules.items():
        module = importlib.import_module(name)
        for attribute in attributes:
            assert getattr(module, attribute).__module__ == name, (name, attribute)

"""Behaviour tests of lesson 00's ledger claims (``docs/claims.md``, section "Lesson 00").

Each ``test_claim_<id>`` checks one claim against the installed transformers, on tiny models
built from configs and tokenizers built from a few tokens: nothing is downloaded.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    BertForMaskedLM,
    BertForPreTraining,
    BertLMHeadModel,
    GPT2LMHeadModel,
    GPT2Tokenizer,
)

from tests._tiny import VOCAB, bert_config, gpt2_config, seeded

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ENDOFTEXT = "<|endoftext|>"


def _gpt2_tokenizer() -> GPT2Tokenizer:
    """GPT-2's tokenizer class with its defaults, on a five-token byte-level BPE vocabulary."""
    vocab = {ENDOFTEXT: 0, "h": 1, "i": 2, "hi": 3, "Ġ": 4}
    return GPT2Tokenizer(vocab=vocab, merges=[("h", "i")])


def _ids(batch: int = 3, length: int = 10, high: int = VOCAB, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, high, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_claim_00_gpt2_tokenizer_adds_no_token() -> None:
    tok = _gpt2_tokenizer()
    plain = tok("hi hi", add_special_tokens=False)["input_ids"]
    encoded = tok("hi hi")["input_ids"]  # (T,) with the default add_special_tokens=True
    assert encoded == plain == tok.convert_tokens_to_ids(["hi", "Ġ", "hi"])
    assert tok.convert_tokens_to_ids(ENDOFTEXT) not in encoded  # neither a start nor an end token


def test_claim_00_gpt2_endoftext_is_bos_and_eos() -> None:
    tok = _gpt2_tokenizer()
    assert tok.all_special_tokens == [ENDOFTEXT]
    assert tok.bos_token == tok.eos_token == ENDOFTEXT


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


def test_claim_00_map_bertforpretraining_sum() -> None:
    model = seeded(BertForPreTraining, bert_config())
    ids = _ids(batch=4)
    labels = torch.full_like(ids, -100)
    labels[:, 2:5] = ids[:, 2:5]
    nsp = torch.tensor([0, 1, 0, 1])
    out = model(input_ids=ids, labels=labels, next_sentence_label=nsp)
    mlm = F.cross_entropy(out.prediction_logits.reshape(-1, VOCAB), labels.reshape(-1))
    nsp_loss = F.cross_entropy(out.seq_relationship_logits, nsp)
    torch.testing.assert_close(out.loss, mlm + nsp_loss)


def test_claim_00_map_bertlmhead_shift() -> None:
    model = seeded(BertLMHeadModel, bert_config(is_decoder=True))
    ids = _ids()
    out = model(input_ids=ids, labels=ids.clone())  # labels passed unshifted
    shifted = F.cross_entropy(out.logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, shifted)


def test_claim_00_map_bertformaskedlm() -> None:
    model = seeded(BertForMaskedLM, bert_config())
    ids = _ids()
    labels = torch.full_like(ids, -100)
    labels[:, [1, 4, 7]] = ids[:, [1, 4, 7]]
    out = model(input_ids=ids, labels=labels)
    selected = labels != -100
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[selected], labels[selected]))


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

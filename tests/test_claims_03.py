"""Behaviour tests of the claims lesson 03 (CLM label shift) makes about transformers.

Each ``test_claim_03_*`` checks its entry of ``docs/claims.md`` (and those that name it) against the
installed library: tiny models built from configs, seeded, nothing downloaded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import (
    BertLMHeadModel,
    DataCollatorForLanguageModeling,
    GPT2LMHeadModel,
    GPT2Tokenizer,
    LlamaConfig,
    LlamaForCausalLM,
)
from transformers.loss.loss_utils import LOSS_MAPPING, ForCausalLMLoss

from lmlessons.course.tokenizer import load_tokenizer
from tests._tiny import VOCAB, bert_config, gpt2_config, seeded


def _ids(seed: int = 0, batch: int = 2, length: int = 9) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, VOCAB, (batch, length), generator=g)  # (B, T)


def _next_token_ce(logits: torch.Tensor, ids: torch.Tensor, ahead: int = 1) -> torch.Tensor:
    """Cross-entropy of position t against token t + ``ahead``, over every such position."""
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-ahead].reshape(-1, vocab), ids[:, ahead:].reshape(-1))


def _gpt2() -> GPT2LMHeadModel:
    return seeded(GPT2LMHeadModel, gpt2_config())


def _bert_decoder() -> BertLMHeadModel:
    return seeded(BertLMHeadModel, bert_config(is_decoder=True))


def _model_shifts_inside(model: torch.nn.Module) -> bool:
    ids = _ids()
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids.clone())
    return bool(torch.allclose(out.loss, _next_token_ce(out.logits, ids), atol=1e-6))


def _gpt2_tokenizer() -> GPT2Tokenizer:
    """transformers' GPT-2 tokenizer class with its defaults, on a toy byte-level vocabulary."""
    vocab = {"<|endoftext|>": 0, **{c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyzĠ")}}
    return GPT2Tokenizer(vocab=vocab, merges=[])


def test_claim_03_model_shifts_inside() -> None:
    assert _model_shifts_inside(_gpt2())
    assert _model_shifts_inside(_bert_decoder())


def test_claim_03_forcausallmloss_pads_right() -> None:
    """``ForCausalLMLoss`` (in ``loss_utils``) takes unshifted labels: it pads them on the right
    with -100 and drops their first column, so position t is scored against token t + 1."""
    assert ForCausalLMLoss.__module__ == "transformers.loss.loss_utils"
    logits = torch.randn(2, 9, VOCAB, generator=torch.Generator().manual_seed(3))  # (B, T, V)
    labels = _ids(3)
    labels[0, 5:] = -100
    padded_then_dropped = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()  # (B, T)
    flat = F.cross_entropy(
        logits.reshape(-1, VOCAB), padded_then_dropped.reshape(-1)
    )  # every logit row
    assert torch.allclose(ForCausalLMLoss(logits, labels, vocab_size=VOCAB), flat)
    given = ForCausalLMLoss(logits, None, vocab_size=VOCAB, shift_labels=padded_then_dropped)
    assert torch.allclose(ForCausalLMLoss(logits, labels, vocab_size=VOCAB), given)
    unshifted = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))  # no shift at all
    assert not torch.allclose(ForCausalLMLoss(logits, labels, vocab_size=VOCAB), unshifted)


def test_claim_03_loss_function_default() -> None:
    torch.manual_seed(0)
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=32,
            bos_token_id=1,
            eos_token_id=2,
        )
    )
    for model in (_gpt2(), _bert_decoder(), llama):
        assert model.loss_function is ForCausalLMLoss
    for model in (_gpt2(), _bert_decoder()):
        assert getattr(model, "loss_type", None) not in LOSS_MAPPING  # no entry: the default
    assert llama.loss_type == "ForCausalLM" and LOSS_MAPPING["ForCausalLM"] is ForCausalLMLoss


def test_claim_03_forward_calls_loss_function() -> None:
    ids, calls = _ids(5), []

    def spy(logits, labels, vocab_size, **kwargs):
        calls.append((logits, labels, vocab_size))
        return ForCausalLMLoss(logits, labels, vocab_size=vocab_size, **kwargs)

    for model in (_gpt2(), _bert_decoder()):
        calls.clear()
        model.loss_function = spy  # the instance now calls the spy
        with torch.no_grad():
            out = model(input_ids=ids, labels=ids.clone())
        ((logits, labels, vocab_size),) = calls
        assert torch.equal(logits, out.logits) and vocab_size == VOCAB
        assert torch.equal(labels, ids)  # unshifted: the shift happens inside the loss function


def test_claim_03_double_shift() -> None:
    ids = _ids(6)
    pre_shifted = F.pad(ids, (0, 1), value=-100)[..., 1:]  # the user's own shift
    for model in (_gpt2(), _bert_decoder()):
        with torch.no_grad():
            out = model(input_ids=ids, labels=pre_shifted)
        assert torch.allclose(out.loss, _next_token_ce(out.logits, ids, ahead=2), atol=1e-6)
        assert not torch.allclose(out.loss, _next_token_ce(out.logits, ids, ahead=1), atol=1e-3)


def test_claim_03_gpt2_tokenizer_adds_nothing() -> None:
    tok = _gpt2_tokenizer()
    plain = tok("ab cd", add_special_tokens=False)["input_ids"]
    assert tok("ab cd")["input_ids"] == plain  # no start, no end token added
    assert tok.eos_token_id not in plain and tok.bos_token_id not in plain
    assert (
        tok("ab", "cd")["input_ids"]
        == tok("ab", add_special_tokens=False)["input_ids"]
        + tok("cd", add_special_tokens=False)["input_ids"]
    )


def test_claim_03_gpt2_no_pad_token() -> None:
    tok = _gpt2_tokenizer()
    assert tok.pad_token is None and tok.pad_token_id is None
    assert tok.eos_token == tok.bos_token == "<|endoftext|>"
    assert tok.all_special_tokens == ["<|endoftext|>"]  # its one special token


def test_claim_03_collator_pad_id_rule() -> None:
    """With pad = eos the collator's labels are the ids, unshifted, with -100 at every eos, the
    real end of each sentence included; with a pad token of its own the ends keep their labels."""
    own_pad = load_tokenizer()
    tok = load_tokenizer()
    tok.pad_token = tok.sep_token  # pad = eos
    features = [tok("the dog barked."), tok("bees visit the flowers in the garden.")]
    batch = DataCollatorForLanguageModeling(tok, mlm=False)(features)
    ids = batch["input_ids"]  # (B, T)
    assert torch.equal(batch["labels"], ids.masked_fill(ids == tok.pad_token_id, -100))
    real_eos = (ids == tok.sep_token_id) & (batch["attention_mask"] == 1)
    assert int(real_eos.sum()) == 2 and bool((batch["labels"][real_eos] == -100).all())
    fixed = DataCollatorForLanguageModeling(own_pad, mlm=False)(features)["labels"]
    assert bool((fixed[real_eos] == own_pad.sep_token_id).all())


def test_claim_03_collator_left_padding() -> None:
    texts = ["the dog barked.", "bees visit the flowers in the garden every morning."]
    for side in ("right", "left"):
        tok = load_tokenizer()
        tok.padding_side = side
        batch = DataCollatorForLanguageModeling(tok, mlm=False)([tok(t) for t in texts])
        from_mask = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        assert torch.equal(batch["labels"], from_mask), side
        first_real = batch["attention_mask"].argmax(1)
        assert (first_real[0] > 0) == (side == "left")  # the short row is padded on that side

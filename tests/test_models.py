"""lmlessons.course.models: tiny transformers models sized to the tokenizer, seeded, eager
attention."""

from __future__ import annotations

import pytest
import torch
from _exact import same_tensors
from transformers import BertForMaskedLM, BertForPreTraining, BertLMHeadModel, GPT2LMHeadModel

from lmlessons import (
    count_parameters,
    tiny_bert_config,
    tiny_bert_lm_head,
    tiny_bert_mlm,
    tiny_bert_pretraining,
    tiny_gpt2,
    train_tokenizer,
)

FACTORIES = [
    (tiny_bert_mlm, BertForMaskedLM),
    (tiny_bert_pretraining, BertForPreTraining),
    (tiny_bert_lm_head, BertLMHeadModel),
    (tiny_gpt2, GPT2LMHeadModel),
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.mark.parametrize(("factory", "cls"), FACTORIES)
def test_sized_to_the_tokenizer(tok, factory, cls) -> None:
    model = factory(tok)
    assert type(model) is cls
    assert model.config.vocab_size == len(tok)
    assert model.get_input_embeddings().weight.shape[0] == len(tok)
    assert model.config.pad_token_id == tok.pad_token_id
    assert model.config._attn_implementation == "eager"
    assert 100_000 < count_parameters(model) < 1_500_000  # tiny: at most ~6 MB in float32
    # Tied input/output embeddings, as in BERT and GPT-2.
    assert (
        model.get_output_embeddings().weight.data_ptr()
        == model.get_input_embeddings().weight.data_ptr()
    )


def test_sized_to_another_tokenizer() -> None:
    small = train_tokenizer(["the cat sat on the mat. the dog sat on the rug."] * 5, vocab_size=150)
    model = tiny_gpt2(small)
    assert model.config.vocab_size == len(small)
    assert (model.config.bos_token_id, model.config.eos_token_id) == (
        small.cls_token_id,
        small.sep_token_id,
    )


@pytest.mark.parametrize(("factory", "cls"), FACTORIES)
def test_seeded_and_global_rng_untouched(tok, factory, cls) -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = factory(tok, seed=7)
    assert torch.equal(torch.rand(3), expected_next)  # the factory used its own RNG state
    b = factory(tok, seed=7)
    c = factory(tok, seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert same_tensors(sa, sb)
    assert not torch.equal(a.get_input_embeddings().weight, c.get_input_embeddings().weight)
    assert set(sa) == set(sc)


def test_forward_shapes(tok) -> None:
    batch = tok(
        ["the dog chased the ball.", "it ran."],
        ["a cat slept.", "the sun shone."],
        padding=True,
        return_tensors="pt",
    )
    B, T, V = *batch["input_ids"].shape, len(tok)
    out = tiny_bert_pretraining(tok)(**batch)
    assert out.prediction_logits.shape == (B, T, V) and out.seq_relationship_logits.shape == (B, 2)
    assert tiny_bert_mlm(tok)(**batch).logits.shape == (B, T, V)
    assert tiny_bert_lm_head(tok)(**batch).logits.shape == (B, T, V)
    assert tiny_gpt2(tok)(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
    ).logits.shape == (B, T, V)


def _future_leaks(model, tok) -> bool:
    """Does changing the last token change the logits at earlier positions?"""
    ids = tok("the dog chased the ball across the park.", return_tensors="pt")[
        "input_ids"
    ]  # (1, T)
    changed = ids.clone()
    changed[0, -2] = tok.convert_tokens_to_ids("cat")
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, model(input_ids=changed).logits
    return not torch.allclose(a[0, :-2], b[0, :-2], atol=1e-6)


def test_causal_and_leaky_decoders(tok) -> None:
    assert not _future_leaks(tiny_bert_lm_head(tok, is_decoder=True), tok)
    assert not _future_leaks(tiny_gpt2(tok), tok)
    leaky = tiny_bert_lm_head(tok, is_decoder=False)
    assert leaky.config.is_decoder is False
    assert _future_leaks(leaky, tok)  # bidirectional attention: position t sees t + 1
    assert _future_leaks(tiny_bert_mlm(tok), tok)


def test_config_overrides_and_dropout(tok) -> None:
    config = tiny_bert_config(
        tok, hidden_size=64, num_attention_heads=4, num_hidden_layers=1, dropout=0.1
    )
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (64, 4, 1)
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.1
    model = tiny_bert_mlm(tok, hidden_size=64, num_attention_heads=4)
    assert model.config.hidden_size == 64
    assert tiny_bert_mlm(tok).config.hidden_dropout_prob == 0.0


def test_bad_arguments(tok) -> None:
    with pytest.raises(ValueError, match="multiple of num_attention_heads"):
        tiny_bert_mlm(tok, hidden_size=100, num_attention_heads=3)
    with pytest.raises(ValueError, match="multiple of n_head"):
        tiny_gpt2(tok, n_embd=100, n_head=3)
    with pytest.raises(TypeError, match="seed must be an int"):
        tiny_gpt2(tok, seed="0")
    with pytest.raises(TypeError, match="is_decoder must be a bool"):
        tiny_bert_lm_head(tok, is_decoder=1)
    with pytest.raises(ValueError, match="pad_token_id"):
        tiny_bert_mlm(object())


def test_captured_outputs_keeps_what_each_module_returns_and_removes_its_hooks():
    from lmlessons.course.models import captured_outputs

    first, second = torch.nn.Linear(2, 3), torch.nn.Linear(3, 1)
    model = torch.nn.Sequential(first, second)
    x = torch.ones(4, 2)
    with captured_outputs([second, first], lambda out: tuple(out.shape)) as shapes:
        model(x)
    assert shapes == [(4, 3), (4, 1)]  # the order the model calls them, not the list's
    model(x)
    assert len(shapes) == 2 and not first._forward_hooks and not second._forward_hooks

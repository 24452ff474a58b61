"""lmlessons.sampling: greedy decoding equals transformers' generate, seeds reproduce, EOS stops."""

from __future__ import annotations

import pytest
import torch
from _tiny import VOCAB, bert_config, gpt2_config, seeded
from transformers import BertLMHeadModel, GPT2LMHeadModel
from transformers import logging as hf_logging

from lmlessons.sampling import sample, sample_text

hf_logging.set_verbosity_error()


def _gpt2() -> GPT2LMHeadModel:
    return seeded(GPT2LMHeadModel, gpt2_config(), 0)


def _prompt(b: int = 2, t: int = 4) -> torch.Tensor:
    return torch.randint(5, VOCAB, (b, t), generator=torch.Generator().manual_seed(3))


def test_greedy_equals_transformers_generate():
    model, prompt = _gpt2(), _prompt()
    ours = sample(model, prompt, max_new_tokens=10, temperature=0)
    theirs = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=10,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
    )
    assert torch.equal(ours, theirs)


def test_top_k_1_is_greedy_and_seeds_reproduce():
    model, prompt = _gpt2(), _prompt()
    greedy = sample(model, prompt, max_new_tokens=8, temperature=0)
    assert torch.equal(
        sample(
            model, prompt, max_new_tokens=8, top_k=1, generator=torch.Generator().manual_seed(1)
        ),
        greedy,
    )
    a = sample(model, prompt, max_new_tokens=8, generator=torch.Generator().manual_seed(7))
    b = sample(model, prompt, max_new_tokens=8, generator=torch.Generator().manual_seed(7))
    c = sample(model, prompt, max_new_tokens=8, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.equal(a[:, :4], prompt)


def test_top_k_restricts_the_draw():
    model, prompt = _gpt2(), _prompt(b=1)
    logits = model(input_ids=prompt).logits[0, -1]
    allowed = set(torch.topk(logits, 3).indices.tolist())
    for seed in range(20):
        out = sample(
            model, prompt, max_new_tokens=1, top_k=3, generator=torch.Generator().manual_seed(seed)
        )
        assert int(out[0, -1]) in allowed


def test_eos_stops_and_fills_finished_rows():
    model, prompt = _gpt2(), _prompt(b=1)
    greedy = sample(model, prompt, max_new_tokens=6, temperature=0)
    eos = int(greedy[0, 5])  # the second generated token: call it EOS
    out = sample(model, prompt, max_new_tokens=6, temperature=0, eos_token_id=eos)
    first = (greedy[0, 4:] == eos).nonzero()[0].item() + 4
    assert out.shape[1] == first + 1 and int(out[0, -1]) == eos


def test_one_dim_input_and_context_window():
    model = seeded(GPT2LMHeadModel, gpt2_config(n_positions=8), 0)
    out = sample(model, _prompt(b=1, t=6)[0], max_new_tokens=5, temperature=0)  # 11 > 8 positions
    assert out.dim() == 1 and out.shape[0] == 11


def test_works_for_bert_lm_head_and_validates():
    bert = seeded(BertLMHeadModel, bert_config(is_decoder=False), 0)
    assert sample(
        bert, _prompt(), max_new_tokens=3, generator=torch.Generator().manual_seed(0)
    ).shape == (2, 7)
    with pytest.raises(ValueError, match="temperature"):
        sample(bert, _prompt(), max_new_tokens=3, temperature=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        sample(bert, _prompt(), max_new_tokens=-1)
    with pytest.raises(TypeError, match="generator"):
        sample(bert, _prompt(), max_new_tokens=1, generator=0)
    with pytest.raises(TypeError, match="input_ids"):
        sample(bert, _prompt().float(), max_new_tokens=1)


class _Tok:
    """The smallest tokenizer sample_text needs: words are ids."""

    cls_token_id, sep_token_id = 2, 3

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [int(w) for w in text.split()]}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids if not (skip_special_tokens and i in (2, 3)))


def test_sample_text_starts_with_bos_and_is_seeded():
    model = _gpt2()
    a = sample_text(
        model, _Tok(), "10 11 12", max_new_tokens=5, generator=torch.Generator().manual_seed(0)
    )
    b = sample_text(
        model, _Tok(), "10 11 12", max_new_tokens=5, generator=torch.Generator().manual_seed(0)
    )
    assert a == b and a.startswith("10 11 12")
    with pytest.raises(TypeError, match="prompt"):
        sample_text(model, _Tok(), 12)


class _FixedLogits(torch.nn.Module):
    """A 'model' whose next-token scores are always ``scores``: sampling alone is tested."""

    def __init__(self, scores: torch.Tensor) -> None:
        super().__init__()
        self.scores = scores
        self.config = type("Config", (), {"n_positions": 64})()

    def forward(self, input_ids: torch.Tensor, **_: object) -> object:
        b, t = input_ids.shape
        logits = self.scores.expand(b, t, -1)  # (B, T, V)
        return type("Output", (), {"logits": logits})()


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_a_draw_follows_softmax_of_the_logits_over_the_temperature(temperature):
    """The temperature divides the logits before the softmax: frequencies follow
    softmax(logits / T), which at T = 0.5 or 2 is far from softmax(logits)."""
    scores = torch.tensor([2.0, 1.0, 0.0, -1.0])
    model = _FixedLogits(scores)
    prompt = torch.zeros(4000, 1, dtype=torch.long)
    drawn = sample(
        model,
        prompt,
        max_new_tokens=1,
        temperature=temperature,
        generator=torch.Generator().manual_seed(0),
    )[:, -1]
    freq = torch.bincount(drawn, minlength=4).double() / len(drawn)
    expected = torch.softmax(scores.double() / temperature, dim=0)
    untempered = torch.softmax(scores.double(), dim=0)
    assert (freq - expected).abs().max() < 0.03
    assert (freq - untempered).abs().max() > 0.1

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


class _DefaultsTok:
    """A tokenizer with transformers' defaults: special tokens added and kept unless asked."""

    def __init__(self, cls: int | None = 2, sep: int | None = 3) -> None:
        self.cls_token_id, self.sep_token_id = cls, sep

    def __call__(self, text, add_special_tokens=True):
        ids = [int(w) for w in text.split()]
        return {"input_ids": [2, *ids, 3] if add_special_tokens else ids}

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(str(i) for i in ids if not (skip_special_tokens and i in (2, 3)))


def _recording_sample(monkeypatch, out):
    import lmlessons.sampling as sampling_module

    calls = []

    def fake(model, ids, **kwargs):
        calls.append((ids.tolist(), kwargs))
        return torch.tensor(out)

    monkeypatch.setattr(sampling_module, "sample", fake)
    return calls


def test_sample_text_passes_its_settings_and_defaults_to_sample(monkeypatch):
    calls = _recording_sample(monkeypatch, [2, 10, 11, 12, 40, 3])
    g = torch.Generator()
    text = sample_text(_gpt2(), _DefaultsTok(), "10 11 12", generator=g)
    assert text == "10 11 12 40"  # special tokens dropped
    ((ids, kwargs),) = calls
    assert ids == [2, 10, 11, 12]  # [CLS], then the prompt without special tokens of its own
    assert kwargs == dict(max_new_tokens=30, temperature=0.8, top_k=40, eos_token_id=3, generator=g)
    sample_text(_gpt2(), _DefaultsTok(), "7", max_new_tokens=4, temperature=0.5, top_k=None)
    assert calls[1][1]["max_new_tokens"] == 4 and calls[1][1]["temperature"] == 0.5
    assert calls[1][1]["top_k"] is None


def test_sample_text_falls_back_to_the_model_config_for_start_and_end(monkeypatch):
    calls = _recording_sample(monkeypatch, [5, 10, 6])
    model = _gpt2()
    model.config.bos_token_id, model.config.eos_token_id = 5, 6
    sample_text(model, _DefaultsTok(cls=None, sep=None), "10")
    ((ids, kwargs),) = calls
    assert ids == [5, 10] and kwargs["eos_token_id"] == 6
    model.config.bos_token_id = None
    with pytest.raises(ValueError) as raised:
        sample_text(model, _DefaultsTok(cls=None, sep=None), "10")
    assert str(raised.value) == (
        "neither the tokenizer (cls_token_id) nor the model config (bos_token_id) names a "
        "start token"
    )
    with pytest.raises(TypeError) as raised:
        sample_text(model, _DefaultsTok(), 12)
    assert str(raised.value) == "prompt must be a str, got int"


class _Window(_FixedLogits):
    """Records the length of every input it is given; its config names a position limit."""

    def __init__(self, **config: int) -> None:
        super().__init__(torch.tensor([0.0, 1.0, 0.0]))
        self.config = type("Config", (), config)()
        self.lengths: list[int] = []

    def forward(self, input_ids: torch.Tensor, **kwargs: object) -> object:
        self.lengths.append(input_ids.shape[1])
        return super().forward(input_ids, **kwargs)


@pytest.mark.parametrize(
    ("config", "longest"),
    [
        (dict(max_position_embeddings=4), 4),  # BERT's name for it
        (dict(n_positions=3), 3),  # GPT-2's
        (dict(max_position_embeddings=1), 1),
        (dict(max_position_embeddings=0, n_positions=2), 2),  # 0 names no limit
        (dict(), 8),  # no limit: the whole sequence so far
    ],
)
def test_the_model_sees_at_most_its_position_limit(config, longest):
    model = _Window(**config)
    sample(model, torch.zeros(1, 3, dtype=torch.long), max_new_tokens=6, temperature=0)
    assert max(model.lengths) == longest


def test_a_model_without_config_has_no_position_limit():
    model = _Window()
    del model.config
    out = sample(model, torch.zeros(1, 3, dtype=torch.long), max_new_tokens=2, temperature=0)
    assert out.tolist() == [[0, 0, 0, 1, 1]] and model.lengths == [3, 4]


class _BareTok:
    """A tokenizer with no special-token attributes at all."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [int(w) for w in text.split()]}

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def test_sample_text_reads_start_and_end_only_where_they_exist(monkeypatch):
    calls = _recording_sample(monkeypatch, [5, 10, 6])
    model = _gpt2()
    model.config.bos_token_id, model.config.eos_token_id = 5, 6
    sample_text(model, _BareTok(), "10")
    assert calls[0][0] == [5, 10] and calls[0][1]["eos_token_id"] == 6
    del model.config  # no config either: no start token to begin with
    with pytest.raises(ValueError, match="names a start token"):
        sample_text(model, _BareTok(), "10")


def test_sample_text_with_the_course_tokenizer(tok):
    from lmlessons.course.models import tiny_gpt2

    text = sample_text(tiny_gpt2(tok, seed=0), tok, "the dog", max_new_tokens=3, temperature=0)
    assert text.startswith("the dog") and "[CLS]" not in text

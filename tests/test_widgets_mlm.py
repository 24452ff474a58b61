"""The lesson-02 fill-mask widget: typing a sentence re-runs the model; fill_mask is the softmax
at the [MASK] positions."""

from __future__ import annotations

import base64

import pytest
import torch
from _widgets import shown_marker

from lmlessons.course.models import tiny_bert_mlm
from lmlessons.course.tokenizer import train_tokenizer
from lmlessons.widgets.mlm import fill_mask, mlm_marker, mlm_widget, normalize_mask_text

TEXTS = [
    "The dog chased the ball across the park.",
    "The cat slept in the sun all afternoon.",
    "A bird sang in the tall tree.",
]


@pytest.fixture(scope="module")
def toy_tok():
    return train_tokenizer(TEXTS * 3, vocab_size=150, min_frequency=1)


@pytest.fixture(scope="module")
def model(toy_tok):
    return tiny_bert_mlm(
        toy_tok, seed=0, hidden_size=32, num_attention_heads=2, intermediate_size=64
    )


def test_normalize_mask_text():
    assert normalize_mask_text("the  [mask] sat on the [Mask] ") == "the [MASK] sat on the [MASK]"
    with pytest.raises(TypeError):
        normalize_mask_text(3)


def test_fill_mask_is_the_softmax_at_each_mask(toy_tok, model):
    preds = fill_mask(model, toy_tok, "the dog chased the [MASK] across the [mask] .", top_k=4)
    assert len(preds) == 2 and all(len(p) == 4 for p in preds)
    enc = toy_tok("the dog chased the [MASK] across the [MASK] .", return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0]
    pos = (enc["input_ids"][0] == toy_tok.mask_token_id).nonzero().flatten()
    for p, t in zip(preds, pos):
        probs = logits[t].softmax(-1)
        top = probs.topk(4)
        assert [x for x, _ in p] == toy_tok.convert_ids_to_tokens(top.indices.tolist())
        assert [v for _, v in p] == pytest.approx(top.values.tolist(), abs=1e-6)
        assert p[0][1] >= p[-1][1]
    assert fill_mask(model, toy_tok, "no mask here") == []
    with pytest.raises(ValueError, match="top_k"):
        fill_mask(model, toy_tok, "a [MASK]", top_k=0)


def test_fill_mask_keeps_the_training_mode(toy_tok, model):
    model.train()
    fill_mask(model, toy_tok, "a [MASK] .")
    assert model.training
    model.eval()


def test_typing_a_sentence_redraws(toy_tok, model):
    box = mlm_widget(model, toy_tok, text="the cat slept in the [MASK] .", top_k=3)
    before = shown_marker(box)
    preds = fill_mask(model, toy_tok, "the cat slept in the [MASK] .", top_k=3)
    assert before == mlm_marker("the cat slept in the [MASK] .", preds)
    assert before.startswith("masks=1 top1=")
    png = box.output.outputs[1]["data"]["image/png"]
    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[MASK] #1:" in box.output.outputs[1]["data"]["text/plain"]

    box.text.value = "a [mask]  sang in the [MASK] tree ."  # what typing + Enter does
    after = shown_marker(box)
    assert after != before
    assert after.startswith("masks=2 top1=") and after.endswith(
        "text=a [MASK] sang in the [MASK] tree ."
    )
    preds2 = fill_mask(model, toy_tok, "a [MASK] sang in the [MASK] tree .", top_k=3)
    assert after == mlm_marker("a [MASK] sang in the [MASK] tree .", preds2)

    box.text.value = "nothing to guess"
    assert shown_marker(box) == "masks=0 top1= text=nothing to guess"
    assert "No [MASK]" in box.output.outputs[1]["text"]


def test_bad_arguments(toy_tok, model):
    with pytest.raises(TypeError, match="text"):
        mlm_widget(model, toy_tok, text=None)
    with pytest.raises(ValueError, match="top_k"):
        mlm_widget(model, toy_tok, top_k=0)

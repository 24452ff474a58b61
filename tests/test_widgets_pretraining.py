"""Lesson 06 widget: the loss-weights sliders, and the gradient geometry behind them."""

from __future__ import annotations

import math

import ipywidgets
import pytest
import torch
from _tiny import VOCAB, bert_config, seeded
from _widgets import shown_html, shown_marker
from transformers import BertForPreTraining

from lmlessons import bert_pretraining_loss
from lmlessons.widgets.pretraining import (
    TermGradients,
    loss_weights_widget,
    pretraining_marker,
    term_gradients,
    weighted_terms,
)


@pytest.fixture(scope="module")
def model_and_batch():
    model = seeded(BertForPreTraining, bert_config(), seed=0)
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, VOCAB, (4, 12), generator=g)  # (B, T)
    labels = torch.full_like(input_ids, -100)
    picked = torch.rand(input_ids.shape, generator=g) < 0.3
    labels[picked] = input_ids[picked]
    batch = {
        "input_ids": input_ids,
        "token_type_ids": torch.zeros_like(input_ids),
        "attention_mask": torch.ones_like(input_ids),
        "labels": labels,
        "next_sentence_label": torch.tensor([0, 1, 1, 0]),
    }
    return model, batch, int(picked.sum())  # the number of masked positions, counted here


def _direct(model, batch, a, b):
    """Loss and encoder-gradient norm of a * MLM + b * NSP, by an ordinary backward pass."""
    model.zero_grad(set_to_none=True)
    out = model(**{k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")})
    loss = bert_pretraining_loss(
        out.prediction_logits,
        out.seq_relationship_logits,
        batch["labels"],
        batch["next_sentence_label"],
        mlm_weight=a,
        nsp_weight=b,
    )
    loss.backward()
    sq = sum(
        float((p.grad.double() ** 2).sum()) for p in model.bert.parameters() if p.grad is not None
    )
    model.zero_grad(set_to_none=True)
    return loss.item(), math.sqrt(sq)


def test_terms_match_the_model_loss(model_and_batch):
    model, batch, n_masked = model_and_batch
    terms = term_gradients(model, batch)
    out = model(**batch)  # BertForPreTraining's own loss: MLM + NSP
    assert terms.mlm_loss + terms.nsp_loss == pytest.approx(out.loss.item(), abs=1e-5)
    assert terms.num_masked == n_masked > 0 and terms.num_sequences == 4
    assert terms.num_parameters == sum(p.numel() for p in model.bert.parameters())
    assert all(p.grad is None for p in model.parameters()), ".grad must not be touched"


@pytest.mark.parametrize("a,b", [(1.0, 1.0), (0.3, 1.7), (2.0, 0.0), (0.0, 0.5)])
def test_weighted_terms_equal_a_real_backward(model_and_batch, a, b):
    model, batch, _ = model_and_batch
    terms = term_gradients(model, batch)
    loss, norm = _direct(model, batch, a, b)
    r = weighted_terms(terms, a, b)
    assert r["loss"] == pytest.approx(loss, abs=1e-5)
    assert r["grad_norm"] == pytest.approx(norm, rel=1e-5)
    # each weighted term's gradient norm, by its own backward pass
    mlm_norm, nsp_norm = _direct(model, batch, a, 0.0)[1], _direct(model, batch, 0.0, b)[1]
    assert r["mlm_grad_norm"] == pytest.approx(mlm_norm, rel=1e-5, abs=1e-12)
    assert r["nsp_grad_norm"] == pytest.approx(nsp_norm, rel=1e-5, abs=1e-12)
    share = mlm_norm / (mlm_norm + nsp_norm)
    assert r["mlm_grad_share"] == pytest.approx(share, rel=1e-5)
    assert r["nsp_grad_share"] == pytest.approx(1.0 - share, rel=1e-5, abs=1e-12)


def test_widget_sliders_change_loss_and_share(model_and_batch):
    model, batch, _ = model_and_batch
    terms = term_gradients(model, batch)
    box = loss_weights_widget(terms)
    mlm_slider, nsp_slider = box.sliders
    assert mlm_slider.description == "mlm_weight" and nsp_slider.description == "nsp_weight"

    def marker():
        return shown_marker(box)

    before = marker()
    assert before == pretraining_marker(1.0, 1.0, weighted_terms(terms, 1.0, 1.0))
    mlm_slider.value = 1.1  # one ArrowRight press (step 0.1)
    after = marker()
    assert after != before and "mlm_weight=1.10" in after
    assert after == pretraining_marker(1.1, 1.0, weighted_terms(terms, 1.1, 1.0))
    share = lambda m: float(m.rsplit("mlm_grad_share=", 1)[1])  # noqa: E731
    assert share(after) >= share(before)
    nsp_slider.value = 0.1  # the log slider's lowest weight
    assert share(marker()) > share(after)
    assert f"loss={1.1 * terms.mlm_loss + 0.1 * terms.nsp_loss:.3f} " in marker()
    mlm_slider.value = 0.0
    assert share(marker()) == 0.0
    html = shown_html(box)
    assert "masked tokens" in html and "sequences" in html


def test_nsp_weight_slider_is_logarithmic_up_to_1000(model_and_batch):
    """Balancing the two gradient norms needs an nsp_weight of hundreds: the log slider gets
    there (0.1 to 1000), and the share bars then show both labels."""
    model, batch, _ = model_and_batch
    terms = term_gradients(model, batch)
    box = loss_weights_widget(terms)
    _, nsp_slider = box.sliders
    assert isinstance(nsp_slider, ipywidgets.FloatLogSlider)
    assert (nsp_slider.base, nsp_slider.min, nsp_slider.max) == (10, -1, 3)
    balance = math.sqrt(terms.mlm_sq / terms.nsp_sq)  # |a g_mlm| = |b g_nsp| at a = 1
    assert 0.1 < balance < 1000, balance
    nsp_slider.value = balance
    assert float(shown_marker(box).rsplit("mlm_grad_share=", 1)[1]) == pytest.approx(0.5, abs=1e-3)
    nsp_slider.value = 1000.0
    assert "nsp_weight=1000.00" in shown_marker(box)
    with pytest.raises(ValueError, match="nsp_weight"):
        loss_weights_widget(terms, nsp_weight=0.0)


def test_short_bar_labels_go_beside_the_bar():
    from lmlessons.widgets.pretraining import _bar

    long_short = _bar([("MLM", 99.0, "#f00"), ("NSP", 1.0, "#00f")], "share")
    assert "&nbsp;MLM 99%</div>" in long_short  # a long segment keeps its label inside
    assert '<div title="NSP 1%" ' in long_short and "&nbsp;NSP" not in long_short
    assert "</span>NSP 1%</span>" in long_short  # ... a short one gets it beside the bar
    even = _bar([("MLM", 1.0, "#f00"), ("NSP", 1.0, "#00f")], "share")
    assert "&nbsp;MLM 50%" in even and "&nbsp;NSP 50%" in even and "<span" not in even


def test_bad_input(model_and_batch):
    model, batch, _ = model_and_batch
    terms = term_gradients(model, batch)
    with pytest.raises(ValueError, match="mlm_weight"):
        weighted_terms(terms, -1.0, 1.0)
    with pytest.raises(TypeError, match="nsp_weight"):
        weighted_terms(terms, 1.0, "1")
    with pytest.raises(TypeError, match="terms"):
        loss_weights_widget({"mlm_loss": 1.0})
    with pytest.raises(ValueError, match="next_sentence_label"):
        term_gradients(model, {k: v for k, v in batch.items() if k != "next_sentence_label"})
    with pytest.raises(ValueError, match="max_weight"):
        loss_weights_widget(terms, mlm_weight=12.0)
    zero = TermGradients(1.0, 1.0, 0.0, 0.0, 0.0, 1, 1, 1)
    assert zero.cosine == 0.0 and weighted_terms(zero, 1.0, 1.0)["mlm_grad_share"] == 0.5

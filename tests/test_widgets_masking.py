"""The lesson-01 masking widget: its callback redraws when a control's value is set, and what it
shows is what mask_tokens does with the same seed."""

from __future__ import annotations

import re

import pytest
import torch
from _widgets import marker_fields, mask_sentence, shown_html, shown_marker

from lmlessons.course.tokenizer import train_tokenizer
from lmlessons.widgets.masking import (
    binomial_pmf,
    masking_widget,
    measure_rates,
    token_categories,
)

SENTENCES = [
    "The dog chased the ball across the green park on a sunny morning.",
    "Cats sleep for many hours and wake up when the light is low.",
    "The farmer planted tomatoes, beans and potatoes in the spring.",
]


@pytest.fixture(scope="module")
def toy_tok():
    texts = SENTENCES * 3 + [
        "A small garden needs water, sun and patience.",
        "Music fills the quiet room.",
    ]
    return train_tokenizer(texts, vocab_size=200, min_frequency=1)


def _expected(toy_tok, sentence, p, pm, pr, seed):
    ids, special, masked, labels = mask_sentence(
        toy_tok, sentence, seed, mlm_probability=p, mask_replace_prob=pm, random_replace_prob=pr
    )
    cats = token_categories(ids, masked, labels, special, toy_tok.mask_token_id)
    return {c: cats.count(c) for c in ("mask", "random", "kept", "special", "plain")}, ids, special


def test_initial_marker_matches_mask_tokens(toy_tok):
    box = masking_widget(toy_tok, SENTENCES)
    f = marker_fields(shown_marker(box))
    assert (
        f["mlm_probability"],
        f["mask_replace_prob"],
        f["random_replace_prob"],
        f["seed"],
        f["sentence"],
    ) == ("0.15", "0.80", "0.10", "0", "0")
    exp, _, _ = _expected(toy_tok, SENTENCES[0], 0.15, 0.8, 0.1, 0)
    assert int(f["selected"]) == exp["mask"] + exp["random"] + exp["kept"]
    assert (int(f["mask"]), int(f["random"]), int(f["kept"])) == (
        exp["mask"],
        exp["random"],
        exp["kept"],
    )


def test_first_slider_is_mlm_probability_and_one_step_is_0_05(toy_tok):
    box = masking_widget(toy_tok, SENTENCES)
    first = next(c for c in box.children if hasattr(c, "step"))
    assert first.description == "mlm_probability" and first.step == pytest.approx(0.05)
    before = shown_marker(box)
    first.value = first.value + first.step  # what one ArrowRight does in the browser
    after = shown_marker(box)
    assert after != before
    assert "mlm_probability=0.20 " in after
    f = marker_fields(shown_marker(box))
    exp, _, _ = _expected(toy_tok, SENTENCES[0], 0.20, 0.8, 0.1, 0)
    assert int(f["selected"]) == exp["mask"] + exp["random"] + exp["kept"]


def test_extreme_probabilities(toy_tok):
    box = masking_widget(toy_tok, SENTENCES)
    c = box.controls
    c["mlm_probability"].value = 0.0
    assert marker_fields(shown_marker(box))["selected"] == "0"
    c["mlm_probability"].value = 1.0
    _, _, special = _expected(toy_tok, SENTENCES[0], 1.0, 0.8, 0.1, 0)
    assert int(marker_fields(shown_marker(box))["selected"]) == int((~special).sum()), (
        "p = 1 selects every non-special token"
    )
    c["mask_replace_prob"].value = 0.0
    c["random_replace_prob"].value = 0.0
    f = marker_fields(shown_marker(box))
    assert f["mask"] == "0" and f["random"] == "0" and int(f["kept"]) == int((~special).sum())
    c["mask_replace_prob"].value = 1.0
    f = marker_fields(shown_marker(box))
    assert int(f["mask"]) == int((~special).sum()) and f["kept"] == "0"


def test_random_slider_is_capped_by_mask_slider(toy_tok):
    box = masking_widget(toy_tok, SENTENCES)
    c = box.controls
    c["random_replace_prob"].value = 0.2  # max is 1 - 0.8
    assert c["random_replace_prob"].value == pytest.approx(0.2)
    c["mask_replace_prob"].value = 0.95
    assert c["random_replace_prob"].max == pytest.approx(0.05)
    assert c["random_replace_prob"].value == pytest.approx(0.05)
    f = marker_fields(shown_marker(box))
    assert float(f["mask_replace_prob"]) + float(f["random_replace_prob"]) <= 1.0


def test_sentence_and_seed_change_the_table(toy_tok):
    box = masking_widget(toy_tok, SENTENCES, mlm_probability=0.5)
    html0 = shown_html(box)
    box.controls["sentence"].value = 2
    assert marker_fields(shown_marker(box))["sentence"] == "2"
    assert "farmer" in shown_html(box) and "farmer" not in html0
    markers = set()
    for seed in range(6):
        box.controls["seed"].value = seed
        assert marker_fields(shown_marker(box))["seed"] == str(seed)
        markers.add(shown_marker(box))
    assert len(markers) > 1, "different seeds give different draws"


def test_table_shows_labels_and_measured_rates(toy_tok):
    box = masking_widget(toy_tok, SENTENCES, mlm_probability=0.4, n_draws=3000)
    html = shown_html(box)
    assert "labels" in html and "-100" in html and "[CLS]" in html
    assert "measured over 3,000 draws" in html
    rows = dict(
        re.findall(
            r"<th[^>]*>([^<]+)</th><td[^>]*>[^<]*<span[^>]*>[^<]*</span></td><td[^>]*>([0-9.]+)</td>",
            html,
        )
    )
    assert abs(float(rows["selected (of eligible tokens)"]) - 0.4) < 0.03
    assert abs(float(rows["[MASK] (of selected)"]) - 0.8) < 0.03


def test_measure_rates_match_requested(toy_tok):
    ids = torch.tensor(toy_tok(SENTENCES[1])["input_ids"])
    special = torch.isin(ids, torch.tensor(toy_tok.all_special_ids))
    r = measure_rates(
        ids,
        special,
        mask_token_id=toy_tok.mask_token_id,
        vocab_size=len(toy_tok),
        mlm_probability=0.3,
        mask_replace_prob=0.5,
        random_replace_prob=0.3,
        n_draws=4000,
        seed=1,
    )
    assert abs(r["selected"] - 0.3) < 0.02
    assert (
        abs(r["mask"] - 0.5) < 0.03
        and abs(r["random"] - 0.3) < 0.03
        and abs(r["kept"] - 0.2) < 0.03
    )
    assert r["mask"] + r["random"] + r["kept"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="n_draws"):
        measure_rates(
            ids,
            special,
            mask_token_id=4,
            vocab_size=len(toy_tok),
            mlm_probability=0.1,
            mask_replace_prob=0.8,
            random_replace_prob=0.1,
            n_draws=0,
        )


def test_binomial_pmf():
    pmf = binomial_pmf(20, 0.15)
    assert sum(pmf) == pytest.approx(1.0) and pmf[3] == pytest.approx(0.2428, abs=1e-4)
    assert binomial_pmf(3, 0.0) == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        binomial_pmf(-1, 0.5)


def test_bad_arguments(toy_tok):
    with pytest.raises(ValueError, match="sentences"):
        masking_widget(toy_tok, [])
    with pytest.raises(ValueError, match="sentences"):
        masking_widget(toy_tok, "one sentence")
    with pytest.raises(TypeError, match="sentences"):
        masking_widget(toy_tok, ["ok", ""])
    with pytest.raises(ValueError, match="n_draws"):
        masking_widget(toy_tok, SENTENCES, n_draws=0)
    with pytest.raises(ValueError, match="mask_token_id"):
        masking_widget(object(), SENTENCES)

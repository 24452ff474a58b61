"""Lesson 05 widget: the NSP pair browser reacts to its sliders; its helpers read pairs right."""

from __future__ import annotations

import re

import pytest
import torch
from _pair_data import CLS, IDS, PAD, SEP, make_docs
from _widgets import marker_fields, shown_html, shown_marker

from lmlessons import make_nsp_pairs, make_sop_pairs
from lmlessons.widgets.display import COLORS
from lmlessons.widgets.nsp import (
    DocumentIndex,
    label_name,
    nsp_marker,
    nsp_pair_widget,
    pair_segments,
    pair_table_html,
    segment_colors,
)


class _Tok:
    """A stand-in tokenizer: id -> "t<id>" (no files needed)."""

    pad_token_id, cls_token_id, sep_token_id = PAD, CLS, SEP

    def convert_ids_to_tokens(self, ids):
        names = {PAD: "[PAD]", CLS: "[CLS]", SEP: "[SEP]"}
        return [names.get(i, f"t{i}") for i in ids]

    def decode(self, ids):
        return " ".join(self.convert_ids_to_tokens(ids))


def _docs(n_docs=30, seed=0):
    return make_docs(n_docs, seed, min_sent=2, min_len=2)


def _pairs(docs, p=0.5, seed=0, max_length=24):
    return make_nsp_pairs(
        docs,
        **IDS,
        max_length=max_length,
        nsp_probability=p,
        short_seq_prob=0.1,
        generator=torch.Generator().manual_seed(seed),
    )


def test_initial_marker_matches_the_pairs():
    docs = _docs()
    box = nsp_pair_widget(docs, _Tok(), max_length=24, seed=0)
    pairs = _pairs(docs)
    f = marker_fields(shown_marker(box))
    assert f["nsp_probability"] == "0.50" and f["pair"] == "0"
    assert f["label"] == label_name(int(pairs["next_sentence_label"][0]))
    assert f["notnext_rate"] == f"{pairs['next_sentence_label'].float().mean().item():.2f}"
    assert box.sliders[0].description == "nsp_probability"


def test_moving_nsp_probability_rebuilds_the_pairs():
    docs = _docs()
    box = nsp_pair_widget(docs, _Tok(), max_length=24, seed=0)
    p_slider, pair_slider = box.sliders
    before = shown_marker(box)
    p_slider.value = 0.55  # what one ArrowRight press does (step 0.05)
    after = shown_marker(box)
    assert after != before
    expected = _pairs(docs, p=0.55)
    f = marker_fields(after)
    assert f["nsp_probability"] == "0.55"
    assert f["notnext_rate"] == f"{expected['next_sentence_label'].float().mean().item():.2f}"
    assert f["label"] == label_name(int(expected["next_sentence_label"][pair_slider.value]))
    assert pair_slider.max == expected["input_ids"].shape[0] - 1
    for p, rate in ((0.0, "0.00"), (1.0, "1.00")):
        p_slider.value = p
        assert marker_fields(shown_marker(box))["notnext_rate"] == rate
        assert ("B comes from another document" in shown_html(box)) == (p == 1.0)


def test_pair_slider_shows_that_pair():
    docs = _docs()
    box = nsp_pair_widget(docs, _Tok(), max_length=24, seed=3)
    pairs = _pairs(docs, seed=3)
    _, pair_slider = box.sliders
    for index in (1, 5, pair_slider.max):
        pair_slider.value = index
        f = marker_fields(shown_marker(box))
        assert f["pair"] == str(index)
        assert f["label"] == label_name(int(pairs["next_sentence_label"][index]))
        a, b = pair_segments(pairs, index)
        assert _Tok().decode(a) in shown_html(box) and _Tok().decode(b) in shown_html(box)


def test_pair_index_is_clamped_when_fewer_pairs():
    docs = _docs()
    box = nsp_pair_widget(docs, _Tok(), max_length=24, seed=0)
    p_slider, pair_slider = box.sliders
    sizes = {p: _pairs(docs, p=p)["input_ids"].shape[0] for p in (0.0, 1.0)}
    small, large = sorted(sizes, key=sizes.get)
    p_slider.value = large
    pair_slider.value = pair_slider.max
    p_slider.value = small
    assert pair_slider.value <= sizes[small] - 1
    assert marker_fields(shown_marker(box))["pair"] == str(pair_slider.value)


def test_topics_are_shown_when_given():
    docs = _docs(12)
    topics = ["sea" if d % 2 else "space" for d in range(12)]
    box = nsp_pair_widget(docs, _Tok(), topics=topics, max_length=24, seed=0, nsp_probability=1.0)
    html = shown_html(box)
    assert re.search(r"A from document \d+ \((sea|space)\)", html)
    assert re.search(r"B from document \d+ \((sea|space)\)", html)


def test_pair_segments_and_colors():
    docs = _docs()
    pairs = _pairs(docs)
    for row in range(pairs["input_ids"].shape[0]):
        a, b = pair_segments(pairs, row)
        n = int(pairs["attention_mask"][row].sum())
        assert pairs["input_ids"][row, :n].tolist() == [CLS, *a, SEP, *b, SEP]
        colors = segment_colors(pairs, row)
        assert colors[0] == colors[len(a) + 1] == colors[n - 1] == COLORS["special"]
        assert colors[1 : len(a) + 1] == [COLORS["segment_a"]] * len(a)
        assert colors[len(a) + 2 : n - 1] == [COLORS["segment_b"]] * len(b)
        assert colors[n:] == [COLORS["ignored"]] * (len(colors) - n)


def test_document_index_finds_sources():
    docs = _docs()
    index = DocumentIndex(docs)
    pairs = _pairs(docs)
    for row in range(pairs["input_ids"].shape[0]):
        a, b = pair_segments(pairs, row)
        da, db = index.find(a), index.find(b)
        assert da == [a[0] // 1000 - 1] and db == [b[0] // 1000 - 1]
        assert (da == db) == (int(pairs["next_sentence_label"][row]) == 0)
    assert index.find([5, 6, 7]) == []
    with pytest.raises(ValueError, match="segment"):
        index.find([])


def test_pair_table_html_captions():
    docs = _docs()
    html = pair_table_html(_Tok(), _pairs(docs), 0)
    assert (
        "next_sentence_label = " in html and "token_type_ids" in html and "attention_mask" in html
    )
    sop = make_sop_pairs(
        docs,
        **IDS,
        max_length=24,
        swap_probability=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert "sentence_order_label = 1 (swapped)" in pair_table_html(
        _Tok(), sop, 0, label_key="sentence_order_label"
    )
    narrow = pair_table_html(_Tok(), _pairs(docs), 0, show_padding=False)
    assert "[PAD]" not in narrow


def test_marker_and_bad_input():
    assert (
        nsp_marker(0.5, 3, 1, 0.4812)
        == "nsp_probability=0.50 pair=3 label=NotNext notnext_rate=0.48"
    )
    with pytest.raises(ValueError, match="label"):
        label_name(2)
    with pytest.raises(ValueError, match="index"):
        pair_segments(_pairs(_docs()), 10_000)
    with pytest.raises(ValueError, match="nsp_probability"):
        nsp_pair_widget(_docs(), _Tok(), nsp_probability=1.5)
    with pytest.raises(ValueError, match="topics"):
        nsp_pair_widget(_docs(5), _Tok(), topics=["a"])
    with pytest.raises(ValueError, match="cls_token_id"):
        nsp_pair_widget(_docs(), object())

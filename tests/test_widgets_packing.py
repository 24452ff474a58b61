"""Lesson 09's packed-batch widget and padding plot: set the controls' values, check what the
output shows (state, table, heatmap), and the helpers by hand."""

from __future__ import annotations

import base64

import matplotlib
import pytest
import torch
from _widgets import marker_fields, shown_html, shown_marker, shown_png

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from lmlessons._checks import IGNORE_INDEX
from lmlessons.widgets.packing import (
    LAYOUTS,
    packed_batch,
    packing_view,
    packing_widget,
    padding_share,
    plot_padding_share,
)

TEXTS = ["The dog ran home.", "Rain fell all day.", "The sea was calm and blue."]


@pytest.fixture(scope="module")
def docs(tok):
    return [tok(t)["input_ids"] for t in TEXTS]  # 7, 8 and 9 tokens


def test_packed_batch_layouts(docs):
    flat, leak, grouped = (packed_batch(docs, name) for name in ("flattened", "leaking", "grouped"))
    n = sum(map(len, docs))
    for batch in (flat, leak, grouped):
        assert batch["input_ids"].shape == (n,) and batch["attention"].shape == (n, n)
        assert torch.equal(batch["input_ids"], flat["input_ids"])  # the same tokens
    # flattened: positions restart, no target across a boundary, block-diagonal attention
    assert flat["position_ids"].tolist()[:9] == [0, 1, 2, 3, 4, 5, 6, 0, 1]
    assert flat["targets"][6].item() == IGNORE_INDEX  # the first [SEP] learns nothing
    assert not bool(flat["attention"][7, :7].any())  # document 1 sees nothing of document 0
    # leaking: the same positions and targets, plain causal attention
    assert torch.equal(leak["targets"], flat["targets"])
    assert torch.equal(leak["position_ids"], flat["position_ids"])
    assert torch.equal(leak["attention"], torch.ones(n, n, dtype=torch.bool).tril())
    # grouped: positions run on, the [SEP] learns the next document's first token
    assert grouped["position_ids"].tolist() == list(range(n))
    assert grouped["targets"][6].item() == docs[1][0]
    with pytest.raises(ValueError, match="layout"):
        packed_batch(docs, "padded")


def test_packing_view_at_a_boundary(docs):
    flat, leak = packed_batch(docs, "flattened"), packed_batch(docs, "leaking")
    first_of_third = len(docs[0]) + len(docs[1]) + 1  # the second token of document 2
    view = packing_view(flat, first_of_third)
    assert view["document"] == 2 and view["sees"] == 2 and not view["sees_other_documents"]
    leaky = packing_view(leak, first_of_third)
    assert leaky["sees"] == first_of_third + 1 and leaky["sees_other_documents"]
    with pytest.raises(ValueError, match="position"):
        packing_view(flat, 99)


def test_widget_moves_and_shows_its_state(docs, tok):
    box = packing_widget(docs, tok, layout="flattened", position=9)
    fields = marker_fields(shown_marker(box))
    assert fields == {
        "layout": "flattened",
        "position": "9",
        "document": "1",
        "sees": "3",
        "target": str(tok.convert_tokens_to_ids("##ll")),
        "sees_other_documents": "False",
    }
    html = shown_html(box)
    assert ">position_ids</th>" in html and ">target (t + 1)</th>" in html
    assert html.count(">-100</td>") == 3  # each document's [SEP] learns nothing
    assert base64.b64decode(shown_png(box))[:8] == b"\x89PNG\r\n\x1a\n"

    box.controls["layout"].value = "leaking"
    fields = marker_fields(shown_marker(box))
    assert fields["sees"] == "10" and fields["sees_other_documents"] == "True"
    box.controls["layout"].value = "grouped"
    box.controls["position"].value = 6
    fields = marker_fields(shown_marker(box))
    assert fields["target"] == str(tok.cls_token_id)  # [SEP] -> the next document's [CLS]
    assert shown_html(box).count(">-100</td>") == 1  # only the very last position
    page = box._repr_mimebundle_()["text/html"]  # the kernel-free picture follows the widget
    assert LAYOUTS["grouped"] in page and "lmlessons-state" not in page


def test_widget_without_heatmap_and_bad_layout(docs, tok):
    box = packing_widget(docs, tok, heatmap=False)
    assert shown_png(box) == ""
    assert marker_fields(shown_marker(box))["position"] == str(len(docs[0]))
    with pytest.raises(ValueError, match="layout"):
        packing_widget(docs, tok, layout="stacked")


def test_padding_share_by_hand():
    assert padding_share([3, 5, 2, 8], 1) == 0.0
    assert padding_share([3, 5, 2, 8], 2) == pytest.approx(1 - 18 / (2 * 5 + 2 * 8))
    assert padding_share([4, 4, 4], 3) == 0.0
    assert padding_share([1, 9], 5) == pytest.approx(1 - 10 / 18)  # one short last batch
    with pytest.raises(ValueError, match="batch_size"):
        padding_share([1], 0)
    with pytest.raises(ValueError, match="lengths"):
        padding_share([], 2)


def test_plot_padding_share():
    fig, ax = plt.subplots()
    plot_padding_share(ax, {"a": [3, 9, 1, 7], "sorted": [1, 3, 7, 9]}, [1, 2, 4])
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["a", "sorted"]
    assert list(lines[0].get_ydata()) == [100 * padding_share([3, 9, 1, 7], b) for b in (1, 2, 4)]
    plt.close(fig)


def _verdicts(defaults: dict[str, str]) -> dict[tuple, str]:
    """Lesson 09's 32 verdicts: the asked setting (default cache, no mask, position_ids) per
    attention from ``defaults``, use_cache=False without a mask with position_ids "equal", the
    rest "LEAKS"."""
    from itertools import product

    out = {}
    for mode, cache, mask, attn, given in product(
        ("train", "eval"), ("default", False), (None, "ones"), ("eager", "sdpa"), (True, False)
    ):
        if cache == "default" and mask is None and given:
            out[mode, cache, mask, attn, given] = defaults[attn]
        else:
            out[mode, cache, mask, attn, given] = (
                "equal" if cache is False and mask is None and given else "LEAKS"
            )
    return out


def test_leak_reveal_reads_the_verdicts():
    from lmlessons.widgets.packing import LEAK_CHOICES, leak_reveal

    answer, why = leak_reveal(_verdicts({"eager": "LEAKS", "sdpa": "LEAKS"}))
    assert answer == LEAK_CHOICES[1] and "4 of the 32 cells" in why
    assert leak_reveal(_verdicts({"eager": "equal", "sdpa": "equal"}))[0] == LEAK_CHOICES[0]
    assert leak_reveal(_verdicts({"eager": "LEAKS", "sdpa": "equal"}))[0] == LEAK_CHOICES[2]
    with pytest.raises(ValueError, match="no choice"):
        leak_reveal(_verdicts({"eager": "equal", "sdpa": "LEAKS"}))
    mixed = _verdicts({"eager": "LEAKS", "sdpa": "LEAKS"})
    mixed["train", "default", None, "eager", True] = "equal"  # train and eval disagree
    with pytest.raises(ValueError, match="one verdict"):
        leak_reveal(mixed)
    with pytest.raises(ValueError, match="'equal' or 'LEAKS'"):
        leak_reveal({("train", "default", None, "eager", True): "maybe"})


def test_bpb_reveal_names_the_better_model():
    from lmlessons.widgets.packing import BPB_CHOICES, bpb_reveal

    answer, why = bpb_reveal({"course GPT-2": 2.08, "character bigram": 3.38}, 26728, 4.2)
    assert answer == BPB_CHOICES[1] and "2.08" in why and "26,728" in why
    assert bpb_reveal({"course GPT-2": 4.0, "character bigram": 3.0}, 10, 4.0)[0] == BPB_CHOICES[0]

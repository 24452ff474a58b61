"""Lesson 14: the routing widget over tiny MoE models (untrained, built from configs)."""

from __future__ import annotations

import html

import matplotlib
import pytest
import torch
from _widgets import marker_fields, shown_html, shown_marker, shown_png

matplotlib.use("Agg")

from lmlessons.course.models import tiny_mixtral
from lmlessons.course.moe_runs import route_sentence, use_biased_routers
from lmlessons.widgets.moe import load_bars, routing_state, routing_table, routing_widget

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32)
TEXT = "rain falls on the roof of the old barn"


@pytest.fixture(scope="module")
def models(tok):
    """Two tiny Mixtrals of different seeds; the second's routers biased to expert 3."""
    plain = tiny_mixtral(tok, seed=0, **SMALL)
    biased = tiny_mixtral(tok, seed=1, **SMALL)
    for router in use_biased_routers(biased):
        router.expert_bias = torch.tensor([0.0, 0.0, 0.0, 5.0])  # expert 3 wins every token
    return {"plain": plain, "biased": biased}


def _loads(box) -> dict[str, list[int]]:
    """The loads the widget's text shows: ``layer 0: 3, 1, ...; layer 1: ...``."""
    plain = "\n".join(o["data"].get("text/plain", "") for o in box.output.outputs if "data" in o)
    text = plain.split("tokens routed to each expert: ", 1)[1].splitlines()[0]
    layers = (part.split(": ") for part in text.split("; "))
    return {name.replace(" ", ""): [int(v) for v in loads.split(", ")] for name, loads in layers}


def test_the_widget_shows_the_loads_route_sentence_measures(models, tok) -> None:
    box = routing_widget(models, tok, text=TEXT)
    routed = route_sentence(models["plain"], tok, TEXT)
    state = shown_marker(box)
    assert marker_fields(state)["model"] == "plain"
    assert int(marker_fields(state)["tokens"]) == len(routed["tokens"])
    assert _loads(box) == {f"layer{i}": ly["load"] for i, ly in enumerate(routed["layers"])}
    assert state == routing_state("plain", routed) == f"model=plain tokens={len(routed['tokens'])}"
    markup = html.unescape(shown_html(box))
    assert all(t in markup for t in ("barn", "layer 0", "layer 1", "first expert 3"))
    assert shown_png(box)


def test_switching_the_model_and_the_sentence_redraws(models, tok) -> None:
    box = routing_widget(models, tok, text=TEXT)
    box.controls["model"].value = "biased"
    loads = _loads(box)
    tokens = int(marker_fields(shown_marker(box))["tokens"])
    assert all(layer[3] == tokens for layer in loads.values())  # the bias sends every token to 3
    box.controls["sentence"].value = "the sea is cold"
    fields = marker_fields(shown_marker(box))
    assert fields["model"] == "biased"
    assert int(fields["tokens"]) == len(tok("the sea is cold")["input_ids"])
    assert ">sea<" in html.unescape(shown_html(box))
    assert "model=biased" in box.static_text() and "sea" in box.static_html()


def test_an_empty_sentence_asks_for_one(models, tok) -> None:
    box = routing_widget(models, tok, text="   ")
    assert marker_fields(shown_marker(box)) == {"model": "plain", "tokens": "0"}
    assert not shown_png(box)


def test_the_table_orders_each_tokens_experts_by_gate_weight() -> None:
    routed = {
        "tokens": ["[CLS]", "sea"],
        "layers": [{"experts": [[0, 2], [3, 1]], "weights": [[0.3, 0.7], [0.6, 0.4]],
                    "load": [1, 1, 1, 1]}],
    }  # fmt: skip
    markup = routing_table(routed)
    assert ">2+0<" in markup and ">3+1<" in markup
    fig = load_bars(routed)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == pytest.approx([0.25] * 4)


def test_bad_arguments_are_named(models, tok) -> None:
    with pytest.raises(ValueError, match="models must be"):
        routing_widget({}, tok)
    with pytest.raises(ValueError, match="without spaces"):
        routing_widget({"no balancing": models["plain"]}, tok)
    with pytest.raises(ValueError, match="model must be one of"):
        routing_widget(models, tok, model="other")
    with pytest.raises(TypeError, match="text must be a str"):
        routing_widget(models, tok, text=3)  # type: ignore[arg-type]

"""Lesson 14 (router losses): where one sentence's tokens go in a tiny mixture of experts.

:func:`routing_widget` routes a typed sentence through one of several trained MoE models
(:func:`lmlessons.course.moe_runs.route_sentence`) and shows, for the model picked, each token's
experts in every layer (a token table, coloured by the token's first expert) and each expert's
load per layer (a bar chart against the even share). It is a
:class:`~lmlessons.widgets.base.LessonWidget`: a viewer without a kernel sees its picture.
Its hidden state: ``model=none tokens=9 layer0=5,4,6,3 layer1=...`` (each layer's load, the
tokens routed to each expert).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import torch

from lmlessons.course.moe_runs import route_sentence
from lmlessons.widgets.base import LessonWidget
from lmlessons.widgets.display import (
    OutputRecord,
    figure_png,
    html_output,
    new_figure,
    png_output,
    state_output,
    stream,
    token_table_html,
)

__all__ = ["EXPERT_COLORS", "routing_state", "routing_table", "load_bars", "routing_widget"]

#: One light background per expert (dark text stays readable on each), cycled past four.
EXPERT_COLORS = ("#a6cee3", "#fdbf6f", "#b2df8a", "#cab2d6", "#fb9a99", "#d9d9d9")
_STYLE = {"description_width": "80px"}


def routing_state(name: str, routed: Mapping[str, Any]) -> str:
    """The widget's hidden state for model ``name`` and :func:`route_sentence`'s ``routed``:
    ``model=<name> tokens=<T>``. The loads are left out: a trained model's routing depends on
    the last digits of its float sums, so they differ between CPUs; the picture and its text
    show them."""
    return f"model={name} tokens={len(routed['tokens'])}"


def routing_table(routed: Mapping[str, Any]) -> str:
    """Each token's experts per layer (``"2+0"``: experts 2 and 0, the first with the larger
    gate weight), each cell coloured by its first expert, as a token table's HTML."""
    rows: dict[str, list[object]] = {"token": list(routed["tokens"])}
    colors: dict[str, list[str | None]] = {}
    for i, layer in enumerate(routed["layers"]):
        order = [
            sorted(zip(weights, experts), reverse=True)
            for experts, weights in zip(layer["experts"], layer["weights"])
        ]
        rows[f"layer {i}"] = ["+".join(str(e) for _, e in pairs) for pairs in order]
        colors[f"layer {i}"] = [EXPERT_COLORS[pairs[0][1] % len(EXPERT_COLORS)] for pairs in order]
    num_experts = len(routed["layers"][0]["load"])
    legend = {
        f"first expert {e}": EXPERT_COLORS[e % len(EXPERT_COLORS)] for e in range(num_experts)
    }
    return token_table_html(
        rows, colors=colors, caption="each token's experts, per layer", legend=legend
    )


def load_bars(routed: Mapping[str, Any]) -> Any:
    """A bar per expert and layer: its share of the sentence's routed tokens (the loads over
    their sum); the dashed line is the even share, 1 / E."""
    loads = torch.tensor([layer["load"] for layer in routed["layers"]], dtype=torch.float64)
    shares = loads / loads.sum(dim=-1, keepdim=True)  # (L, E)
    num_layers, num_experts = shares.shape
    fig = new_figure(4.6, 2.4)
    ax = fig.subplots(1, 1)
    width = 0.8 / num_layers
    for layer in range(num_layers):
        xs = [e + (layer - (num_layers - 1) / 2) * width for e in range(num_experts)]
        hatch = "//" if layer % 2 else None  # a second cue beside the colour
        ax.bar(xs, shares[layer].tolist(), width, color=f"C{layer}", hatch=hatch,
               label=f"layer {layer}")  # fmt: skip
    ax.axhline(1 / num_experts, color="gray", ls="--", lw=0.8)
    ax.set_xticks(range(num_experts))
    ax.set_xlabel("expert")
    ax.set_ylabel("share of routed tokens")
    ax.legend(fontsize=7)
    return fig


def _outputs(name: str, model: Any, tokenizer: Any, text: str) -> tuple[OutputRecord, ...]:
    if not text.strip():
        return state_output(f"model={name} tokens=0"), stream("Type a sentence and press Enter.")
    routed = route_sentence(model, tokenizer, text)
    loads = "; ".join(
        f"layer {i}: " + ", ".join(str(v) for v in layer["load"])
        for i, layer in enumerate(routed["layers"])
    )
    alt = f"each expert's share of the sentence's routed tokens per layer ({name}: {loads})"
    return (
        state_output(routing_state(name, routed)),
        html_output(routing_table(routed), plain=f"tokens routed to each expert: {loads}"),
        png_output(figure_png(load_bars(routed)), alt),
    )


def _check_models(models: object) -> dict[str, Any]:
    if not isinstance(models, Mapping) or not models:
        raise ValueError("models must be a non-empty mapping of names to MoE models")
    for name in models:
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ValueError(f"models' names must be non-empty and without spaces, got {name!r}")
    return dict(models)


def routing_widget(
    models: Mapping[str, Any],
    tokenizer: Any,
    *,
    text: str = "the farmer feeds the hens before school",
    model: str | None = None,
) -> LessonWidget:
    """A toggle over ``models`` (name -> a Mixtral-style MoE) and a Text box (press Enter):
    where the typed sentence's tokens go in the model picked (:func:`routing_table`) and each
    expert's load per layer (:func:`load_bars`). ``model``: the one shown first (default: the
    first). Its hidden state is :func:`routing_state`."""
    named = _check_models(models)
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    first = next(iter(named)) if model is None else model
    if first not in named:
        raise ValueError(f"model must be one of {list(named)}, got {first!r}")
    controls: dict[str, widgets.ValueWidget] = {
        "model": widgets.ToggleButtons(
            options=list(named), value=first, description="model", style=_STYLE
        ),
        "sentence": widgets.Text(
            value=text,
            description="sentence",
            continuous_update=False,
            style=_STYLE,
            layout=widgets.Layout(width="640px"),
        ),
    }

    def draw() -> Sequence[OutputRecord]:
        name = str(controls["model"].value)
        return _outputs(name, named[name], tokenizer, str(controls["sentence"].value))

    return LessonWidget(controls, draw)

"""Lesson 06 (the combined loss): what ``mlm_weight`` and ``nsp_weight`` do to the gradient.

BERT's loss is ``mlm_weight * MLM + nsp_weight * NSP`` (both weights 1 in BERT and
``BertForPreTraining``). The gradient is linear in the weights,
``g = mlm_weight * g_mlm + nsp_weight * g_nsp``, so :func:`term_gradients` computes ``g_mlm`` and
``g_nsp`` once on a fixed batch (two backward passes) and every slider move is then exact and
instant: ``|g|^2 = a^2 |g_mlm|^2 + 2ab <g_mlm, g_nsp> + b^2 |g_nsp|^2``.

:func:`loss_weights_widget` shows the weighted loss, each term's share of it, each term's share
of the gradient norm on the shared encoder (``model.base_model``: embeddings, layers, pooler;
the part both heads pull on) and the cosine between the two gradients. Every redraw writes one
hidden state, e.g. ``mlm_weight=1.00 nsp_weight=1.00 loss=8.567 mlm_grad_share=0.998``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import ipywidgets as widgets
import torch
from transformers import PreTrainedModel

from lmlessons._checks import check_real
from lmlessons.course.palette import ink_on
from lmlessons.losses import mlm_loss, nsp_loss
from lmlessons.shifting import num_targets
from lmlessons.widgets.base import LessonWidget, float_slider
from lmlessons.widgets.display import OutputRecord, html_output, state_output

__all__ = [
    "TermGradients",
    "term_gradients",
    "weighted_terms",
    "pretraining_marker",
    "LossWeightsWidget",
    "loss_weights_widget",
]

_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class TermGradients:
    """The two terms of BERT's loss on one batch and the geometry of their gradients.

    ``mlm_loss`` is a mean over ``num_masked`` masked tokens, ``nsp_loss`` a mean over
    ``num_sequences`` sequences. ``mlm_sq = |g_mlm|^2``, ``nsp_sq = |g_nsp|^2`` and
    ``dot = <g_mlm, g_nsp>`` over the chosen parameters (``num_parameters`` numbers).
    """

    mlm_loss: float
    nsp_loss: float
    mlm_sq: float
    nsp_sq: float
    dot: float
    num_masked: int
    num_sequences: int
    num_parameters: int

    @property
    def cosine(self) -> float:
        """Cosine between ``g_mlm`` and ``g_nsp`` (0 when one of them is zero)."""
        denom = math.sqrt(self.mlm_sq * self.nsp_sq)
        return self.dot / denom if denom > 0 else 0.0


def _flat_gradient(
    grads: tuple[torch.Tensor | None, ...], params: list[torch.nn.Parameter]
) -> torch.Tensor:
    """One float64 vector ``(P,)`` of ``grads``, zeros where a parameter got no gradient."""
    return torch.cat(
        [
            (g if g is not None else torch.zeros_like(p)).reshape(-1).double()
            for g, p in zip(grads, params)
        ]
    )


def term_gradients(
    model: PreTrainedModel,
    batch: Mapping[str, torch.Tensor],
    *,
    parameters: Iterable[torch.nn.Parameter] | None = None,
) -> TermGradients:
    """Gradients of the MLM term and the NSP term of a ``BertForPreTraining`` on ``batch``.

    Args:
        model: a ``BertForPreTraining``
            (e.g. :func:`lmlessons.course.models.tiny_bert_pretraining`).
        batch: ``input_ids``, ``token_type_ids``, ``attention_mask``, ``labels`` (-100 where not
            masked) and ``next_sentence_label`` (0 = IsNext), e.g. from
            :func:`lmlessons.course.batches.nsp_batches`.
        parameters: where to measure the gradients; default ``model.base_model.parameters()``
            (the encoder both heads share).

    The model's ``.grad`` fields are not touched (``torch.autograd.grad``).
    """
    for key in ("input_ids", "labels", "next_sentence_label"):
        if key not in batch:
            raise ValueError(
                f"batch must hold {key!r} (e.g. from lmlessons.course.batches.nsp_batches)"
            )
    chosen = model.base_model.parameters() if parameters is None else parameters
    params = [p for p in chosen if p.requires_grad]
    if not params:
        raise ValueError("parameters holds no trainable parameter")
    out = model(**{k: batch[k] for k in _MODEL_INPUTS if k in batch})
    mlm = mlm_loss(out.prediction_logits, batch["labels"])  # (B, T, V) -> (): masked tokens
    nsp = nsp_loss(out.seq_relationship_logits, batch["next_sentence_label"])  # (B, 2) -> ()
    g_mlm = torch.autograd.grad(mlm, params, retain_graph=True, allow_unused=True)
    g_nsp = torch.autograd.grad(nsp, params, allow_unused=True)
    gm, gn = _flat_gradient(g_mlm, params), _flat_gradient(g_nsp, params)  # (P,), (P,)
    return TermGradients(
        mlm_loss=mlm.item(),
        nsp_loss=nsp.item(),
        mlm_sq=float(gm @ gm),
        nsp_sq=float(gn @ gn),
        dot=float(gm @ gn),
        num_masked=int(num_targets(batch["labels"]).sum()),
        num_sequences=int(batch["input_ids"].shape[0]),
        num_parameters=int(gm.numel()),
    )


def weighted_terms(terms: TermGradients, mlm_weight: float, nsp_weight: float) -> dict[str, float]:
    """Loss and gradient norms for ``mlm_weight * MLM + nsp_weight * NSP``.

    Returns ``loss``, ``mlm_part`` / ``nsp_part`` (the weighted terms), ``grad_norm`` (of the
    sum), ``mlm_grad_norm`` / ``nsp_grad_norm`` (of each weighted term) and ``mlm_grad_share``
    = ``|a g_mlm| / (|a g_mlm| + |b g_nsp|)`` (0.5 when both are zero), ``nsp_grad_share`` = 1 - it.
    """
    a, b = check_real("mlm_weight", mlm_weight), check_real("nsp_weight", nsp_weight)
    m_norm, n_norm = a * math.sqrt(terms.mlm_sq), b * math.sqrt(terms.nsp_sq)
    total_sq = a * a * terms.mlm_sq + 2 * a * b * terms.dot + b * b * terms.nsp_sq
    share = m_norm / (m_norm + n_norm) if m_norm + n_norm > 0 else 0.5
    return {
        "loss": a * terms.mlm_loss + b * terms.nsp_loss,
        "mlm_part": a * terms.mlm_loss,
        "nsp_part": b * terms.nsp_loss,
        "grad_norm": math.sqrt(max(total_sq, 0.0)),
        "mlm_grad_norm": m_norm,
        "nsp_grad_norm": n_norm,
        "mlm_grad_share": share,
        "nsp_grad_share": 1.0 - share,
    }


def pretraining_marker(mlm_weight: float, nsp_weight: float, result: Mapping[str, float]) -> str:
    """The widget's deterministic state line (what a browser test waits for)."""
    return (
        f"mlm_weight={mlm_weight:.2f} nsp_weight={nsp_weight:.2f} "
        f"loss={result['loss']:.3f} mlm_grad_share={result['mlm_grad_share']:.3f}"
    )


#: Below this share (in %) a bar is too short for its label: the label goes beside the bar.
_SHORT_PCT = 15.0


def _bar(parts: list[tuple[str, float, str]], title: str) -> str:
    """A 100% bar split by ``parts`` ``(name, value, colour)``; each segment is labelled
    ``name pct%`` inside it, or, when it is shorter than ``_SHORT_PCT``, beside the bar with a
    swatch of its colour (so no label is clipped)."""
    total = sum(v for _, v, _ in parts)
    cells, outside = [], []
    for name, value, color in parts:
        pct = 100.0 * value / total if total > 0 else 0.0
        label = f"{name} {pct:.0f}%"
        inside = pct >= _SHORT_PCT
        cells.append(
            f'<div title="{label}" style="width:{pct:.1f}%;{ink_on(color)}height:18px;'
            "line-height:18px;vertical-align:top;display:inline-block;font-size:11px;"
            'overflow:hidden;white-space:nowrap">'
            f"{'&nbsp;' + label if inside else ''}</div>"
        )
        if not inside:
            outside.append(
                '<span style="font-size:11px;margin-left:6px;white-space:nowrap">'
                f'<span style="background:{color};border:1px solid #bbb;display:inline-block;'
                f'width:10px;height:10px;margin-right:3px"></span>{label}</span>'
            )
    return (
        f'<div style="margin:4px 0"><div style="font-size:12px">{title}</div>'
        '<div style="display:flex;align-items:center">'
        '<div style="width:420px;flex:none;border:1px solid #bbb;line-height:0">'
        f"{''.join(cells)}</div>{''.join(outside)}</div></div>"
    )


_MLM_COLOR, _NSP_COLOR = "#f4a582", "#92c5de"


def _weights_body(terms: TermGradients, a: float, b: float, r: Mapping[str, float]) -> str:
    """The loss and gradient norms in words, and the two share bars, for weights ``a``, ``b``."""
    text = (
        '<div style="font-size:12px;font-family:monospace">'
        f"loss = {a:.2f} x {terms.mlm_loss:.4f} (MLM, mean over {terms.num_masked} masked "
        f"tokens) + {b:.2f} x {terms.nsp_loss:.4f} (NSP, mean over {terms.num_sequences} "
        f"sequences) = {r['loss']:.4f}<br>"
        f"encoder gradient norm = {r['grad_norm']:.4f} (MLM term {r['mlm_grad_norm']:.4f}, "
        f"NSP term {r['nsp_grad_norm']:.4f}, cosine between them {terms.cosine:+.3f})</div>"
    )
    loss_bar = _bar(
        [("MLM", r["mlm_part"], _MLM_COLOR), ("NSP", r["nsp_part"], _NSP_COLOR)],
        "share of the loss",
    )
    grad_bar = _bar(
        [("MLM", r["mlm_grad_norm"], _MLM_COLOR), ("NSP", r["nsp_grad_norm"], _NSP_COLOR)],
        "share of the gradient norm (encoder)",
    )
    return text + loss_bar + grad_bar


#: The nsp_weight slider's range: 0.1 to ``max_nsp_weight`` on a log scale (balancing the two
#: gradient norms on the course's model takes an nsp_weight of several hundred).
MIN_NSP_WEIGHT = 0.1


def _weight_slider(name: str, value: float, max_weight: float) -> widgets.FloatSlider:
    style = {"description_width": "initial"}
    return float_slider(name, value, max_weight, step=0.1, continuous_update=False, style=style)


def _log_weight_slider(name: str, value: float, max_weight: float) -> widgets.FloatLogSlider:
    """A slider from ``MIN_NSP_WEIGHT`` to ``max_weight`` on a log10 scale (20 steps a decade)."""
    return widgets.FloatLogSlider(
        value=value,
        base=10,
        min=math.log10(MIN_NSP_WEIGHT),
        max=math.log10(max_weight),
        step=0.05,
        description=name,
        readout_format=".3g",
        continuous_update=False,
        style={"description_width": "initial"},
    )


def _weights_outputs(terms: TermGradients, a: float, b: float) -> tuple[OutputRecord, ...]:
    r = weighted_terms(terms, a, b)
    marker = pretraining_marker(a, b, r)
    return html_output(_weights_body(terms, a, b, r), plain=marker), state_output(marker)


class LossWeightsWidget(LessonWidget):
    """:func:`loss_weights_widget`'s box; ``.sliders`` is ``(mlm_weight, nsp_weight)`` and
    ``.terms`` the :class:`TermGradients` it shows."""

    def __init__(
        self,
        terms: TermGradients,
        mlm_weight: float,
        nsp_weight: float,
        top: float,
        nsp_top: float = 1000.0,
    ):
        sliders = {
            "mlm_weight": _weight_slider("mlm_weight", mlm_weight, top),
            "nsp_weight": _log_weight_slider("nsp_weight", nsp_weight, nsp_top),
        }

        def draw() -> tuple[OutputRecord, ...]:
            a, b = sliders["mlm_weight"].value, sliders["nsp_weight"].value
            return _weights_outputs(terms, a, b)

        super().__init__(sliders, draw, rows=[widgets.HBox(list(sliders.values()))])
        self.terms = terms

    @property
    def sliders(self) -> tuple[widgets.FloatSlider, widgets.FloatLogSlider]:
        return self.controls["mlm_weight"], self.controls["nsp_weight"]


def loss_weights_widget(
    terms: TermGradients,
    *,
    mlm_weight: float = 1.0,
    nsp_weight: float = 1.0,
    max_weight: float = 10.0,
    max_nsp_weight: float = 1000.0,
) -> LossWeightsWidget:
    """Sliders for ``mlm_weight`` (the first; 0 to ``max_weight``) and ``nsp_weight`` (0.1 to
    ``max_nsp_weight`` on a log scale), showing the weighted loss and each term's share of the
    loss and of the encoder's gradient norm, for the batch of ``terms`` (from
    :func:`term_gradients`)."""
    if not isinstance(terms, TermGradients):
        raise TypeError(
            f"terms must be a TermGradients (from term_gradients), got {type(terms).__name__}"
        )
    mlm_weight = check_real("mlm_weight", mlm_weight)
    nsp_weight = check_real("nsp_weight", nsp_weight)
    max_weight = check_real("max_weight", max_weight)
    max_nsp_weight = check_real("max_nsp_weight", max_nsp_weight)
    if not max_weight >= max(mlm_weight, 0.1):
        raise ValueError(f"max_weight must be >= mlm_weight and 0.1, got {max_weight}")
    if not MIN_NSP_WEIGHT <= nsp_weight <= max_nsp_weight or max_nsp_weight <= MIN_NSP_WEIGHT:
        raise ValueError(
            f"nsp_weight must be in [{MIN_NSP_WEIGHT}, max_nsp_weight={max_nsp_weight}] "
            f"(a log-scale slider), got {nsp_weight}"
        )
    return LossWeightsWidget(terms, mlm_weight, nsp_weight, max_weight, max_nsp_weight)

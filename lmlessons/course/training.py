"""A small training loop for every model of the course, with a live loss plot in notebooks.

:func:`train` runs AdamW on batches from :mod:`lmlessons.course.batches` for a step budget or a time
budget and returns a :class:`History`. The loss is computed by the package's own functions
(:func:`lmlessons.mlm_loss`, :func:`lmlessons.clm_loss`, :func:`lmlessons.nsp_loss`) from the
model's logits, so it is the loss the lessons derive, for every model:

* ``"mlm"`` (``BertForMaskedLM``): cross-entropy over the masked positions;
* ``"pretraining"`` (``BertForPreTraining``): MLM + NSP, both curves recorded;
* ``"clm"`` (``GPT2LMHeadModel``, ``BertLMHeadModel``): next-token cross-entropy, labels
  shifted inside :func:`lmlessons.clm_loss`.

Gradient accumulation follows transformers' fix of October 2024 (lesson 07): the K micro-batches
of one optimizer step are fetched first, their target tokens counted (``num_items_in_batch``; for
CLM after the shift), and each micro-batch loss is ``sum / num_items_in_batch``. Summed over the K
micro-batches this is exactly the full-batch mean, not the mean of K means.

The options of :func:`train`:

* ``batches``: batch dicts, e.g. ``lmlessons.mlm_batches(corpus, tokenizer)``; one optimizer step
  uses ``grad_accum_steps`` of them and equals one step on their concatenation.
* ``objective``: ``"mlm"``, ``"pretraining"`` (MLM + NSP) or ``"clm"``; None infers it from the
  model class (:func:`infer_objective`).
* ``max_steps``: stop after this many optimizer steps (deterministic given the seeds);
  ``max_seconds``: stop once this much wall time has passed (the number of steps depends on the
  machine). Give either or both; with neither, ``batches`` must be finite.
* ``lr``, ``weight_decay``: AdamW's (ignored when ``optimizer`` is given). 2e-3 suits the tiny
  models (measured: 5e-3 stalls post-LayerNorm BERT at the unigram plateau).
* ``warmup_steps``, ``schedule``: linear warm-up, then ``"constant"``, ``"linear"`` or
  ``"cosine"`` decay to 0 at ``max_steps`` (the decays need ``max_steps``). The warm-up also
  scales the learning rate of an ``optimizer`` you pass.
* ``max_grad_norm``: clip the gradient norm (None: no clipping).
* ``optimizer``: your own optimizer (e.g. to continue training with its state).
* ``sparse_prediction``: for BERT MLM / pretraining models, send only the masked positions
  through the output layer (same loss, about half the time of a step here).
* ``live``: show a tqdm progress bar and, in a notebook, a loss plot redrawn in place every
  ``plot_every`` seconds, titled ``title`` (default: the model class). False shows nothing.
"""

from __future__ import annotations

import io
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX, check_int
from lmlessons.losses import clm_loss, mlm_loss, nsp_loss
from lmlessons.shifting import shift_labels

__all__ = ["History", "train", "evaluate", "infer_objective", "OBJECTIVES"]

OBJECTIVES = ("mlm", "pretraining", "clm")
_REQUIRED_KEYS = {
    "mlm": ("input_ids", "labels"),
    "pretraining": ("input_ids", "labels", "next_sentence_label"),
    "clm": ("input_ids", "labels"),
}
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


# --------------------------------------------------------------------------------------------
# History
# --------------------------------------------------------------------------------------------


@dataclass
class History:
    """What happened at each optimizer step of :func:`train`.

    ``loss`` is the full-batch training loss (MLM + NSP for ``"pretraining"``); ``mlm_loss``,
    ``nsp_loss`` and ``nsp_accuracy`` are filled for ``"pretraining"`` only. ``num_items`` is
    the step's ``num_items_in_batch`` (target tokens), ``tokens_seen`` the running count of
    non-padding input tokens, ``wall_time`` seconds since the start (after the step).
    """

    objective: str
    vocab_size: int
    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    mlm_loss: list[float] = field(default_factory=list)
    nsp_loss: list[float] = field(default_factory=list)
    nsp_accuracy: list[float] = field(default_factory=list)
    num_items: list[int] = field(default_factory=list)
    tokens_seen: list[int] = field(default_factory=list)
    wall_time: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    stopped_by: str = ""

    @property
    def num_steps(self) -> int:
        return len(self.step)

    @property
    def uniform_loss(self) -> float:
        """``ln(vocab_size)``: the loss of a model that spreads its bets evenly over the vocabulary
        (where an untrained model starts)."""
        return math.log(self.vocab_size)

    def final(self, key: str = "loss", window: int = 20) -> float:
        """Mean of the last ``window`` values of ``key`` (a less noisy "final loss")."""
        values = getattr(self, key)
        if not isinstance(values, list) or not values:
            raise ValueError(f"history has no {key!r} values (objective {self.objective!r})")
        tail = values[-window:]
        return sum(tail) / len(tail)

    def smoothed(self, key: str = "loss", beta: float = 0.9) -> list[float]:
        """Exponential moving average with bias correction (what TensorBoard's slider shows)."""
        out, avg = [], 0.0
        for i, v in enumerate(getattr(self, key), start=1):
            avg = beta * avg + (1 - beta) * v
            out.append(avg / (1 - beta**i))
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def plot(self, ax: Any = None, *, x: str = "step", reference: bool = True) -> Any:
        """Plot the loss curve(s) on ``ax`` (a new figure if None); returns the axes."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3), dpi=80)
        _draw_losses(ax, self, x=x, reference=reference)
        if self.objective == "pretraining":
            _draw_nsp_accuracy(ax, ax.twinx(), self, x=x)
        return ax


def _draw_losses(ax: Any, h: History, *, x: str = "step", reference: bool = True) -> None:
    xs = getattr(h, x)
    label = {"mlm": "MLM loss", "clm": "causal LM loss", "pretraining": "MLM + NSP loss"}[
        h.objective
    ]
    ax.plot(xs, h.loss, color="C0", alpha=0.25, lw=1)
    ax.plot(xs, h.smoothed("loss"), color="C0", lw=2, label=label)
    if h.objective == "pretraining":
        ax.plot(xs, h.smoothed("mlm_loss"), color="C1", lw=1.5, label="MLM term")
        ax.plot(xs, h.smoothed("nsp_loss"), color="C2", lw=1.5, label="NSP term")
        ax.axhline(math.log(2), color="C2", ls=":", lw=1, label="ln 2 (NSP coin flip)")
    if reference:
        ax.axhline(
            h.uniform_loss, color="gray", ls="--", lw=1, label=f"ln(vocab) = {h.uniform_loss:.2f}"
        )
    ax.set_xlabel(
        {"step": "optimizer step", "wall_time": "seconds", "tokens_seen": "tokens seen"}.get(x, x)
    )
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend_outside(ax)


def _legend_outside(ax: Any, *more: Any) -> None:
    """One legend for ``ax`` and its twin axes ``more``, to the right of the plot (never over a
    curve)."""
    handles, labels = ax.get_legend_handles_labels()
    for other in more:
        h, lab = other.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    ax.legend(
        handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.02 + 0.1 * bool(more), 1.0)
    )


def _draw_nsp_accuracy(ax: Any, ax2: Any, h: History, *, x: str = "step") -> None:
    """The NSP accuracy (20-step moving mean) on ``ax2``, the twin axis of the loss plot ``ax``."""
    ax2.plot(
        getattr(h, x),
        _moving_mean(h.nsp_accuracy, 20),
        color="C3",
        lw=1.5,
        label="NSP accuracy (20-step mean)",
    )
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("NSP accuracy")
    _legend_outside(ax, ax2)


# --------------------------------------------------------------------------------------------
# Live display: one progress bar and one figure, updated in place
# --------------------------------------------------------------------------------------------


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where a live plot can be shown)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class _LivePlot:
    """A figure shown once through an IPython display handle and redrawn in place (never one
    figure per step). Rendered to PNG with Agg, so it works with any matplotlib backend."""

    def __init__(self, history: History, title: str) -> None:
        from IPython.display import display
        from matplotlib.figure import Figure

        self.history, self.title = history, title
        self.figure = Figure(figsize=(6.5, 3), dpi=80)
        self.ax = self.figure.add_subplot()
        self.ax2 = self.ax.twinx() if history.objective == "pretraining" else None
        self.handle = display(self._image(), display_id=True)

    def _image(self) -> Any:
        from IPython.display import Image

        h = self.history
        self.ax.clear()
        if h.num_steps:
            _draw_losses(self.ax, h)
            if self.ax2 is not None:
                self.ax2.clear()
                _draw_nsp_accuracy(self.ax, self.ax2, h)
            last = f"step {h.step[-1]}, {h.wall_time[-1]:.0f} s, {final_loss_text(h)}"
            self.ax.set_title(f"{self.title}: {last}", fontsize=10)
        else:
            self.ax.set_title(f"{self.title}: starting...", fontsize=10)
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", bbox_inches="tight")
        return Image(data=buffer.getvalue(), format="png")

    def update(self) -> None:
        if self.handle is not None:
            self.handle.update(self._image())


def _moving_mean(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


#: The live plot's title and the final line state the same loss: the mean of the last steps.
FINAL_LOSS_WINDOW = 10


def final_loss_text(history: History) -> str:
    """``loss 5.390 (last 10 steps)``: one wording for the plot title and the final line."""
    n = min(FINAL_LOSS_WINDOW, len(history.loss))
    return f"loss {history.final('loss', FINAL_LOSS_WINDOW):.3f} (last {n} steps)"


def progress_summary(history: History, budget: _Budget, title: str) -> str:
    """The one line that replaces the progress bar when :func:`train` ends, e.g.
    ``GPT2LMHeadModel: 120/120 steps · 9.8 s · loss 5.390 (last 10 steps)`` (a stored notebook
    shows this)."""
    h = history
    seconds = h.wall_time[-1] if h.wall_time else budget.elapsed()
    if budget.by_time:
        done = f"{h.num_steps} steps in {budget.total:g} s budget"
    else:
        done = f"{h.num_steps}/{budget.total:.0f} steps"
    parts = [f"{title}: {done}", f"{seconds:.1f} s"]
    if h.loss:
        parts.append(final_loss_text(h))
    if not h.stopped_by:
        parts.append("interrupted")
    elif h.stopped_by == "batches":
        parts.append("batches ran out")
    return " \u00b7 ".join(parts)


def _summary_bundle(text: str, finished: bool) -> dict[str, str]:
    """``text`` as HTML (a check mark when training finished) and as plain text."""
    import html

    mark, color = ("\u2714", "#1a9641") if finished else ("\u25a0", "#d7191c")
    markup = (
        '<div class="lmlessons-progress" style="font-family:monospace;font-size:12px">'
        f'<span style="color:{color}">{mark}</span> {html.escape(text)}</div>'
    )
    return {"text/html": markup, "text/plain": text}


class _Progress:
    """What ``live=True`` shows while :func:`train` runs: a tqdm bar (steps, or seconds for a pure
    time budget) and, in a notebook, the :class:`_LivePlot`, redrawn every ``plot_every`` s.

    In a notebook the bar is a tqdm widget shown through a display handle; when training ends the
    handle is updated to :func:`progress_summary` as HTML and text, so a stored notebook (read
    without a kernel) shows the final state instead of a frozen ``0%`` widget."""

    def __init__(
        self, history: History, budget: _Budget, live: bool, plot_every: float, title: str
    ) -> None:
        self.history, self.budget, self.live, self.plot_every = history, budget, live, plot_every
        self.title, self.handle = title, None
        self.bar = self._bar(live and in_notebook())
        self.plot = _LivePlot(history, title) if live and in_notebook() else None
        self.last_plot = time.perf_counter()

    def _bar(self, notebook: bool) -> Any:
        options: dict[str, Any] = dict(
            total=self.budget.total,
            disable=not self.live,
            unit="s" if self.budget.by_time else "step",
            desc=self.title,
            bar_format="{l_bar}{bar}| {n:.0f}/{total_fmt} {unit} [{elapsed}<{remaining}{postfix}]",
        )
        if not notebook:
            from tqdm.auto import tqdm

            return tqdm(**options)
        from IPython.display import display
        from tqdm.notebook import tqdm as tqdm_notebook

        bar = tqdm_notebook(display=False, **options)
        self.handle = display(bar.container, display_id=True)
        return bar

    def update(self) -> None:
        h = self.history
        if self.live:
            self.bar.set_postfix_str(f"step {h.num_steps}, loss {h.loss[-1]:.3f}", refresh=False)
            done = min(h.wall_time[-1], self.budget.total) if self.budget.by_time else h.num_steps
            self.bar.update(done - self.bar.n)
        if self.plot is not None and time.perf_counter() - self.last_plot >= self.plot_every:
            self.plot.update()
            self.last_plot = time.perf_counter()

    def close(self) -> None:
        if self.live:
            if self.budget.by_time and self.history.stopped_by:
                self.bar.n = self.bar.total
            self.bar.close()
        if self.handle is not None:  # the widget bar -> one line that reads without a kernel
            text = progress_summary(self.history, self.budget, self.title)
            self.handle.update(_summary_bundle(text, bool(self.history.stopped_by)), raw=True)
            self.bar.container.close()
        if self.plot is not None:
            self.plot.update()


# --------------------------------------------------------------------------------------------
# Loss of one micro-batch
# --------------------------------------------------------------------------------------------


def infer_objective(model: torch.nn.Module) -> str:
    """``"pretraining"`` for ``*ForPreTraining``, ``"mlm"`` for ``*ForMaskedLM``, ``"clm"`` for
    ``*LMHeadModel`` / ``*ForCausalLM`` (including ``BertLMHeadModel(is_decoder=False)``)."""
    name = type(model).__name__
    if name.endswith("ForPreTraining"):
        return "pretraining"
    if name.endswith("ForMaskedLM"):
        return "mlm"
    if name.endswith(("LMHeadModel", "ForCausalLM")):
        return "clm"
    raise ValueError(f"cannot tell the objective of a {name}; pass objective= one of {OBJECTIVES}")


def _check_model(model: object, objective: str | None) -> str:
    """The objective to train or evaluate ``model`` with (inferred when None)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if objective is None:
        objective = infer_objective(model)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return objective


def _num_targets(batch: dict[str, torch.Tensor], objective: str) -> int:
    """The labels that are not -100; for CLM counted after the shift (the first is never one)."""
    labels = batch["labels"]
    if objective == "clm":
        labels = shift_labels(labels)  # (B, T)
    return int((labels != IGNORE_INDEX).sum())


def _forward(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Any:
    return model(**{k: batch[k] for k in _MODEL_INPUTS if k in batch})


def _supports_sparse(model: torch.nn.Module) -> bool:
    head = getattr(model, "cls", None)
    return hasattr(model, "bert") and hasattr(head, "predictions")


def _mlm_logits(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], objective: str, sparse: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """MLM logits with matching labels (and NSP logits for ``"pretraining"``).

    ``sparse``: run only the masked positions through the output layer, as Google BERT's
    ``run_pretraining.py`` (``gather_indexes``) and ModernBERT (``sparse_prediction``) do:
    the loss is the same sum over the same positions, at a fraction of the head's cost (the
    ``(B, T, V)`` logits are never built). Returns ``(N, V)`` logits and ``(N,)`` labels then;
    else the model's own ``(B, T, V)`` logits and ``(B, T)`` labels.
    """
    labels = batch["labels"]
    if not sparse:
        out = _forward(model, batch)
        if objective == "pretraining":
            return out.prediction_logits, labels, out.seq_relationship_logits
        return out.logits, labels, None
    bert: Any = model.bert
    head: Any = model.cls
    out = bert(**{k: batch[k] for k in _MODEL_INPUTS if k in batch})
    keep = labels != IGNORE_INDEX  # (B, T)
    logits = head.predictions(out.last_hidden_state[keep])  # (N, H) -> (N, V)
    if objective == "pretraining":
        return logits, labels[keep], head.seq_relationship(out.pooler_output)  # (B, 2)
    return logits, labels[keep], None


def _micro_batch_loss(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    objective: str,
    num_items_in_batch: int,
    num_sequences: int,
    sparse: bool,
) -> tuple[torch.Tensor, dict[str, float]]:
    """This micro-batch's share of the full-batch loss, and its parts (already shares)."""
    n = num_items_in_batch if num_items_in_batch > 0 else None  # no target at all: loss 0
    if objective == "clm":
        out = _forward(model, batch)
        loss = clm_loss(out.logits, batch["labels"], num_items_in_batch=n)  # (B, T, V) -> ()
        return loss, {}
    logits, labels, nsp_logits = _mlm_logits(model, batch, objective, sparse)
    mlm = mlm_loss(logits, labels, num_items_in_batch=n)  # (B, T, V) or sparse (N, V)
    if nsp_logits is None:  # "mlm"
        return mlm, {}
    nsp_labels = batch["next_sentence_label"]
    share = nsp_labels.shape[0] / num_sequences  # NSP is a mean over sequences: weight by rows
    nsp = nsp_loss(nsp_logits, nsp_labels) * share  # (B, 2)
    correct = (nsp_logits.argmax(-1) == nsp_labels).sum().item()
    return mlm + nsp, {"mlm_loss": mlm.item(), "nsp_loss": nsp.item(), "nsp_correct": correct}


_BATCH_HINTS = {
    "mlm": "use lmlessons.mlm_batches",
    "pretraining": "use lmlessons.nsp_batches",
    "clm": "use lmlessons.clm_batches",
}


def _check_batch(batch: object, objective: str, index: int) -> dict[str, torch.Tensor]:
    if not isinstance(batch, dict):
        raise TypeError(
            f"batches must yield dicts of tensors, got {type(batch).__name__} at batch {index}"
        )
    missing = [k for k in _REQUIRED_KEYS[objective] if k not in batch]
    if missing:
        raise ValueError(
            f"objective {objective!r} needs batch keys {list(_REQUIRED_KEYS[objective])}; "
            f"missing {missing} ({_BATCH_HINTS[objective]})"
        )
    return batch


def _checked_batches(
    batches: Iterable[object], objective: str, device: torch.device
) -> Iterator[dict[str, torch.Tensor]]:
    """The batches, checked and moved to ``device``, drawn one at a time."""
    for index, batch in enumerate(batches):
        batch = _check_batch(batch, objective, index)
        yield {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


def _schedule(
    schedule: str, warmup_steps: int, max_steps: int | None, lr: float
) -> Callable[[int], float]:
    """The learning-rate factor after ``step`` optimizer steps (for ``LambdaLR``): linear warm-up
    over ``warmup_steps``, then constant, or linear / cosine decay to 0 at ``max_steps``."""
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0)
    if schedule not in ("constant", "linear", "cosine"):
        raise ValueError(f"schedule must be 'constant', 'linear' or 'cosine', got {schedule!r}")
    if schedule != "constant" and max_steps is None:
        raise ValueError(f"schedule={schedule!r} decays to 0 at max_steps: give max_steps")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")

    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, (max_steps or 1) - warmup_steps))
        if schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))  # cosine

    return factor


@dataclass
class _Budget:
    """When :func:`train` stops: after ``max_steps`` optimizer steps, after ``max_seconds``, or
    when the batches run out. ``total`` is the progress bar's length (seconds if ``by_time``)."""

    max_steps: int | None
    max_seconds: float | None
    grad_accum_steps: int
    total: float
    by_time: bool
    start: float = 0.0

    @classmethod
    def checked(
        cls,
        batches: object,
        max_steps: int | None,
        max_seconds: float | None,
        grad_accum_steps: int,
    ) -> _Budget:
        if not isinstance(batches, Iterable):
            raise TypeError(
                f"batches must be an iterable of batch dicts, got {type(batches).__name__}"
            )
        k = check_int("grad_accum_steps", grad_accum_steps, minimum=1)
        if max_steps is not None:
            max_steps = check_int("max_steps", max_steps, minimum=1)
        if max_seconds is not None:
            if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)):
                raise TypeError(
                    f"max_seconds must be a number of seconds, got {type(max_seconds).__name__}"
                )
            if not max_seconds > 0:
                raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
        if max_steps is not None:
            return cls(max_steps, max_seconds, k, total=max_steps, by_time=False)
        if max_seconds is not None:
            return cls(None, max_seconds, k, total=math.ceil(max_seconds), by_time=True)
        if not isinstance(batches, Sized):
            raise ValueError(
                "give max_steps or max_seconds (batches may be endless), "
                "or a finite list of batches"
            )
        return cls(None, None, k, total=len(batches) // k, by_time=False)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def spent(self, num_steps: int) -> str:
        """Why to stop before the next step (``"max_steps"``, ``"max_seconds"``), or ``""``."""
        if self.max_steps is not None and num_steps >= self.max_steps:
            return "max_steps"
        if self.max_seconds is not None and self.elapsed() >= self.max_seconds:
            return "max_seconds"
        return ""


def _next_step(
    batches: Iterator[dict[str, torch.Tensor]], budget: _Budget, history: History
) -> list[dict[str, torch.Tensor]] | None:
    """The ``grad_accum_steps`` micro-batches of the next optimizer step, or None (and
    ``history.stopped_by`` set). The budgets are checked first, so that no batch is drawn that
    would not be trained on; an incomplete last step is dropped."""
    history.stopped_by = budget.spent(history.num_steps)
    if history.stopped_by:
        return None
    micro = list(itertools.islice(batches, budget.grad_accum_steps))
    if len(micro) < budget.grad_accum_steps:
        history.stopped_by = "batches"
        return None
    return micro


def _add(totals: dict[str, float], **values: float) -> None:
    """Add ``values`` into ``totals`` key by key (a missing key counts as 0)."""
    for key, value in values.items():
        totals[key] = totals.get(key, 0) + value


def _record(
    history: History,
    micro: list[dict[str, torch.Tensor]],
    totals: dict[str, float],
    num_items: int,
    num_sequences: int,
    seconds: float,
) -> None:
    """Append one optimizer step (``totals``: summed over its micro-batches) to ``history``."""
    history.step.append(history.num_steps + 1)
    history.loss.append(totals["loss"])
    if history.objective == "pretraining":
        history.mlm_loss.append(totals["mlm_loss"])
        history.nsp_loss.append(totals["nsp_loss"])
        history.nsp_accuracy.append(totals["nsp_correct"] / num_sequences)
    history.num_items.append(num_items)
    tokens = sum(  # non-padding input tokens
        int(b["attention_mask"].sum()) if "attention_mask" in b else b["input_ids"].numel()
        for b in micro
    )
    history.tokens_seen.append((history.tokens_seen[-1] if history.tokens_seen else 0) + tokens)
    history.wall_time.append(seconds)


def train(
    model: torch.nn.Module,
    batches: Iterable[dict[str, torch.Tensor]],
    *,
    objective: str | None = None,
    max_steps: int | None = None,
    max_seconds: float | None = None,
    lr: float = 2e-3,
    weight_decay: float = 0.01,
    warmup_steps: int = 20,
    schedule: str = "constant",
    grad_accum_steps: int = 1,
    max_grad_norm: float | None = 1.0,
    optimizer: torch.optim.Optimizer | None = None,
    sparse_prediction: bool = True,
    live: bool = True,
    plot_every: float = 1.5,
    title: str | None = None,
) -> History:
    """Train ``model`` on ``batches`` until a budget runs out; return the :class:`History`.

    The loop of the lessons: AdamW (or ``optimizer``) with warm-up and ``schedule``, gradient
    clipping, and ``grad_accum_steps`` batches per optimizer step combined as lesson 07 teaches.
    The options are described in the module docstring. The model is left in eval mode.
    """
    objective = _check_model(model, objective)
    budget = _Budget.checked(batches, max_steps, max_seconds, grad_accum_steps)
    lr_factor = _schedule(schedule, warmup_steps, max_steps, lr)
    history = History(objective=objective, vocab_size=_vocab_size(model))
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    progress = _Progress(history, budget, live, plot_every, title or type(model).__name__)
    sparse = bool(sparse_prediction) and objective != "clm" and _supports_sparse(model)
    stream = _checked_batches(batches, objective, next(model.parameters()).device)
    model.train()
    budget.start = time.perf_counter()
    try:
        while (micro := _next_step(stream, budget, history)) is not None:
            # num_items_in_batch: the target tokens of ALL the step's micro-batches, counted first
            num_items = sum(_num_targets(b, objective) for b in micro)
            num_sequences = sum(b["input_ids"].shape[0] for b in micro)
            totals: dict[str, float] = {}
            for b in micro:  # each loss: the sum of this micro-batch's token losses / num_items
                loss, p = _micro_batch_loss(model, b, objective, num_items, num_sequences, sparse)
                loss.backward()  # the gradients add up in p.grad to the full-batch gradient
                _add(totals, loss=loss.item(), **p)
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            history.lr.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            _record(history, micro, totals, num_items, num_sequences, budget.elapsed())
            progress.update()
    finally:
        model.eval()
        progress.close()
    return history


def _vocab_size(model: torch.nn.Module) -> int:
    """The model's vocabulary size (1 if its config does not say)."""
    config = getattr(model, "config", None)
    return max(int(getattr(config, "vocab_size", 0) or 0), 1)


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


def _batch_sums(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], objective: str
) -> dict[str, float]:
    """Sums over one batch: cross-entropy and top-1 hits over its targets, and NSP's."""
    if objective == "clm":
        logits = _forward(model, batch).logits  # (B, T, V)
        labels, nsp_logits = shift_labels(batch["labels"]), None  # (B, T): position t -> t + 1
    else:
        logits, labels, nsp_logits = _mlm_logits(model, batch, objective, _supports_sparse(model))
    keep = labels != IGNORE_INDEX
    rows, gold = logits[keep].float(), labels[keep]  # (N, V), (N,)
    sums = {
        "ce": F.cross_entropy(rows, gold, reduction="sum").item(),
        "correct": int((rows.argmax(-1) == gold).sum()),
        "targets": int(keep.sum()),
        "sequences": batch["input_ids"].shape[0],
    }
    if nsp_logits is not None:
        nsl = batch["next_sentence_label"]  # (B,)
        sums["nsp_ce"] = F.cross_entropy(nsp_logits.float(), nsl, reduction="sum").item()
        sums["nsp_correct"] = int((nsp_logits.argmax(-1) == nsl).sum())
    return sums


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    batches: Iterable[dict[str, torch.Tensor]],
    *,
    objective: str | None = None,
) -> dict[str, float]:
    """Held-out metrics over a *finite* iterable of batches (e.g. ``epochs=1``), token-weighted.

    Returns for ``"mlm"``: ``mlm_loss``, ``mlm_accuracy`` (top-1 on masked positions);
    ``"pretraining"``: those plus ``nsp_loss``, ``nsp_accuracy`` and ``loss`` (the sum);
    ``"clm"``: ``clm_loss``, ``perplexity`` (``exp(clm_loss)``), ``next_token_accuracy``.
    Also ``num_targets`` (and ``num_sequences``).
    """
    objective = _check_model(model, objective)
    was_training = model.training
    model.eval()
    total: dict[str, float] = {}
    try:
        for batch in _checked_batches(batches, objective, next(model.parameters()).device):
            _add(total, **_batch_sums(model, batch, objective))
    finally:
        model.train(was_training)
    if total.get("targets", 0) == 0:
        raise ValueError("batches held no target tokens to evaluate")
    loss, accuracy = total["ce"] / total["targets"], total["correct"] / total["targets"]
    counts = {"num_targets": total["targets"], "num_sequences": total["sequences"]}
    if objective == "clm":
        return {
            "clm_loss": loss,
            "perplexity": math.exp(loss),
            "next_token_accuracy": accuracy,
            **counts,
        }
    metrics = {"mlm_loss": loss, "mlm_accuracy": accuracy, **counts}
    if objective == "pretraining":
        metrics["nsp_loss"] = total["nsp_ce"] / total["sequences"]
        metrics["nsp_accuracy"] = total["nsp_correct"] / total["sequences"]
        metrics["loss"] = metrics["mlm_loss"] + metrics["nsp_loss"]
    return metrics

"""A small training loop for every model of the course, and its held-out evaluation.

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
* ``live``: show the run's progress, titled ``title`` (default: the model class): a tqdm bar,
  or what the installed :class:`Display` shows. Importing :mod:`lmlessons.widgets` (every lesson
  does) installs the course's: in a notebook, a loss plot redrawn in place every ``plot_every``
  seconds and a bar that ends as one summary line. False shows nothing.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX, check_int, check_model
from lmlessons.losses import clm_loss, mlm_loss, nsp_loss, token_nll
from lmlessons.shifting import num_targets, shift_labels

__all__ = [
    "History",
    "train",
    "train_steps",
    "LossFn",
    "evaluate",
    "infer_objective",
    "OBJECTIVES",
    "Display",
    "install_display",
    "smoothed",
]

OBJECTIVES = ("mlm", "pretraining", "clm")
_REQUIRED_KEYS = {
    "mlm": ("input_ids", "labels"),
    "pretraining": ("input_ids", "labels", "next_sentence_label"),
    "clm": ("input_ids", "labels"),
}
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def smoothed(values: Iterable[float], beta: float = 0.9) -> list[float]:
    """Exponential moving average with bias correction (what TensorBoard's slider shows); after a
    NaN every value is NaN."""
    out, avg = [], 0.0
    for i, v in enumerate(values, start=1):
        avg = beta * avg + (1 - beta) * v
        out.append(avg / (1 - beta**i))
    return out


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
        """:func:`smoothed` values of ``key``."""
        return smoothed(getattr(self, key), beta)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def plot(self, ax: Any = None, *, x: str = "step", reference: bool = True) -> Any:
        """Plot the loss curve(s) on ``ax`` (a new figure if None) against ``x`` (``"step"``,
        ``"wall_time"``, ``"tokens_seen"``); returns the axes. Drawn by the installed
        :class:`Display` (importing :mod:`lmlessons.widgets` installs the course's)."""
        if _DISPLAY is None:
            raise RuntimeError(
                "History.plot draws with lmlessons.widgets: run `import lmlessons.widgets` first"
            )
        return _DISPLAY.plot(self, ax, x=x, reference=reference)


# --------------------------------------------------------------------------------------------
# What train shows: the installed display, else a tqdm bar
# --------------------------------------------------------------------------------------------


class Progress(Protocol):
    """The display of one run of :func:`train`: ``update()`` after each optimizer step,
    ``close()`` once at the end (also after an error or an interrupt)."""

    def update(self) -> None: ...

    def close(self) -> None: ...


class Display(Protocol):
    """What draws :func:`train`'s progress (``live=True``) and :meth:`History.plot`.

    The course layer only calls it. Importing :mod:`lmlessons.widgets` installs the lessons'
    display (in a notebook: a live loss plot and a summary line that a stored notebook keeps)
    with :func:`install_display`: the widgets import the course, never the reverse."""

    def progress(
        self, history: History, budget: Budget, title: str, plot_every: float
    ) -> Progress: ...

    def plot(self, history: History, ax: Any, *, x: str, reference: bool) -> Any: ...


_DISPLAY: Display | None = None


def install_display(display: Display | None) -> Display | None:
    """Let ``display`` draw :func:`train`'s progress and :meth:`History.plot` (None: no display,
    ``live=True`` shows a tqdm bar); returns the display it replaces."""
    global _DISPLAY
    previous, _DISPLAY = _DISPLAY, display
    return previous


class TextProgress:
    """A tqdm bar of the optimizer steps (of the seconds, for a pure time budget), titled
    ``title``: what ``live=True`` shows when no display is installed, or outside a notebook
    (``disable=True``: nothing, for ``live=False``)."""

    def __init__(self, history: History, budget: Budget, title: str, disable: bool = False) -> None:
        self.history, self.budget, self.title = history, budget, title
        self.bar = self.new_bar(
            disable=disable,
            total=budget.total,
            unit="s" if budget.by_time else "step",
            desc=title,
            bar_format="{l_bar}{bar}| {n:.0f}/{total_fmt} {unit} [{elapsed}<{remaining}{postfix}]",
        )

    def new_bar(self, **options: Any) -> Any:
        from tqdm.auto import tqdm

        return tqdm(**options)

    def update(self) -> None:
        h = self.history
        self.bar.set_postfix_str(f"step {h.num_steps}, loss {h.loss[-1]:.3f}", refresh=False)
        done = min(h.wall_time[-1], self.budget.total) if self.budget.by_time else h.num_steps
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.budget.by_time and self.history.stopped_by:
            self.bar.n = self.bar.total
        self.bar.close()


def _progress(
    live: bool, history: History, budget: Budget, title: str, plot_every: float
) -> Progress:
    if live and _DISPLAY is not None:
        return _DISPLAY.progress(history, budget, title, plot_every)
    return TextProgress(history, budget, title, disable=not live)


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
    model = check_model(model)
    if objective is None:
        objective = infer_objective(model)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return objective


def _num_targets(batch: dict[str, torch.Tensor], objective: str) -> int:
    """The labels that are not -100; for CLM counted after the shift (the first is never one)."""
    return int(num_targets(batch["labels"], shift=objective == "clm").sum())


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


#: A loss for :func:`train_steps`: ``(model, batch) -> (loss, values to log)``.
LossFn = Callable[[torch.nn.Module, dict[str, torch.Tensor]], tuple[torch.Tensor, dict[str, float]]]


def train_steps(
    model: torch.nn.Module,
    batches: Iterator[dict[str, torch.Tensor]],
    loss_fn: LossFn,
    settings: Mapping[str, Any],
) -> dict[str, list[float]]:
    """Train ``model`` for ``settings["max_steps"]`` steps, one batch a step: AdamW
    (``learning_rate``, ``weight_decay``) with ``warmup_steps`` of linear warm-up, then a constant
    rate, the gradient norm clipped to ``max_grad_norm``. Returns ``{"step": [...], name: [...]}``:
    what ``loss_fn`` logged at step 1 and every ``log_every`` steps. The model ends in eval mode."""
    model = check_model(model)
    max_steps = check_int("max_steps", settings["max_steps"], minimum=1)
    log_every = check_int("log_every", settings["log_every"], minimum=1)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings["learning_rate"], weight_decay=settings["weight_decay"]
    )
    factor = _schedule("constant", settings["warmup_steps"], max_steps, settings["learning_rate"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    logged: dict[str, list[float]] = {"step": []}
    model.train()
    for step, batch in zip(range(1, max_steps + 1), batches, strict=False):
        loss, values = loss_fn(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings["max_grad_norm"])
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 1 or step % log_every == 0:
            logged["step"].append(step)
            for name, value in values.items():
                logged.setdefault(name, []).append(value)
    model.eval()
    return logged


@dataclass
class Budget:
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
    ) -> Budget:
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
    batches: Iterator[dict[str, torch.Tensor]], budget: Budget, history: History
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
    budget = Budget.checked(batches, max_steps, max_seconds, grad_accum_steps)
    lr_factor = _schedule(schedule, warmup_steps, max_steps, lr)
    history = History(objective=objective, vocab_size=_vocab_size(model))
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    progress = _progress(live, history, budget, title or type(model).__name__, plot_every)
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
    nll, keep = token_nll(logits, labels, shift=False)  # (B, T) each; the labels are aligned
    gold = labels[keep]  # (N,)
    sums = {
        "ce": nll[keep].sum().item(),
        "correct": int((logits[keep].argmax(-1) == gold).sum()),
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

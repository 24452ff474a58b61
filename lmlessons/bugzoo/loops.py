"""The two training loops of the bug zoo: the course's own, and transformers' ``Trainer``.

Both use AdamW (weight decay 0.01), a linear warm-up over :data:`WARMUP_STEPS` steps and
gradient clipping at :data:`MAX_GRAD_NORM`, as :func:`lmlessons.train`, and both return every
step's ``loss`` (as the run's code reports it), ``grad_norm`` (before clipping; NaN once a
gradient is NaN) and ``num_items`` (the targets of the step):

* :func:`train_loop`: the loop of :func:`lmlessons.train` written out; a *step function* does
  the forward and backward passes of one step (one batch or several micro-batches);
* :func:`train_with_trainer`: ``transformers.Trainer`` with gradient accumulation, built by a
  run's ``trainer`` function and given the same optimizer and warm-up (``optimizers=``); the
  history is the ``Trainer``'s own log (``logging_steps=1``). :func:`trainer_one_step_check`
  compares one of its steps with one batch, by :func:`lmlessons.course.trainer_ga.trainer_gradient`
  (the measurement of lesson 07).
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from lmlessons.bugzoo import bugs
from lmlessons.bugzoo.data import EVAL_SEED, SEED, sentence_rows
from lmlessons.course.batches import row_batches
from lmlessons.course.trainer_ga import (
    compare,
    quiet_and_seeded,
    reference_gradient,
    trainer_gradient,
)
from lmlessons.shifting import num_targets

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "trainer_arguments",
    "WARMUP_STEPS",
    "MAX_GRAD_NORM",
    "WEIGHT_DECAY",
    "optimizer_and_warmup",
    "train_loop",
    "train_with_trainer",
    "trainer_one_step_check",
]

WARMUP_STEPS = 20
MAX_GRAD_NORM = 1.0
WEIGHT_DECAY = 0.01

StepFn = Callable[[], dict[str, float]]


def optimizer_and_warmup(model: torch.nn.Module, lr: float) -> tuple[Any, Any]:
    """AdamW and its linear warm-up to ``lr`` over :data:`WARMUP_STEPS` steps, then constant."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    warmup = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / WARMUP_STEPS)
    )
    return optimizer, warmup


def train_loop(model: torch.nn.Module, lr: float, step: StepFn, steps: int) -> dict[str, list]:
    """``steps`` optimizer steps of ``step`` (forward and backward of one step's batch or
    micro-batches, returning its values), with clipping; every step's values and
    ``grad_norm``."""
    optimizer, warmup = optimizer_and_warmup(model, lr)
    history: dict[str, list] = {}
    model.train()
    for _ in range(steps):
        values = step()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        warmup.step()
        optimizer.zero_grad(set_to_none=True)
        for key, value in {**values, "grad_norm": float(norm)}.items():
            history.setdefault(key, []).append(value)
    model.eval()
    return history


def _mlm_collator(tokenizer: Any, g: torch.Generator, counts: list[int]) -> Callable[..., Any]:
    """Pad a micro-batch's sentences to the longest and mask them (``bugs.mask_fixed``, drawing
    from ``g``); append its number of targets to ``counts``."""

    def collate(features: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        rows = [f["input_ids"] for f in features]
        batch = bugs.masked_batch(rows, tokenizer, bugs.mask_fixed, g)  # (b, T) each
        counts.append(int(num_targets(batch["labels"]).sum()))
        return batch

    return collate


def trainer_arguments(output_dir: str, spec: Any, steps: int) -> Any:
    """The ``TrainingArguments`` of a run's ``Trainer``: its batch split into micro-batches."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=spec.batch_size // spec.micro_batches,
        gradient_accumulation_steps=spec.micro_batches,
        max_steps=steps,
        max_grad_norm=MAX_GRAD_NORM,
        logging_steps=1,  # every step's loss and gradient norm in the log
        train_sampling_strategy="sequential",  # the sentences in the order they were drawn
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        remove_unused_columns=False,
        seed=SEED,
    )


def train_with_trainer(
    model: PreTrainedModel, spec: Any, documents: list[list[str]], tokenizer: Any, steps: int
) -> dict[str, list]:
    """Train an MLM run with ``spec.trainer(...)``: ``steps`` steps of ``spec.batch_size``
    sentences of ``documents`` (drawn as the other runs draw them), each step in
    ``spec.micro_batches`` micro-batches, masked as they come."""
    from transformers import PrinterCallback

    g = torch.Generator().manual_seed(SEED)
    stream = row_batches(sentence_rows(documents, tokenizer), spec.batch_size, g)
    data = [{"input_ids": row} for _ in range(steps) for row in next(stream)]
    counts: list[int] = []
    with tempfile.TemporaryDirectory() as out, quiet_and_seeded():
        trainer = spec.trainer(
            model=model,
            args=trainer_arguments(out, spec, steps),
            train_dataset=data,
            data_collator=_mlm_collator(tokenizer, g, counts),
            optimizers=optimizer_and_warmup(model, spec.lr),
        )
        trainer.remove_callback(PrinterCallback)  # it prints the run's timings
        trainer.train()
    model.eval()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    k = spec.micro_batches
    return {
        "loss": [entry["loss"] for entry in logged],
        "grad_norm": [entry["grad_norm"] for entry in logged],
        "num_items": [sum(counts[i * k : (i + 1) * k]) for i in range(steps)],
    }


def trainer_one_step_check(
    model: PreTrainedModel, spec: Any, documents: list[list[str]], tokenizer: Any
) -> dict[str, float]:
    """One ``Trainer`` step (learning rate 0) of the trained ``model`` on the first step's
    sentences in ``spec.micro_batches`` micro-batches, with the run's ``trainer`` and with the
    fixed one, against the gradient of the same sentences as one batch: ``this_run`` and
    ``with_the_fix`` are ``|g - g_batch| / |g_batch|``, ``norm_this_run`` and
    ``norm_with_the_fix`` are ``|g| / |g_batch|``."""
    rows = sentence_rows(documents, tokenizer)
    first = next(row_batches(rows, spec.batch_size, torch.Generator().manual_seed(SEED)))
    g = torch.Generator().manual_seed(EVAL_SEED)
    batch = bugs.masked_batch(first, tokenizer, bugs.mask_fixed, g)  # (B, T) each
    with torch.enable_grad():
        reference = reference_gradient(copy.deepcopy(model), batch)
        out = {}
        for key, factory in (("this_run", spec.trainer), ("with_the_fix", bugs.trainer_fixed)):
            grads = trainer_gradient(
                copy.deepcopy(model),
                batch,
                gradient_accumulation_steps=spec.micro_batches,
                trainer_class=factory,  # called with the Trainer's keywords, as the class would be
            )
            out[f"norm_{key}"], out[key] = compare(grads, reference)
    return out

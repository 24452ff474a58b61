"""Gradient accumulation with the real transformers ``Trainer``: one optimizer step of K
micro-batches against the same step on the whole batch.

The ``Trainer`` (transformers 5.23) decides at construction whether the model "accepts loss
kwargs": the model's ``accepts_loss_kwargs`` attribute if it has one, else whether its
``forward`` takes ``**kwargs``. If it does, the ``Trainer`` counts the labels that are not -100
over all micro-batches of the step, passes the count to every forward call as
``num_items_in_batch``, and does *not* divide the micro-batch losses by
``gradient_accumulation_steps``: it trusts the model to return ``sum / num_items_in_batch``.
If it does not, the ``Trainer`` divides each micro-batch's mean by the number of steps (the mean
of means). Two consequences this module measures on the course's tiny models:

* ``BertForMaskedLM`` and ``BertForPreTraining`` take ``**kwargs`` but compute a plain mean with
  ``CrossEntropyLoss()``: ``num_items_in_batch`` is dropped and nothing divides by K, so the step's
  gradient is about K times too large;
* a causal model's labels are counted after the shift only when its ``loss_type`` is
  ``"ForCausalLM"``; ``GPT2LMHeadModel`` and ``BertLMHeadModel`` have ``loss_type = None``, so the
  count includes the first label of every row and the gradient is a little too small.

:func:`measure` runs one real ``Trainer`` step (CPU, a temporary ``output_dir``, no logging,
saving or reporting, learning rate 0, no gradient clipping, micro-batches in order) and compares
the accumulated gradient, read before the optimizer step, with the gradient of the model's own
loss on the whole batch (:func:`reference_gradient`). ``fix`` applies one of the remedies:
``"accepts_loss_kwargs=False"``, ``"compute_loss_func"`` (the course's :func:`lmlessons.mlm_loss`
or :func:`lmlessons.clm_loss` with the ``Trainer``'s ``num_items_in_batch``),
``"course_loss"`` (a ``Trainer`` whose ``compute_loss`` is the course's loss, NSP included), or
``"loss_type=ForCausalLM"`` (causal models: count after the shift).
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from lmlessons._checks import IGNORE_INDEX, check_int
from lmlessons.losses import clm_loss, mlm_loss, nsp_loss
from lmlessons.masking import mask_tokens
from lmlessons.shifting import num_targets

if TYPE_CHECKING:  # importing transformers' Trainer takes seconds: imported on first use
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, Trainer

__all__ = [
    "MODELS",
    "FIXES",
    "GAMeasurement",
    "ga_batch",
    "model_inputs",
    "reference_gradient",
    "trainer_gradient",
    "compare",
    "course_compute_loss_func",
    "quiet_and_seeded",
    "TrainerFactory",
    "measure",
]

#: What builds a ``Trainer`` from the ``Trainer``'s keyword arguments: ``transformers.Trainer``,
#: a subclass, or a function returning one (e.g. with its own ``compute_loss_func``).
TrainerFactory = Callable[..., "Trainer"]

MODELS = ("BertForMaskedLM", "BertForPreTraining", "BertLMHeadModel", "GPT2LMHeadModel")
CAUSAL = ("BertLMHeadModel", "GPT2LMHeadModel")
FIXES = (
    None,
    "accepts_loss_kwargs=False",
    "compute_loss_func",
    "course_loss",
    "loss_type=ForCausalLM",
)


@dataclass(frozen=True)
class GAMeasurement:
    """One step with ``gradient_accumulation_steps`` micro-batches against the whole batch."""

    model: str
    fix: str | None
    gradient_accumulation_steps: int
    targets_per_micro_batch: tuple[int, ...]  # labels that are really scored (after the shift)
    norm_ratio: float  # |g_step| / |g_whole_batch|
    relative_error: float  # |g_step - g_whole_batch| / |g_whole_batch|

    @property
    def exact(self) -> bool:
        """The accumulated gradient is the whole-batch gradient (float32 noise aside)."""
        return self.relative_error < 1e-4


def ga_batch(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], *, seed: int = 0
) -> dict[str, torch.Tensor]:
    """A padded batch of ``texts`` with MLM labels (15%, seeded), CLM labels (the ids, -100 on
    padding, unshifted) and NSP labels (0, 1, 0, 1, ...: the gradient is what is compared)."""
    enc = tokenizer(list(texts), padding=True, return_tensors="pt")
    ids, attention = enc["input_ids"], enc["attention_mask"]  # (B, T)
    special = torch.tensor(
        [
            tokenizer.get_special_tokens_mask(row, already_has_special_tokens=True)
            for row in ids.tolist()
        ]
    )
    g = torch.Generator().manual_seed(seed)
    masked, mlm_labels = mask_tokens(
        ids,
        mask_token_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        special_tokens_mask=special,
        generator=g,
    )
    return {
        "input_ids": ids,
        "masked_input_ids": masked,
        "attention_mask": attention,
        "mlm_labels": mlm_labels,  # (B, T)
        "clm_labels": ids.masked_fill(attention == 0, IGNORE_INDEX),  # (B, T)
        "next_sentence_label": torch.arange(ids.shape[0]) % 2,  # (B,)
    }


def model_inputs(model_name: str, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The keyword arguments ``model_name`` trains on, as transformers names them."""
    if model_name in CAUSAL:
        return {
            "input_ids": batch["input_ids"],
            "attention_mask": batch["attention_mask"],
            "labels": batch["clm_labels"],
        }
    out = {
        "input_ids": batch["masked_input_ids"],
        "attention_mask": batch["attention_mask"],
        "labels": batch["mlm_labels"],
    }
    if model_name == "BertForPreTraining":
        out["next_sentence_label"] = batch["next_sentence_label"]
    return out


def _scored(model_name: str, labels: torch.Tensor) -> int:
    """Labels the loss really scores: after the shift for a causal model."""
    return int(num_targets(labels, shift=model_name in CAUSAL).sum())


def reference_gradient(
    model: torch.nn.Module, inputs: dict[str, torch.Tensor]
) -> list[torch.Tensor]:
    """The gradient of the model's own loss on the whole batch, one forward and backward."""
    model.zero_grad()
    model(**inputs).loss.backward()
    return [_grad(p) for p in model.parameters()]


def _grad(p: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()


def _norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.sqrt(torch.stack([(t**2).sum() for t in tensors]).sum())


def compare(
    grads: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]
) -> tuple[float, float]:
    """``(|g| / |g_ref|, |g - g_ref| / |g_ref|)`` over all parameters, in float64."""
    ref = _norm([r.double() for r in reference])
    size = _norm([x.double() for x in grads])
    diff = _norm([x.double() - r.double() for x, r in zip(grads, reference)])
    return float(size / ref), float(diff / ref)


@contextlib.contextmanager
def quiet_and_seeded() -> Iterator[None]:
    """A context in which to build and train a ``Trainer``: transformers' logging at error level,
    one torch thread, and the global random states left as they were on leaving it (the
    ``Trainer`` seeds Python's, NumPy's and torch's generators)."""
    import numpy as np
    from transformers.utils import logging as hf_logging

    verbosity, py_state, np_state = (
        hf_logging.get_verbosity(),
        random.getstate(),
        np.random.get_state(),
    )
    hf_logging.set_verbosity_error()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models gain nothing from threads, and busy CPUs lose a lot
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_num_threads(threads)
        hf_logging.set_verbosity(verbosity)
        random.setstate(py_state)
        np.random.set_state(np_state)


def _course_loss_trainer() -> type:
    """A ``Trainer`` whose loss is the course's: MLM sum / ``num_items_in_batch``, plus the NSP
    mean divided by the accumulation steps (every micro-batch holds the same number of pairs)."""
    from transformers import Trainer

    class CourseLossTrainer(Trainer):
        loss_is_scaled_for_ga = True  # our loss is already the micro-batch's share of the step

        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            labels, nsp_labels = inputs["labels"], inputs.get("next_sentence_label")
            rest = {k: v for k, v in inputs.items() if k not in ("labels", "next_sentence_label")}
            outputs = model(**rest)
            logits = outputs.prediction_logits if nsp_labels is not None else outputs.logits
            loss = mlm_loss(logits, labels, num_items_in_batch=num_items_in_batch)
            if nsp_labels is not None:
                nsp = nsp_loss(outputs.seq_relationship_logits, nsp_labels)
                loss = loss + nsp / self.current_gradient_accumulation_steps
            return (loss, outputs) if return_outputs else loss

    return CourseLossTrainer


def course_compute_loss_func(model_name: str) -> Callable[..., torch.Tensor]:
    """A ``Trainer``'s ``compute_loss_func`` for ``model_name``: the course's
    :func:`lmlessons.clm_loss` (causal models) or :func:`lmlessons.mlm_loss` on the model's
    logits, divided by the ``Trainer``'s ``num_items_in_batch`` (the step's count of targets)."""
    loss = clm_loss if model_name in CAUSAL else mlm_loss

    def compute_loss_func(
        outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None
    ) -> torch.Tensor:
        return loss(outputs.logits, labels, num_items_in_batch=num_items_in_batch)

    return compute_loss_func


def trainer_gradient(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    *,
    gradient_accumulation_steps: int,
    compute_loss_func: Callable[..., torch.Tensor] | None = None,
    trainer_class: TrainerFactory | None = None,
) -> list[torch.Tensor]:
    """The gradient of one real ``Trainer`` step over ``inputs`` (B rows) in
    ``gradient_accumulation_steps`` micro-batches of B / K rows, read before the optimizer step;
    ``trainer_class`` builds the ``Trainer`` (default: ``transformers.Trainer``)."""
    from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

    steps = check_int("gradient_accumulation_steps", gradient_accumulation_steps, minimum=1)
    rows = inputs["input_ids"].shape[0]
    if rows % steps:
        raise ValueError(f"the batch's {rows} rows must split into {steps} equal micro-batches")
    grads: list[torch.Tensor] = []

    class ReadGradients(TrainerCallback):
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            grads.extend(_grad(p) for p in kwargs["model"].parameters())

    dataset = [{k: v[i] for k, v in inputs.items()} for i in range(rows)]
    with tempfile.TemporaryDirectory() as out, quiet_and_seeded():
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=rows // steps,
            gradient_accumulation_steps=steps,
            max_steps=1,
            learning_rate=0.0,  # the step itself changes nothing: the gradient is what we read
            max_grad_norm=0.0,  # no clipping
            train_sampling_strategy="sequential",  # micro-batch i holds rows i*B/K .. (i+1)*B/K - 1
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            remove_unused_columns=False,
            seed=0,
        )
        trainer = (trainer_class or Trainer)(
            model=model,
            args=args,
            train_dataset=dataset,
            compute_loss_func=compute_loss_func,
            callbacks=[ReadGradients()],
        )
        trainer.remove_callback(PrinterCallback)  # it prints the run's timings
        trainer.train()
    return grads


def measure(
    model_name: str,
    batch: dict[str, torch.Tensor],
    tokenizer: PreTrainedTokenizerBase,
    *,
    fix: str | None = None,
    gradient_accumulation_steps: int = 4,
    seed: int = 0,
) -> GAMeasurement:
    """Build the tiny ``model_name`` twice from ``seed``; compare one ``Trainer`` step in
    ``gradient_accumulation_steps`` micro-batches (with ``fix``) with the whole-batch gradient."""
    from lmlessons.course import models

    if model_name not in MODELS:
        raise ValueError(f"model_name must be one of {MODELS}, got {model_name!r}")
    if fix not in FIXES:
        raise ValueError(f"fix must be one of {FIXES}, got {fix!r}")
    factory = {
        "BertForMaskedLM": models.tiny_bert_mlm,
        "BertForPreTraining": models.tiny_bert_pretraining,
        "BertLMHeadModel": models.tiny_bert_lm_head,
        "GPT2LMHeadModel": models.tiny_gpt2,
    }[model_name]
    inputs = model_inputs(model_name, batch)
    with quiet_and_seeded():
        reference = reference_gradient(factory(tokenizer, seed=seed), inputs)
        model: Any = factory(tokenizer, seed=seed)
    if fix == "accepts_loss_kwargs=False":
        model.accepts_loss_kwargs = False  # the Trainer then divides by K
    if fix == "loss_type=ForCausalLM":
        model.loss_type = "ForCausalLM"  # the Trainer then counts after the shift
    grads = trainer_gradient(
        model,
        inputs,
        gradient_accumulation_steps=gradient_accumulation_steps,
        compute_loss_func=course_compute_loss_func(model_name)
        if fix == "compute_loss_func"
        else None,
        trainer_class=_course_loss_trainer() if fix == "course_loss" else None,
    )
    micro = inputs["labels"].chunk(gradient_accumulation_steps)
    ratio, error = compare(grads, reference)
    return GAMeasurement(
        model_name,
        fix,
        gradient_accumulation_steps,
        tuple(_scored(model_name, y) for y in micro),
        ratio,
        error,
    )

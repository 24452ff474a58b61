"""The bug zoo's training runs: each one real training code, healthy, with one bug, or with one
other setting changed (the learning rate, the seed of the initial weights).

A run (:class:`RunSpec`) picks a *family* and plugs one function of each role of
:mod:`lmlessons.course.bugzoo.bugs` into it; the healthy run of a family uses every ``*_fixed``
function, a buggy run swaps exactly one, and a run without a bug changes one setting. All runs
of a family see the same batches in the same order (one generator, seeded :data:`SEED`), so a
difference between two curves comes from that one change.

* ``"mlm"``: ``BertForMaskedLM`` initialised from the course's ``bert`` checkpoint, trained on
  single sentences padded to the longest of the batch (``tokenizer(texts, padding=True)``);
* ``"clm"``: a tiny ``GPT2LMHeadModel`` (or the run's ``BertLMHeadModel``) from random weights,
  on the same padded single sentences, ``[CLS] ... [SEP]``;
* ``"pretraining"``: ``BertForPreTraining`` from the ``bert`` checkpoint on NSP pairs
  (:func:`lmlessons.nsp_batches`), MLM + NSP.

The loop is :func:`lmlessons.train`'s (AdamW, linear warm-up, gradient clipping at 1.0) written
out, so that it can record the gradient norm before clipping and run the buggy losses. After
training, :func:`run` measures what a practitioner would look at: held-out metrics on the
validation documents (always with the *healthy* labels), fill-in-the-blank guesses or greedy
samples; for the causal runs, a check of one step against one batch. ``python -m tools.bugzoo
--out lmlessons/data/bugzoo`` records every run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX, check_int
from lmlessons.course.batches import nsp_batches
from lmlessons.course.bugzoo import bugs
from lmlessons.course.bugzoo.data import (
    SEED,
    course_data,
    row_batches,
    sentence_rows,
    split_by_length,
)
from lmlessons.course.bugzoo.symptoms import first_step_gradient_errors, measure
from lmlessons.course.checkpoints import load_checkpoint
from lmlessons.course.models import tiny_gpt2
from lmlessons.shifting import shift_labels

__all__ = [
    "RunSpec",
    "RUNS",
    "MODEL_FAMILIES",
    "CHECK_MICRO_BATCHES",
    "run",
    "run_ids",
    "model_family",
]

WARMUP_STEPS = 20
CHECK_MICRO_BATCHES = 4  # the one-step check splits one step's rows into this many pieces
MAX_GRAD_NORM = 1.0
WEIGHT_DECAY = 0.01

StepFn = Callable[[], dict[str, float]]


@dataclass(frozen=True)
class RunSpec:
    """One training run: its family, budget, and the function of each role it uses."""

    family: str  # "mlm", "clm" or "pretraining"
    steps: int
    lr: float
    init_seed: int = SEED  # "clm": the random initial weights (the batches always use SEED)
    batch_size: int = 16
    micro_batches: int = 1  # "clm": the step's rows, sorted by length, in this many pieces
    mask: Callable[..., Any] = bugs.mask_fixed
    mlm_loss: Callable[..., Any] = bugs.mlm_loss_fixed
    clm_batch: Callable[..., Any] = bugs.clm_batch_fixed
    decoder: Callable[..., Any] | None = None  # "clm": None builds a tiny GPT-2
    accumulate: Callable[..., Any] = bugs.accumulate_fixed
    negatives: Callable[..., Any] = bugs.negatives_fixed


# Runs that continue from the bert checkpoint use a small learning rate, 1e-4. At 1e-3 (the
# peak learning rate the checkpoint was trained with) the train loss rises once warm-up is over:
# that is the "lr_too_high" run below (pretraining: 3.58 -> 3.87 from the first 20 steps to the
# last 20). At 1e-4 the healthy runs stay within 3% of where they start, and their bumps are the
# batches' (measured: the healthy pretraining run at 3e-5, which barely moves the weights, has
# the same bumps). Runs from random weights use 2e-3, as the course's causal recipes.
_MLM = RunSpec("mlm", steps=150, lr=1e-4)
_MLM_ONE_SENTENCE = RunSpec("mlm", steps=60, lr=1e-4, batch_size=1)
_CLM = RunSpec("clm", steps=250, lr=2e-3)
_BERT_DECODER = replace(_CLM, decoder=bugs.decoder_fixed)
_PRETRAINING = RunSpec("pretraining", steps=150, lr=1e-4)

RUNS: dict[str, RunSpec] = {
    "healthy_mlm": _MLM,
    "special_tokens_masked": replace(_MLM, mask=bugs.mask_special_tokens_too),
    "every_token_a_target": replace(_MLM, mask=bugs.mask_every_token_a_target),
    "healthy_mlm_one_sentence": _MLM_ONE_SENTENCE,
    "nan_on_empty_mask": replace(_MLM_ONE_SENTENCE, mlm_loss=bugs.mlm_loss_zero_over_zero),
    "healthy_clm": _CLM,
    "labels_shifted_twice": replace(_CLM, clm_batch=bugs.clm_batch_shifted_twice),
    "pad_is_eos": replace(_CLM, clm_batch=bugs.clm_batch_pad_is_eos),
    "accumulation_mean_of_means": replace(
        _CLM, micro_batches=4, accumulate=bugs.accumulate_mean_of_means
    ),
    "healthy_bert_decoder": _BERT_DECODER,
    "decoder_sees_the_future": replace(_BERT_DECODER, decoder=bugs.decoder_without_is_decoder),
    "bert_decoder_other_seed": replace(_BERT_DECODER, init_seed=1),  # no bug: another init
    "healthy_pretraining": _PRETRAINING,
    "nsp_random_negatives": replace(_PRETRAINING, negatives=bugs.negatives_random_ids),
    "lr_too_high": replace(_PRETRAINING, lr=1e-3),  # 10 times the healthy run's
}

#: The model family of a run, as a case describes it (the same words for every case of it).
MODEL_FAMILIES = ("BERT MLM", "GPT-2 causal LM", "BERT causal LM", "BERT pretraining")


def run_ids() -> tuple[str, ...]:
    """Every run, healthy references included, in a fixed order."""
    return tuple(RUNS)


def model_family(run_id: str) -> str:
    """The run's model family, one of :data:`MODEL_FAMILIES`: what its code trains, not how."""
    spec = RUNS[run_id]
    if spec.family == "clm":
        return "GPT-2 causal LM" if spec.decoder is None else "BERT causal LM"
    return "BERT MLM" if spec.family == "mlm" else "BERT pretraining"


# --------------------------------------------------------------------------------------------
# Models and steps
# --------------------------------------------------------------------------------------------


def _model(spec: RunSpec, tokenizer: Any) -> torch.nn.Module:
    if spec.family == "clm":
        if spec.decoder is not None:
            return spec.decoder(tokenizer, spec.init_seed)
        return tiny_gpt2(tokenizer, seed=spec.init_seed)
    pretrained = load_checkpoint("bert")
    if spec.family == "pretraining":
        return pretrained
    from transformers import BertForMaskedLM

    config: Any = pretrained.config
    model = BertForMaskedLM(config)
    model.load_state_dict(pretrained.state_dict(), strict=False)  # no pooler, no NSP head
    return model


def _mlm_step(model: torch.nn.Module, spec: RunSpec, tokenizer: Any, g: torch.Generator) -> StepFn:
    rows = sentence_rows(course_data()[0].train, tokenizer)
    stream = row_batches(rows, spec.batch_size, g)

    def step() -> dict[str, float]:
        input_ids, attention_mask = bugs.pad_rows(next(stream), tokenizer.pad_token_id)
        inputs, labels = spec.mask(input_ids, attention_mask, tokenizer, g)
        logits = model(input_ids=inputs, attention_mask=attention_mask).logits  # (B, T, V)
        loss = spec.mlm_loss(logits, labels)
        loss.backward()
        return {"loss": loss.item(), "num_items": int((labels != IGNORE_INDEX).sum())}

    return step


def _clm_step(model: torch.nn.Module, spec: RunSpec, tokenizer: Any, g: torch.Generator) -> StepFn:
    rows = sentence_rows(course_data()[0].train, tokenizer)
    stream = row_batches(rows, spec.batch_size, g)

    def step() -> dict[str, float]:
        micro = [
            spec.clm_batch(r, tokenizer) for r in split_by_length(next(stream), spec.micro_batches)
        ]
        loss = spec.accumulate(model, micro)
        n = sum(int((shift_labels(b["labels"]) != IGNORE_INDEX).sum()) for b in micro)
        return {"loss": loss, "num_items": n}

    return step


def _pretraining_step(
    model: torch.nn.Module, spec: RunSpec, tokenizer: Any, g: torch.Generator
) -> StepFn:
    corpus = course_data()[0]
    # unmasked pairs (mlm_probability=0): the run's negatives come first, then the masking
    stream = nsp_batches(
        corpus, tokenizer, batch_size=spec.batch_size, mlm_probability=0.0, generator=g
    )

    def step() -> dict[str, float]:
        pairs = spec.negatives(next(stream), tokenizer, g)
        inputs, labels = bugs.mask_fixed(pairs["input_ids"], pairs["attention_mask"], tokenizer, g)
        out = model(
            input_ids=inputs,
            token_type_ids=pairs["token_type_ids"],
            attention_mask=pairs["attention_mask"],
        )
        mlm = bugs.mlm_loss_fixed(out.prediction_logits, labels)  # (B, T, V)
        nsl = pairs["next_sentence_label"]  # (B,)
        nsp = F.cross_entropy(out.seq_relationship_logits, nsl)  # (B, 2)
        (mlm + nsp).backward()
        correct = (out.seq_relationship_logits.argmax(-1) == nsl).float().mean()
        return {
            "loss": (mlm + nsp).item(),
            "mlm_loss": mlm.item(),
            "nsp_loss": nsp.item(),
            "nsp_accuracy": correct.item(),
            "num_items": int((labels != IGNORE_INDEX).sum()),
        }

    return step


_STEPS = {"mlm": _mlm_step, "clm": _clm_step, "pretraining": _pretraining_step}


def _train(model: torch.nn.Module, spec: RunSpec, step: StepFn, steps: int) -> dict[str, list]:
    """AdamW with warm-up and clipping, as :func:`lmlessons.train`; returns every step's values
    and ``grad_norm``, the gradient norm before clipping (NaN once a gradient is NaN)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=WEIGHT_DECAY)
    warmup = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / WARMUP_STEPS)
    )
    history: dict[str, list] = {}
    model.train()
    for _ in range(steps):
        values = step()  # forward and backward of the step's batch (or micro-batches)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        warmup.step()
        optimizer.zero_grad(set_to_none=True)
        for key, value in {**values, "grad_norm": float(norm)}.items():
            history.setdefault(key, []).append(value)
    model.eval()
    return history


def run(run_id: str, *, steps: int | None = None, symptoms: bool = True) -> dict[str, Any]:
    """Train run ``run_id`` (one of :data:`RUNS`) and return its record: ``history`` (per step:
    ``loss`` as the run's own code reports it, ``grad_norm``, ``num_items``; for pretraining
    also ``mlm_loss``, ``nsp_loss``, ``nsp_accuracy``) and, with ``symptoms``, what the trained
    model shows (:func:`lmlessons.course.bugzoo.symptoms.measure`). ``steps`` cuts the run short
    (a prefix of the full run: the same first steps)."""
    if run_id not in RUNS:
        raise ValueError(f"unknown run {run_id!r}; choose one of: {', '.join(RUNS)}")
    spec = RUNS[run_id]
    steps = spec.steps if steps is None else check_int("steps", steps, minimum=1)
    corpus, tokenizer = course_data()
    model = _model(spec, tokenizer)
    g = torch.Generator().manual_seed(SEED)
    record: dict[str, Any] = {"run": run_id, "family": spec.family, "steps": steps}
    record["history"] = _train(model, spec, _STEPS[spec.family](model, spec, tokenizer, g), steps)
    if symptoms:
        record.update(measure(model, spec.family, corpus, tokenizer))
        if spec.family == "clm":
            record["one_step_check"] = _one_step_check(model, spec, corpus, tokenizer)
    return record


def _one_step_check(
    model: torch.nn.Module, spec: RunSpec, corpus: Any, tokenizer: Any
) -> dict[str, float]:
    """Every causal run's step code on the first step's rows, split by length into
    :data:`CHECK_MICRO_BATCHES` micro-batches, against the same rows as one batch: the logged
    loss and the gradient of the trained model
    (:func:`~lmlessons.course.bugzoo.symptoms.first_step_gradient_errors`)."""
    rows = sentence_rows(corpus.train, tokenizer)
    first = next(row_batches(rows, spec.batch_size, torch.Generator().manual_seed(SEED)))
    micro_rows = split_by_length(first, CHECK_MICRO_BATCHES)
    return first_step_gradient_errors(model, tokenizer, micro_rows, spec.clm_batch, spec.accumulate)

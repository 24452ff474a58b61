"""The bug zoo's training runs: each one real training code, healthy, with one bug, or with one
other setting changed (the learning rate, the seed of the initial weights).

A run (:class:`RunSpec`) picks a *family* and plugs one function of each role of
:mod:`lmlessons.bugzoo.bugs` into it; the healthy run of a family uses every ``*_fixed``
function, a buggy run swaps exactly one, and a run without a bug changes one setting. All runs
of a family see the same batches in the same order (one generator, seeded :data:`SEED`), so a
difference between two curves comes from that one change.

* ``"mlm"``: ``BertForMaskedLM`` initialised from the course's ``bert`` checkpoint, trained on
  single sentences padded to the longest of the batch (``tokenizer(texts, padding=True)``); a
  run with a ``trainer`` trains the same way under transformers' ``Trainer``, 16 sentences per
  step in 4 micro-batches;
* ``"clm"``: a tiny ``GPT2LMHeadModel`` (or the run's ``BertLMHeadModel``) from random weights,
  on the same padded single sentences, ``[CLS] ... [SEP]``;
* ``"pretraining"``: ``BertForPreTraining`` from the ``bert`` checkpoint on NSP pairs
  (:func:`lmlessons.nsp_batches`), MLM + NSP;
* ``"chat"``: ``GPT2LMHeadModel`` from the course's ``gpt2`` checkpoint (dropout off),
  fine-tuned on the conversations of :func:`lmlessons.course.chat.instruction_set`, 16 per step,
  padded or packed;
* ``"dpo"``: the model of the healthy chat run, fine-tuned (:func:`sft_weights`), trained
  further with DPO's sigmoid loss (:func:`lmlessons.preference.dpo_loss`, ``beta``
  :data:`~lmlessons.bugzoo.data.BETA`) on the pairs of
  :func:`lmlessons.course.preferences.preference_set`, 16 per step, against a frozen copy of the
  fine-tuned model as its reference model (SFT, then DPO from it);
* ``"moe"``: a tiny ``MixtralForCausalLM`` (:func:`lmlessons.course.models.tiny_mixtral`, the
  size of lesson 14's runs: 4 experts, 2 per token) from random weights, on the same padded
  single sentences as ``"clm"``, trained with Mixtral's load-balancing aux loss at
  ``router_aux_loss_coef`` :data:`MOE_AUX_COEF` added by the run's own loop, every row padded
  to :data:`~lmlessons.bugzoo.data.MOE_LENGTH` tokens;
* ``"mtp"``: lesson 15's :class:`~lmlessons.course.mtp_runs.MTPModel` with 2 output depths (the
  tiny GPT-2 of ``"clm"``, from random weights, and one GPT-2 block for the token 2 ahead) on
  the same padded single sentences as ``"clm"``, trained on the mean of the depths' losses.

The loops are :mod:`lmlessons.bugzoo.loops`: :func:`lmlessons.train`'s (AdamW, linear
warm-up, gradient clipping at 1.0) written out, so that it can record the gradient norm before
clipping and run the buggy losses, or the ``Trainer`` with the same optimizer. After training,
:func:`run` measures what a practitioner would look at: held-out metrics on the validation
documents (always with the *healthy* labels), fill-in-the-blank guesses or greedy samples; for
the causal and the ``Trainer`` runs, a check of one step against one batch. ``python -m
tools.bugzoo --out lmlessons/data/bugzoo`` records every run.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from lmlessons._checks import check_int
from lmlessons.bugzoo import bugs
from lmlessons.bugzoo.data import (
    BETA,
    MOE_LENGTH,
    SEED,
    chat_data,
    course_data,
    padded_to_length,
    preference_data,
    sentence_rows,
    split_by_length,
)
from lmlessons.bugzoo.loops import StepFn, train_loop, train_with_trainer, trainer_one_step_check
from lmlessons.bugzoo.symptoms import first_step_gradient_errors, measure, padding_sensitivity
from lmlessons.course.batches import nsp_batches, row_batches
from lmlessons.course.checkpoints import load_checkpoint
from lmlessons.course.models import tiny_gpt2, tiny_mixtral
from lmlessons.course.moe_runs import moe_sizes
from lmlessons.course.mtp_runs import MTPModel
from lmlessons.course.trainer_ga import TrainerFactory
from lmlessons.losses import nsp_loss
from lmlessons.preference import completion_logps, dpo_loss, reward_accuracies
from lmlessons.shifting import num_targets

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "run_model",
    "sft_weights",
    "RunSpec",
    "RUNS",
    "MODEL_FAMILIES",
    "CHECK_MICRO_BATCHES",
    "MOE_AUX_COEF",
    "MTP_DEPTHS",
    "run",
    "record_runs",
    "model_family",
]

CHECK_MICRO_BATCHES = 4  # the one-step check splits one step's rows into this many pieces
MTP_DEPTHS = 2  # the "mtp" runs' output depths: the next token and the one after it
MOE_AUX_COEF = 1.0  # the "moe" runs' router_aux_loss_coef: large, so that it acts in 200 steps


@dataclass(frozen=True)
class RunSpec:
    """One training run: its family, budget, and the function of each role it uses."""

    family: str  # "mlm", "clm", "pretraining", "chat", "dpo", "moe" or "mtp"
    steps: int
    lr: float
    init_seed: int = SEED  # "clm": the random initial weights (the batches always use SEED)
    batch_size: int = 16
    micro_batches: int = 1  # "clm", "moe": the step's rows, sorted by length, in this many pieces
    # (with a trainer: the Trainer's gradient_accumulation_steps)
    mask: Callable[..., Any] = bugs.mask_fixed
    mlm_loss: Callable[..., Any] = bugs.mlm_loss_fixed
    clm_batch: Callable[..., Any] = bugs.clm_batch_fixed
    decoder: Callable[..., Any] | None = None  # "clm": None builds a tiny GPT-2
    accumulate: Callable[..., Any] = bugs.accumulate_fixed
    negatives: Callable[..., Any] = bugs.negatives_fixed
    trainer: TrainerFactory | None = None  # "mlm": None trains with train_loop
    answer_labels: Callable[..., Any] = bugs.answer_labels_fixed
    chat_batch: Callable[..., Any] = bugs.chat_batch_fixed
    preference_rows: Callable[..., Any] = bugs.preference_rows_fixed
    reference_logps: Callable[..., Any] = bugs.reference_logps_fixed
    moe_loss: Callable[..., Any] = bugs.moe_loss_fixed
    moe_accumulate: Callable[..., Any] = bugs.moe_accumulate_fixed
    mtp_loss: Callable[..., Any] = bugs.mtp_loss_fixed


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
_MLM_TRAINER = replace(_MLM, micro_batches=4, trainer=bugs.trainer_fixed)
# Chat fine-tuning continues from the gpt2 checkpoint (trained with a peak of 2e-3) at 5e-4.
_CHAT = RunSpec("chat", steps=150, lr=5e-4)
_CHAT_PACKED = replace(_CHAT, chat_batch=bugs.chat_packs_fixed)
_DPO = RunSpec("dpo", steps=100, lr=1e-4)
# The tiny Mixtral from random weights at lesson 14's learning rate.
_MOE = RunSpec("moe", steps=200, lr=3e-3)
# The course GPT-2 with one extra depth, as the causal runs (lesson 15's learning rate too).
_MTP = RunSpec("mtp", steps=250, lr=2e-3)

RUNS: dict[str, RunSpec] = {
    "healthy_mlm": _MLM,
    "special_tokens_masked": replace(_MLM, mask=bugs.mask_special_tokens_too),
    "every_token_a_target": replace(_MLM, mask=bugs.mask_every_token_a_target),
    "healthy_mlm_one_sentence": _MLM_ONE_SENTENCE,
    "nan_on_empty_mask": replace(_MLM_ONE_SENTENCE, mlm_loss=bugs.mlm_loss_zero_over_zero),
    "healthy_mlm_trainer": _MLM_TRAINER,
    "trainer_drops_num_items": replace(_MLM_TRAINER, trainer=bugs.trainer_model_loss),
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
    "healthy_chat": _CHAT,
    "prompt_not_masked": replace(_CHAT, answer_labels=bugs.answer_labels_everything),
    "chat_pad_is_eos": replace(_CHAT, chat_batch=bugs.chat_batch_pad_is_eos),
    "healthy_chat_packed": _CHAT_PACKED,
    "packed_without_boundaries": replace(_CHAT_PACKED, chat_batch=bugs.chat_packs_no_boundaries),
    "healthy_dpo": _DPO,
    "dpo_reference_is_policy": replace(_DPO, reference_logps=bugs.reference_logps_policy),
    "dpo_swapped": replace(_DPO, preference_rows=bugs.preference_rows_swapped),
    "dpo_prompt_in_chosen": replace(_DPO, preference_rows=bugs.preference_rows_prompt_in_chosen),
    "healthy_moe": _MOE,
    "moe_aux_over_padding": replace(_MOE, moe_loss=bugs.moe_loss_aux_over_padding),
    "moe_router_logits_off": replace(_MOE, moe_loss=bugs.moe_loss_router_logits_off),
    "moe_aux_not_divided": replace(
        _MOE, micro_batches=4, moe_accumulate=bugs.moe_accumulate_aux_not_divided
    ),
    "healthy_mtp": _MTP,
    "mtp_shifted_one_short": replace(_MTP, mtp_loss=bugs.mtp_loss_shifted_one_short),
    "mtp_extra_depth_not_added": replace(_MTP, mtp_loss=bugs.mtp_loss_extra_depth_not_added),
}

#: The model family of a run, as a case describes it (the same words for every case of it).
MODEL_FAMILIES = (
    "BERT MLM",
    "GPT-2 causal LM",
    "BERT causal LM",
    "BERT pretraining",
    "GPT-2 chat fine-tuning",
    "GPT-2 DPO",
    "Mixtral MoE",
    "GPT-2 multi-token",
)
_FAMILY_NAMES = {
    "mtp": "GPT-2 multi-token",
    "moe": "Mixtral MoE",
    "mlm": "BERT MLM",
    "pretraining": "BERT pretraining",
    "chat": "GPT-2 chat fine-tuning",
    "dpo": "GPT-2 DPO",
}


def model_family(run_id: str) -> str:
    """The run's model family, one of :data:`MODEL_FAMILIES`: what its code trains, not how."""
    spec = RUNS[run_id]
    if spec.family == "clm":
        return "GPT-2 causal LM" if spec.decoder is None else "BERT causal LM"
    return _FAMILY_NAMES[spec.family]


# --------------------------------------------------------------------------------------------
# Models and steps
# --------------------------------------------------------------------------------------------


def run_model(spec: RunSpec, tokenizer: Any) -> PreTrainedModel:
    """The freshly initialised model a run trains (seeded by its ``init_seed``)."""
    if spec.family == "clm":
        if spec.decoder is not None:
            return spec.decoder(tokenizer, spec.init_seed)
        return tiny_gpt2(tokenizer, seed=spec.init_seed)
    if spec.family == "chat":
        return _without_dropout(load_checkpoint("gpt2"))
    if spec.family == "dpo":
        model = _without_dropout(load_checkpoint("gpt2"))
        model.load_state_dict(sft_weights())
        return model
    if spec.family == "mtp":
        return MTPModel(tiny_gpt2(tokenizer, seed=spec.init_seed), MTP_DEPTHS, seed=spec.init_seed)
    if spec.family == "moe":
        return tiny_mixtral(
            tokenizer, seed=spec.init_seed, router_aux_loss_coef=MOE_AUX_COEF, **moe_sizes()
        )
    pretrained = load_checkpoint("bert")
    if spec.family == "pretraining":
        return pretrained
    from transformers import BertForMaskedLM

    config: Any = pretrained.config
    model = BertForMaskedLM(config)
    model.load_state_dict(pretrained.state_dict(), strict=False)  # no pooler, no NSP head
    return model


@functools.lru_cache(maxsize=1)
def sft_weights() -> dict[str, torch.Tensor]:
    """The weights of the healthy chat run after its training (trained once per process): where
    every DPO run starts, and its reference model."""
    spec, tokenizer = RUNS["healthy_chat"], chat_data()[2]
    model = run_model(spec, tokenizer)
    step = _chat_step(model, spec, tokenizer, torch.Generator().manual_seed(SEED))
    train_loop(model, spec.lr, step, spec.steps)
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def _without_dropout(model: PreTrainedModel) -> PreTrainedModel:
    """``model`` with every dropout off (the gpt2 checkpoint was trained with 0.1): a run then
    depends on its batches only, and two runs differ by their one change."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def _mlm_step(model: torch.nn.Module, spec: RunSpec, tokenizer: Any, g: torch.Generator) -> StepFn:
    rows = sentence_rows(course_data()[0].train, tokenizer)
    stream = row_batches(rows, spec.batch_size, g)

    def step() -> dict[str, float]:
        batch = bugs.masked_batch(next(stream), tokenizer, spec.mask, g)  # (B, T) each
        labels = batch.pop("labels")
        logits = model(**batch).logits  # (B, T, V)
        loss = spec.mlm_loss(logits, labels)
        loss.backward()
        return {"loss": loss.item(), "num_items": int(num_targets(labels).sum())}

    return step


def _clm_step(model: torch.nn.Module, spec: RunSpec, tokenizer: Any, g: torch.Generator) -> StepFn:
    rows = sentence_rows(course_data()[0].train, tokenizer)
    stream = row_batches(rows, spec.batch_size, g)

    def step() -> dict[str, float]:
        micro = [
            spec.clm_batch(r, tokenizer) for r in split_by_length(next(stream), spec.micro_batches)
        ]
        loss = spec.accumulate(model, micro)
        n = sum(int(num_targets(b["labels"], shift=True).sum()) for b in micro)
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
        nsp = nsp_loss(out.seq_relationship_logits, nsl)  # logits (B, 2)
        (mlm + nsp).backward()
        correct = (out.seq_relationship_logits.argmax(-1) == nsl).float().mean()
        return {
            "loss": (mlm + nsp).item(),
            "mlm_loss": mlm.item(),
            "nsp_loss": nsp.item(),
            "nsp_accuracy": correct.item(),
            "num_items": int(num_targets(labels).sum()),
        }

    return step


def _chat_step(model: torch.nn.Module, spec: RunSpec, tokenizer: Any, g: torch.Generator) -> StepFn:
    stream = row_batches(chat_data()[0], spec.batch_size, g)

    def step() -> dict[str, float]:
        rows = []
        for r in next(stream):
            labels = spec.answer_labels(torch.tensor(r.input_ids), torch.tensor(r.assistant_masks))
            rows.append((r.input_ids, labels.tolist()))
        micro = spec.chat_batch(rows, tokenizer)  # one padded batch, or one batch per pack
        loss = spec.accumulate(model, micro)
        n = sum(int(num_targets(b["labels"], shift=True).sum()) for b in micro)
        return {"loss": loss, "num_items": n}

    return step


def _dpo_step(model: torch.nn.Module, spec: RunSpec, tokenizer: Any, g: torch.Generator) -> StepFn:
    reference = run_model(spec, tokenizer).eval()  # the model it starts from, never trained
    stream = row_batches(preference_data()[0], spec.batch_size, g)

    def step() -> dict[str, float]:
        batch = spec.preference_rows(next(stream), tokenizer)  # (2B, T) each
        logps = completion_logps(model, batch)  # (2B,): the model's summed log-probs
        ref_logps = spec.reference_logps(reference, model, batch)  # (2B,)
        losses, chosen, rejected = dpo_loss(*logps.chunk(2), *ref_logps.chunk(2), beta=BETA)
        loss = losses.mean()
        loss.backward()
        return {
            "loss": loss.item(),
            "reward_accuracy": reward_accuracies(chosen, rejected).mean().item(),
            "num_items": int(num_targets(batch["labels"], shift=True).sum()),
        }

    return step


def _moe_step(model: torch.nn.Module, spec: RunSpec, tokenizer: Any, g: torch.Generator) -> StepFn:
    rows = sentence_rows(course_data()[0].train, tokenizer)
    stream = row_batches(rows, spec.batch_size, g)

    def step() -> dict[str, float]:
        micro = [
            padded_to_length(bugs.clm_batch_fixed(r, tokenizer), MOE_LENGTH, tokenizer.pad_token_id)
            for r in split_by_length(next(stream), spec.micro_batches)
        ]  # (b, MOE_LENGTH) each
        loss, aux = spec.moe_accumulate(model, micro, spec.moe_loss)
        n = sum(int(num_targets(b["labels"], shift=True).sum()) for b in micro)
        return {"loss": loss, "aux_loss": aux, "num_items": n}

    return step


def _grad_norm(parameters: list[torch.nn.Parameter]) -> float:
    """The norm of the gradients of ``parameters`` (0 for none: no gradient reached them)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) if grads else 0.0


def _mtp_step(model: Any, spec: RunSpec, tokenizer: Any, g: torch.Generator) -> StepFn:
    rows = sentence_rows(course_data()[0].train, tokenizer)
    stream = row_batches(rows, spec.batch_size, g)

    def step() -> dict[str, float]:
        batch = bugs.clm_batch_fixed(next(stream), tokenizer)  # (B, T) each
        logits = model(batch["input_ids"], batch["attention_mask"])  # D x (B, T, V)
        loss, losses = spec.mtp_loss(logits, batch["labels"])  # (), (D,)
        loss.backward()
        depths = {f"loss_depth_{d}": float(v) for d, v in enumerate(losses.tolist(), start=1)}
        n = int(num_targets(batch["labels"], shift=True).sum())
        extra = _grad_norm([*model.blocks.parameters(), *model.norms.parameters()])
        return {"loss": loss.item(), **depths, "extra_depth_grad_norm": extra, "num_items": n}

    return step


_STEPS = {
    "mlm": _mlm_step,
    "clm": _clm_step,
    "pretraining": _pretraining_step,
    "chat": _chat_step,
    "dpo": _dpo_step,
    "moe": _moe_step,
    "mtp": _mtp_step,
}


def run(run_id: str, *, steps: int | None = None, symptoms: bool = True) -> dict[str, Any]:
    """Train run ``run_id`` (one of :data:`RUNS`) and return its record: ``history`` (per step:
    ``loss`` as the run's own code reports it, ``grad_norm``, ``num_items``; for pretraining
    also ``mlm_loss``, ``nsp_loss``, ``nsp_accuracy``; for DPO ``reward_accuracy``; for MoE
    ``aux_loss``, as the run's code reports it; for MTP each depth's ``loss_depth_<d>``) and, with
    ``symptoms``, what the trained model shows (:func:`lmlessons.bugzoo.symptoms.measure`).
    ``steps`` cuts the run short (a prefix of the full run: the same first steps)."""
    if run_id not in RUNS:
        raise ValueError(f"unknown run {run_id!r}; choose one of: {', '.join(RUNS)}")
    spec = RUNS[run_id]
    steps = spec.steps if steps is None else check_int("steps", steps, minimum=1)
    corpus, tokenizer = course_data()
    if spec.family in ("chat", "dpo"):
        tokenizer = chat_data()[2]  # the course tokenizer with the chat template
    model = run_model(spec, tokenizer)
    g = torch.Generator().manual_seed(SEED)
    record: dict[str, Any] = {"run": run_id, "family": spec.family, "steps": steps}
    if spec.trainer is not None:
        record["history"] = train_with_trainer(model, spec, corpus.train, tokenizer, steps)
    else:
        step = _STEPS[spec.family](model, spec, tokenizer, g)
        record["history"] = train_loop(model, spec.lr, step, steps)
    if symptoms:
        reference = run_model(spec, tokenizer) if spec.family == "dpo" else None  # its start
        record.update(measure(model, spec.family, corpus, tokenizer, reference=reference))
        if spec.trainer is not None:
            record["one_step_check"] = trainer_one_step_check(model, spec, corpus.train, tokenizer)
        elif spec.family == "clm":
            record["one_step_check"] = _one_step_check(model, spec, corpus, tokenizer)
        elif spec.family == "moe":
            record["one_step_check"] = _moe_padding_check(model, spec, corpus, tokenizer)
    return record


def _one_step_check(
    model: torch.nn.Module, spec: RunSpec, corpus: Any, tokenizer: Any
) -> dict[str, float]:
    """Every causal run's step code on the first step's rows, split by length into
    :data:`CHECK_MICRO_BATCHES` micro-batches, against the same rows as one batch: the logged
    loss and the gradient of the trained model
    (:func:`~lmlessons.bugzoo.symptoms.first_step_gradient_errors`)."""
    rows = sentence_rows(corpus.train, tokenizer)
    first = next(row_batches(rows, spec.batch_size, torch.Generator().manual_seed(SEED)))
    micro_rows = split_by_length(first, CHECK_MICRO_BATCHES)
    return first_step_gradient_errors(model, tokenizer, micro_rows, spec.clm_batch, spec.accumulate)


def _moe_padding_check(
    model: torch.nn.Module, spec: RunSpec, corpus: Any, tokenizer: Any
) -> dict[str, float]:
    """A MoE run's step code on the first step's rows (in its micro-batches), and on the same
    rows with every padding id replaced by ``[UNK]``
    (:func:`~lmlessons.bugzoo.symptoms.padding_sensitivity`)."""
    rows = sentence_rows(corpus.train, tokenizer)
    first = next(row_batches(rows, spec.batch_size, torch.Generator().manual_seed(SEED)))
    micro = [
        padded_to_length(bugs.clm_batch_fixed(r, tokenizer), MOE_LENGTH, tokenizer.pad_token_id)
        for r in split_by_length(first, spec.micro_batches)
    ]  # (b, MOE_LENGTH) each
    step = functools.partial(_moe_logged_loss, spec)
    return padding_sensitivity(model, micro, step, tokenizer.unk_token_id)


def _moe_logged_loss(spec: RunSpec, model: torch.nn.Module, micro: list[Any]) -> float:
    """The loss a MoE run's step logs (its backward passes done)."""
    return spec.moe_accumulate(model, micro, spec.moe_loss)[0]


def record_runs(
    run_ids: Sequence[str],
    *,
    recorded: Mapping[str, Any] | None = None,
    seconds: Mapping[str, float] | None = None,
    log: Callable[[str], None] | None = print,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Train each of ``run_ids`` (:func:`run`), timed: ``(records, seconds)`` by run id in the
    order of :data:`RUNS`, with those of an earlier recording (``recorded``, ``seconds``) kept
    for the runs not trained again. ``log``: called with one line per run (None: silent)."""
    unknown = [r for r in run_ids if r not in RUNS]
    if unknown:
        raise ValueError(f"unknown runs {unknown}; choose from {', '.join(RUNS)}")
    records, times = dict(recorded or {}), dict(seconds or {})
    for run_id in run_ids:
        start = time.perf_counter()
        records[run_id] = run(run_id)
        times[run_id] = round(time.perf_counter() - start, 1)
        if log is not None:
            log(f"{run_id:28s} {times[run_id]:6.1f} s")
    return {k: records[k] for k in RUNS if k in records}, {k: times[k] for k in RUNS if k in times}

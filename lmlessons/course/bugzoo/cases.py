"""The cases of the bug zoo (what a learner diagnoses) and the diagnoses to choose from.

A :class:`Case` is one buggy run next to its healthy reference run. Before the diagnosis a
learner sees its neutral ``setting`` and its symptoms; its ``title``, ``bug`` and ``fix`` are the
reveal. Its ``claims`` are the symptoms its ``evidence`` states, each a comparison with the
reference run that :func:`claim_holds` checks on the recorded data (the tests check every one),
so no feedback states something the runs did not show.

Case letters do not follow the order of :data:`DIAGNOSES`: the letter gives nothing away.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lmlessons.course.bugzoo import bugs
from lmlessons.course.bugzoo.records import load_records, summary

__all__ = [
    "Claim",
    "Diagnosis",
    "Case",
    "DIAGNOSES",
    "CASES",
    "METRIC_LABELS",
    "get_case",
    "claim_holds",
    "case_summaries",
    "evidence",
]

RELATIONS = ("lower", "higher", "close", "nan", "zero")


@dataclass(frozen=True)
class Claim:
    """``metric`` of the case's run is ``relation`` to ``against`` (default: the same metric
    of the reference run; else another metric of the case's own run), by a relative ``margin``:
    ``"higher"``: above ``against * (1 + margin)``; ``"lower"``: below ``against * (1 - margin)``;
    ``"close"``: within ``margin`` of it; ``"nan"``: NaN where ``against`` is not; ``"zero"``:
    exactly 0."""

    metric: str
    relation: str
    margin: float = 0.0
    against: str | None = None


@dataclass(frozen=True)
class Diagnosis:
    """One answer a learner can give: ``label`` names the bug, ``would_show`` what it would look
    like (the feedback for a wrong answer contrasts it with what the case shows)."""

    id: str
    label: str
    would_show: str


@dataclass(frozen=True)
class Case:
    """A buggy run (``run``) beside its healthy ``reference`` run, and its right ``diagnosis``."""

    id: str
    run: str
    reference: str
    diagnosis: str
    setting: str
    title: str
    evidence: str  # a template: {c[metric]} of the case, {r[metric]} of the reference
    claims: tuple[Claim, ...]
    bug: Callable[..., Any]
    fix: Callable[..., Any]
    lesson: str
    why: str


DIAGNOSES: dict[str, Diagnosis] = {
    d.id: d
    for d in (
        Diagnosis(
            "special_tokens_masked",
            "[CLS], [SEP] and [PAD] are selected for masking and predicted",
            "more targets per step than the healthy run, a train loss below it, a held-out "
            "loss no better, and now and then a special token as the guess for a real word",
        ),
        Diagnosis(
            "every_token_a_target",
            "every token has a label, not only the masked ones",
            "a train loss that collapses far below the healthy run's (copying visible tokens is "
            "easy), every token counted as a target, and a held-out masked loss that is worse",
        ),
        Diagnosis(
            "zero_over_zero",
            "the loss divides by the number of masked tokens, and a batch had none",
            "a normal curve that turns NaN at one step, on a batch with 0 targets, and stays NaN",
        ),
        Diagnosis(
            "labels_shifted_twice",
            "the labels are shifted by hand, then again inside the model",
            "a train loss above the healthy run's, a much lower held-out next-token accuracy, "
            "and samples that are not sentences",
        ),
        Diagnosis(
            "pad_is_eos",
            "pad_token = eos_token, and padding found by its id: every [SEP] lost its label",
            "an ordinary loss curve, one target fewer per sentence, and generations that never end",
        ),
        Diagnosis(
            "mean_of_means",
            "gradient accumulation averages the micro-batch means",
            "a loss curve close to the healthy run's, but an accumulated gradient that differs "
            "from the gradient of the same rows as one batch",
        ),
        Diagnosis(
            "decoder_sees_the_future",
            "BertLMHeadModel without is_decoder=True: attention sees the next token",
            "a train loss and a one-pass held-out loss far below the healthy run's, but a loss "
            "as at generation far above it, and samples that repeat a word",
        ),
        Diagnosis(
            "nsp_random_negatives",
            "the NotNext segments are random token ids, not text",
            "a train NSP accuracy near 100% but a held-out NSP accuracy at chance",
        ),
        Diagnosis(
            "lr_too_high",
            "the learning rate is too high",
            "a loss that jumps up or swings from the first steps of warm-up on, with spiking "
            "gradient norms, and no metric better than the healthy run's",
        ),
        Diagnosis(
            "no_bug",
            "no bug: the difference is noise between two runs",
            "curves and held-out metrics within a few percent of the healthy run's",
        ),
    )
}

_MLM_SETTING = (
    "BertForMaskedLM, continuing from the course's bert checkpoint, on batches of 16 single "
    "sentences padded to the longest."
)
_GPT2_SETTING = (
    "A tiny GPT-2 from random weights, on batches of 16 single sentences "
    "([CLS] sentence [SEP]) padded to the longest."
)

CASES: tuple[Case, ...] = (
    Case(
        id="A",
        run="decoder_sees_the_future",
        reference="healthy_bert_decoder",
        diagnosis="decoder_sees_the_future",
        setting="A tiny BertLMHeadModel from random weights, trained for next-token prediction "
        "on the same sentence batches as the GPT-2 cases.",
        title="BertLMHeadModel built without is_decoder=True",
        evidence="The train loss fell to {c[final_train_loss]:.2f} (healthy "
        "{r[final_train_loss]:.2f}) and the held-out loss in one pass to "
        "{c[heldout_clm_loss]:.2f}: far lower than a 250-step model can know about the next "
        "word. Scored as at generation, each prediction from its prefix only, the same held-out "
        "text costs {c[heldout_prefix_clm_loss]:.2f} (healthy {r[heldout_prefix_clm_loss]:.2f}), "
        "and the samples repeat a word. In one pass the model sees the token it must predict.",
        claims=(
            Claim("final_train_loss", "lower", 0.5),
            Claim("heldout_clm_loss", "lower", 0.5),
            Claim("heldout_prefix_clm_loss", "higher", 0.2),
        ),
        bug=bugs.decoder_without_is_decoder,
        fix=bugs.decoder_fixed,
        lesson="04",
        why="BERT's self-attention is bidirectional unless the config says is_decoder=True. "
        "BertLMHeadModel shifts the labels (position t scores token t + 1) but does not make "
        "attention causal by itself, so position t attends to position t + 1 and copies it.",
    ),
    Case(
        id="B",
        run="special_tokens_masked",
        reference="healthy_mlm",
        diagnosis="special_tokens_masked",
        setting=_MLM_SETTING,
        title="Special tokens and padding not excluded from masking",
        evidence="Each step has {c[targets_per_step]:.0f} targets where the healthy run has "
        "{r[targets_per_step]:.0f}, and the train loss is lower ({c[final_train_loss]:.2f} "
        "against {r[final_train_loss]:.2f}). Held-out, where only real words are masked, the "
        "loss is not better ({c[heldout_mlm_loss]:.2f} against {r[heldout_mlm_loss]:.2f}), and "
        "{c[heldout_special_guess_rate]:.1%} of the top guesses for a masked word are a special "
        "token (healthy {r[heldout_special_guess_rate]:.1%}). The extra targets are easy ones "
        "that real inputs never ask for.",
        claims=(
            Claim("targets_per_step", "higher", 0.2),
            Claim("final_train_loss", "lower", 0.2),
            Claim("heldout_mlm_loss", "higher", 0.005),
            Claim("heldout_special_guess_rate", "higher"),
        ),
        bug=bugs.mask_special_tokens_too,
        fix=bugs.mask_fixed,
        lesson="01",
        why="mask_tokens (like DataCollatorForLanguageModeling) selects every position it is "
        "allowed to. Without special_tokens_mask, [CLS], [SEP] and the padding become targets: "
        "[PAD] after [PAD] is trivial to predict, so the loss looks better and the model learns "
        "to answer [PAD].",
    ),
    Case(
        id="C",
        run="pad_is_eos",
        reference="healthy_clm",
        diagnosis="pad_is_eos",
        setting=_GPT2_SETTING,
        title="pad_token = eos_token, padding labels set by id",
        evidence="The train loss looks ordinary ({c[final_train_loss]:.2f}, healthy "
        "{r[final_train_loss]:.2f}) and so do the samples, but greedy continuations of held-out "
        "sentences never end: {c[heldout_stop_rate]:.0%} reach [SEP] within 40 tokens (healthy "
        "{r[heldout_stop_rate]:.0%}), {c[heldout_mean_new_tokens]:.0f} new tokens on average "
        "(healthy {r[heldout_mean_new_tokens]:.0f}). Each step has one target fewer per "
        "sentence ({c[targets_per_step]:.0f} against {r[targets_per_step]:.0f}).",
        claims=(
            Claim("final_train_loss", "close", 0.1),
            Claim("heldout_stop_rate", "lower", 0.5),
            Claim("heldout_mean_new_tokens", "higher", 0.5),
            Claim("targets_per_step", "lower", 0.02),
        ),
        bug=bugs.clm_batch_pad_is_eos,
        fix=bugs.clm_batch_fixed,
        lesson="03",
        why="With pad_token = eos_token, `labels[labels == pad_token_id] = -100` also removes the "
        "real end of every sentence: the model never learns to emit [SEP]. Mark padding with "
        "the attention mask (or a pad token of its own), never by its id.",
    ),
    Case(
        id="D",
        run="nsp_random_negatives",
        reference="healthy_pretraining",
        diagnosis="nsp_random_negatives",
        setting="BertForPreTraining (MLM + NSP), continuing from the course's bert checkpoint, "
        "on NSP pairs of the course corpus.",
        title="NotNext segments made of random token ids",
        evidence="NSP looks solved: {c[train_nsp_accuracy]:.0%} training accuracy over the last "
        "20 steps (healthy {r[train_nsp_accuracy]:.0%}). On held-out pairs whose NotNext "
        "segment is real text from another document it gets {c[heldout_nsp_accuracy]:.0%} "
        "(healthy {r[heldout_nsp_accuracy]:.0%}), a coin flip; on held-out pairs with "
        "random-id segments, {c[heldout_nsp_accuracy_random_negatives]:.0%}. It learned to tell "
        "text from noise, not whether B follows A.",
        claims=(
            Claim("train_nsp_accuracy", "higher", 0.3),
            Claim("heldout_nsp_accuracy", "lower", 0.05),
            Claim("heldout_nsp_accuracy_random_negatives", "higher", 0.2),
        ),
        bug=bugs.negatives_random_ids,
        fix=bugs.negatives_fixed,
        lesson="05",
        why="A NotNext segment must be text, from another document (Google's "
        "create_pretraining_data.py, make_nsp_pairs): then only the relation between A and B "
        "tells the classes apart. Random ids are told apart from text by any single token.",
    ),
    Case(
        id="E",
        run="nan_on_empty_mask",
        reference="healthy_mlm_one_sentence",
        diagnosis="zero_over_zero",
        setting="BertForMaskedLM from the bert checkpoint, trained one sentence per step "
        "(batch size 1) with a hand-written masked mean.",
        title="Masked mean divided by a count that can be 0",
        evidence="The loss is noisy but finite, then NaN from step {c[first_nan_step]:.0f} to "
        "the end, and so is the gradient norm. The sentence of step {c[first_nan_step]:.0f} had "
        "{c[nan_step_targets]:.0f} masked tokens; the healthy run logged a loss of 0 on it and "
        "went on. From that step on every weight is NaN: the held-out loss is "
        "{c[heldout_mlm_loss]}, and every guess is [PAD], the first id, which argmax returns "
        "for NaN logits.",
        claims=(
            Claim("final_train_loss", "nan"),
            Claim("first_nan_step", "higher"),
            Claim("nan_step_targets", "zero"),
            Claim("heldout_mlm_loss", "nan"),
        ),
        bug=bugs.mlm_loss_zero_over_zero,
        fix=bugs.mlm_loss_fixed,
        lesson="02",
        why="With 15% masking, a short batch has no masked token now and then (here: 1 "
        "sentence per step). sum / count is then 0 / 0 = NaN, and its gradient too; one NaN "
        "step turns every weight into NaN. Divide by max(count, 1), as mlm_loss does.",
    ),
    Case(
        id="F",
        run="accumulation_mean_of_means",
        reference="healthy_clm",
        diagnosis="mean_of_means",
        setting="The tiny GPT-2 again; each step's 16 sentences are sorted by length into 4 "
        "micro-batches of 4 (gradient accumulation). The healthy run takes them as one batch.",
        title="Gradient accumulation averaging micro-batch means",
        evidence="The loss curve stays close to the healthy run's ({c[final_train_loss]:.2f} "
        "against {r[final_train_loss]:.2f}), and so does the held-out loss "
        "({c[heldout_clm_loss]:.2f} against {r[heldout_clm_loss]:.2f}): the curve cannot show "
        "this bug. The gradient does: on one step's sentences, the accumulated gradient is "
        "{c[gradient_error]:.1%} away from the gradient of the same sentences as one batch; "
        "with the fixed accumulation, {c[gradient_error_fixed]:.0e} (float rounding).",
        claims=(
            Claim("final_train_loss", "close", 0.02),
            Claim("heldout_clm_loss", "close", 0.01),
            Claim("gradient_error", "higher", 1000.0, against="gradient_error_fixed"),
        ),
        bug=bugs.accumulate_mean_of_means,
        fix=bugs.accumulate_fixed,
        lesson="07",
        why="The mean of K micro-batch means weighs a token of a short micro-batch more than a "
        "token of a long one. Dividing each micro-batch's sum by the step's target count "
        "(num_items_in_batch) gives exactly the full-batch gradient.",
    ),
    Case(
        id="G",
        run="every_token_a_target",
        reference="healthy_mlm",
        diagnosis="every_token_a_target",
        setting=_MLM_SETTING,
        title="MLM labels on every position (not -100 on unmasked tokens)",
        evidence="The train loss drops to {c[final_train_loss]:.2f} (healthy "
        "{r[final_train_loss]:.2f}) with {c[targets_per_step]:.0f} targets per step, about every "
        "token of the batch (healthy {r[targets_per_step]:.0f}), and the gradient norm is "
        "{c[grad_norm]:.1f} against {r[grad_norm]:.1f}. Held-out, where only masked words "
        "count, the loss is worse ({c[heldout_mlm_loss]:.2f} against "
        "{r[heldout_mlm_loss]:.2f}): most of the training signal was copying visible tokens.",
        claims=(
            Claim("final_train_loss", "lower", 0.5),
            Claim("targets_per_step", "higher", 2.0),
            Claim("grad_norm", "lower", 0.5),
            Claim("heldout_mlm_loss", "higher", 0.005),
        ),
        bug=bugs.mask_every_token_a_target,
        fix=bugs.mask_fixed,
        lesson="02",
        why="An unmasked token is in the input: predicting it is copying. Only the selected "
        "positions may carry a label; every other label must be -100 (IGNORE_INDEX), as "
        "mask_tokens returns them.",
    ),
    Case(
        id="H",
        run="labels_shifted_twice",
        reference="healthy_clm",
        diagnosis="labels_shifted_twice",
        setting=_GPT2_SETTING,
        title="Labels shifted by hand, and again by GPT2LMHeadModel",
        evidence="The train loss stays above the healthy run's ({c[final_train_loss]:.2f} "
        "against {r[final_train_loss]:.2f}), the held-out next-token accuracy is "
        "{c[heldout_next_token_accuracy]:.1%} against {r[heldout_next_token_accuracy]:.1%}, and "
        "the samples are commas and 'the': the model learned something, but not the next token. "
        "Only {c[heldout_stop_rate]:.0%} of the greedy continuations end (healthy "
        "{r[heldout_stop_rate]:.0%}).",
        claims=(
            Claim("final_train_loss", "higher", 0.05),
            Claim("heldout_clm_loss", "higher", 0.05),
            Claim("heldout_next_token_accuracy", "lower", 0.3),
        ),
        bug=bugs.clm_batch_shifted_twice,
        fix=bugs.clm_batch_fixed,
        lesson="03",
        why="GPT2LMHeadModel (every transformers causal LM) shifts the labels inside its loss. "
        "Labels shifted by hand are shifted twice: position t learns token t + 2.",
    ),
)

#: How each compared number is named in the lesson's tables.
METRIC_LABELS: dict[str, str] = {
    "final_train_loss": "train loss, last 20 steps",
    "grad_norm": "gradient norm, last 20 steps",
    "targets_per_step": "targets per step",
    "first_nan_step": "first NaN step (0: none)",
    "nan_step_targets": "targets at the first NaN step",
    "train_nsp_accuracy": "train NSP accuracy, last 20 steps",
    "heldout_mlm_loss": "held-out masked loss",
    "heldout_mlm_accuracy": "held-out masked accuracy",
    "heldout_special_guess_rate": "held-out guesses that are special tokens",
    "heldout_clm_loss": "held-out loss, one pass",
    "heldout_prefix_clm_loss": "held-out loss, as at generation",
    "heldout_next_token_accuracy": "held-out next-token accuracy",
    "heldout_stop_rate": "generations that end with [SEP]",
    "heldout_mean_new_tokens": "tokens generated before [SEP]",
    "heldout_nsp_accuracy": "held-out NSP accuracy (real NotNext)",
    "heldout_nsp_accuracy_random_negatives": "held-out NSP accuracy (random-id NotNext)",
    "heldout_nsp_loss": "held-out NSP loss",
    "gradient_error": "accumulated gradient vs one batch",
    "gradient_error_fixed": "the same with the fixed accumulation",
}


def get_case(case_id: object) -> Case:
    """The case with id ``case_id`` (``"A"``...), or a ValueError naming the ids."""
    for case in CASES:
        if case.id == case_id:
            return case
    raise ValueError(f"unknown case {case_id!r}; the cases are {', '.join(c.id for c in CASES)}")


def claim_holds(claim: Claim, case: Mapping[str, float], reference: Mapping[str, float]) -> bool:
    """Does ``claim`` hold between the summaries of a case's run and of its reference run?"""
    if claim.relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {claim.relation!r}")
    value = case[claim.metric]
    other = case[claim.against] if claim.against else reference[claim.metric]
    if claim.relation == "nan":
        return math.isnan(value) and not math.isnan(other)
    if claim.relation == "zero":
        return value == 0
    if claim.relation == "close":
        return abs(value - other) <= claim.margin * abs(other)
    if claim.relation == "higher":
        return value > other + claim.margin * abs(other)
    return value < other - claim.margin * abs(other)


def case_summaries(
    case: Case, records: Mapping[str, dict[str, Any]] | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`~lmlessons.course.bugzoo.records.summary` of the case's run and of its reference
    (from ``records``, default: the shipped ones)."""
    records = load_records() if records is None else records
    return summary(records[case.run]), summary(records[case.reference])


def evidence(case: Case, records: Mapping[str, dict[str, Any]] | None = None) -> str:
    """The case's evidence, with the numbers of its recorded runs."""
    c, r = case_summaries(case, records)
    return case.evidence.format(c=c, r=r)

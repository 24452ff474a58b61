"""The cases of the bug zoo (what a learner diagnoses) and the diagnoses to choose from.

A :class:`Case` is one run next to its healthy reference run: a run with one bug, a run with
a too-high learning rate, or a run with no bug at all. Before the diagnosis a learner sees its
``setting``, the same words for every case of its model family (:data:`SETTINGS`), and its
symptoms; its ``title``, ``bug`` and ``fix`` are the reveal. Its ``claims`` are the symptoms its
``evidence`` states, each a comparison with the reference run that :func:`claim_holds` checks on
the recorded data (the tests check every one), so no feedback states something the runs did not
show.

Case letters do not follow the order of :data:`DIAGNOSES`: the letter gives nothing away. Two
cases share a diagnosis only as the same bug in two model families. The cases are data: a new
one is a run in :data:`~lmlessons.bugzoo.runs.RUNS` and an entry here; the widget, the
tables and the checker take it up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lmlessons.bugzoo import bugs
from lmlessons.bugzoo.records import load_records, summary
from lmlessons.bugzoo.runs import model_family

__all__ = [
    "Claim",
    "Diagnosis",
    "Case",
    "SETTINGS",
    "DIAGNOSES",
    "CASES",
    "get_case",
    "claim_holds",
    "case_summaries",
    "evidence",
]

RELATIONS = ("lower", "higher", "close", "nan", "zero", "below")


@dataclass(frozen=True)
class Claim:
    """``metric`` of the case's run is ``relation`` to ``against`` (default: the same metric
    of the reference run; else another metric of the case's own run), by a relative ``margin``:
    ``"higher"``: above ``against * (1 + margin)``; ``"lower"``: below ``against * (1 - margin)``;
    ``"close"``: within ``margin`` of it; ``"nan"``: NaN where ``against`` is not; ``"zero"``:
    exactly 0; ``"below"``: below ``margin`` itself (an absolute bound, e.g. float rounding)."""

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


#: What a learner is told about a case before the diagnosis: the same for every case of a
#: model family (:func:`~lmlessons.bugzoo.runs.model_family`), so that only the symptoms
#: tell the cases apart.
SETTINGS: dict[str, str] = {
    "BERT MLM": "A BERT MLM run: BertForMaskedLM, continuing from the course's bert checkpoint, "
    "on batches of single sentences padded to the longest.",
    "GPT-2 causal LM": "A GPT-2 causal-LM run: a tiny GPT2LMHeadModel from random weights, on "
    "batches of single sentences ([CLS] sentence [SEP]) padded to the longest.",
    "BERT causal LM": "A BERT causal-LM run: a tiny BertLMHeadModel from random weights, "
    "trained for next-token prediction on the same sentence batches as the GPT-2 runs.",
    "BERT pretraining": "A BERT pretraining run: BertForPreTraining (MLM + NSP), continuing "
    "from the course's bert checkpoint, on NSP pairs of the course corpus.",
    "GPT-2 chat fine-tuning": "A GPT-2 chat fine-tuning run: GPT2LMHeadModel, continuing from "
    "the course's gpt2 checkpoint, on the course's instruction set (a question about a sentence "
    "of the corpus, a one-word answer) in the course's chat template, 16 conversations per step.",
}


@dataclass(frozen=True)
class Case:
    """A run (``run``) beside its healthy ``reference`` run, and its right ``diagnosis``.
    ``bug`` and ``fix`` are the two functions that differ between the runs (None when the
    runs' code is the same: no bug, or another setting such as the learning rate)."""

    id: str
    run: str
    reference: str
    diagnosis: str
    title: str
    evidence: str  # a template: {c[metric]} of the case, {r[metric]} of the reference
    claims: tuple[Claim, ...]
    bug: Callable[..., Any] | None
    fix: Callable[..., Any] | None
    lesson: str  # the lesson that teaches the bug ("" for none)
    why: str

    @property
    def family(self) -> str:
        """The case's model family (one of :data:`SETTINGS`)."""
        return model_family(self.run)

    @property
    def setting(self) -> str:
        """What the learner is told before the diagnosis: its model family's setting."""
        return SETTINGS[self.family]


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
            "a train loss above the healthy run's, one target fewer per sentence or conversation "
            "(its [SEP]), the held-out words learned about as well as by the healthy run, and "
            "generations that never end",
        ),
        Diagnosis(
            "mean_of_means",
            "gradient accumulation averages the micro-batch means",
            "a loss curve close to the healthy run's, but a step whose gradient (and, slightly, "
            "logged loss) differs from those of the same rows as one batch",
        ),
        Diagnosis(
            "num_items_dropped",
            "the Trainer accumulates with a model loss that drops num_items_in_batch: the "
            "micro-batch means are added up, never divided by the accumulation steps",
            "a logged train loss and a gradient norm about K times the healthy run's (K "
            "micro-batches per step), the same targets per step, and held-out metrics as good as "
            "the healthy run's",
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
            "prompt_not_masked",
            "the prompt is trained on too: labels on every token, not only on the answer",
            "many more targets per step than the healthy run, a train loss above it, a held-out "
            "loss on the prompts far below it, and worse held-out answers",
        ),
        Diagnosis(
            "packed_without_boundaries",
            "conversations packed into one row without position_ids: attention crosses from one "
            "conversation into the next",
            "the same targets per step as the healthy run, a train loss above it, worse held-out "
            "answers when each conversation is scored alone, and the prompts and the stopping as "
            "in the healthy run",
        ),
        Diagnosis(
            "lr_too_high",
            "the learning rate is too high",
            "a train loss that climbs once the warm-up is over and stays above the healthy "
            "run's, the same targets per step, and every held-out metric worse",
        ),
        Diagnosis(
            "no_bug",
            "no bug: the difference is noise between two runs",
            "curves, held-out metrics and one-step checks within a few percent of the healthy "
            "run's",
        ),
    )
}

CASES: tuple[Case, ...] = (
    Case(
        id="A",
        run="decoder_sees_the_future",
        reference="healthy_bert_decoder",
        diagnosis="decoder_sees_the_future",
        title="BertLMHeadModel built without is_decoder=True",
        evidence="The train loss fell to {c[final_train_loss]:.2f} (healthy "
        "{r[final_train_loss]:.2f}) and the held-out loss in one pass to "
        "{c[heldout_word_loss]:.2f}: far lower than a 250-step model can know about the next "
        "word. Scored as at generation, each prediction from its prefix only, the same held-out "
        "words cost {c[heldout_prefix_word_loss]:.2f} (healthy "
        "{r[heldout_prefix_word_loss]:.2f}), and the samples repeat a word. In one pass the "
        "model sees the token it must predict.",
        claims=(
            Claim("final_train_loss", "lower", 0.5),
            Claim("heldout_word_loss", "lower", 0.5),
            Claim("heldout_prefix_word_loss", "higher", 0.2),
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
        title="Special tokens and padding not excluded from masking",
        evidence="Each step has {c[targets_per_step]:.0f} targets where the healthy run has "
        "{r[targets_per_step]:.0f}, and the train loss ends lower ({c[final_train_loss]:.2f} "
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
        title="pad_token = eos_token, padding labels set by id",
        evidence="The train loss is a little above the healthy run's ({c[final_train_loss]:.2f} "
        "against {r[final_train_loss]:.2f}) and the held-out words are learned as well "
        "({c[heldout_word_loss]:.2f} against {r[heldout_word_loss]:.2f}), but greedy "
        "continuations of held-out sentences never end: {c[heldout_stop_rate]:.0%} reach [SEP] "
        "within 40 tokens (healthy {r[heldout_stop_rate]:.0%}). Each step has one target fewer "
        "per sentence ({c[targets_per_step]:.0f} against {r[targets_per_step]:.0f}).",
        claims=(
            Claim("final_train_loss", "close", 0.1),
            Claim("heldout_word_loss", "close", 0.01),
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
        title="Masked mean divided by a count that can be 0",
        evidence="The loss is noisy but finite, then NaN from step {c[first_nan_step]:.0f} to "
        "the end, and so is the gradient norm. The batch of step {c[first_nan_step]:.0f} had "
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
        why="With 15% masking, a short batch has no masked token now and then (this run trains "
        "on 1 sentence per step). sum / count is then 0 / 0 = NaN, and its gradient too; one "
        "NaN step turns every weight into NaN. Divide by max(count, 1), as mlm_loss does.",
    ),
    Case(
        id="F",
        run="accumulation_mean_of_means",
        reference="healthy_clm",
        diagnosis="mean_of_means",
        title="Gradient accumulation averaging micro-batch means",
        evidence="The loss curve stays close to the healthy run's ({c[final_train_loss]:.2f} "
        "against {r[final_train_loss]:.2f}), and so does the held-out loss "
        "({c[heldout_word_loss]:.2f} against {r[heldout_word_loss]:.2f}): the curves cannot "
        "show this bug. The one-step check does: one step's sentences in 4 micro-batches give "
        "a gradient {c[gradient_error]:.2%} away from the gradient of the same sentences as one "
        "batch, and a logged loss {c[loss_error]:.2%} away (the healthy run's step code: "
        "{r[gradient_error]:.2%} and {r[loss_error]:.2%}).",
        claims=(
            Claim("final_train_loss", "close", 0.02),
            Claim("heldout_word_loss", "close", 0.01),
            Claim("gradient_error", "higher", 1000.0),
            Claim("loss_error", "higher", 100.0),
            Claim("gradient_error", "higher", 1000.0, against="gradient_error_fixed"),
        ),
        bug=bugs.accumulate_mean_of_means,
        fix=bugs.accumulate_fixed,
        lesson="07",
        why="This run accumulates the gradient of each step's sentences, sorted by length, over "
        "4 micro-batches. The mean of the 4 micro-batch means weighs a token of a short "
        "micro-batch more than a token of a long one. Dividing each micro-batch's sum by the "
        "step's target count (num_items_in_batch) gives exactly the full-batch gradient.",
    ),
    Case(
        id="G",
        run="every_token_a_target",
        reference="healthy_mlm",
        diagnosis="every_token_a_target",
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
        title="Labels shifted by hand, and again by GPT2LMHeadModel",
        evidence="The train loss stays above the healthy run's ({c[final_train_loss]:.2f} "
        "against {r[final_train_loss]:.2f}), the held-out accuracy on the words is "
        "{c[heldout_word_accuracy]:.1%} against {r[heldout_word_accuracy]:.1%}, the held-out "
        "loss {c[heldout_word_loss]:.2f} against {r[heldout_word_loss]:.2f}, and the samples "
        "are commas and 'the': the model learned something, but not the next token. Each step "
        "has one target fewer per sentence ({c[targets_per_step]:.0f} against "
        "{r[targets_per_step]:.0f}).",
        claims=(
            Claim("final_train_loss", "higher", 0.05),
            Claim("heldout_word_loss", "higher", 0.05),
            Claim("heldout_word_accuracy", "lower", 0.5),
            Claim("targets_per_step", "lower", 0.02),
        ),
        bug=bugs.clm_batch_shifted_twice,
        fix=bugs.clm_batch_fixed,
        lesson="03",
        why="GPT2LMHeadModel (every transformers causal LM) shifts the labels inside its loss. "
        "Labels shifted by hand are shifted twice: position t learns token t + 2.",
    ),
    Case(
        id="I",
        run="bert_decoder_other_seed",
        reference="healthy_bert_decoder",
        diagnosis="no_bug",
        title="No bug: the healthy code from other random initial weights",
        evidence="Every instrument is within a few percent of the healthy run's: train loss "
        "{c[final_train_loss]:.2f} against {r[final_train_loss]:.2f}, held-out loss "
        "{c[heldout_word_loss]:.2f} against {r[heldout_word_loss]:.2f}, as at generation "
        "{c[heldout_prefix_word_loss]:.2f} against {r[heldout_prefix_word_loss]:.2f}, "
        "{c[heldout_stop_rate]:.0%} of the generations end (healthy "
        "{r[heldout_stop_rate]:.0%}), and the one-step checks agree with one batch. The curves "
        "differ step by step, by the noise between two runs.",
        claims=(
            Claim("final_train_loss", "close", 0.02),
            Claim("heldout_word_loss", "close", 0.02),
            Claim("heldout_word_accuracy", "close", 0.05),
            Claim("heldout_prefix_word_loss", "close", 0.02),
            Claim("heldout_stop_rate", "close", 0.05),
            Claim("gradient_error", "below", 1e-5),
            Claim("loss_error", "below", 1e-5),
        ),
        bug=None,
        fix=None,
        lesson="",
        why="Both runs are the healthy code on the same batches; only the seed of the random "
        "initial weights differs. Two healthy runs never match step by step: a difference of a "
        "few percent on one instrument is noise. A bug shows on two or more instruments.",
    ),
    Case(
        id="J",
        run="lr_too_high",
        reference="healthy_pretraining",
        diagnosis="lr_too_high",
        title="Learning rate 10 times too high for continuing from a checkpoint",
        evidence="The train loss climbs once the 20 warm-up steps are over and ends at "
        "{c[final_train_loss]:.2f} (healthy {r[final_train_loss]:.2f}), with the same "
        "{c[targets_per_step]:.0f} targets per step. Every held-out metric is worse: masked "
        "loss {c[heldout_mlm_loss]:.2f} against {r[heldout_mlm_loss]:.2f}, NSP accuracy "
        "{c[heldout_nsp_accuracy]:.0%} against {r[heldout_nsp_accuracy]:.0%}, and "
        "{c[heldout_nsp_accuracy_random_negatives]:.0%} against "
        "{r[heldout_nsp_accuracy_random_negatives]:.0%} on random-id NotNext segments.",
        claims=(
            Claim("final_train_loss", "higher", 0.05),
            Claim("targets_per_step", "close", 0.001),
            Claim("heldout_mlm_loss", "higher", 0.02),
            Claim("heldout_mlm_accuracy", "lower", 0.05),
            Claim("heldout_nsp_accuracy", "lower", 0.05),
            Claim("heldout_nsp_accuracy_random_negatives", "lower", 0.05),
        ),
        bug=None,
        fix=None,
        lesson="",
        why="The code is the healthy run's; the learning rate is 1e-3 instead of 1e-4. The "
        "bert checkpoint was trained with a peak of 1e-3 that decayed to 0 (a cosine "
        "schedule). Starting again at 1e-3 moves the weights away from where it ended: the "
        "train loss rises once the warm-up is over, and every held-out metric gets worse. "
        "Continuing from a checkpoint wants a smaller learning rate (here 1e-4).",
    ),
    Case(
        id="K",
        run="packed_without_boundaries",
        reference="healthy_chat_packed",
        diagnosis="packed_without_boundaries",
        title="Conversations packed into one row without position_ids",
        evidence="The targets per step are the healthy run's ({c[targets_per_step]:.0f}), and so "
        "are the loss on the held-out prompts ({c[heldout_prompt_loss]:.2f} against "
        "{r[heldout_prompt_loss]:.2f}) and the stopping ({c[heldout_stop_rate]:.0%} of the "
        "greedy answers end). But the train loss stays above the healthy run's "
        "({c[final_train_loss]:.2f} against {r[final_train_loss]:.2f}), and held-out, each "
        "conversation scored alone, the answers are worse: loss {c[heldout_answer_loss]:.2f} "
        "against {r[heldout_answer_loss]:.2f}, {c[heldout_answer_accuracy]:.0%} of the answer "
        "words right against {r[heldout_answer_accuracy]:.0%}. The same labels, learned in a "
        "context the model does not have when it answers.",
        claims=(
            Claim("targets_per_step", "close", 0.001),
            Claim("heldout_prompt_loss", "close", 0.05),
            Claim("heldout_stop_rate", "close", 0.02),
            Claim("final_train_loss", "higher", 0.1),
            Claim("heldout_answer_loss", "higher", 0.1),
            Claim("heldout_answer_accuracy", "lower", 0.3),
        ),
        bug=bugs.chat_packs_no_boundaries,
        fix=bugs.chat_packs_fixed,
        lesson="09",
        why="Both runs pack each step's conversations into rows of up to 128 tokens without "
        "padding (as DataCollatorWithFlattening does). What tells the model where a "
        "conversation ends is position_ids restarting at 0: from them, with no attention mask "
        "and no cache, transformers builds a block-diagonal causal mask. Without them the row is "
        "one long document: every answer is trained while it can attend to the conversations "
        "before it, at positions that run on. Alone, as at inference, the model answers worse.",
    ),
    Case(
        id="L",
        run="trainer_drops_num_items",
        reference="healthy_mlm_trainer",
        diagnosis="num_items_dropped",
        title="Trainer with gradient accumulation and BertForMaskedLM's own loss",
        evidence="The logged train loss is {c[final_train_loss]:.2f} where the healthy run logs "
        "{r[final_train_loss]:.2f}, and the gradient norm {c[grad_norm]:.1f} against "
        "{r[grad_norm]:.1f}: both about 4 times, with the same {c[targets_per_step]:.0f} "
        "targets per step. Held-out the model is as good (masked loss {c[heldout_mlm_loss]:.2f} "
        "against {r[heldout_mlm_loss]:.2f}): clipping and AdamW undo a constant factor. One "
        "Trainer step of 16 sentences in 4 micro-batches gives a gradient "
        "{c[gradient_norm_ratio]:.2f} times as large as the same sentences as one batch (the "
        "healthy run's Trainer: {r[gradient_norm_ratio]:.2f}).",
        claims=(
            Claim("final_train_loss", "higher", 2.0),
            Claim("grad_norm", "higher", 2.0),
            Claim("targets_per_step", "close", 0.001),
            Claim("heldout_mlm_loss", "close", 0.01),
            Claim("gradient_norm_ratio", "higher", 2.0),
            Claim("gradient_norm_ratio", "higher", 2.0, against="gradient_norm_ratio_fixed"),
        ),
        bug=bugs.trainer_model_loss,
        fix=bugs.trainer_fixed,
        lesson="07",
        why="Both runs train with transformers' Trainer, 4 micro-batches of 4 sentences per "
        "step. BertForMaskedLM's forward takes **kwargs, so the Trainer passes it "
        "num_items_in_batch and no longer divides its loss by the 4 accumulation steps; but the "
        "model ignores the count and returns its micro-batch's mean. The step adds up 4 means: "
        "the logged loss and the gradient are about 4 times too large. Here clipping at 1.0 and "
        "AdamW hide it from the held-out metrics; a learning rate tuned with it, another "
        "optimizer, or losses compared across accumulation settings do not. The fix: a "
        "compute_loss_func that divides by num_items_in_batch.",
    ),
    Case(
        id="M",
        run="prompt_not_masked",
        reference="healthy_chat",
        diagnosis="prompt_not_masked",
        title="Fine-tuning on the whole conversation, prompt included",
        evidence="Each step has {c[targets_per_step]:.0f} targets where the healthy run has "
        "{r[targets_per_step]:.0f}, and the train loss is higher ({c[final_train_loss]:.2f} "
        "against {r[final_train_loss]:.2f}): most targets are words of the questions, harder "
        "than one-word answers. Held-out, the model predicts the prompts far better (loss "
        "{c[heldout_prompt_loss]:.2f} against {r[heldout_prompt_loss]:.2f}) and the answers "
        "worse (loss {c[heldout_answer_loss]:.2f} against {r[heldout_answer_loss]:.2f}, "
        "{c[heldout_answer_accuracy]:.0%} of the answer words right against "
        "{r[heldout_answer_accuracy]:.0%}); its samples answer 'the' to every question.",
        claims=(
            Claim("targets_per_step", "higher", 5.0),
            Claim("final_train_loss", "higher", 0.2),
            Claim("heldout_prompt_loss", "lower", 0.5),
            Claim("heldout_answer_loss", "higher", 0.1),
            Claim("heldout_answer_accuracy", "lower", 0.3),
        ),
        bug=bugs.answer_labels_everything,
        fix=bugs.answer_labels_fixed,
        lesson="10",
        why="Fine-tuning should teach the model to write answers, not questions: only the "
        "answer and its end-of-turn [SEP] carry labels (assistant_only_labels, from the chat "
        "template's {% generation %} mask). With labels on every token, about 14 of every 15 "
        "targets are prompt tokens: the reported loss mostly measures the prompts, the steps go "
        "into predicting questions, and the held-out answers get worse.",
    ),
    Case(
        id="N",
        run="chat_pad_is_eos",
        reference="healthy_chat",
        diagnosis="pad_is_eos",
        title="pad_token = eos_token in chat fine-tuning, padding labels set by id",
        evidence="Each step has {c[targets_per_step]:.0f} targets where the healthy run has "
        "{r[targets_per_step]:.0f}: one fewer per conversation. The words of the answers are "
        "learned about as well (held-out loss {c[heldout_answer_loss]:.2f} against "
        "{r[heldout_answer_loss]:.2f}), but only {c[heldout_stop_rate]:.0%} of the greedy "
        "answers end within 8 tokens (healthy {r[heldout_stop_rate]:.0%}): the samples run on. "
        "The train loss is higher ({c[final_train_loss]:.2f} against "
        "{r[final_train_loss]:.2f}): the easiest target, the [SEP] after a one-word answer, is "
        "gone.",
        claims=(
            Claim("targets_per_step", "lower", 0.3),
            Claim("heldout_answer_loss", "close", 0.05),
            Claim("heldout_stop_rate", "lower", 0.9),
            Claim("heldout_mean_new_tokens", "higher", 2.0),
            Claim("final_train_loss", "higher", 0.2),
        ),
        bug=bugs.chat_batch_pad_is_eos,
        fix=bugs.chat_batch_fixed,
        lesson="10",
        why="Case C's bug in chat fine-tuning. With pad_token = eos_token, `labels[input_ids == "
        "pad_token_id] = -100` also removes the [SEP] that ends every answer, the one target "
        "that teaches the model to stop. Give the tokenizer a pad token of its own (the course "
        "chat tokenizer keeps [PAD]) or mark padding by the attention mask.",
    ),
)


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
    if claim.relation == "below":
        return value < claim.margin
    if claim.relation == "close":
        return abs(value - other) <= claim.margin * abs(other)
    if claim.relation == "higher":
        return value > other + claim.margin * abs(other)
    return value < other - claim.margin * abs(other)


def case_summaries(
    case: Case, records: Mapping[str, dict[str, Any]] | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`~lmlessons.bugzoo.records.summary` of the case's run and of its reference
    (from ``records``, default: the shipped ones)."""
    records = load_records() if records is None else records
    return summary(records[case.run]), summary(records[case.reference])


def evidence(case: Case, records: Mapping[str, dict[str, Any]] | None = None) -> str:
    """The case's evidence, with the numbers of its recorded runs."""
    c, r = case_summaries(case, records)
    return case.evidence.format(c=c, r=r)

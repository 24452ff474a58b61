"""Quiz content for the lessons: multiple choice, an explanation for every choice.

Lesson authors call ``quiz("04")`` (all questions of lesson 04) or ``quiz("04.1")`` (one). Each
number stated here is computed in tests/test_exercises.py (``test_quiz_numbers``); each claim
about transformers was read in its installed source (5.x): ``data/data_collator.py``,
``loss/loss_utils.py``, ``models/bert/modeling_bert.py``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Choice:
    text: str
    correct: bool
    why: str


@dataclass(frozen=True)
class Question:
    id: str  # "LL.n"
    prompt: str
    choices: tuple[Choice, ...]


def _q(id: str, prompt: str, *choices: tuple[str, bool, str]) -> Question:
    q = Question(id, prompt, tuple(Choice(*c) for c in choices))
    if sum(c.correct for c in q.choices) != 1:  # pragma: no cover - content error
        raise ValueError(f"quiz {id} must have exactly one correct choice")
    return q


QUIZZES: dict[str, tuple[Question, ...]] = {
    "01": (
        _q(
            "01.1",
            "With BERT's defaults (mlm_probability=0.15, mask_replace_prob=0.8, "
            "random_replace_prob=0.1), what share of all non-special tokens appear as [MASK] in "
            "the model's input?",
            (
                "15%",
                False,
                "15% are selected for prediction, but only 80% of those become [MASK]; the others "
                "are replaced by a random id or kept.",
            ),
            (
                "12%",
                True,
                "0.15 x 0.8 = 0.12. Another 1.5% (0.15 x 0.1) become a random id and 1.5% keep "
                "their token; all 15% are predicted.",
            ),
            (
                "80%",
                False,
                "80% is the share of the selected tokens that become [MASK], not of all tokens.",
            ),
            (
                "13.5%",
                False,
                "0.15 x 0.9 = 13.5% counts the random replacements too; only 0.15 x 0.8 = 12% "
                "become [MASK].",
            ),
        ),
        _q(
            "01.2",
            "Why does BERT keep some selected tokens unchanged (but still predict them)?",
            (
                "So the model must also produce good predictions for real, unmasked tokens: "
                "fine-tuning inputs never contain [MASK].",
                True,
                "Right. If every target were a [MASK], the model could ignore the "
                "representations of real tokens; random and kept tokens close that gap between "
                "pretraining and fine-tuning (BERT, section 3.1).",
            ),
            (
                "To save compute.",
                False,
                "Kept tokens are still predicted and cost exactly as much as masked ones.",
            ),
            (
                "Because their label is -100.",
                False,
                "Their label is their original id; that is what makes them "
                "targets. -100 marks the positions that were not selected.",
            ),
            (
                "To avoid predicting special tokens.",
                False,
                "Special tokens are never selected in the first place "
                "(`special_tokens_mask`); keeping concerns ordinary tokens that were selected.",
            ),
        ),
    ),
    "02": (
        _q(
            "02.1",
            "A batch has 2 sequences of 100 positions; 30 positions are masked (labels not "
            "-100). The MLM loss divides the summed cross-entropy by:",
            (
                "200",
                False,
                "Dividing by every position counts the 170 unmasked ones, which have no loss: the "
                "loss and its gradient shrink by 200/30, about 6.7x.",
            ),
            (
                "30",
                True,
                "The mean over positions whose label is not -100, as transformers' "
                "`ForMaskedLMLoss` (cross-entropy with ignore_index=-100, reduction='mean').",
            ),
            (
                "2",
                False,
                "A per-sequence sum makes the loss grow with the sequence length and the masking "
                "rate.",
            ),
            (
                "Each sequence's own count, then the two means are averaged",
                False,
                "That weighs a sequence with 5 masked tokens like one with 25. Every masked "
                "token of the batch must weigh the same.",
            ),
        ),
        _q(
            "02.2",
            "What does `F.cross_entropy(logits, labels)` (reduction='mean') return when every "
            "label in the batch is -100?",
            ("0", False, "It would be convenient, but the mean over zero targets is 0 / 0."),
            (
                "NaN",
                True,
                "0 / 0 = NaN, silently. Its gradient is zero, but the NaN ruins the logged loss "
                "and any sum it enters; with a weighted loss sum(w*nll)/sum(w) the weights "
                "themselves become NaN. `lmlessons.mlm_loss` returns sum / max(count, 1) = 0, "
                "which still backpropagates.",
            ),
            ("An error", False, "No error is raised; the NaN arrives silently."),
            (
                "The mean over all positions",
                False,
                "-100 positions are never counted, whatever the reduction.",
            ),
        ),
    ),
    "03": (
        _q(
            "03.1",
            "You train `GPT2LMHeadModel` (or `BertLMHeadModel`) with `labels=input_ids.clone()`, "
            "without shifting anything yourself. The logits at position t are trained to predict:",
            (
                "the token at position t",
                False,
                "That would be copying the input. The model's loss shifts the labels for you.",
            ),
            (
                "the token at position t + 1",
                True,
                "`ForCausalLMLoss` pads the labels with -100 on the right and takes `labels[..., "
                "1:]`, so position t is scored against token t + 1 and the last position against "
                "nothing.",
            ),
            (
                "the token at position t + 2",
                False,
                "That is what happens when you shift the labels yourself and "
                "the model shifts them again.",
            ),
            (
                "the token at position t - 1",
                False,
                "The shift goes forward: each position predicts what comes next.",
            ),
        ),
        _q(
            "03.2",
            "The batch is right-padded and the tokenizer uses EOS as its pad token (`pad_token = "
            "eos_token`). `DataCollatorForLanguageModeling(mlm=False)` builds the labels. What "
            "goes wrong?",
            (
                "Nothing: padding is excluded from the loss by the attention mask.",
                False,
                "The attention mask only changes attention; the loss looks at the labels alone.",
            ),
            (
                "Every EOS label becomes -100, so the model never learns to end a text.",
                True,
                "The collator sets `labels[labels == pad_token_id] = -100`; with pad = EOS that "
                "also erases the real EOS tokens. Use a distinct pad token, or build labels from "
                "the attention mask.",
            ),
            (
                "The labels are shifted twice.",
                False,
                "The collator does not shift at all (`mlm=False` copies "
                "input_ids); only the model shifts.",
            ),
            (
                "The loss becomes NaN.",
                False,
                "The other tokens are still targets, so the loss stays finite; the "
                "damage is silent.",
            ),
        ),
    ),
    "04": (
        _q(
            "04.1",
            "What does `is_decoder=True` change in `BertLMHeadModel`?",
            (
                "It turns on the label shift in the loss.",
                False,
                "The loss (`ForCausalLMLoss`) shifts the labels whatever `is_decoder` says.",
            ),
            (
                "Self-attention becomes causal: position t no longer sees positions after t.",
                True,
                "`BertModel` builds a causal mask instead of a bidirectional one (it also "
                "enables the key/value cache and allows cross-attention layers).",
            ),
            (
                "It adds cross-attention layers.",
                False,
                "That is `add_cross_attention=True`, which needs "
                "`is_decoder=True`; `EncoderDecoderModel` sets both for its decoder.",
            ),
            (
                "It replaces the MLM head by a new LM head.",
                False,
                "The head is the same `BertOnlyMLMHead` as in "
                "`BertForMaskedLM`, which is why BERT weights can warm-start a decoder.",
            ),
        ),
        _q(
            "04.2",
            "You build `BertLMHeadModel` *without* `is_decoder=True` and train it on "
            "`labels=input_ids`. What happens?",
            (
                "transformers logs a warning and training runs, but every position can attend to "
                "the next token it must predict.",
                True,
                "Attention stays bidirectional, so the model can learn to copy token t + 1 from "
                "its input: the training loss can fall towards 0 while the model learns nothing "
                "it could generate with.",
            ),
            (
                "An exception is raised.",
                False,
                'Only a warning is logged: "If you want to use `BertLMHeadModel` '
                'as a standalone, add `is_decoder=True.`"',
            ),
            (
                "It trains as a masked LM.",
                False,
                "Nothing is masked; the loss is still the shifted next-token loss.",
            ),
            ("The loss is NaN.", False, "The loss is finite; the failure is silent."),
        ),
    ),
    "05": (
        _q(
            "05.1",
            "In BERT and transformers, `next_sentence_label = 0` means:",
            (
                "IsNext: B is the text that follows A.",
                True,
                "0 = IsNext, 1 = NotNext, as `BertForPreTraining` reads it.",
            ),
            (
                "NotNext: B comes from another document.",
                False,
                "That is 1. d2l.ai uses the opposite convention "
                "(is_next=True -> 1); mixing code from both silently flips the task.",
            ),
            (
                "The example is ignored by the loss.",
                False,
                "Ignoring is -100; NSP labels are always 0 or 1.",
            ),
            (
                "B comes from the same document but not right after A.",
                False,
                "BERT has no such class.",
            ),
        ),
        _q(
            "05.2",
            "Why must a NotNext segment B be real text from *another document*?",
            (
                "Random token ids are not language: the classifier could tell them apart without "
                "learning how sentences connect.",
                True,
                "Google's create_pretraining_data.py takes B from a different, randomly "
                "chosen document, starting at a random sentence.",
            ),
            (
                "Random ids would fall outside the vocabulary.",
                False,
                "Random ids drawn from [0, vocab_size) are "
                "valid ids; the problem is that they are not text.",
            ),
            (
                "The tokenizer could not decode random ids.",
                False,
                "It could; decoding is irrelevant to training.",
            ),
            (
                "B from A's own document would be an even better negative.",
                False,
                "It can be the true next sentence (a mislabelled example). ALBERT's harder "
                "same-document task swaps two consecutive segments, which is a different "
                "objective (SOP).",
            ),
        ),
    ),
    "06": (
        _q(
            "06.1",
            "Given both `labels` and `next_sentence_label`, `BertForPreTraining` returns as its "
            "loss:",
            (
                "MLM loss + NSP loss",
                True,
                "The mean cross-entropy over masked tokens plus the mean cross-entropy "
                "over sequences, unweighted, as Google's run_pretraining.py.",
            ),
            ("(MLM loss + NSP loss) / 2", False, "The two are added, not averaged."),
            (
                "the MLM loss only; NSP is a metric",
                False,
                "NSP is trained: its loss is part of the total.",
            ),
            (
                "a sum over tokens of the MLM loss, plus NSP",
                False,
                "The MLM part is a mean over the masked tokens.",
            ),
        ),
        _q(
            "06.2",
            "You call `BertForPreTraining(input_ids, labels=mlm_labels)` without "
            "`next_sentence_label`. What is `outputs.loss`?",
            (
                "The MLM loss.",
                False,
                "transformers 5.x computes the loss only when both label sets are given.",
            ),
            (
                "None",
                True,
                "No loss unless both `labels` and `next_sentence_label` are passed; compute the "
                "parts yourself (e.g. with `lmlessons.mlm_loss`) if you only want one.",
            ),
            ("MLM + NSP, with NSP labels taken as 0.", False, "No labels are invented."),
            ("An error is raised.", False, "No error: the loss is simply missing."),
        ),
    ),
    "07": (
        _q(
            "07.1",
            "Two micro-batches are accumulated into one step: the first has 1 target token with "
            "loss 2.0, the second 99 target tokens with total loss 99.0. The full-batch loss is "
            "1.01. What did averaging the two micro-batch means give (transformers' Trainer "
            "before October 2024)?",
            (
                "1.01",
                False,
                "That is the correct value, sum(S_i) / sum(n_i) = 101 / 100; the per-micro-batch "
                "means 2.0 and 1.0 average to something else.",
            ),
            (
                "1.5",
                True,
                "(2.0 + 1.0) / 2 = 1.5: the single token weighs as much as the other 99 "
                "together. The fix divides each micro-batch's sum by the step's total count, "
                "`num_items_in_batch`.",
            ),
            ("101", False, "That is the summed loss, not divided by the 100 target tokens."),
            ("2.0", False, "That is the first micro-batch's mean alone."),
        ),
        _q(
            "07.2",
            "With `num_items_in_batch` for a causal LM, which count must you pass?",
            (
                "The number of labels that are not -100 after the shift, over all micro-batches "
                "of the step.",
                True,
                "Each row loses one target to the shift (the last position predicts nothing), so "
                "count the shifted targets.",
            ),
            (
                "The number of tokens in the micro-batch, padding included.",
                False,
                "Padding has no loss; counting it shrinks the loss.",
            ),
            (
                "The number of labels that are not -100 before the shift.",
                False,
                "That over-counts one target per "
                "row: the last position of every row has nothing to predict.",
            ),
            (
                "The number of micro-batches.",
                False,
                "That is the buggy scheme again: it divides means, not sums.",
            ),
        ),
        _q(
            "07.3",
            "A batch of 8 x 512 tokens with a 30,522-token vocabulary: how much memory do the "
            "float32 MLM logits take if the head runs on every position, and if it runs on the "
            "15% masked positions only?",
            (
                "About 477 MiB, and about 72 MiB.",
                True,
                "8 x 512 x 30,522 x 4 bytes = 500,072,448 bytes = 476.9 MiB; 15% of that is 71.5 "
                "MiB. That is why Google's run_pretraining.py and ModernBERT's sparse_prediction "
                "gather the masked positions before the output layer.",
            ),
            (
                "About 119 MiB, and about 18 MiB.",
                False,
                "That counts values, not bytes: 125,018,112 values (119.2 Mi) of 4 bytes each.",
            ),
            (
                "About 477 MiB either way.",
                False,
                "Rows whose label is -100 contribute nothing to the loss; a sparse "
                "head never computes them.",
            ),
            (
                "About 3.7 GiB, and about 572 MiB.",
                False,
                "That is 8 times too much: it counts bits as bytes.",
            ),
        ),
    ),
}

"""Quiz content for the lessons: multiple choice, an explanation for every choice.

Lesson authors call ``quiz("04")`` (all questions of lesson 04) or ``quiz("04.1")`` (one). Each
number stated here is computed in tests/test_exercises.py (``test_quiz_numbers``); each claim
about another system (transformers, Google's BERT, ...) has an entry under "Quizzes" in
docs/claims.md, with a behaviour test in tests/test_claims_quiz.py or a citation.

Choices are written in any order; a question *shows* them in a seeded shuffled order
(:attr:`Question.shown`), derived from its id alone, so the stored outputs never change and the
right answer cannot be guessed from its position. ``tests/test_exercises.py`` checks that over
all questions every position holds the right answer 15-35% of the time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

#: Seeds every question's shuffle. 367 spreads the right answers of the lessons' 39 questions
#: over A-D as 10, 11, 9 and 9 times, and never puts more than 2 of one lesson at one letter.
ORDER_SEED = 367


def display_order(id: str, n: int, seed: int = ORDER_SEED) -> tuple[int, ...]:
    """The order in which question ``id`` shows its ``n`` choices (indices into the written
    order). A string seed is hashed with SHA-512 and ``random()`` is stable across Python
    versions, so the order is the same on every machine and every run."""
    rng = random.Random(f"{seed}:{id}")
    keys = [rng.random() for _ in range(n)]
    return tuple(sorted(range(n), key=keys.__getitem__))


@dataclass(frozen=True)
class Choice:
    text: str
    correct: bool
    why: str


@dataclass(frozen=True)
class Question:
    id: str  # "LL.n"
    prompt: str
    choices: tuple[Choice, ...]  # as written
    order: tuple[int, ...] = field(default=())  # the shown order; () keeps the written one

    @property
    def shown(self) -> tuple[Choice, ...]:
        """The choices in the order the learner sees them (letter A first)."""
        return tuple(self.choices[i] for i in self.order) if self.order else self.choices


def _q(id: str, prompt: str, *choices: tuple[str, bool, str], shuffle: bool = True) -> Question:
    written = tuple(Choice(*c) for c in choices)
    order = display_order(id, len(written)) if shuffle else ()
    q = Question(id, prompt, written, order)
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
        _q(
            "01.3",
            "Spot the bug: a hand-written masker selects positions with "
            "`torch.rand(input_ids.shape) < 0.15` on a right-padded batch, and builds labels from "
            "that selection. What goes wrong?",
            (
                "Nothing: padding has `attention_mask` 0, so the loss skips it.",
                False,
                "The attention mask only changes what the model attends to; the loss reads the "
                "labels alone, and a selected [PAD] gets a real label.",
            ),
            (
                "[CLS], [SEP] and [PAD] get selected too: the model is scored on predicting "
                "padding, and the number of such targets depends on the batch's padding.",
                True,
                "In the lesson a third of the naive selections were special tokens, most of them "
                "[PAD]. Pass `special_tokens_mask` so these positions are never selected.",
            ),
            (
                "Every row gets exactly 15% of its tokens selected.",
                False,
                "A per-position coin flip gives a binomial count per row, not an exact share; "
                "that is not the bug here.",
            ),
            (
                "It raises an error when it meets a [PAD] token.",
                False,
                "Nothing checks the ids: the bug is silent, which is what makes it dangerous.",
            ),
        ),
        _q(
            "01.4",
            "A sentence has 15 eligible tokens, masked with per-token (Bernoulli) selection at "
            "mlm_probability=0.15. In what share of the draws does it get no target at all?",
            (
                "Never: 15% of 15 tokens rounds to 2 targets.",
                False,
                "Rounding to a fixed count is Google's exact-count recipe. Per-token selection "
                "flips one coin per token, so the count varies from draw to draw.",
            ),
            (
                "About 8.7% of the draws.",
                True,
                "Every one of the 15 coins must come up 'not selected': 0.85^15 = 0.087. The "
                "lesson measured it over 5,000 draws; lesson 02 shows the NaN such a batch causes.",
            ),
            (
                "About 15% of the draws.",
                False,
                "15% is the chance that one given token is selected, not the chance that none is.",
            ),
            (
                "Practically never: 0.15^15.",
                False,
                "0.15^15 is the chance that *every* token is selected; no target needs every "
                "token to stay unselected, which is far more likely.",
            ),
        ),
        _q(
            "01.5",
            "A masking collator creates its seeded generator only `if self.seed and "
            "self.generator is None:`. You create it with `seed=0`. What do you get?",
            (
                "Masks drawn from the global generator: `seed=0` is silently ignored, because 0 "
                "is falsy.",
                True,
                "The run is then reproducible only through `torch.manual_seed`, and only if "
                "nothing else draws random numbers in between. The installed transformers' "
                "`DataCollatorForLanguageModeling` honours `seed=0`: its masks do not depend on "
                "the global seed.",
            ),
            (
                "An error: 0 is not a valid seed.",
                False,
                "0 is a valid seed; the old test simply treated it as 'no seed'.",
            ),
            (
                "The same masks for every batch (static masking).",
                False,
                "A seeded generator still draws new masks for every batch; the seed only makes "
                "the sequence of masks replayable.",
            ),
            (
                "The same masks as with `seed=1`.",
                False,
                "Different seeds give different sequences of masks; the trap is that 0 was not "
                "used at all.",
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
        _q(
            "02.3",
            "A 'model' that only copies its input token (score 20 for it, 0 for every other id) "
            "is scored on masked held-out sentences. What do you expect?",
            (
                "Scored on every real position: most tokens right and a low loss. Scored on the "
                "selected positions: right only where the selected token was kept.",
                True,
                "Unselected positions show their own answer. On the selected ones the input is "
                "[MASK] (80%), a random id (10%) or the kept token (10%), so copying earns "
                "credit only for the kept ones.",
            ),
            (
                "Bad either way: the copy model knows nothing about language.",
                False,
                "It knows nothing, yet scored on every position it looks excellent: that is why "
                "the unselected positions must be -100.",
            ),
            (
                "Good either way: it reproduces the text.",
                False,
                "At a [MASK] position there is nothing to copy; its score there is as bad as a "
                "wrong guess can be.",
            ),
            (
                "Better on the selected positions than on all of them.",
                False,
                "The selected positions are the hard ones: most of them hide their token.",
            ),
        ),
        _q(
            "02.4",
            "Spot the bug: a loss written as `(weights * nll).sum() / weights.sum()` with "
            "`weights = (labels != -100).float()` meets a batch with no target, then "
            "`optimizer.step()` runs. What happens?",
            (
                "The loss is NaN but its gradient is zero, so the weights survive the step.",
                False,
                "That is `F.cross_entropy` with `ignore_index`, which gives ignored positions no "
                "gradient at all. Here the gradient goes through 1 / sum(weights) = 1 / 0.",
            ),
            (
                "The gradient is NaN too, and one step turns every weight tensor into NaN.",
                True,
                "0 x infinity = NaN reaches every parameter. Google's run_pretraining.py adds "
                "1e-5 to the denominator; `lmlessons.mlm_loss` divides by max(count, 1).",
            ),
            (
                "The loss is 0 and nothing changes.",
                False,
                "0 needs a guarded denominator such as max(count, 1); this one divides by 0.",
            ),
            (
                "PyTorch raises a ZeroDivisionError.",
                False,
                "Tensor division by 0 never raises: it returns inf or NaN silently.",
            ),
        ),
        _q(
            "02.5",
            "A trained MLM is scored over its held-out targets, split by what each target showed "
            "in the input. Which targets does it get right most often?",
            (
                "Those that became [MASK].",
                False,
                "A [MASK] hides the answer; the model must infer it from the context alone.",
            ),
            (
                "Those replaced by a random token.",
                False,
                "These are the hardest: the input actively misleads, and the model must "
                "distrust it.",
            ),
            (
                "Those kept unchanged.",
                True,
                "The answer is in the input and the model learns to trust it often (84.5% in the "
                "lesson, against 23.2% for [MASK] and 17.6% for random).",
            ),
            (
                "All three about equally: a target is a target.",
                False,
                "The loss treats them alike, but what the input shows makes them very different "
                "in difficulty.",
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
        _q(
            "03.3",
            "Two right-padded sequences of 8 and 12 real tokens (padded to 12), labels = "
            "input_ids with -100 on padding. How many positions does the causal loss score "
            "after its shift?",
            (
                "20, one per real token",
                False,
                "The last real token of each row has no next token to predict, so each row "
                "loses one target.",
            ),
            (
                "18",
                True,
                "Sum of the lengths minus one per row: 8 + 12 - 2. This is the count to pass as "
                "`num_items_in_batch` (lesson 07).",
            ),
            (
                "22, every position but the last of each row",
                False,
                "That counts the padding as targets, which is what -100 on padding prevents.",
            ),
            ("24", False, "That counts every position, padding and the last one included."),
        ),
        _q(
            "03.4",
            "The course's GPT-2 checkpoint reads 'The dog chased the ball'. In its first layer, "
            "how much attention does the query at position 3 put on the key at position 4?",
            (
                "Exactly 0.",
                True,
                "The causal mask sets the scores of future keys to minus infinity before the "
                "softmax, so their probability is exactly 0, whatever the weights learned.",
            ),
            (
                "A little, about 1/T: the softmax spreads some weight everywhere.",
                False,
                "Every visible key gets some weight, but a masked key is not visible: its "
                "probability is 0, not small.",
            ),
            (
                "Whatever training taught it; a trained model learns not to look ahead.",
                False,
                "It is not learned: the mask is applied at every step, before and after "
                "training (lesson 04 shows what happens without it).",
            ),
            (
                "Most of it: position 4 is the token it must predict.",
                False,
                "That would make the task trivial; it is exactly the leak the causal mask "
                "exists to prevent.",
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
        _q(
            "04.3",
            "In `BertLMHeadModel(is_decoder=True)` you replace the token at position 5 and run the "
            "model again. Which positions' logits change?",
            (
                "Positions 5 and after; positions 0-4 stay exactly the same.",
                True,
                "A causal position t sees tokens <= t, so nothing before 5 can see the change, "
                "and every position from 5 on can. The lesson's probe measured exactly 0 before "
                "the replaced token.",
            ),
            (
                "Every position, a little.",
                False,
                "That is the bidirectional twin (`is_decoder=False`): every earlier position "
                "moved there.",
            ),
            (
                "Only position 5.",
                False,
                "Positions after 5 attend to position 5, so their logits move too.",
            ),
            (
                "Only position 4, the one that predicts token 5.",
                False,
                "Position 4 sees tokens 0-4 only; predicting token 5 does not let it read it.",
            ),
        ),
        _q(
            "04.4",
            "The leaky model (`is_decoder=False`, trained on next-token labels) ends with a "
            "training loss near 0.1. What is its loss when each prediction sees only the prefix "
            "before it, as at generation?",
            (
                "Also near 0.1: it learned the training data.",
                False,
                "Its low loss came from reading token t + 1; from the prefix alone that answer "
                "is gone.",
            ),
            (
                "Worse than uniform guessing (above ln V).",
                True,
                "It never had to predict anything it could not see, so from the prefix alone it "
                "is worse than uniform guessing (ln V = 7.82), and it generates garbage.",
            ),
            (
                "About the causal model's loss.",
                False,
                "The causal model learned to predict from the prefix; the leaky one learned to "
                "copy, a skill generation cannot use.",
            ),
            (
                "NaN, because the future tokens are missing.",
                False,
                "The prefix loss is an ordinary finite cross-entropy; it is just very high.",
            ),
        ),
        _q(
            "04.5",
            "A warm-started `EncoderDecoderModel` (BERT encoder and decoder) gets `labels`. What "
            "does it do with them?",
            (
                "Passes them to the decoder `BertLMHeadModel`, whose loss shifts them.",
                False,
                "The decoder gets no labels: its inputs are already the labels shifted right, "
                "so a second shift in its loss would score position t against token t + 1 of "
                "the target (the wrong loss the lesson printed).",
            ),
            (
                "Builds `decoder_input_ids = shift_tokens_right(labels, ...)` and computes one "
                "cross-entropy of the decoder's logits against the unshifted labels.",
                True,
                "The shift happens once, on the inputs: decoder position t reads target token "
                "t - 1 and is scored on target token t.",
            ),
            (
                "Uses them as the encoder's input.",
                False,
                "The encoder reads `input_ids` (the source); the labels are the target text.",
            ),
            (
                "Shifts them one place to the left before the loss.",
                False,
                "The labels are not shifted at all; the decoder's inputs are shifted right.",
            ),
        ),
    ),
    "05": (
        _q(
            "05.1",
            "In BERT's pretraining data, `next_sentence_label = 0` means:",
            (
                "IsNext: B is the text that follows A.",
                True,
                "0 = IsNext, 1 = NotNext: Google's create_pretraining_data.py writes "
                "`1 if is_random_next else 0`.",
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
        _q(
            "05.3",
            "A classifier sees one number per pair: the average log-frequency of B's tokens. "
            "Fitted and tested on held-out pairs, what accuracy does it reach with random-token "
            "negatives, and with negatives from another document?",
            (
                "About 100% with random tokens, about 50% with another document.",
                True,
                "Uniformly random ids are mostly rare tokens, far from any real sentence; real "
                "text from another document has the same word frequencies as a true B. The "
                "lesson measured 1.0000 and 0.5098.",
            ),
            (
                "About 50% with both: one number cannot classify pairs.",
                False,
                "For the naive negatives one number is enough; that is the whole problem with "
                "them.",
            ),
            (
                "About 100% with both.",
                False,
                "Real negatives are real text: their word frequencies look like those of a "
                "true next sentence.",
            ),
            (
                "About 50% with random tokens, about 100% with another document.",
                False,
                "It is the other way round: random ids are the easy ones to spot.",
            ),
        ),
        _q(
            "05.4",
            "An order-blind model (cosine similarity of A's and B's bags of words) is tested on "
            "pairs from one document whose segments are swapped. How often does it call them "
            "NotNext, compared with the true continuations?",
            (
                "About as often.",
                True,
                "A swapped pair holds exactly the same words as the pair in order, so a "
                "bag-of-words model gives both the same answer. That is why ALBERT's SOP takes "
                "its negatives from the same document, in swapped order: their topic cannot "
                "tell them apart.",
            ),
            (
                "Far more often: swapped text reads wrongly.",
                False,
                "It reads wrongly to you, who follow the order; this model never sees the order.",
            ),
            (
                "Never.",
                False,
                "It calls many true continuations NotNext too (about 46% in the lesson), and "
                "the swapped pairs about as often.",
            ),
            (
                "Always, because B comes first.",
                False,
                "The model cannot tell which segment comes first: it compares two bags of words.",
            ),
        ),
        _q(
            "05.5",
            "`[CLS] A [SEP] B [SEP] [PAD] [PAD]`: at which positions are `token_type_ids` 1?",
            (
                "B's tokens only.",
                False,
                "The final [SEP] belongs to segment B too.",
            ),
            (
                "B's tokens, the final [SEP] and the padding.",
                False,
                "Padding gets token type 0 (and attention mask 0).",
            ),
            (
                "B's tokens and the final [SEP]; [CLS], A, the first [SEP] and the padding are 0.",
                True,
                "As the tokenizer's template `[CLS] $A [SEP] $B [SEP]` lays it out; the lesson "
                "checks this row by row.",
            ),
            (
                "Every position after [CLS].",
                False,
                "Segment A and its [SEP] are 0: the ids tell the two segments apart.",
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
        _q(
            "06.3",
            "A pretraining batch has 8 pairs and 76 masked tokens. In `BertForPreTraining`'s "
            "loss, how much does one masked token weigh, and one pair's NSP answer?",
            (
                "1/76 and 1/8.",
                True,
                "The MLM term is a mean over masked tokens, the NSP term a mean over sequences: "
                "one sequence's NSP answer weighs almost ten times one masked token.",
            ),
            ("1/8 each.", False, "The MLM term is not a mean over sequences."),
            (
                "1/84 each: the loss is a mean over all 84 terms.",
                False,
                "The two means are computed separately and then added, not pooled.",
            ),
            (
                "1/512 and 1/8: the MLM term is a mean over every position.",
                False,
                "Positions labelled -100 are not counted in the MLM mean.",
            ),
        ),
        _q(
            "06.4",
            "You set `mlm_weight = nsp_weight = 10` and train with Adam. Compared with the "
            "weights (1, 1), the updates are:",
            (
                "ten times larger.",
                False,
                "That would be plain SGD. Adam divides each update by a running estimate of the "
                "gradient's size, which grew ten times as well.",
            ),
            (
                "almost the same.",
                True,
                "Only Adam's small `eps` notices the scale (the lesson measured a difference of "
                "1.6% of the update). Only the ratio of the weights sets the balance.",
            ),
            (
                "tilted towards NSP.",
                False,
                "The ratio is still 1: both terms were scaled alike.",
            ),
            (
                "the same, and so is the logged loss.",
                False,
                "The logged loss is ten times larger; only the updates barely change.",
            ),
        ),
        _q(
            "06.5",
            "A batch of 8 pairs is split into micro-batches of 3 and 5 for gradient accumulation. "
            "How must each micro-batch's loss be normalised to give the full-batch loss?",
            (
                "Average the two micro-batch losses: both come from the same batch.",
                False,
                "Their MLM means are over different token counts and their NSP means over 3 and "
                "5 sequences: averaging them is off (8.5563 against 8.5670 in the lesson).",
            ),
            (
                "Each term by its own unit over the whole step: the MLM sum by the step's masked "
                "tokens, the NSP sum by the step's 8 sequences.",
                True,
                "Then the micro-batch losses add up to the full-batch loss exactly; "
                "`lmlessons.course.training.train` does this.",
            ),
            (
                "Divide the whole micro-batch loss by the step's masked-token count.",
                False,
                "That suits the MLM term only; the NSP term is a mean over sequences.",
            ),
            (
                "Fix the MLM term; NSP needs no care.",
                False,
                "The NSP term has the same problem, with sequences instead of tokens.",
            ),
        ),
    ),
    "07": (
        _q(
            "07.1",
            "Two micro-batches are accumulated into one step: the first has 1 target token with "
            "loss 2.0, the second 99 target tokens with total loss 99.0. The full-batch loss is "
            "1.01. What does averaging the two micro-batch means give?",
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
        _q(
            "07.4",
            "Two data-parallel ranks: rank 0 has 6 target tokens, rank 1 has 28. Each rank "
            "divides its summed loss by its own count, and DDP averages the gradients. How much "
            "does one token weigh?",
            (
                "The same everywhere, 1/34.",
                False,
                "That needs the count all-reduced first, so that every rank divides its sum by "
                "the same 34 (the lesson's 2-process run does it).",
            ),
            (
                "1/12 on rank 0 and 1/56 on rank 1: a token of the short shard weighs more.",
                True,
                "Each rank's mean weighs its tokens 1/n_r and DDP halves it: 1/(2 x 6) against "
                "1/(2 x 28). The mean of means again, one level up.",
            ),
            (
                "More on rank 1, which has more tokens.",
                False,
                "Rank 1 contributes more tokens, but each of them weighs less.",
            ),
            (
                "1/6 and 1/28: DDP adds the gradients of the ranks.",
                False,
                "DDP averages the ranks' gradients; it does not add them.",
            ),
        ),
        _q(
            "07.5",
            "`linear_cross_entropy(hidden, weight, labels, chunk_size=512)` on 4,096 labelled "
            "rows. What does it hold in memory instead of the (4,096, V) logits?",
            (
                "The full logits in a lower precision.",
                False,
                "It never builds all the logits, in any precision.",
            ),
            (
                "The logits of one chunk of 512 rows at a time, plus the gradients of the hidden "
                "states and the weight.",
                True,
                "Each chunk's logits, softmax and gradient contributions are computed in the "
                "forward pass and dropped; what remains has the size of the inputs. The "
                "lesson's memory model: about 19 MiB against 387 MiB for the dense loss.",
            ),
            (
                "Only the rows labelled -100.",
                False,
                "Rows labelled -100 are the ones it drops; here every row is labelled, so "
                "chunking does the work.",
            ),
            (
                "Only each row's log-sum-exp: it recomputes the logits chunk by chunk in the "
                "backward pass.",
                False,
                "That is Cut Cross-Entropy (Wijmans et al., 2024): its forward computes the "
                "log-sum-exp block by block, and its backward recomputes the logits block by "
                "block, skipping blocks whose softmax is negligible. `linear_cross_entropy` "
                "computes the gradients during the forward pass instead, as Liger Kernel's "
                "fused linear cross-entropy does, so its backward only scales them.",
            ),
        ),
    ),
    "08": (
        _q(
            "08.1",
            "A causal LM's train loss and its held-out loss in one pass fall far below the healthy "
            "run's, while its held-out loss *as at generation* (each prediction from its prefix "
            "only) is far above it, and greedy samples repeat one word. Which bug fits?",
            (
                "The model's attention sees the next token (`BertLMHeadModel` without "
                "`is_decoder=True`).",
                True,
                "Right. In one pass each position can read the token it must predict, so both "
                "one-pass losses collapse; at generation that token is not there yet, so the loss "
                "as at generation is worse than the healthy model's and the samples are garbage.",
            ),
            (
                "The labels were shifted by hand and again by the model.",
                False,
                "Predicting token t + 2 from tokens up to t is *harder*: that bug raises the train "
                "loss above the healthy run's instead of collapsing it.",
            ),
            (
                "`pad_token = eos_token`, with padding labels set by id.",
                False,
                "That bug leaves the train loss a little above the healthy run's; its symptom is "
                "generations that never end, not a loss far below healthy.",
            ),
            (
                "The learning rate is too high.",
                False,
                "A too-high learning rate makes every metric worse, and never a loss lower than a "
                "healthy run can reach.",
            ),
        ),
        _q(
            "08.2",
            "An MLM run trains on one short sentence per step. Its loss is finite, then NaN at one "
            "step and at every step after, and that step's batch had no masked token. What fixes "
            "it?",
            (
                "Divide the summed loss by `max(count, 1)` (or skip steps without targets).",
                True,
                "Right. sum / count is 0 / 0 = NaN on a batch with nothing masked, its gradient is "
                "NaN too, and one optimizer step with a NaN gradient makes every weight NaN. "
                "`mlm_loss` divides by `max(count, 1)`: a loss of 0, no gradient, and training "
                "goes "
                "on.",
            ),
            (
                "A lower learning rate.",
                False,
                "The loss did not grow before it broke: one batch gave 0 / 0, whatever the "
                "learning rate.",
            ),
            (
                "Clip the gradient norm harder.",
                False,
                "Clipping multiplies the gradient by max_norm / norm; a NaN norm makes every "
                "clipped gradient NaN too.",
            ),
            (
                "Mask more tokens per sentence.",
                False,
                "That makes an empty mask rarer, not impossible: with any masking rate below 1, a "
                "short batch can still come out with no masked token.",
            ),
        ),
        _q(
            "08.3",
            "Gradient accumulation over 4 micro-batches of unequal length averages the 4 "
            "micro-batch "
            "means. Which check shows the bug?",
            (
                "Compare the accumulated gradient of one step with the gradient of the same rows "
                "as "
                "one batch.",
                True,
                "Right. Summed over micro-batches the gradient must equal the one-batch gradient; "
                "with the mean of means it does not (10% apart in the recorded run), while with "
                "`num_items_in_batch` it does to float rounding.",
            ),
            (
                "Plot the training loss against a healthy run.",
                False,
                "The curves stay within a few percent: the bug reweights tokens, it does not stop "
                "learning. That is why a loss curve cannot reveal it.",
            ),
            (
                "Compare held-out losses.",
                False,
                "In the recorded run the held-out loss is within 0.2% of the healthy run's.",
            ),
            (
                "Read a few generated samples.",
                False,
                "The samples look like the healthy model's: a slightly different weighting of "
                "tokens does not show in text.",
            ),
        ),
        _q(
            "08.4",
            "NSP training accuracy reaches almost 100% within a hundred steps. On held-out pairs "
            "whose NotNext segment is real text from another document, the accuracy is at chance; "
            "on held-out pairs whose NotNext segment is random token ids, it is 100%. What is "
            "wrong?",
            (
                "The NotNext segments were made of random token ids.",
                True,
                "Right. Telling text from noise takes one token; the model never had to learn "
                "whether B follows A, which is the only thing that tells real pairs apart.",
            ),
            (
                "The model memorised the training pairs.",
                False,
                "A memorising model would not reach 100% on held-out pairs it never saw; the "
                "random-id pairs it recognises are new ones.",
            ),
            (
                "NSP is too hard for a tiny model.",
                False,
                "Then the training accuracy would stay near chance too; here training is almost "
                "perfect.",
            ),
            (
                "The NSP labels are swapped (0 = NotNext).",
                False,
                "Swapped labels would give held-out accuracy well *below* chance on real pairs, "
                "and "
                "not 100% on the random-id ones.",
            ),
        ),
        _q(
            "08.5",
            "An MLM run on padded batches has 69 targets per step where a healthy run on the same "
            "batches has 48, and a lower train loss, but a held-out masked loss that is no "
            "better; now and then its top guess for a masked word is a special token. Which bug "
            "fits?",
            (
                "[CLS], [SEP] and [PAD] were not excluded from masking.",
                True,
                "Right. The extra targets are special tokens and padding, which are easy to "
                "predict ([PAD] follows [PAD]); they lower the train loss and teach the model "
                "nothing it needs on real words, and sometimes it answers a special token for a "
                "masked word.",
            ),
            (
                "Every token has a label, not only the masked ones.",
                False,
                "That bug makes almost every token of the batch a target: 352 per step in the "
                "recorded run, over 7 times the healthy 48, not 1.5 times. It never guesses a "
                "special token for a masked word either.",
            ),
            (
                "The loss divides by a count that can be 0.",
                False,
                "That bug shows as NaN, not as a lower loss.",
            ),
            (
                "No bug: two runs differ by noise.",
                False,
                "Both runs saw the same batches in the same order; the number of targets per step "
                "is a count, and it differs.",
            ),
        ),
    ),
}


#: Lesson 00's warm-up questions (shown by ``lmlessons.widgets.start.start_quiz``), in their
#: written order: their right answers are already spread (B, C, A, B).
START_QUESTIONS: tuple[Question, ...] = (
    _q(
        "00.1",
        "In the MLM example, which positions have a label other than -100?",
        (
            "Every position of the sentence.",
            False,
            "Then the model would also be scored on tokens it can see unchanged: an easy "
            "copy task. Only the selected positions are scored.",
        ),
        (
            "The selected positions, whatever they became ([MASK], a random token or unchanged).",
            True,
            "Right: a selected position keeps its original id as label even when its input "
            "token was replaced by a random one or kept; every other position is -100.",
        ),
        (
            "Only the positions that show [MASK].",
            False,
            "Selected tokens replaced by a random token or kept unchanged are targets too "
            "(lesson 01).",
        ),
        (
            "[CLS], because it summarises the sentence.",
            False,
            "[CLS] and [SEP] are never selected in MLM. [CLS] carries the NSP label instead.",
        ),
        shuffle=False,
    ),
    _q(
        "00.2",
        "How many labels does one NSP example [CLS] A [SEP] B [SEP] have?",
        ("One per token.", False, "NSP classifies the pair, not its tokens."),
        (
            "Two: one per segment.",
            False,
            "token_type_ids tell the model which segment a token is in; "
            "they are inputs, not labels.",
        ),
        (
            "One for the whole pair: 0 if B follows A, 1 if B comes from another document.",
            True,
            "Right: next_sentence_label, predicted from the [CLS] position. 0 = IsNext is "
            "the convention of Google's BERT code, which the course follows (d2l.ai uses the "
            "opposite).",
        ),
        (
            "None: NSP is unsupervised.",
            False,
            "The label comes for free from the corpus, but there is "
            "one, and a cross-entropy loss on it.",
        ),
        shuffle=False,
    ),
    _q(
        "00.3",
        "A held-out sentence has 23 tokens, [CLS] and [SEP] included. About how many targets "
        "does it give as an MLM example (15% masking) and as a CLM example?",
        (
            "About 3 for MLM, 22 for CLM.",
            True,
            "MLM scores the selected 15% of the 21 ordinary tokens (3.15 on average); CLM "
            "scores every position but the last. That is why MLM needs more passes over the "
            "data.",
        ),
        (
            "23 for both: every token is predicted.",
            False,
            "MLM predicts only the selected tokens, and in CLM the last position has no "
            "next token.",
        ),
        (
            "About 3 for MLM, 23 for CLM.",
            False,
            "The last position of a CLM example has nothing after it to predict.",
        ),
        (
            "21 for MLM, 22 for CLM.",
            False,
            "21 is every ordinary token; MLM is scored only where a token was selected.",
        ),
        shuffle=False,
    ),
    _q(
        "00.4",
        "You pass `labels = input_ids.clone()` to a causal LM. Which position is scored "
        "against nothing?",
        (
            "The first position, [CLS].",
            False,
            "Position 0 is scored against token 1. It is the first *token* that is never "
            "a target: nothing comes before it to predict it.",
        ),
        (
            "The last position.",
            True,
            "The loss shifts the labels: position t is scored against token t + 1, and the "
            "last position has no token after it (label -100).",
        ),
        (
            "None: every position has a target.",
            False,
            "The shift leaves one position without a next token.",
        ),
        (
            "Every position that shows [MASK].",
            False,
            "A causal example has no [MASK]: nothing is hidden, the future is simply not visible.",
        ),
        shuffle=False,
    ),
)

"""What a practitioner looks at after a run of the bug zoo, measured on the trained model.

Held-out metrics always use the *healthy* data code (``bugs.mask_fixed``,
``bugs.clm_batch_fixed``, real NotNext pairs) on the validation
documents, with a fixed generator: they measure what the model learned, whatever its training
code reported.

* MLM: held-out masked loss and accuracy, how often the top guess is a special token, and the
  guesses for :data:`FILL_MASK_PROBES`;
* CLM: held-out next-token loss and accuracy in one pass (teacher forcing), over every target
  and over the words only (every target but [SEP]); the loss on the words as at generation
  (:func:`lmlessons.causality.prefix_loss`: each prediction from its prefix only); how often a
  greedy continuation of a validation sentence ends with [SEP]; and a few greedy samples;
* pretraining: held-out NSP accuracy on real NotNext pairs and on random-id ones, and MLM loss;
* chat fine-tuning: on the held-out conversations, each alone, in one pass: the loss and the
  accuracy on the answers' words (``answer_word_loss``, ``answer_token_accuracy``: every answer
  token but the end-of-turn [SEP], unlike lesson 10's ``answer_loss``) and the loss on the
  prompts; how often a greedy answer (:func:`~lmlessons.course.chat.greedy_answers`) ends with
  [SEP] within :data:`MAX_ANSWER_TOKENS` tokens; and a few greedy answers;
* DPO: the chat fine-tuning symptoms, and on the held-out preference pairs (the healthy batch,
  the checkpoint as reference): how often the model itself gives the chosen answer the higher
  log-probability (``policy_prefers_chosen``), how often its chosen reward beats the rejected one
  (``reward_accuracy``, TRL's ``rewards/accuracies``), and the mean log-probability of the
  chosen answers (``chosen_logps``, TRL's ``logps/chosen``);
* MoE: on the held-out sentences, padded to the longest in batches as in training, the
  next-token loss and accuracy, and each layer's expert load
  (:func:`lmlessons.moe.expert_counts`, :func:`lmlessons.moe.load_spread`): its coefficient of
  variation over the real tokens (``load_cv``, the mean over layers) and the busiest expert's
  share over the mean (``overload``, the worst layer), and the same CV with the padding
  counted as tokens (``load_cv_with_padding``);
* MTP: on the held-out sentences, each depth's loss against its own targets (depth 1's is the
  next-token loss, ``depth_1_loss``; ``depth_2_loss``: the token 2 ahead), and the depth-2
  head's loss against the *next* token (``depth_2_next_token_loss``): which token it learned.
"""

from __future__ import annotations

from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.bugzoo import bugs
from lmlessons.bugzoo.data import (
    EVAL_BATCH_SIZE,
    EVAL_SEED,
    MOE_LENGTH,
    Rendered,
    chat_rows,
    padded_to_length,
    preference_rows,
    sentence_rows,
)
from lmlessons.causality import prefix_loss
from lmlessons.collator import special_token_ids
from lmlessons.course.batches import nsp_batches
from lmlessons.course.chat import greedy_answers
from lmlessons.course.training import evaluate
from lmlessons.losses import token_nll
from lmlessons.moe import expert_counts, load_spread
from lmlessons.mtp import mtp_labels
from lmlessons.packing import pad, pad_documents
from lmlessons.preference import preference_probe

__all__ = [
    "FILL_MASK_PROBES",
    "SAMPLE_PROMPTS",
    "SAMPLE_QUESTIONS",
    "MAX_ANSWER_TOKENS",
    "measure",
    "first_step_gradient_errors",
    "padding_sensitivity",
]

FILL_MASK_PROBES = (
    "The dog chased the [MASK] out of the garden.",
    "The children walked to [MASK] every morning.",
    "Rain fell all [MASK] long.",
)
SAMPLE_PROMPTS = ("The dog", "In the morning", "The ship")
PROMPT_TOKENS = 4  # [CLS] and the first 3 tokens of a validation sentence
MAX_NEW_TOKENS = 40
GENERATION_ROWS = 32
SAMPLE_QUESTIONS = (0, 1, -1)  # held-out conversations whose greedy answers are shown
MAX_ANSWER_TOKENS = 8  # an answer of the instruction set is 1 to 3 tokens and its [SEP]


def measure(
    model: torch.nn.Module,
    family: str,
    corpus: Any,
    tokenizer: Any,
    *,
    reference: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """The symptoms of the trained ``model`` of ``family`` (see the module docstring);
    ``reference``: the reference model of a DPO run."""
    with torch.no_grad():
        if family == "mlm":
            return _mlm_symptoms(model, corpus, tokenizer)
        if family == "clm":
            return _clm_symptoms(model, corpus, tokenizer)
        if family == "chat":
            return _chat_symptoms(model, chat_rows("validation"), tokenizer)
        if family == "moe":
            return _moe_symptoms(model, corpus, tokenizer)
        if family == "mtp":
            return _mtp_symptoms(model, corpus, tokenizer)
        if family == "dpo":
            if reference is None:
                raise ValueError("reference must be the reference model of the DPO run")
            return _dpo_symptoms(model, reference.eval(), tokenizer)
        return _pretraining_symptoms(model, corpus, tokenizer)


def _mlm_symptoms(model: torch.nn.Module, corpus: Any, tokenizer: Any) -> dict[str, Any]:
    rows = sentence_rows(corpus.validation, tokenizer)
    special, g = special_token_ids(tokenizer), torch.Generator().manual_seed(EVAL_SEED)
    ce, correct, special_guesses, n = 0.0, 0, 0, 0
    for start in range(0, len(rows), EVAL_BATCH_SIZE):
        chunk = rows[start : start + EVAL_BATCH_SIZE]
        batch = bugs.masked_batch(chunk, tokenizer, bugs.mask_fixed, g)  # (B, T) each
        labels = batch.pop("labels")  # (B, T)
        logits = model(**batch).logits  # (B, T, V)
        nll, keep = token_nll(logits, labels, shift=False)  # (B, T) each
        guess = logits[keep].argmax(-1)  # (N,)
        ce += nll.sum().item()
        correct += int((guess == labels[keep]).sum())
        special_guesses += int(torch.isin(guess, special).sum())
        n += int(keep.sum())
    heldout = {
        "mlm_loss": ce / n,
        "mlm_accuracy": correct / n,
        "special_guess_rate": special_guesses / n,
        "num_targets": n,
    }
    guesses = {text: _fill_mask(model, tokenizer, text) for text in FILL_MASK_PROBES}
    return {"heldout": heldout, "guesses": guesses}


def _fill_mask(model: torch.nn.Module, tokenizer: Any, text: str) -> str:
    """The top-1 token at the [MASK] of ``text``."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])  # (1, T)
    logits = model(input_ids=ids).logits[0]  # (T, V)
    position = int((ids[0] == tokenizer.mask_token_id).nonzero()[0])
    return tokenizer.convert_ids_to_tokens(int(logits[position].argmax()))


def _words_only(batch: dict[str, torch.Tensor], sep_token_id: int) -> dict[str, torch.Tensor]:
    """``batch`` with the [SEP] targets unlabelled: the words only (the end of a sentence is
    measured by the generations that end)."""
    labels = batch["labels"].masked_fill(batch["labels"] == sep_token_id, IGNORE_INDEX)
    return {**batch, "labels": labels}


def _clm_symptoms(model: torch.nn.Module, corpus: Any, tokenizer: Any) -> dict[str, Any]:
    rows = sentence_rows(corpus.validation, tokenizer)
    sep = tokenizer.sep_token_id
    batches = [
        bugs.clm_batch_fixed(rows[i : i + EVAL_BATCH_SIZE], tokenizer)
        for i in range(0, len(rows), EVAL_BATCH_SIZE)
    ]
    metrics = evaluate(model, batches, objective="clm")
    words = evaluate(model, [_words_only(b, sep) for b in batches], objective="clm")
    first = _words_only(bugs.clm_batch_fixed(rows[:GENERATION_ROWS], tokenizer), sep)
    as_generated = prefix_loss(
        model, first["input_ids"], first["labels"], attention_mask=first["attention_mask"]
    )
    prompts = [r[:PROMPT_TOKENS] for r in rows[:GENERATION_ROWS]]
    continuations = greedy_answers(model, prompts, eos_token_id=sep, max_new_tokens=MAX_NEW_TOKENS)
    heldout = {
        "clm_loss": metrics["clm_loss"],
        "next_token_accuracy": metrics["next_token_accuracy"],
        "num_targets": metrics["num_targets"],
        "word_loss": words["clm_loss"],
        "word_accuracy": words["next_token_accuracy"],
        "prefix_word_loss": float(as_generated),
        **_stopping(continuations, sep),
    }
    samples = [_greedy_text(model, tokenizer, prompt) for prompt in SAMPLE_PROMPTS]
    return {"heldout": heldout, "samples": samples}


def _stopping(answers: list[list[int]], eos: int) -> dict[str, float]:
    """Of greedy ``answers`` (:func:`~lmlessons.course.chat.greedy_answers`): the share that
    ends with ``eos``, and the mean number of tokens before it (or in all, if it never came)."""
    ended = [bool(a) and a[-1] == eos for a in answers]
    new_tokens = [len(a) - e for a, e in zip(answers, ended, strict=True)]
    return {
        "stop_rate": sum(ended) / len(answers),
        "mean_new_tokens": sum(new_tokens) / len(answers),
    }


def _greedy_text(model: torch.nn.Module, tokenizer: Any, prompt: str) -> str:
    ids = [tokenizer.cls_token_id, *tokenizer(prompt, add_special_tokens=False)["input_ids"]]
    (answer,) = greedy_answers(model, [ids], eos_token_id=tokenizer.sep_token_id, max_new_tokens=20)
    return tokenizer.decode(ids + answer, skip_special_tokens=True)


def _chat_batches(
    rows: list[Rendered], pad_token_id: int, eos: int
) -> list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]:
    """Padded batches of conversations, twice: labelled on the answers' words, and on the
    prompts (the healthy padding: [PAD], found by the attention mask)."""
    out = []
    for start in range(0, len(rows), EVAL_BATCH_SIZE):
        chunk = rows[start : start + EVAL_BATCH_SIZE]
        batch = pad_documents([r.input_ids for r in chunk], pad_token_id=pad_token_id)
        ids, attention_mask = batch["input_ids"], batch["attention_mask"]  # (B, T) each
        answer = pad([r.assistant_masks for r in chunk], 0)  # (B, T): 1 on the answer
        words = ids.masked_fill((answer == 0) | (ids == eos), IGNORE_INDEX)  # (B, T)
        prompts = ids.masked_fill((answer == 1) | (attention_mask == 0), IGNORE_INDEX)  # (B, T)
        out.append(({**batch, "labels": words}, {**batch, "labels": prompts}))
    return out


def _chat_symptoms(model: torch.nn.Module, rows: list[Rendered], tokenizer: Any) -> dict[str, Any]:
    eos = tokenizer.eos_token_id
    pairs = _chat_batches(rows, tokenizer.pad_token_id, eos)
    words = evaluate(model, [w for w, _ in pairs], objective="clm")
    prompts = evaluate(model, [p for _, p in pairs], objective="clm")
    prompts_ids = [r.input_ids[: r.prompt_length] for r in rows]
    answers = greedy_answers(model, prompts_ids, eos_token_id=eos, max_new_tokens=MAX_ANSWER_TOKENS)
    heldout = {
        "answer_word_loss": words["clm_loss"],
        "answer_token_accuracy": words["next_token_accuracy"],
        "prompt_loss": prompts["clm_loss"],
        **_stopping(answers, eos),
        "num_targets": words["num_targets"],
    }
    samples = []
    for i in SAMPLE_QUESTIONS:
        question = tokenizer.decode(prompts_ids[i], skip_special_tokens=True)
        samples.append(f"{question} {tokenizer.decode(answers[i])}")
    return {"heldout": heldout, "samples": samples}


def _dpo_symptoms(
    model: torch.nn.Module, reference: torch.nn.Module, tokenizer: Any
) -> dict[str, Any]:
    record = _chat_symptoms(model, chat_rows("validation"), tokenizer)
    pairs = preference_rows("validation")
    probes = []
    for start in range(0, len(pairs), EVAL_BATCH_SIZE):
        batch = bugs.preference_rows_fixed(pairs[start : start + EVAL_BATCH_SIZE], tokenizer)
        ref_logps = bugs.reference_logps_fixed(reference, model, batch)  # (2b,)
        probes.append(preference_probe(model, batch, ref_logps))  # (b,) each
    pair = {k: torch.cat([p[k] for p in probes]) for k in probes[0]}  # (P,) each
    keys = ("policy_prefers_chosen", "reward_accuracy", "chosen_logps")
    record["heldout"].update({k: float(pair[k].mean()) for k in keys})
    return record


def _moe_symptoms(model: Any, corpus: Any, tokenizer: Any) -> dict[str, Any]:
    from lmlessons.course.moe_runs import record_routing

    rows = sentence_rows(corpus.validation, tokenizer)
    pad_id = tokenizer.pad_token_id
    batches = [
        padded_to_length(
            bugs.clm_batch_fixed(rows[i : i + EVAL_BATCH_SIZE], tokenizer), MOE_LENGTH, pad_id
        )
        for i in range(0, len(rows), EVAL_BATCH_SIZE)
    ]  # (b, MOE_LENGTH) each
    metrics = evaluate(model, batches, objective="clm")
    num_experts = int(model.config.num_local_experts)
    real: list[torch.Tensor] = []  # per layer (E,): the real tokens' counts
    every: list[torch.Tensor] = []  # per layer (E,): every token's, padding included
    for batch in batches:
        with record_routing(model) as chosen:
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        mask = batch["attention_mask"]  # (B, T)
        counts = [expert_counts(c, num_experts, mask) for c in chosen]  # L x (E,)
        padded = [expert_counts(c, num_experts) for c in chosen]  # L x (E,)
        real = counts if not real else [a + b for a, b in zip(real, counts, strict=True)]
        every = padded if not every else [a + b for a, b in zip(every, padded, strict=True)]
    spreads, with_padding = [load_spread(c) for c in real], [load_spread(c) for c in every]
    heldout = {
        "clm_loss": metrics["clm_loss"],
        "next_token_accuracy": metrics["next_token_accuracy"],
        "num_targets": metrics["num_targets"],
        "load_cv": sum(s.cv for s in spreads) / len(spreads),
        "overload": max(s.max_over_mean for s in spreads),
        "load_cv_with_padding": sum(s.cv for s in with_padding) / len(with_padding),
    }
    return {"heldout": heldout, "expert_counts": [[float(v) for v in c] for c in real]}


def _mtp_symptoms(model: Any, corpus: Any, tokenizer: Any) -> dict[str, Any]:
    rows = sentence_rows(corpus.validation, tokenizer)
    totals = torch.zeros(3)  # summed losses: depth 1, depth 2, depth 2 on the next token
    counts = torch.zeros(3)
    model.eval()
    for i in range(0, len(rows), EVAL_BATCH_SIZE):
        batch = bugs.clm_batch_fixed(rows[i : i + EVAL_BATCH_SIZE], tokenizer)  # (B, T) each
        first, second = model(batch["input_ids"], batch["attention_mask"])  # (B, T, V) each
        labels = batch["labels"]  # (B, T)
        pairs = [(first, 1), (second, 2), (second, 1)]  # (logits, how many tokens ahead)
        for j, (logits, ahead) in enumerate(pairs):
            nll, keep = token_nll(logits, mtp_labels(labels, ahead), shift=False)  # (B, T) each
            totals[j] += nll.sum()
            counts[j] += keep.sum()
    means = (totals / counts).tolist()
    keys = ("depth_1_loss", "depth_2_loss", "depth_2_next_token_loss")
    return {"heldout": {**dict(zip(keys, means, strict=True)), "num_targets": float(counts[0])}}


def _nsp_heldout(
    model: torch.nn.Module, corpus: Any, tokenizer: Any, negatives: Any
) -> dict[str, float]:
    g = torch.Generator().manual_seed(EVAL_SEED)
    pairs = nsp_batches(
        corpus.validation,
        tokenizer,
        batch_size=EVAL_BATCH_SIZE,
        mlm_probability=0.0,
        epochs=2,
        generator=g,
    )
    batches = []
    for batch in pairs:
        batch = negatives(batch, tokenizer, g)
        inputs, labels = bugs.mask_fixed(batch["input_ids"], batch["attention_mask"], tokenizer, g)
        batches.append({**batch, "input_ids": inputs, "labels": labels})
    return evaluate(model, batches, objective="pretraining")


def _pretraining_symptoms(model: torch.nn.Module, corpus: Any, tokenizer: Any) -> dict[str, Any]:
    real = _nsp_heldout(model, corpus, tokenizer, bugs.negatives_fixed)
    noise = _nsp_heldout(model, corpus, tokenizer, bugs.negatives_random_ids)
    kept = ("nsp_accuracy", "nsp_loss", "mlm_loss", "mlm_accuracy", "num_sequences")
    heldout = {key: real[key] for key in kept}
    heldout["nsp_accuracy_random_negatives"] = noise["nsp_accuracy"]
    return {"heldout": heldout}


def _step(model: torch.nn.Module, accumulate: Any, micro: list[Any]) -> tuple[float, list]:
    """The loss ``accumulate`` logs for one step over ``micro``, and the gradient it leaves."""
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        logged = accumulate(model, micro)
    grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return logged, grads


def _relative_error(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """``||a - b|| / ||b||`` over all parameters."""
    diff = sum(float(((x - y) ** 2).sum()) for x, y in zip(a, b, strict=True))
    return (diff / sum(float((y**2).sum()) for y in b)) ** 0.5


def first_step_gradient_errors(
    model: torch.nn.Module,
    tokenizer: Any,
    micro_rows: list[list[list[int]]],
    clm_batch: Any,
    accumulate: Any,
) -> dict[str, float]:
    """One step over ``micro_rows`` with the step code ``accumulate`` (then with the fixed
    one) against the same rows as one batch: ``this_run`` and ``with_the_fix`` are the
    gradients' ``||a - b|| / ||b||``, ``loss_this_run`` and ``loss_with_the_fix`` the logged
    losses' ``|a - b| / |b|``."""
    micro = [clm_batch(r, tokenizer) for r in micro_rows]
    whole = [clm_batch([row for rows in micro_rows for row in rows], tokenizer)]
    loss, reference = _step(model, bugs.accumulate_fixed, whole)
    ours_loss, ours = _step(model, accumulate, micro)
    fixed_loss, fixed = _step(model, bugs.accumulate_fixed, micro)
    return {
        "this_run": _relative_error(ours, reference),
        "with_the_fix": _relative_error(fixed, reference),
        "loss_this_run": abs(ours_loss - loss) / abs(loss),
        "loss_with_the_fix": abs(fixed_loss - loss) / abs(loss),
    }


def padding_sensitivity(
    model: torch.nn.Module, micro: list[Any], step: Any, other_id: int
) -> dict[str, float]:
    """One step of ``step`` (``(model, micro_batches) -> logged loss``, its backward passes
    done) on ``micro``, and on the same batches with every padding id (attention 0) replaced by
    ``other_id``: ``loss_padding_change`` is the logged losses' ``|a - b| / |a|``,
    ``gradient_padding_change`` the gradients' ``||a - b|| / ||a||``. The padding must change
    neither: 0, up to float rounding."""
    swapped = [
        {**b, "input_ids": b["input_ids"].masked_fill(b["attention_mask"] == 0, other_id)}
        for b in micro
    ]  # (b, T) each
    loss, grads = _step(model, step, micro)
    other_loss, other = _step(model, step, swapped)
    return {
        "loss_padding_change": abs(other_loss - loss) / abs(loss),
        "gradient_padding_change": _relative_error(other, grads),
    }

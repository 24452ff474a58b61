"""The exercise checkers, hints, solutions and quizzes (lmlessons.exercises).

The checkers compare a learner's loss with the course's own losses; here those references, and
the checkers themselves, are held against transformers: ``DataCollatorForLanguageModeling``,
``ForMaskedLMLoss``, ``ForCausalLMLoss`` (also as the Trainer uses it across ranks, with
``num_items_in_batch``) and ``BertForPreTraining``.
"""

from __future__ import annotations

import dataclasses
import html
import math
import random
import re
import sys
import threading
import traceback
from pathlib import Path

import battery.mask_tokens
import battery.select_whole_words
import numpy as np
import pytest
import test_check_answer_only
import torch
import torch.nn.functional as F
from _tiny import bert_config, seeded
from battery._messages import VOLATILE
from battery.flatten_documents import with_transformers
from transformers import BertConfig, BertForPreTraining, DataCollatorForLanguageModeling
from transformers.loss.loss_utils import ForCausalLMLoss, ForMaskedLMLoss
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func as mixtral_loss
from transformers.trainer_pt_utils import LabelSmoother

import lmlessons
from lmlessons.bugzoo.records import load_records, summary
from lmlessons.course.chat import CHAT_TEMPLATE
from lmlessons.course.content import load
from lmlessons.exercises import (
    EXERCISES,
    _check,
    check,
    check_label_smoothing,
    check_losses,
    hint,
    quiz,
    solution,
    solutions,
    solutions_part2,
    solutions_part3,
    solutions_part4,
)
from lmlessons.exercises._cases import random_word_rows, word_batch
from lmlessons.exercises._delegation import Delegation, delegation
from lmlessons.exercises._framework import (
    TIME_LIMIT,
    Case,
    Mistake,
    Runner,
    tokenizer_state,
)
from lmlessons.exercises._loss_checks import batches
from lmlessons.exercises._memory import LargestTensor
from lmlessons.exercises._threads import Group, MismatchedAllReduce
from lmlessons.exercises.check_answer_only import ChatTokenizer
from lmlessons.exercises.check_group_advantages import cases as group_advantages_cases
from lmlessons.exercises.check_grpo_loss import cases as grpo_loss_cases
from lmlessons.exercises.check_grpo_loss import window
from lmlessons.exercises.check_label_smoothing import cases as label_smoothed_loss_cases
from lmlessons.exercises.check_load_balancing import cases as load_balancing_cases
from lmlessons.exercises.check_mtp_labels import cases as mtp_labels_cases
from lmlessons.exercises.check_sequence_logprobs import cases as sequence_logprobs_cases
from lmlessons.exercises.check_sequence_logprobs import empty_average_case, half_case
from lmlessons.exercises.quizzes import QUIZZES, START_QUESTIONS, Question, display_order
from lmlessons.grpo import aggregate_loss, group_advantages
from lmlessons.losses import mlm_loss as course_mlm_loss  # bound in globals before any check
from lmlessons.masking_variants import select_whole_words, word_ids
from lmlessons.moe import load_balancing_loss_func as core_load_balancing
from lmlessons.mtp import mtp_labels
from lmlessons.preference import sequence_logprobs
from lmlessons.smoothing import label_smoothed_loss

ROOT = Path(__file__).resolve().parents[1]


#: The exercises whose learner writes a function (``bug_zoo`` takes a dict of answers).
FUNCTIONS = [name for name, e in EXERCISES.items() if not e.answers]
#: The references the loss checkers compare with (the exercises' reference solutions).
REFERENCES = {n: EXERCISES[n].solution for n in ("mlm_loss", "clm_loss", "bert_pretraining_loss")}


# --------------------------------------------------------------------------- transformers' versions


class _Vocab:
    """The little of a tokenizer that ``DataCollatorForLanguageModeling`` reads for masking."""

    mask_token = "[MASK]"

    def __init__(self, mask_token_id: int, size: int) -> None:
        self.mask_token_id, self.size = mask_token_id, size

    def __len__(self) -> int:
        return self.size

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.mask_token_id

    def get_special_tokens_mask(self, ids, already_has_special_tokens=True):
        return [0] * len(ids)


def hf_mask_tokens(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    """transformers' ``DataCollatorForLanguageModeling.torch_mask_tokens``, drawing from
    ``generator`` (the collator's own generator, which its ``seed`` argument would build)."""
    collator = DataCollatorForLanguageModeling(
        _Vocab(mask_token_id, vocab_size),
        mlm_probability=mlm_probability,
        mask_replace_prob=mask_replace_prob,
        random_replace_prob=random_replace_prob,
    )
    collator.generator = generator
    return collator.torch_mask_tokens(input_ids.clone(), special_tokens_mask)  # it writes in place


def _zero(logits):
    """The course's one departure from transformers: 0 (not NaN) when nothing is predicted."""
    return logits.sum() * 0.0


def hf_mlm_loss(logits, labels, *, num_items_in_batch=None):
    """transformers' ``ForMaskedLMLoss`` (the loss of ``BertForMaskedLM``)."""
    if num_items_in_batch is None and not bool((labels != -100).any()):
        return _zero(logits)
    return ForMaskedLMLoss(logits, labels, logits.shape[-1], num_items_in_batch)


def hf_clm_loss(logits, labels, *, num_items_in_batch=None):
    """transformers' ``ForCausalLMLoss`` (the loss of ``GPT2LMHeadModel``), unshifted labels."""
    if num_items_in_batch is None and not bool((labels[:, 1:] != -100).any()):
        return _zero(logits)
    return ForCausalLMLoss(logits, labels, logits.shape[-1], num_items_in_batch)


def hf_bert_pretraining_loss(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """``BertForPreTraining``'s loss: one ``CrossEntropyLoss`` on the MLM scores, one on the NSP
    scores, added (here with the course's two weights, both 1 in BERT)."""
    loss_fct = torch.nn.CrossEntropyLoss()
    vocab_size = mlm_logits.shape[-1]
    if bool((mlm_labels != -100).any()):
        mlm = loss_fct(mlm_logits.view(-1, vocab_size), mlm_labels.view(-1))
    else:
        mlm = _zero(mlm_logits)
    nsp = loss_fct(nsp_logits.view(-1, 2), nsp_labels.view(-1))
    return mlm_weight * mlm + nsp_weight * nsp


def hf_rank_loss(logits, labels, *, all_reduce, world_size):
    """transformers' Trainer with ``average_tokens_across_devices``: ``num_items_in_batch`` is
    the target count summed over ranks, ``ForCausalLMLoss`` divides the rank's sum by it, and
    ``compute_loss`` multiplies by the number of processes."""
    num_items = all_reduce((labels[:, 1:] != -100).sum())
    if not bool(num_items):  # no target on any rank: 0, as the course's losses
        return _zero(logits)
    return ForCausalLMLoss(logits, labels, logits.shape[-1], num_items) * world_size


def core_sequence_logprobs(logits, labels, average=False):
    """The core's ``preference.sequence_logprobs`` (``average`` keyword-only there)."""
    return sequence_logprobs(logits, labels, average=average)


def core_grpo_loss(
    per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None
):
    """The core's ``grpo.aggregate_loss`` (its counts keyword-only), as TRL aggregates."""
    return aggregate_loss(
        per_token_loss,
        completion_mask,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
    )


def trl_nanstd(tensor: torch.Tensor, **kwargs: int) -> torch.Tensor:
    """TRL's ``nanstd``, imported when first used: TRL pulls in ``datasets``, which every worker
    that collects this module would import otherwise."""
    from trl.trainer.utils import nanstd

    return nanstd(tensor, **kwargs)


def trl_group_advantages(rewards, *, num_generations, scale_rewards="group"):
    """TRL 1.16's lines in ``GRPOTrainer._generate_and_score_completions`` for one reward function
    (``trainer/grpo_trainer.py:2765-2788``, ``multi_objective_aggregation="sum_then_normalize"``,
    no NaN reward), with TRL's own ``nanstd`` (``trainer/utils.py:1021``)."""
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = trl_nanstd(rewards.view(-1, num_generations), dim=1)
        std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    else:  # "batch"
        std_rewards = trl_nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return advantages


def hf_label_smoothed_loss(logits, labels, *, epsilon=0.1, shift=True, num_items_in_batch=None):
    """transformers' ``LabelSmoother`` as the Trainer calls it (0, not NaN, without targets)."""
    targets = labels[:, 1:] if shift else labels
    if num_items_in_batch is None and not bool((targets != -100).any()):
        return _zero(logits)
    smoother = LabelSmoother(epsilon=epsilon)
    return smoother({"logits": logits}, labels, shift, num_items_in_batch)


# Correct implementations that are not the checkers' references: transformers' own code, and the
# package's functions where the checker tests properties and has no reference to copy
# (make_nsp_pairs, select_whole_words, truncate_seq_pair) or bounds the memory
# (linear_cross_entropy computes the gradients chunk by chunk in its forward pass).
INDEPENDENT = {
    "mask_tokens": hf_mask_tokens,
    "mlm_loss": hf_mlm_loss,
    "clm_loss": hf_clm_loss,
    "make_nsp_pairs": lmlessons.make_nsp_pairs,
    "bert_pretraining_loss": hf_bert_pretraining_loss,
    "select_whole_words": select_whole_words,
    "truncate_seq_pair": lmlessons.truncate_seq_pair,
    "rank_loss": hf_rank_loss,
    "chunked_cross_entropy": lmlessons.linear_cross_entropy,
    "flatten_documents": with_transformers,
    "assistant_labels": test_check_answer_only.tensor_version,
    "sequence_logprobs": core_sequence_logprobs,
    "group_advantages": trl_group_advantages,
    "grpo_loss": core_grpo_loss,
    "load_balancing_loss_func": mixtral_loss,
    "mtp_labels": mtp_labels,
    "label_smoothed_loss": hf_label_smoothed_loss,
}


def _loss_inputs(name, seed, *, empty=False):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 7, 11, generator=g)
    labels = torch.randint(11, (3, 7), generator=g)
    labels[torch.rand(3, 7, generator=g) < 0.5] = -100
    if empty:
        labels[:] = -100
    if name == "bert_pretraining_loss":
        return (logits, torch.randn(3, 2, generator=g), labels, torch.tensor([0, 1, 0]))
    return (logits, labels)


@pytest.mark.parametrize("name", list(REFERENCES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_checker_references_equal_transformers(name, seed):
    args = _loss_inputs(name, seed)
    hf = INDEPENDENT[name]
    if name == "bert_pretraining_loss":
        kwargs = [{}, {"mlm_weight": 0.7, "nsp_weight": 1.3}]
    else:
        n = int((args[1][:, 1:] if name == "clm_loss" else args[1]).ne(-100).sum())
        kwargs = [{}, {"num_items_in_batch": n + 5}, {"num_items_in_batch": torch.tensor(n + 5)}]
    for kw in kwargs:
        assert torch.allclose(REFERENCES[name](*args, **kw), hf(*args, **kw), atol=1e-6), kw
    assert REFERENCES[name](*_loss_inputs(name, seed, empty=True)).item() == pytest.approx(
        hf(*_loss_inputs(name, seed, empty=True)).item()
    )


# --------------------------------------------------------------------------- accepting correct code


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("source", ["independent", "solution"])
def test_correct_functions_pass(name, source):
    fn = INDEPENDENT[name] if source == "independent" else EXERCISES[name].solution
    result = _check(name, fn, watch=False)  # they may be the course's own: not watched here
    assert result.passed, str(result)
    assert result.mistake is None
    assert len(result.passed_checks) >= 4  # the list of what was verified is shown to the learner
    assert str(result).startswith(f"✓ {name}: correct!") and repr(result) == str(result)
    assert "correct" in result._repr_html_()


# --------------------------------------------------------------------------- messages
# (each mistake's phrase, and text that never changes: tests/test_battery.py)


def stub_not_implemented(*args, **kwargs):
    raise NotImplementedError("Your code here")


def stub_pass(*args, **kwargs):
    pass


def raises_key_error(*args, **kwargs):
    raise KeyError("oops")


@pytest.mark.parametrize("name", list(EXERCISES))
def test_a_stub_is_not_attempted_and_an_exception_is_reported_with_its_line(name):
    for stub in (stub_not_implemented, stub_pass):
        result = check(name, stub)
        assert result.status == "not_attempted" and not result.passed and not result.attempted
        assert "not attempted yet" in str(result) and "not attempted yet" in result._repr_html_()
        assert EXERCISES[name].signature in result.message
    result = check(name, raises_key_error)
    assert result.status == "failed" and result.mistake == "raised_exception"
    assert "KeyError: 'oops'" in result.message
    assert "in `raises_key_error`, line " in result.message


def test_an_error_raised_in_the_package_is_reported_at_the_learners_line():
    """A bad argument to a core function fails in ``lmlessons``'s validators, which an editable
    install (as .venv has it) keeps outside ``site-packages``: still the learner's line."""

    def bad_probability(input_ids, **kwargs):
        kwargs["mlm_probability"] = 1.5
        return lmlessons.mask_tokens(input_ids, **kwargs)

    with pytest.raises(ValueError) as raised:
        bad_probability(torch.zeros(1, 3, dtype=torch.long), mask_token_id=1, vocab_size=5)
    deepest = Path(traceback.extract_tb(raised.tb)[-1].filename).resolve()
    assert deepest.is_relative_to(Path(lmlessons.__file__).resolve().parent)  # the premise
    result = _check("mask_tokens", bad_probability, watch=False)  # calls the package: allowed
    assert "ValueError: mlm_probability" in result.message
    assert "in `bad_probability`, line " in result.message, result.message
    assert "`return lmlessons.mask_tokens(input_ids, **kwargs)`" in result.message


@pytest.mark.parametrize(
    "change",
    [
        lambda t: setattr(t, "pad_token", t.eos_token),  # lesson 10's bug
        lambda t: setattr(t, "chat_template", CHAT_TEMPLATE),  # the template with the tags
        lambda t: setattr(t, "padding_side", "left"),
    ],
    ids=["pad_token_is_eos", "chat_template", "padding_side"],
)
def test_a_function_that_changes_the_tokenizer_modifies_its_input(change):
    """The tokenizer is passed itself, not a copy: its state must be the same after the call;
    encoding (padding, a chat template) changes nothing of it."""

    def changes_the_tokenizer(tokenizer, messages):
        change(tokenizer)
        return solutions_part2.assistant_labels(tokenizer, messages)

    result = _check("assistant_labels", changes_the_tokenizer, watch=False)  # wraps the solution
    assert result.mistake == "modifies_input", str(result)
    assert "`tokenizer` changed during the call" in result.message
    tokenizer = ChatTokenizer()  # what the learner gets
    before = tokenizer_state(tokenizer)
    tokenizer("a cat sat", padding="max_length", max_length=8, truncation=True)
    tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=True)
    assert tokenizer_state(tokenizer) == before
    change(tokenizer)
    assert tokenizer_state(tokenizer) != before


def _collator_default(name):
    """A default of transformers' ``DataCollatorForLanguageModeling`` (BERT's rates)."""
    fields = dataclasses.fields(DataCollatorForLanguageModeling)
    return next(f.default for f in fields if f.name == name)


def test_numbers_in_messages():
    """The factor the 'counts unmasked positions' message states is 1 / mlm_probability at
    transformers' default rate, and dividing by every position really shrinks the loss by it."""
    p = _collator_default("mlm_probability")
    divides_by_every_position = check_losses.divides_by_every_position
    message = check("mlm_loss", divides_by_every_position).message
    assert f"{1 / p:.1f} times too small at {p:.0%}" in message
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 50, (256, 128), generator=g)
    _, labels = lmlessons.mask_tokens(
        ids, mask_token_id=4, vocab_size=50, mlm_probability=p, generator=g
    )
    logits = torch.randn(256, 128, 50, generator=g)
    shrink = lmlessons.mlm_loss(logits, labels) / divides_by_every_position(logits, labels)
    assert float(shrink) == pytest.approx(1 / p, rel=0.05)


def test_not_callable_and_unknown_exercise():
    result = check("mlm_loss", 3.0)
    assert result.mistake == "not_callable" and not result.passed
    with pytest.raises(ValueError, match="mask_tokens"):
        check("mask_token", lmlessons.mask_tokens)


def test_check_leaves_global_state_alone(capsys):
    def noisy_global(input_ids, **kwargs):
        print("debugging output")
        random.random()
        np.random.rand()
        return battery.mask_tokens.global_rng(input_ids, **kwargs)

    torch.manual_seed(123)
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    threads = torch.get_num_threads()
    result = check("mask_tokens", noisy_global)
    assert torch.equal(torch.get_rng_state(), states[0])
    assert random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])
    assert torch.get_num_threads() == threads
    assert capsys.readouterr().out == ""  # the learner's prints are hidden ...
    assert "printed output" in result.message  # ... and the learner is told so


def test_too_slow_fires_on_the_runner_clock():
    """The runner adds up the time of the learner's calls on its clock (here a fake one that
    advances 0.6 of the limit per call): the second call is over the limit, ``too_slow``; a clock
    that does not advance never fires."""
    case = Case("a case", (torch.zeros(1, 2, 3), torch.tensor([[0, -100]])))
    for step, fires_at in ((0.6 * TIME_LIMIT, 2), (0.0, None)):
        now = iter(step * k for k in range(100))  # read twice per call: before and after
        run = Runner(
            "mlm_loss", solutions.mlm_loss, solutions.mlm_loss, clock=lambda now=now: next(now)
        )
        codes = []
        for _ in range(3):
            try:
                run.call(case)
                codes.append(None)
            except Mistake as m:
                codes.append(m.code)
        first = next((k + 1 for k, c in enumerate(codes) if c), None)
        assert first == fires_at and set(codes) <= {None, "too_slow"}, (step, codes)


def test_gradients_name_the_item_of_a_tuple_and_weigh_the_rows():
    """The runner's gradient check reaches the tensors inside a tuple argument (MoE's router
    logits, one per layer) and names the wrong one; a per-row result is weighted row by row, so
    two rows whose gradients are swapped fail even though their plain sum's gradient is right."""

    def reference(xs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return torch.stack([xs[0].sum(), 2.0 * xs[1].sum()])  # (2,): one value per row

    def swapped(xs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return torch.stack([2.0 * xs[1].sum(), xs[0].sum()])  # the rows' gradients swapped

    def doubled(xs: tuple[torch.Tensor, ...]) -> torch.Tensor:  # right values at xs = 0 only
        return torch.stack([xs[0].sum(), 2.0 * xs[1].sum() + xs[1].sum()])

    case = Case("a case", ((torch.zeros(3, requires_grad=True), torch.zeros(2).requires_grad_()),))
    for learner, code, name in (
        (reference, None, None),
        (swapped, "wrong_gradient", "xs[0]"),
        (doubled, "wrong_gradient", "xs[1]"),
        (lambda xs: reference(xs).detach(), "detached", "xs"),
    ):
        run = Runner("group_advantages", learner, reference)
        try:
            run.gradients(case, run.call(case))
            found = None
        except Mistake as m:
            found = m
        assert (found.code if found else None) == code, learner
        assert found is None or f"`{name}`" in found.message, found.message


# --------------------------------------------------------------------------- hints and solutions


@pytest.mark.parametrize("name", FUNCTIONS)
def test_hints_are_graded(name):
    texts = [hint(name, level).text for level in (1, 2, 3)]
    assert len(set(texts)) == 3
    assert all(len(t) > 80 for t in texts)
    h1, h3 = hint(name, 1), hint(name, 3)
    assert str(h1).startswith(f"Hint 1/3 for {name}") and f'hint("{name}", 2)' in str(h1)
    assert "More:" not in str(h3)
    assert hint(name).level == 1
    assert h1._repr_html_().startswith("<div")
    for bad in (0, 4, "2", True):
        with pytest.raises(ValueError):
            hint(name, bad)


@pytest.mark.parametrize("name", list(EXERCISES))
def test_solution_shows_the_reference_source(name):
    s = solution(name)
    assert f"def {name}(" in s.source and f"def {name}(" in str(s)
    page = s._repr_html_()
    assert "<span" in page  # highlighted
    assert not VOLATILE.search(page)


def test_mask_tokens_solution_draws_like_transformers():
    """The reference solution makes transformers' three Bernoulli draws in the same order: with
    the same generator seed it corrupts a batch exactly as ``DataCollatorForLanguageModeling``."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 40, (6, 20), generator=g)
    special = torch.zeros_like(ids)
    special[:, 0] = special[:, -1] = 1
    kwargs = {"mask_token_id": 4, "vocab_size": 40, "special_tokens_mask": special}
    for probs in (
        {},
        {"mlm_probability": 0.5, "mask_replace_prob": 0.5, "random_replace_prob": 0.3},
    ):
        ours = solutions.mask_tokens(
            ids, **kwargs, **probs, generator=torch.Generator().manual_seed(1)
        )
        hf = hf_mask_tokens(ids, **kwargs, **probs, generator=torch.Generator().manual_seed(1))
        assert all(torch.equal(a, b) for a, b in zip(ours, hf))


def test_new_solutions_match_the_package_and_transformers():
    """The four later solutions give the package's results (truncate_seq_pair and
    select_whole_words draw the same random numbers in the same order), the Trainer's rank loss,
    and the full cross-entropy."""
    for seed, (la, lb, m) in enumerate([(20, 9, 24), (16, 14, 21), (3, 30, 12)]):
        a, b = list(range(la)), list(range(100, 100 + lb))
        mine = solutions.truncate_seq_pair(a, b, m, generator=torch.Generator().manual_seed(seed))
        ours = lmlessons.truncate_seq_pair(a, b, m, generator=torch.Generator().manual_seed(seed))
        assert mine == ours
    batch = word_batch([(((1, 3, 2), (2, 1)), 3), (((2, 2, 1, 1, 4),), 0)] * 3)
    for kwargs in ({}, {"attention_mask": batch.attn, "mlm_probability": 0.4}):
        args = (batch.special, batch.cont)
        mine = solutions.select_whole_words(
            *args, **kwargs, generator=torch.Generator().manual_seed(3)
        )
        ours = select_whole_words(*args, **kwargs, generator=torch.Generator().manual_seed(3))
        assert torch.equal(mine, ours)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 11, generator=g)
    labels = torch.randint(11, (3, 6), generator=g)
    labels[0, 3:] = -100

    def others(t):  # all_reduce on a rank whose 2 partners hold 7 targets between them
        return t + 7

    expected = (
        3
        * F.cross_entropy(
            logits[:, :-1].reshape(-1, 11), labels[:, 1:].reshape(-1), reduction="sum"
        )
        / (int((labels[:, 1:] != -100).sum()) + 7)
    )
    for fn in (solutions.rank_loss, hf_rank_loss):
        assert torch.allclose(fn(logits, labels, all_reduce=others, world_size=3), expected)
    hidden, weight = torch.randn(18, 5, generator=g), torch.randn(11, 5, generator=g)
    flat = torch.randint(11, (18,), generator=g)
    flat[4:9] = -100
    full = F.cross_entropy(hidden @ weight.T, flat)
    for chunk in (1, 4, 18, 50):
        got = solutions.chunked_cross_entropy(hidden, weight, flat, chunk_size=chunk)
        assert torch.allclose(got, full, atol=1e-6)
    n = int((flat != -100).sum())
    assert torch.allclose(
        solutions.chunked_cross_entropy(hidden, weight, flat, chunk_size=4, num_items_in_batch=40),
        full * n / 40,
    )


@pytest.mark.slow
def test_whole_word_probabilities_the_checker_states():
    """The select_whole_words checker's numbers: twelve 2-piece words with a count of 6 are each
    selected 1/4 of the time; a 3-piece word among six 1-piece words with a count of 3, 1/7 of the
    time, and 3/9 when a random piece picks the word."""
    n = 3000
    equal = word_batch([(((2,) * 6, (2,) * 6), 0)] * n)
    sel = select_whole_words(
        equal.special, equal.cont, mlm_probability=0.23, generator=torch.Generator().manual_seed(0)
    )
    shares = [float(sel[:, w[0]].float().mean()) for w in equal.words[0]]
    assert all(abs(x - 1 / 4) < 0.03 for x in shares), shares
    mixed = word_batch([(((3, 1, 1, 1), (1, 1, 1)), 0)] * n)
    long_word = mixed.words[0][0][0]
    by_piece = battery.select_whole_words.picks_random_tokens
    for fn, p in ((select_whole_words, 1 / 7), (by_piece, 3 / 9)):
        sel = fn(
            mixed.special,
            mixed.cont,
            mlm_probability=0.27,
            generator=torch.Generator().manual_seed(1),
        )
        assert int(sel[0].sum()) == 3
        assert float(sel[:, long_word].float().mean()) == pytest.approx(p, abs=0.03)


def test_generated_loss_batches_reach_the_corners():
    """The seeded batches the loss checkers add after their hand-written cases: one token, one
    row, length 1, a vocabulary of 2, rows without target, batches where every position is a
    target, and targets of id 0."""
    seen = set()
    for logits, labels in batches(33, 16):
        (B, T, V), keep = logits.shape, labels != -100
        seen |= {"one token"} if B * T == 1 else set()
        seen |= {"one row"} if B == 1 and T > 1 else set()
        seen |= {"length 1"} if T == 1 and B > 1 else set()
        seen |= {"vocabulary of 2"} if V == 2 else set()
        seen |= {"row without target"} if B > 1 and bool((~keep).all(1).any()) else set()
        seen |= {"every position a target"} if bool(keep.all()) else set()
        seen |= {"target 0"} if bool((labels[keep] == 0).any()) else set()
        assert logits.requires_grad and labels.dtype == torch.long
    assert len(seen) == 7, seen


@pytest.mark.parametrize("name", ["mlm_loss", "clm_loss", "chunked_cross_entropy"])
def test_token_id_zero_is_a_target(name):
    """A loss that skips targets of id 0 (``labels > 0``, as if 0 were padding) is named."""

    def skips_zero(*args, **kwargs):
        *inputs, labels = args
        return getattr(solutions, name)(*inputs, labels.masked_fill(labels == 0, -100), **kwargs)

    result = _check(name, skips_zero, watch=False)  # wraps the solution
    assert result.mistake == "skips_target_zero", str(result)
    assert "id 0" in result.message


def test_hidden_word_batches_hold_the_cores_words():
    """The select_whole_words checker judges whole words by the words its hidden batches were
    built from: they are :func:`lmlessons.masking_variants.word_ids`' words, a ``##`` piece right
    after [CLS] or [SEP] starting one (the generated rows reach that corner)."""
    g = torch.Generator().manual_seed(0)
    for pad_is_special in (True, False):
        batch = word_batch(random_word_rows(g, 60), pad_is_special=pad_is_special)
        ids = word_ids(batch.cont, batch.special.bool() | (batch.attn == 0)).tolist()
        words = [
            [[t for t, w in enumerate(row) if w == k] for k in range(max(row) + 1)] for row in ids
        ]
        assert batch.words == words
        assert any(batch.cont[r, w[0]] for r, ws in enumerate(words) for w in ws)


def test_all_reduce_group_sums_and_never_hangs():
    group = Group(3)
    out = [None] * 3
    tensors = [torch.tensor(r + 1) for r in range(3)]

    def rank(r):
        out[r] = group.all_reduce(r, tensors[r])
        group.finish(r)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert [int(x) for x in out] == [6, 6, 6] and [int(t) for t in tensors] == [6, 6, 6]
    # a partner that never arrives: the wait ends (at the timeout) with the calls per rank
    with pytest.raises(MismatchedAllReduce, match="calls per rank"):
        Group(2, timeout=0.01).all_reduce(0, torch.tensor(1))
    # a partner that already returned: waiting is over at once, whatever the timeout
    finished = Group(2)
    assert not finished.over(0)
    finished.finish(1)
    assert finished.over(0)
    with pytest.raises(MismatchedAllReduce):
        finished.all_reduce(0, torch.tensor(1))


def test_rank_check_reports_extra_all_reduce_calls():
    def extra_call_on_rank_one(logits, labels, *, all_reduce, world_size):
        count = all_reduce((labels[:, 1:] != -100).sum())
        if int((labels[:, 1:] != -100).sum()) < 10:  # only a rank with few targets checks again
            count = all_reduce(count) / world_size
        return solutions.rank_loss(
            logits, labels, all_reduce=lambda t: count, world_size=world_size
        )

    result = _check("rank_loss", extra_call_on_rank_one, watch=False)  # wraps the solution
    assert result.mistake == "mismatched_all_reduce", str(result)
    assert "calls per rank: [2, 1]" in result.message


def test_largest_tensor_sees_the_logits_however_they_are_built():
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(40, 4, generator=g), torch.randn(50, 4, generator=g)

    def preallocated():
        logits = torch.empty(40, 50)
        for s in range(0, 40, 8):
            logits[s : s + 8] = hidden[s : s + 8] @ weight.T
        return logits[:8]

    builds = {
        "matmul": lambda: hidden @ weight.T,
        "F.linear": lambda: F.linear(hidden, weight),
        "einsum": lambda: torch.einsum("nh,vh->nv", hidden, weight),
        "preallocated, a chunk returned": preallocated,
    }
    for name, build in builds.items():
        with LargestTensor() as sizes:
            build()
        assert sizes.numel >= 40 * 50, name
    labels = torch.randint(50, (40,), generator=g)
    with LargestTensor() as sizes:
        lmlessons.linear_cross_entropy(
            hidden.requires_grad_(), weight.requires_grad_(), labels, chunk_size=8
        )
    assert sizes.numel <= 8 * 50


# --------------------------------------------------------------------------- quizzes


QUESTIONS = [(lesson, i + 1) for lesson, qs in QUIZZES.items() for i in range(len(qs))]


def test_every_lesson_has_a_quiz():
    lessons = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(QUIZZES) == lessons[1:]  # lesson 00 has its warm-up questions instead


@pytest.mark.parametrize("lesson,number", QUESTIONS)
def test_quiz_feedback_per_choice(lesson, number):
    q = quiz(lesson)
    question = q.questions[number - 1]
    assert len({c.why for c in question.choices}) == len(question.choices)  # one each
    for i, choice in enumerate(question.shown):  # letters name the choices as shown
        letter = "ABCDEFGH"[i]
        text = q.answer(letter, question=number)
        assert text == q.answer(i, question=number)
        assert text.startswith(f"{letter}: {'Correct.' if choice.correct else 'Not quite.'}")
        assert choice.why in text
        # the widget shows exactly this text
        shown = html.unescape(re.sub(r"<[^>]+>", "", q._feedback[number - 1].value))
        assert shown == text == q.feedback_texts[number - 1]
    assert q.correct_choice(number) == "ABCDEFGH"[[c.correct for c in question.shown].index(True)]


def test_quiz_widget_callbacks():
    q = quiz("03")
    box = q.widget  # what the notebook displays
    radio, button = q._radios[0], q._buttons[0]
    assert radio in box.children and button in box.children
    button.click()
    assert q.feedback_texts[0] == "Choose an answer first."
    right = "ABCD".index(q.correct_choice(1))
    wrong = (right + 1) % 4
    assert radio.options[right][0].startswith(f"{'ABCD'[right]}. ")  # the label the learner sees
    radio.value = right  # what a learner's click on that label does
    button.click()
    assert q.feedback_texts[0].startswith(f"{'ABCD'[right]}: Correct.")
    radio.value = wrong  # choosing another answer clears the old feedback
    assert q.feedback_texts[0] == "" and q._feedback[0].value == ""
    button.click()
    assert q.feedback_texts[0].startswith(f"{'ABCD'[wrong]}: Not quite.")


def _position_shares(questions) -> list[float]:
    """For each letter, the share of ``questions`` whose right answer is shown at it."""
    counts = [0, 0, 0, 0]
    for question in questions:
        counts[[c.correct for c in question.shown].index(True)] += 1
    return [n / len(questions) for n in counts]


def test_quiz_answers_cannot_be_found_by_position():
    """Over all questions every letter holds the right answer 15-35% of the time."""
    lessons = [q for qs in QUIZZES.values() for q in qs]
    for questions in (lessons, [*lessons, *START_QUESTIONS]):
        shares = _position_shares(questions)
        assert all(0.15 <= share <= 0.35 for share in shares), shares
    written = [Question(q.id, q.prompt, q.choices) for q in lessons]  # as written: 49% A
    assert not all(0.15 <= share <= 0.35 for share in _position_shares(written))


def test_quiz_shows_a_seeded_shuffle_that_never_changes():
    """The shown order depends on the question id alone: the same on every run and machine."""
    q = QUIZZES["03"][0]
    assert q.order == display_order("03.1", 4) == (1, 0, 2, 3)  # stored outputs rely on it
    assert display_order("03.1", 4, seed=0) != q.order  # the seed matters
    assert [display_order(f"99.{i}", 4) for i in range(8)] != [(0, 1, 2, 3)] * 8
    for question in (q for qs in QUIZZES.values() for q in qs):
        assert sorted(question.order) == list(range(len(question.choices)))
        assert sorted(question.shown, key=question.choices.index) == list(question.choices)
    assert all(q.shown == q.choices for q in START_QUESTIONS)  # lesson 00: written order
    shown = str(quiz("03.1")).splitlines()  # the text lists the shown order, A first
    assert shown[3:7] == [f"  {'ABCD'[i]}. {c.text}" for i, c in enumerate(q.shown)]
    assert quiz("03.1").answer("A").startswith("A: Correct.") and q.shown[0].correct


def test_quiz_display_and_errors():
    q = quiz("04")
    bundle = q._repr_mimebundle_()
    assert bundle["text/plain"] == str(q) == str(quiz("04"))  # deterministic text for nbval
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert all(f"{letter}. " in str(q) for letter in "ABCD")
    one = quiz("04.2")
    assert len(one.questions) == 1 and one.questions[0].id == "04.2"
    assert quiz(4).title == quiz("04").title
    for bad in ("99", "04.9"):
        with pytest.raises(ValueError):
            quiz(bad)
    with pytest.raises(ValueError):
        q.answer("E")
    with pytest.raises(ValueError):
        q.answer(0, question=len(q.questions) + 1)


def _pct(x: float) -> str:
    return f"{round(100 * x, 1):g}%"


def _loss_of(values: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``(1, N, 2)`` and labels ``(1, N)`` whose per-token cross-entropies are ``values``."""
    z = torch.tensor([math.log(math.expm1(v)) for v in values], dtype=torch.float64)
    logits = torch.stack([torch.zeros_like(z), z], dim=-1)[None]  # CE of class 0 = log(1 + e^z)
    return logits, torch.zeros((1, len(values)), dtype=torch.long)


def test_quiz_numbers():
    """Every number stated in the quizzes, computed from transformers' defaults and the course's
    own code (not restated)."""
    text = "\n".join(
        f"{q.prompt} " + " ".join(c.text + " " + c.why for c in q.choices)
        for qs in QUIZZES.values()
        for q in qs
    )
    # 01.1: shares of the eligible tokens at BERT's rates, and the course's masking draws them
    p, p_mask, p_random = (
        _collator_default(k)
        for k in ("mlm_probability", "mask_replace_prob", "random_replace_prob")
    )
    assert _pct(p * p_mask) in text and _pct(p * p_random) in text
    assert _pct(p * (p_mask + p_random)) in text
    ids = torch.randint(5, 1000, (200, 500), generator=torch.Generator().manual_seed(0))
    masked, _ = lmlessons.mask_tokens(
        ids, mask_token_id=4, vocab_size=1000, generator=torch.Generator().manual_seed(1)
    )
    assert float((masked == 4).float().mean()) == pytest.approx(p * p_mask, abs=0.003)
    # 02.1: 30 targets among 2 x 100 positions; dividing by all 200 shrinks the loss 200/30-fold
    logits = torch.randn(2, 100, 7, generator=torch.Generator().manual_seed(2))
    labels = torch.full((2, 100), -100)
    labels[:, :15] = 3
    every = check_losses.divides_by_every_position
    shrink = float(lmlessons.mlm_loss(logits, labels) / every(logits, labels))
    assert f"200/30, about {shrink:.1f}x" in text
    # 07.1: a micro-batch of 1 token with loss 2.0, one of 99 tokens with loss 1.0 each
    first, second = _loss_of([2.0]), _loss_of([1.0] * 99)
    summed = sum(float(lmlessons.mlm_loss(*b, num_items_in_batch=1)) for b in (first, second))
    full = sum(float(lmlessons.mlm_loss(*b, num_items_in_batch=100)) for b in (first, second))
    naive = (float(lmlessons.mlm_loss(*first)) + float(lmlessons.mlm_loss(*second))) / 2
    assert f"The full-batch loss is {full:.2f}." in text and f"= {naive:.1f}:" in text
    assert f"sum(S_i) / sum(n_i) = {summed:.0f} / 100" in text
    # 07.3: float32 logits of 8 x 512 tokens over BERT's vocabulary, all rows and the masked ones
    logits = torch.empty(8, 512, BertConfig().vocab_size, device="meta")  # no memory used
    n_values, n_bytes = logits.numel(), logits.numel() * logits.element_size()
    mib = n_bytes / 2**20
    assert f"{n_values:,}" in text and f"{n_bytes:,} bytes = {mib:.1f} MiB" in text
    assert f"About {mib:.0f} MiB, and about {p * mib:.0f} MiB." in text
    assert f"15% of that is {p * mib:.1f} MiB" in text
    values_mib = n_values / 2**20  # values counted as bytes
    assert f"({values_mib:.1f} Mi)" in text
    assert f"About {values_mib:.0f} MiB, and about {p * values_mib:.0f} MiB." in text
    bits = 8 * n_bytes  # bits counted as bytes
    assert f"About {bits / 2**30:.1f} GiB, and about {p * bits / 2**20:.0f} MiB." in text
    # 08.5: targets per step of the recorded bug zoo runs; only one bug fits the numbers
    runs = {k: summary(v) for k, v in load_records().items()}
    healthy, special, every = (
        runs[k]["targets_per_step"]
        for k in ("healthy_mlm", "special_tokens_masked", "every_token_a_target")
    )
    assert f"has {special:.0f} targets per step where a healthy run" in text
    assert f"batches has {healthy:.0f}, and a lower" in text
    assert f"{every:.0f} per step in the recorded run, over {int(every / healthy)} times" in text
    assert f"the healthy {healthy:.0f}, not {special / healthy:.1f} times" in text
    assert runs["special_tokens_masked"]["heldout_special_guess_rate"] > 0
    assert runs["every_token_a_target"]["heldout_special_guess_rate"] == 0  # "never guesses"
    for run in ("special_tokens_masked", "every_token_a_target"):  # both lower the train loss
        assert runs[run]["final_train_loss"] < runs["healthy_mlm"]["final_train_loss"]
    # 08.3: the mean of micro-batch means moves the held-out loss by less than 0.2%
    assert "held-out loss is within 0.2% of the healthy run's" in text
    for key in ("heldout_clm_loss", "heldout_word_loss"):
        ratio = runs["accumulation_mean_of_means"][key] / runs["healthy_clm"][key]
        assert abs(ratio - 1) < 0.002, (key, ratio)
    # 08.1: pad = eos leaves the train loss above the healthy run's (both model families)
    assert "leaves the train loss above the healthy run's, never far below it" in text
    for run, healthy in (("pad_is_eos", "healthy_clm"), ("chat_pad_is_eos", "healthy_chat")):
        assert runs[run]["final_train_loss"] > runs[healthy]["final_train_loss"], run


def test_the_pretraining_reference_is_bert_for_pretrainings_loss():
    """The bert_pretraining_loss checker's reference gives a tiny ``BertForPreTraining``'s loss
    (that the model needs both labels: tests/test_claims_06.py)."""
    model = seeded(BertForPreTraining, bert_config())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 97, (2, 9), generator=g)
    labels = torch.where(torch.rand(2, 9, generator=g) < 0.3, ids, -100)
    labels[0, 1] = ids[0, 1]
    nsp = torch.tensor([0, 1])
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels, next_sentence_label=nsp)
    reference = REFERENCES["bert_pretraining_loss"]
    expected = reference(out.prediction_logits, out.seq_relationship_logits, labels, nsp)
    assert torch.allclose(out.loss, expected, atol=1e-5)


# --------------------------------------------------------------------------- Part III references


def test_part3_solutions_equal_the_core_on_every_case_of_their_checkers():
    """``solutions_part3`` (what ``solution(...)`` shows and the checkers compare with) gives the
    core's results, which tests/test_preference_trl.py and tests/test_grpo_trl.py hold against
    TRL, on every case the two checkers run: values and gradients."""
    pairs = [
        (
            sequence_logprobs_cases(),
            solutions_part3.sequence_logprobs,
            core_sequence_logprobs,
        ),
        (grpo_loss_cases(), solutions_part3.grpo_loss, core_grpo_loss),
    ]
    for cases, solution_fn, core_fn in pairs:
        assert len(cases) >= 20
        for case in cases:
            results = []
            for fn in (solution_fn, core_fn):
                args, kwargs = case.arguments()
                out = fn(*args, **kwargs)
                (grad,) = torch.autograd.grad(out.sum(), args[0])
                results.append((out.detach().double(), grad.double()))
            (mine, my_grad), (core, core_grad) = results
            assert torch.allclose(mine, core, rtol=1e-5, atol=1e-6), case.label
            assert torch.allclose(my_grad, core_grad, rtol=1e-5, atol=1e-7), case.label


def test_the_dapo_window_adds_up_to_the_full_batch():
    """The checker's window: the ``dapo`` losses of its three micro-batches (one shared
    ``num_items_in_batch``) add up to the ``bnpo`` loss of the full batch, and their ``bnpo``
    losses (each divided by its own token count) do not."""
    micro, full = window()
    dapo = sum(float(core_grpo_loss(*c.args, **c.kwargs).detach()) for c in micro)
    own = sum(float(core_grpo_loss(*c.args, loss_type="bnpo").detach()) for c in micro)
    whole = float(core_grpo_loss(*full.args, **full.kwargs).detach())
    assert dapo == pytest.approx(whole, rel=1e-5)
    assert abs(own - whole) > 0.1 * abs(whole)


def test_part3_generated_cases_reach_the_corners():
    """The checkers' cases hold what their docstrings promise: sequence_logprobs, a length-1
    batch, rows without a target (never under ``average=True``), targets of id 0, a last token
    that is a target, and a confident model where ``softmax(...).log()`` is -inf; grpo_loss, each
    loss type on a batch with an empty completion, an all-empty batch, one-token widths,
    ``max_completion_length`` above the width, and int32, int64, bool and float masks."""
    rows = []
    for case in sequence_logprobs_cases():
        logits, labels = case.args
        has_target = (labels[:, 1:] != -100).any(-1)  # (B,)
        assert bool(has_target.all()) or not case.kwargs.get("average")
        rows.append((logits.shape[1], bool(has_target.all()), labels, logits))
    assert any(length == 1 for length, *_ in rows)
    assert sum(not full for _, full, *_ in rows) >= 5
    assert sum(int((labels[:, 1:] == 0).sum()) for *_, labels, _ in rows) >= 10
    assert sum(int((labels[:, -1] != -100).sum()) for *_, labels, _ in rows) >= 10
    assert any(bool((logits.detach().float().softmax(-1) == 0).any()) for *_, logits in rows)
    empty_types, dtypes = set(), set()
    for case in grpo_loss_cases():
        mask = case.args[1]
        dtypes.add(mask.dtype)
        if bool((mask.sum(-1) == 0).any()):
            empty_types.add(case.kwargs["loss_type"])
    assert empty_types == {"grpo", "bnpo", "dr_grpo", "dapo"}
    assert dtypes == {torch.int32, torch.int64, torch.bool, torch.float32}
    cases = grpo_loss_cases()
    assert any(not bool(c.args[1].sum()) for c in cases)
    assert any(c.args[1].shape[1] == 1 for c in cases)
    assert any(c.kwargs.get("max_completion_length", 0) > c.args[1].shape[1] for c in cases)


def test_grpo_cases_reach_the_types_corners():
    """Every loss type gets a ``num_items_in_batch`` that differs from the micro-batch's count
    (only ``dapo`` may use it); float masks with zeros inside a completion; token losses of exactly
    0 on counted tokens (a count from the nonzero losses is wrong there); ``dapo`` with a count of
    0 on an all-empty mask, whose expected loss is 0 as in TRL (``clamp(min=1.0)``)."""
    with_count, holes_float, zero_losses, zero_window = set(), False, False, False
    for case in grpo_loss_cases():
        loss, mask = case.args[0].detach(), case.args[1]
        n = case.kwargs.get("num_items_in_batch")
        if n is not None and float(n) != float(mask.sum()):
            with_count.add(case.kwargs["loss_type"])
        ones = mask.bool().int()
        inside = (
            ones.cummax(-1).values.bool()
            & ~ones.bool()
            & ones.flip(-1).cummax(-1).values.flip(-1).bool()
        )
        holes_float |= mask.is_floating_point() and bool(inside.any())
        zero_losses |= bool(((loss == 0) & mask.bool()).any()) and bool((loss * mask != 0).any())
        if case.kwargs["loss_type"] == "dapo" and n is not None and float(n) == 0:
            zero_window = not bool(mask.sum())
            args, kwargs = case.arguments()
            assert solutions_part3.grpo_loss(*args, **kwargs).item() == 0.0
            assert core_grpo_loss(*case.arguments()[0], **case.arguments()[1]).item() == 0.0
    assert with_count == {"grpo", "bnpo", "dr_grpo", "dapo"}
    assert holes_float and zero_losses and zero_window


def test_group_advantages_reference_equals_trls_lines_and_the_core():
    """The reference solution gives, on every case its checker runs, the advantages of TRL's own
    lines with TRL's ``nanstd`` and of the core's ``group_advantages`` (held against the trainer
    itself in tests/test_grpo_trl.py), in the rewards' dtype."""
    cases = group_advantages_cases()
    assert len(cases) >= 20
    for case in cases:
        results = []
        for fn in (solutions_part3.group_advantages, trl_group_advantages, group_advantages):
            args, kwargs = case.arguments()
            results.append(fn(*args, **kwargs))
        mine, trl_lines, core = results
        assert mine.dtype == trl_lines.dtype == core.dtype == case.args[0].dtype, case.label
        assert torch.isfinite(mine).all(), case.label
        torch.testing.assert_close(mine, trl_lines, rtol=1e-5, atol=1e-6, msg=case.label)
        torch.testing.assert_close(mine, core, rtol=0, atol=0, msg=case.label)


def test_trls_sampler_puts_a_prompts_completions_in_consecutive_rows():
    """TRL's ``RepeatSampler``, as ``GRPOTrainer`` builds it (``mini_repeat_count`` =
    ``num_generations``), yields each prompt's index ``num_generations`` times in a row: the
    rewards of a group are consecutive, ``rewards.view(-1, num_generations)``."""
    from trl.trainer.utils import RepeatSampler

    for g in (2, 4):
        sampler = RepeatSampler(list(range(6)), mini_repeat_count=g, batch_size=3, seed=0)
        order = torch.tensor(list(sampler)).view(-1, g)  # (prompts, G)
        assert bool((order == order[:, :1]).all()) and order.shape[0] == 6
        assert len(set(order[:, 0].tolist())) == 6  # every prompt once, in one group


def test_trl_nanstd_is_bessels():
    """TRL's ``nanstd`` is the sample standard deviation (n - 1): ``torch.std``'s default, not
    the population's."""
    rewards = torch.tensor([[0.0, 1.0], [2.0, 6.0], [1.0, 1.0]])  # (3, 2)
    torch.testing.assert_close(trl_nanstd(rewards, dim=1), rewards.std(dim=1))
    assert not torch.allclose(trl_nanstd(rewards, dim=1), rewards.std(dim=1, correction=0))
    assert trl_nanstd(rewards, dim=1)[0].item() == pytest.approx(math.sqrt(0.5))


def test_group_advantages_cases_reach_the_corners():
    """The checker's cases hold what its docstring promises: every scaling, the default left
    out, groups of 2, one prompt, as many groups as completions per group, groups without spread
    under ``"group"`` and a batch without spread under ``"batch"``, a group whose spread is small
    enough for the 1e-4 to matter by more than 5 %, 0/1 and integer-valued rewards, float64."""
    scales, shapes, dtypes = set(), set(), set()
    flat_group = flat_batch = small = zero_one = integers = False
    for case in group_advantages_cases():
        rewards, g = case.args[0].double(), case.kwargs["num_generations"]
        scale = case.kwargs.get("scale_rewards", "default")
        scales.add(scale)
        dtypes.add(case.args[0].dtype)
        grouped = rewards.view(-1, g)  # (P, G)
        shapes.add((grouped.shape[0] == 1, g == 2, grouped.shape[0] == g))
        spread = grouped.std(dim=1)  # (P,)
        flat_group |= scale in ("group", "default") and bool((spread == 0).any())
        flat_batch |= scale == "batch" and float(rewards.std()) == 0
        small |= scale in ("group", "default") and bool(((spread > 0) & (spread < 2e-3)).any())
        zero_one |= set(rewards.tolist()) == {0.0, 1.0}
        integers |= bool((rewards == rewards.round()).all()) and float(rewards.max()) > 1
    assert scales == {"group", "batch", "none", "default"}
    assert any(one for one, _, _ in shapes) and any(two for _, two, _ in shapes)
    assert any(square for _, _, square in shapes)
    assert dtypes == {torch.float32, torch.float64}
    assert flat_group and flat_batch and small and zero_one and integers


def test_sequence_logprobs_float16_and_an_average_without_targets():
    """The float16 case gives float32 from the reference and the core; on the row without a
    target under ``average=True`` the reference gives NaN, the core raises ``ValueError``, and
    both pass."""
    half = half_case()
    assert half.args[0].dtype == torch.float16
    for fn in (solutions_part3.sequence_logprobs, core_sequence_logprobs):
        args, kwargs = half.arguments()
        assert fn(*args, **kwargs).dtype == torch.float32
    empty = empty_average_case()
    args, kwargs = empty.arguments()
    assert kwargs == {"average": True}
    assert torch.isnan(solutions_part3.sequence_logprobs(*args, **kwargs)).tolist() == [
        False,
        True,
        False,
    ]
    with pytest.raises(ValueError):
        core_sequence_logprobs(*args, **kwargs)
    assert _check("sequence_logprobs", core_sequence_logprobs, watch=False).passed


# --------------------------------------------------------------------------- Part IV references


def test_part4_solutions_equal_the_core_and_transformers_on_every_case():
    """``solutions_part4`` gives, on every case of its checkers, the core's results and
    transformers' (Mixtral's ``load_balancing_loss_func``, ``LabelSmoother``): values, and the
    gradients of the losses with respect to their first argument."""
    rows = [
        (load_balancing_cases(), solutions_part4.load_balancing_loss_func, core_load_balancing),
        (load_balancing_cases(), solutions_part4.load_balancing_loss_func, mixtral_loss),
        (label_smoothed_loss_cases(), solutions_part4.label_smoothed_loss, label_smoothed_loss),
        (label_smoothed_loss_cases(), solutions_part4.label_smoothed_loss, hf_label_smoothed_loss),
    ]
    for cases, solution_fn, other in rows:
        for case in cases:
            results = []
            for fn in (solution_fn, other):
                args, kwargs = case.arguments()
                out = fn(*args, **kwargs)
                leaves = list(args[0]) if isinstance(args[0], tuple) else [args[0]]
                grads = torch.autograd.grad(out, leaves, allow_unused=True)
                results.append((out.detach().double(), [g.double() for g in grads]))
            (mine, my_grads), (theirs, their_grads) = results
            assert torch.allclose(mine, theirs, rtol=1e-5, atol=1e-6), case.label
            for g, h in zip(my_grads, their_grads):
                assert torch.allclose(g, h, rtol=1e-4, atol=1e-6), case.label
    for case in mtp_labels_cases():
        args, kwargs = case.arguments()
        assert torch.equal(solutions_part4.mtp_labels(*args, **kwargs), mtp_labels(*args, **kwargs))


def test_part4_cases_reach_the_corners():
    """load_balancing_loss_func: 1 and several layers, top_k 1, 2 and 3, no mask, left and right
    padding, a row of padding only, float64 and bfloat16 logits, the reference float32;
    mtp_labels: depth 1, T - 1, T and past T, ``ignore_index=-1``, one token;
    label_smoothed_loss: epsilon 0 and 1, ``shift=False``, no target, ``num_items_in_batch``."""
    seen: set[object] = set()
    for case in load_balancing_cases():
        gate, _, top_k, mask = case.args
        seen |= {("layers", min(len(gate), 2)), ("top_k", top_k), ("dtype", gate[0].dtype)}
        if mask is None:
            seen.add("no mask")
        else:
            seen |= {"left" for row in mask if row[0] == 0 and row.any()}
            seen |= {"right" for row in mask if row[-1] == 0 and row.any()}
            seen |= {"padding only" for row in mask if not row.any()}
        assert solutions_part4.load_balancing_loss_func(*case.args).dtype == torch.float32
    for want in [("layers", 1), ("layers", 2), ("top_k", 1), ("top_k", 2), ("top_k", 3)]:
        assert want in seen
    assert {("dtype", torch.float64), ("dtype", torch.bfloat16)} <= seen
    assert {"no mask", "left", "right", "padding only"} <= seen
    for case in mtp_labels_cases():
        labels, depth = case.args
        T = labels.shape[1]
        where = {1: "1", T - 1: "T - 1", T: "T"}.get(depth, "past T" if depth > T else "")
        seen |= {("depth", where), ("ignore", case.kwargs.get("ignore_index", -100)), ("T", T)}
    assert {("depth", d) for d in ("1", "T - 1", "T", "past T")} <= seen
    assert {("ignore", -1), ("ignore", -100), ("T", 1)} <= seen
    for case in label_smoothed_loss_cases():
        kw = case.kwargs
        targets = case.args[1][:, 1:] if kw.get("shift", True) else case.args[1]
        seen |= {("eps", kw.get("epsilon")), ("shift", kw.get("shift", True))}
        seen |= {("n", kw.get("num_items_in_batch") is not None)}
        seen |= {("empty", not bool(targets.ne(-100).any()))}
    assert {("eps", 0.0), ("eps", 1.0), ("shift", False), ("n", True), ("empty", True)} <= seen


def test_label_smoother_spreads_epsilon_like_torch_and_skips_ignored_positions():
    """On the checker's cases (prompts, padding, rows without targets), ``LabelSmoother`` equals
    ``F.cross_entropy(..., label_smoothing=epsilon)``: epsilon over all V classes, the true one
    included; both skip the -100 positions in both terms. Spreading it over the V - 1 others
    (the catalogue's ``smoothing_excludes_true_token``) gives another loss."""
    for case in label_smoothed_loss_cases()[:5]:
        logits, labels = case.args
        eps, shift = case.kwargs.get("epsilon", 0.1), case.kwargs.get("shift", True)
        x, y = (logits[:, :-1], labels[:, 1:]) if shift else (logits, labels)
        torch_loss = F.cross_entropy(x.reshape(-1, x.shape[-1]), y.reshape(-1), label_smoothing=eps)
        ours = hf_label_smoothed_loss(logits, labels, epsilon=eps, shift=shift)
        torch.testing.assert_close(torch_loss, ours, rtol=1e-5, atol=1e-6)
        others = check_label_smoothing.spreads_over_the_others(logits, labels, **case.kwargs)
        assert eps == 0.0 or abs(float(others.detach()) - float(ours.detach())) > 1e-4, case.label


# --------------------------------------------------------------------------- delegation


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_reference_solution_itself_is_refused(name):
    """Passing the reference solution (or a function that only calls it) fails every exercise."""
    result = check(name, EXERCISES[name].solution)
    assert result.mistake == "delegates_to_course", str(result)
    assert "reference solution" in result.message
    assert "Course functions this exercise lets you use:" in result.message


def test_a_course_function_reached_any_way_is_refused():
    """A name bound in the learner's globals before the check, a default argument, a closure, a
    ``functools.partial`` and a function that swallows what follows: all are named."""
    import functools

    def from_globals(logits, labels, *, num_items_in_batch=None):
        return course_mlm_loss(logits, labels, num_items_in_batch=num_items_in_batch)

    def default_argument(logits, labels, *, num_items_in_batch=None, impl=lmlessons.mlm_loss):
        return impl(logits, labels, num_items_in_batch=num_items_in_batch)

    def make_closure():
        impl = course_mlm_loss

        def closure(logits, labels, *, num_items_in_batch=None):
            return impl(logits, labels, num_items_in_batch=num_items_in_batch)

        return closure

    partial = functools.partial(course_mlm_loss)

    def then_fails(logits, labels, *, num_items_in_batch=None):
        try:
            course_mlm_loss(logits, labels)
        except Exception:
            labels = None
        raise RuntimeError("my own bug")

    for fn in (from_globals, default_argument, make_closure(), partial, then_fails):
        result = check("mlm_loss", fn)
        assert result.mistake == "delegates_to_course", str(result)
        assert "`lmlessons.losses.mlm_loss`" in result.message


def test_a_building_block_may_call_a_forbidden_function():
    """A forbidden function called from inside an allowed building block is not the learner's;
    called directly it is; the watch restores the profiler that was set before it."""

    def forbidden():
        return 1

    def block():
        return forbidden()

    watch = Delegation(
        "x",
        {id(forbidden.__code__): "forbidden"},
        frozenset({id(block.__code__)}),
        ("block",),
        (forbidden.__code__, block.__code__),
    )
    before = sys.getprofile()
    with watch.watch() as hits:
        block()
    assert hits == []
    with watch.watch() as hits:
        forbidden()
    assert hits == ["forbidden"]
    assert sys.getprofile() is before


def test_building_blocks_cover_every_exercise_and_resolve():
    """building_blocks.toml: one table per coded exercise with the lists ``same_idea`` and
    ``building_blocks``, every name importable, no name in both lists, no building block that is
    a reference solution; the "not attempted yet" message names the building blocks."""
    table = load("building_blocks")
    assert set(table) == set(FUNCTIONS)
    for name, entry in table.items():
        assert set(entry) == {"same_idea", "building_blocks"}, name
        assert entry["same_idea"] or name == "rank_loss", name
        assert not set(entry["same_idea"]) & set(entry["building_blocks"]), name
        watch = delegation(name)
        assert not watch.allowed & set(watch.forbidden), name
        result = check(name, stub_not_implemented)
        assert f"Course functions you may use: {watch.blocks_text()}" in result.message
    assert "`lmlessons.shift_labels`" in delegation("clm_loss").blocks_text()

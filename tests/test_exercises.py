"""The exercise checkers, hints, solutions and quizzes (lmlessons.exercises)."""

from __future__ import annotations

import html
import random
import re
import time

import naive_variants as nv
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lmlessons
from lmlessons.exercises import EXERCISES, CheckResult, check, hint, quiz, solution, solutions
from lmlessons.exercises.quizzes import QUIZZES

TIME_LIMIT = 1.0  # seconds per check (issue 4)
VOLATILE = re.compile(r"0x[0-9a-fA-F]{6,}|/tmp/|/work/|/root/|site-packages|\d+\.\d+ ?(ms|s)\b")


def timed_check(name, fn) -> CheckResult:
    start = time.perf_counter()
    result = check(name, fn)
    elapsed = time.perf_counter() - start
    assert elapsed < TIME_LIMIT, (
        f"check({name!r}, {getattr(fn, '__name__', fn)}) took {elapsed:.2f} s"
    )
    return result


# --------------------------------------------------------------------------- accepting correct code


@pytest.mark.parametrize("name", list(EXERCISES))
@pytest.mark.parametrize("source", ["package", "solution"])
def test_correct_functions_pass(name, source):
    fn = getattr(lmlessons if source == "package" else solutions, name)
    result = timed_check(name, fn)
    assert result.passed, str(result)
    assert result.mistake is None
    assert len(result.passed_checks) >= 4  # the list of what was verified is shown to the learner
    assert "correct" in str(result) and "correct" in result._repr_html_()


@pytest.mark.parametrize("name,variant", [(ex, v) for ex, vs in nv.VALID.items() for v in vs])
def test_other_correct_implementations_pass(name, variant):
    result = timed_check(name, nv.get(variant))
    assert result.passed, str(result)


# --------------------------------------------------------------------------- rejecting naive code

# a phrase the title or message must contain, so the learner reads what the defect is
PHRASES = {
    "labels_are_boolean_mask": "-100",
    "masks_special_tokens": "special_tokens_mask",
    "ignores_replace_probs": "mask_replace_prob",
    "ignores_mlm_probability": "mlm_probability",
    "labels_not_ignored": "-100",
    "labels_are_corrupted_ids": "original",
    "modifies_input": "in place",
    "uses_global_rng": "generator=generator",
    "ignores_generator": "generator",
    "random_not_conditional": "random_replace_prob / (1 - mask_replace_prob)",
    "raised_exception": "Error",
    "special_tokens_mask_none": "special_tokens_mask=None",
    "wrong_dtype": "dtype",
    "wrong_return": "pair",
    "not_scalar": "reduction",
    "returns_tuple": "tuple",
    "nan_when_nothing_masked": "NaN",
    "nan_when_no_targets": "NaN",
    "counts_unmasked_positions": "denominator",
    "minus100_not_ignored": "-100",
    "per_row_mean": "per-sequence",
    "sum_not_mean": "sum",
    "detached": "backward",
    "not_a_tensor": "tensor",
    "ignores_num_items_in_batch": "num_items_in_batch",
    "num_items_divides_mean": "sum",
    "class_dim": "(N, V)",
    "empty_detached": "gradient",
    "nll_without_log_softmax": "log_softmax",
    "not_shifted": "next",
    "shifted_twice": "twice",
    "shifted_wrong_way": "wrong way",
    "counts_padding_positions": "padding",
    "not_ignoring_padding": "padding",
    "unweighted": "weights",
    "misweighted": "weight",
    "averages_losses": "adds",
    "swapped_nsp_labels": "0 = IsNext",
    "missing_nsp": "NSP",
    "mlm_counts_unmasked_positions": "masked positions",
    "hard_coded_special_ids": "from the arguments",
    "positive_from_other_document": "same document",
    "negative_random_ids": "another document",
    "negative_same_document": "different",
    "wrong_segment_ids": "segment",
    "ignores_max_length": "max_length",
    "ignores_nsp_probability": "nsp_probability",
}

NAIVE = [(ex, v, code) for ex, table in nv.EXPECTED.items() for v, code in table.items()]


@pytest.mark.parametrize("name,variant,code", NAIVE, ids=[v for _, v, _ in NAIVE])
def test_naive_variant_is_rejected_with_its_defect(name, variant, code):
    result = timed_check(name, nv.get(variant))
    assert result.status == "failed", str(result)
    assert result.mistake == code, str(result)
    text = f"{result.title}\n{result.message}"
    assert PHRASES[code] in text, text
    # the rendering is deterministic and shows no machine-specific text
    again = check(name, nv.get(variant))
    assert str(again) == str(result) and again._repr_html_() == result._repr_html_()
    assert not VOLATILE.search(str(result)), str(result)
    assert not VOLATILE.search(result._repr_html_())
    assert f'hint("{name}", 1)' in str(result)


def test_every_seed_function_has_a_faithful_variant():
    """Each naive function of the seed file is re-implemented with its defects and caught."""
    seeds = {
        "mask_tokens": "mask_seed",
        "mlm_loss": "mlm_seed",
        "clm_loss": "clm_seed",
        "make_nsp_pairs": "nsp_seed",
        "bert_pretraining_loss": "bert_seed",
    }
    for name, prefix in seeds.items():
        variants = [v for v in nv.EXPECTED[name] if v.startswith(prefix)]
        assert variants, name
        for v in variants:
            assert not check(name, nv.get(v)).passed


@pytest.mark.parametrize("name", list(EXERCISES))
@pytest.mark.parametrize("stub", ["stub_not_implemented", "stub_pass"])
def test_untouched_stub_is_not_attempted(name, stub):
    result = timed_check(name, nv.get(stub))
    assert result.status == "not_attempted" and not result.passed and not result.attempted
    assert "not attempted yet" in str(result)
    assert EXERCISES[name].signature in result.message
    assert "not attempted yet" in result._repr_html_()


@pytest.mark.parametrize("name", list(EXERCISES))
def test_exception_is_reported_with_type_message_and_line(name):
    result = timed_check(name, nv.raises_key_error)
    assert result.status == "failed" and result.mistake == "raised_exception"
    assert "KeyError: 'oops'" in result.message
    assert "raises_key_error" in result.message and "line" in result.message


def test_numbers_in_messages():
    """The factor the 'counts unmasked positions' message states: 1 / 0.15."""
    assert f"{1 / 0.15:.1f}" == "6.7"
    assert "6.7 times too small at 15%" in check("mlm_loss", nv.mlm_counts_unmasked).message


def test_division_by_zero_is_explained():
    result = check("mask_tokens", nv.mask_unguarded_division)
    assert "ZeroDivisionError" in result.message and "mask_replace_prob == 1" in result.message


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
        return nv.mask_global_rng(input_ids, **kwargs)

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


def test_python_random_module_is_caught():
    def uses_random(input_ids, **kwargs):
        random.random()
        return lmlessons.mask_tokens(input_ids, **kwargs)

    result = check("mask_tokens", uses_random)
    assert result.mistake == "uses_global_rng" and "random" in result.message


def test_check_results_render():
    ok = check("clm_loss", lmlessons.clm_loss)
    assert ok.passed and str(ok).startswith("✓ clm_loss: correct!")
    assert repr(ok) == str(ok)
    bad = check("mask_tokens", nv.mask_specials)
    page = bad._repr_html_()
    assert page.startswith("<div") and "<code>special_tokens_mask</code>" in page
    assert "<script" not in page and html.escape("[CLS]") in page


# --------------------------------------------------------------------------- hints and solutions


@pytest.mark.parametrize("name", list(EXERCISES))
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


@pytest.mark.parametrize("name", ["mlm_loss", "clm_loss", "bert_pretraining_loss"])
def test_solutions_equal_the_package(name):
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 7, 11, generator=g)
    labels = torch.randint(11, (3, 7), generator=g)
    labels[torch.rand(3, 7, generator=g) < 0.5] = -100
    if name == "bert_pretraining_loss":
        args = (logits, torch.randn(3, 2, generator=g), labels, torch.tensor([0, 1, 0]))
        kwargs = {"mlm_weight": 0.7, "nsp_weight": 1.3}
    else:
        args, kwargs = (logits, labels), {}
    assert torch.allclose(
        getattr(solutions, name)(*args, **kwargs), getattr(lmlessons, name)(*args, **kwargs)
    )


# --------------------------------------------------------------------------- quizzes


QUESTIONS = [(lesson, i + 1) for lesson, qs in QUIZZES.items() for i in range(len(qs))]


def test_every_lesson_has_a_quiz():
    assert sorted(QUIZZES) == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("lesson,number", QUESTIONS)
def test_quiz_feedback_per_choice(lesson, number):
    q = quiz(lesson)
    question = q.questions[number - 1]
    assert sum(c.correct for c in question.choices) == 1
    assert len({c.why for c in question.choices}) == len(
        question.choices
    )  # its own explanation each
    for i, choice in enumerate(question.choices):
        letter = "ABCDEFGH"[i]
        text = q.answer(letter, question=number)
        assert text == q.answer(i, question=number)
        assert text.startswith(f"{letter}: {'Correct.' if choice.correct else 'Not quite.'}")
        assert choice.why in text
        # the widget shows exactly this text
        shown = html.unescape(re.sub(r"<[^>]+>", "", q._feedback[number - 1].value))
        assert shown == text == q.feedback_texts[number - 1]
    assert q.correct_choice(number) in "ABCD"


def test_quiz_widget_callbacks():
    q = quiz("03")
    box = q.widget  # what the notebook displays
    radio, button = q._radios[0], q._buttons[0]
    assert radio in box.children and button in box.children
    button.click()
    assert q.feedback_texts[0] == "Choose an answer first."
    radio.value = 1  # what a learner's click on "B" does
    button.click()
    assert q.feedback_texts[0].startswith("B: Correct.")
    radio.value = 2  # choosing another answer clears the old feedback
    assert q.feedback_texts[0] == "" and q._feedback[0].value == ""
    button.click()
    assert q.feedback_texts[0].startswith("C: Not quite.")


def test_quiz_display_and_errors():
    q = quiz("04")
    bundle = q._repr_mimebundle_()
    assert bundle["text/plain"] == str(q) == str(quiz("04"))  # deterministic text for nbval
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert all(f"{l}. " in str(q) for l in "ABCD")
    one = quiz("04.2")
    assert len(one.questions) == 1 and one.questions[0].id == "04.2"
    assert quiz(4).title == quiz("04").title
    for bad in ("99", "04.9"):
        with pytest.raises(ValueError):
            quiz(bad)
    with pytest.raises(ValueError):
        q.answer("E")
    with pytest.raises(ValueError):
        q.answer(0, question=3)


def test_quiz_numbers():
    """Every number stated in the quizzes, computed."""
    text = "\n".join(
        f"{q.prompt} " + " ".join(c.text + " " + c.why for c in q.choices)
        for qs in QUIZZES.values()
        for q in qs
    )
    p, p_mask, p_random = 0.15, 0.8, 0.1
    assert f"{p * p_mask:.2f}" == "0.12" and "12%" in text
    assert f"{p * p_random:.3f}" == "0.015" and "1.5%" in text
    assert f"{p * (p_mask + p_random):.3f}" == "0.135" and "13.5%" in text
    assert f"{200 / 30:.1f}x" == "6.7x" and "6.7x" in text
    full = (2.0 + 99.0) / (1 + 99)
    naive = (2.0 / 1 + 99.0 / 99) / 2
    assert (
        f"{full:.2f}" == "1.01" and f"{naive:.1f}" == "1.5" and "1.01" in text and "= 1.5" in text
    )
    n_values = 8 * 512 * 30522
    n_bytes = n_values * 4
    assert f"{n_values:,}" in text and f"{n_bytes:,}" in text
    assert (
        f"{n_bytes / 2**20:.1f} MiB" == "476.9 MiB"
        and "476.9 MiB" in text
        and "About 477 MiB" in text
    )
    assert (
        f"{0.15 * n_bytes / 2**20:.1f} MiB" == "71.5 MiB"
        and "71.5 MiB" in text
        and "72 MiB" in text
    )
    assert f"{n_values / 2**20:.1f}" == "119.2" and "119.2 Mi" in text and "119 MiB" in text
    assert round(0.15 * n_values / 2**20) == 18 and "18 MiB" in text
    assert (
        f"{8 * n_bytes / 2**30:.1f} GiB" == "3.7 GiB" and round(8 * 0.15 * n_bytes / 2**20) == 572
    )


def test_quiz_claims_about_losses():
    """02.2: mean cross-entropy over no target is NaN; the package's loss is 0 and backpropagates."""
    logits = torch.randn(2, 3, 5, requires_grad=True)
    labels = torch.full((2, 3), -100)
    assert torch.isnan(F.cross_entropy(logits.reshape(-1, 5), labels.reshape(-1)))
    loss = lmlessons.mlm_loss(logits, labels)
    loss.backward()
    assert loss.item() == 0.0 and torch.count_nonzero(logits.grad) == 0


def test_quiz_claim_bert_for_pretraining_needs_both_labels():
    """06.1 and 06.2, on a tiny BertForPreTraining built from a config."""
    from _tiny import bert_config, seeded
    from transformers import BertForPreTraining

    model = seeded(BertForPreTraining, bert_config())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 97, (2, 9), generator=g)
    labels = torch.where(torch.rand(2, 9, generator=g) < 0.3, ids, -100)
    labels[0, 1] = ids[0, 1]
    nsp = torch.tensor([0, 1])
    with torch.no_grad():
        assert model(input_ids=ids, labels=labels).loss is None
        out = model(input_ids=ids, labels=labels, next_sentence_label=nsp)
    expected = lmlessons.mlm_loss(out.prediction_logits, labels) + lmlessons.nsp_loss(
        out.seq_relationship_logits, nsp
    )
    assert torch.allclose(out.loss, expected, atol=1e-5)

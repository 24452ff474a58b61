"""lmlessons.course.trainer_ga: one real transformers ``Trainer`` step against the whole batch."""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest
import torch
from _exact import same_tensors

from lmlessons.course import trainer_ga as tga
from lmlessons.course.models import tiny_gpt2
from lmlessons.course.tokenizer import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

TEXTS = (
    "The cat sat.",
    "A long river runs through the old town and under seven bridges.",
    "Rain fell all night.",
    "The children built a small boat from wood they found on the beach after the storm.",
)


@functools.cache
def tokenizer() -> Any:
    return load_tokenizer()


@functools.cache
def batch() -> dict[str, torch.Tensor]:
    return tga.ga_batch(tokenizer(), TEXTS, seed=0)


def test_ga_batch_labels() -> None:
    b = batch()
    pad = b["attention_mask"] == 0
    assert b["input_ids"].shape == b["mlm_labels"].shape == b["clm_labels"].shape
    assert bool((b["clm_labels"][pad] == -100).all()) and bool((b["mlm_labels"][pad] == -100).all())
    assert torch.equal(b["clm_labels"][~pad], b["input_ids"][~pad])
    assert b["next_sentence_label"].tolist() == [0, 1, 0, 1]
    assert same_tensors(b, tga.ga_batch(tokenizer(), TEXTS, seed=0))
    assert not torch.equal(b["mlm_labels"], tga.ga_batch(tokenizer(), TEXTS, seed=3)["mlm_labels"])


def test_model_inputs_use_transformers_names() -> None:
    assert set(tga.model_inputs("GPT2LMHeadModel", batch())) == {
        "input_ids",
        "attention_mask",
        "labels",
    }
    assert "next_sentence_label" in tga.model_inputs("BertForPreTraining", batch())
    assert torch.equal(
        tga.model_inputs("BertForMaskedLM", batch())["labels"], batch()["mlm_labels"]
    )


@pytest.mark.slow
def test_bert_mlm_step_is_too_large_and_the_fix_is_exact() -> None:
    bug = tga.measure("BertForMaskedLM", batch(), tokenizer(), gradient_accumulation_steps=2)
    fixed = tga.measure(
        "BertForMaskedLM",
        batch(),
        tokenizer(),
        fix="compute_loss_func",
        gradient_accumulation_steps=2,
    )
    assert bug.norm_ratio > 1.5 and not bug.exact
    assert fixed.exact and fixed.norm_ratio == pytest.approx(1.0, abs=1e-4)
    assert sum(fixed.targets_per_micro_batch) == int((batch()["mlm_labels"] != -100).sum())


def test_measure_leaves_the_global_random_state_and_prints_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    torch.manual_seed(123)
    random.seed(5)
    before = torch.get_rng_state(), random.getstate()
    tga.measure(
        "GPT2LMHeadModel",
        batch(),
        tokenizer(),
        fix="loss_type=ForCausalLM",
        gradient_accumulation_steps=2,
    )
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_compare() -> None:
    a = [torch.ones(3), torch.zeros(2)]
    assert tga.compare(a, a) == (1.0, 0.0)
    ratio, error = tga.compare([2 * t for t in a], a)
    assert ratio == pytest.approx(2.0) and error == pytest.approx(1.0)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="model_name must be one of"):
        tga.measure("T5", batch(), tokenizer())
    with pytest.raises(ValueError, match="fix must be one of"):
        tga.measure("GPT2LMHeadModel", batch(), tokenizer(), fix="magic")
    inputs = tga.model_inputs("GPT2LMHeadModel", batch())
    with pytest.raises(ValueError, match="equal micro-batches"):
        tga.trainer_gradient(tiny_gpt2(tokenizer()), inputs, gradient_accumulation_steps=3)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        tga.trainer_gradient(tiny_gpt2(tokenizer()), inputs, gradient_accumulation_steps=0)

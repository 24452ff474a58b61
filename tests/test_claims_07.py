"""Behaviour tests of lesson 07's claims about transformers (``docs/claims.md``, ``## Lesson 07``).

Each test runs the installed transformers (its real ``Trainer`` included) on tiny models built
from configs and the course tokenizer; nothing is downloaded. The ``Trainer`` measurements of the
lesson are made once per module (:func:`measured`) on the lesson's own 8 sentences.
"""

from __future__ import annotations

import functools
import tempfile
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from lmlessons import clm_loss, mlm_loss
from lmlessons.course import trainer_ga as tga
from lmlessons.course.corpus import load_corpus
from lmlessons.course.models import (
    tiny_bert_lm_head,
    tiny_bert_mlm,
    tiny_bert_pretraining,
    tiny_gpt2,
)
from lmlessons.course.tokenizer import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@functools.cache
def tokenizer() -> Any:
    return load_tokenizer()


@functools.cache
def batch() -> dict[str, torch.Tensor]:
    """The lesson's 8 sentences: eight lengths from the course corpus, short to long."""
    tok = tokenizer()
    pool = [s for doc in load_corpus("course").train[:20] for s in doc]
    by_length = sorted(pool, key=lambda s: (len(tok(s)["input_ids"]), s))
    texts = [by_length[i * (len(by_length) - 1) // 7] for i in range(8)]
    return tga.ga_batch(tok, texts, seed=0)


@functools.cache
def measured(model: str, fix: str | None = None) -> tga.GAMeasurement:
    return tga.measure(model, batch(), tokenizer(), fix=fix)


# The Trainers' output_dir (nothing is saved there): one folder, removed when the process ends.
_OUT = tempfile.TemporaryDirectory(prefix="lmlessons-claims-07-")


def _trainer(model: Any, **kwargs: Any) -> Any:
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=_OUT.name, use_cpu=True, report_to="none", **kwargs)
    return Trainer(model=model, args=args)


# ------------------------------------------------------------------ the Trainer, as it is


@pytest.mark.slow
def test_claim_07_trainer_models_measured() -> None:
    for name in ("BertForMaskedLM", "BertForPreTraining"):  # K = 4 micro-batch means, added up
        assert measured(name).gradient_accumulation_steps == 4 and measured(name).norm_ratio > 4
    assert all(0.9 < measured(n).norm_ratio < 1.0 for n in tga.CAUSAL)
    loose = measured("BertForMaskedLM", "accepts_loss_kwargs=False")
    assert abs(loose.norm_ratio - 1) < 0.1 and not loose.exact
    assert measured("BertForMaskedLM", "compute_loss_func").exact
    assert measured("BertForPreTraining", "course_loss").exact


def test_claim_07_gpt2_num_items() -> None:
    model = tiny_gpt2(tokenizer(), seed=0)
    inputs = tga.model_inputs("GPT2LMHeadModel", batch())
    labels = inputs.pop("labels")
    with torch.no_grad():
        logits = model(**inputs).logits
        theirs = model(**inputs, labels=labels, num_items_in_batch=1000).loss
    total = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), reduction="sum")
    assert torch.allclose(theirs, total / 1000, rtol=1e-5)
    assert torch.allclose(theirs, clm_loss(logits, labels, num_items_in_batch=1000), rtol=1e-5)


def test_claim_07_trainer_accepts_loss_kwargs() -> None:
    model = tiny_gpt2(tokenizer(), seed=0)
    assert not hasattr(model, "accepts_loss_kwargs")
    assert _trainer(model).model_accepts_loss_kwargs  # forward(..., **kwargs)
    model.accepts_loss_kwargs = False
    assert not _trainer(model).model_accepts_loss_kwargs  # the attribute wins

    class NoKwargs(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> Any:
            return None

    assert not _trainer(NoKwargs()).model_accepts_loss_kwargs


@pytest.mark.slow
def test_claim_07_trainer_no_division() -> None:
    """The Trainer passes the step's count to every forward (and so divides by nothing: the exact
    step of test_claim_07_loss_type_fix)."""
    seen: list[Any] = []
    model = tiny_gpt2(tokenizer(), seed=0)
    model.loss_type = "ForCausalLM"
    forward = model.forward

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("num_items_in_batch"))
        return forward(*args, **kwargs)

    model.forward = spy
    inputs = tga.model_inputs("GPT2LMHeadModel", batch())
    tga.trainer_gradient(model, inputs, gradient_accumulation_steps=4)
    count = int((inputs["labels"][:, 1:] != -100).sum())
    assert len(seen) == 4 and all(int(n) == count for n in seen)


def test_claim_07_bert_heads_drop_num_items() -> None:
    b = batch()
    for factory, name in (
        (tiny_bert_mlm, "BertForMaskedLM"),
        (tiny_bert_pretraining, "BertForPreTraining"),
    ):
        model = factory(tokenizer(), seed=0)
        inputs = tga.model_inputs(name, b)
        with torch.no_grad():
            plain = model(**inputs).loss
            given = model(**inputs, num_items_in_batch=10_000).loss
        assert torch.equal(plain, given), name
        assert _trainer(model).model_accepts_loss_kwargs, name
    mlm = tiny_bert_mlm(tokenizer(), seed=0)
    inputs = tga.model_inputs("BertForMaskedLM", b)
    with torch.no_grad():
        out = mlm(**inputs)
    assert torch.allclose(out.loss, mlm_loss(out.logits, inputs["labels"]), rtol=1e-5)  # the mean


def test_claim_07_causal_loss_type_none() -> None:
    gpt2, bert = tiny_gpt2(tokenizer(), seed=0), tiny_bert_lm_head(tokenizer(), seed=0)
    assert gpt2.loss_type is None and bert.loss_type is None
    inputs = tga.model_inputs("GPT2LMHeadModel", batch())
    unshifted = int((inputs["labels"] != -100).sum())
    for model in (gpt2, bert):
        n = _trainer(model)._get_num_items_in_batch([inputs], torch.device("cpu"))
        assert int(n) == unshifted


def test_claim_07_whatif_trainer_count() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        llama = LlamaForCausalLM(config)
    assert llama.loss_type == "ForCausalLM"
    inputs = tga.model_inputs("GPT2LMHeadModel", batch())
    n = _trainer(llama)._get_num_items_in_batch([inputs], torch.device("cpu"))
    assert int(n) == int((inputs["labels"][:, 1:] != -100).sum())  # after the shift


def test_claim_07_trainer_measurement() -> None:
    model = tiny_gpt2(tokenizer(), seed=0)
    model.loss_type = "ForCausalLM"
    inputs = tga.model_inputs("GPT2LMHeadModel", batch())
    step = tga.trainer_gradient(model, inputs, gradient_accumulation_steps=1)
    reference = tga.reference_gradient(tiny_gpt2(tokenizer(), seed=0), inputs)
    ratio, error = tga.compare(step, reference)
    assert error < 1e-5 and ratio == pytest.approx(1.0, abs=1e-5)


# ------------------------------------------------------------------ the fixes


def test_claim_07_fix_accepts_loss_kwargs_false() -> None:
    """The accumulated gradient is sum_i grad(mean_i) / K: built by hand, it matches."""
    m = measured("BertForMaskedLM", "accepts_loss_kwargs=False")
    inputs = tga.model_inputs("BertForMaskedLM", batch())
    model = tiny_bert_mlm(tokenizer(), seed=0)
    model.zero_grad()
    for i in range(4):
        part = {k: v[2 * i : 2 * i + 2] for k, v in inputs.items()}
        (model(**part).loss / 4).backward()
    by_hand = [p.grad.detach().clone() for p in model.parameters()]
    reference = tga.reference_gradient(tiny_bert_mlm(tokenizer(), seed=0), inputs)
    ratio, error = tga.compare(by_hand, reference)
    assert m.norm_ratio == pytest.approx(ratio, rel=1e-4)
    assert m.relative_error == pytest.approx(error, rel=1e-3) and error > 0.05


def test_claim_07_compute_loss_func() -> None:
    from transformers import Trainer, TrainingArguments

    calls: list[tuple[Any, ...]] = []

    def record(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append((args, kwargs))
        outputs = args[0]
        return outputs.prediction_logits.sum() * 0.0 + outputs.seq_relationship_logits.sum() * 0.0

    model = tiny_bert_pretraining(tokenizer(), seed=0)
    inputs = tga.model_inputs("BertForPreTraining", batch())
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, use_cpu=True, report_to="none")
        trainer = Trainer(model=model, args=args, compute_loss_func=record)
        trainer.compute_loss(model, dict(inputs), num_items_in_batch=17)
    ((positional, keywords),) = calls
    outputs, labels = positional
    assert torch.equal(labels, inputs["labels"]) and keywords == {"num_items_in_batch": 17}
    assert outputs.loss is None  # the model never saw the labels (nor computed its loss)


@pytest.mark.slow
def test_claim_07_loss_type_fix() -> None:
    for name in tga.CAUSAL:
        assert measured(name, "loss_type=ForCausalLM").exact, name


# ------------------------------------------------------------------ data parallelism


def _scaled_by_processes(monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    """``Trainer.compute_loss`` on 2 (pretended) processes, and the model's sum / count."""
    from accelerate import Accelerator

    model = tiny_gpt2(tokenizer(), seed=0)
    inputs = tga.model_inputs("GPT2LMHeadModel", batch())
    trainer = _trainer(model)
    monkeypatch.setattr(Accelerator, "num_processes", property(lambda self: 2))
    with torch.no_grad():
        loss = trainer.compute_loss(model, dict(inputs), num_items_in_batch=1000)
        own = model(**inputs, num_items_in_batch=1000).loss
    return float(loss), float(own)


def test_claim_07_average_tokens_across_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import TrainingArguments

    with tempfile.TemporaryDirectory() as out:
        assert TrainingArguments(output_dir=out).average_tokens_across_devices is True
    loss, own = _scaled_by_processes(monkeypatch)
    assert loss == pytest.approx(2 * own, rel=1e-6)
    model = tiny_gpt2(tokenizer(), seed=0)
    trainer = _trainer(model)
    inputs = tga.model_inputs("GPT2LMHeadModel", batch())
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: 2))
    monkeypatch.setattr(trainer.accelerator, "gather", lambda t: torch.stack([t, t + 5]))
    n = trainer._get_num_items_in_batch([inputs], torch.device("cpu"))
    assert int(n) == 2 * int((inputs["labels"] != -100).sum()) + 5  # the ranks' counts, summed


def test_claim_07_rank_loss_is_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The course's ``rank_loss`` (lesson 07's exercise) equals ``Trainer.compute_loss`` on one
    of 2 ranks, given the count over both (this rank's targets and 7 on the other)."""
    from accelerate import Accelerator

    from lmlessons.exercises.solutions import rank_loss

    model = tiny_gpt2(tokenizer(), seed=0)
    inputs = tga.model_inputs("GPT2LMHeadModel", batch())
    trainer = _trainer(model)
    monkeypatch.setattr(Accelerator, "num_processes", property(lambda self: 2))
    total = int((inputs["labels"][:, 1:] != -100).sum()) + 7  # over both ranks
    with torch.no_grad():
        theirs = trainer.compute_loss(model, dict(inputs), num_items_in_batch=total)
        logits = model(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]
        ).logits
    ours = rank_loss(logits, inputs["labels"], all_reduce=lambda count: count + 7, world_size=2)
    assert float(theirs) == pytest.approx(float(ours), rel=1e-5)


def test_claim_07_trainer_defaults() -> None:
    from transformers import TrainingArguments

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out)
    assert "adamw" in str(args.optim).lower() and args.max_grad_norm == 1.0
    steps = []
    for scale in (1.0, 4.0):  # the same gradient, 4 times larger: AdamW's step barely moves
        p = torch.nn.Parameter(torch.linspace(-1, 1, 10))
        opt = torch.optim.AdamW([p], lr=0.1)
        p.grad = scale * torch.linspace(0.5, -0.3, 10)
        opt.step()
        steps.append(p.detach().clone())
    assert torch.allclose(steps[0], steps[1], atol=1e-6)
    g = torch.nn.Parameter(torch.zeros(3))
    g.grad = torch.tensor([4.0, 0.0, 3.0])
    assert float(torch.nn.utils.clip_grad_norm_([g], 1.0)) == pytest.approx(5.0)  # sees the norm


@pytest.mark.slow
def test_claim_07_causal_off_by_ratio() -> None:
    labels = tga.model_inputs("GPT2LMHeadModel", batch())["labels"]
    ratio = int((labels[:, 1:] != -100).sum()) / int((labels != -100).sum())
    for name in tga.CAUSAL:
        assert measured(name).norm_ratio == pytest.approx(ratio, rel=1e-4), name
    assert 0.9 < ratio < 1.0

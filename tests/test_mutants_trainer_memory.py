"""Tests that pin what mutation testing of ``lmlessons.course.trainer_ga`` and ``memory`` found
unpinned.

``mutmut`` on ``trainer_ga`` left alive the fixes of :func:`~lmlessons.course.trainer_ga.measure`
(which model each name builds, which remedy each ``fix`` applies, the defaults of 4 micro-batches
and seed 0), the course's own ``Trainer`` and ``compute_loss_func`` (no fast test ran them), how
the scored targets are counted, and the ``TrainingArguments`` that make one ``Trainer`` step the
one read (micro-batches in row order, no clipping, learning rate 0, one step, no folder left
behind). On ``memory`` it left alive everything the fresh child process runs (``main``, the
``/proc`` reading, the ``ru_maxrss`` fallback), what the parent sends it and reads back, which
head each ``(kind, variant)`` builds and with which chunk size, the bounds of ``BenchConfig`` and
the gradients that :class:`~lmlessons.course.memory.TensorPeak` must count. Each test compares
with a hand-written expectation or a plain computation and fails on those mutants. A tokenizer
of about a hundred tokens keeps each real ``Trainer`` step under a second; the child process is
replaced by a stand-in that records what it is given.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _exact import raises_exactly

import lmlessons
from lmlessons.course import memory
from lmlessons.course import trainer_ga as tga
from lmlessons.course.memory import (
    MIB,
    BenchConfig,
    TensorPeak,
    forward_backward,
    head_inputs,
    head_loss,
    tensor_peak_bytes,
    trainable,
)
from lmlessons.course.models import tiny_bert_mlm, tiny_bert_pretraining
from lmlessons.course.tokenizer import train_tokenizer
from lmlessons.losses import mlm_loss, nsp_loss

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# ------------------------------------------------------------------------------ trainer_ga

_TEXTS = ("the dog chased the cat", "a cat sat", "the mat", "the dog ran on the mat and sat")
_TOKENIZER_TEXTS = ["the dog chased the cat", "a cat sat on the mat and the dog ran"]
_EVEN = 0  # ga_batch seed whose MLM targets split 2 + 2 over the two halves of the batch
_UNEVEN = 2  # ... and 3 + 1
_MORE_TEXTS = ("a dog sat on the cat", "the cat ran", "a mat", "the dog and the cat sat on the mat")


@functools.cache
def _tok() -> Any:
    """A tokenizer of about a hundred tokens (the course's has 2,500): small, fast models, and a
    vocabulary the default tokenizer does not have."""
    return train_tokenizer(_TOKENIZER_TEXTS, whole_word_frequency=None)


@functools.cache
def _batch(seed: int) -> dict[str, torch.Tensor]:
    return tga.ga_batch(_tok(), _TEXTS, seed=seed)


def _per_micro_batch(labels: torch.Tensor, k: int, *, shift: bool) -> tuple[int, ...]:
    """Targets per micro-batch by hand: labels not -100, the first column dropped if shifted."""
    scored = labels[:, 1:] if shift else labels  # (B, T) or (B, T - 1)
    return tuple(int((c != -100).sum()) for c in scored.chunk(k))


def _measure(model: str, fix: str | None, **kw: Any) -> tga.GAMeasurement:
    """``measure`` on the batch whose MLM targets split 2 + 2."""
    return tga.measure(model, _batch(_EVEN), _tok(), fix=fix, **kw)


def test_ga_batch_default_seed_is_zero() -> None:
    """``seed=0`` is the default of ``ga_batch`` (the mutant defaults to 1)."""
    default = tga.ga_batch(_tok(), _TEXTS)
    assert torch.equal(default["mlm_labels"], _batch(0)["mlm_labels"])
    assert not torch.equal(
        default["mlm_labels"], tga.ga_batch(_tok(), _TEXTS, seed=1)["mlm_labels"]
    )


@pytest.mark.parametrize("model", ["BertForMaskedLM", "BertForPreTraining"])
def test_masked_models_read_the_masked_ids_under_transformers_names(model: str) -> None:
    """The masked models get ``input_ids`` (the masked ones), ``attention_mask`` and ``labels``;
    ``BertForPreTraining`` also ``next_sentence_label``, the batch's."""
    b = _batch(_EVEN)
    inputs = tga.model_inputs(model, b)
    nsp = {"next_sentence_label"} if model == "BertForPreTraining" else set()
    assert set(inputs) == {"input_ids", "attention_mask", "labels"} | nsp
    assert inputs["input_ids"] is b["masked_input_ids"]
    assert inputs["attention_mask"] is b["attention_mask"]
    assert inputs.get("next_sentence_label", b["next_sentence_label"]) is b["next_sentence_label"]


class _OneUsedLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used, self.unused = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(loss=self.used(x).sum())  # x: (N, 3)


def test_reference_gradient_is_zero_for_an_unused_parameter_and_a_copy() -> None:
    """A parameter the loss does not use has a zero gradient (not None); a used one its own
    gradient, copied (the mutants of ``_grad`` flip or force its ``p.grad is None`` test)."""
    model = _OneUsedLayer()
    x = torch.arange(6.0).reshape(2, 3)  # (N, 3)
    grads = tga.reference_gradient(model, {"x": x})
    assert torch.equal(grads[0], x.sum(0, keepdim=True))  # d sum(x w + b) / dw: (1, 3)
    assert torch.equal(grads[1], torch.tensor([2.0]))  # one per row
    assert all(
        torch.equal(g, torch.zeros_like(p)) for g, p in zip(grads[2:], model.unused.parameters())
    )
    model.used.weight.grad.zero_()
    assert torch.equal(grads[0], x.sum(0, keepdim=True))


def test_trainer_gradient_names_its_bad_arguments_exactly() -> None:
    """The messages name ``gradient_accumulation_steps`` and the rows (a mutant misspells it)."""
    inputs = tga.model_inputs("BertForMaskedLM", _batch(_EVEN))
    model = tiny_bert_mlm(_tok())
    raises_exactly(
        ValueError,
        "gradient_accumulation_steps must be >= 1, got 0",
        lambda: tga.trainer_gradient(model, inputs, gradient_accumulation_steps=0),
    )
    raises_exactly(
        ValueError,
        "the batch's 4 rows must split into 3 equal micro-batches",
        lambda: tga.trainer_gradient(model, inputs, gradient_accumulation_steps=3),
    )


def test_one_micro_batch_is_the_whole_batch() -> None:
    """``gradient_accumulation_steps=1`` is allowed (a mutant asks for 2) and, with nothing to
    accumulate, gives the whole-batch gradient even for ``BertForMaskedLM``'s own loss."""
    inputs = tga.model_inputs("BertForMaskedLM", _batch(_UNEVEN))
    reference = tga.reference_gradient(tiny_bert_mlm(_tok()), inputs)
    grads = tga.trainer_gradient(tiny_bert_mlm(_tok()), inputs, gradient_accumulation_steps=1)
    assert tga.compare(grads, reference)[1] < 1e-5


def _mean_of_micro_batch_means(
    model: torch.nn.Module, inputs: dict[str, torch.Tensor], k: int
) -> list[torch.Tensor]:
    """By hand: the gradient of the sum over consecutive row blocks of (block's mean loss) / k."""
    model.zero_grad()
    for block in zip(*(v.chunk(k) for v in inputs.values())):
        (model(**dict(zip(inputs, block))).loss / k).backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


def test_trainer_gradient_is_the_mean_of_micro_batch_means_in_row_order() -> None:
    """Without loss kwargs the ``Trainer`` step is the mean of the micro-batch means over rows
    0-3 and 4-7: it fails if the rows are shuffled (``train_sampling_strategy`` mutants: four
    rows shuffled with the ``Trainer``'s seed keep their pairs), not split into micro-batches
    of B / K (batch size, ``gradient_accumulation_steps``), clipped (the gradient's norm is
    above 1) or if ``compute_loss_func`` is not passed on."""
    inputs = tga.model_inputs(
        "BertForMaskedLM", tga.ga_batch(_tok(), _TEXTS + _MORE_TEXTS, seed=_UNEVEN)
    )
    halves = _per_micro_batch(inputs["labels"], 2, shift=False)
    assert halves[0] != halves[1]  # so the grouping matters
    want = _mean_of_micro_batch_means(tiny_bert_mlm(_tok()), inputs, 2)
    whole = tga.reference_gradient(tiny_bert_mlm(_tok()), inputs)
    assert tga.compare(want, whole)[1] > 1e-2 and float(tga._norm(want)) > 1.0
    model = tiny_bert_mlm(_tok())
    model.accepts_loss_kwargs = False
    grads = tga.trainer_gradient(model, inputs, gradient_accumulation_steps=2)
    assert tga.compare(grads, want)[1] < 1e-5
    fixed = tga.trainer_gradient(
        tiny_bert_mlm(_tok()),
        inputs,
        gradient_accumulation_steps=2,
        compute_loss_func=tga.course_compute_loss_func("BertForMaskedLM"),
    )
    assert tga.compare(fixed, whole)[1] < 1e-5


def test_trainer_gradient_leaves_the_model_and_the_working_folder_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One step at learning rate 0 (mutants: 1.0, the default), read once (``max_steps``
    mutants read two or three steps' gradients), in a temporary ``output_dir`` (``None`` makes
    ``trainer_output/`` in the working folder)."""
    monkeypatch.chdir(tmp_path)
    model = tiny_bert_mlm(_tok())
    before = [p.detach().clone() for p in model.parameters()]
    inputs = tga.model_inputs("BertForMaskedLM", _batch(_EVEN))
    grads = tga.trainer_gradient(model, inputs, gradient_accumulation_steps=2)
    assert len(grads) == len(before)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert list(tmp_path.iterdir()) == []


def test_bert_mlm_step_is_k_times_too_large_and_each_fix_removes_it() -> None:
    """With 2 + 2 targets the step of ``BertForMaskedLM``'s own loss is exactly twice the
    whole-batch gradient; ``accepts_loss_kwargs=False`` (then a mean of equal means),
    ``compute_loss_func`` (``mlm_loss``, not ``clm_loss``) and ``course_loss`` are exact. Kills
    the mutants that apply a fix to the wrong ``fix`` or not at all, and the record's fields."""
    targets = _per_micro_batch(_batch(_EVEN)["mlm_labels"], 2, shift=False)
    bug = _measure("BertForMaskedLM", None, gradient_accumulation_steps=2)
    assert (bug.model, bug.fix, bug.gradient_accumulation_steps) == ("BertForMaskedLM", None, 2)
    assert bug.targets_per_micro_batch == targets == (2, 2)
    assert bug.norm_ratio == pytest.approx(2.0, abs=1e-4) and not bug.exact
    assert bug.relative_error == pytest.approx(1.0, abs=1e-4)
    for fix in ("accepts_loss_kwargs=False", "compute_loss_func", "course_loss"):
        fixed = _measure("BertForMaskedLM", fix, gradient_accumulation_steps=2)
        assert fixed.fix == fix and fixed.exact, fix
        assert fixed.norm_ratio == pytest.approx(1.0, abs=1e-4), fix


def test_bert_pretraining_course_loss_is_exact_and_its_own_loss_is_not() -> None:
    """``BertForPreTraining`` is built by its name (mutants misspell the key); the course's
    ``compute_loss`` (MLM sum / count + NSP mean / K) is exact, its own loss twice too large."""
    bug = _measure("BertForPreTraining", None, gradient_accumulation_steps=2)
    assert bug.model == "BertForPreTraining"
    assert bug.norm_ratio == pytest.approx(2.0, abs=1e-4)
    assert _measure("BertForPreTraining", "course_loss", gradient_accumulation_steps=2).exact


@pytest.mark.parametrize("model", ["GPT2LMHeadModel", "BertLMHeadModel"])
def test_causal_models_are_counted_after_the_shift_only_with_the_loss_type_fix(model: str) -> None:
    """Without the fix the ``Trainer`` counts every label (the first of each row too): the step
    is (targets after the shift) / (labels) of the whole-batch gradient; ``loss_type`` fixes
    it. ``targets_per_micro_batch`` counts after the shift (``_scored`` mutants do not)."""
    labels = _batch(_EVEN)["clm_labels"]  # (B, T)
    after, every = int((labels[:, 1:] != -100).sum()), int((labels != -100).sum())
    bug = _measure(model, None, gradient_accumulation_steps=2)
    assert bug.norm_ratio == pytest.approx(after / every, abs=1e-4) and after < every
    fixed = _measure(model, "loss_type=ForCausalLM", gradient_accumulation_steps=2)
    assert fixed.exact and fixed.norm_ratio == pytest.approx(1.0, abs=1e-4)
    assert fixed.targets_per_micro_batch == _per_micro_batch(labels, 2, shift=True)


def test_compute_loss_func_of_a_causal_model_is_the_shifted_clm_loss() -> None:
    """``course_compute_loss_func`` gives a causal model ``clm_loss`` (mutants give it
    ``mlm_loss``, unshifted): divided by the ``Trainer``'s count of every label, the step is
    (targets after the shift) / (labels) of the whole-batch gradient, in the same direction."""
    labels = _batch(_EVEN)["clm_labels"]  # (B, T)
    share = int((labels[:, 1:] != -100).sum()) / int((labels != -100).sum())
    got = _measure("GPT2LMHeadModel", "compute_loss_func", gradient_accumulation_steps=2)
    assert got.norm_ratio == pytest.approx(share, abs=1e-4)
    assert got.relative_error == pytest.approx(1 - share, abs=1e-4)


def test_measure_defaults_to_four_micro_batches() -> None:
    """``gradient_accumulation_steps=4`` is the default (5 does not divide the 4 rows)."""
    got = _measure("GPT2LMHeadModel", "loss_type=ForCausalLM")
    assert got.gradient_accumulation_steps == 4 and got.exact
    assert got.targets_per_micro_batch == _per_micro_batch(
        _batch(_EVEN)["clm_labels"], 4, shift=True
    )


def test_measure_builds_both_models_from_seed_zero_by_default_and_the_given_seed() -> None:
    """The default seed is 0 and both models (whole batch, ``Trainer``) are built from the seed
    given: with 3 + 1 targets the mean of means depends on the weights, and an exact fix stays
    exact at seed 1 only if the reference is built from seed 1 too."""
    fix = "accepts_loss_kwargs=False"
    batch, k = _batch(_UNEVEN), 2
    default = tga.measure("BertForMaskedLM", batch, _tok(), fix=fix, gradient_accumulation_steps=k)
    assert default == tga.measure(
        "BertForMaskedLM", batch, _tok(), fix=fix, gradient_accumulation_steps=k, seed=0
    )
    other = tga.measure(
        "BertForMaskedLM", batch, _tok(), fix=fix, gradient_accumulation_steps=k, seed=1
    )
    assert other.norm_ratio != default.norm_ratio
    assert _measure("GPT2LMHeadModel", "loss_type=ForCausalLM", seed=1).exact


def test_course_loss_trainer_returns_the_outputs_when_asked(tmp_path: Path) -> None:
    """``compute_loss(..., return_outputs=True)`` (as ``Trainer.evaluate`` calls it) gives
    ``(loss, outputs)``, the loss being MLM sum / ``num_items_in_batch`` + NSP mean / K."""
    from transformers import TrainingArguments

    model = tiny_bert_pretraining(_tok())
    inputs = tga.model_inputs("BertForPreTraining", _batch(_EVEN))
    with tga.quiet_and_seeded():
        args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
        trainer = tga._course_loss_trainer()(model=model, args=args)
    trainer.current_gradient_accumulation_steps = 2
    loss, outputs = trainer.compute_loss(model, inputs, return_outputs=True, num_items_in_batch=8)
    want = mlm_loss(outputs.prediction_logits, inputs["labels"], num_items_in_batch=8)
    want = want + nsp_loss(outputs.seq_relationship_logits, inputs["next_sentence_label"]) / 2
    torch.testing.assert_close(loss, want)


# ---------------------------------------------------------------------------------- memory


def test_bench_config_bounds_and_messages() -> None:
    """1 is the smallest size (a mutant asks for 2), ``mlm_probability`` 1 is allowed and 1.5
    is not (mutants move the bound); a wrong type is named in the message."""
    assert BenchConfig.tiny(repeats=1, mlm_probability=1.0).repeats == 1
    raises_exactly(
        ValueError,
        "BenchConfig.mlm_probability must be in (0, 1], got 1.5",
        lambda: BenchConfig.tiny(mlm_probability=1.5),
    )
    raises_exactly(
        TypeError,
        "BenchConfig.hidden_size must be an int, got bool",
        lambda: BenchConfig.tiny(hidden_size=True),
    )


_SIZES = [
    "mask_batch",
    "mask_seq_len",
    "mask_vocab_size",
    "head_rows",
    "head_seq_len",
    "hidden_size",
    "vocab_size",
    "chunk_size",
    "repeats",
    "mask_repeats",
    "mask_calls",
]


def test_tiny_config_is_smaller_than_the_default_in_every_size() -> None:
    """``BenchConfig.tiny`` shrinks every size and repeat count (a mutant that drops one keeps
    the full-size default)."""
    tiny, full = BenchConfig.tiny(), BenchConfig()
    assert [f for f in _SIZES if getattr(tiny, f) >= getattr(full, f)] == []


def test_head_inputs_scale_and_mlm_probability() -> None:
    """The head weight has BERT's initializer scale, 0.02 (mutants: 1.02, 0.02 / x); the MLM
    labels follow ``mlm_probability`` (a mutant leaves the 0.15 default)."""
    x = head_inputs("mlm", BenchConfig.tiny(mlm_probability=1.0))
    assert 0.019 < float(x["weight"].detach().std()) < 0.021  # (V, H) = 16,384 draws
    assert bool((x["labels"] != -100).all())


def _peak(kind: str, variant: str, chunk_size: int, cfg: BenchConfig) -> int:
    x = head_inputs(kind, cfg)
    return tensor_peak_bytes(head_loss(kind, variant, x, chunk_size), list(x.values()))


def test_dense_heads_build_the_logits_and_chunked_ones_their_chunk_size() -> None:
    """``("clm", "dense")`` holds the (N, V) logits, ``("clm", "chunked")`` one chunk of the
    given size (mutants send one to the other, or drop ``chunk_size`` for the default 1,024)."""
    cfg = BenchConfig.tiny(mlm_probability=1.0)
    logits = cfg.head_rows * cfg.vocab_size * 4  # bytes of (N, V) float32
    assert _peak("clm", "dense", 16, cfg) >= logits > 2 * _peak("clm", "chunked", 16, cfg)
    for kind, variant in (("clm", "chunked"), ("mlm", "sparse")):
        small, large = _peak(kind, variant, 16, cfg), _peak(kind, variant, cfg.head_rows, cfg)
        assert large - small >= (cfg.head_rows - 16) * cfg.vocab_size * 4 // 2, (kind, small, large)


def test_forward_backward_returns_the_seconds_it_took(monkeypatch) -> None:
    """The seconds are the clock's end minus its start (a mutant adds the start time); a fake
    clock reads 100 s, then 102.5 s."""
    ticks = iter([100.0, 102.5])
    monkeypatch.setattr(memory, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    w = torch.ones(3, requires_grad=True)  # (3,)
    seconds, loss = forward_backward(lambda: (2 * w).sum(), [w])
    assert seconds == 2.5
    assert float(loss) == 6.0 and torch.equal(w.grad, torch.full((3,), 2.0))


def test_tensor_peak_counts_the_gradients_it_returns() -> None:
    """A dot product creates 4 bytes forward; its two (N,) gradients must count too (a mutant
    skips the backward pass)."""
    h, v = torch.ones(1000, requires_grad=True), torch.ones(1000, requires_grad=True)  # (N,)
    assert tensor_peak_bytes(lambda: h.dot(v), [h, v]) >= 2 * 1000 * 4


def test_a_tensor_peak_that_saw_nothing_reads_zero() -> None:
    """Both counts start at 0 (mutants start them at 1 or None)."""
    with TensorPeak() as peak:
        pass
    assert (peak.current_bytes, peak.peak_bytes) == (0, 0)


_PROC = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux /proc")


@_PROC
def test_proc_kib_reads_one_field_of_proc_self_status() -> None:
    """``_proc_kib`` reads the number after ``KEY:`` (``Pid`` is this process's id), else
    raises ``KeyError(KEY)``."""
    assert memory._proc_kib("Pid") == os.getpid()
    raises_exactly(KeyError, "'NoSuchField'", lambda: memory._proc_kib("NoSuchField"))


def _fake_proc(monkeypatch: pytest.MonkeyPatch, rss_kib: int, hwm_kib: int) -> None:
    fields = {"VmRSS": rss_kib, "VmHWM": hwm_kib}
    monkeypatch.setattr(memory, "_proc_kib", lambda key: fields[key])


def _step() -> tuple[Any, list[torch.Tensor]]:
    w = torch.ones(2, requires_grad=True)  # (2,)
    return (lambda: (3 * w).sum()), [w]


@_PROC
def test_peak_bytes_is_the_high_water_mark_above_the_resident_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(VmHWM - VmRSS) KiB in bytes, after one forward + backward; never negative (mutants:
    other fields, 1,025 bytes a KiB, a floor of 1)."""
    fn, params = _step()
    _fake_proc(monkeypatch, 1000, 3000)
    assert memory._peak_bytes(fn, params) == (2000 * 1024, "VmHWM")
    assert torch.equal(params[0].grad, torch.full((2,), 3.0))
    _fake_proc(monkeypatch, 1000, 900)
    assert memory._peak_bytes(fn, params) == (0, "VmHWM")


@pytest.mark.parametrize(("platform", "unit"), [(sys.platform, 1024), ("darwin", 1)])
def test_peak_bytes_without_proc_reads_ru_maxrss(
    monkeypatch: pytest.MonkeyPatch, platform: str, unit: int
) -> None:
    """Where ``/proc/self/clear_refs`` is missing: the rise of ``ru_maxrss`` (KiB on Linux,
    bytes on macOS) of this process over one forward + backward, never negative."""
    if platform != "darwin" and sys.platform != "linux":
        pytest.skip("ru_maxrss is in KiB on Linux")
    exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: p != "/proc/self/clear_refs" and exists(p))
    calls: list[int] = []
    values = iter([1000, 3000, 3000, 2000])  # KiB or bytes: before and after, twice

    def getrusage(who: int) -> SimpleNamespace:
        calls.append(who)
        return SimpleNamespace(ru_maxrss=next(values))

    monkeypatch.setattr(resource, "getrusage", getrusage)
    fn, params = _step()
    monkeypatch.setattr(sys, "platform", platform)
    first, second = memory._peak_bytes(fn, params), memory._peak_bytes(fn, params)
    monkeypatch.undo()
    assert (first, second) == ((2000 * unit, "ru_maxrss"), (0, "ru_maxrss"))
    assert calls == [resource.RUSAGE_SELF] * 4


def _cases(cfg: BenchConfig) -> list[tuple[str, str, BenchConfig]]:
    return [("clm", "chunked", cfg), ("mlm", "sparse", cfg)]


def test_main_measures_each_case_and_prints_one_json_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The child reads the cases from its argument (``sys.argv[1]`` by default), measures each
    on its own seeded inputs and loss (chunk size included) and prints the results in order."""
    cfg = BenchConfig.tiny(seed=3)
    seen: list[tuple[Any, list[torch.Tensor]]] = []

    def peak_bytes(fn: Any, params: list[torch.Tensor]) -> tuple[int, str]:
        seen.append((fn, params))
        return 11 * len(seen), "VmHWM"

    monkeypatch.setattr(memory, "_peak_bytes", peak_bytes)
    payload = json.dumps([(k, v, asdict(c)) for k, v, c in _cases(cfg)])
    monkeypatch.setattr(sys, "argv", ["memory", payload])
    assert memory.main() == 0
    monkeypatch.setattr(sys, "argv", ["memory"])
    assert memory.main([payload]) == 0  # the argument given wins over sys.argv
    printed = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in printed] == [
        [
            {"above_inputs_bytes": 11, "method": "VmHWM"},
            {"above_inputs_bytes": 22, "method": "VmHWM"},
        ],
        [
            {"above_inputs_bytes": 33, "method": "VmHWM"},
            {"above_inputs_bytes": 44, "method": "VmHWM"},
        ],
    ]
    for (fn, params), (kind, variant, _) in zip(seen, _cases(cfg) * 2, strict=True):
        x = head_inputs(kind, cfg)
        assert torch.equal(fn(), head_loss(kind, variant, x, cfg.chunk_size)())
        assert [p.shape for p in params] == [p.shape for p in trainable(x)]


def _fake_child(
    monkeypatch: pytest.MonkeyPatch, stdout: str, returncode: int = 0, stderr: str = ""
) -> list[dict[str, Any]]:
    """Replace ``subprocess.run``; return the list its calls are recorded in."""
    calls: list[dict[str, Any]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(dict(kwargs, command=command))
        return subprocess.CompletedProcess(command, returncode, stdout=stdout, stderr=stderr)

    monkeypatch.setattr(subprocess, "run", run)
    return calls


def _answer(*results: tuple[int, str]) -> str:
    """What a child prints: a line of its own, then the results as one JSON line."""
    line = json.dumps([{"above_inputs_bytes": n, "method": m} for n, m in results])
    return f"a warning\nanother\n{line}\n"


def test_many_cases_go_to_one_child_as_json_and_come_back_in_mib(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One ``python -m lmlessons.course.memory CASES`` with this environment, glibc's mmap
    threshold at 64 KiB, no bytecode, this process's import path, text output captured and a
    time limit; its last stdout line, in MiB."""
    monkeypatch.setenv("LMLESSONS_PROBE", "kept")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    calls = _fake_child(monkeypatch, _answer((3 * MIB, "VmHWM"), (MIB // 2, "ru_maxrss")))
    cfg = BenchConfig.tiny()
    got = memory.measure_peak_memory_many(_cases(cfg))
    assert got == [(3.0, "VmHWM"), (0.5, "ru_maxrss")]
    (call,) = calls
    assert call["command"][:3] == [sys.executable, "-m", "lmlessons.course.memory"]
    assert json.loads(call["command"][3]) == [[k, v, asdict(c)] for k, v, c in _cases(cfg)]
    assert (call["capture_output"], call["text"]) == (True, True)
    assert call["timeout"] >= 60
    env = call["env"]
    assert (env["LMLESSONS_PROBE"], env["MALLOC_MMAP_THRESHOLD_"]) == ("kept", "65536")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    root = str(Path(lmlessons.__file__).resolve().parents[1])
    assert root in [str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep)]


def test_one_case_keeps_the_environment_and_returns_one_pair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``measure_peak_memory`` passes the environment as it is (no mmap threshold), with a time
    limit, and returns the one ``(MiB, method)`` pair."""
    monkeypatch.setenv("LMLESSONS_PROBE", "kept")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    calls = _fake_child(monkeypatch, _answer((2 * MIB, "VmHWM")))
    assert memory.measure_peak_memory("clm", "dense", BenchConfig.tiny()) == (2.0, "VmHWM")
    (call,) = calls
    assert call["env"]["LMLESSONS_PROBE"] == "kept" and "MALLOC_MMAP_THRESHOLD_" not in call["env"]
    assert call["timeout"] >= 60


def test_a_failed_child_raises_with_the_end_of_its_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit status 1 raises ``RuntimeError`` with the last 2,000 characters of stderr; a case
    whose config is not a ``BenchConfig`` is named before any child starts."""
    _fake_child(monkeypatch, "", returncode=1, stderr="a" * 500 + "b" * 2000)
    raises_exactly(
        RuntimeError,
        "memory subprocess failed:\n" + "b" * 2000,
        lambda: memory.measure_peak_memory("clm", "dense", BenchConfig.tiny()),
    )
    raises_exactly(
        TypeError,
        "each case's config must be a BenchConfig, got dict",
        lambda: memory.measure_peak_memory_many([("clm", "dense", {"head_rows": 8})]),  # type: ignore[list-item]
    )

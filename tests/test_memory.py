"""lmlessons.course.memory: the head variants agree, and the fresh-process peak memory matches the
memory model of lesson 07 (``lmlessons.widgets.scale.estimate_peak_bytes``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _exact import same_tensors

from lmlessons.course.memory import (
    MIB,
    VARIANTS,
    BenchConfig,
    TensorPeak,
    forward_backward,
    head_inputs,
    head_loss,
    measure_peak_memory,
    measure_peak_memory_many,
    tensor_peak_bytes,
    trainable,
)
from lmlessons.widgets.scale import estimate_peak_bytes

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.mark.parametrize("kind", sorted(VARIANTS))
def test_the_variants_give_the_same_loss_and_gradients(kind: str) -> None:
    cfg = BenchConfig.tiny()
    x = head_inputs(kind, cfg)
    dense, candidate = (head_loss(kind, v, x, cfg.chunk_size) for v in VARIANTS[kind])
    _, loss_d = forward_backward(dense, trainable(x))
    grads = [p.grad.clone() for p in trainable(x)]
    _, loss_c = forward_backward(candidate, trainable(x))
    torch.testing.assert_close(loss_c, loss_d, atol=1e-5, rtol=1e-5)
    for g, p in zip(grads, trainable(x)):
        torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=1e-4)


def test_inputs_are_seeded() -> None:
    a, b = head_inputs("mlm", BenchConfig.tiny()), head_inputs("mlm", BenchConfig.tiny())
    c = head_inputs("mlm", BenchConfig.tiny(seed=1))
    assert same_tensors(a, b)
    assert not torch.equal(a["labels"], c["labels"])


@pytest.mark.slow
def test_peak_memory_subprocess_sees_the_logits() -> None:
    """Fresh-process measurements: dense holds about three (N, V) tensors, chunked one chunk."""
    cfg = BenchConfig.tiny(
        head_rows=2048, head_seq_len=256, hidden_size=32, vocab_size=4096, chunk_size=64
    )
    dense, method = measure_peak_memory("clm", "dense", cfg)
    chunked, _ = measure_peak_memory("clm", "chunked", cfg)
    assert method in ("VmHWM", "ru_maxrss")
    want_dense = estimate_peak_bytes(2048, 32, 4096) / MIB  # 96 MiB of (N, V) tensors + gradients
    want_chunked = estimate_peak_bytes(2048, 32, 4096, chunk_size=64) / MIB  # 1 MiB + gradients
    assert abs(dense - want_dense) <= 0.1 * want_dense + 10, (dense, want_dense)
    assert chunked <= want_chunked + 10  # + first-use allocations of the libraries
    assert chunked < dense / 3


@pytest.mark.slow
def test_many_cases_in_one_process_from_another_folder(tmp_path, monkeypatch) -> None:
    """The child is ``python -m lmlessons.course.memory``: it runs from any working directory
    (lesson 07 runs in notebooks/), and nothing is written there."""
    monkeypatch.chdir(tmp_path)
    cfg = BenchConfig.tiny(head_rows=1024, head_seq_len=256, vocab_size=2048)
    out = measure_peak_memory_many([("clm", "dense", cfg), ("clm", "chunked", cfg)])
    assert [method for _, method in out] == [out[0][1]] * 2
    (dense, _), (chunked, _) = out
    assert dense > 3 * 1024 * 2048 * 4 / MIB * 0.9 > chunked  # about three (N, V) tensors
    assert list(tmp_path.iterdir()) == []


def test_bad_cases_are_refused_before_any_process_starts() -> None:
    with pytest.raises(ValueError, match="variant"):
        measure_peak_memory("clm", "sparse", BenchConfig.tiny())
    with pytest.raises(ValueError, match="variant"):
        measure_peak_memory_many([("nsp", "dense", BenchConfig.tiny())])
    with pytest.raises(TypeError, match="config must be a BenchConfig"):
        measure_peak_memory_many([("clm", "dense", {"head_rows": 8})])
    with pytest.raises(ValueError, match="kind must be 'mlm' or 'clm'"):
        head_inputs("nsp", BenchConfig.tiny())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(head_rows=100, head_seq_len=64), ValueError, "multiple of head_seq_len"),
        (dict(repeats=0), ValueError, "BenchConfig.repeats must be a positive int"),
        (dict(seed=-1), ValueError, "BenchConfig.seed"),
        (dict(hidden_size=True), TypeError, "BenchConfig.hidden_size must be an int"),
        (dict(mlm_probability=0.0), ValueError, r"mlm_probability must be in \(0, 1\]"),
    ],
)
def test_bad_config(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        BenchConfig.tiny(**kwargs)


# ------------------------------------------------------------------ TensorPeak, in this process


def _plain_chunked(h, w, y, chunk_size):
    total = h.new_zeros(())
    for s in range(0, h.shape[0], chunk_size):
        total = total + F.cross_entropy(
            h[s : s + chunk_size] @ w.T, y[s : s + chunk_size], reduction="sum"
        )
    return total / y.numel()


def _head(rows=256, hidden=8, vocab=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=g).requires_grad_()
    w = torch.randn(vocab, hidden, generator=g).requires_grad_()
    return h, w, torch.randint(vocab, (rows,), generator=g)


def test_tensor_peak_counts_a_tensor_until_it_is_freed() -> None:
    x = torch.zeros(10)
    with TensorPeak([x]) as peak:
        a = torch.empty(1000)  # 4,000 bytes
        view = a[:10]
        x.add_(1)  # an input changed in place does not count
        assert peak.current_bytes == 4000
        del a, view
        torch.ones(3)  # the next operation sees that the 1,000 floats are gone
        assert peak.current_bytes == 12
    assert peak.peak_bytes == 4000  # never both at once


def test_tensor_peak_sees_what_autograd_keeps_for_the_backward_pass() -> None:
    """Dense keeps about three (N, V) tensors; chunking alone keeps every chunk's softmax, N * V
    again; linear_cross_entropy keeps one chunk and the gradients. Exact, so equal twice."""
    from lmlessons import linear_cross_entropy

    h, w, y = _head()
    n_by_v = 256 * 512 * 4
    dense = tensor_peak_bytes(lambda: F.cross_entropy(h @ w.T, y), [h, w, y])
    plain = tensor_peak_bytes(lambda: _plain_chunked(h, w, y, 16), [h, w, y])
    fused = tensor_peak_bytes(lambda: linear_cross_entropy(h, w, y, chunk_size=16), [h, w, y])
    assert dense >= 2 * n_by_v and plain >= n_by_v
    assert fused < 0.15 * plain  # one (16, V) chunk and the gradients
    assert tensor_peak_bytes(lambda: _plain_chunked(h, w, y, 16), [h, w, y]) == plain
    assert h.grad is None and w.grad is None  # the gradients are taken, not accumulated

"""Peak memory of one forward + backward of a language-model head, measured in a fresh process.

Lesson 07 compares the dense head (``(B, T, V)`` logits, then the loss) with
:func:`lmlessons.linear_cross_entropy`, which never builds them, and checks the measurements
against its memory model. ``python -m tools.bench`` uses the same inputs for its timings.

The variants of one ``kind`` of head, on the same hidden states, head weight and labels:

* ``("mlm", "dense")``: ``F.linear`` then :func:`lmlessons.mlm_loss`, as ``BertForMaskedLM``;
* ``("mlm", "sparse")``: :func:`lmlessons.linear_cross_entropy` on the labelled rows only (BERT's
  ``run_pretraining.py`` gathers the masked rows first);
* ``("clm", "dense")``: ``F.linear`` then :func:`lmlessons.clm_loss`, as transformers'
  ``ForCausalLMLoss``;
* ``("clm", "chunked")``: :func:`lmlessons.linear_cross_entropy` in chunks of rows.

Memory is measured in a fresh ``python -m lmlessons.course.memory`` process (Linux): build the
inputs, warm the libraries up on a tiny problem, read the resident set size (``VmRSS``), reset the
high-water mark (write ``5`` to ``/proc/self/clear_refs``), run forward + backward once, read the
high-water mark (``VmHWM``). "Peak above inputs" = VmHWM - VmRSS: every byte the variant touched
on top of the inputs, including the gradients it returns. ``tracemalloc`` cannot see torch's
allocations, hence the resident set size. Where ``/proc`` is missing (macOS) the fallback is
``resource.getrusage`` ``ru_maxrss`` minus the RSS before the run, an upper-bound estimate
(method ``"ru_maxrss"``).

:class:`TensorPeak` measures differently, in this process and exactly: the bytes of the tensors
that torch operations create, from each one's creation until it is freed, at their peak over a
forward *and* backward pass. It sees every ATen operation (a ``TorchDispatchMode``, active in the
backward pass too) and follows each new storage with a weak reference, so a tensor that autograd
saves for the backward pass counts until the backward pass frees it. The count depends only on
the code and the sizes, never on the machine's allocator: lesson 07 prints it exactly, and the
``chunked_cross_entropy`` checker uses it to tell a chunked loss that keeps every chunk's softmax
for the backward pass from one that keeps nothing.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from lmlessons.linear_ce import DEFAULT_CHUNK_SIZE, linear_cross_entropy
from lmlessons.losses import clm_loss, mlm_loss
from lmlessons.masking import mask_tokens
from lmlessons.shifting import shift_labels

__all__ = [
    "MIB",
    "VARIANTS",
    "BenchConfig",
    "measure_peak_memory",
    "measure_peak_memory_many",
    "TensorPeak",
    "tensor_peak_bytes",
    "head_inputs",
    "head_loss",
    "trainable",
    "forward_backward",
    "warm_up",
]

MIB = 2**20
VARIANTS = {"mlm": ("dense", "sparse"), "clm": ("dense", "chunked")}


@dataclass
class BenchConfig:
    """Sizes of the head problems (and of ``tools.bench``'s masking benchmark and repeats).

    The defaults: 8,192 rows (16 sequences of 512 tokens), ``H = 256``, ``V = 32,000``, 15% of the
    MLM rows labelled; masking on 64 x 512 ids with BERT's vocabulary size.
    """

    mask_batch: int = 64
    mask_seq_len: int = 512
    mask_vocab_size: int = 30522  # bert-base-uncased's vocabulary size
    head_rows: int = 8192
    head_seq_len: int = 512  # CLM rows are (head_rows // head_seq_len) sequences of this length
    hidden_size: int = 256
    vocab_size: int = 32000
    mlm_probability: float = 0.15
    chunk_size: int = DEFAULT_CHUNK_SIZE
    repeats: int = 3  # timed runs per variant of the head benchmarks (medians)
    mask_repeats: int = (
        15  # timed samples per variant of the masking benchmark (mean of mask_calls)
    )
    mask_calls: int = 20
    memory: bool = True  # tools.bench: measure peak memory in subprocesses
    seed: int = 0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type not in ("int", int):
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"BenchConfig.{f.name} must be an int, got {type(value).__name__}")
            if value < (0 if f.name == "seed" else 1):
                raise ValueError(
                    f"BenchConfig.{f.name} must be a positive int (seed: >= 0), got {value!r}"
                )
        if self.head_rows % self.head_seq_len:
            raise ValueError(
                f"BenchConfig.head_rows ({self.head_rows}) must be a multiple of head_seq_len "
                f"({self.head_seq_len})"
            )
        if not 0 < self.mlm_probability <= 1:
            raise ValueError(
                f"BenchConfig.mlm_probability must be in (0, 1], got {self.mlm_probability}"
            )

    @classmethod
    def tiny(cls, **overrides: object) -> BenchConfig:
        """A few-second configuration for tests, warm-ups and smoke runs."""
        base: dict[str, object] = dict(
            mask_batch=8,
            mask_seq_len=64,
            mask_vocab_size=1000,
            head_rows=256,
            head_seq_len=64,
            hidden_size=32,
            vocab_size=512,
            chunk_size=64,
            repeats=2,
            mask_repeats=3,
            mask_calls=2,
        )
        base.update(overrides)
        return cls(**base)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# inputs and variants
# --------------------------------------------------------------------------------------------


def head_inputs(kind: str, cfg: BenchConfig) -> dict[str, torch.Tensor]:
    """Hidden states, head weight (and bias for MLM, like BERT's decoder) and labels, seeded."""
    g = torch.Generator().manual_seed(cfg.seed)
    shape = (cfg.head_rows // cfg.head_seq_len, cfg.head_seq_len)
    ids = torch.randint(cfg.vocab_size, shape, generator=g)  # (B, T)
    hidden = torch.randn(*shape, cfg.hidden_size, generator=g).requires_grad_()  # (B, T, H)
    weight = 0.02 * torch.randn(cfg.vocab_size, cfg.hidden_size, generator=g)  # (V, H)
    out = {"hidden": hidden, "weight": weight.requires_grad_()}
    if kind == "mlm":
        out["bias"] = torch.zeros(cfg.vocab_size).requires_grad_()  # (V,)
        _, out["labels"] = mask_tokens(  # mlm_probability of the positions are targets
            ids,
            mask_token_id=0,
            vocab_size=cfg.vocab_size,
            mlm_probability=cfg.mlm_probability,
            generator=g,
        )
    elif kind == "clm":
        out["labels"] = ids  # unshifted, as transformers' models take them
    else:
        raise ValueError(f"kind must be 'mlm' or 'clm', got {kind!r}")
    return out


def _check_variant(kind: object, variant: object) -> None:
    if kind not in VARIANTS or variant not in VARIANTS[kind]:
        raise ValueError(
            f"(kind, variant) must be one of {[(k, v) for k in VARIANTS for v in VARIANTS[k]]}, "
            f"got ({kind!r}, {variant!r})"
        )


def head_loss(
    kind: str, variant: str, x: dict[str, torch.Tensor], chunk_size: int
) -> Callable[[], torch.Tensor]:
    """A function computing the loss of ``variant`` on the inputs ``x`` (see the module doc)."""
    _check_variant(kind, variant)
    h, w, b, y = x["hidden"], x["weight"], x.get("bias"), x["labels"]
    if (kind, variant) == ("mlm", "dense"):
        return lambda: mlm_loss(F.linear(h, w, b), y)  # (B, T, V) logits
    if (kind, variant) == ("mlm", "sparse"):
        return lambda: linear_cross_entropy(h, w, y, bias=b, chunk_size=chunk_size)
    if (kind, variant) == ("clm", "dense"):
        return lambda: clm_loss(F.linear(h, w), y)  # (B, T, V) logits, shifts inside
    return lambda: linear_cross_entropy(h, w, shift_labels(y), chunk_size=chunk_size)


def trainable(x: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The inputs that get a gradient (hidden states, weight, bias)."""
    return [t for t in x.values() if t.requires_grad]


def forward_backward(
    fn: Callable[[], torch.Tensor], params: list[torch.Tensor]
) -> tuple[float, torch.Tensor]:
    """Clear the gradients, run ``fn().backward()``; return (seconds, detached loss)."""
    for p in params:
        p.grad = None
    start = time.perf_counter()
    loss = fn()
    loss.backward()
    return time.perf_counter() - start, loss.detach()


def warm_up(kind: str, variants: Sequence[str], seed: int = 0) -> None:
    """One forward + backward of each variant on the tiny problem (:meth:`BenchConfig.tiny`), so
    that torch, BLAS and the code paths are warm before a full-size run is timed or measured (a
    cold full-size one costs seconds)."""
    tiny = BenchConfig.tiny(seed=seed)
    xs = head_inputs(kind, tiny)
    for variant in variants:
        forward_backward(head_loss(kind, variant, xs, tiny.chunk_size), trainable(xs))


# --------------------------------------------------------------------------------------------
# the exact, in-process count: tensors created by torch operations, forward and backward
# --------------------------------------------------------------------------------------------


class WatchMode(TorchDispatchMode):
    """A dispatch mode that watches tensors in eager code: no torch._dynamo import.

    torch wraps a mode's ``__torch_dispatch__`` in ``torch._dynamo.disable`` unless
    ``_should_skip_dynamo`` is False, which imports torch._dynamo (seconds on the first use);
    no compiled code runs under these modes.
    """

    # Not mutated: torch's __init_subclass__ calls it while the class is being created, before
    # mutmut's trampoline has the table of mutants it looks the method up in (a KeyError).
    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # pragma: no mutate block
        return False


class TensorPeak(WatchMode):
    """Peak bytes of the tensors created while the mode is active, and the current bytes.

    A storage counts from the operation that creates it until it is freed (a view of it adds
    nothing). Storages of the tensors in ``existing`` (the inputs, already in memory) never count,
    even when an in-place operation returns them.
    """

    def __init__(self, existing: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self._existing = [StorageWeakRef(t.untyped_storage()) for t in existing]
        self._skip = {ref.cdata for ref in self._existing}
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current_bytes = 0
        self.peak_bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                storage = t.untyped_storage()
                ref = StorageWeakRef(storage)
                if ref.cdata not in self._skip and ref.cdata not in self._live:
                    self._live[ref.cdata] = (ref, storage.nbytes())
        self._live = {k: v for k, v in self._live.items() if not v[0].expired()}
        self.current_bytes = sum(n for _, n in self._live.values())
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        return out


def tensor_peak_bytes(fn: Callable[[], torch.Tensor], inputs: Sequence[torch.Tensor]) -> int:
    """Peak bytes of the tensors that ``fn()`` and its backward pass create (the gradients of
    ``inputs`` included), on top of ``inputs``. Exact and the same on every machine."""
    leaves = [t for t in inputs if t.requires_grad]
    with TensorPeak(inputs) as peak:
        loss = fn()
        grads = torch.autograd.grad(loss, leaves)
    del grads
    return peak.peak_bytes


# --------------------------------------------------------------------------------------------
# the measurement, inside the child process
# --------------------------------------------------------------------------------------------


def _proc_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _peak_bytes(fn: Callable[[], torch.Tensor], params: list[torch.Tensor]) -> tuple[int, str]:
    """Resident bytes added at the peak of one forward + backward, and how they were read."""
    if os.path.exists("/proc/self/clear_refs"):
        before = _proc_kib("VmRSS") * 1024
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak-RSS counter to the current RSS
        forward_backward(fn, params)
        return max(_proc_kib("VmHWM") * 1024 - before, 0), "VmHWM"
    import resource  # pragma: no cover - macOS and others: coarser

    scale = 1 if sys.platform == "darwin" else 1024
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    forward_backward(fn, params)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    return max(peak - before, 0), "ru_maxrss"


def _peak_above_inputs(kind: str, variant: str, cfg: BenchConfig) -> tuple[int, str]:
    """In this process: bytes of resident memory added at the peak of one forward + backward."""
    warm_up(kind, [variant], cfg.seed)
    x = head_inputs(kind, cfg)
    fn, params = head_loss(kind, variant, x, cfg.chunk_size), trainable(x)
    gc.collect()
    result = _peak_bytes(fn, params)
    del x, fn, params
    gc.collect()
    return result


def main(argv: list[str] | None = None) -> int:
    """The child process: measure each ``[kind, variant, config]`` case of the JSON argument in
    turn and print the results as one JSON line."""
    (cases_json,) = sys.argv[1:] if argv is None else argv
    out = []
    for kind, variant, cfg in json.loads(cases_json):
        nbytes, method = _peak_above_inputs(kind, variant, BenchConfig(**cfg))
        out.append({"above_inputs_bytes": nbytes, "method": method})
    print(json.dumps(out))
    return 0


# --------------------------------------------------------------------------------------------
# the public functions: start the child, read its answer
# --------------------------------------------------------------------------------------------


def _run_child(
    cases: list[tuple[str, str, BenchConfig]], env: dict[str, str], timeout: float
) -> list[tuple[float, str]]:
    for kind, variant, cfg in cases:
        if not isinstance(cfg, BenchConfig):
            raise TypeError(f"each case's config must be a BenchConfig, got {type(cfg).__name__}")
        _check_variant(kind, variant)
    payload = json.dumps([(kind, variant, asdict(cfg)) for kind, variant, cfg in cases])
    path = os.pathsep.join(p for p in sys.path if p)  # the child imports what this process does
    proc = subprocess.run(
        [sys.executable, "-m", "lmlessons.course.memory", payload],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=path),
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory subprocess failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return [(o["above_inputs_bytes"] / MIB, o["method"]) for o in out]


def measure_peak_memory_many(cases: list[tuple[str, str, BenchConfig]]) -> list[tuple[float, str]]:
    """Peak MiB above the inputs for several ``(kind, variant, config)`` cases in ONE subprocess.

    Faster than one process per case (torch is imported once). To keep one case's freed memory
    from being reused by the next without showing up in the resident set, glibc is told to
    map every allocation of 64 KiB or more on its own pages and to return them when freed
    (``MALLOC_MMAP_THRESHOLD_=65536``). Returns ``(MiB, method)`` per case.
    """
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    return _run_child(list(cases), env, timeout=900)


def measure_peak_memory(kind: str, variant: str, cfg: BenchConfig) -> tuple[float, str]:
    """Peak MiB above the inputs of one forward + backward, measured in a fresh subprocess."""
    return _run_child([(kind, variant, cfg)], dict(os.environ), timeout=600)[0]


if __name__ == "__main__":
    raise SystemExit(main())

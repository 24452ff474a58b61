"""Benchmarks of issue 8, side by side in one run: ``python -m tools.bench``.

1. Masking: :func:`lmlessons.mask_tokens` (one uniform draw per token) against transformers'
   ``DataCollatorForLanguageModeling.torch_mask_tokens`` (three Bernoulli draws) on 64 x 512 ids.
2. MLM head + loss, 15% of 8,192 rows labelled, H=256, V=32,000, forward + backward: the dense
   head (``F.linear`` then :func:`lmlessons.mlm_loss`, as ``BertForMaskedLM`` does) against the
   sparse head :func:`lmlessons.linear_cross_entropy` (BERT ``run_pretraining.py`` gathers the
   masked rows first).
3. CLM head + loss, 8,192 rows (16 x 512), same H and V: dense (:func:`lmlessons.clm_loss`, as
   transformers' ``ForCausalLMLoss``) against chunked :func:`lmlessons.linear_cross_entropy`.

Times are medians over repeats, with the two variants interleaved (A, B, A, B, ...) so that load
from other processes hits both alike; on a shared machine only the *ratios* mean much.

Peak memory is measured in a fresh ``python`` subprocess per variant (Linux): build the inputs,
warm the libraries up on a tiny problem, read the resident set size (``VmRSS``), reset the
high-water mark (write ``5`` to ``/proc/self/clear_refs``), run forward + backward once, read the
high-water mark (``VmHWM``). "Peak above inputs" = VmHWM - VmRSS: every byte the variant touched on
top of the inputs, including the gradients it returns (the same for both variants). ``tracemalloc``
cannot see torch's allocations, hence the resident set size. Where ``/proc`` is missing (macOS)
the fallback is ``resource.getrusage`` ``ru_maxrss`` minus the RSS before the run, an upper-bound
estimate (marked ``"method": "ru_maxrss"`` in the JSON).

Nothing is written unless you pass ``--json PATH`` or ``--plot PATH``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from lmlessons.linear_ce import DEFAULT_CHUNK_SIZE, linear_cross_entropy
from lmlessons.losses import clm_loss, mlm_loss
from lmlessons.masking import mask_tokens
from lmlessons.shifting import shift_labels

__all__ = [
    "BenchConfig",
    "BenchRow",
    "BenchResult",
    "run_benchmarks",
    "format_table",
    "plot_results",
    "main",
    "measure_peak_memory",
    "measure_peak_memory_many",
]

MIB = 2**20


@dataclass
class BenchConfig:
    """Sizes of the three benchmarks (defaults: the sizes of issue 8)."""

    mask_batch: int = 64
    mask_seq_len: int = 512
    mask_vocab_size: int = 30522  # bert-base-uncased's vocabulary size
    head_rows: int = 8192
    head_seq_len: int = 512  # CLM rows are (head_rows // head_seq_len) sequences of this length
    hidden_size: int = 256
    vocab_size: int = 32000
    mlm_probability: float = 0.15
    chunk_size: int = DEFAULT_CHUNK_SIZE
    repeats: int = 3  # timed runs per variant of benchmarks 2 and 3 (medians)
    mask_repeats: int = 15  # timed samples per variant of benchmark 1 (each the mean of mask_calls)
    mask_calls: int = 20
    memory: bool = True  # measure peak memory in subprocesses
    seed: int = 0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("int", int) and (
                isinstance(v, bool) or not isinstance(v, int) or v < (f.name != "seed")
            ):
                raise ValueError(
                    f"BenchConfig.{f.name} must be a positive int (seed: >= 0), got {v!r}"
                )
        if self.head_rows % self.head_seq_len:
            raise ValueError(
                f"BenchConfig.head_rows ({self.head_rows}) must be a multiple of head_seq_len ({self.head_seq_len})"
            )
        if not 0 < self.mlm_probability <= 1:
            raise ValueError(
                f"BenchConfig.mlm_probability must be in (0, 1], got {self.mlm_probability}"
            )

    @classmethod
    def tiny(cls, **overrides: object) -> BenchConfig:
        """A few-second configuration for tests and smoke runs (`--quick`)."""
        base = dict(
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


@dataclass
class BenchRow:
    """One benchmark: a baseline against a candidate. ``speedup`` = baseline time / candidate time."""

    name: str
    baseline: str
    candidate: str
    baseline_s: float  # median seconds per call
    candidate_s: float
    speedup: float
    speedup_target: float
    baseline_times: list[float] = field(default_factory=list)
    candidate_times: list[float] = field(default_factory=list)
    baseline_peak_mib: float | None = None  # peak memory above the inputs
    candidate_peak_mib: float | None = None
    memory_fraction: float | None = None  # candidate / baseline
    memory_target: float | None = None  # maximal memory_fraction allowed
    max_abs_diff: float | None = (
        None  # largest |difference| of loss and gradients, candidate vs baseline
    )
    memory_method: str | None = None

    @property
    def met(self) -> bool:
        ok = self.speedup >= self.speedup_target
        if self.memory_target is not None:
            ok = (
                ok
                and self.memory_fraction is not None
                and self.memory_fraction <= self.memory_target
            )
        return ok


@dataclass
class BenchResult:
    config: BenchConfig
    rows: list[BenchRow]
    environment: dict[str, object]
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return {
            "config": asdict(self.config),
            "rows": [dict(asdict(r), met=r.met) for r in self.rows],
            "environment": self.environment,
            "seconds": self.seconds,
        }


# --------------------------------------------------------------------------------------------
# inputs and variants
# --------------------------------------------------------------------------------------------


def _head_inputs(kind: str, cfg: BenchConfig) -> dict[str, torch.Tensor]:
    """Hidden states, head weight (and bias for MLM, like BERT's decoder) and labels."""
    g = torch.Generator().manual_seed(cfg.seed)
    batch = cfg.head_rows // cfg.head_seq_len
    shape = (batch, cfg.head_seq_len)
    ids = torch.randint(cfg.vocab_size, shape, generator=g)  # (B, T)
    hidden = torch.randn(*shape, cfg.hidden_size, generator=g).requires_grad_()  # (B, T, H)
    weight = (
        0.02 * torch.randn(cfg.vocab_size, cfg.hidden_size, generator=g)
    ).requires_grad_()  # (V, H)
    out = {"hidden": hidden, "weight": weight}
    if kind == "mlm":
        out["bias"] = torch.zeros(cfg.vocab_size).requires_grad_()  # (V,)
        _, out["labels"] = mask_tokens(  # 15% of the positions keep their id, the rest -100
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


VARIANTS = {"mlm": ("dense", "sparse"), "clm": ("dense", "chunked")}


def _check_variant(kind: object, variant: object) -> None:
    if kind not in VARIANTS or variant not in VARIANTS[kind]:  # type: ignore[index]
        raise ValueError(
            f"(kind, variant) must be one of {[(k, v) for k in VARIANTS for v in VARIANTS[k]]}, "
            f"got ({kind!r}, {variant!r})"
        )


def _head_variant(
    kind: str, variant: str, x: dict[str, torch.Tensor], chunk_size: int
) -> Callable[[], torch.Tensor]:
    h, w, b, y = x["hidden"], x["weight"], x.get("bias"), x["labels"]
    if (kind, variant) == ("mlm", "dense"):
        return lambda: mlm_loss(F.linear(h, w, b), y)  # (B, T, V) logits
    if (kind, variant) == ("mlm", "sparse"):
        return lambda: linear_cross_entropy(h, w, y, bias=b, chunk_size=chunk_size)
    if (kind, variant) == ("clm", "dense"):
        return lambda: clm_loss(F.linear(h, w), y)  # (B, T, V) logits, shifts inside
    if (kind, variant) == ("clm", "chunked"):
        return lambda: linear_cross_entropy(h, w, shift_labels(y), chunk_size=chunk_size)
    raise ValueError(f"unknown variant {kind}/{variant}")


def _params(x: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    return [t for t in x.values() if t.requires_grad]


def _fwd_bwd(
    fn: Callable[[], torch.Tensor], params: list[torch.Tensor]
) -> tuple[float, torch.Tensor]:
    for p in params:
        p.grad = None
    start = time.perf_counter()
    loss = fn()
    loss.backward()
    return time.perf_counter() - start, loss.detach()


# --------------------------------------------------------------------------------------------
# peak memory in a subprocess
# --------------------------------------------------------------------------------------------


def _proc_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _peak_above_inputs(kind: str, variant: str, cfg: BenchConfig) -> tuple[int, str]:
    """In this process: bytes of resident memory added at the peak of one forward + backward."""
    tiny = BenchConfig.tiny(seed=cfg.seed)
    xs = _head_inputs(kind, tiny)  # warm up torch, BLAS and the code path on a tiny problem
    _fwd_bwd(_head_variant(kind, variant, xs, tiny.chunk_size), _params(xs))
    del xs
    x = _head_inputs(kind, cfg)
    fn, params = _head_variant(kind, variant, x, cfg.chunk_size), _params(x)
    gc.collect()
    if os.path.exists("/proc/self/clear_refs"):
        method = "VmHWM"
        before = _proc_kib("VmRSS") * 1024
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak-RSS counter to the current RSS
        _fwd_bwd(fn, params)
        peak = _proc_kib("VmHWM") * 1024
    else:  # pragma: no cover - macOS and others: coarser
        import resource

        method = "ru_maxrss"
        scale = 1 if sys.platform == "darwin" else 1024
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
        _fwd_bwd(fn, params)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    del x, fn, params
    gc.collect()
    return max(peak - before, 0), method


def _memory_child(cases_json: str) -> None:
    """Entry point of the subprocess: measure each case in turn, print the results as JSON."""
    out = []
    for kind, variant, cfg in json.loads(cases_json):
        nbytes, method = _peak_above_inputs(kind, variant, BenchConfig(**cfg))
        out.append({"above_inputs_bytes": nbytes, "method": method})
    print(json.dumps(out))


def measure_peak_memory_many(cases: list[tuple[str, str, BenchConfig]]) -> list[tuple[float, str]]:
    """Peak MiB above the inputs for several ``(kind, variant, config)`` cases in ONE subprocess.

    Faster than one process per case (torch is imported once). To keep one case's freed memory
    from being reused by the next without showing up in the resident set, glibc is told to
    map every allocation of 64 KiB or more on its own pages and to return them when freed
    (``MALLOC_MMAP_THRESHOLD_=65536``). tests/test_widgets_scale.py checks these measurements,
    and tests/test_bench.py the fresh-process ones, against the same memory model
    (:func:`lmlessons.widgets.scale.estimate_peak_bytes`).
    """
    for kind, variant, cfg in cases:
        if not isinstance(cfg, BenchConfig):
            raise TypeError(f"each case's config must be a BenchConfig, got {type(cfg).__name__}")
        _check_variant(kind, variant)
    code = "import sys; from tools.bench import _memory_child; _memory_child(sys.argv[1])"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MALLOC_MMAP_THRESHOLD_="65536")
    payload = json.dumps([(kind, variant, asdict(cfg)) for kind, variant, cfg in cases])
    proc = subprocess.run(
        [sys.executable, "-c", code, payload], capture_output=True, text=True, env=env, timeout=900
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory subprocess failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return [(o["above_inputs_bytes"] / MIB, o["method"]) for o in out]


def measure_peak_memory(kind: str, variant: str, cfg: BenchConfig) -> tuple[float, str]:
    """Peak MiB above the inputs of one forward + backward, measured in a fresh subprocess."""
    code = "import sys; from tools.bench import _memory_child; _memory_child(sys.argv[1])"
    _check_variant(kind, variant)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps([(kind, variant, asdict(cfg))])],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory subprocess {kind}/{variant} failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])[0]
    return out["above_inputs_bytes"] / MIB, out["method"]


# --------------------------------------------------------------------------------------------
# the three benchmarks
# --------------------------------------------------------------------------------------------


def _mask_tokenizer(vocab_size: int):
    """A word-level tokenizer with BERT's special tokens, built in memory (nothing downloaded)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {
        t: i for i, t in enumerate(specials + [f"w{i}" for i in range(vocab_size - len(specials))])
    }
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def bench_masking(cfg: BenchConfig) -> BenchRow:
    from transformers import DataCollatorForLanguageModeling

    tok = _mask_tokenizer(cfg.mask_vocab_size)
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=cfg.mlm_probability)
    collator.generator = torch.Generator().manual_seed(
        cfg.seed
    )  # both sides use a seeded generator
    g = torch.Generator().manual_seed(cfg.seed + 1)
    ids = torch.randint(len(tok), (cfg.mask_batch, cfg.mask_seq_len), generator=g)  # (B, T)
    ids[:, 0], ids[:, -1] = tok.cls_token_id, tok.sep_token_id
    ids[: cfg.mask_batch // 4, -cfg.mask_seq_len // 8 :] = (
        tok.pad_token_id
    )  # a quarter of rows padded
    special = torch.isin(ids, torch.tensor(tok.all_special_ids))  # (B, T) bool
    work = ids.clone()  # the collator edits its input in place (we let it, in its favour: no copy)

    def ours() -> None:
        mask_tokens(
            ids,
            mask_token_id=tok.mask_token_id,
            vocab_size=len(tok),
            special_tokens_mask=special,
            mlm_probability=cfg.mlm_probability,
            generator=g,
        )

    def theirs() -> None:
        collator.torch_mask_tokens(work, special_tokens_mask=special)

    def sample(fn: Callable[[], None]) -> float:
        start = time.perf_counter()
        for _ in range(cfg.mask_calls):
            fn()
        return (time.perf_counter() - start) / cfg.mask_calls

    sample(ours), sample(theirs)  # warm-up
    t_ours, t_theirs = [], []
    for _ in range(cfg.mask_repeats):
        t_theirs.append(sample(theirs))
        t_ours.append(sample(ours))
    base, cand = statistics.median(t_theirs), statistics.median(t_ours)
    return BenchRow(
        name=f"1 masking {cfg.mask_batch}x{cfg.mask_seq_len}",
        baseline="collator.torch_mask_tokens",
        candidate="mask_tokens",
        baseline_s=base,
        candidate_s=cand,
        speedup=base / cand,
        speedup_target=1.3,
        baseline_times=t_theirs,
        candidate_times=t_ours,
    )


def bench_head(kind: str, cfg: BenchConfig) -> BenchRow:
    candidate = "sparse" if kind == "mlm" else "chunked"
    x = _head_inputs(kind, cfg)
    params = _params(x)
    dense_fn = _head_variant(kind, "dense", x, cfg.chunk_size)
    cand_fn = _head_variant(kind, candidate, x, cfg.chunk_size)

    tiny = BenchConfig.tiny(
        seed=cfg.seed
    )  # warm-up on a tiny problem (a full-size dense warm-up costs seconds)
    xt = _head_inputs(kind, tiny)
    for v in ("dense", candidate):
        _fwd_bwd(_head_variant(kind, v, xt, tiny.chunk_size), _params(xt))

    t_dense, t_cand, diff = [], [], 0.0
    for r in range(cfg.repeats):
        t, loss_d = _fwd_bwd(dense_fn, params)
        t_dense.append(t)
        grads_d = [p.grad for p in params] if r == 0 else None
        t, loss_c = _fwd_bwd(cand_fn, params)
        t_cand.append(t)
        if grads_d is not None:  # check once that the two agree (value and gradients)
            diff = max(
                [float((loss_d - loss_c).abs())]
                + [float((a - p.grad).abs().max()) for a, p in zip(grads_d, params)]
            )
            del grads_d
    base, cand = statistics.median(t_dense), statistics.median(t_cand)
    labelled = int((x["labels"] != -100).sum())
    if kind == "mlm":
        name = f"2 MLM head {labelled}/{cfg.head_rows} rows labelled"
    else:
        name = f"3 CLM head {cfg.head_rows} rows"
    row = BenchRow(
        name=f"{name}, H={cfg.hidden_size} V={cfg.vocab_size}",
        baseline="dense logits + " + ("mlm_loss" if kind == "mlm" else "clm_loss"),
        candidate=f"linear_cross_entropy ({candidate})",
        baseline_s=base,
        candidate_s=cand,
        speedup=base / cand,
        speedup_target=6.0 if kind == "mlm" else 1.0,
        baseline_times=t_dense,
        candidate_times=t_cand,
        max_abs_diff=diff,
        memory_target=None if kind == "mlm" else 0.2,
    )
    del x, params, dense_fn, cand_fn
    gc.collect()
    if cfg.memory:
        row.baseline_peak_mib, row.memory_method = measure_peak_memory(kind, "dense", cfg)
        row.candidate_peak_mib, _ = measure_peak_memory(kind, candidate, cfg)
        row.memory_fraction = row.candidate_peak_mib / max(row.baseline_peak_mib, 1e-9)
    return row


def run_benchmarks(
    config: BenchConfig | None = None, *, log: Callable[[str], None] | None = None
) -> BenchResult:
    """Run the three benchmarks and return their rows (nothing is printed unless ``log`` is given)."""
    cfg = config if config is not None else BenchConfig()
    if not isinstance(cfg, BenchConfig):
        raise TypeError(f"config must be a BenchConfig or None, got {type(cfg).__name__}")
    say = log or (lambda s: None)
    start = time.perf_counter()
    rows = []
    say("[1/3] masking ...")
    rows.append(bench_masking(cfg))
    say("[2/3] MLM head, dense vs sparse ...")
    rows.append(bench_head("mlm", cfg))
    say("[3/3] CLM head, dense vs chunked ...")
    rows.append(bench_head("clm", cfg))
    env = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    return BenchResult(config=cfg, rows=rows, environment=env, seconds=time.perf_counter() - start)


# --------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------


def _fmt_time(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def format_table(result: BenchResult) -> str:
    """A plain-text table: median times, speed-up, peak memory above inputs, target."""
    header = [
        "benchmark",
        "baseline",
        "candidate",
        "t base",
        "t cand",
        "speed-up",
        "peak MiB base",
        "peak MiB cand",
        "mem",
        "target",
        "met",
    ]
    lines = []
    for r in result.rows:
        target = f">= {r.speedup_target:g}x"
        if r.memory_target is not None:
            target += f", mem <= {r.memory_target:.0%}"
        lines.append(
            [
                r.name,
                r.baseline,
                r.candidate,
                _fmt_time(r.baseline_s),
                _fmt_time(r.candidate_s),
                f"{r.speedup:.2f}x",
                "-" if r.baseline_peak_mib is None else f"{r.baseline_peak_mib:.0f}",
                "-" if r.candidate_peak_mib is None else f"{r.candidate_peak_mib:.0f}",
                "-" if r.memory_fraction is None else f"{r.memory_fraction:.1%}",
                target,
                "yes" if r.met else "NO",
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(header)]
    fmt = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    out = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(row) for row in lines]
    env = result.environment
    out.append("")
    out.append(
        f"medians of {result.config.repeats} (heads) / {result.config.mask_repeats} (masking) interleaved runs; "
        f"torch {env['torch']}, {env['threads']} threads, {env['cpus']} CPUs; total {result.seconds:.0f} s"
    )
    out.append(
        "peak MiB = resident memory above the inputs during one forward+backward, fresh subprocess per variant"
    )
    return "\n".join(out)


def plot_results(result: BenchResult, path: str | os.PathLike[str] | None = None):
    """Two panels: speed-ups against their targets; peak memory of dense against candidate."""
    if path is None:  # interactive: a pyplot figure shown by the notebook
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(9, 3.2), dpi=80)
    else:  # file only: no pyplot, so no GUI backend and no global state touched
        from matplotlib.figure import Figure

        fig = Figure(figsize=(9, 3.2), dpi=80)
    ax1, ax2 = fig.subplots(1, 2)
    labels = ["1 masking", "2 MLM sparse", "3 CLM chunked"][: len(result.rows)]
    speed = [r.speedup for r in result.rows]
    ax1.bar(labels, speed, color=["#4c72b0", "#55a868", "#c44e52"][: len(speed)])
    for i, r in enumerate(result.rows):
        ax1.hlines(r.speedup_target, i - 0.4, i + 0.4, colors="k", linestyles="--")
        ax1.text(i, r.speedup, f"{r.speedup:.1f}x", ha="center", va="bottom")
    ax1.set_ylim(0, max(speed + [r.speedup_target for r in result.rows]) * 1.2)
    ax1.set_ylabel("speed-up over baseline")
    ax1.set_title("time (dashed: target)")
    mem_rows = [(lab, r) for lab, r in zip(labels, result.rows) if r.baseline_peak_mib is not None]
    if mem_rows:
        xs = range(len(mem_rows))
        ax2.bar(
            [i - 0.2 for i in xs],
            [r.baseline_peak_mib for _, r in mem_rows],
            width=0.4,
            label="dense",
        )
        ax2.bar(
            [i + 0.2 for i in xs],
            [r.candidate_peak_mib for _, r in mem_rows],
            width=0.4,
            label="linear_cross_entropy",
        )
        for i, (_, r) in zip(xs, mem_rows):
            ax2.text(
                i - 0.2,
                r.baseline_peak_mib,
                f"{r.baseline_peak_mib:.0f}",
                ha="center",
                va="bottom",
                fontsize=8,
            )
            ax2.text(
                i + 0.2,
                r.candidate_peak_mib,
                f"{r.candidate_peak_mib:.0f}",
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax2.set_xticks(list(xs), [lab for lab, _ in mem_rows])
        ax2.set_ylim(0, max(r.baseline_peak_mib for _, r in mem_rows) * 1.3)
        ax2.set_ylabel("peak MiB above inputs")
        ax2.legend(fontsize=8, loc="upper center", ncol=2)
    ax2.set_title("memory (one forward + backward)")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path)
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"timed runs per head variant ({BenchConfig.repeats})",
    )
    parser.add_argument(
        "--chunk-size", type=int, default=None, help=f"rows per chunk ({DEFAULT_CHUNK_SIZE})"
    )
    parser.add_argument(
        "--no-memory", action="store_true", help="skip the peak-memory subprocesses"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes (seconds; for smoke tests)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--plot", metavar="PATH", help="also save a plot (e.g. docs/bench.png)")
    args = parser.parse_args(argv)
    over: dict[str, object] = {"memory": not args.no_memory}
    if args.repeats is not None:
        over["repeats"] = args.repeats
    if args.chunk_size is not None:
        over["chunk_size"] = args.chunk_size
    cfg = BenchConfig.tiny(**over) if args.quick else BenchConfig(**over)
    result = run_benchmarks(cfg, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_dict(), f, indent=2)
    if args.plot:
        plot_results(result, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Four benchmarks (five rows), side by side in one run: ``python -m tools.bench`` (``make bench``).

1. Masking: :func:`lmlessons.mask_tokens` (one uniform draw per token) against transformers'
   ``DataCollatorForLanguageModeling.torch_mask_tokens`` (three Bernoulli draws) on 64 x 512 ids.
2. MLM head + loss, 15% of 8,192 rows labelled, H=256, V=32,000, forward + backward: the dense
   head (``F.linear`` then :func:`lmlessons.mlm_loss`, as ``BertForMaskedLM`` does) against the
   sparse head :func:`lmlessons.linear_cross_entropy` (BERT ``run_pretraining.py`` gathers the
   masked rows first).
3. CLM head + loss, 8,192 rows (16 x 512), same H and V: dense (:func:`lmlessons.clm_loss`, as
   transformers' ``ForCausalLMLoss``) against chunked :func:`lmlessons.linear_cross_entropy`.
4. and 5. Training throughput of the course GPT-2 on 96 course sentences (lesson 09): padded
   batches of 16 against ``group_texts`` blocks of 128 tokens (4) and against padding-free
   flattened rows (5), in real tokens per CPU second (:mod:`lmlessons.course.throughput`).

Times are medians over repeats, with the two variants interleaved (A, B, A, B, ...) so that load
from other processes hits both alike; on a shared machine only the *ratios* mean much.

Peak memory above the inputs is measured by :mod:`lmlessons.course.memory` (the module lesson 07
uses), in a fresh subprocess per variant; the JSON records the method (``VmHWM`` on Linux,
``ru_maxrss`` elsewhere).

Nothing is written unless you pass ``--json PATH`` or ``--plot PATH``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from lmlessons.course.memory import (
    BenchConfig,
    forward_backward,
    head_inputs,
    head_loss,
    measure_peak_memory,
    measure_peak_memory_many,
    trainable,
    warm_up,
)
from lmlessons.course.throughput import packing_throughput, sentence_documents
from lmlessons.linear_ce import DEFAULT_CHUNK_SIZE
from lmlessons.masking import mask_tokens
from lmlessons.shifting import num_targets

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


@dataclass
class BenchRow:
    """One benchmark: a baseline against a candidate; ``speedup`` = baseline / candidate time."""

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
    max_abs_diff: float | None = None  # largest |difference| of loss and gradients
    memory_method: str | None = None

    @property
    def met(self) -> bool:
        """The speed-up reaches its target and, if there is a memory target, so does memory."""
        if self.speedup < self.speedup_target:
            return False
        if self.memory_target is None:
            return True
        return self.memory_fraction is not None and self.memory_fraction <= self.memory_target


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
# the three benchmarks
# --------------------------------------------------------------------------------------------


def _mask_tokenizer(vocab_size: int) -> Any:
    """A word-level tokenizer with BERT's special tokens, built in memory (nothing downloaded)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = [f"w{i}" for i in range(vocab_size - len(specials))]
    vocab = {t: i for i, t in enumerate(specials + words)}
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
    collator.generator = torch.Generator().manual_seed(cfg.seed)  # both sides seeded
    g = torch.Generator().manual_seed(cfg.seed + 1)
    ids = torch.randint(len(tok), (cfg.mask_batch, cfg.mask_seq_len), generator=g)  # (B, T)
    ids[:, 0], ids[:, -1] = tok.cls_token_id, tok.sep_token_id
    ids[: cfg.mask_batch // 4, -cfg.mask_seq_len // 8 :] = tok.pad_token_id  # a quarter padded
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
    for _ in range(cfg.mask_repeats):  # interleaved, so that load from elsewhere hits both alike
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


def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients of ``params`` after a backward pass (every one must have received one)."""
    grads = [p.grad for p in params]
    missing = [i for i, g in enumerate(grads) if g is None]
    if missing:
        raise RuntimeError(f"parameters {missing} received no gradient")
    return [g for g in grads if g is not None]


def _time_heads(kind: str, candidate: str, cfg: BenchConfig) -> tuple[list, list, float, int]:
    """Interleaved timings of dense and ``candidate``; the largest difference of loss and
    gradients between them (checked on the first repeat); the number of labelled rows."""
    warm_up(kind, ("dense", candidate), cfg.seed)
    x = head_inputs(kind, cfg)
    params = trainable(x)
    dense_fn = head_loss(kind, "dense", x, cfg.chunk_size)
    cand_fn = head_loss(kind, candidate, x, cfg.chunk_size)
    t_dense, t_cand, diff = [], [], 0.0
    for r in range(cfg.repeats):
        t, loss_d = forward_backward(dense_fn, params)
        t_dense.append(t)
        grads_d = _grads(params)
        t, loss_c = forward_backward(cand_fn, params)
        t_cand.append(t)
        if r == 0:  # check once that the two agree (value and gradients)
            diffs = [float((a - b).abs().max()) for a, b in zip(grads_d, _grads(params))]
            diff = max([float((loss_d - loss_c).abs()), *diffs])
        del grads_d
    labelled = int(num_targets(x["labels"]).sum())
    return t_dense, t_cand, diff, labelled


def bench_head(kind: str, cfg: BenchConfig) -> BenchRow:
    candidate = "sparse" if kind == "mlm" else "chunked"
    t_dense, t_cand, diff, labelled = _time_heads(kind, candidate, cfg)
    gc.collect()
    base, cand = statistics.median(t_dense), statistics.median(t_cand)
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
    if cfg.memory:
        row.baseline_peak_mib, row.memory_method = measure_peak_memory(kind, "dense", cfg)
        row.candidate_peak_mib, _ = measure_peak_memory(kind, candidate, cfg)
        row.memory_fraction = row.candidate_peak_mib / max(row.baseline_peak_mib, 1e-9)
    return row


PACKING_BATCH = 16  # documents per padded or flattened batch, as in lesson 09
PACKING_TARGETS = {"grouped": 1.0, "flattened": 0.8}  # flattened: at most 20% slower on a CPU


def bench_packing(cfg: BenchConfig) -> list[BenchRow]:
    """Lesson 09's throughput: real tokens per CPU second of the course GPT-2 (forward +
    backward) on padded batches against ``group_texts`` blocks and flattened rows. Six batches of
    16 sentences at the default size, one at the tiny size."""
    from lmlessons.course.checkpoints import load_checkpoint
    from lmlessons.course.corpus import load_corpus
    from lmlessons.course.tokenizer import load_tokenizer

    tok, corpus = load_tokenizer(), load_corpus("course")
    sentences = [s for doc in corpus.train for s in doc]
    count = PACKING_BATCH * max(1, min(6, cfg.head_rows // 1024))
    docs = sentence_documents(
        sentences, tok, count=count, generator=torch.Generator().manual_seed(cfg.seed)
    )
    speed = packing_throughput(
        load_checkpoint("gpt2"),
        docs,
        batch_size=PACKING_BATCH,
        pad_token_id=tok.pad_token_id,
        repeats=cfg.repeats,
    )
    rows = []
    for number, (layout, target) in enumerate(PACKING_TARGETS.items(), start=4):
        rows.append(
            BenchRow(
                name=f"{number} GPT-2 training, {count} sentences, tokens/CPU s",
                baseline=f"padded batches of {PACKING_BATCH}",
                candidate="group_texts blocks of 128" if layout == "grouped" else "flattened rows",
                baseline_s=speed.seconds("padded"),
                candidate_s=speed.seconds(layout),
                speedup=speed.ratio(layout),
                speedup_target=target,
                baseline_times=list(speed.times["padded"]),
                candidate_times=list(speed.times[layout]),
            )
        )
    return rows


def run_benchmarks(
    config: BenchConfig | None = None, *, log: Callable[[str], None] | None = None
) -> BenchResult:
    """Run the benchmarks and return their rows (printed only through ``log``)."""
    cfg = config if config is not None else BenchConfig()
    if not isinstance(cfg, BenchConfig):
        raise TypeError(f"config must be a BenchConfig or None, got {type(cfg).__name__}")
    say = log or (lambda s: None)
    start = time.perf_counter()
    rows = []
    say("[1/4] masking ...")
    rows.append(bench_masking(cfg))
    say("[2/4] MLM head, dense vs sparse ...")
    rows.append(bench_head("mlm", cfg))
    say("[3/4] CLM head, dense vs chunked ...")
    rows.append(bench_head("clm", cfg))
    say("[4/4] GPT-2 training, padded vs group_texts vs flattened ...")
    rows.extend(bench_packing(cfg))
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


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


_HEADER = [
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


def _table_row(r: BenchRow) -> list[str]:
    target = f">= {r.speedup_target:g}x"
    if r.memory_target is not None:
        target += f", mem <= {r.memory_target:.0%}"
    return [
        r.name,
        r.baseline,
        r.candidate,
        _fmt_time(r.baseline_s),
        _fmt_time(r.candidate_s),
        f"{r.speedup:.2f}x",
        _fmt(r.baseline_peak_mib, ".0f"),
        _fmt(r.candidate_peak_mib, ".0f"),
        _fmt(r.memory_fraction, ".1%"),
        target,
        "yes" if r.met else "NO",
    ]


def format_table(result: BenchResult) -> str:
    """A plain-text table: median times, speed-up, peak memory above inputs, target."""
    lines = [_table_row(r) for r in result.rows]
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(_HEADER)]

    def fmt(row: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()

    out = [fmt(_HEADER), fmt(["-" * w for w in widths])] + [fmt(row) for row in lines]
    env, cfg = result.environment, result.config
    out += [
        "",
        f"medians of {cfg.repeats} (heads, packing) / {cfg.mask_repeats} (masking) interleaved "
        "runs; packing rows in CPU seconds of one pass; "
        f"torch {env['torch']}, {env['threads']} threads, {env['cpus']} CPUs; "
        f"total {result.seconds:.0f} s",
        "peak MiB = resident memory above the inputs during one forward+backward, "
        "fresh subprocess per variant",
    ]
    return "\n".join(out)


def _plot_speed(ax: Any, result: BenchResult, labels: list[str]) -> None:
    speed = [r.speedup for r in result.rows]
    ax.bar(
        labels, speed, color=["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974"][: len(speed)]
    )
    for i, r in enumerate(result.rows):
        ax.hlines(r.speedup_target, i - 0.4, i + 0.4, colors="k", linestyles="--")
        ax.text(i, r.speedup, f"{r.speedup:.1f}x", ha="center", va="bottom")
    ax.set_ylim(0, max(speed + [r.speedup_target for r in result.rows]) * 1.2)
    ax.set_ylabel("speed-up over baseline")
    ax.set_title("time (dashed: target)")


def _plot_memory(ax: Any, result: BenchResult, labels: list[str]) -> None:
    rows = [(lab, r) for lab, r in zip(labels, result.rows) if r.baseline_peak_mib is not None]
    ax.set_title("memory (one forward + backward)")
    if not rows:
        return
    xs = range(len(rows))
    for shift, attr, label in (
        (-0.2, "baseline_peak_mib", "dense"),
        (0.2, "candidate_peak_mib", "linear_cross_entropy"),
    ):
        values = [getattr(r, attr) for _, r in rows]
        ax.bar([i + shift for i in xs], values, width=0.4, label=label)
        for i, v in zip(xs, values):
            ax.text(i + shift, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), [lab for lab, _ in rows])
    ax.set_ylim(0, max(r.baseline_peak_mib or 0.0 for _, r in rows) * 1.3)
    ax.set_ylabel("peak MiB above inputs")
    ax.legend(fontsize=8, loc="upper center", ncol=2)


def plot_results(result: BenchResult, path: str | os.PathLike[str] | None = None) -> Any:
    """Two panels: speed-ups against their targets; peak memory of dense against candidate."""
    if path is None:  # interactive: a pyplot figure shown by the notebook
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(11, 3.2), dpi=80)
    else:  # file only: no pyplot, so no GUI backend and no global state touched
        from matplotlib.figure import Figure

        fig = Figure(figsize=(11, 3.2), dpi=80)
    ax1, ax2 = fig.subplots(1, 2)
    labels = ["1 masking", "2 MLM sparse", "3 CLM chunked", "4 grouped", "5 flattened"]
    labels = labels[: len(result.rows)]
    _plot_speed(ax1, result, labels)
    _plot_memory(ax2, result, labels)
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
    over: dict[str, Any] = {"memory": not args.no_memory}
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

"""Measure the course's speed budgets: ``python -m tools.budgets [--seconds 30]``.

Prints (and with ``--json`` writes) the numbers docs/measurements.md quotes:

* ``load_corpus("course")`` and ``load_tokenizer()`` wall time (target: < 1 s each), and for
  comparison the same two calls in a fresh ``python`` process, imports included (importing torch
  and transformers takes most of that);
* a live MLM run of ``seconds`` (default 30): ``tiny_bert_mlm`` on ``mlm_batches`` of 16 x 32
  tokens with 30% of the tokens masked (ModernBERT's rate; Wettig et al. 2022, "Should You Mask
  15% in Masked Language Modeling?") and ``lr=1e-3``; target: final loss >= 30% below
  ``ln(vocab)``. The same run at BERT's 15% is reported beside it, without a target: per second
  of CPU, 15% masking gives the model half as many targets to learn from;
* a live causal run (``BertLMHeadModel(is_decoder=True)`` on ``clm_batches``); target >= 40%;
* the leaky decoder, ``BertLMHeadModel(is_decoder=False)`` on the same batches: its loss
  collapses toward 0 (it can see the token it predicts), while the causal one does not.

"Final loss" is the mean training loss of the last 20 steps. Time budgets are not
deterministic: the step count depends on the machine and its load, which is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

import torch

_COLD = """
import time
t0 = time.perf_counter()
from lmlessons import load_corpus
load_corpus("course")
t1 = time.perf_counter()
from lmlessons import load_tokenizer
load_tokenizer()
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def _cold_load_times() -> dict[str, float]:
    """The two loads in a fresh interpreter, imports of lmlessons (torch) and transformers
    included."""
    out = subprocess.run(
        [sys.executable, "-c", _COLD], check=True, capture_output=True, text=True
    ).stdout
    corpus_s, tokenizer_s = (float(v) for v in out.split())
    return {
        "cold_import_and_load_corpus_s": corpus_s,
        "cold_import_and_load_tokenizer_s": tokenizer_s,
    }


def _load_times() -> dict[str, float]:
    from transformers import BertTokenizer  # noqa: F401  (import cost reported separately)

    from lmlessons.course import corpus as corpus_module
    from lmlessons.course import tokenizer as tokenizer_module

    corpus_module.clear_cache()
    start = time.perf_counter()
    corpus_module.load_corpus("course")
    corpus_s = time.perf_counter() - start
    tokenizer_module.clear_cache()
    start = time.perf_counter()
    tokenizer_module.load_tokenizer()
    tokenizer_s = time.perf_counter() - start
    return {
        "load_corpus_course_s": corpus_s,
        "load_tokenizer_s": tokenizer_s,
    }


# name -> (model factory keywords, batch keywords, train keywords, target drop below ln V)
RUNS: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any], float | None]] = {
    "mlm": ({}, {"max_length": 32, "mlm_probability": 0.3}, {"lr": 1e-3}, 0.30),
    "mlm-15%": ({}, {"max_length": 32, "mlm_probability": 0.15}, {"lr": 1e-3}, None),
    "causal": ({"is_decoder": True}, {}, {}, 0.40),
    "leaky": ({"is_decoder": False}, {}, {}, None),
}


def _run(kind: str, seconds: float, seed: int, live: bool) -> dict[str, Any]:
    from lmlessons.course.batches import clm_batches, mlm_batches
    from lmlessons.course.corpus import load_corpus
    from lmlessons.course.models import tiny_bert_lm_head, tiny_bert_mlm
    from lmlessons.course.tokenizer import load_tokenizer
    from lmlessons.course.training import train

    if kind not in RUNS:
        raise ValueError(f"kind must be one of {list(RUNS)}, got {kind!r}")
    model_kw, batch_kw, train_kw, _ = RUNS[kind]
    corpus, tok = load_corpus("course"), load_tokenizer()
    g = torch.Generator().manual_seed(seed)
    model: torch.nn.Module
    if kind.startswith("mlm"):
        model, batches = (
            tiny_bert_mlm(tok, seed=seed, **model_kw),
            mlm_batches(corpus, tok, generator=g, **batch_kw),
        )
    else:
        model = tiny_bert_lm_head(tok, seed=seed, **model_kw)
        batches = clm_batches(corpus, tok, generator=g, **batch_kw)
    history = train(model, batches, max_seconds=seconds, live=live, title=kind, **train_kw)
    final = history.final("loss", 20)
    return {
        "config": {"model": model_kw, "batches": batch_kw, "train": train_kw},
        "steps": history.num_steps,
        "seconds": round(history.wall_time[-1], 2),
        "first_loss": history.loss[0],
        "final_loss": final,
        "ln_vocab": history.uniform_loss,
        "drop_below_ln_vocab": 1.0 - final / history.uniform_loss,
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.budgets", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="length of each live run (default 30)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)"
    )
    parser.add_argument("--only-loads", action="store_true", help="skip the three training runs")
    parser.add_argument("--no-live", action="store_true", help="no progress bars")
    parser.add_argument(
        "--json", type=str, default=None, help="also write the results to this JSON file"
    )
    return parser.parse_args(argv)


def _machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _report_loads(loads: dict[str, float]) -> bool:
    """Print the load times; True if both warm loads are within their 1 s budget."""
    print(f"load_corpus('course'):      {loads['load_corpus_course_s']:.3f} s  (budget < 1 s)")
    print(f"load_tokenizer():           {loads['load_tokenizer_s']:.3f} s  (budget < 1 s)")
    print(
        "fresh process, import lmlessons (torch) + load_corpus('course'): "
        f"{loads['cold_import_and_load_corpus_s']:.2f} s"
    )
    print(
        "fresh process, import transformers + load_tokenizer():          "
        f"{loads['cold_import_and_load_tokenizer_s']:.2f} s"
    )
    return loads["load_corpus_course_s"] < 1 and loads["load_tokenizer_s"] < 1


def _report_run(kind: str, r: dict[str, Any], target: float | None) -> bool:
    """Print one training run; True if it has no target or reaches it."""
    line = (
        f"{kind:7s} {r['steps']:5d} steps in {r['seconds']:.1f} s: loss {r['first_loss']:.3f} -> "
        f"{r['final_loss']:.3f} (ln V = {r['ln_vocab']:.3f}, "
        f"{100 * r['drop_below_ln_vocab']:.1f}% below)"
    )
    passed = target is None or r["drop_below_ln_vocab"] >= target
    if target is not None:
        line += f"  target >= {100 * target:.0f}%: {'PASS' if passed else 'FAIL'}"
    print(line, flush=True)
    return passed


def _report_leaky(results: dict[str, Any]) -> bool:
    """The leaky decoder's loss collapses toward 0 while the causal one's does not."""
    leaky, causal = results["leaky"]["final_loss"], results["causal"]["final_loss"]
    collapsed = leaky < 0.1 * results["leaky"]["ln_vocab"] and causal > 4 * leaky
    print(
        f"leaky decoder collapses toward 0 ({leaky:.3f}) while the causal one does not "
        f"({causal:.3f}): {'PASS' if collapsed else 'FAIL'}"
    )
    return collapsed


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    results: dict[str, Any] = {"machine": _machine()}
    print(f"machine: {results['machine']}")
    results["loads"] = loads = _load_times()
    loads.update(_cold_load_times())
    ok = _report_loads(loads)
    if not args.only_loads:
        for kind, (*_, target) in RUNS.items():
            results[kind] = _run(kind, args.seconds, args.seed, live=not args.no_live)
            ok &= _report_run(kind, results[kind], target)
        ok &= _report_leaky(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Record lesson 10's fine-tuning runs over seeds: ``python -m tools.answer_only_seeds``.

Lesson 10 fine-tunes the course GPT-2 live, once per setting (seed 0): answers only, every token
(the prompts in the loss), answers only with ``pad = eos``. One run cannot say whether the
difference between the first two is larger than the spread between seeds, and on 254 held-out
questions one answer is 0.4 percentage points. This tool repeats the lesson's runs
(:func:`lmlessons.course.chat.fine_tune`, 100 steps of 16, learning rate 1e-3, the held-out
answer loss every 25 steps, then :func:`lmlessons.course.chat.answer_metrics`) for each seed;
the seed draws the batches and the dropout. The lesson replays the file
(:func:`lmlessons.course.chat.load_seed_runs`). The shipped file was made with::

    OMP_NUM_THREADS=1 python -m tools.answer_only_seeds --out lmlessons/data/answer_only

Without ``--out`` the file goes to the user cache folder, never into the repository.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from lmlessons.course._cache import user_cache_dir
from lmlessons.course.chat import (
    SEED_RUN_SETTINGS,
    SEED_RUNS_FILE,
    answer_metrics,
    chat_tokenizer,
    fine_tune,
    instruction_set,
)
from lmlessons.course.checkpoints import load_checkpoint


def record(seeds: list[int], *, max_steps: int = 100, eval_every: int = 25) -> dict[str, Any]:
    """``{"settings": {name: {"seeds": [...], "answer_loss": [...], ...}}, ...}``, one value per
    seed in each list, rounded to 4 decimals."""
    tokenizer = chat_tokenizer()
    train_set, heldout = instruction_set("train"), instruction_set("validation")
    runs: dict[str, dict[str, list[float]]] = {}
    for name, options in SEED_RUN_SETTINGS.items():
        row: dict[str, list[float]] = {}
        for seed in seeds:
            model = load_checkpoint("gpt2")
            history, _ = fine_tune(
                model,
                train_set,
                tokenizer,
                heldout=heldout,
                max_steps=max_steps,
                eval_every=eval_every,
                seed=seed,
                **options,
            )
            metrics = answer_metrics(model, heldout, tokenizer, max_new_tokens=6)
            values = {"reported_loss": history.final(window=10), **metrics}
            for key in ("reported_loss", "answer_loss", "greedy_answer_accuracy", "stop_rate"):
                row.setdefault(key, []).append(round(float(values[key]), 4))
            print(
                f"{name:24s} seed {seed}: " + ", ".join(f"{k} {v[-1]}" for k, v in row.items()),
                flush=True,
            )
        runs[name] = row
    return {"seeds": seeds, "max_steps": max_steps, "num_heldout": len(heldout), "settings": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    data = record(args.seeds)
    folder = args.out if args.out is not None else user_cache_dir() / "answer_only"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SEED_RUNS_FILE
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

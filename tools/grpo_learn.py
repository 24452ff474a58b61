"""Record lesson 12's GRPO run that learns, and the reward it games: ``python -m tools.grpo_learn``.

TRL's ``GRPOTrainer`` on the course GPT-2 (:func:`lmlessons.course.grpo_learn.learn_run`, the
settings of :data:`lmlessons.course.grpo_learn.LEARN_SETTINGS`: 8 prompts x 4 completions a
step, at most 16 new tokens, ``loss_type="dapo"``, ``beta = 0``, learning rate 1e-3, 40 steps),
for each experiment and seed:

* ``learns``: reward 1 when the completion contains the word "water", else 0;
* ``games``: reward = the number of times the completion says "water".

Each run keeps TRL's logged mean reward, loss, mean completion length and share of groups whose
rewards are all equal, step by step (4 decimals), and 32 completions of 8 held-out prompts
sampled before and after training. The shipped file was made with::

    OMP_NUM_THREADS=1 python -m tools.grpo_learn --out lmlessons/data/grpo_learn

Without ``--out`` the file goes to the user cache folder, never into the repository.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from lmlessons.course._cache import user_cache_dir
from lmlessons.course.grpo_learn import LEARN_REWARDS, LEARN_SETTINGS, learn_run, sample_stats
from lmlessons.course.rl import RUNS_FILE


def record(experiment: str, *, seeds: list[int], max_steps: int) -> list[dict[str, Any]]:
    """Every seed's run of ``experiment``, its per-step metrics rounded to 4 decimals."""
    runs = []
    for seed in seeds:
        start = time.time()
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = learn_run(tmp, experiment, seed=seed, max_steps=max_steps)
        for name, values in run.items():
            if isinstance(values, list) and values and isinstance(values[0], float):
                run[name] = [round(v, 4) for v in values]
        runs.append(run)
        reward, before, after = (
            run["reward"],
            sample_stats(run["before"]),
            sample_stats(run["after"]),
        )
        print(
            f"{experiment:7s} seed={seed} reward {reward[0]:.2f} -> {reward[-1]:.2f}, samples: "
            f"word count {before['word_count']:.2f} -> {after['word_count']:.2f} "
            f"({time.time() - start:.0f} s)",
            flush=True,
        )
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=LEARN_SETTINGS["max_steps"])
    parser.add_argument("--experiments", nargs="+", default=list(LEARN_REWARDS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out if args.out is not None else user_cache_dir() / "grpo_learn"
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    experiments = {
        name: {
            "reward": LEARN_REWARDS[name].__name__,
            "runs": record(name, seeds=args.seeds, max_steps=args.steps),
        }
        for name in args.experiments
    }
    data = {
        "settings": {**LEARN_SETTINGS, "max_steps": args.steps, "seeds": args.seeds},
        "seconds": round(time.time() - start),
        "experiments": experiments,
    }
    path = out / RUNS_FILE
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {path} ({data['seconds']} s)")


if __name__ == "__main__":
    main()

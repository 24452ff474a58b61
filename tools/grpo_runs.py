"""Record lesson 12's GRPO runs: ``python -m tools.grpo_runs``.

TRL's ``GRPOTrainer`` on the course GPT-2 (:func:`lmlessons.course.rl.grpo_run`: 8 prompts of the
instruction set x 4 completions a step, at most 16 new tokens, learning rate 1e-4, no vLLM), for
every experiment of :data:`lmlessons.course.rl.EXPERIMENTS` and every seed:

* ``shorter``: reward = minus the completion's length, each ``loss_type``, ``beta = 0``;
* ``longer``: reward = the completion's length, each ``loss_type``, ``beta = 0``;
* ``loss_start``: reward = minus the length; ``grpo`` with ``beta = 0.04`` (TRL's default before
  1.0), ``dapo`` with ``beta = 0.04`` and ``dapo`` with ``beta = 0`` (TRL 1.x's defaults).

Each run keeps TRL's logged loss, mean reward, mean completion length, clipped ratio and, with
``beta > 0``, the KL, step by step (4 decimals). The shipped file was made with::

    OMP_NUM_THREADS=1 python -m tools.grpo_runs --out lmlessons/data/grpo

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
from lmlessons.course.rl import EXPERIMENTS, REWARDS, RUN_DEFAULTS, RUNS_FILE, grpo_run


def record(
    experiment: str, *, seeds: list[int], max_steps: int, log: bool = True
) -> list[dict[str, Any]]:
    """Every run of ``experiment`` for every seed: its settings and TRL's metrics per step."""
    spec = EXPERIMENTS[experiment]
    runs = []
    for loss_type, beta in spec["runs"]:
        for seed in seeds:
            start = time.time()
            with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                metrics = grpo_run(
                    tmp,
                    loss_type=loss_type,
                    beta=beta,
                    seed=seed,
                    max_steps=max_steps,
                    reward_funcs=REWARDS[spec["reward"]],
                )
            rounded = {k: [round(v, 4) for v in values] for k, values in metrics.items()}
            runs.append({"loss_type": loss_type, "beta": beta, "seed": seed, **rounded})
            if log:
                length = rounded["mean_length"]
                print(
                    f"{experiment:10s} {loss_type:8s} beta={beta:<5} seed={seed} "
                    f"length {length[0]:.1f} -> {length[-1]:.1f} ({time.time() - start:.0f} s)",
                    flush=True,
                )
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out if args.out is not None else user_cache_dir() / "grpo"
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "settings": {**RUN_DEFAULTS, "max_steps": args.steps, "seeds": args.seeds},
        "experiments": {
            name: {
                "reward": EXPERIMENTS[name]["reward"],
                "runs": record(name, seeds=args.seeds, max_steps=args.steps),
            }
            for name in args.experiments
        },
    }
    path = out / RUNS_FILE
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

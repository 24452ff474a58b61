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
from functools import partial
from pathlib import Path

import torch

from lmlessons.course._cache import user_cache_dir
from lmlessons.course.grpo_learn import LEARN_REWARDS, LEARN_SETTINGS, record_learn_runs
from lmlessons.course.records import write_record
from lmlessons.course.rl import RUNS_FILE


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=LEARN_SETTINGS["max_steps"])
    parser.add_argument("--experiments", nargs="+", default=list(LEARN_REWARDS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    log = partial(print, flush=True)
    data = record_learn_runs(args.experiments, seeds=args.seeds, max_steps=args.steps, log=log)
    out = args.out if args.out is not None else user_cache_dir() / "grpo_learn"
    path = write_record(data, out, RUNS_FILE)
    print(f"wrote {path} ({data['seconds']} s)")


if __name__ == "__main__":
    main()

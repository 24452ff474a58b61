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

from functools import partial

from lmlessons.course.grpo_learn import (
    LEARN_RECORDING,
    LEARN_REWARDS,
    LEARN_SETTINGS,
    record_learn_runs,
)
from tools._recording import record_and_write, recording_parser


def main(argv: list[str] | None = None) -> None:
    parser = recording_parser(__doc__)
    parser.add_argument("--steps", type=int, default=LEARN_SETTINGS["max_steps"])
    parser.add_argument("--experiments", nargs="+", default=list(LEARN_REWARDS))
    args = parser.parse_args(argv)
    record = partial(record_learn_runs, args.experiments, seeds=args.seeds, max_steps=args.steps)
    record_and_write(record, args.out, LEARN_RECORDING)


if __name__ == "__main__":
    main()

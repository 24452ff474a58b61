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

from functools import partial

from lmlessons.course.rl import EXPERIMENTS, GRPO_RECORDING, record_runs
from tools._recording import record_and_write, recording_parser


def main(argv: list[str] | None = None) -> None:
    parser = recording_parser(__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS))
    args = parser.parse_args(argv)
    record = partial(record_runs, args.experiments, seeds=args.seeds, max_steps=args.steps)
    record_and_write(record, args.out, GRPO_RECORDING)


if __name__ == "__main__":
    main()

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

from functools import partial

from lmlessons.course.chat import SEED_RECORDING, record_seed_runs
from tools._recording import record_and_write, recording_parser


def main(argv: list[str] | None = None) -> int:
    parser = recording_parser(__doc__, seeds=(0, 1, 2, 3, 4))
    args = parser.parse_args(argv)
    record_and_write(partial(record_seed_runs, args.seeds), args.out, SEED_RECORDING)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

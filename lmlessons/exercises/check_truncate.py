"""Checker for ``truncate_seq_pair`` (Google BERT's), in the runner's pattern: cases and
diagnoses only. The pairs hold unique ids (A: 1000, 1001, ...; B: 2000, ...), so a result shows
which tokens went and from which end. Cases: too-long pairs, a pair that fits and seeded pairs at
the corners (an empty side, a budget of 2, ties); the generator contract; 60 calls removing 20
tokens each (front about half of the time, per token).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lmlessons.exercises._framework import Case, Mistake, Runner
from lmlessons.exercises._stats import pct, within

SIGNATURE = (
    "truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, *, generator=None) "
    "-> (tokens_a, tokens_b)   # new lists"
)
#: Hidden case 1: (tokens in A, tokens in B, max_num_tokens), one pair a row.
PAIRS = [
    (20, 9, 24),  # A longer
    (6, 17, 15),  # B longer
    (16, 14, 21),  # both, in turn
    (8, 7, 14),  # one token too many
]
#: The first generated pairs: the corners (an empty side, a budget of 2, ties, one too many).
CORNER_PAIRS = [
    (0, 9, 5),
    (9, 0, 5),
    (5, 5, 9),
    (6, 6, 2),
    (1, 1, 2),
    (2, 1, 2),
    (12, 3, 14),
]
#: Hidden case 3, the random ends: STAT_CALLS calls, each removing 20 tokens from A.
STAT_CALLS = 60
STAT_A = 30
STAT_B = 4
STAT_MAX = 14


def _case(len_a: int, len_b: int, budget: int, label: str, seed: int) -> Case:
    a = list(range(1000, 1000 + len_a))
    b = list(range(2000, 2000 + len_b))
    text = f"{label} (tokens_a of {len_a}, tokens_b of {len_b}, max_num_tokens={budget})"
    return Case(text, (a, b, budget), seed=seed)


def _generated(n: int = 24) -> list[Case]:
    """Seeded pairs at the corners: an empty side, one over the budget, a budget of 2, ties."""
    g = torch.Generator().manual_seed(7)
    pairs = list(CORNER_PAIRS)
    for _ in range(n - len(pairs)):
        la, lb = torch.randint(0, 25, (2,), generator=g).tolist()
        budget = int(torch.randint(2, max(la + lb, 2) + 1, (), generator=g))
        pairs.append((la, lb, budget))
    return [_case(*pair, f"generated case {i + 1}", seed=100 + i) for i, pair in enumerate(pairs)]


def _allowed(la: int, lb: int, budget: int) -> set[tuple[int, int]]:
    """Lengths after trimming the longer side one token at a time (ties: either side)."""
    out = set()
    for tie_to_a in (False, True):
        a = la
        b = lb
        while a + b > budget:
            if a > b or (tie_to_a and a == b):
                a -= 1
            else:
                b -= 1
        out.add((a, b))
    return out


def _front(original: Sequence[int], kept: list[int]) -> int | None:
    """How many tokens went from the front, if ``kept`` is a contiguous piece of ``original``."""
    n = len(kept)
    return next(
        (s for s in range(len(original) - n + 1) if list(original[s : s + n]) == kept), None
    )


def _diagnose(case: Case, a: list[int], b: list[int]) -> int:
    """Raise the mistake ``(a, b)`` shows on ``case``; return A's front removals if none."""
    orig_a, orig_b, budget = case.args
    on = f"On {case.label},"
    if (a and set(a) <= set(orig_b)) or (b and set(b) <= set(orig_a)):
        raise Mistake("swapped_sides", f"{on} the returned `tokens_a` holds B's tokens.")
    fronts = [_front(orig_a, a), _front(orig_b, b)]
    if None in fronts:
        name = "tokens_a" if fronts[0] is None else "tokens_b"
        raise Mistake(
            "removes_from_middle",
            f"{on} the returned `{name}` is not a contiguous piece of the input `{name}`.",
        )
    la, lb, got = len(orig_a), len(orig_b), (len(a), len(b))
    want = min(la + lb, budget)
    if la + lb <= budget and got != (la, lb):
        raise Mistake(
            "trims_when_fits",
            f"{on} the pair fits ({la + lb} tokens) but you returned {got[0]} + {got[1]}.",
        )
    allowed = _allowed(la, lb, budget)
    cuts = (la - got[0], lb - got[1])
    if got not in allowed and min(cuts) > 0 and abs(cuts[0] - cuts[1]) <= 1:
        raise Mistake("trims_both_sides", f"{on} you cut {cuts[0]} from A, {cuts[1]} from B.")
    if sum(got) != want:
        raise Mistake(
            "off_by_one" if abs(sum(got) - want) == 1 else "wrong_total",
            f"{on} the result has {got[0]} + {got[1]} = {sum(got)} tokens; expected exactly "
            f"{want}.",
        )
    if got not in allowed:
        if 0 not in cuts:
            code = "trims_both_sides"
        elif (la > lb) == (cuts[0] > 0):  # only the side longer at first
            code = "longer_decided_once"
        else:
            code = "trims_shorter_side"
        want_text = " or ".join(f"({x}, {y})" for x, y in sorted(allowed))
        raise Mistake(code, f"{on} you kept {got[0]} + {got[1]} tokens; expected {want_text}.")
    return int(fronts[0] or 0)


def _run(run: Runner, case: Case) -> tuple[list[int], list[int]]:
    got = run.call(case)
    run.compare(case, got, run.expected(case))
    a, b = got
    if a is run.last[0][0] or b is run.last[0][1]:
        raise Mistake("returns_same_lists", f"On {case.label}, a returned list is the argument.")
    return [int(t) for t in a], [int(t) for t in b]


def _ends(front: int, total: int, what: str) -> None:
    if front in (0, total):
        code = "always_trims_end" if front == 0 else "always_trims_front"
        raise Mistake(code, f"{what}.")


def check_truncate_seq_pair(run: Runner) -> None:
    hidden = [_case(*pair, f"hidden case 1.{i + 1}", seed=i) for i, pair in enumerate(PAIRS)]
    for case in [*hidden, _case(7, 5, 12, "hidden case 2", seed=5), *_generated()]:
        _diagnose(case, *_run(run, case))
    run.ok("returns new lists `(tokens_a, tokens_b)`; the arguments stay unchanged")
    run.ok(
        "each side stays contiguous text; exactly `max_num_tokens` tokens, always taken from "
        "the longer side; a pair that fits comes back unchanged (24 generated pairs too)"
    )
    stat = _case(STAT_A, STAT_B, STAT_MAX, "hidden case 3", seed=0)
    removed = STAT_A + STAT_B - STAT_MAX
    try:
        run.generator_contract(lambda seed: _run(run, Case(stat.label, stat.args, seed=seed)))
    except Mistake as m:  # no randomness at all: say which end it always cuts, if it does
        if m.code == "ignores_generator":
            front = _diagnose(stat, *_run(run, stat))
            _ends(front, removed, f"On {stat.label}, {front} of {removed} at the front, any seed")
        raise
    one = Case(stat.label, stat.args, {"generator": torch.Generator().manual_seed(44)})
    kept = [run.call(one) for _ in range(STAT_CALLS)]  # one generator, as a data pipeline
    if all(k == kept[0] for k in kept):
        raise Mistake("repeats_per_call", f"On {STAT_CALLS} calls of {stat.label}, all alike.")
    fronts = [_diagnose(stat, [int(t) for t in a], [int(t) for t in b]) for a, b in kept]
    total = removed * STAT_CALLS
    front = sum(fronts)
    what = (
        f"On {STAT_CALLS} calls of {stat.label}, each removing {removed} tokens from A, "
        f"{front} of the {total} removals ({pct(front, total)}) were at the front"
    )
    _ends(front, total, what)
    extremes = sum(f in (0, removed) for f in fronts)
    if extremes > 3:  # per token at 1/2, all 20 at one end has probability 2 / 2**20
        raise Mistake("one_end_per_call", f"{what}; {extremes} calls took all from one end.")
    if not within(front, total, 0.5):
        raise Mistake("biased_trimming", f"{what}; expected about 50%.")
    run.ok(f"front or back at random for each token ({pct(front, total)} at the front)")

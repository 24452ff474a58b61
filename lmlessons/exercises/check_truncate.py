"""Checker for the ``truncate_seq_pair`` exercise (Google BERT's ``truncate_seq_pair``).

The hidden pairs hold *unique* token ids, so every result tells which tokens were removed and
from which end. Hidden cases, in order (the first failure is reported):
1. pairs that are too long: new lists (the arguments unchanged), each side a contiguous piece of
   its input, the total exactly ``max_num_tokens``, the longer side trimmed first (ties may go
   either way: Google trims B, trimming A is as good);
2. a pair that already fits comes back unchanged;
3. not always the same end; the generator: one seed gives one result, different seeds differ,
   no global generator used;
4. statistics over 60 calls that each remove 20 tokens: the front is chosen for about half of the
   removals (binomial tolerance), and not once per call for a whole side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lmlessons.exercises._cases import gen
from lmlessons.exercises._runner import (
    Mistake,
    NotAttempted,
    Runner,
    check_seeds,
    global_rng_changed,
)
from lmlessons.exercises._stats import pct, within

SIGNATURE = (
    "truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, *, generator=None) "
    "-> (tokens_a, tokens_b)   # new lists"
)

#: (len A, len B, max_num_tokens) of hidden case 1: A longer, B longer, both trimmed, one token
PAIRS = ((20, 9, 24), (6, 17, 15), (16, 14, 21), (8, 7, 14))
STAT_CALLS, STAT_A, STAT_B, STAT_MAX = 60, 30, 4, 14  # 20 removals from A per call


def _pair(len_a: int, len_b: int) -> tuple[list[int], list[int]]:
    """Unique ids: A is 1000, 1001, ...; B is 2000, 2001, ..."""
    return list(range(1000, 1000 + len_a)), list(range(2000, 2000 + len_b))


def _final_lengths(len_a: int, len_b: int, max_num_tokens: int, tie_to_a: bool) -> tuple[int, int]:
    """Lengths after trimming the longer side one token at a time (ties: B, or A)."""
    while len_a + len_b > max_num_tokens:
        if len_a > len_b or (tie_to_a and len_a == len_b):
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def _trim_shorter(len_a: int, len_b: int, max_num_tokens: int) -> tuple[int, int]:
    while len_a + len_b > max_num_tokens:
        if (len_a < len_b and len_a > 0) or len_b == 0:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def _explain(exc: BaseException) -> tuple[str, str] | None:
    if isinstance(exc, (IndexError, ValueError)) and "empty" in str(exc):
        return (
            "raised_exception",
            "A side ran out of tokens: trim the *longer* side (the one with more tokens), "
            "recomputed after every removal.",
        )
    return None


class _Case:
    def __init__(self, len_a: int, len_b: int, max_num_tokens: int, label: str) -> None:
        self.a, self.b = _pair(len_a, len_b)
        self.max = max_num_tokens
        self.text = (
            f"{label} (tokens_a of {len_a} tokens, tokens_b of {len_b} tokens, "
            f"max_num_tokens={max_num_tokens})"
        )

    def run(self, run: Runner, generator: torch.Generator | None) -> tuple[list[int], list[int]]:
        a, b = list(self.a), list(self.b)
        try:
            out = run.call(a, b, self.max, generator=generator, case=self.text, explain=_explain)
        except NotAttempted:
            if a != self.a or b != self.b:  # Google's original: trims in place, returns None
                raise Mistake(
                    "modifies_input",
                    "trims the arguments in place and returns None",
                    f"On {self.text}, your function shortened the caller's lists in place and "
                    "returned None. Google's script does that, but here the caller keeps its "
                    "lists (the same sentences serve other pairs): copy them first "
                    "(`a, b = list(tokens_a), list(tokens_b)`), trim the copies and "
                    "`return a, b`.",
                ) from None
            raise
        if a != self.a or b != self.b:
            removed = len(self.a) + len(self.b) - len(a) - len(b)
            raise Mistake(
                "modifies_input",
                "modified `tokens_a` or `tokens_b` in place",
                f"On {self.text}, the caller's lists changed during the call ({removed} tokens "
                "were removed from them). The same sentences serve other pairs: trim copies "
                "(`a, b = list(tokens_a), list(tokens_b)`) and return them.",
            )
        return _unpack(out, self.text)


def _unpack(out: Any, case: str) -> tuple[list[int], list[int]]:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Mistake(
            "wrong_return",
            "should return the pair `(tokens_a, tokens_b)`",
            f"On {case}, your function returned a {type(out).__name__}. Return the two trimmed "
            "lists as a pair: `return a, b`.",
        )
    sides = []
    for name, side in zip(("tokens_a", "tokens_b"), out):
        try:
            sides.append([int(t) for t in side])
        except (TypeError, ValueError):
            raise Mistake(
                "wrong_return",
                f"the returned `{name}` is not a list of token ids",
                f"On {case}, the returned `{name}` is a {type(side).__name__}. Return two lists "
                "of token ids (the pair `(tokens_a, tokens_b)`).",
            ) from None
    return sides[0], sides[1]


def _offset(original: Sequence[int], kept: list[int]) -> int | None:
    """Where ``kept`` starts as a contiguous piece of ``original`` (None if it is not one)."""
    n = len(kept)
    for start in range(len(original) - n + 1):
        if list(original[start : start + n]) == kept:
            return start
    return None


def _check_pieces(case: _Case, a: list[int], b: list[int]) -> tuple[int, int]:
    """Each side is a contiguous piece of its input; returns the front removals of A and B."""
    fronts = []
    for name, original, kept in (("tokens_a", case.a, a), ("tokens_b", case.b, b)):
        start = _offset(original, kept)
        if start is None:
            other = case.b if original is case.a else case.a
            swapped = bool(kept) and set(kept) <= set(other)
            raise Mistake(
                "removes_from_middle",
                f"the returned `{name}` is not its input trimmed at the ends",
                f"On {case.text}, the returned `{name}` ({len(kept)} tokens) is not a "
                f"contiguous piece of the input `{name}`"
                + (" (it holds the other side's tokens: A and B are swapped)" if swapped else "")
                + ". Remove tokens only from the front (`del side[0]`) or the back "
                "(`side.pop()`), so that what is left is still running text.",
            )
        fronts.append(start)
    return fronts[0], fronts[1]


def _check_lengths(case: _Case, a: list[int], b: list[int]) -> None:
    la, lb, m = len(case.a), len(case.b), case.max
    got, total = (len(a), len(b)), len(a) + len(b)
    if total != min(la + lb, m):
        off = total - m
        code, title = (
            ("off_by_one", "one token off the budget")
            if abs(off) == 1
            else ("wrong_total", "the total length is not `max_num_tokens`")
        )
        raise Mistake(
            code,
            title,
            f"On {case.text}, the result has {len(a)} + {len(b)} = {total} tokens; it must have "
            f"exactly max_num_tokens = {m}. Trim while `len(a) + len(b) > max_num_tokens` "
            "(stop as soon as the pair fits, not one token earlier or later).",
        )
    allowed = {_final_lengths(la, lb, m, tie) for tie in (False, True)}
    if got in allowed:
        return
    want = " or ".join(f"({x}, {y})" for x, y in sorted(allowed))
    if got == _trim_shorter(la, lb, m):
        raise Mistake(
            "trims_shorter_side",
            "trims the shorter side",
            f"On {case.text}, you kept {got[0]} + {got[1]} tokens, trimming the *shorter* side; "
            f"expected {want}. Each removal takes a token from the *longer* side (recomputed "
            "after every removal), so that both sides keep as much text as possible.",
        )
    raise Mistake(
        "trims_both_sides",
        "trims both sides instead of the longer one",
        f"On {case.text}, you kept {got[0]} + {got[1]} tokens; expected {want}. Remove one token "
        "at a time from whichever side is *longer* at that moment: a short side keeps all its "
        "tokens until the other side is down to its length.",
    )


def _case_too_long(run: Runner) -> None:
    """Hidden case 1: pairs that must be trimmed."""
    for i, (la, lb, m) in enumerate(PAIRS):
        case = _Case(la, lb, m, f"hidden case 1.{i + 1}")
        a, b = case.run(run, gen(i))
        if i == 0:
            run.ok("returns new lists `(tokens_a, tokens_b)`; the arguments stay unchanged")
        _check_pieces(case, a, b)
        _check_lengths(case, a, b)
    run.ok("each side stays contiguous text (tokens removed only at its front or back)")
    run.ok("exactly `max_num_tokens` tokens, always taken from the longer side")


def _case_fits(run: Runner) -> None:
    """Hidden case 2: a pair that fits is returned as it is."""
    case = _Case(7, 5, 12, "hidden case 2")
    a, b = case.run(run, gen(5))
    if (a, b) != (case.a, case.b):
        raise Mistake(
            "trims_when_fits",
            "trims a pair that already fits",
            f"On {case.text}, the pair already fits (7 + 5 = 12 tokens) but you returned "
            f"{len(a)} + {len(b)} tokens. Trim only while `len(a) + len(b) > max_num_tokens`.",
        )
    run.ok("a pair that already fits comes back unchanged")


def _check_ends(front: int, total: int, what: str) -> None:
    """``front`` of ``total`` removals were at the front: not 0 (always the end) nor all."""
    if front not in (0, total):
        return
    end, other = ("end", "front") if front == 0 else ("front", "end")
    raise Mistake(
        f"always_trims_{end}",
        f"always trims the {end}",
        f"{what}. Always cutting the {end} keeps only the {other}s of sentences, so the model "
        "sees a biased sample of text. For each removed token, draw front or back: "
        "`del side[0] if torch.rand((), generator=generator) < 0.5 else side.pop()`.",
    )


def _check_generator(run: Runner) -> None:
    """Hidden case 3 (20 tokens removed from A): the generator, and not always one end."""
    case = _Case(STAT_A, STAT_B, STAT_MAX, "hidden case 3")
    before = run.rng_state()
    a, b = case.run(run, gen(0))
    used = global_rng_changed(before)
    if used is not None:
        how = {"torch": "torch's global generator", "random": "Python's `random` module"}.get(
            used, "NumPy's global generator"
        )
        raise Mistake(
            "uses_global_rng",
            "`generator` is not used for every random draw",
            f"On {case.text}, with a `generator` passed, your function drew from {how}. Draw the "
            "front-or-back choice with `torch.rand((), generator=generator)` (pass "
            "`generator=generator` to every random call), so one seed gives one set of pairs.",
        )
    try:
        check_seeds(
            run,
            lambda seed: case.run(run, None if seed is None else gen(seed)),
            lambda x, y: x == y,
            not_deterministic=(
                "the same seed gave different results",
                f"On {case.text}, two calls with `generator=torch.Generator().manual_seed(0)` "
                "trimmed differently. Every random draw must use `generator`.",
            ),
            ignores_generator=f"On {case.text}, generators seeded 0, 1 and 2 all trimmed the "
            "same tokens. Use the `generator` you are given for the front-or-back choice.",
        )
    except Mistake as m:  # no randomness at all: say which end it always cuts, if it does
        if m.code == "ignores_generator":
            removed = STAT_A + STAT_B - STAT_MAX
            front = _check_pieces(case, a, b)[0]
            what = f"On {case.text}, {front} of the {removed} removals were at the front"
            _check_ends(front, removed, what + ", whatever the seed")
        raise


def _case_statistics(run: Runner) -> None:
    """Hidden case 4: which end loses the tokens, over many calls."""
    case = _Case(STAT_A, STAT_B, STAT_MAX, "hidden case 4")
    g = gen(44)  # one generator for all the calls, as a data pipeline would pass it
    removed = STAT_A + STAT_B - STAT_MAX
    fronts = []
    for _ in range(STAT_CALLS):
        a, b = case.run(run, g)
        _check_lengths(case, a, b)
        fronts.append(_check_pieces(case, a, b)[0])
    total, front = removed * STAT_CALLS, sum(fronts)
    what = (
        f"On {STAT_CALLS} calls of {case.text}, each removing {removed} tokens from A, "
        f"{front} of the {total} removals ({pct(front, total)}) were at the front"
    )
    _check_ends(front, total, what)
    extremes = sum(f in (0, removed) for f in fronts)
    if extremes > 3:  # per token at 1/2, all 20 at one end has probability 2 / 2**20
        raise Mistake(
            "one_end_per_call",
            "one end chosen per call, not per token",
            f"{what}, but in {extremes} of the {STAT_CALLS} calls all {removed} came from the "
            "same end. Google draws front or back for *each* removed token, so both ends lose "
            "some text and the kept window sits around the middle.",
        )
    if not within(front, total, 0.5):
        raise Mistake(
            "biased_trimming",
            "the front is not chosen half of the time",
            f"{what}; expected about 50%. Choose front or back with probability 1/2 for each "
            "removed token.",
        )
    run.ok(f"front or back at random for each token ({pct(front, total)} at the front)")


def check_truncate_seq_pair(run: Runner) -> None:
    """Run the hidden cases in order; the first failure raises its :class:`Mistake`."""
    _case_too_long(run)
    _case_fits(run)
    _check_generator(run)
    _case_statistics(run)

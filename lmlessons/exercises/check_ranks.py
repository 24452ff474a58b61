"""Checker for the ``rank_loss`` exercise: the causal-LM loss of one data-parallel rank, with the
target count all-reduced over ranks (transformers' ``average_tokens_across_devices``).

The ranks are simulated by threads in one process. ``all_reduce(tensor)`` really sums over them:
each rank deposits its tensor and waits (a condition variable with a timeout, like a barrier)
until every rank has deposited its tensor for the same call; the sum is returned (and, like
``torch.distributed.all_reduce``, written into ``tensor`` in place when it needs no gradient).
If the ranks make different numbers of calls (``if count > 0: all_reduce(count)``), the waiting
rank fails as soon as another rank has returned, and never later than a timeout: the check
reports it instead of hanging, where a real job would hang until NCCL or gloo time out.

The reference is what DDP computes: it *averages* the ranks' gradients, so the step's loss is
``sum(rank losses) / world_size`` and it must equal the full-batch loss
(:func:`lmlessons.clm_loss` on the concatenated shards), and each rank's gradient divided by
``world_size`` must equal the full-batch gradient of that rank's logits. Hidden cases: 2 ranks with
short and long sequences; 3 uneven ranks, one without any target; 4 ranks; 1 rank.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import clm_labels, random_logits
from lmlessons.exercises._loss_checks import as_loss, close, explain_ce, shift_targets, token_ce
from lmlessons.exercises._runner import Mistake, NotAttempted, Runner
from lmlessons.losses import clm_loss

SIGNATURE = (
    "rank_loss(logits, labels, *, all_reduce, world_size) -> loss   # labels unshifted; "
    "all_reduce(tensor) returns the sum over ranks"
)
TIMEOUT = 2.0  # seconds a rank waits for the others in one all_reduce

DDP_NOTE = (
    "What DDP does: every rank backpropagates its own loss, then the gradients are *averaged* "
    "over the ranks. For that average to be the full-batch gradient, rank r must return "
    "world_size * (sum of its token losses) / (target tokens on *all* ranks); the global count "
    "comes from `all_reduce`."
)


class MismatchedAllReduce(RuntimeError):
    """The ranks did not all call ``all_reduce`` the same number of times."""


class Group:
    """A process group of ``world_size`` threads: ``all_reduce`` sums a tensor over them."""

    def __init__(self, world_size: int, timeout: float = TIMEOUT) -> None:
        self.world_size, self.timeout = world_size, timeout
        self.cond = threading.Condition()
        self.slots: dict[int, list[torch.Tensor | None]] = {}  # call number -> one per rank
        self.calls = [0] * world_size
        self.done = [False] * world_size

    def all_reduce(self, rank: int, tensor: Any) -> torch.Tensor:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"all_reduce takes a tensor, like torch.distributed.all_reduce, got "
                f"{type(tensor).__name__}: wrap the number with torch.tensor(...)"
            )
        k = self.calls[rank]
        self.calls[rank] += 1
        with self.cond:
            slot = self.slots.setdefault(k, [None] * self.world_size)
            slot[rank] = tensor.detach().clone()
            self.cond.notify_all()

            def ready() -> bool:
                return all(t is not None for t in slot) or any(
                    self.done[r] and self.calls[r] <= k for r in range(self.world_size)
                )

            self.cond.wait_for(ready, self.timeout)
            if not all(t is not None for t in slot):
                waiting = [r for r in range(self.world_size) if slot[r] is not None]
                raise MismatchedAllReduce(
                    f"rank {rank} waits in all_reduce call {k + 1}, which only ranks "
                    f"{waiting} reached; calls per rank: {self.calls}"
                )
        total = torch.stack([t for t in slot if t is not None]).sum(0)
        if not tensor.requires_grad:
            with torch.no_grad():
                tensor.copy_(total)
        return total

    def finish(self, rank: int) -> None:
        with self.cond:
            self.done[rank] = True
            self.cond.notify_all()


def _explain(exc: BaseException) -> tuple[str, str] | None:
    if isinstance(exc, MismatchedAllReduce):
        return (
            "mismatched_all_reduce",
            "Every rank must call `all_reduce` the same number of times, in the same order, "
            "even a rank whose shard has no target (count 0): an all-reduce is a meeting of all "
            "ranks, and a real job would hang here until the backend times out. Do not put it "
            "under an `if`.",
        )
    if isinstance(exc, TypeError) and "all_reduce takes a tensor" in str(exc):
        return (
            "all_reduce_needs_tensor",
            "Pass a tensor: `all_reduce(count)` with `count = (shift_labels != -100).sum()`, "
            "which is already one (`.item()` or `int(...)` turns it into a Python number).",
        )
    if "process group" in str(exc):
        return (
            "raised_exception",
            "Use the `all_reduce` argument, not `torch.distributed`: the checker runs the ranks "
            "as threads in this process, and its `all_reduce(tensor)` returns the sum over them.",
        )
    return explain_ce(exc)


Shards = list[tuple[torch.Tensor, torch.Tensor]]  # one (logits, labels) per rank


def _simulation(
    fn: Callable[..., Any], shards: Shards, leaves: list[torch.Tensor]
) -> Callable[[], list[Any]]:
    """A function that runs ``fn`` on every rank, a thread each, and returns their results (or
    raises the first rank's exception: a crash rather than the wait it causes elsewhere)."""
    W = len(shards)
    group = Group(W)

    def simulate() -> list[Any]:
        results: list[Any] = [None] * W
        errors: list[BaseException | None] = [None] * W

        def work(rank: int) -> None:
            try:
                results[rank] = fn(
                    leaves[rank],
                    shards[rank][1].clone(),
                    all_reduce=partial(group.all_reduce, rank),
                    world_size=W,
                )
            except BaseException as exc:  # reported by the main thread
                errors[rank] = exc
            finally:
                group.finish(rank)

        threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in range(W)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT * 2)
        if any(t.is_alive() for t in threads):
            raise MismatchedAllReduce("a rank did not finish (it waits for the others)")
        raised = [(r, e) for r, e in enumerate(errors) if e is not None]
        # a rank that crashed leaves the others waiting: report the crash, not the wait
        causes = [(r, e) for r, e in raised if not isinstance(e, MismatchedAllReduce)]
        if not raised:
            return results
        rank, exc = (causes or raised)[0]
        if isinstance(exc, MismatchedAllReduce):  # the final counts, not the moment it noticed
            text = f"rank {rank} waited in all_reduce for ranks that never came; calls per rank: "
            raise MismatchedAllReduce(text + str(group.calls)).with_traceback(exc.__traceback__)
        raise exc

    return simulate


def run_ranks(run: Runner, shards: Shards, case: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Call the learner's function on every rank (a thread each): ``[(loss, logits leaf)]``."""
    leaves = [logits.clone().requires_grad_(True) for logits, _ in shards]
    proxy = Runner(run.exercise, _simulation(run.fn, shards, leaves), run.signature)
    proxy.calls = run.calls
    try:
        results = proxy.call(case=case, explain=_explain)
    except Mistake as m:
        titles = {
            "mismatched_all_reduce": "the ranks made different numbers of `all_reduce` calls",
            "all_reduce_needs_tensor": "`all_reduce` got a Python number, not a tensor",
        }
        raise Mistake(m.code, titles.get(m.code, m.title), m.message) from None
    finally:
        run.calls, run.printed = proxy.calls, run.printed or proxy.printed
    if all(r is None for r in results):
        if run.calls == 1:
            raise NotAttempted()
        raise Mistake("returned_none", "returned None", f"On {case}, your function returned None.")
    for rank, leaf in enumerate(leaves):
        if not torch.equal(leaf.detach(), shards[rank][0]):
            raise Mistake(
                "modifies_input",
                "modified `logits` in place",
                f"On {case}, rank {rank}'s `logits` changed during the call. Build new tensors.",
            )
    return [
        (as_loss(r, f"{case}, rank {i}"), leaf) for i, (r, leaf) in enumerate(zip(results, leaves))
    ]


def _shards(
    lengths: list[list[int]], V: int, T: int, seed: int, prompt: dict[int, int] | None = None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One ``(logits, labels)`` shard per rank; rank r has sequences of ``lengths[r]`` tokens."""
    out = []
    for r, ls in enumerate(lengths):
        logits = random_logits(seed + r, (len(ls), T, V))  # (B_r, T, V)
        labels = clm_labels(seed + 100 + r, V, ls, T, prompt or {})  # (B_r, T) unshifted
        out.append((logits, labels))
    return out


def _describe(shards: list[tuple[torch.Tensor, torch.Tensor]], label: str) -> str:
    counts = [int((shift_targets(lab, 1) != IGNORE_INDEX).sum()) for _, lab in shards]
    rows = [lab.shape[0] for _, lab in shards]
    return (
        f"{label} ({len(shards)} ranks with {rows} sequences and {counts} target tokens after "
        "the shift)"
    )


class _Case:
    """The shards of one hidden case and the full-batch numbers to compare with."""

    def __init__(self, lengths: list[list[int]], seed: int, label: str) -> None:
        V, T = 13, 8
        self.shards = _shards(lengths, V, T, seed, prompt={0: 2})
        self.W = len(lengths)
        self.text = _describe(self.shards, label)
        logits = torch.cat([lg for lg, _ in self.shards])  # (B, T, V), all ranks' rows
        labels = torch.cat([lab for _, lab in self.shards])  # (B, T)
        leaf = logits.clone().requires_grad_(True)
        full = clm_loss(leaf, labels)
        (grad,) = torch.autograd.grad(full, leaf)
        self.full = float(full.detach())
        self.full_grads = list(grad.split([lab.shape[0] for _, lab in self.shards]))
        targets = [shift_targets(lab, 1) for _, lab in self.shards]
        self.sums = [float(token_ce(lg, t).sum()) for (lg, _), t in zip(self.shards, targets)]
        self.counts = [int((t != IGNORE_INDEX).sum()) for t in targets]
        self.n = sum(self.counts)

    def rank_value(self, rank: int) -> float:
        return self.W * self.sums[rank] / max(self.n, 1)

    def mistakes(self, got: float) -> list[tuple[str, float, str, str]]:
        """``(code, the step's loss it gives, title, explanation)`` of the known mistakes."""
        head = (
            f"On {self.text}, the ranks' losses average (as DDP averages the gradients) to "
            f"{got:.4f}, but the full-batch loss is {self.full:.4f}."
        )
        return [
            (code, value, title, f"{head} {why}\n\n{DDP_NOTE}")
            for code, value, title, why in self._scale_mistakes() + self._count_mistakes()
        ]

    def _scale_mistakes(self) -> list[tuple[str, float, str, str]]:
        """Dividing by the rank's own count; forgetting ``world_size``."""
        local = [s / max(c, 1) for s, c in zip(self.sums, self.counts)]
        means = ", ".join(f"{m:.4f}" for m in local)
        return [
            (
                "divides_by_local_count",
                sum(local) / self.W,
                "divides by the rank's own count",
                f"That is the mean of the ranks' own means ({means}): a rank with "
                f"{min(self.counts)} targets weighs as much as one with {max(self.counts)}. "
                f"Divide the rank's *sum* by the count of all ranks: `all_reduce(count)` = "
                f"{self.n}.",
            ),
            (
                "divides_by_local_count",
                sum(local),
                "divides by the rank's own count",
                f"Each rank returned world_size * its own mean ({means}). Divide the rank's "
                f"*sum* by the count of all ranks, `all_reduce(count)` = {self.n}.",
            ),
            (
                "missing_world_size",
                self.full / self.W,
                "forgets to multiply by `world_size`",
                f"That is the full-batch loss divided by world_size = {self.W}: DDP averages the "
                "ranks' gradients, so multiply each rank's loss by `world_size` to undo it "
                "(transformers' Trainer does `loss *= num_processes`).",
            ),
        ]

    def _count_mistakes(self) -> list[tuple[str, float, str, str]]:
        """Counting before the shift or counting padding; not shifting at all."""
        S = sum(self.sums)
        before = sum(int((lab != IGNORE_INDEX).sum()) for _, lab in self.shards)
        positions = sum(lab.shape[0] * (lab.shape[1] - 1) for _, lab in self.shards)
        rows = sum(lab.shape[0] for _, lab in self.shards)
        unshifted = sum(float(token_ce(lg, lab).sum()) for lg, lab in self.shards)
        padding = "only the {} targets that are not -100 count (padding and prompts do not)."
        return [
            (
                "counts_before_shift",
                S / max(before, 1),
                "counts the targets before the shift",
                f"You divided by {before}, the labels that are not -100 *before* the shift; "
                "after it (position t predicts token t + 1, so each row's first label is never "
                f"a target) there are {self.n}. Count `labels[:, 1:] != -100`.",
            ),
            (
                "counts_padding",
                S / positions,
                "counts padding in the denominator",
                f"You divided by {positions}, every shifted position; " + padding.format(self.n),
            ),
            (
                "counts_padding",
                S / (positions + rows),
                "counts padding in the denominator",
                f"You divided by {positions + rows}, every position; " + padding.format(self.n),
            ),
            (
                "not_shifted",
                unshifted / max(before, 1),
                "the labels are not shifted",
                "Position t was scored against `labels[:, t]`, its own input token, but it "
                "predicts the next token: score `logits[:, :-1]` against `labels[:, 1:]`, as "
                "`clm_loss` does.",
            ),
        ]


def _check_value(case: _Case, losses: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    got = sum(float(loss.detach()) for loss, _ in losses) / case.W
    if close(got, case.full):
        return
    for code, value, title, why in case.mistakes(got):
        if close(got, value) and not close(value, case.full):
            raise Mistake(code, title, why)
    raise Mistake(
        "wrong_value",
        "the ranks' losses do not add up to the full-batch loss",
        f"On {case.text}, the ranks returned "
        + ", ".join(f"{float(loss.detach()):.4f}" for loss, _ in losses)
        + f"; their mean (what DDP's gradient average amounts to) is {got:.4f}, but the "
        f"full-batch loss is {case.full:.4f}.\n\n{DDP_NOTE}",
    )


def _check_ranks(case: _Case, losses: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Each rank's value and gradient (divided by ``world_size``, as DDP does)."""
    for rank, (loss, leaf) in enumerate(losses):
        if not loss.requires_grad:
            raise Mistake(
                "detached",
                "the loss does not backpropagate",
                f"On {case.text}, rank {rank}'s loss has no gradient, so `loss.backward()` "
                "cannot train anything. `all_reduce` (like `torch.distributed.all_reduce`) "
                "carries no gradient: all-reduce only the *count* and divide this rank's sum of "
                "token losses by it.",
            )
        want = case.rank_value(rank)
        if not close(float(loss.detach()), want):
            raise Mistake(
                "wrong_rank_loss",
                "right on average, wrong on a rank",
                f"On {case.text}, rank {rank} returned {float(loss.detach()):.4f}; expected "
                f"world_size * (its sum {case.sums[rank]:.4f}) / (global count {case.n}) = "
                f"{want:.4f}. Each rank's loss must carry its own tokens only.\n\n{DDP_NOTE}",
            )
        (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
        grad = torch.zeros_like(leaf) if grad is None else grad
        if not torch.allclose(grad / case.W, case.full_grads[rank], atol=1e-6, rtol=1e-4):
            raise Mistake(
                "wrong_gradient",
                "the value is right but the gradient is not",
                f"On {case.text}, rank {rank}'s gradient, averaged by DDP, differs from the "
                "full-batch gradient. Part of the computation is probably detached "
                "(`.detach()`, `.item()`, a number built from the logits' values).",
            )


def _run_case(run: Runner, lengths: list[list[int]], seed: int, label: str) -> _Case:
    case = _Case(lengths, seed, label)
    losses = run_ranks(run, case.shards, case.text)
    _check_value(case, losses)
    _check_ranks(case, losses)
    return case


def check_rank_loss(run: Runner) -> None:
    """Run the hidden cases in order; the first failure raises its :class:`Mistake`."""
    _run_case(run, [[3, 4], [8, 8]], 51, "hidden case 1")
    run.ok("2 ranks: the ranks' losses average to the full-batch loss")
    run.ok("each rank: world_size * its sum / the all-reduced count, with the full-batch gradient")
    _run_case(run, [[8], [1, 1], [5, 7, 6]], 61, "hidden case 2")
    run.ok("3 uneven ranks, one without any target: every rank joins every `all_reduce`")
    _run_case(run, [[2, 6], [8], [4, 4, 3], [7]], 71, "hidden case 3")
    _run_case(run, [[5, 8, 3]], 81, "hidden case 4")
    run.ok("4 ranks, and 1 rank (the plain mean over targets)")

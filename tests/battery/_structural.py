"""Structural mistakes, written once for every exercise: each is the exercise's reference
solution changed in one way that is not about the values (it edits an input, draws from the
global generator, detaches, converts or wraps its result, or is the reference itself), with the
mistake code each exercise's checker must name.

The battery keeps hand-written attempts for these codes only where a learner reaches them in a
way these do not cover (an empty selection that returns a constant, a draft that prints, ...).
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable
from typing import Any

import torch

from battery._attempt import ATTEMPTS, Attempt
from lmlessons.exercises import EXERCISES


def _edit(value: Any) -> bool:
    """Change ``value`` in place, as a learner's ``x[...] = ...`` or ``.append``; False if it
    is not a tensor without grad, a list or a dict."""
    if _no_grad_tensor(value) and value.numel():
        value.logical_not_() if value.dtype == torch.bool else value.add_(1)
    elif isinstance(value, list) and value:
        value.append(copy.deepcopy(value[-1]))
    elif isinstance(value, dict):
        value["edited"] = True
    else:
        return False
    return True


def _no_grad_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not value.requires_grad


def _convert(out: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``out`` with ``fn`` applied to each tensor in it (through tuples, lists and dicts)."""
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_convert(o, fn) for o in out)
    if isinstance(out, dict):
        return {k: _convert(v, fn) for k, v in out.items()}
    return out


def edits_input(ref: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Computes the answer on a copy of its first editable argument, then edits the argument."""
    editable = [isinstance(a, (list, dict)) or _no_grad_tensor(a) for a in args]  # not logits
    i = editable.index(True)
    out = ref(*args[:i], copy.deepcopy(args[i]), *args[i + 1 :], **kwargs)
    _edit(args[i])
    return out


def global_rng(ref: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Draws one number from torch's global generator before the answer (a seed, a coin)."""
    torch.rand(())
    return ref(*args, **kwargs)


def detached(ref: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Returns the answer detached from the graph (a copy kept for logging)."""
    return _convert(ref(*args, **kwargs), torch.Tensor.detach)


def as_lists(ref: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Returns each tensor of the answer as Python numbers (``.tolist()``)."""
    return _convert(ref(*args, **kwargs), torch.Tensor.tolist)


def as_float(ref: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Returns each tensor of the answer as float32 (``.float()``)."""
    return _convert(ref(*args, **kwargs), torch.Tensor.float)


def with_extra(ref: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Returns the answer and something else as a pair (a count kept for logging)."""
    return ref(*args, **kwargs), 0


def the_reference(ref: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Calls the reference solution of the exercise (``solution(name)`` shows it)."""
    return ref(*args, **kwargs)


LOSS = {"detached": detached, "as_lists": as_lists, "with_extra": with_extra}
#: Per exercise, the structural attempts beyond ``edits_input`` and ``the_reference`` (which every
#: exercise gets) and the code each must be named by: ``(change, code)``.
TABLE: dict[str, list[tuple[Callable[..., Any], str]]] = {
    "mask_tokens": [
        (global_rng, "uses_global_rng"),
        (as_float, "wrong_dtype"),
        (as_lists, "wrong_type"),
    ],
    "mlm_loss": [(detached, "detached"), (as_lists, "not_a_tensor"), (with_extra, "returns_tuple")],
    "clm_loss": [(detached, "detached"), (as_lists, "not_a_tensor"), (with_extra, "returns_tuple")],
    "make_nsp_pairs": [(global_rng, "uses_global_rng"), (as_float, "wrong_dtype")],
    "bert_pretraining_loss": [(detached, "detached"), (with_extra, "returns_tuple")],
    "select_whole_words": [(global_rng, "uses_global_rng"), (as_float, "wrong_dtype")],
    "truncate_seq_pair": [(global_rng, "uses_global_rng")],
    "rank_loss": [(detached, "detached")],
    "chunked_cross_entropy": [(detached, "detached"), (as_lists, "not_a_tensor")],
    "flatten_documents": [(as_float, "wrong_dtype"), (as_lists, "wrong_type")],
    "assistant_labels": [(with_extra, "wrong_type")],
    "sequence_logprobs": [(detached, "detached"), (as_lists, "wrong_type")],
    "group_advantages": [(as_lists, "wrong_type")],
    "grpo_loss": [(detached, "detached"), (as_lists, "not_a_tensor")],
    "load_balancing_loss_func": [(detached, "detached"), (as_lists, "not_a_tensor")],
    "mtp_labels": [(as_float, "wrong_dtype"), (as_lists, "wrong_type")],
    "label_smoothed_loss": [
        (detached, "detached"),
        (as_lists, "not_a_tensor"),
        (with_extra, "returns_tuple"),
    ],
}


def _own_copy(fn: Any) -> Any:
    """``fn`` under a new code object: what a learner who copied the reference runs (the runner
    watches the reference's own code object; :func:`the_reference` calls that one)."""
    copied = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__)
    copied.__kwdefaults__ = fn.__kwdefaults__
    return copied


def _attempt(exercise: str, change: Callable[..., Any], code: str) -> Attempt:
    ref = EXERCISES[exercise].solution
    ref = ref if change is the_reference else _own_copy(ref)
    fn = functools.wraps(change)(functools.partial(change, ref))
    fn.__name__ = f"{change.__name__}_structural"  # type: ignore[attr-defined]
    return Attempt(fn, code)


for _exercise, _rows in TABLE.items():
    _rows = [(edits_input, "modifies_input"), (the_reference, "delegates_to_course"), *_rows]
    ATTEMPTS.setdefault(_exercise, []).extend(_attempt(_exercise, *row) for row in _rows)

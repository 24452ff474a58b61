"""The recorded runs of the bug zoo: saved as one small JSON file, read back, summarised.

Training all the runs takes a few minutes, too long for a lesson, so ``python -m tools.bugzoo``
trains them once (one thread, seeded) and :func:`save_records` writes their histories and
symptoms, rounded to 5 significant digits, to ``runs.json``. The package ships that file in
``lmlessons/data/bugzoo``; :func:`load_records` reads it. JSON has no NaN, so a NaN is stored as
``null`` and read back as ``float("nan")``.

:func:`summary` boils a record down to the numbers a practitioner compares between two runs
(``final_train_loss``, ``targets_per_step``, ``heldout_clm_loss``, ...).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lmlessons.course.records import Recording, write_record

__all__ = [
    "RECORDING",
    "FINAL_WINDOW",
    "rounded",
    "save_records",
    "load_records",
    "summary",
]

FINAL_WINDOW = 20  # "final" = the mean of the last 20 steps
SIGNIFICANT_DIGITS = 5


def rounded(value: Any) -> Any:
    """``value`` with every float rounded to 5 significant digits and NaN made None (JSON),
    through dicts and lists."""
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    if isinstance(value, float):
        return None if math.isnan(value) else float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    return value


def _nan_for_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _nan_for_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_for_none(v) for v in value]
    return math.nan if value is None else value


#: The bug zoo's recording: ``data/bugzoo/runs.json``, made by ``python -m tools.bugzoo``.
RECORDING = Recording("bugzoo", "bugzoo", ("about", "runs"))


def save_records(records: dict[str, dict[str, Any]], directory: str | Path, **about: Any) -> Path:
    """Write ``{"about": about, "runs": records}`` (rounded) to ``directory/runs.json``
    (:func:`lmlessons.course.records.write_record`: sorted keys, lists of numbers on one line)."""
    record = {"about": about, "runs": rounded(records)}
    return write_record(record, directory, RECORDING.file, sort_keys=True, one_line_lists=True)


def load_records(directory: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The recorded runs by run id (default: the ones shipped in the package), read by
    :meth:`~lmlessons.course.records.Recording.load`, each ``null`` back to NaN."""
    record = RECORDING.load(directory)
    return {run_id: _nan_for_none(run) for run_id, run in record["runs"].items()}


def _tail_mean(values: list[float]) -> float:
    tail = values[-FINAL_WINDOW:]
    return sum(tail) / len(tail)


#: The per-step values beyond the loss, averaged as ``train_<name>``: pretraining's NSP accuracy,
#: DPO's reward accuracy, MoE's aux loss, MTP's depth-2 loss and the depth-2 block's gradient norm.
_TRAIN_SERIES = (
    "nsp_accuracy",
    "reward_accuracy",
    "aux_loss",
    "loss_depth_2",
    "extra_depth_grad_norm",
)

#: The one-step check's values (``one_step_check`` of a record) by their summary names.
_CHECKS = {
    "this_run": "gradient_error",
    "with_the_fix": "gradient_error_fixed",
    "loss_this_run": "loss_error",
    "norm_this_run": "gradient_norm_ratio",
    "norm_with_the_fix": "gradient_norm_ratio_fixed",
    "loss_padding_change": "padding_loss_change",
    "gradient_padding_change": "padding_gradient_change",
}


def summary(record: dict[str, Any]) -> dict[str, float]:
    """The numbers to compare between runs: ``final_train_loss``, ``grad_norm`` (means of the
    last 20 steps; NaN if one is NaN), ``targets_per_step``, ``first_nan_step`` (0: never) and
    ``nan_step_targets``, ``train_nsp_accuracy`` (pretraining), ``train_reward_accuracy`` (DPO),
    ``train_aux_loss`` (MoE), ``train_loss_depth_2`` and ``train_extra_depth_grad_norm`` (MTP),
    every held-out metric as ``heldout_<name>``, and the one-step check (``loss_error``,
    ``gradient_error``,
    ``gradient_error_fixed``; for a ``Trainer`` run ``gradient_norm_ratio`` and
    ``gradient_norm_ratio_fixed`` instead of ``loss_error``) when measured."""
    h = record["history"]
    nan_steps = [i for i, v in enumerate(h["loss"]) if math.isnan(v)]
    out = {
        "final_train_loss": _tail_mean(h["loss"]),
        "grad_norm": _tail_mean(h["grad_norm"]),
        "targets_per_step": sum(h["num_items"]) / len(h["num_items"]),
        "first_nan_step": float(nan_steps[0] + 1 if nan_steps else 0),
        "nan_step_targets": float(h["num_items"][nan_steps[0]] if nan_steps else math.nan),
    }
    for key in _TRAIN_SERIES:
        if key in h:
            out[f"train_{key}"] = _tail_mean(h[key])
    out.update({f"heldout_{k}": float(v) for k, v in record.get("heldout", {}).items()})
    check = record.get("one_step_check", {})
    out.update({name: float(check[key]) for key, name in _CHECKS.items() if key in check})
    return out

"""Naive and valid versions of lesson 09's exercise ``flatten_documents`` (the checker of
``lmlessons/exercises/check_flatten.py`` must reject each naive one with its mistake code and
accept the valid ones). Kept beside ``naive_variants.py`` in the same shape: functions, then
``EXPECTED`` (variant -> mistake code), ``VALID``, ``PHRASES`` (a phrase the message must hold)
and ``INDEPENDENT`` (transformers' own collator as a learner's function)."""

from __future__ import annotations

import torch
from transformers import DataCollatorWithFlattening


def _rows(ids, labels, positions):
    return {
        "input_ids": torch.tensor([ids]),
        "labels": torch.tensor([labels]),
        "position_ids": torch.tensor([positions]),
    }


def flatten_draft_as_written(docs, *, separator_id=-100):
    # a first draft: concatenate, copy the ids as labels, number the positions straight through
    ids = [t for d in docs for t in d]
    return _rows(ids, list(ids), list(range(len(ids))))


def flatten_no_separator(docs, *, separator_id=-100):
    ids = [t for d in docs for t in d]
    return _rows(ids, list(ids), [p for d in docs for p in range(len(d))])


def flatten_positions_straight(docs, *, separator_id=-100):
    ids = [t for d in docs for t in d]
    labels = [t for d in docs for t in [separator_id, *d[1:]]]
    return _rows(ids, labels, list(range(len(ids))))


def flatten_positions_from_one(docs, *, separator_id=-100):
    ids = [t for d in docs for t in d]
    labels = [t for d in docs for t in [separator_id, *d[1:]]]
    return _rows(ids, labels, [p + 1 for d in docs for p in range(len(d))])


def flatten_separator_at_end(docs, *, separator_id=-100):
    ids = [t for d in docs for t in d]
    labels = [t for d in docs for t in [*d[:-1], separator_id]]
    return _rows(ids, labels, [p for d in docs for p in range(len(d))])


def flatten_hard_coded_separator(docs, *, separator_id=-100):
    ids = [t for d in docs for t in d]
    labels = [t for d in docs for t in [-100, *d[1:]]]
    return _rows(ids, labels, [p for d in docs for p in range(len(d))])


def flatten_shifted_labels(docs, *, separator_id=-100):
    ids = [t for d in docs for t in d]
    return _rows(ids, [*ids[1:], -100], [p for d in docs for p in range(len(d))])


def flatten_adds_eos(docs, *, separator_id=-100):
    # a separator *token* between documents, as group_texts does: not padding-free flattening
    ids = [t for d in docs for t in [*d, 3]]
    labels = [t for d in docs for t in [separator_id, *d[1:], 3]]
    return _rows(ids, labels, [p for d in docs for p in range(len(d) + 1)])


def flatten_one_dimensional(docs, *, separator_id=-100):
    out = flatten_valid_torch_cat(docs, separator_id=separator_id)
    return {k: v[0] for k, v in out.items()}


def flatten_int32(docs, *, separator_id=-100):
    out = flatten_valid_torch_cat(docs, separator_id=separator_id)
    return {k: v.int() for k, v in out.items()}


def flatten_in_place(docs, *, separator_id=-100):
    out = flatten_valid_torch_cat(docs, separator_id=separator_id)
    docs[0][0] = separator_id  # writes into the caller's list
    return out


def flatten_valid_torch_cat(docs, *, separator_id=-100):
    ids = torch.cat([torch.tensor(d) for d in docs])
    labels = ids.clone()
    starts = torch.tensor([0, *torch.tensor([len(d) for d in docs]).cumsum(0)[:-1].tolist()])
    labels[starts] = separator_id
    positions = torch.cat([torch.arange(len(d)) for d in docs])
    return {"input_ids": ids[None], "labels": labels[None], "position_ids": positions[None]}


def hf_flatten_documents(docs, *, separator_id=-100):
    """transformers' own collator, called as a learner's function."""
    out = DataCollatorWithFlattening(separator_id=separator_id)(
        [{"input_ids": d} for d in docs], "pt"
    )
    return {k: out[k] for k in ("input_ids", "labels", "position_ids")}


EXPECTED: dict[str, dict[str, str]] = {
    "flatten_documents": {
        "flatten_draft_as_written": "positions_not_restarted",
        "flatten_no_separator": "no_separator",
        "flatten_positions_straight": "positions_not_restarted",
        "flatten_positions_from_one": "positions_from_one",
        "flatten_separator_at_end": "separator_at_end",
        "flatten_hard_coded_separator": "ignores_separator_id",
        "flatten_shifted_labels": "flatten_shifts_labels",
        "flatten_adds_eos": "flatten_wrong_ids",
        "flatten_one_dimensional": "wrong_shape",
        "flatten_int32": "wrong_dtype",
        "flatten_in_place": "modifies_input",
    }
}
VALID: dict[str, list[str]] = {"flatten_documents": ["flatten_valid_torch_cat"]}
PHRASES: dict[str, str] = {
    "positions_not_restarted": "restart",
    "positions_from_one": "from 0",
    "no_separator": "separator_id",
    "separator_at_end": "*first* token",
    "ignores_separator_id": "separator_id",
    "flatten_shifts_labels": "unshifted",
    "flatten_wrong_ids": "one after the other",
}
INDEPENDENT = {"flatten_documents": hf_flatten_documents}

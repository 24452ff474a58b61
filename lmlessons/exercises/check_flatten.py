"""Checker for ``flatten_documents`` (lesson 09: labels and ``position_ids`` of a packed batch),
in the runner's pattern (:mod:`lmlessons.exercises._framework`): cases and diagnoses only.

The expected batch of every case is transformers' own ``DataCollatorWithFlattening`` on the
same documents. Cases, in order (the first failure is reported): three documents of 4, 1 and 3
tokens; one document alone; ``separator_id=0`` that is also a token inside a document; 20 seeded
batches of 1 to 6 documents of 1 to 12 tokens (token 0 among them; one-token documents; every
other batch with a ``separator_id`` taken from its own tokens). A failure is diagnosed per
document, so a mistake on some documents only is named too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import DRAWN
from lmlessons.exercises._framework import Case, Mistake, Runner, same

SIGNATURE = (
    "flatten_documents(docs, *, separator_id=-100) -> "
    '{"input_ids", "labels", "position_ids"}   # each a (1, N) LongTensor'
)
KEYS = ("input_ids", "labels", "position_ids")


@dataclass(frozen=True)
class FlattenRow:
    """A row of :data:`GENERATED`: the documents' lengths and whether ``separator_id`` is given
    (one of the batch's own tokens, drawn; else the default -100)."""

    lengths: tuple[int, ...] | str  # DRAWN: 1 to 6 documents of 1 to 12 tokens
    separator: bool


#: The generated cases, in order (their tokens are drawn from 0 to 99, so 0 among them): two of
#: one-token documents, then 18 drawn batches, every other one with a ``separator_id``.
GENERATED = [
    FlattenRow((1,), separator=False),  # one one-token document
    FlattenRow((1, 1, 1), separator=True),  # one-token documents only
    *(FlattenRow(DRAWN, separator=i % 2 == 1) for i in range(18)),
]


def collator_batch(docs: list[list[int]], separator_id: int | None = None) -> dict[str, Any]:
    """``DataCollatorWithFlattening`` on ``docs``: the three fields the exercise returns."""
    from transformers import DataCollatorWithFlattening

    kwargs = {} if separator_id is None else {"separator_id": separator_id}
    out = DataCollatorWithFlattening(**kwargs)([{"input_ids": d} for d in docs], "pt")
    return {k: out[k] for k in KEYS}


def _cases() -> list[Case]:
    """The hand-written cases, then those of :data:`GENERATED`."""
    hand_written = [
        Case(
            "hidden case 1 (three documents of 4, 1 and 3 tokens)",
            ([[5, 6, 7, 8], [9], [5, 10, 11]],),
        ),
        Case("hidden case 2 (one document of 5 tokens)", ([[12, 13, 14, 15, 16]],)),
        Case(
            "hidden case 3 (two documents, separator_id=0, also a token of the first)",
            ([[7, 0, 9], [10, 11]],),
            {"separator_id": 0},
            ok=(
                "`input_ids`: the documents' tokens one after the other in one row `(1, N)`",
                "`position_ids` restart at 0 for every document (one-token documents too)",
                "each document's first label is `separator_id` (also one that is a token inside "
                "a document); the other labels are the ids, unshifted",
            ),
        ),
    ]
    generated = _generated()
    generated[-1] = replace(
        generated[-1],
        ok="equal to `DataCollatorWithFlattening` on 20 random batches (one-token documents, "
        "token 0, a `separator_id` that is also a token)",
    )  # said once all of them passed
    return hand_written + generated


def _generated() -> list[Case]:
    """The cases of :data:`GENERATED` (every row draws a number of documents, used or not)."""
    g = torch.Generator().manual_seed(9)
    cases = []
    for i, row in enumerate(GENERATED):
        n_docs = int(torch.randint(1, 7, (), generator=g))
        if isinstance(row.lengths, str):  # DRAWN
            lengths = torch.randint(1, 13, (n_docs,), generator=g).tolist()
        else:
            lengths = list(row.lengths)
        docs = [torch.randint(0, 100, (int(n),), generator=g).tolist() for n in lengths]
        kwargs = {}
        text = ""
        if row.separator:  # a separator_id that is also one of the batch's tokens
            tokens = [t for d in docs for t in d]
            sep = tokens[int(torch.randint(len(tokens), (), generator=g))]
            kwargs = {"separator_id": sep}
            text = f", separator_id={sep}"
        label = f"generated case {i + 1} (documents of {[len(d) for d in docs]} tokens{text})"
        cases.append(Case(label, (docs,), kwargs))
    return cases


def _check_ids(case: Case, got: Any, want: torch.Tensor) -> None:
    """``flatten_wrong_ids`` for a row ``(1, M)`` that is not the documents' tokens (dropped,
    inserted or overwritten ones), before the shape check blames the length."""
    ids = got.get("input_ids") if isinstance(got, Mapping) else None
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] != 1:
        return
    ids = ids[0].tolist()
    want_ids = want[0].tolist()
    if ids != want_ids:
        count = ""
        if len(ids) != len(want_ids):
            count = f" ({len(ids)} tokens; the documents hold {len(want_ids)})"
        raise Mistake(
            "flatten_wrong_ids",
            f"On {case.label}, `input_ids` are {ids}{count}; expected {want_ids}.",
        )


def _position_code(p: list[int], n: int, before: int | None) -> str:
    """The mistake one document's positions ``p`` show (``before``: the previous position)."""
    if before is not None and p[0] != 0 and p == list(range(before + 1, before + 1 + n)):
        return "positions_not_restarted"
    return "positions_from_one" if p == list(range(1, n + 1)) else "wrong_value"


def _label_code(lab: list[int], doc: list[int], sep: int, nxt: int) -> str:
    """The mistake one document's labels ``lab`` show against ``[sep, *doc[1:]]`` (``nxt``: the
    row's next token, what a shifted one-token document's label is)."""
    if lab == doc:
        return "no_separator"
    if lab[:-1] == doc[1:] and (len(doc) > 1 or lab == [nxt]):
        return "flatten_shifts_labels"
    if sep != IGNORE_INDEX and lab == [IGNORE_INDEX, *doc[1:]]:
        return "ignores_separator_id"
    return "separator_at_end" if len(doc) > 1 and lab == [*doc[:-1], sep] else "wrong_value"


def _diagnose(case: Case, got: dict[str, torch.Tensor]) -> Mistake:
    """The mistake on the first document whose positions, then labels, are wrong."""
    docs = case.args[0]
    sep = case.kwargs.get("separator_id", IGNORE_INDEX)
    labels = got["labels"][0].tolist()
    positions = got["position_ids"][0].tolist()
    row = [t for doc in docs for t in doc] + [sep]
    for field, values in (("position_ids", positions), ("labels", labels)):
        start = 0
        for d, doc in enumerate(docs):
            n = len(doc)
            part = values[start : start + n]
            want = list(range(n)) if field == "position_ids" else [sep, *doc[1:]]
            if part != want:
                before = positions[start - 1] if start else None
                code = (
                    _position_code(part, n, before)
                    if field == "position_ids"
                    else _label_code(part, doc, sep, row[start + n])
                )
                where = f"document {d + 1} of {len(docs)} ({doc})"
                return Mistake(
                    code, f"On {case.label}, `{field}` of {where} are {part}; expected {want}."
                )
            start += n
    raise AssertionError("no document differs")  # pragma: no cover - same() said they differ


def check_flatten_documents(run: Runner) -> None:
    for case in _cases():
        got = run.call(case)
        expected = collator_batch(case.args[0], case.kwargs.get("separator_id"))
        _check_ids(case, got, expected["input_ids"])
        run.compare(case, got, expected)
        if not same(got, expected):
            raise _diagnose(case, got)
        run.passed_case(case)

"""Checker for ``flatten_documents`` (lesson 09: labels and ``position_ids`` of a packed batch),
in the runner's pattern (:mod:`lmlessons.exercises._framework`): cases and diagnoses only.

The expected batch of every case is transformers' own ``DataCollatorWithFlattening`` on the
same documents. Cases, in order (the first failure is reported): three documents of 4, 1 and 3
tokens; one document alone; ``separator_id=0`` that is also a token inside a document; 20 seeded
batches of 1 to 6 documents of 1 to 12 tokens (token 0 among them; one-token documents; every
other batch with a ``separator_id`` taken from its own tokens). A wrong value is diagnosed on the
first document whose positions, then labels, are wrong: the mistake named is the known mistake
(the catalogue below) that gives the same values for that document, run on the documents from
the one before it, so a mistake made at some documents only is named too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import DRAWN
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner, same

SIGNATURE = (
    "flatten_documents(docs, *, separator_id=-100) -> "
    '{"input_ids", "labels", "position_ids"}   # each a (1, N) LongTensor'
)
KEYS = ("input_ids", "labels", "position_ids")

#: The generated cases, in order (their tokens are drawn from 0 to 99, so 0 among them): the
#: documents' lengths (DRAWN: 1 to 6 documents of 1 to 12 tokens) and whether ``separator_id``
#: is given (one of the batch's own tokens, drawn; else the default -100). Two batches of
#: one-token documents, then 18 drawn ones, every other one with a ``separator_id``.
GENERATED: list[tuple[tuple[int, ...] | str, bool]] = [
    ((1,), False),
    ((1, 1, 1), True),
    *((DRAWN, i % 2 == 1) for i in range(18)),
]


def collator_batch(docs: list[list[int]], separator_id: int | None = None) -> dict[str, Any]:
    """``DataCollatorWithFlattening`` on ``docs``: the three fields the exercise returns."""
    from transformers import DataCollatorWithFlattening

    kwargs = {} if separator_id is None else {"separator_id": separator_id}
    out = DataCollatorWithFlattening(**kwargs)([{"input_ids": d} for d in docs], "pt")
    return {k: out[k] for k in KEYS}


def _cases() -> list[Case]:
    """The hand-written cases, then those of :data:`GENERATED` (the last says they all passed)."""
    return [
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
        *_generated(),
    ]


def _generated() -> list[Case]:
    """The cases of :data:`GENERATED` (every row draws a number of documents, used or not)."""
    g = torch.Generator().manual_seed(9)
    cases = []
    for i, (lengths, separator) in enumerate(GENERATED):
        n_docs = int(torch.randint(1, 7, (), generator=g))
        if isinstance(lengths, str):  # DRAWN
            lengths = tuple(torch.randint(1, 13, (n_docs,), generator=g).tolist())
        docs = [torch.randint(0, 100, (int(n),), generator=g).tolist() for n in lengths]
        kwargs = {}
        text = ""
        if separator:  # a separator_id that is also one of the batch's tokens
            tokens = [t for d in docs for t in d]
            kwargs = {"separator_id": tokens[int(torch.randint(len(tokens), (), generator=g))]}
            text = f", separator_id={kwargs['separator_id']}"
        label = f"generated case {i + 1} (documents of {[len(d) for d in docs]} tokens{text})"
        cases.append(Case(label, (docs,), kwargs))
    cases[-1] = replace(
        cases[-1],
        ok="equal to `DataCollatorWithFlattening` on 20 random batches (one-token documents, "
        "token 0, a `separator_id` that is also a token)",
    )  # said once all of them passed
    return cases


# --------------------------------------------------------------------------- known mistakes

known = Catalogue("flatten_documents")
Docs = list[list[int]]


def _batch(
    docs: Docs,
    label: Callable[[list[int]], list[int]],
    position: Callable[[list[int]], Iterable[int]] = lambda doc: range(len(doc)),
) -> dict[str, torch.Tensor]:
    """The packed batch with labels ``label(doc)`` and positions ``position(doc)`` per document."""
    rows = [[x for doc in docs for x in f(doc)] for f in (list, label, position)]
    return {key: torch.tensor([row]) for key, row in zip(KEYS, rows, strict=True)}  # (1, N) each


@known("positions_not_restarted")
def positions_straight_through(docs: Docs, *, separator_id: int = IGNORE_INDEX) -> Any:
    """Numbered the positions straight through the row (0 .. N-1), as for one long text."""
    out = _batch(docs, lambda doc: [separator_id, *doc[1:]])
    out["position_ids"] = torch.arange(out["input_ids"].shape[1])[None]  # (1, N)
    return out


@known("positions_from_one")
def positions_from_one(docs: Docs, *, separator_id: int = IGNORE_INDEX) -> Any:
    """Counted each document's positions from 1 (``range(1, len(doc) + 1)``)."""
    return _batch(docs, lambda doc: [separator_id, *doc[1:]], lambda doc: range(1, len(doc) + 1))


@known("no_separator")
def labels_are_input_ids(docs: Docs, *, separator_id: int = IGNORE_INDEX) -> Any:
    """Took the labels equal to ``input_ids``, no separator ("the model shifts")."""
    return _batch(docs, list)


@known("ignores_separator_id")
def hard_coded_minus_100(docs: Docs, *, separator_id: int = IGNORE_INDEX) -> Any:
    """Wrote -100 as each document's first label, whatever ``separator_id`` is passed."""
    return _batch(docs, lambda doc: [IGNORE_INDEX, *doc[1:]])


@known("flatten_shifts_labels")
def shifts_each_document(docs: Docs, *, separator_id: int = IGNORE_INDEX) -> Any:
    """Shifted each document's labels itself (``doc[1:] + [separator_id]``)."""
    return _batch(docs, lambda doc: [*doc[1:], separator_id])


@known("flatten_shifts_labels")
def shift_pads_with_minus_100(docs: Docs, *, separator_id: int = IGNORE_INDEX) -> Any:
    """Shifted each document's labels itself, padded with -100 (``doc[1:] + [-100]``)."""
    return _batch(docs, lambda doc: [*doc[1:], IGNORE_INDEX])


@known("flatten_shifts_labels")
def shifts_the_row(docs: Docs, *, separator_id: int = IGNORE_INDEX) -> Any:
    """Shifted the flat row (``labels[t] = input_ids[t + 1]``): across documents too."""
    out = _batch(docs, list)
    out["labels"] = torch.tensor([[*out["input_ids"][0, 1:].tolist(), separator_id]])  # (1, N)
    return out


@known("flatten_shifts_labels")
def rolls_the_row(docs: Docs, *, separator_id: int = IGNORE_INDEX) -> Any:
    """Rolled the flat row one step (``torch.roll(input_ids, -1)``) as the labels."""
    out = _batch(docs, list)
    out["labels"] = torch.roll(out["input_ids"], -1, dims=1)  # (1, N)
    return out


@known("separator_at_end")
def separator_at_document_end(docs: Docs, *, separator_id: int = IGNORE_INDEX) -> Any:
    """Put ``separator_id`` on each document's last label (``doc[:-1] + [separator_id]``)."""
    return _batch(docs, lambda doc: [*doc[:-1], separator_id])


# --------------------------------------------------------------------------- diagnosis


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


def _named(case: Case, field: str, d: int, part: list[int], want: list[int]) -> str:
    """The code of the first known mistake that gives ``part`` as the ``field`` of document
    ``d`` (not ``want``), run on all the documents or on those from the one before ``d`` (a
    numbering that goes on from there); else ``wrong_value``."""
    docs = case.args[0]
    runs = []
    for first in (0, max(d - 1, 0)):
        start = sum(len(doc) for doc in docs[first:d])
        sub = Case(case.label, (docs[first:],), case.kwargs)
        runs.append(known.outputs(sub, _segment(field, start, len(part))))
    outputs = [out for pair in zip(*runs, strict=True) for out in pair]  # catalogue order
    # a document shifted by hand whatever fills its last label (0, a pad id, ...): no entry
    # can write every filler, so the shape of the labels names it
    shifted = field == "labels" and len(part) > 1 and part[:-1] == docs[d][1:]
    fallback = "flatten_shifts_labels" if shifted else "wrong_value"
    return next((c for c, _, out in outputs if out == part and out != want), fallback)


def _segment(field: str, start: int, n: int) -> Callable[[Any], list[int]]:
    """The ``n`` values of ``field`` from ``start`` in a batch."""
    return lambda out: out[field][0, start : start + n].tolist()


def _diagnose(case: Case, got: dict[str, torch.Tensor]) -> Mistake:
    """The mistake on the first document whose positions, then labels, are wrong."""
    docs = case.args[0]
    sep = case.kwargs.get("separator_id", IGNORE_INDEX)
    for field in ("position_ids", "labels"):
        values = got[field][0].tolist()
        start = 0
        for d, doc in enumerate(docs):
            part = values[start : start + len(doc)]
            want = list(range(len(doc))) if field == "position_ids" else [sep, *doc[1:]]
            if part != want:
                where = f"document {d + 1} of {len(docs)} ({doc})"
                return Mistake(
                    _named(case, field, d, part, want),
                    f"On {case.label}, `{field}` of {where} are {part}; expected {want}.",
                )
            start += len(doc)
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

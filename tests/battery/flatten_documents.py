"""Battery for ``flatten_documents`` (lesson 09): what learners write for a padding-free batch.

The statement a learner sees: ``my_flatten_documents(docs, *, separator_id=-100)``, ``docs`` a
list of documents (lists of token ids); return ``input_ids``, ``labels`` and ``position_ids``,
each a ``(1, N)`` ``torch.long`` tensor, exactly as
``DataCollatorWithFlattening(separator_id=separator_id)`` builds them (one-token documents
included): the documents one after the other, each document's first label ``separator_id``,
positions restarting at 0; the labels unshifted.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from transformers import DataCollatorWithFlattening

from battery._attempt import correct, wrong


def _row(values, dtype=torch.long):
    return torch.tensor([list(values)], dtype=dtype)  # (1, N)


def _pack(ids, labels, positions):
    return {"input_ids": _row(ids), "labels": _row(labels), "position_ids": _row(positions)}


# ---------------------------------------------------------------- wrong attempts


@wrong("positions_not_restarted", says="restart")
def numbers_straight_through(docs, *, separator_id=-100):
    """position_ids 0 .. N-1 through the whole row, as for one long text."""
    ids = [t for doc in docs for t in doc]
    labels = [t for doc in docs for t in [separator_id, *doc[1:]]]
    return _pack(ids, labels, range(len(ids)))  # one long text: 0 .. N-1


@wrong("positions_from_one", says="from 0")
def positions_from_one(docs, *, separator_id=-100):
    """position_ids restart for each document but count 1, 2, ... (range(1, len + 1))."""
    ids = [t for doc in docs for t in doc]
    labels = [t for doc in docs for t in [separator_id, *doc[1:]]]
    positions = [p for doc in docs for p in range(1, len(doc) + 1)]
    return _pack(ids, labels, positions)


@wrong("positions_from_one")
def later_docs_from_one(docs, *, separator_id=-100):
    """Takes the index of the previous document's last token as the next one's start: the first
    document counts from 0, every later one from 1."""
    ids, labels, positions = [], [], []
    last = 0  # index of the previous document's last token, taken for this document's start
    for doc in docs:
        start = len(ids)
        positions += [i - last for i in range(start, start + len(doc))]
        ids += doc
        labels += [separator_id, *doc[1:]]
        last = len(ids) - 1
    return _pack(ids, labels, positions)


@wrong("no_separator", says="separator_id")
def labels_are_input_ids(docs, *, separator_id=-100):
    """Labels = input_ids ('the model shifts'): the last token of each document is trained to
    predict the first of the next."""
    ids = [t for doc in docs for t in doc]
    positions = [p for doc in docs for p in range(len(doc))]
    return _pack(ids, list(ids), positions)  # "the model shifts, nothing else to do"


@wrong("no_separator")
def separator_only_at_row_start(docs, *, separator_id=-100):
    """Replaces the first label of the whole row by separator_id, not each document's: right for one
    document, a cross-document target at every later boundary."""
    ids = [t for doc in docs for t in doc]
    positions = [p for doc in docs for p in range(len(doc))]
    return _pack(ids, [separator_id, *ids[1:]], positions)  # the row's first label only


@wrong("separator_at_end", says="*first* token")
def separator_at_doc_end(docs, *, separator_id=-100):
    """Puts separator_id on each document's last label (doc[:-1] + [sep]) instead of its first."""
    ids = [t for doc in docs for t in doc]
    labels = [t for doc in docs for t in [*doc[:-1], separator_id]]
    positions = [p for doc in docs for p in range(len(doc))]
    return _pack(ids, labels, positions)


@wrong("flatten_shifts_labels", says="unshifted")
def pre_shifted_labels(docs, *, separator_id=-100):
    """Shifts the labels itself (doc[1:] + [sep]): the model shifts again."""
    ids = [t for doc in docs for t in doc]
    labels = [t for doc in docs for t in [*doc[1:], separator_id]]  # labels[t] = ids[t + 1]
    positions = [p for doc in docs for p in range(len(doc))]
    return _pack(ids, labels, positions)


@wrong("ignores_separator_id", says="separator_id")
def hard_coded_minus_100(docs, *, separator_id=-100):
    """Writes -100 as each first label whatever separator_id is passed."""
    ids = [t for doc in docs for t in doc]
    labels = [t for doc in docs for t in [-100, *doc[1:]]]
    positions = [p for doc in docs for p in range(len(doc))]
    return _pack(ids, labels, positions)


@wrong("no_separator")
def separators_at_ends_of_lengths(docs, *, separator_id=-100):
    """Vectorised, puts separator_id at cumsum(lengths)[:-1], the starts of documents 1, 2, ... but
    forgets document 0 (its first label stays its token id)."""
    lengths = torch.tensor([len(doc) for doc in docs])
    ids = torch.tensor([t for doc in docs for t in doc])  # (N,)
    labels = ids.clone()
    labels[torch.cumsum(lengths, 0)[:-1]] = separator_id  # the starts of documents 1, 2, ...
    starts = torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    positions = torch.arange(len(ids)) - starts
    return {"input_ids": ids[None], "labels": labels[None], "position_ids": positions[None]}


@wrong(says="of document 1 of 3 ([5, 6, 7, 8]) are [-100, 6, 7, -100]; expected [-100, 6, 7, 8]")
def also_ignores_last_token(docs, *, separator_id=-100):
    """Also sets -100 on each document's last label ('the last token has no next token'): after the
    model's shift the second-to-last token loses its target."""
    ids = [t for doc in docs for t in doc]
    labels = []
    for doc in docs:  # "the last token has no next token": -100 on it too
        labels += [separator_id, *doc[1:-1], -100] if len(doc) > 1 else [separator_id]
    positions = [p for doc in docs for p in range(len(doc))]
    return _pack(ids, labels, positions)


@wrong("flatten_wrong_ids")
def skips_one_token_docs(docs, *, separator_id=-100):
    """Drops one-token documents ('no target in them'): their tokens are missing from input_ids."""
    docs = [doc for doc in docs if len(doc) > 1]  # "a one-token document has no target"
    ids = [t for doc in docs for t in doc]
    labels = [t for doc in docs for t in [separator_id, *doc[1:]]]
    positions = [p for doc in docs for p in range(len(doc))]
    return _pack(ids, labels, positions)


@wrong("flatten_wrong_ids", says="one after the other")
def separator_token_between_docs(docs, *, separator_id=-100):
    """Inserts separator_id into input_ids between documents, like an end-of-text token."""
    ids, labels, positions = [], [], []
    for i, doc in enumerate(docs):
        if i:  # mark the boundary in the ids as well, like group_texts' end-of-text token
            ids.append(separator_id)
            labels.append(separator_id)
            positions.append(0)
        ids += doc
        labels += [separator_id, *doc[1:]]
        positions += range(len(doc))
    return _pack(ids, labels, positions)


@wrong("positions_not_restarted")
def restarts_at_first_token_value(docs, *, separator_id=-100):
    """Finds document starts by the value of the first document's first token (assumes every
    document starts with the same [CLS]): positions do not restart where a document starts with
    another token, and restart inside one that contains it."""
    ids = torch.tensor([t for doc in docs for t in doc])  # (N,)
    labels = torch.tensor([t for doc in docs for t in [separator_id, *doc[1:]]])
    starts = (ids == docs[0][0]).long()  # "every document starts with [CLS]"
    doc_index = torch.cumsum(starts, 0)
    first = torch.zeros(int(doc_index.max()) + 1, dtype=torch.long)
    first.scatter_reduce_(0, doc_index, torch.arange(len(ids)), reduce="amin", include_self=False)
    positions = torch.arange(len(ids)) - first[doc_index]
    return {"input_ids": ids[None], "labels": labels[None], "position_ids": positions[None]}


@wrong(says="`position_ids` of document 1 of 2 ([7, 0, 9]) are [0, 0, 1]; expected [0, 1, 2]")
def restarts_at_separator_labels(docs, *, separator_id=-100):
    """Restarts the positions wherever a label equals separator_id: right for -100, but with a
    separator_id that is also a token of a document, positions restart inside it."""
    ids = [t for doc in docs for t in doc]
    labels = [t for doc in docs for t in [separator_id, *doc[1:]]]
    positions, p = [], 0
    for label in labels:  # the separator label marks where a document starts ...
        p = 0 if label == separator_id else p + 1  # ... or a token equal to separator_id
        positions.append(p)
    return _pack(ids, labels, positions)


@wrong("modifies_input")
def edits_the_documents(docs, *, separator_id=-100):
    """Writes separator_id into the caller's documents (doc[0] = separator_id) to build labels."""
    ids = [t for doc in docs for t in doc]
    labels, positions = [], []
    for doc in docs:
        doc[0] = separator_id  # the caller's document, not a copy
        labels += doc
        positions += range(len(doc))
    return _pack(ids, labels, positions)


@wrong("wrong_dtype")
def flash_style_int32_positions(docs, *, separator_id=-100):
    """position_ids as int32 (torch.arange(..., dtype=torch.int32), as flash-attention's cu_seqlens
    are); the statement says torch.long."""
    ids = [t for doc in docs for t in doc]
    labels = [t for doc in docs for t in [separator_id, *doc[1:]]]
    positions = torch.cat([torch.arange(len(doc), dtype=torch.int32) for doc in docs])
    return {"input_ids": _row(ids), "labels": _row(labels), "position_ids": positions[None]}


@wrong("wrong_shape")
def one_dim_positions(docs, *, separator_id=-100):
    """position_ids of shape (N,) (torch.cat of aranges, no [None]), the others (1, N)."""
    ids = [t for doc in docs for t in doc]
    labels = [t for doc in docs for t in [separator_id, *doc[1:]]]
    positions = torch.cat([torch.arange(len(doc)) for doc in docs])  # (N,): no batch dim
    return {"input_ids": _row(ids), "labels": _row(labels), "position_ids": positions}


@wrong("wrong_keys")
def adds_attention_mask(docs, *, separator_id=-100):
    """Adds an attention_mask of ones, a key the collator does not return (and which, as the lesson
    measures, makes attention leak)."""
    batch = _pack(
        [t for doc in docs for t in doc],
        [t for doc in docs for t in [separator_id, *doc[1:]]],
        [p for doc in docs for p in range(len(doc))],
    )
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])  # "a batch has a mask"
    return batch


@wrong("wrong_type")
def returns_lists(docs, *, separator_id=-100):
    """Returns nested Python lists instead of tensors."""
    return {
        "input_ids": [[t for doc in docs for t in doc]],
        "labels": [[t for doc in docs for t in [separator_id, *doc[1:]]]],
        "position_ids": [[p for doc in docs for p in range(len(doc))]],
    }


@wrong("raised_exception")
def stacks_documents(docs, *, separator_id=-100):
    """torch.tensor(docs).reshape(1, -1): works only when every document has the same length, raises
    on ragged documents."""
    ids = torch.tensor(docs, dtype=torch.long).reshape(1, -1)  # needs equal lengths
    labels = ids.clone()
    labels[0, :: len(docs[0])] = separator_id
    positions = torch.arange(len(docs[0])).repeat(len(docs))[None]
    return {"input_ids": ids, "labels": labels, "position_ids": positions}


@wrong("flatten_shifts_labels")
def shifts_the_row(docs, *, separator_id=-100):
    """Shifts the flat row itself (labels[t] = input_ids[t + 1], separator_id at the very end): pre-
    shifted, and the last token of each document targets the next document's first."""
    ids = [t for doc in docs for t in doc]
    labels = [*ids[1:], separator_id]  # next-token targets of the flat row, sep after the last
    positions = [p for doc in docs for p in range(len(doc))]
    return _pack(ids, labels, positions)


@wrong("flatten_wrong_ids")
def labels_alias_ids(docs, *, separator_id=-100):
    """Labels = ids without .clone(), then labels[0, starts] = separator_id: the separators are
    written into input_ids too."""
    lengths = torch.tensor([len(doc) for doc in docs])
    ids = torch.tensor([[t for doc in docs for t in doc]])  # (1, N)
    starts = torch.cumsum(lengths, 0) - lengths
    labels = ids  # no .clone(): the same tensor
    labels[0, starts] = separator_id  # writes into input_ids too
    positions = torch.arange(ids.shape[1]) - torch.repeat_interleave(starts, lengths)
    return {"input_ids": ids, "labels": labels, "position_ids": positions[None]}


@wrong("no_separator")
def one_token_doc_keeps_label(docs, *, separator_id=-100):
    """Keeps a one-token document's only label as its token id ('nothing to separate'): the previous
    document's last token is trained to predict it."""
    ids = [t for doc in docs for t in doc]
    labels = []
    for doc in docs:  # "a one-token document has no boundary inside it to protect"
        labels += [separator_id, *doc[1:]] if len(doc) > 1 else list(doc)
    positions = [p for doc in docs for p in range(len(doc))]
    return _pack(ids, labels, positions)


# ---------------------------------------------------------------- correct attempts


@correct
def loops(docs, *, separator_id=-100):
    """One loop over documents and tokens, three lists, enumerate for the position."""
    ids, labels, positions = [], [], []
    for doc in docs:
        for i, token in enumerate(doc):
            ids.append(token)
            labels.append(separator_id if i == 0 else token)
            positions.append(i)
    return _pack(ids, labels, positions)


@correct
def vectorised(docs, *, separator_id=-100):
    """Torch: cumsum of lengths for the starts, repeat_interleave for the positions, index
    assignment for the separators."""
    lengths = torch.tensor([len(doc) for doc in docs], dtype=torch.long)  # (D,)
    ids = torch.cat([torch.as_tensor(doc, dtype=torch.long) for doc in docs])  # (N,)
    starts = torch.cumsum(lengths, 0) - lengths  # (D,): index of each document's first token
    labels = ids.clone()
    labels[starts] = separator_id
    positions = torch.arange(ids.numel()) - torch.repeat_interleave(starts, lengths)  # (N,)
    return {"input_ids": ids[None], "labels": labels[None], "position_ids": positions[None]}


@correct
def with_transformers(docs, *, separator_id=-100):
    """Calls DataCollatorWithFlattening(separator_id=...) itself."""
    collator = DataCollatorWithFlattening(separator_id=separator_id)
    return collator([{"input_ids": list(doc)} for doc in docs], return_tensors="pt")


@correct
def with_numpy_and_itertools(docs, *, separator_id=-100):
    """Numpy int64 arrays built with itertools.chain and accumulate, converted with
    torch.from_numpy."""
    lengths = [len(doc) for doc in docs]
    ends = list(itertools.accumulate(lengths))
    ids = np.fromiter(itertools.chain.from_iterable(docs), dtype=np.int64, count=ends[-1])
    labels = ids.copy()
    labels[np.array(ends) - np.array(lengths)] = separator_id
    positions = np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])
    return {
        k: torch.from_numpy(v)[None]
        for k, v in (("input_ids", ids), ("labels", labels), ("position_ids", positions))
    }


# -------------------------------------------------- first drafts and other naive versions


@wrong("positions_not_restarted")
def draft_as_written(docs, *, separator_id=-100):
    """A first draft: concatenate, copy the ids as labels, number the positions straight through."""
    ids = [t for d in docs for t in d]
    return _pack(ids, list(ids), list(range(len(ids))))


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.packing.flatten_documents")
def the_course_flatten_documents(docs, *, separator_id=-100):
    """Calls the course's own flatten_documents: nothing written."""
    from lmlessons.packing import flatten_documents

    return flatten_documents(docs, separator_id=separator_id)


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(docs, *, separator_id=-100):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises.solutions_part2 import flatten_documents

    return flatten_documents(docs, separator_id=separator_id)

"""Battery for ``flatten_documents`` (lesson 09): what learners write for a padding-free batch.

The statement a learner sees: ``my_flatten_documents(docs, *, separator_id=-100)``, ``docs`` a
list of documents (lists of token ids); return ``input_ids``, ``labels`` and ``position_ids``,
each a ``(1, N)`` ``torch.long`` tensor, exactly as
``DataCollatorWithFlattening(separator_id=separator_id)`` builds them (one-token documents
included): the documents one after the other, each document's first label ``separator_id``,
positions restarting at 0; the labels unshifted.

The known mistakes made on every document (positions straight through or from 1, labels equal
to the ids, shifted, -100 hard-coded, the separator at the end) are the checker's catalogue; the
structural ones (an edited input, lists, another dtype, the reference) are
``battery/_structural.py``. Here: those mistakes made at some documents only, other ways to get
the ids, shape or keys wrong, and correct alternatives.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from transformers import DataCollatorWithFlattening

from battery._attempt import correct, wrong

KEYS = ("input_ids", "labels", "position_ids")


def _pack(ids, labels, positions):
    return {k: torch.tensor([list(v)]) for k, v in zip(KEYS, (ids, labels, positions))}  # (1, N)


def _ids(docs):
    return [t for doc in docs for t in doc]


def _labels(docs, separator_id):
    return [t for doc in docs for t in [separator_id, *doc[1:]]]


def _positions(docs):
    return [p for doc in docs for p in range(len(doc))]


# ---------------------------------------------------------------- wrong attempts


@wrong("positions_from_one")
def later_docs_from_one(docs, *, separator_id=-100):
    """Takes the index of the previous document's last token as the next one's start: the first
    document counts from 0, every later one from 1."""
    positions, last = [], 0  # index of the previous document's last token
    for doc in docs:
        start = len(positions)
        positions += [i - last for i in range(start, start + len(doc))]
        last = len(positions) - 1
    return _pack(_ids(docs), _labels(docs, separator_id), positions)


@wrong("no_separator")
def separator_only_at_row_start(docs, *, separator_id=-100):
    """Replaces the first label of the whole row by separator_id, not each document's: right for one
    document, a cross-document target at every later boundary."""
    ids = _ids(docs)
    return _pack(ids, [separator_id, *ids[1:]], _positions(docs))  # the row's first label only


@wrong("no_separator")
def separators_at_ends_of_lengths(docs, *, separator_id=-100):
    """Vectorised, puts separator_id at cumsum(lengths)[:-1], the starts of documents 1, 2, ... but
    forgets document 0 (its first label stays its token id)."""
    lengths = torch.tensor([len(doc) for doc in docs])
    ids = torch.tensor(_ids(docs))  # (N,)
    labels = ids.clone()
    labels[torch.cumsum(lengths, 0)[:-1]] = separator_id  # the starts of documents 1, 2, ...
    starts = torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    positions = torch.arange(len(ids)) - starts
    return {"input_ids": ids[None], "labels": labels[None], "position_ids": positions[None]}


@wrong("no_separator")
def one_token_doc_keeps_label(docs, *, separator_id=-100):
    """Keeps a one-token document's only label as its token id ('nothing to separate'): the previous
    document's last token is trained to predict it."""
    labels = [t for doc in docs for t in ([separator_id, *doc[1:]] if len(doc) > 1 else doc)]
    return _pack(_ids(docs), labels, _positions(docs))


@wrong(says="of document 1 of 3 ([5, 6, 7, 8]) are [-100, 6, 7, -100]; expected [-100, 6, 7, 8]")
def also_ignores_last_token(docs, *, separator_id=-100):
    """Also sets -100 on each document's last label ('the last token has no next token'): after the
    model's shift the second-to-last token loses its target."""
    labels = []
    for doc in docs:  # "the last token has no next token": -100 on it too
        labels += [separator_id, *doc[1:-1], -100] if len(doc) > 1 else [separator_id]
    return _pack(_ids(docs), labels, _positions(docs))


@wrong("flatten_shifts_labels")
def shifts_and_pads_with_zero(docs, *, separator_id=-100):
    """Shifts each document's labels itself and fills the last one with 0, a padding id."""
    labels = [t for doc in docs for t in [*doc[1:], 0]]
    return _pack(_ids(docs), labels, _positions(docs))


@wrong("positions_not_restarted")
def restarts_at_first_token_value(docs, *, separator_id=-100):
    """Finds document starts by the value of the first document's first token (assumes every
    document starts with the same [CLS]): positions do not restart where a document starts with
    another token, and restart inside one that contains it."""
    ids = torch.tensor(_ids(docs))  # (N,)
    doc_index = torch.cumsum((ids == docs[0][0]).long(), 0)  # "every document starts with [CLS]"
    first = torch.zeros(int(doc_index.max()) + 1, dtype=torch.long)
    first.scatter_reduce_(0, doc_index, torch.arange(len(ids)), reduce="amin", include_self=False)
    positions = torch.arange(len(ids)) - first[doc_index]  # (N,)
    return _pack(ids.tolist(), _labels(docs, separator_id), positions.tolist())


@wrong(says="`position_ids` of document 1 of 2 ([7, 0, 9]) are [0, 0, 1]; expected [0, 1, 2]")
def restarts_at_separator_labels(docs, *, separator_id=-100):
    """Restarts the positions wherever a label equals separator_id: right for -100, but with a
    separator_id that is also a token of a document, positions restart inside it."""
    labels = _labels(docs, separator_id)
    positions, p = [], 0
    for label in labels:  # the separator label marks where a document starts ...
        p = 0 if label == separator_id else p + 1  # ... or a token equal to separator_id
        positions.append(p)
    return _pack(_ids(docs), labels, positions)


@wrong("positions_not_restarted")
def draft_as_written(docs, *, separator_id=-100):
    """A first draft: concatenate, copy the ids as labels, number the positions straight through."""
    ids = _ids(docs)
    return _pack(ids, list(ids), list(range(len(ids))))


@wrong("flatten_wrong_ids")
def skips_one_token_docs(docs, *, separator_id=-100):
    """Drops one-token documents ('no target in them'): their tokens are missing from input_ids."""
    docs = [doc for doc in docs if len(doc) > 1]  # "a one-token document has no target"
    return _pack(_ids(docs), _labels(docs, separator_id), _positions(docs))


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


@wrong("flatten_wrong_ids")
def labels_alias_ids(docs, *, separator_id=-100):
    """Labels = ids without .clone(), then labels[0, starts] = separator_id: the separators are
    written into input_ids too."""
    lengths = torch.tensor([len(doc) for doc in docs])
    ids = torch.tensor([_ids(docs)])  # (1, N)
    starts = torch.cumsum(lengths, 0) - lengths
    labels = ids  # no .clone(): the same tensor
    labels[0, starts] = separator_id  # writes into input_ids too
    positions = torch.arange(ids.shape[1]) - torch.repeat_interleave(starts, lengths)
    return {"input_ids": ids, "labels": labels, "position_ids": positions[None]}


@wrong("wrong_shape")
def one_dim_positions(docs, *, separator_id=-100):
    """position_ids of shape (N,) (torch.cat of aranges, no [None]), the others (1, N)."""
    batch = _pack(_ids(docs), _labels(docs, separator_id), _positions(docs))
    batch["position_ids"] = torch.cat([torch.arange(len(doc)) for doc in docs])  # (N,)
    return batch


@wrong("wrong_keys")
def adds_attention_mask(docs, *, separator_id=-100):
    """Adds an attention_mask of ones, a key the collator does not return (and which, as the lesson
    measures, makes attention leak)."""
    batch = _pack(_ids(docs), _labels(docs, separator_id), _positions(docs))
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])  # "a batch has a mask"
    return batch


@wrong("raised_exception")
def stacks_documents(docs, *, separator_id=-100):
    """torch.tensor(docs).reshape(1, -1): works only when every document has the same length, raises
    on ragged documents."""
    ids = torch.tensor(docs, dtype=torch.long).reshape(1, -1)  # needs equal lengths
    labels = ids.clone()
    labels[0, :: len(docs[0])] = separator_id
    positions = torch.arange(len(docs[0])).repeat(len(docs))[None]
    return {"input_ids": ids, "labels": labels, "position_ids": positions}


@wrong("delegates_to_course", says="lmlessons.packing.flatten_documents")
def the_course_flatten_documents(docs, *, separator_id=-100):
    """Calls the course's own flatten_documents: nothing written."""
    from lmlessons.packing import flatten_documents

    return flatten_documents(docs, separator_id=separator_id)


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
    return {k: torch.from_numpy(v)[None] for k, v in zip(KEYS, (ids, labels, positions))}

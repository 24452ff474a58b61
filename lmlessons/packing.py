"""Three ways to put documents into a causal-LM batch, and the document boundaries each leaves.

:func:`pad` is the one padding function of the package (TRL's ``pad``): ids, labels and masks
are all padded with it.

1. :func:`pad_documents`: one row per document, padded to the longest; ``labels`` are the ids
   with -100 on padding (the batch of ``DataCollatorForLanguageModeling(mlm=False)``).
2. :func:`group_texts`: every document followed by an end-of-text token, all concatenated and
   cut into blocks of ``block_size`` (``group_texts`` of Hugging Face's ``run_clm.py`` and LLM
   course, with the separator nanoGPT's ``prepare.py`` appends). Attention crosses boundaries.
3. :func:`flatten_documents`: padding-free, all documents in one row ``(1, N)`` with
   ``position_ids`` restarting at 0 and the separator as the first label of each document
   (transformers' ``DataCollatorWithFlattening``).

:func:`document_ids` and :func:`block_causal_mask` read the boundaries back from
``position_ids`` (transformers' ``find_packed_sequence_indices`` in ``masking_utils.py``);
:func:`padded_position_ids` numbers the real tokens of a padded row as ``generate`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lmlessons._checks import IGNORE_INDEX, check_int, check_int_tensor

__all__ = [
    "pad",
    "pad_documents",
    "group_texts",
    "flatten_documents",
    "document_ids",
    "block_causal_mask",
    "padded_position_ids",
]

Documents = Sequence[Sequence[int] | torch.Tensor]
PADDING_SIDES = ("right", "left")


def _check_row(name: str, row: object) -> list[int]:
    """One row of int ids: a list of ints or a 1-D integer tensor. Returns a new list."""
    if isinstance(row, torch.Tensor):
        row = check_int_tensor(name, row, ndim=1).tolist()
    if not isinstance(row, Sequence) or isinstance(row, (str, bytes)):
        raise TypeError(f"{name} must be a list of token ids, got {type(row).__name__}")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in row):
        raise TypeError(f"{name} must hold int token ids")
    return list(row)


def _check_documents(name: str, docs: object, *, min_length: int = 1) -> list[list[int]]:
    """A non-empty list of documents, each a list (or 1-D tensor) of at least ``min_length`` int
    ids. Returns new lists."""
    if not isinstance(docs, Sequence) or isinstance(docs, (str, bytes)):
        raise TypeError(f"{name} must be a list of token-id lists, got {type(docs).__name__}")
    if len(docs) == 0:
        raise ValueError(f"{name} must hold at least one document, got an empty list")
    out = [_check_row(f"{name}[{i}]", doc) for i, doc in enumerate(docs)]
    for i, row in enumerate(out):
        if len(row) < min_length:
            raise ValueError(
                f"{name}[{i}] must hold at least {min_length} token(s), got {len(row)}"
            )
    return out


def pad(rows: Documents, padding_value: int, *, padding_side: str = "right") -> torch.Tensor:
    """The rows in one ``(B, T)`` long tensor, ``T`` the longest row, the rest ``padding_value``.

    ``rows``: at least one row, each a list of ints or a 1-D integer tensor; an empty row is
    allowed (all padding), as in TRL. Pad ``input_ids`` with the pad id, ``labels`` with -100 and
    masks with 0. Equals TRL's ``trl.trainer.utils.pad`` on 1-D rows (without its
    ``pad_to_multiple_of``); ``padding_side="left"`` puts the padding first (as for generation).
    """
    # 1. Validate: every row a list of ints, the side one of two.
    checked = _check_documents("rows", rows, min_length=0)
    padding_value = check_int("padding_value", padding_value)
    if padding_side not in PADDING_SIDES:
        raise ValueError(f"padding_side must be one of {PADDING_SIDES}, got {padding_side!r}")
    # 2. A block of padding, each row written at its end (left) or start (right).
    width = max(len(r) for r in checked)
    out = torch.full((len(checked), width), padding_value, dtype=torch.long)  # (B, T)
    for i, row in enumerate(checked):
        start = 0 if padding_side == "right" else width - len(row)
        out[i, start : start + len(row)] = torch.tensor(row, dtype=torch.long)  # (len(row),)
    return out


def pad_documents(
    docs: Documents, *, pad_token_id: int, padding_side: str = "right"
) -> dict[str, torch.Tensor]:
    """One row per document, padded: ``input_ids``, ``attention_mask`` and ``labels``, ``(B, T)``.

    ``labels`` are the ids with -100 on padding (unshifted: the model shifts), each of the three
    padded by :func:`pad`, so a real token equal to ``pad_token_id`` keeps its label.
    ``padding_side="left"`` puts the padding first (as for generation); then pass
    :func:`padded_position_ids` too, or the real tokens get shifted positions.
    """
    rows = _check_documents("docs", docs)
    pad_token_id = check_int("pad_token_id", pad_token_id, minimum=0)
    side = padding_side
    return {
        "input_ids": pad(rows, pad_token_id, padding_side=side),  # (B, T)
        "attention_mask": pad([[1] * len(r) for r in rows], 0, padding_side=side),  # (B, T)
        "labels": pad(rows, IGNORE_INDEX, padding_side=side),  # (B, T)
    }


def group_texts(
    docs: Documents, block_size: int, *, eos_token_id: int | None
) -> dict[str, torch.Tensor]:
    """Concatenate the documents, each followed by ``eos_token_id``, and cut blocks of
    ``block_size``: ``input_ids`` and ``labels`` (a copy), ``(num_blocks, block_size)``.

    Like ``group_texts`` in transformers' ``run_clm.py`` and the LLM course, the last
    ``total % block_size`` tokens are dropped. ``eos_token_id=None`` appends nothing (what
    ``run_clm.py`` gets from a tokenizer that adds no end-of-text token): then no target ever
    marks where a document ends. No position restarts and no mask: a block's attention runs
    across document boundaries.
    """
    rows = _check_documents("docs", docs)
    block_size = check_int("block_size", block_size, minimum=1)
    if eos_token_id is not None:
        eos_token_id = check_int("eos_token_id", eos_token_id, minimum=0)
    # 1. concatenate, with the end-of-text token after every document
    stream = [t for row in rows for t in (row + ([] if eos_token_id is None else [eos_token_id]))]
    # 2. drop the remainder, then cut into blocks
    num_blocks = len(stream) // block_size
    if num_blocks == 0:
        raise ValueError(
            f"block_size must be at most the {len(stream)} tokens of the concatenated docs, "
            f"got {block_size}"
        )
    input_ids = torch.tensor(stream[: num_blocks * block_size], dtype=torch.long)
    input_ids = input_ids.view(num_blocks, block_size)  # (num_blocks, block_size)
    return {"input_ids": input_ids, "labels": input_ids.clone()}


def flatten_documents(
    docs: Documents,
    *,
    labels: Documents | None = None,
    separator_id: int = IGNORE_INDEX,
) -> dict[str, torch.Tensor]:
    """Padding-free packing: ``input_ids``, ``labels`` and ``position_ids``, each ``(1, N)``
    with N the total number of tokens, exactly as ``DataCollatorWithFlattening()(features)``.

    1. ``input_ids``: the documents one after the other, no padding, no separator token;
    2. ``labels``: each document's ids (or its ``labels``, e.g. -100 on a prompt), with the
       first one replaced by ``separator_id``: the last token of a document is not trained to
       predict the first token of the next;
    3. ``position_ids``: 0, 1, ... restarting at 0 for every document, so the model (and
       transformers' mask code) can tell where documents start.
    """
    rows = _check_documents("docs", docs)
    separator_id = check_int("separator_id", separator_id)
    label_rows = rows if labels is None else _check_documents("labels", labels)
    if [len(r) for r in label_rows] != [len(r) for r in rows]:
        raise ValueError("labels must hold one label per token of each document of docs")
    ids = [t for row in rows for t in row]
    targets = [t for row in label_rows for t in [separator_id, *row[1:]]]
    positions = [p for row in rows for p in range(len(row))]
    return {
        "input_ids": torch.tensor([ids], dtype=torch.long),  # (1, N)
        "labels": torch.tensor([targets], dtype=torch.long),  # (1, N)
        "position_ids": torch.tensor([positions], dtype=torch.long),  # (1, N)
    }


def _check_position_ids(position_ids: object) -> torch.Tensor:
    ids = check_int_tensor("position_ids", position_ids)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[1] < 1:
        raise ValueError(
            f"position_ids must have shape (N,) or (B, N) with N >= 1, got {tuple(ids.shape)}"
        )
    return ids


def document_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """The index of the document of each token, ``(B, N)``: a new document starts wherever a
    position is not the previous one plus 1. transformers' ``find_packed_sequence_indices``,
    except that one document gives zeros here (it returns None then)."""
    ids = _check_position_ids(position_ids)  # (B, N)
    step = torch.diff(ids, prepend=ids[:, :1] - 1, dim=-1)  # (B, N): 1 inside a document
    return (step != 1).long().cumsum(-1)  # (B, N)


def block_causal_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """``(B, N, N)`` bool, True where query i may attend key j: ``j <= i`` in the same document.

    The mask transformers builds for packed ``position_ids`` (``packed_sequence_mask_function``
    and the causal mask); a plain causal mask is the same without the document test."""
    doc = document_ids(position_ids)  # (B, N)
    n = doc.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # (N, N)
    same_doc = doc[:, :, None] == doc[:, None, :]  # (B, N, N)
    return causal & same_doc  # (B, N, N)


def padded_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions 0, 1, ... of the real tokens of each row, 0 on padding, ``(B, T)``: what
    ``generate`` passes for a left-padded batch (``attention_mask.cumsum(-1) - 1``)."""
    mask = check_int_tensor("attention_mask", attention_mask, ndim=2)
    positions = mask.long().cumsum(-1) - 1  # (B, T)
    return positions.masked_fill(mask == 0, 0)  # (B, T)

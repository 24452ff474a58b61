"""Shared by the widget tests (test_widgets_*.py): what a LessonWidget shows (its marker line,
the fields of that line, its HTML and PNG outputs) and what the masking widgets should show."""

from __future__ import annotations

import torch

from lmlessons import mask_tokens

MARKER = "[widget] "


def shown_marker(box) -> str:
    """The widget's marker line: the one line of its stream outputs that starts with
    ``[widget] ``."""
    lines = [
        line.strip()
        for o in box.output.outputs
        if o.get("output_type") == "stream"
        for line in o["text"].splitlines()
        if line.startswith(MARKER)
    ]
    assert len(lines) == 1, lines
    return lines[0]


def marker_fields(line: str) -> dict[str, str]:
    """``{"key": "value"}`` of a marker line ``[widget] key=value ...``."""
    assert line.startswith(MARKER), line
    return dict(kv.split("=", 1) for kv in line.removeprefix(MARKER).split())


def _joined(box, mime: str) -> str:
    return "".join(o["data"][mime] for o in box.output.outputs if mime in o.get("data", {}))


def shown_html(box) -> str:
    """Every ``text/html`` output of the widget, joined."""
    return _joined(box, "text/html")


def shown_png(box) -> str:
    """Every ``image/png`` output of the widget (base64), joined."""
    return _joined(box, "image/png")


def mask_sentence(tokenizer, text: str, seed: int, **probabilities: float):
    """``text`` masked as the widgets mask it: ``(ids, special, masked, labels)``, each ``(T,)``,
    from :func:`lmlessons.mask_tokens` on the ``(1, T)`` batch with a generator seeded ``seed``."""
    ids = torch.tensor(tokenizer(text)["input_ids"])
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
    masked, labels = mask_tokens(
        ids[None],
        mask_token_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        special_tokens_mask=special[None],
        generator=torch.Generator().manual_seed(seed),
        **probabilities,
    )
    return ids, special, masked[0], labels[0]

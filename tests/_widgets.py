"""Shared by the widget tests (test_widgets_*.py): what a LessonWidget shows (its hidden state
``key=value ...``, the fields of that state, its HTML and PNG outputs) and what the masking widgets
should show."""

from __future__ import annotations

import html

import torch

from lmlessons import mask_tokens
from lmlessons.widgets.display import STATE_CLASS, is_state


def shown_marker(box) -> str:
    """The widget's state ``key=value ...``: the one hidden state record of its output (no
    ``[widget]`` line is printed any more), checked against its HTML ``data-state``."""
    states = [o for o in box.output.outputs if is_state(o)]
    assert len(states) == 1, box.output.outputs
    state = states[0]["metadata"]["lmlessons_state"]
    markup = states[0]["data"]["text/html"]
    assert f'class="{STATE_CLASS}"' in markup and " hidden>" in markup, markup
    assert html.unescape(markup.split('data-state="', 1)[1].split('"', 1)[0]) == state
    assert box.state == state
    streams = [o["text"] for o in box.output.outputs if o.get("output_type") == "stream"]
    assert not any("[widget]" in text for text in streams), streams
    return state


def marker_fields(line: str) -> dict[str, str]:
    """``{"key": "value"}`` of a state ``key=value ...``."""
    assert not line.startswith("[widget]"), line
    return dict(kv.split("=", 1) for kv in line.split())


def _joined(box, mime: str) -> str:
    return "".join(
        o["data"][mime] for o in box.output.outputs if mime in o.get("data", {}) and not is_state(o)
    )


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

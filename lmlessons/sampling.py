"""Sampling text from a causal language model, one token at a time, seeded.

The loop is the definition of autoregressive generation (the loop of minGPT's ``generate``):
score the next token from everything so far, draw one, append it, repeat. It recomputes the
whole prefix at every step (no key/value cache): slower than ``model.generate`` but short, it
works for every model of the course, including a ``BertLMHeadModel`` built with
``is_decoder=False``, and it takes a ``torch.Generator`` so a notebook prints the same text on
every run.
"""

from __future__ import annotations

from typing import Any

import torch

from lmlessons._checks import check_generator, check_int, check_model, check_sequences

__all__ = ["sample", "sample_text"]


def _max_positions(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for attr in ("max_position_embeddings", "n_positions"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _next_token(
    logits: torch.Tensor, temperature: float, top_k: int | None, g: torch.Generator | None
) -> torch.Tensor:
    """``(B,)`` ids from the ``(B, V)`` next-token scores: the best one at ``temperature=0``,
    else a draw from ``softmax(logits / temperature)`` over the ``top_k`` best."""
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=g).squeeze(-1)  # (B,)


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    eos_token_id: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Extend ``input_ids`` ``(B, T)`` (or ``(T,)``) by up to ``max_new_tokens`` tokens.

    ``temperature=0`` picks the most likely token (greedy); otherwise the logits are divided by
    ``temperature`` and, with ``top_k``, all but the ``top_k`` best are dropped before drawing.
    Generation stops early once every row has produced ``eos_token_id``; a finished row is
    filled with ``eos_token_id``. Returns ``(B, T + n)`` ids (``(T + n,)`` for a 1-D input).
    """
    model = check_model(model)
    ids = check_sequences("input_ids", input_ids)  # (B, T)
    squeeze = input_ids.dim() == 1
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=0)
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not temperature >= 0
    ):
        raise ValueError(f"temperature must be a number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None:
        top_k = check_int("top_k", top_k, minimum=1)
    if eos_token_id is not None:
        eos_token_id = check_int("eos_token_id", eos_token_id, minimum=0)
    check_generator(generator)

    window = _max_positions(model)
    was_training = model.training
    model.eval()
    done = torch.zeros(ids.shape[0], dtype=torch.bool)  # (B,)
    try:
        for _ in range(max_new_tokens):
            context = ids if window is None else ids[:, -window:]  # the model's longest input
            logits = model(input_ids=context).logits[:, -1, :].float()  # (B, V): next token
            nxt = _next_token(logits, temperature, top_k, generator)  # (B,)
            if eos_token_id is not None:
                nxt = nxt.masked_fill(done, eos_token_id)
                done = done | (nxt == eos_token_id)
            ids = torch.cat([ids, nxt.unsqueeze(-1)], dim=1)  # (B, T + 1)
            if eos_token_id is not None and bool(done.all()):
                break
    finally:
        model.train(was_training)
    return ids[0] if squeeze else ids


def sample_text(
    model: torch.nn.Module,
    tokenizer: Any,
    prompt: str,
    *,
    max_new_tokens: int = 30,
    temperature: float = 0.8,
    top_k: int | None = 40,
    generator: torch.Generator | None = None,
) -> str:
    """Continue ``prompt`` and return the text (prompt included, special tokens dropped).

    The sequence starts like the course's training sequences (``[CLS]`` then the tokens, see
    :func:`lmlessons.course.batches.pack_sequences`) and generation stops at ``[SEP]``: the
    tokenizer's ``cls_token_id`` / ``sep_token_id``, else the model config's ``bos_token_id`` /
    ``eos_token_id``.
    """
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    config = getattr(model, "config", None)
    bos = getattr(tokenizer, "cls_token_id", None)
    eos = getattr(tokenizer, "sep_token_id", None)
    bos = bos if isinstance(bos, int) else getattr(config, "bos_token_id", None)
    eos = eos if isinstance(eos, int) else getattr(config, "eos_token_id", None)
    if not isinstance(bos, int):
        raise ValueError(
            "neither the tokenizer (cls_token_id) nor the model config (bos_token_id) names a "
            "start token"
        )
    ids = [bos, *tokenizer(prompt, add_special_tokens=False)["input_ids"]]
    out = sample(
        model,
        torch.tensor(ids),
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        eos_token_id=eos,
        generator=generator,
    )  # (T + n,)
    return tokenizer.decode(out.tolist(), skip_special_tokens=True)

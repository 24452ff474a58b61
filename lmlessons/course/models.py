"""Tiny transformers models built from configs (nothing is downloaded), sized to a tokenizer.

Each factory builds the real Hugging Face class, so everything a lesson shows about its loss and
its label conventions holds for the full-size model too:

* :func:`tiny_bert_mlm` -> ``BertForMaskedLM`` (masked-LM head only),
* :func:`tiny_bert_pretraining` -> ``BertForPreTraining`` (MLM head + NSP head, BERT's recipe),
* :func:`tiny_bert_lm_head` -> ``BertLMHeadModel``: BERT with a next-token head. With
  ``is_decoder=True`` its self-attention is causal; with ``is_decoder=False`` it is not, so each
  position can *see* the token it is asked to predict (the "leaky decoder" of lesson 04;
  transformers logs a warning then),
* :func:`tiny_gpt2` -> ``GPT2LMHeadModel``,
* :func:`tiny_mixtral` -> ``MixtralForCausalLM``: a mixture of experts (a router sends each
  token to ``num_experts_per_tok`` of ``num_local_experts`` feed-forward experts).

:func:`captured_outputs` collects what some of a model's modules (its routers, its attention
projections) output during a forward pass, the one home of the course's forward hooks.

Vocabulary size and special-token ids come from the tokenizer, never from constants. Dropout is
0 by default: tiny models trained for seconds underfit, they do not overfit, and a model without
dropout gives the same loss in ``train()`` and ``eval()`` mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from lmlessons._checks import check_int, check_tokenizer

if TYPE_CHECKING:  # imported inside the factories: importing transformers takes seconds
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        BertForPreTraining,
        BertLMHeadModel,
        GPT2Config,
        GPT2LMHeadModel,
        MixtralConfig,
        MixtralForCausalLM,
        PreTrainedTokenizerBase,
    )

__all__ = [
    "tiny_bert_config",
    "tiny_gpt2_config",
    "tiny_bert_mlm",
    "tiny_bert_pretraining",
    "tiny_bert_lm_head",
    "tiny_gpt2",
    "tiny_mixtral_config",
    "tiny_mixtral",
    "seeded_model",
    "count_parameters",
    "captured_outputs",
]

HIDDEN_SIZE = 128
NUM_LAYERS = 2
NUM_HEADS = 2
INTERMEDIATE_SIZE = 256
MAX_POSITIONS = 128
NUM_EXPERTS = 4
EXPERTS_PER_TOKEN = 2


def _tokenizer_or_default(tokenizer: PreTrainedTokenizerBase | None) -> PreTrainedTokenizerBase:
    if tokenizer is None:
        from lmlessons.course.tokenizer import load_tokenizer

        return load_tokenizer()
    return check_tokenizer(tokenizer, ("pad_token_id", "cls_token_id", "sep_token_id"))


def _check_heads(size_name: str, size: int, heads_name: str, heads: int) -> None:
    if size % heads:
        raise ValueError(f"{size_name} ({size}) must be a multiple of {heads_name} ({heads})")


def _sized_config(config_class: str, tok: PreTrainedTokenizerBase, **fields: Any) -> Any:
    """``transformers.<config_class>(**fields)`` with the tokenizer's vocabulary size and pad id,
    and eager attention (the attention the lessons print and hook into)."""
    import transformers

    return getattr(transformers, config_class)(
        vocab_size=len(tok), pad_token_id=tok.pad_token_id, attn_implementation="eager", **fields
    )


def tiny_bert_config(
    tokenizer: PreTrainedTokenizerBase | None = None,
    *,
    hidden_size: int = HIDDEN_SIZE,
    num_hidden_layers: int = NUM_LAYERS,
    num_attention_heads: int = NUM_HEADS,
    intermediate_size: int = INTERMEDIATE_SIZE,
    max_position_embeddings: int = MAX_POSITIONS,
    dropout: float = 0.0,
    is_decoder: bool = False,
    **overrides: Any,
) -> BertConfig:
    """A small ``BertConfig`` whose vocabulary and pad id are the tokenizer's (default: the course
    tokenizer). ``overrides`` go to ``BertConfig`` unchanged."""
    tok = _tokenizer_or_default(tokenizer)
    _check_heads("hidden_size", hidden_size, "num_attention_heads", num_attention_heads)
    return _sized_config(
        "BertConfig",
        tok,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        is_decoder=is_decoder,
        **overrides,
    )


def tiny_gpt2_config(
    tokenizer: PreTrainedTokenizerBase | None = None,
    *,
    n_embd: int = HIDDEN_SIZE,
    n_layer: int = NUM_LAYERS,
    n_head: int = NUM_HEADS,
    n_positions: int = MAX_POSITIONS,
    dropout: float = 0.0,
    **overrides: Any,
) -> GPT2Config:
    """A small ``GPT2Config`` for the BERT-style course tokenizer: [CLS] starts a sequence
    (``bos_token_id``), [SEP] ends it (``eos_token_id``), [PAD] pads it (``pad_token_id``)."""
    tok = _tokenizer_or_default(tokenizer)
    _check_heads("n_embd", n_embd, "n_head", n_head)
    return _sized_config(
        "GPT2Config",
        tok,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_positions=n_positions,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=tok.cls_token_id,
        eos_token_id=tok.sep_token_id,
        **overrides,
    )


def tiny_mixtral_config(
    tokenizer: PreTrainedTokenizerBase | None = None,
    *,
    hidden_size: int = HIDDEN_SIZE // 2,
    num_hidden_layers: int = NUM_LAYERS,
    num_attention_heads: int = NUM_HEADS * 2,
    num_key_value_heads: int = NUM_HEADS,
    intermediate_size: int = INTERMEDIATE_SIZE // 2,
    num_local_experts: int = NUM_EXPERTS,
    num_experts_per_tok: int = EXPERTS_PER_TOKEN,
    max_position_embeddings: int = MAX_POSITIONS,
    **overrides: Any,
) -> MixtralConfig:
    """A small ``MixtralConfig`` for the BERT-style course tokenizer ([CLS] as ``bos_token_id``,
    [SEP] as ``eos_token_id``, [PAD] as ``pad_token_id``, as :func:`tiny_gpt2_config`): 4
    experts, each token routed to 2 of them, by default. The experts run as a loop over experts
    (``experts_implementation="eager"``: transformers' default, ``"grouped_mm"``, needs strides
    that are multiples of 16 bytes on the CPU, which e.g. ``intermediate_size=37`` breaks).
    ``overrides`` (e.g. ``router_aux_loss_coef``, ``output_router_logits``) go to
    ``MixtralConfig`` unchanged."""
    tok = _tokenizer_or_default(tokenizer)
    _check_heads("hidden_size", hidden_size, "num_attention_heads", num_attention_heads)
    _check_heads(
        "num_attention_heads", num_attention_heads, "num_key_value_heads", num_key_value_heads
    )
    num_local_experts = check_int("num_local_experts", num_local_experts, minimum=1)
    top_k = check_int("num_experts_per_tok", num_experts_per_tok, minimum=1)
    if top_k > num_local_experts:
        raise ValueError(
            f"num_experts_per_tok ({top_k}) must be at most num_local_experts ({num_local_experts})"
        )
    overrides.setdefault("experts_implementation", "eager")
    return _sized_config(
        "MixtralConfig",
        tok,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        intermediate_size=intermediate_size,
        num_local_experts=num_local_experts,
        num_experts_per_tok=top_k,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tok.cls_token_id,
        eos_token_id=tok.sep_token_id,
        **overrides,
    )


def seeded_model(model_class: str, config: Any, seed: int) -> Any:
    """``transformers.<model_class>(config)`` (e.g. ``"BertLMHeadModel"``) with the initial weights
    of ``torch.manual_seed(seed)``, the global random state left as it was (what every factory
    here builds with)."""
    seed = check_int("seed", seed)
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, model_class)(config)
    return model


def tiny_bert_mlm(
    tokenizer: PreTrainedTokenizerBase | None = None, *, seed: int = 0, **config: Any
) -> BertForMaskedLM:
    """A tiny ``BertForMaskedLM``; ``config`` keywords go to :func:`tiny_bert_config`."""
    return seeded_model("BertForMaskedLM", tiny_bert_config(tokenizer, **config), seed)


def tiny_bert_pretraining(
    tokenizer: PreTrainedTokenizerBase | None = None, *, seed: int = 0, **config: Any
) -> BertForPreTraining:
    """A tiny ``BertForPreTraining`` (MLM + NSP heads). Note: transformers only returns its
    ``loss`` when *both* ``labels`` and ``next_sentence_label`` are given."""
    return seeded_model("BertForPreTraining", tiny_bert_config(tokenizer, **config), seed)


def tiny_bert_lm_head(
    tokenizer: PreTrainedTokenizerBase | None = None,
    *,
    is_decoder: bool = True,
    seed: int = 0,
    **config: Any,
) -> BertLMHeadModel:
    """A tiny ``BertLMHeadModel``. ``is_decoder=True`` makes self-attention causal; ``False``
    builds the leaky decoder (bidirectional attention, next-token labels), on purpose."""
    if not isinstance(is_decoder, bool):
        raise TypeError(f"is_decoder must be a bool, got {type(is_decoder).__name__}")
    return seeded_model(
        "BertLMHeadModel", tiny_bert_config(tokenizer, is_decoder=is_decoder, **config), seed
    )


def tiny_gpt2(
    tokenizer: PreTrainedTokenizerBase | None = None, *, seed: int = 0, **config: Any
) -> GPT2LMHeadModel:
    """A tiny ``GPT2LMHeadModel``; ``config`` keywords go to :func:`tiny_gpt2_config`."""
    return seeded_model("GPT2LMHeadModel", tiny_gpt2_config(tokenizer, **config), seed)


def tiny_mixtral(
    tokenizer: PreTrainedTokenizerBase | None = None, *, seed: int = 0, **config: Any
) -> MixtralForCausalLM:
    """A tiny ``MixtralForCausalLM``; ``config`` keywords go to :func:`tiny_mixtral_config`."""
    return seeded_model("MixtralForCausalLM", tiny_mixtral_config(tokenizer, **config), seed)


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied input/output embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@contextmanager
def captured_outputs(
    modules: Sequence[torch.nn.Module], pick: Callable[[Any], Any]
) -> Iterator[list[Any]]:
    """Within the ``with`` block, every call of one of ``modules`` appends ``pick(its output)``
    to the yielded list: after one forward pass, one entry per module in the order the model
    calls them (its layer order). The hooks are removed on leaving the block."""
    captured: list[Any] = []

    def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
        captured.append(pick(output))

    handles = [module.register_forward_hook(hook) for module in modules]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()

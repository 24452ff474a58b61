"""lmlessons: the training losses of language models, taught and tested.

The core (masking, label shifting, NSP pairs, losses) mirrors Hugging Face transformers and
Google's original BERT code; every loss equals transformers' to 1e-5 (see tests/).

The names below are imported on first use (PEP 562 ``__getattr__``), so ``import
lmlessons.packing`` loads the core alone, not the course layer (tokenizers, safetensors).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what mypy and IDEs read; at run time each name is imported on first use
    from lmlessons.answer_only import assistant_only_labels, completion_only_labels
    from lmlessons.collator import MLMCollator
    from lmlessons.course.batches import (
        clm_batches,
        mlm_batches,
        nsp_batches,
        pack_sequences,
        sop_batches,
        tokenize_documents,
    )
    from lmlessons.course.checkpoints import checkpoint_metrics, heldout_metrics, load_checkpoint
    from lmlessons.course.corpus import Corpus, load_corpus, split_sentences
    from lmlessons.course.models import (
        count_parameters,
        tiny_bert_config,
        tiny_bert_lm_head,
        tiny_bert_mlm,
        tiny_bert_pretraining,
        tiny_gpt2,
        tiny_gpt2_config,
    )
    from lmlessons.course.tokenizer import load_tokenizer, train_tokenizer
    from lmlessons.course.training import History, evaluate, train
    from lmlessons.linear_ce import linear_cross_entropy
    from lmlessons.losses import bert_pretraining_loss, clm_loss, mlm_loss, nsp_loss
    from lmlessons.masking import mask_tokens
    from lmlessons.packing import flatten_documents, group_texts, pad_documents
    from lmlessons.pairs import make_nsp_pairs, make_sop_pairs, truncate_seq_pair
    from lmlessons.perplexity import pseudo_perplexity
    from lmlessons.shifting import shift_labels

__version__ = "0.3.0"

# The public API, module by module: the core first, then what the lessons run on.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "lmlessons.masking": ("mask_tokens",),
    "lmlessons.shifting": ("shift_labels",),
    "lmlessons.pairs": ("make_nsp_pairs", "make_sop_pairs", "truncate_seq_pair"),
    "lmlessons.losses": ("mlm_loss", "clm_loss", "nsp_loss", "bert_pretraining_loss"),
    "lmlessons.linear_ce": ("linear_cross_entropy",),
    "lmlessons.collator": ("MLMCollator",),
    "lmlessons.packing": ("pad_documents", "group_texts", "flatten_documents"),
    "lmlessons.perplexity": ("pseudo_perplexity",),
    "lmlessons.answer_only": ("assistant_only_labels", "completion_only_labels"),
    "lmlessons.course.corpus": ("Corpus", "load_corpus", "split_sentences"),
    "lmlessons.course.tokenizer": ("load_tokenizer", "train_tokenizer"),
    "lmlessons.course.models": (
        "count_parameters",
        "tiny_bert_config",
        "tiny_bert_lm_head",
        "tiny_bert_mlm",
        "tiny_bert_pretraining",
        "tiny_gpt2",
        "tiny_gpt2_config",
    ),
    "lmlessons.course.batches": (
        "clm_batches",
        "mlm_batches",
        "nsp_batches",
        "sop_batches",
        "pack_sequences",
        "tokenize_documents",
    ),
    "lmlessons.course.training": ("History", "evaluate", "train"),
    "lmlessons.course.checkpoints": ("checkpoint_metrics", "heldout_metrics", "load_checkpoint"),
}
_HOMES = {name: module for module, names in _EXPORTS.items() for name in names}

# The same names in the same order, written out for linters (tests/test_core_alone.py).
__all__ = [
    "mask_tokens",
    "shift_labels",
    "make_nsp_pairs",
    "make_sop_pairs",
    "truncate_seq_pair",
    "mlm_loss",
    "clm_loss",
    "nsp_loss",
    "bert_pretraining_loss",
    "linear_cross_entropy",
    "MLMCollator",
    "pad_documents",
    "group_texts",
    "flatten_documents",
    "pseudo_perplexity",
    "assistant_only_labels",
    "completion_only_labels",
    "Corpus",
    "load_corpus",
    "split_sentences",
    "load_tokenizer",
    "train_tokenizer",
    "count_parameters",
    "tiny_bert_config",
    "tiny_bert_lm_head",
    "tiny_bert_mlm",
    "tiny_bert_pretraining",
    "tiny_gpt2",
    "tiny_gpt2_config",
    "clm_batches",
    "mlm_batches",
    "nsp_batches",
    "sop_batches",
    "pack_sequences",
    "tokenize_documents",
    "History",
    "evaluate",
    "train",
    "checkpoint_metrics",
    "heldout_metrics",
    "load_checkpoint",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use and kept (PEP 562)."""
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module 'lmlessons' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

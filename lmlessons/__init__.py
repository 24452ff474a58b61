"""lmlessons: the training losses of language models, taught and tested.

The core (masking, label shifting, NSP pairs, losses) mirrors Hugging Face transformers and
Google's original BERT code; every loss equals transformers' to 1e-5 (see tests/).

The names below are imported on first use (PEP 562 ``__getattr__``), so ``import
lmlessons.packing`` loads the core alone, not the course layer (tokenizers, safetensors).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the public API, the one list of it: mypy and IDEs read these imports
    from lmlessons.answer_only import assistant_only_labels as assistant_only_labels
    from lmlessons.answer_only import completion_only_labels as completion_only_labels
    from lmlessons.collator import MLMCollator as MLMCollator
    from lmlessons.course.batches import clm_batches as clm_batches
    from lmlessons.course.batches import mlm_batches as mlm_batches
    from lmlessons.course.batches import nsp_batches as nsp_batches
    from lmlessons.course.batches import pack_sequences as pack_sequences
    from lmlessons.course.batches import sop_batches as sop_batches
    from lmlessons.course.batches import tokenize_documents as tokenize_documents
    from lmlessons.course.checkpoints import checkpoint_metrics as checkpoint_metrics
    from lmlessons.course.checkpoints import heldout_metrics as heldout_metrics
    from lmlessons.course.checkpoints import load_checkpoint as load_checkpoint
    from lmlessons.course.corpus import Corpus as Corpus
    from lmlessons.course.corpus import load_corpus as load_corpus
    from lmlessons.course.corpus import split_sentences as split_sentences
    from lmlessons.course.models import count_parameters as count_parameters
    from lmlessons.course.models import tiny_bert_config as tiny_bert_config
    from lmlessons.course.models import tiny_bert_lm_head as tiny_bert_lm_head
    from lmlessons.course.models import tiny_bert_mlm as tiny_bert_mlm
    from lmlessons.course.models import tiny_bert_pretraining as tiny_bert_pretraining
    from lmlessons.course.models import tiny_gpt2 as tiny_gpt2
    from lmlessons.course.models import tiny_gpt2_config as tiny_gpt2_config
    from lmlessons.course.tokenizer import load_tokenizer as load_tokenizer
    from lmlessons.course.tokenizer import train_tokenizer as train_tokenizer
    from lmlessons.course.training import History as History
    from lmlessons.course.training import evaluate as evaluate
    from lmlessons.course.training import train as train
    from lmlessons.linear_ce import linear_cross_entropy as linear_cross_entropy
    from lmlessons.losses import bert_pretraining_loss as bert_pretraining_loss
    from lmlessons.losses import clm_loss as clm_loss
    from lmlessons.losses import mlm_loss as mlm_loss
    from lmlessons.losses import nsp_loss as nsp_loss
    from lmlessons.masking import mask_tokens as mask_tokens
    from lmlessons.packing import flatten_documents as flatten_documents
    from lmlessons.packing import group_texts as group_texts
    from lmlessons.packing import pad_documents as pad_documents
    from lmlessons.pairs import make_nsp_pairs as make_nsp_pairs
    from lmlessons.pairs import make_sop_pairs as make_sop_pairs
    from lmlessons.pairs import truncate_seq_pair as truncate_seq_pair
    from lmlessons.perplexity import pseudo_perplexity as pseudo_perplexity
    from lmlessons.shifting import shift_labels as shift_labels

__version__ = "0.6.0"


#: ``{name: module}``, the names the ``TYPE_CHECKING`` imports above list, in their order: imported
#: on first use by ``__getattr__`` (tests/test_core_alone.py checks that the two lists agree).
_HOMES: dict[str, str] = {
    "assistant_only_labels": "lmlessons.answer_only",
    "completion_only_labels": "lmlessons.answer_only",
    "MLMCollator": "lmlessons.collator",
    "clm_batches": "lmlessons.course.batches",
    "mlm_batches": "lmlessons.course.batches",
    "nsp_batches": "lmlessons.course.batches",
    "pack_sequences": "lmlessons.course.batches",
    "sop_batches": "lmlessons.course.batches",
    "tokenize_documents": "lmlessons.course.batches",
    "checkpoint_metrics": "lmlessons.course.checkpoints",
    "heldout_metrics": "lmlessons.course.checkpoints",
    "load_checkpoint": "lmlessons.course.checkpoints",
    "Corpus": "lmlessons.course.corpus",
    "load_corpus": "lmlessons.course.corpus",
    "split_sentences": "lmlessons.course.corpus",
    "count_parameters": "lmlessons.course.models",
    "tiny_bert_config": "lmlessons.course.models",
    "tiny_bert_lm_head": "lmlessons.course.models",
    "tiny_bert_mlm": "lmlessons.course.models",
    "tiny_bert_pretraining": "lmlessons.course.models",
    "tiny_gpt2": "lmlessons.course.models",
    "tiny_gpt2_config": "lmlessons.course.models",
    "load_tokenizer": "lmlessons.course.tokenizer",
    "train_tokenizer": "lmlessons.course.tokenizer",
    "History": "lmlessons.course.training",
    "evaluate": "lmlessons.course.training",
    "train": "lmlessons.course.training",
    "linear_cross_entropy": "lmlessons.linear_ce",
    "bert_pretraining_loss": "lmlessons.losses",
    "clm_loss": "lmlessons.losses",
    "mlm_loss": "lmlessons.losses",
    "nsp_loss": "lmlessons.losses",
    "mask_tokens": "lmlessons.masking",
    "flatten_documents": "lmlessons.packing",
    "group_texts": "lmlessons.packing",
    "pad_documents": "lmlessons.packing",
    "make_nsp_pairs": "lmlessons.pairs",
    "make_sop_pairs": "lmlessons.pairs",
    "truncate_seq_pair": "lmlessons.pairs",
    "pseudo_perplexity": "lmlessons.perplexity",
    "shift_labels": "lmlessons.shifting",
}
__all__ = list(_HOMES)


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

"""lmlessons: the training losses of language models, taught and tested.

The core (masking, label shifting, NSP pairs, losses) mirrors Hugging Face transformers and
Google's original BERT code; every loss equals transformers' to 1e-5 (see tests/).
"""

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

# The public API: the core first, then what the lessons run on (lmlessons.course).
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

"""lmlessons: the training losses of language models, taught and tested.

The core (masking, label shifting, NSP pairs, losses) mirrors Hugging Face transformers and
Google's original BERT code; every loss equals transformers' to 1e-5 (see tests/).
"""
from .masking import mask_tokens
from .shifting import shift_labels
from .pairs import make_nsp_pairs, truncate_seq_pair
from .losses import bert_pretraining_loss, clm_loss, mlm_loss, nsp_loss
from .collator import MLMCollator
from .linear_ce import linear_cross_entropy
from .corpus import Corpus, load_corpus, split_sentences
from .tokenizer import load_tokenizer, train_tokenizer
from .models import count_parameters, tiny_bert_config, tiny_bert_lm_head, tiny_bert_mlm, tiny_bert_pretraining, tiny_gpt2, tiny_gpt2_config
from .batches import clm_batches, mlm_batches, nsp_batches, pack_sequences, tokenize_documents
from .training import History, evaluate, train
from .checkpoints import checkpoint_metrics, heldout_metrics, load_checkpoint
from .sop import make_sop_pairs, sop_batches

__version__ = "0.1.0"

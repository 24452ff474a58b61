"""lmlessons: the training losses of language models, taught and tested.

The core (masking, label shifting, NSP pairs, losses) mirrors Hugging Face transformers and
Google's original BERT code; every loss equals transformers' to 1e-5 (see tests/).
"""
from .masking import mask_tokens
from .shifting import shift_labels
from .pairs import make_nsp_pairs, truncate_seq_pair
from .losses import bert_pretraining_loss, clm_loss, mlm_loss, nsp_loss
from .collator import MLMCollator

__version__ = "0.1.0"

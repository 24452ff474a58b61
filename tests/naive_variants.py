"""Compatibility names for ``tests/test_exercises.py``: the naive variants now live in the
battery (``tests/battery/<exercise>.py``, run by ``tests/test_battery.py``).

``EXPECTED[exercise]`` maps ``<prefix>_<attempt id>`` to its mistake code for the first drafts and
one attempt per listed code; ``VALID`` one correct attempt per exercise; ``get(name)`` (and
attribute access, e.g. ``naive_variants.mask_global_rng``) returns the attempt's function.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from battery._attempt import ATTEMPTS, CORRECT

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PREFIX = {
    "mask_tokens": "mask",
    "mlm_loss": "mlm",
    "clm_loss": "clm",
    "bert_pretraining_loss": "bert",
    "make_nsp_pairs": "nsp",
    "select_whole_words": "wwm",
    "truncate_seq_pair": "truncate",
    "rank_loss": "rank",
    "chunked_cross_entropy": "chunked",
}
# the codes the naive variants had (tests/test_exercises.py holds a phrase for each)
_CODES = {
    "mask_tokens": "uses_global_rng masks_special_tokens ignores_replace_probs "
    "ignores_mlm_probability labels_not_ignored labels_are_corrupted_ids modifies_input "
    "ignores_generator random_not_conditional int_mask_not_bool special_tokens_mask_none "
    "wrong_dtype divides_by_zero wrong_type",
    "mlm_loss": "returns_tuple nan_when_no_targets counts_unmasked_positions minus100_not_ignored "
    "per_row_mean sum_not_mean detached not_a_tensor modifies_input ignores_num_items_in_batch "
    "num_items_divides_mean class_dim empty_detached nll_without_log_softmax not_scalar",
    "clm_loss": "returns_tuple minus100_not_ignored not_shifted shifted_twice shifted_wrong_way "
    "counts_padding_positions nan_when_no_targets ignores_num_items_in_batch",
    "bert_pretraining_loss": "nan_when_no_targets unweighted misweighted averages_losses "
    "swapped_nsp_labels missing_nsp counts_unmasked_positions",
    "make_nsp_pairs": "uses_global_rng positive_from_other_document hard_coded_special_ids "
    "negative_random_ids negative_same_document swapped_nsp_labels wrong_segment_ids "
    "ignores_max_length ignores_nsp_probability modifies_input wrong_dtype",
    "select_whole_words": "uses_global_rng splits_words masks_special_tokens selects_padding "
    "count_not_exact wrong_count_formula count_from_padded_length counts_words "
    "stops_at_first_long_word ignores_max_predictions not_random_order weights_words_by_length "
    "attention_mask_none wrong_dtype",
    "truncate_seq_pair": "modifies_input trims_shorter_side trims_both_sides off_by_one "
    "uses_global_rng ignores_generator always_trims_end always_trims_front one_end_per_call",
    "rank_loss": "divides_by_local_count missing_world_size counts_before_shift "
    "counts_padding_positions not_shifted detached mismatched_all_reduce all_reduce_needs_tensor",
    "chunked_cross_entropy": "builds_full_logits averages_chunk_means drops_last_chunk "
    "counts_padding_positions nan_on_ignored_chunk chunk_too_large wrong_gradient "
    "ignores_num_items_in_batch keeps_chunks_for_backward",
}
_OLD_NAMES = {  # names tests/test_exercises.py calls that are not <prefix>_<attempt id>
    "mlm_counts_unmasked": "mlm_divides_by_every_position",
    "mask_specials": "mask_forgets_specials",
    "wwm_by_piece": "wwm_picks_random_tokens",
}

_FUNCTIONS: dict[str, Callable[..., Any]] = {}
EXPECTED: dict[str, dict[str, str]] = {}
VALID: dict[str, list[str]] = {}
for _exercise, _prefix in PREFIX.items():
    importlib.import_module(f"battery.{_exercise}")
    _codes = set(_CODES[_exercise].split())
    EXPECTED[_exercise], VALID[_exercise] = {}, []
    for _a in ATTEMPTS[_exercise]:
        _name = f"{_prefix}_{_a.id}"
        _FUNCTIONS[_name] = _a.fn
        if _a.expect == CORRECT and not VALID[_exercise]:
            VALID[_exercise].append(_name)
        elif _a.id.startswith("draft") or (
            _a.expect in _codes and _a.expect not in EXPECTED[_exercise].values()
        ):
            EXPECTED[_exercise][_name] = str(_a.expect)


def stub_not_implemented(*args, **kwargs):
    raise NotImplementedError("Your code here")


def stub_pass(*args, **kwargs):
    pass


def raises_key_error(*args, **kwargs):
    raise KeyError("oops")


def get(name: str) -> Callable[..., Any]:
    """The function of a naive variant, a valid one or a stub, by its name."""
    if name in globals():
        return globals()[name]
    return _FUNCTIONS[_OLD_NAMES.get(name, name)]


def __getattr__(name: str) -> Callable[..., Any]:
    try:
        return get(name)
    except KeyError:
        raise AttributeError(name) from None

"""The corpus of learners' attempts at the checked exercises, run through ``check``: the
catalogue of known mistakes in the package, and the battery (``tests/battery/``).

Each checker's module catalogues its known mistakes as small wrong implementations, each with its
mistake code (``known = Catalogue(exercise)``, ``@known("code")``): submitted as a learner's
answer, every entry must be named by its own code. Every module ``tests/battery/<exercise>.py``
holds the other attempts, marked ``@wrong(code)``, ``@wrong(says=...)`` or ``@correct``
(``battery/_attempt.py``): realistic attempts that are not a catalogue entry (other ways to make
a catalogued mistake, structural mistakes the runner names in ways ``battery/_structural.py``
does not write), correct alternatives and attempts that delegate to the course;
``battery/_structural.py`` writes the structural mistakes once for every exercise (the reference
solution changed in one way: an edited input, a global draw, a detached or converted result).
A correct attempt must pass; a wrong one must fail, be named by its mistake code and/or carry
its words, carry the code's phrase (``battery/_messages.py``), point to the first hint and show
nothing of the machine; the first to make each mistake, the same text twice. The attempts were
written from what a learner sees (the lessons, the exercises README, the package functions), not
from the checkers.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
from battery._attempt import ATTEMPTS, CORRECT, Attempt
from battery._messages import PHRASES, VOLATILE

from lmlessons.course.content import load
from lmlessons.exercises import EXERCISES, check
from lmlessons.exercises._framework import KNOWN, Known

BATTERY = Path(__file__).parent / "battery"
for _module in pkgutil.iter_modules([str(BATTERY)]):
    if not _module.name.startswith("_"):
        importlib.import_module(f"battery.{_module.name}")
importlib.import_module("battery._structural")  # the structural mistakes of every exercise

CASES = [
    pytest.param(exercise, attempt, id=f"{exercise}-{attempt.id}")
    for exercise, attempts in sorted(ATTEMPTS.items())
    for attempt in attempts
]
#: Per mistake code, the first catalogue entry or battery attempt that makes it: its text is
#: checked twice, to be the same on every run.
FIRST: dict[str, object] = {}
for _exercise, _entries in sorted(KNOWN.items()):
    for _entry in _entries:
        FIRST.setdefault(_entry.code, _entry.fn)
for _exercise, _attempts in sorted(ATTEMPTS.items()):
    for _attempt in _attempts:
        if _attempt.expect not in (None, CORRECT):
            FIRST.setdefault(_attempt.expect, _attempt.fn)

ENTRIES = [
    pytest.param(exercise, entry, id=f"{exercise}-known-{entry.fn.__name__}")
    for exercise, entries in sorted(KNOWN.items())
    for entry in entries
]

#: Every mistake each exercise's checker names on the catalogue and the battery together: a
#: mistake dropped from both (or one added to neither list) fails here.
NAMED = {
    "assistant_labels": "delegates_to_course drops_end_of_turn hard_coded_special_ids "
    "labels_are_boolean_mask labels_not_ignored labels_shifted last_answer_only modifies_input "
    "no_targets trains_on_prompt wrong_dtype wrong_shape wrong_type",
    "bert_pretraining_loss": "averages_losses class_dim counts_unmasked_positions "
    "delegates_to_course detached missing_mlm missing_nsp misweighted modifies_input "
    "nan_when_no_targets per_row_mean returns_tuple skips_target_zero sum_not_mean "
    "swapped_nsp_labels unweighted",
    "chunked_cross_entropy": "averages_chunk_means builds_full_logits chunk_too_large "
    "counts_padding_positions delegates_to_course detached drops_last_chunk "
    "ignores_num_items_in_batch keeps_chunks_for_backward modifies_input nan_on_ignored_chunk "
    "nan_when_no_targets not_a_tensor num_items_divides_mean wrong_gradient",
    "clm_loss": "class_dim counts_before_shift counts_padding_positions delegates_to_course "
    "detached ignores_num_items_in_batch minus100_not_ignored modifies_input nan_when_no_targets "
    "not_a_tensor not_scalar not_shifted num_items_divides_mean per_row_mean returns_tuple "
    "scores_last_position shifted_twice shifted_wrong_way shifts_across_rows skips_target_zero "
    "nll_without_log_softmax sum_not_mean",
    "flatten_documents": "delegates_to_course flatten_shifts_labels flatten_wrong_ids "
    "ignores_separator_id modifies_input no_separator positions_from_one "
    "positions_not_restarted raised_exception separator_at_end wrong_dtype wrong_keys "
    "wrong_shape wrong_type",
    "group_advantages": "batch_mean_subtracted batch_std_of_advantages changes_dtype "
    "delegates_to_course divides_by_variance epsilon_inside_sqrt ignores_scale_rewards "
    "missing_keepdim modifies_input no_std_epsilon none_skips_baseline none_still_scales "
    "population_std wrong_grouping wrong_shape wrong_type",
    "grpo_loss": "completion_mean_for_token_type counts_nonzero_losses delegates_to_course "
    "detached divides_by_completion_width dr_grpo_missing_batch_size empty_completion_skipped "
    "empty_detached ignores_max_completion_length ignores_num_items_in_batch modifies_input "
    "nan_on_empty_completion not_a_tensor not_scalar num_items_divides_mean "
    "num_items_outside_dapo padding_in_denominator padding_losses_count requires_num_items "
    "token_mean_for_grpo zero_count_not_clamped",
    "label_smoothed_loss": "delegates_to_course detached empty_detached "
    "epsilon_weights_swapped ignores_num_items_in_batch minus100_not_ignored modifies_input "
    "nan_when_no_targets nll_not_scaled not_a_tensor not_scalar not_shifted "
    "num_items_divides_mean returns_tuple shifts_labels smoothing_counts_ignored "
    "smoothing_excludes_true_token smoothing_sums_vocabulary sum_not_mean",
    "load_balancing_loss_func": "balanced_per_sequence counts_first_choice_only "
    "delegates_to_course detached "
    "f_divided_by_top_k layers_summed loss_per_layer mask_misaligned missing_num_experts "
    "modifies_input not_a_tensor not_scalar probs_renormalised_over_top_k "
    "router_padding_counted router_padding_in_denominator softmax_twice",
    "make_nsp_pairs": "attention_mask_wrong delegates_to_course empty_segment "
    "hard_coded_special_ids ignores_max_length ignores_nsp_probability missing_cls "
    "modifies_input negative_random_ids negative_same_document padding_wrong "
    "positive_from_other_document positive_not_continuation raised_exception sep_wrong "
    "swapped_nsp_labels uses_global_rng wrong_dtype wrong_keys wrong_segment_ids",
    "mask_tokens": "delegates_to_course divides_by_zero fails_when_nothing_selected "
    "hard_coded_special_ids ignores_generator ignores_mlm_probability ignores_replace_probs "
    "int_mask_not_bool labels_are_boolean_mask labels_are_corrupted_ids labels_not_ignored "
    "masks_special_tokens modifies_input random_ids_not_uniform random_ids_out_of_range "
    "random_not_conditional replacement_rates_off selects_exact_count special_tokens_mask_none "
    "swapped_outputs uses_global_rng wrong_dtype wrong_shape wrong_type",
    "mlm_loss": "class_dim counts_unmasked_positions delegates_to_course detached "
    "empty_detached ignores_num_items_in_batch minus100_not_ignored modifies_input "
    "nan_when_no_targets nll_without_log_softmax not_a_tensor not_scalar num_items_divides_mean "
    "per_row_mean returns_tuple shifts_labels skips_target_zero sum_not_mean",
    "mtp_labels": "delegates_to_course depth_past_the_end ignores_ignore_index modifies_input "
    "mtp_crosses_rows mtp_fills_with_zero mtp_shift_too_far mtp_shift_too_short "
    "mtp_wraps_around wrong_dtype wrong_type",
    "rank_loss": "all_reduce_needs_tensor counts_before_shift counts_padding_positions "
    "delegates_to_course detached divides_by_local_count mismatched_all_reduce "
    "missing_world_size modifies_input nan_when_no_targets not_shifted",
    "select_whole_words": "attention_mask_none count_from_padded_length count_not_exact "
    "counts_words delegates_to_course ignores_max_predictions masks_special_tokens "
    "modifies_input not_random_order orphan_piece overshoots_count selects_padding splits_words "
    "stops_at_first_long_word uses_global_rng weights_words_by_length wrong_count_formula "
    "wrong_dtype",
    "sequence_logprobs": "argmax_not_label average_of_no_targets counts_before_shift "
    "counts_padding_positions delegates_to_course detached gathers_raw_logits ignores_average "
    "log_of_softmax mask_not_shifted mean_over_positions minus100_not_ignored modifies_input "
    "nan_when_no_targets negated_logprobs not_per_sequence not_shifted not_upcast "
    "probs_not_logprobs returns_tuple scores_last_position shifted_twice shifted_wrong_way "
    "shifts_across_rows "
    "skips_target_zero softmax_wrong_dim wrong_gradient wrong_type",
    "truncate_seq_pair": "always_trims_end always_trims_front delegates_to_course "
    "ignores_generator longer_decided_once modifies_input off_by_one one_end_per_call "
    "removes_from_middle repeats_per_call returns_same_lists trims_both_sides "
    "trims_shorter_side uses_global_rng wrong_total wrong_type",
}


def test_every_exercise_has_a_battery_of_documented_attempts():
    """Each checked exercise has at least 12 wrong attempts (catalogue entries and battery
    attempts) and 3 correct ones, each with a docstring, each expected code is in the mistake
    catalogue, and no two attempts share a name."""
    codes = set(load("mistakes"))
    assert set(ATTEMPTS) == set(EXERCISES) - {"bug_zoo"}, set(ATTEMPTS) ^ set(EXERCISES)
    for exercise, attempts in ATTEMPTS.items():
        entries = KNOWN.get(exercise, [])
        wrong = [a for a in attempts if a.expect != CORRECT]
        assert len(wrong) + len(entries) >= 12 and len(attempts) - len(wrong) >= 3, exercise
        names = [a.id for a in attempts] + [k.fn.__name__ for k in entries]
        assert len(set(names)) == len(names), exercise
        for a in attempts:
            assert a.does.strip(), f"{exercise}.{a.id} has no docstring"
            assert a.expect in codes | {CORRECT, None}, f"{exercise}.{a.id}: {a.expect}"
            assert a.says is None or a.says.lower() != "expected", f"{exercise}.{a.id}"
        for k in entries:
            assert k.what and k.code in codes, f"{exercise}.{k.fn.__name__}"


@pytest.mark.parametrize("exercise", sorted(NAMED))
def test_every_mistake_is_still_named(exercise: str) -> None:
    """The codes the catalogue and the battery expect of ``exercise`` are the listed ones."""
    expected = {a.expect for a in ATTEMPTS[exercise] if a.expect not in (CORRECT, None)}
    expected |= {k.code for k in KNOWN.get(exercise, [])}
    assert expected == set(NAMED[exercise].split())


def test_every_phrase_is_a_mistake_the_battery_makes() -> None:
    """Each phrase of ``PHRASES`` is checked: some catalogue entry or attempt makes its mistake."""
    assert set(PHRASES) <= set(FIRST), set(PHRASES) - set(FIRST)


def _named(exercise: str, fn, code: str | None, says: str | None, what: str) -> None:
    """``fn`` fails the check of ``exercise``, named by ``code`` (None: any) and/or with the
    words ``says``; its text carries the code's phrase and the first hint, shows nothing of the
    machine, and is the same on every run."""
    result = check(exercise, fn)
    text = f"{result.title}\n{result.message}"
    seen = f"{what}\n-> [{result.mistake}] {result.title}: {result.message}"
    assert result.status == "failed", f"slipped through: {seen}"
    if code is not None:
        assert result.mistake == code, f"expected {code}, got {seen}"
        assert PHRASES.get(code, "") in text, f"no {PHRASES[code]!r}: {seen}"
    if says is not None:
        assert says in text, f"no {says!r}: {seen}"
    assert f'hint("{exercise}", 1)' in str(result), seen
    page = result._repr_html_()
    assert page.startswith("<div") and "<script" not in page, page
    assert not VOLATILE.search(str(result)) and not VOLATILE.search(page), seen
    if FIRST.get(code) is fn:
        again = check(exercise, fn)
        assert str(again) == str(result) and again._repr_html_() == page, seen


@pytest.mark.parametrize(("exercise", "entry"), ENTRIES)
def test_each_known_mistake_is_named_by_its_code(exercise: str, entry: Known) -> None:
    """A catalogue entry, submitted as a learner's answer, is named by its own code."""
    _named(exercise, entry.fn, entry.code, None, entry.what)


@pytest.mark.parametrize(("exercise", "attempt"), CASES)
def test_attempt(exercise: str, attempt: Attempt) -> None:
    if attempt.expect == CORRECT:
        result = check(exercise, attempt.fn)
        assert result.passed, f"{attempt.does}\n-> [{result.mistake}] {result}"
        return
    _named(exercise, attempt.fn, attempt.expect, attempt.says, attempt.does)

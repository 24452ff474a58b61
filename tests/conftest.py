"""Shared test settings. Nothing here writes into the repo."""

from __future__ import annotations

import os
import tempfile

# Hypothesis keeps a .hypothesis/ folder in the working directory even without a database;
# point it at a temp dir so tests never write into the repo (the Makefile sets it too).
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "lmlessons-hypothesis")
)

import pytest
from hypothesis import settings

# No .hypothesis/ example database in the work tree; deterministic, CI-sized runs.
settings.register_profile(
    "lmlessons", database=None, deadline=None, max_examples=60, derandomize=True
)
settings.load_profile("lmlessons")

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# Fixtures shared by several modules, module-scoped. Each fixture name has one meaning in the
# whole suite: ``tok`` is always the course tokenizer (a module with a small tokenizer of its own
# calls it ``toy_tok``). torch and lmlessons are imported only when a fixture is used, so
# collecting the other modules does not import them.


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy shared machine two OpenMP
    threads can be 50x slower than one. Restored after the module. Not autouse: a module opts in
    with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tok():
    """The course tokenizer (``lmlessons.load_tokenizer()``), loaded once per module."""
    from lmlessons import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="module")
def chat_tok():
    """The course tokenizer with lesson 10's chat template (``lmlessons.course.chat``), loaded
    once per module."""
    from lmlessons.course.chat import chat_tokenizer

    return chat_tokenizer()


# TRL (a course dependency, requirements.txt): imported only inside these fixtures, as it takes
# seconds; a test that uses them is skipped, with the reason, where it is not installed.


@pytest.fixture(scope="session")
def trl():
    """The TRL module."""
    pytest.importorskip("datasets", reason="TRL needs datasets")
    return pytest.importorskip("trl", reason="TRL is a course dependency (requirements.txt)")


@pytest.fixture(scope="session")
def sft_examples():
    """Lesson 10's held-out questions of both tasks (``instruction_set("validation")``)."""
    from lmlessons.course.chat import instruction_set

    items = instruction_set("validation")
    return items[:4] + items[-4:]


@pytest.fixture(scope="session")
def sft_trainer(trl, sft_examples, tmp_path_factory):
    """``sft_trainer(dataset, pad_is_eos=False, **sft_config)``: TRL's ``SFTTrainer`` on a tiny
    GPT-2 and the ``sft_examples`` as a ``"messages"`` or a ``"prompt_completion"`` dataset, with
    the chat tokenizer (its pad token set to its eos token with ``pad_is_eos=True``). Built once
    per session (per xdist worker) for each set of arguments, and never trained: tests read its
    prepared ``train_dataset``, its ``data_collator`` and its ``compute_loss``."""
    import datasets

    from lmlessons.course.chat import chat_tokenizer
    from lmlessons.course.models import tiny_gpt2

    built: dict = {}

    def build(dataset: str, *, pad_is_eos: bool = False, **sft_config):
        key = (dataset, pad_is_eos, tuple(sorted(sft_config.items())))
        if key not in built:
            if dataset == "messages":
                rows = [{"messages": e["prompt"] + e["completion"]} for e in sft_examples]
            else:
                rows = [
                    {"prompt": e["prompt"], "completion": e["completion"]} for e in sft_examples
                ]
            tok = chat_tokenizer()
            if pad_is_eos:
                tok.pad_token = tok.eos_token
            args = trl.SFTConfig(
                output_dir=str(tmp_path_factory.mktemp("sft")),
                report_to="none",
                use_cpu=True,
                **{"max_length": None, **sft_config},
            )
            built[key] = trl.SFTTrainer(
                model=tiny_gpt2(tok, seed=0),
                args=args,
                train_dataset=datasets.Dataset.from_list(rows),
                processing_class=tok,
            )
        return built[key]

    return build


# TRL's trainers built once per session: ``dpo_trainer`` and ``grpo_trainer`` below. Building
# ``TrainingArguments`` (any TRL config) resets accelerate's shared state
# (``AcceleratorState._reset_state``), after which an older trainer's ``accelerator`` has no
# ``num_processes`` or ``device``; so a cached trainer is handed out with the state it was built
# with restored. Call them in each test (or in a function-scoped fixture), not once per module.


def _accelerate_state() -> list:
    """accelerate's shared state now: ``(class, a copy of its shared dict)`` per state class."""
    from accelerate.state import AcceleratorState, PartialState

    return [(cls, dict(cls._shared_state)) for cls in (PartialState, AcceleratorState)]


def _restore_accelerate_state(saved: list) -> None:
    """Put back a state :func:`_accelerate_state` saved (in place, as accelerate asks)."""
    for cls, state in saved:
        cls._shared_state.clear()
        cls._shared_state.update(state)


def _cached(make):
    """``get(key, fresh, *args, **kwargs)``: ``make(*args, **kwargs)`` built once per ``key`` and
    handed out with the accelerate state it was built with; ``fresh=True``: a new one, uncached."""
    built: dict = {}

    def get(key, fresh, *args, **kwargs):
        if fresh:
            return make(*args, **kwargs)
        if key not in built:
            built[key] = (make(*args, **kwargs), _accelerate_state())
        made, state = built[key]
        _restore_accelerate_state(state)
        return made

    return get


@pytest.fixture(scope="session")
def dpo_trainer(trl, tmp_path_factory):
    """``dpo_trainer(parts, *, fresh=False, **dpo_config)``: TRL's ``DPOTrainer`` on what
    ``parts()`` returns, a dict of ``pairs`` (preference rows; their ``prompt``, ``chosen`` and
    ``rejected`` are the dataset), ``processing_class``, ``model`` and ``ref_model`` (``None``:
    TRL loads a reference from ``model.config._name_or_path``). Float32 on the CPU,
    ``max_length=None``, one batch of all the pairs, nothing saved, reported or shown;
    ``dpo_config``: more ``DPOConfig`` arguments. In training mode (the metrics' "train" keys).
    Returns ``SimpleNamespace(trainer, tok, pairs, examples)``: ``examples`` are the prepared
    ``prompt_ids``, ``chosen_ids`` and ``rejected_ids`` of each pair.

    Built once per session (per xdist worker) for each ``parts`` function and ``dpo_config``, and
    never trained: a test changes it only with ``monkeypatch``. ``fresh=True`` builds a new one,
    not cached, for a test that trains or otherwise changes it, or that expects the build to
    fail."""
    from types import SimpleNamespace

    import datasets

    def make(parts, **dpo_config):
        given = parts()
        rows = [{k: p[k] for k in ("prompt", "chosen", "rejected")} for p in given["pairs"]]
        args = trl.DPOConfig(
            output_dir=str(tmp_path_factory.mktemp("dpo")),
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
            **{
                "bf16": False,
                "max_length": None,
                "per_device_train_batch_size": len(rows),
                **dpo_config,
            },
        )
        trainer = trl.DPOTrainer(
            model=given["model"],
            ref_model=given["ref_model"],
            args=args,
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=given["processing_class"],
        )
        trainer.model.train()  # the metrics' "train" keys; TRL disabled dropout
        ids = ("prompt_ids", "chosen_ids", "rejected_ids")
        examples = [{k: ex[k] for k in ids} for ex in trainer.train_dataset]
        return SimpleNamespace(
            trainer=trainer, tok=given["processing_class"], pairs=given["pairs"],
            examples=examples,
        )  # fmt: skip

    get = _cached(make)

    def build(parts, *, fresh: bool = False, **dpo_config):
        return get((parts, tuple(sorted(dpo_config.items()))), fresh, parts, **dpo_config)

    return build


@pytest.fixture(scope="session")
def grpo_trainer(trl, tmp_path_factory):
    """``grpo_trainer(*, fresh=False, **kwargs)``: the course's ``GRPOTrainer``,
    ``lmlessons.course.rl.grpo_trainer(output_dir, **kwargs)`` (the course GPT-2 and chat
    tokenizer) in a temporary folder, built with its warnings silenced, in training mode with
    ``current_gradient_accumulation_steps = 1`` (as ``train()``'s loop leaves them).

    Built once per session (per xdist worker) for each set of ``kwargs``, and never trained: a
    test changes it only with ``monkeypatch``. ``fresh=True`` builds a new one, not cached, for a
    test that trains or otherwise changes it, or that watches what the build does."""
    import warnings

    from lmlessons.course.rl import grpo_trainer as course_grpo_trainer

    def make(**kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = course_grpo_trainer(str(tmp_path_factory.mktemp("grpo")), **kwargs)
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # set by train()'s loop
        return trainer

    get = _cached(make)

    def build(*, fresh: bool = False, **kwargs):
        return get(tuple(sorted(kwargs.items())), fresh, **kwargs)

    return build


# One Chromium for a browser test module (tests/test_browser.py, tests/test_browser_classic.py):
# Debian's, driven by playwright; skipped, with where it looked, when there is none.


@pytest.fixture(scope="module")
def chromium() -> str:
    """The path of Chromium (tools.browser.find_chromium), or a skip that says where it looked."""
    import tools.browser as jb

    path = jb.find_chromium()
    if path is None:
        override = os.environ.get("LMLESSONS_CHROMIUM")
        looked = f"LMLESSONS_CHROMIUM={override}" if override else ", ".join(jb.CHROMIUM_CANDIDATES)
        pytest.skip(
            f"no Chromium found (looked for {looked}); install it with `apt-get install chromium`"
        )
    return path


@pytest.fixture(scope="module")
def context(chromium: str):
    """One Chromium and one browser context (a shared HTTP cache) for the module's pages."""
    from playwright.sync_api import sync_playwright

    import tools.browser as jb

    with sync_playwright() as pw:
        browser = jb.launch_chromium(pw, chromium)
        try:
            context = jb.new_context(browser)
            yield context
            context.close()
        finally:
            browser.close()

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

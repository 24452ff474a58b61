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

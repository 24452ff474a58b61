"""Shared test settings. Nothing here writes into the repo."""
from __future__ import annotations

import os
import tempfile

# Hypothesis keeps a .hypothesis/ folder in the working directory even without a database;
# point it at a temp dir so tests never write into the repo (the Makefile sets it too).
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "lmlessons-hypothesis"))

from hypothesis import settings  # noqa: E402

# No .hypothesis/ example database in the work tree; deterministic, CI-sized runs.
settings.register_profile("lmlessons", database=None, deadline=None, max_examples=60, derandomize=True)
settings.load_profile("lmlessons")

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

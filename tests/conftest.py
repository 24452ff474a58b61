"""Shared test settings. Nothing here writes into the repo."""
from __future__ import annotations

import os

from hypothesis import settings

# No .hypothesis/ example database in the work tree; deterministic, CI-sized runs.
settings.register_profile("lmlessons", database=None, deadline=None, max_examples=60, derandomize=True)
settings.load_profile("lmlessons")

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

"""Compatibility name for ``tests/test_exercises.py``: transformers' own collator as a learner's
``flatten_documents``, now an attempt of the battery (``tests/battery/flatten_documents.py``)."""

from __future__ import annotations

from battery.flatten_documents import with_transformers

INDEPENDENT = {"flatten_documents": with_transformers}

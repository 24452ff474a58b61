"""Where lmlessons keeps files it can rebuild (checkpoints trained by tools.pretrain and
tools.warm_start): never the repo.

``$LMLESSONS_CACHE_DIR`` if set, else the platform's user cache folder (``$XDG_CACHE_HOME`` or
``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows), plus
``lmlessons``. The same rule as ``platformdirs.user_cache_dir``, without the dependency.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def user_cache_dir() -> Path:
    """The lmlessons cache folder (not created here; callers ``mkdir`` what they write)."""
    override = os.environ.get("LMLESSONS_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "lmlessons"

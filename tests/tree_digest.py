"""A table folder's exact state: every folder and every file's SHA-256, for "changes nothing" checks."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree_digest(path: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``path``; folders map to "" (with a slash)."""
    out = {}
    for folder, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(folder, d), path) + "/"] = ""
        for f in files:
            p = Path(folder, f)
            out[os.path.relpath(p, path)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out

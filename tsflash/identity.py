"""The one hash recipe behind the project's names: config hashes, run folders, run keys and
checkpoint identities.

`digest(obj, chars)` is the first `chars` hex digits of the SHA-256 of `obj` as JSON with sorted
keys (`default=str` for anything else, e.g. a tuple's items stay as JSON lists, a Path as its
text). Published run folders are named by it (`tsflash.sweep.plan.run_hash`) and checkpoints
are matched by it, so the recipe must never change: one byte of difference renames every run.
"""

from __future__ import annotations

import hashlib
import json


def digest(obj, chars: int) -> str:
    """First `chars` hex digits of sha256(json.dumps(obj, sort_keys=True, default=str))."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:chars]

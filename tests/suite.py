"""What the suite's own setup decides, for conftest.py and for the tests that need it
outside a fixture: where the real-capture corpus is, and which hypothesis profile runs."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# "ci" by default (.ci/run), "fuzz" for the long run by hand (see tests/conftest.py)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")


def find_corpus() -> Path | None:
    """../shared/corpus beside the checkout (or $GPUTRIAGE_CORPUS), None when absent."""
    env = os.environ.get("GPUTRIAGE_CORPUS")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "corpus", REPO / "shared" / "corpus"]
    for c in candidates:
        if (c / "MANIFEST.tsv").is_file():
            return c
    return None

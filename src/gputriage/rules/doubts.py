"""The findings through which a check doubts itself (the engine's verdict is then
"unknown"), in a module of their own: the engine reads them without importing their
areas (``gputriage logs`` loads only the kernel log's)."""

from __future__ import annotations

__all__ = ["DIAG_NO_VERDICT", "MIG_BLOCKED", "NO_RESULT", "UNKNOWN_COUNT"]

UNKNOWN_COUNT = "expect.gpu-count-unknown"  # GPUs expected, none countable
NO_RESULT = "dcgm.no-result"  # every test skipped, or the output cut short
MIG_BLOCKED = "dcgm.diag-mig-blocked"  # NVVS refused to run on MIG-enabled GPUs
DIAG_NO_VERDICT = frozenset({NO_RESULT, MIG_BLOCKED})  # the diagnostic said nothing of the GPUs

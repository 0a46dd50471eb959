"""One cause, one finding (issue 12, in progress)."""

from __future__ import annotations

from gputriage.model import Finding


def fold(findings: list[Finding]) -> list[Finding]:
    """The findings with consequences folded into their cause (not yet: as given)."""
    return list(findings)

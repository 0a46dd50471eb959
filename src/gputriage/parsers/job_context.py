"""Where a job's output was printed: inside a container or on the host, and what the
container was given (device nodes, ``NVIDIA_VISIBLE_DEVICES``,
``NVIDIA_DRIVER_CAPABILITIES``), as far as the output itself tells."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["JobContext", "read_context"]


@dataclass
class JobContext:
    """What a job's output says of where it ran (``None``: it does not say)."""

    in_container: bool | None = None
    lines: list[str] = field(default_factory=list)  # the lines that show it


def read_context(lines: Sequence[str]) -> JobContext:
    """The context the lines of a job's output show."""
    return JobContext()

"""gputriage: triage for GPU nodes."""

__version__ = "0.1.0"

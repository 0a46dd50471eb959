"""CLI commands that live in their own modules (registered in :mod:`gputriage.cli`).

Each module imports only click at import time, so ``gputriage --help`` stays fast."""

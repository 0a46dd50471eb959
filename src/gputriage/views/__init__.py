"""Views: thin renderings of one analysed :class:`gputriage.model.Result`.

- :mod:`gputriage.views.terminal` — the human report (rich, imported lazily).
- :mod:`gputriage.results.document` — the versioned JSON result (``gputriage/result/v1``).
- :mod:`gputriage.status` — the process exit status (Nagios convention).
- :mod:`gputriage.views.triage` — the triage screen and its JSON (the triage itself is
  built by :mod:`gputriage.results.triage`).

This package imports nothing heavy so that the CLI starts fast.
"""

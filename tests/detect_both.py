"""A fixture that checks every paste detection of a test both ways: with detectors left
out (and unimported) when their gates' literals cannot be in the paste, as detection
runs, and with every detector run; the lines each source claims must be the same.

A test module turns it on for all its tests with (``python -m pytest -p detect_both``
with tests/ on PYTHONPATH: for every test of the suite)::

    from detect_both import lazy_and_eager_agree  # noqa: F401  (the fixture)
    pytestmark = pytest.mark.usefixtures("lazy_and_eager_agree")
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from gputriage.ingest import detect as ingest_detect
from gputriage.text.paste import PasteDoc

_CLAIM = ingest_detect._claim  # detection's own
COMPARED: list[int] = []  # the line counts of the pastes compared in the current test


def claim_every_detector(doc: PasteDoc) -> None:
    """Detection as it was before the look up front: every detector, in order."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ingest_detect, "may_open", lambda *_: True)
        _CLAIM(doc)


@pytest.fixture
def lazy_and_eager_agree(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each detection in the test (``detect``, ``analyze`` of a paste...) is done twice
    and compared (:data:`COMPARED` says how many, for a test to see that it ran)."""
    COMPARED.clear()

    def both(doc: PasteDoc) -> None:
        twin = copy.copy(doc)
        twin.owner = list(doc.owner)
        _CLAIM(doc)
        claim_every_detector(twin)
        assert doc.owner == twin.owner, "detection without the detectors left out differs"
        COMPARED.append(len(doc.lines))

    monkeypatch.setattr(ingest_detect, "_claim", both)
    yield


@pytest.fixture(autouse=True)
def _every_detection_both_ways(lazy_and_eager_agree: None) -> None:
    """With ``pytest -p detect_both`` (tests/ on the path), every test of the suite
    compares its detections both ways."""

"""The detectors' literal gates (parsers/detect_gate.py): the literals a regex needs, and
detection with the gates the same as without them, on every corpus sample alone and
inside a training job's log (where the gates close for the other detectors)."""

from __future__ import annotations

import functools
import re
import sys

import pytest
from detect_both import lazy_and_eager_agree  # noqa: F401  (the fixture)
from hypothesis import given, settings
from hypothesis import strategies as st
from training_kit import training_log

from gputriage.ingest.detect import detect
from gputriage.parsers import detect_gate
from gputriage.parsers.detect_gate import Gate
from gputriage.snapshot.bundle import decode
from gputriage.text.literals import required_literal_sets, required_literals
from gputriage.text.paste import PasteDoc

# every detection of these tests is also made with every detector run (tests/detect_both.py)
pytestmark = pytest.mark.usefixtures("lazy_and_eager_agree")


def _training(lines: int, seed: int = 0) -> str:
    return training_log(lines, seed=seed)


@pytest.mark.parametrize(("pattern", "expected"), [
    (r"^\s*GPU [0-9a-f:.]+ was successfully reset\b", {" was successfully reset"}),
    (r"\bXID[ _-]?([0-9]{1,3})\b", {"xid"}),
    (r"failed to (?:initialize|reconcile) DCGM",
     {"failed to initialize dcgm", "failed to reconcile dcgm"}),  # (the run branches)
    (r"^(?:export\s+)?(?:NVIDIA|CUDA)_[A-Z]+=", {"nvidia_", "cuda_"}),
    (r"a(?:b|)c\b", {"abc", "ac"}),
    (r"metrics[:;] ", {"metrics: ", "metrics; "}),  # (a class of a few characters)
    (r"xx[a-z]y", {"xx"}),  # (a range: the run ends there)
    (r"(?:x|)[0-9]", None),  # (an empty spelling is no literal)
    # (9 x 9 spellings are too many: the run ends before the second branch)
    (r"(?:ab|cd|ef|gh|ij|kl|mn|op|qr)(?:st|uv|wx|yz|ba|dc|fe|hg|ji)zz",
     {"ab", "cd", "ef", "gh", "ij", "kl", "mn", "op", "qr"}),
    (r"(?:nv-hostengine|Host engine)\b", {"nv-hostengine", "host engine"}),
    (r"(?:abc)+def?", {"abc"}),
    (r"Reason:|(?:xy)?z", {"reason:", "z"}),
    (r"Reason:|[0-9]+", None),  # a branch with no literal: no gate
    (r"[0-9]+:[0-9]+", {":"}),
    (r"(?x) a b c", None),
])
def test_required_literals(pattern: str, expected: set[str] | None) -> None:
    got = required_literals(re.compile(pattern, re.IGNORECASE))
    assert got == (None if expected is None else frozenset(expected))


@pytest.mark.parametrize(("chunk", "lowered_max"), [(1 << 20, 16 << 20), (7, 0)])
def test_a_gate_closes_only_when_no_free_line_can_hold_its_words(
        monkeypatch, chunk: int, lowered_max: int) -> None:
    """Also with the words read a few characters at a time (no word cut between two
    pieces) and a paste searched without its lowercased copy (as a large one is)."""
    monkeypatch.setattr(detect_gate, "_CHUNK", chunk)
    monkeypatch.setattr(detect_gate, "_LOWERED_MAX", lowered_max)
    gate = Gate(re.compile(r"\bfailed to reset GPU\b", re.IGNORECASE), literals=("NVML",))
    doc = PasteDoc(_training(50) + "Failed to reset GPU 0000:3b:00.0\n")
    assert gate.open(doc)
    doc.owner[50] = "other"  # claimed by an earlier detector
    assert not gate.open(doc)
    assert gate.open(PasteDoc(_training(5) + "libnvml.so.1 not found\n"))  # inside a word
    assert not gate.open(PasteDoc(_training(50)))
    assert gate.open(PasteDoc(_training(5) + "caf\u00e9\n"))  # non-ASCII: always open
    if chunk < 10:  # a run of letters longer than a piece: its words are not ruled out
        assert Gate(literals=("axyz",)).open(PasteDoc("a" * 3 * chunk + "xyz\n"))


def _both(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    gated = detect(text)
    with monkeypatch.context() as m:
        m.setattr(detect_gate.Gate, "open", lambda self, doc: True)
        return gated, detect(text)


def _same_detection(samples, monkeypatch, cap: int, around: int, alone: bool) -> None:
    job = _training(around, seed=3)
    for sample in samples:
        raw = sample.path.read_bytes()[:cap]
        if b"\0" in raw[:4096] or raw[:2] == b"\x1f\x8b":
            continue
        text = decode(raw)
        for paste in (text, job + text + job) if alone else (job + text + job,):
            gated, open_ = _both(paste, monkeypatch)
            assert gated == open_, sample.path.name


@pytest.mark.parametrize("category", [str(n) for n in range(1, 12)])
def test_gates_change_no_detection_on_the_corpus(corpus, monkeypatch, category) -> None:
    """Every sample's first 12 KiB in the middle of a training log (gates closed around
    it): what is detected with the gates is what is detected without them."""
    _same_detection(corpus.category(category), monkeypatch, 12 << 10, 20, alone=False)


@pytest.mark.slow  # every sample whole, alone and inside a training log: ~30 s
def test_gates_change_no_detection_on_whole_corpus_samples(corpus, monkeypatch) -> None:
    _same_detection(corpus.samples, monkeypatch, 1 << 20, 200, alone=True)


@functools.cache
def _module_patterns() -> list[re.Pattern[str]]:
    """The text patterns that the paste detectors' modules, the job-message catalog and
    the job-log readers (and what they import of the parsers and knowledge tables)
    compile at module level, each with required literals (those gates are made of)."""
    import gputriage.knowledge.job_messages
    import gputriage.parsers.job_log
    from gputriage import sources

    for ref in sources.detector_refs():
        sources.load(ref)
    found: dict[tuple[str, int], re.Pattern[str]] = {}
    readers = [pattern for pattern, _ in gputriage.parsers.job_log._READERS]
    for name, module in list(sys.modules.items()):
        if not name.startswith(("gputriage.parsers.", "gputriage.knowledge.")):
            continue
        for value in [*vars(module).values(), *(readers if name.endswith(".job_log") else ())]:
            if (isinstance(value, re.Pattern) and isinstance(value.pattern, str)
                    and not value.flags & re.VERBOSE and required_literals(value)):
                found[value.pattern, value.flags] = value
    return sorted(found.values(), key=lambda p: (p.pattern, p.flags))


@settings(max_examples=400)
@given(st.data())
def test_every_match_of_a_real_pattern_holds_one_of_its_literals(data) -> None:
    """The literals the gates take from an expression (spelt on through branches of
    literals) are in every string it matches: strings drawn to match each of the
    parsers' and knowledge tables' own expressions."""
    patterns = _module_patterns()
    assert len(patterns) > 100
    pattern = data.draw(st.sampled_from(patterns))
    text = data.draw(st.from_regex(pattern))
    literals = required_literals(pattern)
    assert literals is not None and literals in required_literal_sets(pattern)
    low = text.lower()
    for each in required_literal_sets(pattern):  # (one of every set: the job-log readers')
        assert any(lit in low for lit in each), (pattern.pattern, text, sorted(each))

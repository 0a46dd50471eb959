"""Shared fixtures. Real captures are read from ../shared/corpus, never copied."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent

# Hypothesis profiles: "ci" (the default: hypothesis's usual 100 examples) and "fuzz"
# (HYPOTHESIS_PROFILE=fuzz: many more, for tests that leave max_examples to the profile).
settings.register_profile("ci", max_examples=100)
settings.register_profile("fuzz", max_examples=5000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@dataclass(frozen=True)
class Sample:
    path: Path
    category: str
    what_it_shows: str
    expected: str

    @property
    def name(self) -> str:
        return self.path.name

    def text(self) -> str:
        return self.path.read_bytes().decode("utf-8", errors="replace")


class Corpus:
    """The real-capture corpus and its MANIFEST.tsv."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.samples: list[Sample] = []
        with (root / "MANIFEST.tsv").open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                self.samples.append(Sample(root / row["file"], row["category"],
                                           row.get("what_it_shows", ""),
                                           row.get("expected_diagnosis", "")))

    def category(self, prefix: str) -> list[Sample]:
        """Samples whose category starts with ``prefix`` (e.g. "1" or "1-nvidia-smi-q")."""
        return [s for s in self.samples if s.category.split("-")[0] == prefix.split("-")[0]]

    def sample(self, name_part: str) -> Sample:
        hits = [s for s in self.samples if name_part in s.path.name]
        if len(hits) != 1:
            raise LookupError(f"{len(hits)} corpus samples match {name_part!r}")
        return hits[0]


def find_corpus() -> Path | None:
    env = os.environ.get("GPUTRIAGE_CORPUS")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "corpus", REPO / "shared" / "corpus"]
    for c in candidates:
        if (c / "MANIFEST.tsv").is_file():
            return c
    return None


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    root = find_corpus()
    if root is None:
        pytest.skip("real-capture corpus not found: expected ../shared/corpus/MANIFEST.tsv "
                    "beside the checkout (or set GPUTRIAGE_CORPUS)")
    return Corpus(root)


@pytest.fixture(autouse=True)
def _history_in_tmp(monkeypatch, tmp_path):
    """``check`` records history; tests keep it out of the machine's state folder."""
    monkeypatch.setenv("GPUTRIAGE_STATE_DIR", str(tmp_path / "state"))

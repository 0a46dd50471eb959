"""DCGM's facts: its release (``dcgmi --version`` or nv-hostengine's own banner), the
dcgmi queries that never answered (nv-hostengine dead or hung), and what DCGM supports
on a GPU architecture (``knowledge/dcgm_support.csv``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from gputriage.errors import ParseError
from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.knowledge import csv_rows
from gputriage.knowledge.cuda_compat import arch_of, capability_of, version_key
from gputriage.parsers.dcgmi import parse_version
from gputriage.text.fields import parse_bool, split_lines

__all__ = ["DCGM_QUERIES", "FACTS", "DcgmSupport", "DcgmVersion", "dcgm_support"]

FACTS = FactTable()

DCGM_QUERIES = ("dcgmi_discovery", "dcgmi_health")  # what collection asks nv-hostengine


@dataclass(frozen=True)
class DcgmVersion:
    version: str
    source: str
    line: str

    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.version)


@dataclass(frozen=True)
class DcgmSupport:
    """What DCGM supports on one architecture (None: not known here)."""

    architecture: str
    min_dcgm: str | None
    profiling: bool | None
    exporter: bool | None


@functools.cache
def _support() -> dict[str, DcgmSupport]:
    return {r["architecture"]: DcgmSupport(r["architecture"], r["min_dcgm"].strip() or None,
                                           parse_bool(r["profiling"]), parse_bool(r["exporter"]))
            for r in csv_rows("dcgm_support.csv")}


def dcgm_support(gpu_name: str | None) -> DcgmSupport | None:
    """DCGM's support of a GPU by its product name; None when its architecture is not
    known."""
    arch = arch_of(capability_of(gpu_name))
    return _support().get(arch.name) if arch else None


@FACTS.fact("dcgm_version", sources=("dcgmi_version", "nv_hostengine_log"))
def dcgm_version(facts: FactReader) -> DcgmVersion:
    """The DCGM release: ``dcgmi --version``, else the version nv-hostengine printed."""
    text = facts.text("dcgmi_version")
    if text:
        try:
            version = parse_version(text)
            line = next(ln.strip() for ln in split_lines(text) if version in ln)
            return DcgmVersion(version, "dcgmi_version", line)
        except ParseError:
            pass
    log = facts.maybe("nv_hostengine_log")
    if log is not None and log.version:
        line = next((e.line for e in log.entries if log.version in e.message), log.version)
        return DcgmVersion(log.version, "nv_hostengine_log", line)
    raise Missing("no DCGM version: neither dcgmi --version nor nv-hostengine's banner")


@FACTS.fact("dcgm_unanswered", sources=DCGM_QUERIES)
def dcgm_unanswered(facts: FactReader) -> dict[str, dict[str, Any]]:
    """dcgmi queries killed at their timeout (nv-hostengine hung, or dcgmi waiting for a
    host engine that is not there): source -> its manifest record; Missing when none."""
    records = {s: facts.record(s) or {} for s in DCGM_QUERIES}
    hung = {s: rec for s, rec in records.items() if rec.get("error") == "timeout"}
    if not hung:
        raise Missing("no dcgmi query timed out")
    return hung

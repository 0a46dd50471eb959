"""Simulated hosts: realistic snapshots of named situations.

``gputriage scenario list`` / ``scenario build NAME -o DIR|FILE.tar.gz`` write
a snapshot that ``gputriage analyze`` then diagnoses. Every payload is
generated from a model of an HGX H100 host (:mod:`.model`) by renderers that
write each source in its real format (:mod:`.render`); nothing is copied
from real captures. Output is reproducible: randomness is seeded by the host
name and timestamps come from the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gputriage
from gputriage.scenarios.catalog import CATALOG, Entry
from gputriage.scenarios.model import Host
from gputriage.scenarios.render import Rendered, render_all
from gputriage.snapshot import writer as snapshot_writer

__all__ = ["Scenario", "build_scenario", "get_scenario", "list_scenarios", "render_outcomes",
           "write_host"]


@dataclass(frozen=True)
class Scenario:
    """A named situation and the findings its analysis must produce."""

    name: str  # "healthy-8xh100"
    title: str  # one line
    description: str  # the situation and what the on-call should conclude
    expected: tuple[str, ...]  # finding ids the analysis must produce; () when healthy
    build: Callable[[], dict[str, bytes]]  # source name -> exact snapshot file content
    host: Callable[[], Host]  # the mutated host model the payloads are rendered from


def render_outcomes(scenario: Scenario) -> dict[str, Rendered]:
    """Every source of a scenario with its data, rc and error kind."""
    return render_all(scenario.host())


def _payloads(make_host: Callable[[], Host]) -> Callable[[], dict[str, bytes]]:
    def build() -> dict[str, bytes]:
        return {name: r.data for name, r in render_all(make_host()).items()
                if r.data is not None}
    return build


def _scenario(entry: Entry) -> Scenario:
    return Scenario(entry.name, entry.title, entry.description, entry.expected,
                    _payloads(entry.make_host), entry.make_host)


_REGISTRY: dict[str, Scenario] = {e.name: _scenario(e) for e in CATALOG}


def list_scenarios() -> list[Scenario]:
    """All scenarios, in catalog order (healthy first)."""
    return list(_REGISTRY.values())


def get_scenario(name: str) -> Scenario:
    """The scenario called ``name``; KeyError naming the known ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(_REGISTRY)
        raise KeyError(f"unknown scenario {name!r}; known scenarios: {known}") from None


def build_scenario(name: str, out: str | os.PathLike, created: str | None = None,
                   force: bool = False) -> Path:
    """Write scenario ``name`` as a snapshot directory, or a tarball when ``out``
    ends in ``.tar.gz``/``.tgz``; returns the path written. An existing output is
    refused unless ``force``."""
    return write_host(get_scenario(name).host(), out, created=created, scenario=name,
                      force=force)


def write_host(host: Host, out: str | os.PathLike, created: str | None = None,
               scenario: str | None = None, force: bool = False) -> Path:
    """Render ``host`` and write it as a snapshot (absent sources get a record, no file)."""
    manifest = snapshot_writer.new_manifest(
        host=host.hostname, created=created or host.now.isoformat(),
        boot_id=host.boot_id, tool_version=gputriage.__version__,
        extra={"scenario": scenario} if scenario else None)
    payloads: dict[str, bytes] = {}
    for source, r in render_all(host).items():
        manifest["sources"][source] = snapshot_writer.source_record(
            source, rc=r.rc, nbytes=len(r.data or b""), error=r.error,
            error_detail=r.error_detail, with_file=r.data is not None)
        if r.data is not None:
            payloads[source] = r.data
    return snapshot_writer.write_snapshot(out, manifest, payloads, force=force)

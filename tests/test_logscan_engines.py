"""The anchor search engines (Hyperscan, ``bytes.find``) find the same candidate
lines wherever a span starts and ends; Hyperscan is optional; dropping routine lines
(``ScanConfig.reject``) never drops an event or a finding."""

from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.logscan import LogScan, ScanConfig, hsearch, scan_paths, scan_text
from gputriage.logscan.search import (
    ROUTINE,
    Probe,
    anchor_hits,
    anchors_for,
    engine_for,
)
from gputriage.parsers.kernel_patterns import split_prefix
from gputriage.parsers.kernel_table import EVENTS

FIX = Path(__file__).resolve().parent / "fixtures" / "logs"
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
HAVE_HS = hsearch.available()
ENGINES = [pytest.param("hyperscan", marks=pytest.mark.skipif(
    not HAVE_HS, reason="hyperscan is not installed")), "python"]

# routine lines of a busy ConnectX adapter (no row makes an event of them) ...
ROUTINE_LINES = (
    "mlx5_core 0000:3b:00.0: E-Switch: Total vports 10, per vport: max uc(1024) max mc(16384)",
    "mlx5_core 0000:3b:00.0: mlx5_pcie_event:304:(pid 328): PCIe slot advertised sufficient "
    "power (75W).",
    "mlx5_core 0000:3b:00.0: Port module event: module 0, Cable plugged",
    "mlx5_core 0000:3b:00.0: mlx5_fw_tracer_handle_traces:742:(pid 9): FW tracer buffer full",
    "mlx5_core 0000:3b:00.0: poll_health:801:(pid 0): device's health compromised",
    "mlx5_core 0000:3b:00.0: firmware version: 20.27.446",
    "mlx5_core 0000:3b:00.0: Rate limit: 127 rates are supported, range: 0Mbps to 97656Mbps",
    "mlx5_core 0000:3b:00.0: Flow counters: 12 bulk queries",
    "mlx5_core 0000:3b:00.0: MLX5E: StrdRq(1) RqSz(8) StrdSz(2048) RxCqeCmprss(0 basic)",
)
# ... and lines of the same anchors that are events (or may be), kept
KEPT_LINES = (
    "mlx5_core 0000:53:00.0 enp83s0f0np0: Link up",
    "mlx5_core 0000:53:00.0 enp83s0f0np0: LINK DOWN",
    "mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE",
    "mlx5_core 0000:3b:00.0: AER: can't recover (no error_detected callback)",
    "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
    "mlx5_core 0000:3b:00.0: 126.016 Gb/s available PCIe bandwidth, limited by 8.0 GT/s",
    "NVRM: GPU at PCI:0000:3b:00: nvidia 0000:3b:00.0 firmware version",
    "nvidia 0000:3b:00.0: enabling device (0000 -> 0003)",  # (nvidia is no routine anchor)
)


def _signature(scan: LogScan) -> list[tuple]:
    return [(e.kind, e.lineno, e.boot, e.line, sorted(e.details.items()),
             getattr(e, "count", 1)) for e in scan.events]


def _findings(scan: LogScan) -> list:
    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.store import Facts
    from gputriage.rules import LOG_AREAS, rules_of
    from gputriage.snapshot.bundle import Snapshot

    facts = Facts(Snapshot({}, None, "logs"))
    facts.prefill("log_scan", scan)
    return analyze_facts(facts, rules_of(LOG_AREAS)).findings


def _mixed_log() -> bytes:
    """The fixtures (every format, journal JSON) glued with routine and kept lines,
    long lines, NUL runs, CRLF and no final newline."""
    parts = [(FIX / n).read_bytes() for n in ("all-kinds-short-iso.log", "dmesg-two-boots.txt",
                                             "kmsg-records.txt", "journal-two-boots.json")]
    rng = random.Random(5)
    noisy = [f"[ {i}.5] {rng.choice(ROUTINE_LINES + KEPT_LINES)}\n".encode()
             for i in range(300)]
    msg = json.dumps({"MESSAGE": ROUTINE_LINES[0], "_BOOT_ID": "c" * 32})
    return b"".join([
        parts[0], *noisy[:150], b"y" * 5000 + b" NVRM: cut\n",
        b"\x00" * 300 + b"NVRM: " + b"\x00" * 5 + b"\n", b"a\x00b\x00" * 100 + b"nvidia\n",
        b"\x00mlx5_core 0000:3b:00.0: Link up\x00\n", parts[1].replace(b"\n", b"\r\n"),
        b"z" * 9000, b"\n", parts[2], parts[3], msg.encode() + b"\n", *noisy[150:],
        b"PCIe link up\nError received\n-- Logs begin --\n", b"\x00nvidia\n" * 100,
        b"[ 9.0] mlx5_core 0000:3b:00.0: Link down"])


def _expected(buf: bytes, lo: int, hi: int, anchors: tuple[bytes, ...],
              reject: bool) -> dict[int, int]:
    """What every engine must find, line by line in plain Python."""
    from gputriage.logscan.search import _TRACE_ANCHORS

    out: dict[int, int] = {}
    pos = lo
    for line in buf[lo:hi].split(b"\n"):
        held = [a for a in anchors if a in line]
        if reject and held and all(a in ROUTINE for a in held):
            low = line.lower()
            held = [a for a in held if any(r in low for r in ROUTINE[a])]
        if held:
            out[pos] = max(1 if a in _TRACE_ANCHORS else 0 for a in held)
        pos += len(line) + 1
    return out


@pytest.mark.parametrize("reject", [True, False])
@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_finds_the_lines_that_hold_an_anchor(engine, reject):
    """Whole buffers and spans cut anywhere (block edges), bytes and bytearrays: the
    lines found are those a line-by-line test finds, and the buffer is left as it was."""
    data = _mixed_log()
    anchors = anchors_for(b"{")
    config = ScanConfig(engine=engine, reject=reject)
    rng = random.Random(11)
    cuts = [(0, len(data))] + [tuple(sorted(rng.sample(range(len(data)), 2)))
                               for _ in range(25)]
    for lo, hi in cuts:
        want = _expected(data, lo, hi, anchors, reject)
        buf = bytearray(data)
        assert anchor_hits(buf, lo, hi, anchors, config) == want, (lo, hi)
        assert anchor_hits(data, lo, hi, anchors, config) == want, (lo, hi)
        assert buf == data
    assert len(_expected(data, 0, len(data), anchors, False)) > \
        len(_expected(data, 0, len(data), anchors, True)) + 50


@pytest.mark.parametrize("engine", ENGINES)
def test_routine_lines_are_dropped_and_event_lines_kept(engine):
    anchors = anchors_for(b"")
    for reject in (True, False):
        config = ScanConfig(engine=engine, reject=reject)
        for line in ROUTINE_LINES:
            data = bytearray(b"[ 1.0] " + line.encode() + b"\n")
            assert bool(anchor_hits(data, 0, len(data), anchors, config)) is not reject, line
        for line in KEPT_LINES:
            data = bytearray(b"[ 1.0] " + line.encode() + b"\n")
            assert anchor_hits(data, 0, len(data), anchors, config) == {0: 0}, line


def _engines_agree(path: Path, config: ScanConfig, engines: tuple[str, ...]) -> None:
    first, *rest = (scan_paths([str(path)], now=NOW, config=replace(config, engine=e))
                    for e in engines)
    assert len(first.events) > 20
    for got in rest:
        assert _signature(got) == _signature(first), config
        assert (got.lines, got.bytes, [(b.index, b.boot_id) for b in got.boots]) == (
            first.lines, first.bytes, [(b.index, b.boot_id) for b in first.boots])


@pytest.mark.skipif(not HAVE_HS, reason="hyperscan is not installed")
@pytest.mark.parametrize("block", [1024, 1 << 20])
def test_engines_agree_on_whole_scans_threads_and_workers(monkeypatch, tmp_path, block):
    """The same events through every engine: sequential reads, threads (Hyperscan's:
    ``bytes.find`` never runs outside the GIL, so it reads sequentially), and blocks
    searched in worker processes (both)."""
    import threading

    path = tmp_path / "mixed.log"
    path.write_bytes(_mixed_log())
    one = ScanConfig(block=block, long_line=max(block // 2, 64), workers=1)
    _engines_agree(path, one, ("python", "hyperscan"))
    _engines_agree(path, replace(one, workers=2), ("python", "hyperscan"))
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # forking allowed
    _engines_agree(path, replace(one, workers=2, process_min=0, task=block),
                   ("python", "hyperscan"))


def test_without_hyperscan_the_scan_falls_back_silently(monkeypatch):
    """``import hyperscan`` failing: "auto" and "hyperscan" search with ``bytes.find``,
    find the same lines, search on one thread (the GIL held) and fork worker processes
    still."""
    data = _mixed_log()
    anchors = anchors_for(b"{")
    want = _expected(data, 0, len(data), anchors, True)
    monkeypatch.setitem(sys.modules, "hyperscan", None)  # import raises ImportError
    monkeypatch.setattr(hsearch, "_MODULE", [])
    assert not hsearch.available()
    for engine in ("auto", "hyperscan"):
        config = ScanConfig(engine=engine, workers=4)
        assert engine_for(config) == "python"
        assert anchor_hits(bytearray(data), 0, len(data), anchors, config) == want
        assert config.parallel() == 1 and config.parallel(processes=True) == 4
    text = data.decode("utf-8", errors="replace")
    assert _signature(scan_text(text, config=ScanConfig(engine="hyperscan"))) == \
        _signature(scan_text(text, config=ScanConfig(engine="python")))


def test_engine_choice():
    """"auto": Hyperscan where installed, for spans of any size; threads only where it
    searches (outside the GIL), worker processes with either engine."""
    assert engine_for(ScanConfig()) == ("hyperscan" if HAVE_HS else "python")
    assert engine_for(ScanConfig(engine="python")) == "python"
    assert ScanConfig(engine="python", workers=4).parallel() == 1
    assert ScanConfig(engine="python", workers=4).parallel(processes=True) == 4
    assert ScanConfig(workers=4).parallel() == (4 if HAVE_HS else 1)


# --- routine lines -----------------------------------------------------------------------

def test_routine_anchors_and_what_their_rows_require():
    """Only anchors all of whose rows say what a line must hold are routine; each such
    row's sample holds one of its literals; none can overlap its anchor (Hyperscan then
    rejects routine lines without calling back)."""
    assert set(ROUTINE) == {b"mlx5_core ", b"XFS ("}
    for p in EVENTS:
        if any(a.encode() in ROUTINE for a in p.anchors):
            assert p.requires, p.sample
        if p.requires:
            assert any(r.lower() in p.sample.lower() for r in p.requires), p.sample
    for a, need in ROUTINE.items():
        assert not any(hsearch.overlaps(a, r) for r in need), a
    assert hsearch.overlaps(b"nvidia", b"ia-smi") and hsearch.overlaps(b"nvidia", b"xnv")
    assert hsearch.overlaps(b"nvidia", b"vid") and not hsearch.overlaps(b"nvidia", b"peer")


@pytest.mark.skipif(not HAVE_HS, reason="hyperscan is not installed")
def test_hyperscan_checks_here_a_required_literal_that_overlaps_its_anchor():
    anchors = (b"nvidia", b"NVRM:")
    modes = tuple(Probe(a, ()).mode for a in anchors)
    m = hsearch.matcher(anchors, modes, ((b"nvidia", (b"ia-smi", b"peer")),))
    data = b"a nvidia-smi b\nnvidia ok\nIA-SMI nvidia\nNVRM: nvidia\npeer nvidia\nnvidia\n"
    starts: dict[int, int] = {}
    hsearch.hyperscan_hits(data, 0, len(data), m, starts)
    assert sorted(starts) == [0, data.index(b"IA-SMI"), data.index(b"NVRM"),
                              data.index(b"peer nvidia")]


def _among_routine_lines(sample: str) -> str:
    """``sample`` between routine lines printed with its first line's prefix (the same
    time: a routine line seen or not changes no boot)."""
    first = sample.splitlines()[0]
    _, msg, _ = split_prefix(first)
    prefix = first[:first.rindex(msg)] if msg and msg in first else ""
    noise = "".join(f"{prefix}{line}\n" for line in ROUTINE_LINES)
    return noise + sample + "\n" + noise


@pytest.mark.parametrize("engine", ENGINES)
def test_rejection_keeps_every_rows_events_and_findings(engine):
    """Every row's sample, alone and among routine lines: the same events and
    findings with and without rejection."""
    for p in EVENTS:
        for text in (p.sample + "\n", _among_routine_lines(p.sample)):
            on = scan_text(text, now=NOW, config=ScanConfig(engine=engine))
            off = scan_text(text, now=NOW, config=ScanConfig(engine=engine, reject=False))
            assert _signature(on) == _signature(off), p.sample
            assert _findings(on) == _findings(off), p.sample
            if text != p.sample + "\n":
                assert _signature(on) == [x[:1] + (x[1] + len(ROUTINE_LINES),) + x[2:]
                                          for x in _signature(scan_text(p.sample + "\n",
                                                                        now=NOW))]


@pytest.mark.parametrize("engine", ENGINES)
def test_rejection_keeps_the_corpus_kernel_logs_events_and_findings(corpus, engine):
    samples = corpus.category("4") + corpus.category("8")
    assert len(samples) > 40
    for s in samples:
        on = scan_paths([str(s.path)], now=NOW, config=ScanConfig(engine=engine))
        off = scan_paths([str(s.path)], now=NOW,
                         config=ScanConfig(engine=engine, reject=False))
        assert _signature(on) == _signature(off), s.name
        assert _findings(on) == _findings(off), s.name


_fragments = st.sampled_from([
    "mlx5_core ", "0000:3b:00.0: ", "Link up", "link DOWN", "Port: 1 Link ACTIVE", "AER: ",
    "can't recover", "nvidia", "nvidia-smi", "SXid", "peer", "modprobe", "NVRM: ", "Xid ",
    "(PCI:0000:01:00): ", "79, ", "[ 1.5] ", "PCIe Bus Error: ", "\n", "\n ", "\x00", "{",
    '"MESSAGE":[', "segfault at ", "-- Reboot --", "E-Switch: ", "firmware version",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(_fragments | st.text(max_size=4), max_size=50), st.booleans())
def test_property_engines_agree_and_rejection_keeps_events(parts, reject):
    text = "".join(parts)
    data = text.encode("utf-8", errors="surrogatepass")
    anchors = anchors_for(data[:4096])
    want = _expected(data, 0, len(data), anchors, reject)
    for engine in ("hyperscan", "python"):
        got = anchor_hits(bytearray(data), 0, len(data), anchors,
                          ScanConfig(engine=engine, reject=reject))
        assert got == want, engine
    on = scan_text(text, now=NOW)
    assert _signature(on) == _signature(scan_text(text, now=NOW,
                                                  config=ScanConfig(reject=False)))


@pytest.mark.skipif(not HAVE_HS, reason="hyperscan is not installed")
@pytest.mark.parametrize("storm", [False, True])
def test_hyperscan_databases_are_filled_with_literals_that_find_nothing(storm):
    """Every database holds ``FILL_TO`` patterns or more (Hyperscan's faster literal
    matcher for the anchors' count, see ``hsearch.FILL_TO``); the fillers are distinct,
    and binary junk that holds them (NULs, a DEL) adds no candidate line: the lines
    found are exactly those a line-by-line test finds."""
    from gputriage.logscan import search

    fill = hsearch.fillers(hsearch.FILL_TO)
    assert len(set(fill)) == len(fill)
    anchors = anchors_for(b"")
    m = search._matcher_of(anchors, True, storm)
    assert len(m.checks) < hsearch.FILL_TO == m.patterns  # (filled up to it)
    junk = b"\n".join(b"[ 1.0] bin " + f + b" tail " + f for f in fill)
    data = _mixed_log()[:40_000] + junk + b"\n[ 2.0] nvidia" + junk + b"\n"
    want = _expected(data, 0, len(data), anchors, True)
    starts: dict[int, int] = {}
    hsearch.hyperscan_hits(data, 0, len(data), m, starts, set() if storm else None)
    assert {s for s in starts if s >= 40_000} == {s for s in want if s >= 40_000}
    assert len(starts) >= len([s for s in want if s >= 40_000]) > 0


@pytest.mark.skipif(not HAVE_HS, reason="hyperscan is not installed")
def test_small_spans_are_searched_by_hyperscan(monkeypatch):
    """A worker's 64 KiB margins, a short log: "auto" searches spans of any size with
    Hyperscan and finds the lines ``bytes.find`` finds."""
    config = ScanConfig(block=1 << 20)
    anchors = anchors_for(b"")
    data = bytearray(_mixed_log()[:60_000])
    want = _expected(bytes(data), 0, len(data), anchors, True)
    calls: list[int] = []
    real = hsearch.hyperscan_hits
    monkeypatch.setattr(hsearch, "hyperscan_hits",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    assert anchor_hits(data, 0, len(data), anchors, config) == want and calls
    assert anchor_hits(data, 0, len(data), anchors, ScanConfig(engine="python")) == want
    assert len(calls) == 1

"""Large NCCL logs read by worker processes (gputriage.nccl.scan): the NCCL log reader and
the nccl-tests tap see what the line-by-line reading gives them, at every region edge,
with NUL bytes, long lines, framework errors over several lines and nccl-tests tables
(plain and behind a launcher's prefix)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from nccl_kit import scan_large

from gputriage.nccl import inputs as nccl_input
from gputriage.nccl import scan as nccl_scan
from gputriage.nccl.inputs import BLOCK, TESTS_CAP, _TestsTap, read_inputs
from gputriage.parsers.nccl_log import LONG_LINE, parse_nccl_log, read_nccl_log
from gputriage.parsers.nccl_model import NcclLog

ENGINES = ["plain"] + (["hyperscan"] if nccl_scan._hyperscan() is not None else [])

_FW = [  # a watchdog timeout wrapped over two lines: the second holds no marker
    "[E ProcessGroupNCCL.cpp:828] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000)",
    " ran for 1800523 milliseconds before timing out.",
]
_TABLE = [
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0",
    "#  Rank  0 Group  0 Pid  12345 on  node1 device  0 [0x18] NVIDIA H100 80GB HBM3",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong",
    "           8             2     float     sum      -1    35.12    0.00    0.00      0"
    "    34.56    0.00    0.00      0",
    "   134217728      33554432     float     sum      -1   1234.5  108.72  190.26      0"
    "   1230.1  109.11  190.95      0",
    "# Avg bus bandwidth    : 95.1234 ",
]
_SHIPPED_ROW = ("[1,0]<stdout>:     1048576        262144     float     sum      -1   "
                "80.25   13.07   22.87      0    79.91   13.12   22.97      0")


def _nccl_lines() -> list[str]:
    from gputriage.scenarios.catalog import SOCKET_JOB
    from gputriage.scenarios.model import healthy_hgx_h100
    from gputriage.scenarios.render_nccl import nccl_log

    return nccl_log(healthy_hgx_h100(), SOCKET_JOB).splitlines()


def _generated(size: int = 3 << 20, seed: int = 5) -> bytes:
    """A training log with every awkward thing in it, ``size`` bytes or so."""
    rng = random.Random(seed)
    nccl = _nccl_lines()
    out: list[bytes] = []
    total = 0
    # rows behind a prefix count from the 1 MiB block where a prefixed nccl-tests line was
    # first seen (here the third block): those at 0.1, 0.45 do not, those at 0.68, 0.9 do
    table_at = {int(size * f): what for f, what in (
        (0.1, "shipped"), (0.2, "table"), (0.45, "shipped"), (0.68, "shipped"),
        (0.7, "prefixed"), (0.9, "shipped"))}
    while total < size:
        pick = rng.random()
        if table_at and total >= min(table_at):
            what = table_at.pop(min(table_at))
            if what == "shipped":
                lines = [_SHIPPED_ROW] * 3
            elif what == "prefixed":
                lines = ["[1,0]<stdout>:" + t for t in _TABLE]
            else:
                lines = list(_TABLE)
        elif pick < 0.03:
            lines = [rng.choice(nccl)]
        elif pick < 0.035:
            lines = list(_FW)
        elif pick < 0.037:
            lines = ["RuntimeError: CUDA error: an illegal memory access was encountered"]
        elif pick < 0.038:  # NUL runs glued to a record
            lines = ["\0" * rng.randint(1, 300) + rng.choice(nccl)]
        elif pick < 0.0385:  # long lines, with and without a marker, some after an error
            fill = "x" * rng.choice((LONG_LINE - 1, LONG_LINE, LONG_LINE + 1, 3 * LONG_LINE))
            lines = ([_FW[0]] if rng.random() < 0.5 else []) + [
                fill + (" NCCL INFO long" if rng.random() < 0.5 else "")]
        elif pick < 0.04:
            lines = [rng.choice(nccl) + "\r", "", "\t" + rng.choice(nccl)]
        else:
            lines = [f"2025-03-02 10:{rng.randint(0, 59):02d}:00 [rank{rng.randint(0, 15)}] "
                     f"INFO train.py:412 step {rng.randint(1, 9999)} loss {rng.random():.4f}"]
        data = "".join(ln + "\n" for ln in lines).encode()
        out.append(data)
        total += len(data)
    out.append(b"last line without a newline NCCL INFO Using network Socket")
    return b"".join(out)


def _streamed(path: Path) -> tuple[NcclLog, list[str], bool]:
    """The reference: the file's 1 MiB blocks through the NCCL log reader and the tap."""
    data = path.read_bytes()
    blocks = [data[i:i + BLOCK] for i in range(0, len(data), BLOCK)]
    tap = _TestsTap(path.name, [])
    log = read_nccl_log(tap.tap(blocks), path.name)
    return log, tap.kept, tap.full


def _fast(path: Path, region: int, workers: int, engine: str,
          cap: int = TESTS_CAP) -> tuple[NcclLog, list[str], bool, int]:
    return scan_large(path, region, workers, engine, cap)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nccl") / "job.log"
    path.write_bytes(_generated())
    return path


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("region", "workers"), [(65_537, 1), (1 << 20, 2), (4093, 2)])
def test_generated_log_same_as_streamed(generated, engine, region, workers):
    ref_log, ref_kept, ref_full = _streamed(generated)
    log, kept, full, end = _fast(generated, region, workers, engine)
    assert end == generated.stat().st_size
    assert dataclasses.asdict(log) == dataclasses.asdict(ref_log)
    assert (kept, full) == (ref_kept, ref_full)
    # the log holds what the test is about
    assert ref_log.skipped >= 2 and ref_log.framework_errors and ref_log.processes
    assert any(k.startswith("[1,0]<stdout>:") and " float " in k for k in kept)
    assert sum(k == _SHIPPED_ROW for k in kept) == 6  # those of the third block on


@pytest.mark.parametrize("engine", ENGINES)
def test_generated_log_same_as_parsed_text(generated, engine):
    """The plain line-by-line parse of the whole text gives the same log."""
    text = generated.read_bytes().decode("utf-8", "surrogateescape")
    ref = parse_nccl_log(text)
    ref.origins.append(generated.name)
    log = _fast(generated, 8191, 2, engine)[0]
    assert dataclasses.asdict(log) == dataclasses.asdict(ref)


def test_tap_cap_cuts_where_streaming_does(generated):
    cap = 1000
    data = generated.read_bytes()
    ref = _TestsTap("x", [])
    ref_size = 0
    for _ in ref.tap([data[i:i + BLOCK] for i in range(0, len(data), BLOCK)]):
        pass
    assert not ref.full
    ref_size = sum(len(k) + 1 for k in ref.kept)
    assert ref_size > cap
    expect: list[str] = []
    size = 0
    for k in ref.kept:
        size += len(k) + 1
        if size > cap:
            break
        expect.append(k)
    _, kept, full, _ = _fast(generated, 65_536, 2, ENGINES[-1], cap=cap)
    assert full and kept == expect


@pytest.mark.slow  # every NCCL sample, by workers, twice
@pytest.mark.parametrize("engine", ENGINES)
def test_corpus_nccl_samples_same_as_parsed(corpus, tmp_path, engine):
    for s in corpus.category("5"):
        data = s.path.read_bytes()
        path = tmp_path / s.name
        path.write_bytes(data)
        ref_log, ref_kept, ref_full = _streamed(path)
        text_log = parse_nccl_log(s.text())
        text_log.origins.append(s.name)
        for region in (4096, 1 << 20):
            log, kept, full, _ = _fast(path, region, 2, engine)
            assert dataclasses.asdict(log) == dataclasses.asdict(ref_log), s.name
            assert dataclasses.asdict(log) == dataclasses.asdict(text_log), s.name
            assert (kept, full) == (ref_kept, ref_full), s.name


def _both_ways(paths: list[str], monkeypatch) -> tuple[tuple, tuple]:
    """``gputriage nccl``'s reading of ``paths``: streamed, then by workers."""
    def summary(found: nccl_input.JobInputs) -> tuple:
        snap = found.snapshot
        return (dataclasses.asdict(found.log), [dataclasses.asdict(r) for r in found.runs],
                found.problems, found.job_origins,
                None if snap is None else sorted(snap.captures))

    monkeypatch.setattr(nccl_scan, "usable", lambda size: False)
    slow = summary(read_inputs(paths))
    called: list[int] = []
    real = nccl_scan.read_large

    def spy(*args, **kwargs):
        called.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(nccl_scan, "usable", lambda size: True)
    monkeypatch.setattr(nccl_scan, "read_large", spy)
    fast = summary(read_inputs(paths))
    assert len(called) == len(paths)
    return slow, fast


@pytest.mark.slow  # a 3 MiB log read both ways
def test_read_inputs_same_either_way(generated, monkeypatch):
    slow, fast = _both_ways([str(generated)], monkeypatch)
    assert fast == slow
    assert slow[1]  # nccl-tests runs were read


@pytest.mark.slow  # every NCCL sample, both ways
def test_read_inputs_corpus_same_either_way(corpus, monkeypatch):
    """Every category-5 sample (and all of them at once), host outputs included."""
    paths = [str(s.path) for s in corpus.category("5")]
    for path in paths:
        slow, fast = _both_ways([path], monkeypatch)
        assert fast == slow, path
    slow, fast = _both_ways(paths, monkeypatch)
    assert fast == slow


def test_finders_agree_on_edges():
    """Both finders: markers and rows at the very start and end of a buffer, rows with
    tabs, '#' lines, and no row where the digits do not start the line."""
    buf = bytearray(b"  8 2 float\nx NCCL y\n\t16\t4\tint8 sum\nfoo 8 2 float\n# c\n"
                    b"a_perf\nTest failure\nCUDA error z\nq Error: nccl\n8 2 half")
    want_log = [buf.index(b"x NCCL"), buf.index(b"CUDA"), buf.index(b"q Error")]
    want_tests = [0, buf.index(b"\t16"), buf.index(b"# c"), buf.index(b"a_perf"),
                  buf.index(b"Test f"), buf.rindex(b"8 2 half")]
    for engine in ENGINES:
        log, tests = nccl_scan._finder(engine)(buf, 0, len(buf), True)
        assert (log, tests) == (want_log, want_tests), engine
        inner = buf.index(b"x NCCL")  # a run of lines after a newline
        log, tests = nccl_scan._finder(engine)(buf, inner, len(buf), True)
        assert log == want_log and tests == want_tests[1:], engine


def test_meanwhile_runs_once_while_host_outputs_are_looked_for(corpus, monkeypatch):
    """What the caller does next runs once, while a large input's host outputs are looked
    for in another process; and not at all when no input is read that way."""
    paths = [str(s.path) for s in corpus.category("5")[:2]]
    ran: list[int] = []
    monkeypatch.setattr(nccl_scan, "usable", lambda size: False)
    streamed = read_inputs(paths, meanwhile=lambda: ran.append(1))
    assert ran == []
    monkeypatch.setattr(nccl_scan, "usable", lambda size: True)
    by_workers = read_inputs(paths, meanwhile=lambda: ran.append(1))
    assert ran == [1]  # two inputs read by workers: once
    sizes = iter([False, True])  # the first input streamed, the second by workers
    monkeypatch.setattr(nccl_scan, "usable", lambda size: next(sizes))
    read_inputs(paths, meanwhile=lambda: ran.append(2))
    assert ran == [1, 2]
    assert dataclasses.asdict(by_workers.log) == dataclasses.asdict(streamed.log)


_ROW = ("           8             2     float     sum      -1    35.12    0.00    0.00      0"
        "    34.56    0.00    0.00      0")


def test_rows_searched_only_where_a_table_may_be():
    """Table rows are searched in a piece that holds an nccl-tests marker, or when asked
    (a marker just before the piece, the line cut between regions); elsewhere a piece
    costs no row search, whatever its lines start with."""
    quiet = b"2025-03-02 10:00:00 [rank1] INFO step 1\n" * 50
    buf = bytearray(quiet + _ROW.encode() + b"\n" + quiet)
    row = len(quiet)
    for engine in ENGINES:
        find = nccl_scan._finder(engine)
        assert find(buf, 0, len(buf), True)[1] == [row], engine
        assert find(buf, 0, len(buf), False)[1] == [], engine
        marked = bytearray(b"# a comment\n" + buf)
        assert find(marked, 0, len(marked), False)[1] == [0, row + 12], engine


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("gap", [0, 1000, 60_000])
def test_table_cut_by_a_region_edge_same_as_streamed(tmp_path, engine, gap):
    """A table whose header is in one region and rows in the next (``gap`` bytes of
    other lines between): the rows are found as the streamed tap finds them."""
    quiet = [f"2025-03-02 10:00:{i % 60:02d} [rank{i % 8}] INFO train.py:1 step {i}"
             for i in range(20_000)]
    head = "\n".join(quiet[:2000]) + "\n"
    filler = "".join(ln + "\n" for ln in quiet[2000:]) [:gap]
    filler = filler[:filler.rfind("\n") + 1]
    table = "\n".join(_TABLE[:3]) + "\n" + filler + "\n".join([_ROW] * 3 + _TABLE[3:5]) + "\n"
    rest = "\n".join(quiet[2000:]) + "\n"
    path = tmp_path / "job.log"
    path.write_text(head + table + rest)
    region = len(head) + len("\n".join(_TABLE[:3])) + 1 + len(filler) + 7  # in the rows
    ref_log, ref_kept, ref_full = _streamed(path)
    log, kept, full, _ = _fast(path, region, 2, engine)
    assert (kept, full) == (ref_kept, ref_full)
    assert sum(k == _ROW for k in kept) == 4


@pytest.mark.parametrize("engine", ENGINES)
def test_regions_mapped_or_read_give_the_same_log(generated, engine, monkeypatch):
    """Regions on a mapping boundary are mapped, not copied; where mapping is refused they
    are read into a buffer: the same log and nccl-tests lines either way."""
    mapped: list[int] = []
    real = nccl_scan._mapped

    def spy(fd: int, start: int, size: int):  # type: ignore[no-untyped-def]
        found = real(fd, start, size)
        mapped.append(found is not None)
        return found

    monkeypatch.setattr(nccl_scan, "_mapped", spy)
    log, kept, full, end = _fast(generated, 1 << 16, 1, engine)
    assert mapped and all(mapped)
    monkeypatch.setattr(nccl_scan, "_mapped", lambda fd, start, size: None)
    read = _fast(generated, 1 << 16, 1, engine)
    assert (dataclasses.asdict(log), kept, full, end) == (
        dataclasses.asdict(read[0]), *read[1:])

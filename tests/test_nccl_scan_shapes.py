"""The NCCL log readers (the large-file scan of gputriage.nccl.scan and the streamed
reader of gputriage.parsers.nccl_log) on the lines they leave out: a line whose only
markers are weak ones ("] INFO ", " WARN ", words of every program's log) is handed to
the builder only in a shape the builder can use. Generated logs of the class (several
hosts and processes, INFO and WARN storms, old NCCL records, IB completion errors, the
fallback to sockets, nccl-tests tables, CRLF, non-UTF-8 bytes, NULs, long lines, lines
cut at region and block edges) must read as when every line holding a marker is parsed,
to the last counter."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from nccl_kit import scan_large

from gputriage.nccl import scan as nccl_scan
from gputriage.nccl import tap as tests_tap
from gputriage.nccl.inputs import BLOCK, _TestsTap
from gputriage.parsers import nccl_log
from gputriage.parsers.nccl_build import Builder
from gputriage.parsers.nccl_log import LONG_LINE, MARKERS, read_nccl_log
from gputriage.parsers.nccl_model import NcclLog

ENGINES = ["plain"] + (["hyperscan"] if nccl_scan._hyperscan() is not None else [])
# the streamed reader and its tap: bytes.find and regexes, or one Hyperscan pass a block
STREAM_ENGINES = ["plain"] + (["hyperscan"] if nccl_log._finder() is not None
                              and tests_tap._finder() is not None else [])
HOSTS = ("gpu-a01", "gpu-a02", "gpu-b17", "gpu-b18")


def _rec(rng: random.Random, msg: str, level: str = "INFO", loc: str = "") -> str:
    host = rng.choice(HOSTS)
    dev = rng.randint(0, 7)
    return f"{host}:{4100 + dev}:{4200 + dev} [{dev}] {loc}NCCL {level} {msg}"


def _nccl(rng: random.Random) -> list[str]:
    """Records of a multi-node job: per-channel lines, the socket fallback, IB errors."""
    r, p = rng.randint(0, 15), rng.randint(0, 15)
    ch = rng.randint(0, 3)
    return [rng.choice([
        _rec(rng, f"Channel {ch:02d}/0 : {r}[{r % 8}] -> {p}[{p % 8}] via P2P/IPC/read"),
        _rec(rng, f"Channel {ch:02d}/0 : {r}[{r % 8}] -> {p}[{p % 8}] [send] via NET/Socket/0"),
        _rec(rng, f"Channel {ch:02d}/0 : {r}[{r % 8}] -> {p}[{p % 8}] [receive] via "
                  "NET/IB/1/GDRDMA"),
        _rec(rng, "NET/IB : No device found."),
        _rec(rng, "NET/Socket : Using [0]eth0:10.0.0.1<0>"),
        _rec(rng, "Using network Socket"),
        _rec(rng, "NCCL_SOCKET_IFNAME set by environment to eth0"),
        _rec(rng, f"comm 0x5581{r:04x} rank {r} nRanks 16 nNodes 2 localRanks 8 localRank "
                  f"{r % 8} MNNVL 0"),
        _rec(rng, f"comm 0x5581{r:04x} rank {r} nranks 16 cudaDev {r % 8} busId "
                  f"{r % 8}8000 - Init COMPLETE"),
        _rec(rng, f"AllReduce: opCount {rng.randint(0, 99):x} sendbuff 0x7f datatype 7 op 0 "
                  "root 0 comm 0x55 [nranks=16] stream 0x56"),
        _rec(rng, "NET/IB : Got completion from peer 10.0.0.2<42> with status=12 opcode=0 "
                  "len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1",
             "WARN", "transport/net_ib.cc:1295 "),
        _rec(rng, "socketProgress: Connection closed by remote peer", "WARN",
             "misc/socket.cc:50 "),
    ])]


def _old(rng: random.Random) -> list[str]:
    """What the builder reads without the word NCCL: old NCCL's records, bare completion
    errors, a watchdog timeout behind a weak marker, whitespace of every kind."""
    host, dev = rng.choice(HOSTS), rng.randint(0, 7)
    return [rng.choice([
        f"{host}:77:88 [{dev}] INFO NET : Using interface eth0:10.0.0.1<0>",
        f"{host}:77:88 [{dev}] INFO NET/IB : Using interface ib0 for sideband communication",
        f"{host}:77:88 [{dev}] misc/ibvwrap.cc:252 WARN Call to ibv_create_qp failed",
        "include/socket.h:311 WARN Net : Connect to 10.0.0.2<43> failed : Connection refused",
        "NET/IB : Got completion from peer 10.0.0.3<1> with error 12, opcode 0, len 0, "
        "vendor err 129",
        f"{host}:77:88\u3000[{dev}]\u00a0INFO NET : Using interface ib1:10.1.0.1<0> "
        "[x] INFO trailing",
        f"{host}:77:88 [{dev}] init.cc:90\u2003 WARN\tinvalid usage of something",
        f"{host}:77:88 [{dev}] misc/ibvwrap.cc:25\0\0\x002 WARN Call to ibv_reg_mr failed",
        "2025-03-02 10:00:01 [rank3] WARN Watchdog caught collective operation timeout: "
        f"Work(SeqNum={rng.randint(1, 999)}, OpType=ALLREDUCE) ran for 1800100 milliseconds "
        "before timing out.",
        "Watchdog caught collective operation timeout: no marker here, not read either way",
    ])]


def _noise(rng: random.Random) -> list[str]:
    """Other programs' lines with weak markers (and a few shapes that are not records)."""
    return [rng.choice([
        f"2025-03-02 10:{rng.randint(0, 59):02d}:00 [rank{rng.randint(0, 15)}] INFO "
        f"train.py:412 step {rng.randint(1, 9999)} loss {rng.random():.4f}",
        f"10:00:{rng.randint(10, 59)} WARN org.apache.kafka.Client - retrying in 5 s",
        f"[{rng.randint(0, 9)}] INFO worker started",
        "train.py:88 WARNING grad norm is large",
        "[2] INFO \xe9t\xe9",
        "plain text without any marker",
    ])]


_TABLE = [
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong",
    "     1048576        262144     float     sum      -1    80.25   13.07   22.87      0"
    "    79.91   13.12   22.97      0",
    "# Avg bus bandwidth    : 22.9",
]


def _generated(size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    out: list[bytes] = []
    total = 0
    while total < size:
        pick = rng.random()
        storm = pick < 0.02  # one line again and again
        if storm or pick < 0.2:
            lines = _nccl(rng) * (rng.randint(20, 60) if storm else 1)
        elif pick < 0.26:
            lines = _old(rng)
        elif pick < 0.265:
            lines = list(_TABLE)
        elif pick < 0.268:  # long lines: with a weak marker only, or none
            lines = ["y" * (LONG_LINE + rng.randint(-2, 2)) + rng.choice(
                ["] INFO ", " WARN ", ""])]
        else:
            lines = _noise(rng)
        ends = "\r\n" if rng.random() < 0.05 else "\n"
        data = "".join(ln + ends for ln in lines).encode()
        if rng.random() < 0.01:  # non-UTF-8 bytes
            data = b"\xff\xfe" + data
        if rng.random() < 0.004:  # NULs left by a crash, inside a token
            cut = data.find(b":")
            data = data[:cut + 2] + b"\0" * rng.randint(1, 40) + data[cut + 2:]
        out.append(data)
        total += len(data)
    out.append(b"gpu-a01:4100:4200 [0] NCCL INFO cut at the end without a newline")
    return b"".join(out)


def _every_marker_line(data: bytes, name: str) -> NcclLog:
    """The reference: every line holding a marker (and every line of a framework error
    being gathered) parsed, each repeat too."""
    log = NcclLog(origins=[name])
    b = Builder(log, replay=False)
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    log.lines_read = len(lines)
    for raw in lines:
        if not b.want and not any(m in raw for m in MARKERS):
            continue
        if len(raw) > LONG_LINE:
            log.skipped += 1
            continue
        b.feed(raw.replace(b"\0", b"").decode("utf-8", "replace").rstrip("\r"))
    b.finish()
    return log


def _streamed(data: bytes, name: str, block: int = BLOCK) -> tuple[NcclLog, list[str]]:
    """The streamed NCCL log reader and the nccl-tests tap over ``block``-sized blocks."""
    tap = _TestsTap(name, [])
    log = read_nccl_log(tap.tap([data[i:i + block] for i in range(0, len(data), block)]), name)
    return log, tap.kept


def _plain_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The streamed reader and its tap without Hyperscan."""
    monkeypatch.setattr(nccl_log, "_finder", lambda: None)
    monkeypatch.setattr(tests_tap, "_finder", lambda: None)


def _scanned(path: Path, region: int, engine: str) -> tuple[NcclLog, list[str]]:
    log, kept, _, end = scan_large(path, region, 1, engine)
    assert end == path.stat().st_size
    return log, kept


@pytest.fixture(scope="module")
def shaped(tmp_path_factory) -> tuple[Path, NcclLog, list[str]]:
    path = tmp_path_factory.mktemp("nccl-shapes") / "job.log"
    data = _generated(600_000, 7)
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as plain:  # (the tap's reference: no Hyperscan)
        _plain_stream(plain)
        kept = _streamed(data, path.name)[1]
    return path, _every_marker_line(data, path.name), kept


@pytest.mark.parametrize("engine", STREAM_ENGINES)
@pytest.mark.parametrize("block", [BLOCK, 96 << 10, 4093])
def test_streamed_reader_reads_as_every_marker_line_parsed(shaped, block, engine, monkeypatch):
    """Both ways, in blocks that Hyperscan searches (those without a NUL, at least
    FINDER_MIN long) and blocks it does not."""
    path, ref, ref_kept = shaped
    data = path.read_bytes()
    searched: list[int] = []
    if engine == "plain":
        _plain_stream(monkeypatch)
    else:
        real = nccl_log._finder()
        assert real is not None

        def spy(buf, lo, hi):
            searched.append(hi - lo)
            return real(buf, lo, hi)

        monkeypatch.setattr(nccl_log, "_finder", lambda: spy)
    log, kept = _streamed(data, path.name, block)
    assert dataclasses.asdict(log) == dataclasses.asdict(ref)
    assert kept == ref_kept
    if engine == "hyperscan":  # (the test is about those blocks: all but the short ones)
        assert sum(searched) > (len(data) // 2 if block >= nccl_log.FINDER_MIN else 0)


@pytest.mark.parametrize("seed", [3, 4])
def test_tap_candidates_same_either_way(seed, monkeypatch):
    """The nccl-tests tap's candidate lines, by Hyperscan and by the regex and finds: the
    same lines, rows at the piece's first line and cut at its end included."""
    if "hyperscan" not in STREAM_ENGINES:
        pytest.skip("hyperscan is not installed")
    data = b"\n" + _generated(200_000, seed)
    pieces = [(0, len(data))]
    rng = random.Random(seed)
    for _ in range(40):  # pieces that start on a newline, ending anywhere
        lo = data.find(b"\n", rng.randrange(len(data) // 2))
        pieces.append((lo, min(len(data), lo + tests_tap.FINDER_MIN + rng.randrange(9000))))
    table = "\n".join(_TABLE).encode()  # a row as the first line, a row cut at the end
    pieces.append((0, len(table) - 20))
    with_hs = [tests_tap.candidates(data, lo, hi) for lo, hi in pieces[:-1]]
    with_hs.append(tests_tap.candidates(b"\n" + table[1:], 0, len(table) - 20))
    monkeypatch.setattr(tests_tap, "FINDER_MIN", 1)  # (the table piece too)
    small = tests_tap.candidates(b"\n" + table[1:], 0, len(table) - 20)
    monkeypatch.setattr(tests_tap, "_finder", lambda: None)
    plain = [tests_tap.candidates(data, lo, hi) for lo, hi in pieces[:-1]]
    plain.append(tests_tap.candidates(b"\n" + table[1:], 0, len(table) - 20))
    assert with_hs == plain
    assert small == plain[-1] and len(small) == 3
    assert sum(len(found) for found in plain) > 50  # (tables and '#' lines in the pieces)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("region", [4093, 100_003])
def test_weak_marker_lines_read_as_the_reader_reads_them(shaped, engine, region):
    path, ref, ref_kept = shaped
    log, kept = _scanned(path, region, engine)
    assert dataclasses.asdict(log) == dataclasses.asdict(ref)
    assert kept == ref_kept
    # the log holds what the test is about
    warns = [w for p in ref.processes for w in p.warns]
    assert len(ref.processes) >= 8 and ref.skipped >= 2
    assert {"ib-completion", "socket"} <= {w.kind for w in warns}
    assert any(p.socket_ifaces and p.pid == 77 for p in ref.processes)  # old INFO records
    assert any(w.source_loc == "include/socket.h:311" for w in warns)  # an old WARN, no host
    assert any(w.kind == "timeout" for w in ref.framework_errors)
    assert any("ib1" in p.socket_ifaces for p in ref.processes)  # unicode whitespace
    assert any("ibv_reg_mr" in w.message for w in warns)  # a shape behind a NUL


def test_every_builder_shape_without_the_word_nccl_is_a_candidate():
    """Each weak-marker line the builder uses is found by both finders; lines of other
    programs with the same words are not."""
    used = [f"{h}\n" for h in (
        "h:1:2 [0] INFO NET : Using interface eth0:10.0.0.1<0>",
        "h:1:2 [0] init.cc:90 WARN invalid usage",
        "x [rank0] WARN Watchdog caught collective operation timeout: Work ran for 9",
        "h:1:2\u3000[3]\u00a0INFO NET : Using interface ib1 ] INFO ")]
    unused = ["[rank3] INFO train.py:412 step 9\n", "10:00:01,123 WARN kafka retrying\n",
              "[2] INFO worker started\n"]
    buf = bytearray("".join(used + unused).encode())
    want = [0]
    for line in used[:-1]:
        want.append(want[-1] + len(line.encode()))
    for engine in ENGINES:
        assert nccl_scan._finder(engine)(buf, 0, len(buf), True)[0] == want, engine


def test_a_line_full_of_shapes_is_looked_at_once(monkeypatch):
    """A hostile line holding a shape again and again costs one look, not one per shape
    (each look reads the whole line: that would be quadratic)."""
    from gputriage.parsers import nccl_log

    looks: list[int] = []
    real = nccl_log._add_if_marked

    def spy(buf, lo, hi, at, markers, *rest):
        if markers is nccl_log.WEAK:  # a look for the shapes' sake
            looks.append(at)
        return real(buf, lo, hi, at, markers, *rest)

    monkeypatch.setattr(nccl_log, "_add_if_marked", spy)
    buf = b":1 WARN " * 8_000 + b"\nx NCCL y\n"  # under LONG_LINE
    assert nccl_log.candidate_starts(buf, 0, len(buf)) == [0, buf.index(b"x NCCL")]
    assert len(looks) == 1


def test_streamed_readers_on_two_threads_at_once():
    """``nccl -`` with host outputs on a large stdin reads the NCCL lines twice at once:
    on this thread, and on the host loader's (the large-text reader's feeder). Each
    thread's Hyperscan searches have their own scratch space (one in use by another
    scan makes Hyperscan refuse)."""
    if "hyperscan" not in STREAM_ENGINES:
        pytest.skip("hyperscan is not installed")
    import threading

    data = _generated(900_000, 11)

    def both() -> tuple[dict, list[str]]:  # (the log reader's finder and the tap's)
        log, kept = _streamed(data, "job.log", 256 << 10)
        return dataclasses.asdict(log), kept

    want = both()
    start = threading.Barrier(4)
    got: list[object] = []

    def read() -> None:
        start.wait()
        for _ in range(6):
            try:
                got.append(both())
            except Exception as exc:  # (handed to the test's thread)
                got.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 24

"""The storm path (gputriage.logscan.storm) against the per-line parse: generated Xid
storms in each log format, across boots, resets and driver loads, in small blocks read
here and in worker processes, must fold into the very same events."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gputriage.logscan import ScanConfig, blocks, lines, scan_paths, scan_text
from gputriage.parsers import kernel_fold, kernel_repeats
from gputriage.parsers.kernel_model import DriverEvent

NOW = datetime(2024, 9, 1, tzinfo=timezone.utc)
T0 = datetime(2024, 8, 30, 3, 0, 0, tzinfo=timezone.utc)
BUSES = ("0000:18:00", "0000:2A:00", "0000:9a:00")
FORMATS = ("dmesg", "dmesg-T", "short-iso", "syslog", "rfc3339", "json")
_MESSAGES = {
    13: "Graphics SM Warp Exception on (GPC {g}, TPC {t}, SM 0): Out Of Range Address",
    31: "Ch 0000003b, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{g} faulted @ "
        "0x7f1c_{a:08x}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 000000{t:02x}",
    45: "Ch 000000{t:02x}",
    119: "Timeout after 6s of waiting for RPC response from GPU{g} GSP! Expected function 76",
}
# lines the storm path must leave to the per-line parse (each still an Xid)
_ODD = (
    "NVRM: Xid (PCI:{bus}): 45, pid={pid}, name=linker, Ch 00000010",
    "NVRM: Xid (PCI:{bus}): 45, pid={pid}, name=python3, Ch 00000010, caused by previous "
    "Xid 13",
    "NVRM: Xid (PCI:{bus}): 74, pid={pid}, name=python3, NVLink: fatal error detected on "
    "link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    "NVRM: Xid (PCI:{bus}): 31, pid={pid}, name=pythön, Ch 0000003b, intr 00000000",
    "NVRM: Xid (PCI:{bus}): 13, pid='{pid}', name=<unknown>, Graphics Exception",
    "NVRM: Xid (PCI:{bus}): 13, pid={pid}, name=python3, FATAL Graphics Exception",
    "NVRM: Xid (PCI:{bus}): 13, pid={pid},  name=python3, Graphics Exception",
    "NVRM: Xid (PCI:{bus}): 43, pid={pid}, name=python3, Ch 0000003b on link 2",
    "NVRM: Xid (PCI:{bus}): 13, pid={pid}, name=python3, Graphics Exception é",
    "NVRM: Xid (PCI:{bus}-link): 13, pid={pid}, name=python3, Graphics Exception",
    "NVRM: Xid (PCI:{bus}é): 13, pid={pid}, name=python3, Graphics Exception",
)
_EVENTS = (  # other events among them: resets, driver loads, a call trace
    "NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x1 (GPU Reset Required) "
    "to 0x0 (None)",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023",
    "INFO: task python3:{pid} blocked for more than 120 seconds.",
    "nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
    "mlx5_core 0000:5d:00.0 ibp93s0: Link down",
)


def _message(rng: random.Random, code: int) -> str:
    return _MESSAGES[code].format(g=rng.randint(0, 7), t=rng.randint(0, 255),
                                  a=rng.getrandbits(32))


def _body(rng: random.Random, procs: list[tuple[int, str]]) -> str:
    r = rng.random()
    bus = rng.choice(BUSES)
    pid, name = rng.choice(procs)
    if r < 0.02:
        return rng.choice(_ODD).format(bus=bus, pid=pid)
    if r < 0.03:
        return rng.choice(_EVENTS).format(bus=bus, pid=pid)
    if r < 0.2:
        return f"usb 1-{rng.randint(1, 4)}: new high-speed USB device number 3 using xhci_hcd"
    code = rng.choice((13, 31, 43, 45, 45, 119))
    return f"NVRM: Xid (PCI:{bus}): {code}, pid={pid}, name={name}, {_message(rng, code)}"


def _line(fmt: str, t: datetime, up: float, msg: str, boot: str) -> str:
    if fmt == "dmesg":
        return f"[{up:12.6f}] {msg}"
    if fmt == "dmesg-T":
        return f"[{t:%a %b %d %H:%M:%S %Y}] {msg}"
    if fmt == "short-iso":
        return f"{t:%Y-%m-%dT%H:%M:%S}+0000 gpu-node-3 kernel: {msg}"
    if fmt == "syslog":
        return f"{t:%b %d %H:%M:%S} gpu-node-3 kernel: [{up:12.6f}] {msg}"
    if fmt == "rfc3339":  # (rsyslog's high-precision stamps)
        return f"{t:%Y-%m-%dT%H:%M:%S.%f}+00:00 gpu-node-3 kernel: {msg}"
    return json.dumps({"__REALTIME_TIMESTAMP": str(int(t.timestamp() * 1e6)),
                       "__MONOTONIC_TIMESTAMP": str(int(up * 1e6)), "_BOOT_ID": boot,
                       "MESSAGE": msg})


def storm_log(fmt: str, seed: int = 1, n: int = 2000) -> str:
    """A storm of ``n`` lines over three boots (a banner, a journal marker or boot id;
    in dmesg the last one only told by an uptime that goes back), with time gaps longer than
    an Xid 45's follow-on window, call traces and continuation lines."""
    rng = random.Random(seed)
    procs = [(rng.randint(100, 99999), rng.choice(("python3", "torchrun", "nvidia-smi")))
             for _ in range(80)]  # more than a folded event names
    t, up, boot = T0, 5.0, "b0"
    out = []
    for i in range(n):
        if i in (n // 3, 2 * n // 3):  # a reboot
            boot = f"b{i}"
            up = 3.0
            if fmt == "short-iso" and i > n // 3:
                out.append(f"-- Boot {rng.getrandbits(128):032x} --")
            elif fmt != "json" and (i == n // 3 or fmt != "dmesg"):
                out.append(_line(fmt, t, up, "Linux version 6.5.0-44-generic (buildd@lcy02)",
                                 boot))
        step = rng.choice((0.0, 0.0, 0.001, 0.4, 45.0)) if i % 97 else 31.0
        t += timedelta(seconds=step)
        up += step
        msg = _body(rng, procs)
        out.append(_line(fmt, t, up, msg, boot))
        if "blocked for more than" in msg:
            out += [_line(fmt, t, up, "Call Trace:", boot),
                    _line(fmt, t, up, _body(rng, procs), boot)]
        elif i % 53 == 0 and fmt != "json":  # (spaces, or a tab, lead it)
            out.append(("    " if i % 2 else "\t") + "continued text of the line before")
    return "\n".join(out) + "\n"


def dump(ev: DriverEvent) -> tuple:
    """Everything an event says, its folded occurrences included."""
    reps = ev.repeats
    folded = None if reps is None else (
        "itself" if reps.last is ev else dump(reps.last), list(reps.processes.items()),
        reps.other_processes,
        sorted((k, sorted(v)) for k, v in reps.patterns.items()), sorted(reps.tries.items()),
        sorted(reps.causes.items()), reps.uncaused)
    return (ev.kind, ev.line, ev.bus_id, ev.timestamp, sorted(ev.details.items()), ev.time,
            ev.uptime_s, ev.boot, ev.lineno, ev.origin, ev.count, ev.follows, folded)


@pytest.fixture(autouse=True)
def _keep_few(monkeypatch):
    """Keys folded after a few occurrences (not 64): short logs storm."""
    monkeypatch.setattr(kernel_fold, "KEEP", 3)
    monkeypatch.setattr(blocks, "BLOCK_KEEP", 2)


def _scan_both(monkeypatch, run) -> tuple[list, list]:
    """What a scan finds with the storm path and without: its events, then its boots,
    lines and formats."""
    with monkeypatch.context() as m:
        m.setattr(lines, "USABLE", False)
        slow = run()
    fast = run()
    assert (fast.boots, fast.lines, fast.skipped, fast.formats) == (
        slow.boots, slow.lines, slow.skipped, slow.formats)
    return [dump(e) for e in fast.events], [dump(e) for e in slow.events]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_storm_path_folds_as_the_per_line_parse(monkeypatch, tmp_path, fmt):
    text = storm_log(fmt)
    path = tmp_path / "kern.log"
    path.write_text(text)
    xids = text.count("NVRM: Xid (PCI:")
    parsed: list[int] = []  # Xid lines handed to the per-line parse
    real_line = lines.LineSource.line

    def line(self, lineno, raw, cut):  # type: ignore[no-untyped-def]
        if b"NVRM: Xid (PCI:" in raw:
            parsed.append(1)
        return real_line(self, lineno, raw, cut)

    monkeypatch.setattr(lines.LineSource, "line", line)
    # many block edges, and one block; lines screened by Hyperscan or here
    for block, engine in ((1500, "hyperscan"), (1 << 20, "hyperscan"), (1500, "python"),
                          (1 << 20, "python")):
        config = ScanConfig(block=block, workers=1, engine=engine)
        fast, slow = _scan_both(monkeypatch, lambda c=config: scan_text(text, "kern.log",
                                                                        now=NOW, config=c))
        assert fast == slow
        boots = {d[7] for d in fast}
        assert len(boots) == 3
        # a file read here: its lines come from reused read buffers (bytearrays)
        parsed.clear()
        read, slow = _scan_both(monkeypatch, lambda c=config: scan_paths([str(path)], now=NOW,
                                                                         config=c))
        assert read == slow and len(read) == len(fast)
        storm_parsed = len(parsed) - xids  # (the scan without the storm path parses all)
        if fmt == "json":
            assert storm_parsed == xids  # journal records are read by the per-line parse
        else:  # most storm lines were folded without being parsed, not all
            assert 0 < storm_parsed < xids / 2


def test_xid45_runs_past_the_lookback_and_the_window_fold_as_the_per_line_parse(monkeypatch):
    """The storm pass attributes an Xid 45 that follows another Xid of its GPU inline: a
    cause while within the GPU's last LOOKBACK Xids and FOLLOW_ON_S seconds, else none;
    and a GPU whose 45s come first (leads) goes on as the per-line parse has it."""
    out, up = [], 10.0
    for i in range(3 * kernel_fold.LOOKBACK):
        if i in (0, 2 * kernel_fold.LOOKBACK):  # a cause, then its 45s past the lookback
            out.append(f"[{up:12.6f}] NVRM: Xid (PCI:{BUSES[0]}): 13, pid=7, name=python3, "
                       f"{_MESSAGES[13].format(g=1, t=2)}")
        if i == kernel_fold.LOOKBACK // 2:  # out of the follow-on window
            up += kernel_fold.FOLLOW_ON_S + 5
        for bus in BUSES[:2]:  # (the second GPU's 45s come first: leads)
            out.append(f"[{up:12.6f}] NVRM: Xid (PCI:{bus}): 45, pid={100 + i % 5}, "
                       f"name=python3, Ch 0000003b")
        up += 0.1
    text = "\n".join(out) + "\n"
    for config in (ScanConfig(block=1 << 20, workers=1, engine="hyperscan"), ScanConfig()):
        fast, slow = _scan_both(monkeypatch, lambda c=config: scan_text(text, "kern.log",
                                                                        now=NOW, config=c))
        assert fast == slow
        folded = [d[-1] for d in fast if d[-1] is not None and d[2] == "0000:18:00.0"]
        assert folded and folded[0][-2] and folded[0][-1]  # (caused and uncaused both met)


@pytest.mark.parametrize("fmt", ("dmesg", "short-iso"))
def test_the_storm_path_in_worker_blocks(monkeypatch, tmp_path, fmt):
    """Blocks of a file read by forked workers (lines that cross block edges, events
    joined across them): the same events as the per-line parse in the same blocks."""
    import threading

    path = tmp_path / "kern.log"
    path.write_text(storm_log(fmt, seed=2, n=1200))
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    for task, piece in ((8192, None), (32768, 8192)):  # (tasks searched piece by piece)
        config = replace(ScanConfig(), workers=2, process_min=0, block=8192, task=task,
                         piece=piece, engine="hyperscan")
        fast, slow = _scan_both(monkeypatch, lambda c=config: scan_paths([str(path)], now=NOW,
                                                                         config=c))
        assert fast == slow and len(fast) > 100


class _InProcess:
    """Worker "processes" that run each task here, its result pickled (what crosses a
    pipe), noting what each block kept as bytes."""

    def __init__(self) -> None:
        self.deferred = 0

    def run(self, task, count):  # type: ignore[no-untyped-def]
        import pickle

        for i in range(count):
            r = pickle.loads(pickle.dumps(task(i), pickle.HIGHEST_PROTOCOL))
            self.deferred += len(r.fold.deferred)
            yield r


@pytest.mark.parametrize("fmt", ("dmesg", "dmesg-T", "short-iso", "syslog", "rfc3339"))
@pytest.mark.parametrize("keep", (3, 64))
def test_first_occurrences_kept_as_bytes_in_later_blocks(monkeypatch, tmp_path, fmt, keep):
    """A block after the first keeps the first occurrences of a plain Xid's key as their
    bytes (``Folder.defer``); the process that joins the blocks builds their events
    where the whole file keeps them one by one, else counts them into the key's folded
    event: the same scan as blocks that parse them, whether the key was folded in an
    earlier block or not (reboots, resets, driver loads, more processes than are named,
    in workers and here)."""
    import threading

    import gputriage.logscan as logscan
    from gputriage.logscan import stormspan

    path = tmp_path / "kern.log"
    path.write_text(storm_log(fmt, seed=7, n=4000))
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(kernel_fold, "KEEP", keep)
    monkeypatch.setattr(blocks, "BLOCK_KEEP", None)
    config = replace(ScanConfig(), workers=2, process_min=0, block=8192, task=16384,
                     engine="hyperscan")
    joined = {"built": 0, "counted": 0}
    real = kernel_fold.Folder.add_deferred

    def add_deferred(self, item):  # type: ignore[no-untyped-def]
        folded = any(k[3] == ("xid", item.bus, item.code) for k in self._folded)
        joined["counted" if folded else "built"] += 1
        real(self, item)

    def scan() -> list:
        return _scan_both(monkeypatch, lambda: scan_paths([str(path)], now=NOW,
                                                          config=config))[0]

    here = _InProcess()
    with monkeypatch.context() as m:
        m.setattr(kernel_fold.Folder, "add_deferred", add_deferred)
        m.setattr(logscan, "process_pool", lambda n: here)
        kept = scan()
    forked = scan()
    with monkeypatch.context() as m:
        m.setattr(stormspan.SpanPass, "_defer", lambda self, *args: False)
        parsed = scan()
    assert kept == forked == parsed and len(parsed) > 100
    assert here.deferred > 100 and joined["counted"] > 0
    if keep == 64:  # (keys not folded yet when a later block joins: their events built)
        assert joined["built"] > 0


def _bursty(fmt: str) -> str:
    """Storm bursts between long stretches no anchor holds: spans the storm path takes
    and spans it leaves to the search, gaps longer than a worker counts line by line."""
    burst = storm_log(fmt, seed=5, n=900).splitlines()
    out: list[str] = []
    filler = "usb 1-4: new high-speed USB device number 3 using xhci_hcd"
    for k in range(0, len(burst), 150):
        out += burst[k:k + 150]
        out += [f"[{k:12.6f}] {filler}" if fmt == "dmesg" else
                f"2024-08-30T03:00:00+0000 gpu-node-3 kernel: {filler}"] * (40 + k % 7 * 30)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("fmt", ("dmesg", "short-iso"))
def test_the_storm_pass_numbers_lines_as_the_search(monkeypatch, tmp_path, fmt):
    """Where the storm path reads a span itself, lines keep the numbers the search gives
    them, with long gaps counted by their bytes in worker blocks (line numbers and the
    total then upper bounds alike), in blocks it takes and blocks it leaves."""
    import threading

    path = tmp_path / "kern.log"
    path.write_text(_bursty(fmt))
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    for gap in (512, 64 << 10):
        config = replace(ScanConfig(), workers=2, process_min=0, block=16384, task=16384,
                         engine="hyperscan", gap_exact=gap)
        fast, slow = _scan_both(monkeypatch, lambda c=config: scan_paths([str(path)],
                                                                         now=NOW, config=c))
        assert fast == slow and len(fast) > 100
    text = path.read_text()
    fast, slow = _scan_both(monkeypatch, lambda: scan_text(
        text, "kern.log", now=NOW, config=ScanConfig(block=16384, engine="hyperscan")))
    assert fast == slow


@pytest.mark.parametrize("fmt", ("dmesg", "syslog"))
def test_the_storm_pass_on_compressed_input_searched_by_threads(monkeypatch, tmp_path, fmt):
    """A compressed log is read in blocks searched by threads, from reused buffers, and
    fed here: the storm pass reads each crowded block from its buffer before that buffer
    is read into again (CRLF line ends too)."""
    import gzip

    text = storm_log(fmt, seed=3, n=1500).replace("\n", "\r\n")
    path = tmp_path / "kern.log.gz"
    path.write_bytes(gzip.compress(text.encode()))
    config = ScanConfig(block=8192, workers=2, engine="hyperscan")
    fast, slow = _scan_both(monkeypatch, lambda: scan_paths([str(path)], now=NOW,
                                                            config=config))
    assert fast == slow and len(fast) > 100


def test_hyperscan_screens_the_lines_the_storm_path_leaves():
    """The search's screen (literals, and an expression for "ink", non-ASCII bytes and
    the escape) finds the same lines as the storm path's own test (case-blind where that
    is): only where what it finds follows the lead."""
    pytest.importorskip("hyperscan")
    from gputriage.logscan.search import ANCHORS, anchor_hits

    lead = b"NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=a, "
    lines_ = [lead + tail for tail in (
        b"Graphics Exception", b"FATAL error", b"NvLink down", b"caused by previous Xid 13",
        b"GPU has fallen off the bus.", b"SXid", b"\xc3\xa9", b"#012 x", b"\x1b[0m x")]
    lines_ += [b"caused by: " + lead + b"Graphics Exception",  # (before the lead)
               b"SXid \xc3\xa9 \x1b[1m" + lead + b"Graphics Exception"]
    buf = bytearray(b"\n".join(lines_) + b"\n")
    screened: set[int] = set()
    hits = anchor_hits(buf, 0, len(buf), ANCHORS, ScanConfig(engine="hyperscan"), screened,
                       storm=True)
    starts = [0]
    for line in lines_[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    assert sorted(screened) == starts[1:9]
    # the storm path's own lines are left to it, the screened ones are candidates
    assert sorted(hits) == starts[1:9]
    assert sorted(anchor_hits(buf, 0, len(buf), ANCHORS, ScanConfig(engine="hyperscan"))) \
        == starts


def test_hyperscan_leaves_the_lead_lines_other_anchors_find_to_the_storm_path():
    """A storm line that another anchor of context mode 0 finds is left to the storm
    path, which folds it or hands it over as it would a candidate; it stays a candidate
    where a continuation line follows it, where a call-trace anchor finds it too, and at
    the span's end (what follows is unknown). ``nvidia`` in its process's name (``,
    name=nvidia-smi``) finds no line where Xid lines crowd a span: neither an Xid line
    (the storm pass takes it, with the continuation lines after it) nor another line
    whose only ``nvidia`` is there, unless it holds a needle of a row ``nvidia``
    anchors (SXid)."""
    pytest.importorskip("hyperscan")
    from gputriage.logscan.search import ANCHORS, anchor_hits

    xid = b"NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=python3, "
    smi = xid.replace(b"python3", b"nvidia-smi")
    lines_ = [xid + b"Graphics Exception nvidia",  # left to the storm path
              xid + b"Graphics Exception nvidia", b"    continued",  # a continuation follows
              smi + b"blocked for more than 120 seconds",  # a call-trace anchor finds it
              b"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver",  # no lead
              smi + b"Graphics Exception",  # its nvidia in its process's name
              smi + b"Graphics Exception", b"    continued",
              b"audit: pid=7, name=nvidia-smi",  # no lead, its nvidia in a name field
              b"x: pid=7, name=nvidia-smi SXid (PCI:0000:07:00.0): 20034, Fatal",
              xid + b"Ch 0000003b nvidia"]  # the span's last line
    buf = bytearray(b"\n".join(lines_) + b"\n")
    starts = [0]
    for line in lines_[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    config = ScanConfig(engine="hyperscan")
    hits = anchor_hits(buf, 0, len(buf), ANCHORS, config, set(), storm=True)
    assert hits == {starts[1]: 0, starts[3]: 1, starts[4]: 0, starts[9]: 0, starts[10]: 0}
    plain = anchor_hits(buf, 0, len(buf), ANCHORS, config)
    assert sorted(plain) == [starts[k] for k in (0, 1, 3, 4, 5, 6, 8, 9, 10)]


def test_a_row_that_nvidia_anchors_reads_no_line_whose_only_nvidia_is_a_process_name():
    """Where Xid lines crowd a span, ``nvidia`` finds no line where it follows ``,
    name=`` (:data:`gputriage.logscan.storm.NAMED`): every row ``nvidia`` anchors either
    reads no such line (its samples with each ``nvidia`` after a process field) or holds
    a needle the storm database finds the line through (``search.STORM_NAMED``)."""
    from gputriage.logscan import search
    from gputriage.logscan.storm import NAME_FIELD, NAMED
    from gputriage.parsers.kernel_model import LogLine
    from gputriage.parsers.kernel_patterns import split_prefix
    from gputriage.parsers.kernel_table import EVENTS, match_line

    keep = dict(search.STORM_NAMED)
    assert set(keep) == set(NAMED)
    tried = 0
    for anchor in NAMED:
        name = anchor.decode()
        for row in (p for p in EVENTS if name in p.anchors):
            for line in row.sample.splitlines():
                _, msg, _ = split_prefix(line)
                if name not in msg:
                    continue
                hidden = msg.replace(name, NAME_FIELD.decode() + name)
                decided = match_line(LogLine(hidden, hidden))
                tried += 1
                if decided is not None and decided[1]:
                    assert any(k.decode() in hidden for k in keep[anchor]), (row.kind, hidden)
    assert tried >= 5


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_storm_pass_folds_piece_by_piece_as_the_per_line_parse(monkeypatch, fmt):
    """A span folded a piece at a time (down to a line a piece, never between a line and
    its continuation lines): the same events as the per-line parse, and as the span
    folded whole."""
    from gputriage.logscan import stormspan

    text = storm_log(fmt, seed=4)
    config = ScanConfig(block=1 << 20, workers=1, engine="hyperscan")
    cut: list[list[tuple[int, int]]] = []
    real_pieces = stormspan.SpanPass._pieces

    def pieces(self):  # type: ignore[no-untyped-def]
        cut.append(real_pieces(self))
        return cut[-1]

    monkeypatch.setattr(stormspan.SpanPass, "_pieces", pieces)
    whole = None
    for size in (1 << 20, 700, 1):
        monkeypatch.setattr(stormspan, "PIECE", size)
        cut.clear()
        fast, slow = _scan_both(monkeypatch, lambda: scan_text(text, "kern.log", now=NOW,
                                                               config=config))
        assert fast == slow
        whole = whole or fast
        assert fast == whole
        if fmt != "json":  # (journal records are read by the per-line parse)
            assert cut and (max(map(len, cut)) > 1) == (size < len(text))
        data = text.encode()
        for runs in cut:
            starts = [a for a, _ in runs]
            assert [b for _, b in runs[:-1]] == starts[1:]  # (end to end)
            assert all(data[a - 1] == 10 and data[a] not in (32, 9) for a in starts[1:])


def test_the_storm_pass_cuts_a_span_only_before_a_line_that_is_no_continuation(monkeypatch):
    """Pieces end before a line whose first byte is not a blank: a line and the
    continuation lines after it stay in one piece, whatever the size asked."""
    from gputriage.logscan import stormspan

    buf = b"a\n b\n\tc\nd\ne\n f\n"
    sp = stormspan.SpanPass.__new__(stormspan.SpanPass)  # (only the span's bytes read)
    sp.buf, sp.lo, sp.hi = buf, 0, len(buf)
    for size, cuts in ((1, [0, 8, 10, 15]), (5, [0, 8, 15]), (10, [0, 15]), (100, [0, 15])):
        monkeypatch.setattr(stormspan, "PIECE", size)
        runs = sp._pieces()
        assert [a for a, _ in runs] + [runs[-1][1]] == cuts, size


@pytest.mark.parametrize("byte", range(256))
def test_the_storm_pass_sees_a_continuation_line_as_the_search_does(byte):
    """The storm pass's lead match runs on over its line's newline and the next byte
    exactly where the next line is one the search takes as a continuation (its first
    byte a blank, in the span): then the pass hands the line over with it."""
    from gputriage.logscan import search, stormspan

    line = b"x NVRM: Xid (PCI:0000:18:00): 13, pid=7, name=python3, Graphics Exception"
    buf = line + b"\n" + bytes([byte]) + b"next"
    m = stormspan._FIND.search(buf)
    assert m is not None and m.start() == 2
    follows = byte in (32, 9)
    assert bool(m[4]) == follows == (byte in stormspan._BLANK)
    assert m.end() == len(line) + 2 * follows
    # (what the search takes: a line whose first byte is a blank goes with the one before)
    want: dict[int, int] = {}
    search._context(buf, 0, len(buf), 0, search.MAX_CONT, want)
    assert (len(line) + 1 in want) == follows
    # the span's end: nothing after the newline is seen
    assert stormspan._FIND.search(buf, 0, len(line) + 1)[4] == b""


# the storm pass's lead match as first written, every repeat free to give back what it
# took (the oracle of the test below: ``_FIND`` is possessive, which is faster)
_FIND_BACKTRACKING = re.compile(
    rb"NVRM: Xid \(PCI:(?:([^)\n]{0,40}\): ?[0-9]{1,5}), "
    rb"(pid='?[^,'\n]{0,32}'?, ?name=[^,\n]{0,64}), ?)?([^\n]*)(\n[ \t]|)")
_XID_BITS = st.sampled_from([b"0000:18:00", b"0000:18:00.0", b"x" * 41, b")", b"\n", b" ", b"'",
                             b",", b", ", b": ", b":", b"13", b"123456", b"pid=", b"pid='",
                             b"name=", b"python3", b"p" * 33, b"n" * 65, b"\t", b"Ch 0000", b"7"])


@settings(max_examples=500, deadline=None)
@given(st.lists(_XID_BITS, max_size=14).map(b"".join))
@example(b"0000:18:00): 13, pid=7, name=python3, Graphics Exception\n next")
@example(b"0000:18:00): 13, pid='7', name=python3, x")
@example(b"0000:18:00):13,pid='', name=" + b"n" * 64 + b",")
@example(b"0000:18:00):13,pid='', name=" + b"n" * 65 + b",")
@example(b"0000:18:00): 123456, pid=7, name=x, y")
@example(b"0000:18:00): 13, pid=" + b"p" * 32 + b"', name=x, y")
@example(b"0000:18:00): 13, pid=" + b"p" * 33 + b", name=x, y")
def test_the_storm_pass_lead_match_is_the_backtracking_one(tail):
    """``_FIND``'s possessive repeats never give back what they took: the lead's match
    (where it ends, what each group holds) is the one its backtracking form finds,
    however the line goes on (shapes cut short, fields too long, quotes and commas
    where they should not be)."""
    from gputriage.logscan import stormspan

    def read(rx: re.Pattern[bytes], end: int) -> tuple[object, ...] | None:
        m = rx.search(buf, 0, end)
        return None if m is None else (m.span(), m.groups())

    buf = b"x NVRM: Xid (PCI:" + tail
    assert read(stormspan._FIND, len(buf)) is not None
    for end in (len(buf), len(buf) - 1):  # (the span's end also before the last byte)
        assert read(stormspan._FIND, end) == read(_FIND_BACKTRACKING, end)


_DMESG_BITS = st.sampled_from([b"[", b"]", b" ", b"  ", b" " * 12, b" " * 13, b"1", b"0",
                               b"123456789012", b"1234567890123", b".", b"000500",
                               b"123456789", b"1234567890", b"x", b"\t", b"-", b"e5", b"_",
                               b"\n"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(_DMESG_BITS, max_size=8).map(b"".join), min_size=1, max_size=5))
@example([b"[    1.001000] ", b"[    1.001000] ", b"[ 9999.5] "])
@example([b"[123456789012.123456789]   ", b"[1.0]"])
@example([b"[    1.001000] ", b"2024-08-30T04:12:56+0000 gpu-node-17 kernel: "])
@example([b"[ 1_0.5] "])  # (float() would read it; the prefix is none of dmesg's)
@example([b"[    1.001000] \n[ 2.5] "])  # (two prefixes' shapes in one, read as one)
def test_dmesg_prefixes_read_at_once_are_read_as_one_by_one(prefixes):
    """``StormLines.heads_of`` gives each prefix of a run of Xid lines what
    ``StormLines.head_of`` gives it, where every prefix is a raw dmesg one; None where
    any is not (and the first is one)."""
    from gputriage.logscan import storm
    from gputriage.logscan.fastline import FastXid

    lines = storm.StormLines(FastXid("kern.log", None))
    heads = [p.lstrip(b" ") if p[:1] == b" " else p for p in prefixes]  # (as a line starts)
    one_by_one = [lines.head_of(h, h + b"NVRM: Xid (PCI:0000:18:00): 13, pid=7, name=x, y")
                  for h in heads]
    got = lines.heads_of(heads) if heads[0][:1] == b"[" else None
    if heads[0][:1] != b"[" or any(h is None or h[0] != "dmesg-raw" for h in one_by_one):
        assert got is None
    else:
        assert got is not None
        assert got == one_by_one


_STEMS = st.tuples(
    st.sampled_from([b"Aug 30 03:53:21", b"Aug  3 03:53:21", b"Dec 31 23:59:59",
                     b"Aug 30 03:53:21.123456", b"2024-08-30T03:53:21+0000",
                     b"2024-08-30T03:53:21.5+00:00", b"2024-08-30 03:53:21", b"[1.5]"]),
    st.sampled_from([b" ", b"  ", b"     "]),
    st.sampled_from([b"gpu-node-17 kernel: ", b"h kernel:", b"kernel: ", b"", b"h x: "]),
).map(b"".join)
_TAILS = st.sampled_from([b"[    1.000000] ", b"[1.5]", b"[ 123.25]  ", b"[123456789012.1] ",
                          b"[1234567890123.1] ", b"[1.1234567890] ", b"[ x] ", b"[1.5]\t",
                          b"[-1.5] ", b"", b" ", b"[ 1.5] [2.5] "])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_STEMS, _TAILS).map(b"".join), min_size=1, max_size=12),
       st.sampled_from([None, datetime(2024, 9, 1, tzinfo=timezone.utc)]))
@example([b"Aug 30 03:53:21 gpu-node-17 kernel: [    1.000000] ",
          b"Aug 30 03:53:21 gpu-node-17 kernel: [    1.000500] ",
          b"Aug 30 03:53:21 gpu-node-17 kernel: [ 1.5]x"], None)
@example([b"Dec 31 23:59:59 h kernel: [1.5]", b"Dec 31 23:59:59 h kernel: [2.5]"],
         datetime(2024, 1, 1, tzinfo=timezone.utc))  # (last year's stamp)
@example([b"Aug 30 03:53:21 gpu-node-17 kernel: [    1.000000] ",
          b"Aug 30 03:53:22 gpu-node-17 kernel: [    1.000500] ",
          b"Aug 30 03:53:21 gpu-node-17 kernel: [    1.001000] "],
         datetime(2024, 9, 1, tzinfo=timezone.utc))
@example([b"Aug 30 03:53:21 h kernel: [1.5] ", b"Aug 30 03:53:21 h kernel: [2.5] "],
         None)  # (no year to the stamps: no time, the uptime's seconds)
@example([b"Aug 30 03:53:21 h kernel: [1.5] ", b"2024-08-30T03:53:21+0000 h kernel: [2.5] "],
         None)  # (one with a time, one without)
@example([b"Aug 30 03:53:21 h\xc3\xa9 kernel: [ 1.5] "], None)  # (a prefix that is no ASCII)
def test_a_prefix_read_through_its_stem_is_the_one_the_fast_path_reads(prefixes, now):
    """A prefix whose stem before the kernel's uptime was read already is read from that
    stem and its own uptime (``StormLines.head_of``'s stem cache), and a run of them at
    once (``heads_of``, where it can): as the fast path reads the whole prefix, one by
    one, with no cache, whatever the stamp, host, uptime or the reference time of the
    year."""
    _check_prefixes(prefixes, now)


def _check_prefixes(prefixes: list[bytes], now: datetime | None) -> None:
    """What ``StormLines.head_of`` reads in each of ``prefixes`` in turn, and what
    ``heads_of`` reads in them at once where it does: what a fresh ``head_of`` (no cache)
    reads in each alone."""
    from gputriage.logscan import storm
    from gputriage.logscan.fastline import FastXid

    def alone(prefix: bytes) -> object:
        raw = prefix + b"NVRM: Xid (PCI:0000:18:00): 13, pid=7, name=x, y"
        return storm.StormLines(FastXid("kern.log", now)).head_of(prefix, raw)

    lines = storm.StormLines(FastXid("kern.log", now))
    for prefix in prefixes:
        raw = prefix + b"NVRM: Xid (PCI:0000:18:00): 13, pid=7, name=x, y"
        assert lines.head_of(prefix, raw) == alone(prefix), prefix
    got = storm.StormLines(FastXid("kern.log", now)).heads_of(prefixes)
    if got is not None:
        assert len(got) == len(prefixes)
        assert all(p.isascii() and g == alone(p) for p, g in zip(prefixes, got, strict=True))


def test_kern_log_prefixes_are_read_at_once_where_their_stems_are_read():
    """A kern.log storm's prefixes are read at once (not left to head_of line by line)."""
    from gputriage.logscan import storm
    from gputriage.logscan.fastline import FastXid

    lines = storm.StormLines(FastXid("kern.log", datetime(2024, 9, 1, tzinfo=timezone.utc)))
    heads = [b"Aug 30 03:53:%02d gpu-node-17 kernel: [%12.6f] " % (21 + i // 3, 1 + i / 2000)
             for i in range(9)]
    got = lines.heads_of(heads)
    assert got is not None and [g[2] for g in got] == [1 + i / 2000 for i in range(9)]
    assert len(lines.stems) == 3
    assert lines.heads_of([*heads, b"2024-08-30T03:53:21+0000 h kernel: "]) is None

_MICRO_STAMPS = st.tuples(
    st.sampled_from([b"2024-08-30T03:53:21", b"2024-08-30 03:53:21", b"2024-12-31T23:59:59"]),
    st.sampled_from([b".", b","]),
    st.integers(0, 999999).map(lambda us: b"%06d" % us) | st.sampled_from([b"5", b"1234567"]),
    st.sampled_from([b"+00:00", b"Z", b"-0700", b"", b"+00:00x"]),
    st.sampled_from([b" gpu-node-17 kernel: ", b"  h kernel:", b" ", b" h kernel: [ 1.5] "]),
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_MICRO_STAMPS, min_size=1, max_size=12),
       st.sampled_from([None, datetime(2024, 9, 1, tzinfo=timezone.utc)]))
@example([b"2024-08-30T03:53:21.000000+00:00 gpu-node-17 kernel: ",
          b"2024-08-30T03:53:21.999999+00:00 gpu-node-17 kernel: ",
          b"2024-08-30T03:53:21,000500+00:00 gpu-node-17 kernel: "], None)
@example([b"2024-08-30T03:53:21.000000+00:00 gpu-node-17 kernel: ",
          b"2024-08-30T03:53:22.999999+00:00 gpu-node-17 kernel: ",
          b"2024-08-30T03:53:21,000500-0700 gpu-node-17 kernel: "], None)
@example([b"2024-08-30T03:53:21.000000+00:00 h\xc3\xa9 kernel: "], None)  # (no ASCII)
def test_a_prefix_read_less_its_microseconds_is_the_one_the_fast_path_reads(prefixes, now):
    """A prefix whose ISO stamp has microseconds, read before with others, is read from
    what the rest of it told (``StormLines.head_of``'s fractions), and a run of them at
    once (``heads_of``, where it can): as the fast path reads it, one by one, with no
    cache."""
    _check_prefixes(prefixes, now)


def test_rsyslog_prefixes_of_one_second_are_read_once(monkeypatch):
    """rsyslog's high-precision prefixes of one second differ in their microseconds
    alone: the fast path reads the first one, the others are read from what it told."""
    from gputriage.logscan import storm
    from gputriage.logscan.fastline import FastXid

    fast = FastXid("syslog", None)
    lines = storm.StormLines(fast)
    calls = []
    read = fast.prefix
    monkeypatch.setattr(fast, "prefix", lambda raw: calls.append(raw) or read(raw))
    heads = [b"2024-08-30T03:53:21.%06d+00:00 gpu-node-17 kernel: " % (i * 500) for i in range(5)]
    got = [lines.head_of(h, h + b"NVRM: Xid (PCI:0000:18:00): 13, pid=7, name=x, y")
           for h in heads]
    assert len(calls) == 1
    times = [datetime(2024, 8, 30, 3, 53, 21, i * 500, tzinfo=timezone.utc) for i in range(5)]
    assert [g[1] for g in got] == times
    assert [g[3] for g in got] == [t.timestamp() for t in times]
    assert storm.StormLines(fast).heads_of(heads) == got

def test_kern_log_prefixes_of_one_second_are_read_once(monkeypatch):
    """kern.log's prefixes of one second differ in the kernel's uptime alone: the fast
    path reads the first one, and the others are read from its stem."""
    from gputriage.logscan import storm
    from gputriage.logscan.fastline import FastXid

    fast = FastXid("kern.log", datetime(2024, 9, 1, tzinfo=timezone.utc))
    lines = storm.StormLines(fast)
    calls = []
    read = fast.prefix
    monkeypatch.setattr(fast, "prefix", lambda raw: calls.append(raw) or read(raw))
    heads = [b"Aug 30 03:53:21 gpu-node-17 kernel: [%12.6f] " % (1 + i / 2000) for i in range(5)]
    got = [lines.head_of(h, h + b"NVRM: Xid (PCI:0000:18:00): 13, pid=7, name=x, y")
           for h in heads]
    assert len(calls) == 1
    assert [g[2] for g in got] == [1 + i / 2000 for i in range(5)]
    assert {(g[0], g[1], g[3]) for g in got} == {
        ("syslog", datetime(2024, 8, 30, 3, 53, 21, tzinfo=timezone.utc),
         datetime(2024, 8, 30, 3, 53, 21, tzinfo=timezone.utc).timestamp())}


# what a fault pattern blanks, written out (the oracle of the two tests below): addresses,
# words of eight hex digits and numbers
_BLANKS = re.compile(r"0x[0-9a-fA-F_]+|\b[0-9a-fA-F]{8}\b|[0-9]+")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=120))
@example("Ch 0000003b, intr 00000000. MMU Fault: GPCCLIENT_T1_3 faulted @ 0x7f1c_7acff8e0.")
@example("1x5 and 0x5, 2x9f: 0xg")  # ("1x" read as "0x" would blank an address)
@example("GPC 5, TPC 183 deadbeef 1eadbeef 12345678a")
def test_a_fault_pattern_from_raw_bytes_is_the_one_from_text(message):
    """The storm path blanks a message's raw bytes (its digits read as one digit, to
    know a message shape seen before): the pattern is the one the parsed message gives
    (its text stripped, as the parse strips it), the message's text blanked in one pass
    of the pattern's definition; so is the pattern of the message as text."""
    want = "31:" + _BLANKS.sub("#", message.strip())
    assert kernel_repeats.message_pattern("31", message.encode("ascii")) == want
    assert kernel_repeats.message_pattern("31", message.strip()) == want
    unstripped = "31:" + _BLANKS.sub("#", message)
    assert kernel_repeats.message_pattern("31", message) == unstripped


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([" 0x", "0x", " ", "_", "7", "a", "g", ".", "1f2e3d4c"]),
                max_size=24))
@example([" 0x", "7", "_", "a"])  # an address with an underscore: blanked to its end
@example(["7", " 0x", "g"])  # "0x" with no digit after it: no address
@example(["1f2e3d4c", " 0x", "7", " ", "1f2e3d4c"])  # eight hex digits around it
def test_a_message_blanked_between_its_addresses_is_blanked_whole(pieces):
    """Blanking a message piece by piece between its addresses (what a storm of
    faults at a new address each costs) gives the very pattern of one pass over it."""
    text = "".join(pieces)
    want = _BLANKS.sub("#", text)
    assert kernel_repeats.blank_bytes(text.encode("ascii")) == want

"""The Xid fast path (logscan.fastline) against the slow one (LineSource and the event
table): for every Xid line of the corpus, the table's samples and thousands of generated
lines, ``FastXid.parse`` gives None or exactly what the slow path makes of the line; the
dominant shapes take the fast path."""

from __future__ import annotations

import copy
import random
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.logscan import fastline
from gputriage.logscan.fastline import FastLine, FastXid
from gputriage.logscan.lines import LineSource
from gputriage.parsers.kernel_extractor import EventExtractor
from gputriage.parsers.kernel_model import DriverEvent, LogLine
from gputriage.parsers.kernel_table import EVENTS

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)
NAMES = ("dmesg.txt", "kern.log", "-")


class _Recorder(EventExtractor):
    """The extractor, keeping the lines it is fed and the events it gives (before any
    folding LineSource does)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[LogLine] = []
        self.events: list[DriverEvent] = []

    def feed(self, line: LogLine) -> list[DriverEvent]:
        self.lines.append(line)
        out = super().feed(line)
        self.events += copy.deepcopy(out)  # as made, before LineSource folds them
        return out

    def finish(self) -> list[DriverEvent]:
        out = super().finish()
        self.events += copy.deepcopy(out)
        return out


class _NoFast:
    def parse(self, raw: bytes | bytearray, cut: bool = False) -> None:
        return None


def _slow(raw: bytes, name: str, now: datetime) -> tuple[_Recorder, list[str]]:
    """What LineSource makes of one line, its own fast path (when wired in) turned off."""
    src = LineSource(name, now)
    if hasattr(src, "fast"):
        src.fast = _NoFast()
    src.ex = rec = _Recorder()
    src.line(7, raw, False)
    src.finish()
    return rec, list(src.formats)


def _check(fast: FastXid, raw: bytes, name: str, now: datetime = NOW) -> FastLine | None:
    """The fast result (None or equal to the slow path's events and format)."""
    got = fast.parse(raw)
    if got is None:
        return None
    # what the storm path reads of a line's prefix alone (``FastXid.prefix``) is what
    # ``parse`` read of it, its message starting where ``parse``'s does
    head, text, at = fast.prefix(raw) or ((), "", 0)
    assert head == (got.stamps, got.format, got.time, got.uptime_s), raw
    assert text[at:].rstrip() == got.msg, raw
    rec, formats = _slow(raw, name, now)
    (line,) = rec.lines
    assert (got.text, got.msg, got.stamps, got.time, got.uptime_s) == (
        line.text, line.msg, line.stamps, line.time, line.uptime_s), raw
    mine, events = got.events(7, name), rec.events
    assert mine == events, raw
    for a, b in zip(mine, events, strict=True):
        assert type(a.uptime_s) is type(b.uptime_s), raw
        assert (a.time and a.time.utcoffset()) == (b.time and b.time.utcoffset()), raw
    assert formats == [got.format], raw
    return got


def _fast(name: str = "dmesg.txt", now: datetime = NOW) -> FastXid:
    return FastXid(name, now)


# --- real lines -------------------------------------------------------------------------

def test_every_xid_line_of_the_corpus(corpus):
    fasts = {name: _fast(name) for name in NAMES}
    seen = taken = 0
    for sample in corpus.samples:
        if not sample.path.is_file():
            continue
        for raw in sample.path.read_bytes().splitlines():
            if b"Xid" not in raw:
                continue
            for name, fast in fasts.items():
                seen += 1
                taken += _check(fast, raw, name) is not None
    assert seen > 200 and taken > seen // 2, (seen, taken)


def test_the_table_samples():
    fast = _fast()
    for row in EVENTS:
        for raw in row.sample.encode().splitlines():
            got = _check(fast, raw, "dmesg.txt")
            assert (got is not None) == (row.kind == "xid"), raw


# --- the dominant shapes take the fast path ---------------------------------------------

BODY = "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x1"
DOMINANT = (
    "[ 1234.567890] ", "[1234567.123456] ", "[Mon May  6 10:00:00 2024] ",
    "[Wed Jun 12 23:59:59 2024] ", "May  6 10:00:00 node-a kernel: ",
    "May 16 10:00:00 node-a kernel: [ 1234.567890] ", "May 06 10:00:00.123456 node-a kernel: ",
    "2024-05-06T10:00:00+0200 node-a kernel: ", "2024-05-06T10:00:00.123456+02:00 node-a kernel: ",
    "2024-05-06T10:00:00,123456+02:00 ", "2024-05-06T10:00:00.123456Z ", "")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("prefix", DOMINANT)
def test_dominant_shapes_take_the_fast_path(prefix, name):
    fast = _fast(name)
    for body in (BODY, BODY.replace("13, pid=4242, name=python3, Graphics Exception: ESR 0x1",
                                    "79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                                    "the bus.")):
        got = _check(fast, (prefix + body).encode(), name)
        assert got is not None, prefix
        assert got.fallen == ("fallen off" in body)
        again = _check(fast, (prefix + body + "  \r").encode(), name)  # from the cache
        assert again is not None and again.details == got.details
        assert again.details is not got.details  # each line has its own copy


def test_what_the_fast_path_leaves_alone():
    fast = _fast()
    for line in (b"\x1b[31m[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x",
                 b"[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x#012more",
                 b"[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=\x1b[1ma, x",
                 b"May  6 10:00:00 a#012b kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1, x",
                 b'{"MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x"}',
                 b"6,123,456,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x",
                 b"[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=\xff, x",
                 b"[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 13, SXid (PCI:0000:3b:00): 1, x",
                 b"[ 1.000000] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
                 b"[  +0.000844] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x",
                 b"[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, " + b"x" * 9000):
        assert fast.parse(line) is None, line
    assert fast.parse(b"[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 13, x", cut=True) is None


def test_syslog_fraction_at_the_year_edge():
    """A stamp whose whole second lies before now + 2 days and whose fraction after it is
    last year's, as stamp_time has it."""
    now = datetime(2024, 6, 1, 0, 0, 0, 500000, tzinfo=timezone.utc)
    fast = _fast("kern.log", now)
    for stamp in ("Jun  3 00:00:00.400000", "Jun  3 00:00:00.700000", "Jun  3 00:00:01"):
        got = _check(fast, f"{stamp} h kernel: {BODY}".encode(), "kern.log", now)
        assert got is not None and got.time is not None
    assert fast.parse(f"Jun  3 00:00:00.7 h kernel: {BODY}".encode()).time.year == 2023


# --- generated lines --------------------------------------------------------------------

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
          "Xyz")
MESSAGES = (
    "13, pid={pid}, name={name}, Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of "
    "Range Address",
    "13, pid={pid}, name={name}, Graphics Exception: ESR 0x50df30=0x107000e 0x50df34=0x20",
    "31, pid={pid}, name={name}, Ch 0000000a, intr 10000000. MMU Fault: ENGINE GRAPHICS "
    "GPCCLIENT_T1_0 faulted @ 0x7f28_2a000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    "43, pid={pid}, name={name}, Ch 00000008",
    "45, pid={pid}, name={name}, channel 0x00000010 caused by previous Xid 45",
    "45, pid={pid}, name={name}, Ch 00000010",
    "48, pid={pid}, name={name}, An uncorrectable double bit error (DBE) has been detected",
    "79, pid={pid}, name={name}, GPU has fallen off the bus.",
    "79, GPU has fallen off the bus.",
    "94, pid={pid}, name={name}, Contained: SM (0x1). RST: No, D-RST: No",
    "119, pid={pid}, name={name}, Timeout after 6s of waiting for RPC response from GPU0 GSP!",
    "154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
    "154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
    "149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000 0x00000000)",
    "145, RLW_REMAP Nonfatal XC1 i2 Link -1 (0x00000004 0x00000000)",
    "74, pid={pid}, name={name}, NVLink: fatal error detected on link 14(0x0, 0x0)",
    "13, pid={pid}, name={name}, NVRM: API mismatch: the client has the version 1",
    "13, pid={pid}, name={name}, see NVRM: The NVIDIA GPU 0000:3b:00.0 message",
    "13, pid={pid}, name={name}, SXid (PCI:0000:3b:00): 20034, Fatal",
    "63, pid={pid}, name={name}, gpu reset required, rpc gsp nvlink kernel: x",
    "43, pid={pid}, name={name}, fallen off the bus but not Xid 79",
    "13,pid={pid},name={name},no spaces",
    "١٣, pid={pid}, name={name}, unicode digits",
)
PIDS = ("1234", "'<unknown>'", "<unknown>", "99999999", "'12 34'", "", "1,2")
PROCESS_NAMES = ("python3", "<unknown>", "VLLM::Worker", "train.3", "my app", "a, b",
                 "pt_main_thread", "x" * 70, "")
BUSES = ("PCI:0000:3b:00", "PCI:0000:B5:00", "PCI:0018:01:00", "0000:3b:00", "PCI:00000000:3b:00.0",
         "PCI:0000:3b:00.0", "PCI:zz", "PCI:" + "0" * 45, "")


def _digits(r: random.Random, n: int) -> str:
    return "".join(r.choice("0123456789") for _ in range(n))


def _space(r: random.Random, usual: str = " ") -> str:
    return r.choices((usual, "", "  ", "\t", " " * 5), (30, 1, 2, 1, 1))[0]


def _clock(r: random.Random) -> str:
    return f"{r.randrange(25):02d}:{r.randrange(61):02d}:{r.randrange(61):02d}"


def _month_stamp(r: random.Random) -> str:
    day = r.randrange(0, 32)
    date = f"{r.choice(MONTHS)} {day:2d}" if r.random() < 0.7 else f"{r.choice(MONTHS)} {day:02d}"
    frac = r.choice(("", "", "." + _digits(r, r.randrange(1, 11)), ",123"))
    return date + _space(r) + _clock(r) + frac + r.choice(("",) * 8 + ("Z", "+0200"))


def _iso_stamp(r: random.Random) -> str:
    frac = r.choice(("", "." + _digits(r, r.randrange(1, 11)), "," + _digits(r, 6)))
    zone = r.choice(("", "Z", "+02:00", "-0530", "+0000", "-00:00", "+25:00", "+02:75", "+2"))
    return (f"{r.randrange(1990, 2031)}-{r.randrange(1, 14):02d}-{r.randrange(0, 32):02d}"
            f"{r.choice('TT ')}{_clock(r)}{frac}{zone}")


def _uptime(r: random.Random) -> str:
    whole = _digits(r, r.randrange(1, 14)).lstrip("0") or "0"
    up = f"{whole}.{_digits(r, r.choice((6, 6, 3, 10)))}"
    return "[" + " " * r.choice((0, 0, 2, 5, 13)) + r.choice(("", "", "", "+")) + up + "]"


def _ctime(r: random.Random) -> str:
    days = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    return (f"[{r.choice(days)} {r.choice(MONTHS)} {r.randrange(0, 32):2d} {_clock(r)} "
            f"{r.randrange(1990, 2031)}]")


def _prefix(r: random.Random) -> str:
    host = r.choice(("node-a", "gpu01.example", "ip-10-0-0-1", "kernel:", "h" * 300, "a b",
                     "n#012", "\x1b[1mn"))
    shape = r.randrange(9)
    if shape == 0:
        return _uptime(r) + _space(r)
    if shape == 1:
        return _ctime(r) + _space(r)
    if shape in (2, 3):
        stamp = _month_stamp(r) if shape == 2 else _iso_stamp(r)
        out = stamp + _space(r)
        if r.random() < 0.8:
            out += host + " kernel:" + _space(r)
        if r.random() < 0.4:
            out += _uptime(r) + _space(r)
        return out
    if shape == 4:
        return _iso_stamp(r) + _space(r)
    if shape == 5:
        return r.choice(("kernel: ", "<4>", "> ", " ", "6,123,456,-;", "node: kern: warn: "))
    if shape == 6:
        return ""
    if shape == 7:
        return _month_stamp(r) + " " + host + " kernel: " + _ctime(r) + " "
    return _uptime(r)[:-1] + " "  # a bracket never closed


def _line(r: random.Random) -> str:
    msg = r.choice(MESSAGES).format(pid=r.choice(PIDS), name=r.choice(PROCESS_NAMES))
    xid = r.choice(("NVRM: Xid ", "NVRM: Xid ", "NVRM: Xid", "NVRM: Xid  "))
    line = _prefix(r) + xid + f"({r.choice(BUSES)}):" + _space(r) + msg
    return line + r.choice(("",) * 12 + (" ", "\r", "\t", " \r", "#012x", "\n", "\x1b[0m"))


@pytest.mark.parametrize("name", NAMES)
def test_generated_lines(name):
    r = random.Random(f"fastline-{name}")
    for now in (NOW, datetime(2024, 12, 30, 23, 0, tzinfo=timezone.utc),
                datetime(2025, 1, 1, 0, 0, tzinfo=timezone.utc)):
        fast = _fast(name, now)
        taken = 0
        for _ in range(2000):
            raw = _line(r).encode()
            got = _check(fast, raw, name, now)
            taken += got is not None
            assert _check(fast, raw, name, now) == got  # again: its prefix from the cache
        assert taken > 400, taken


def test_generated_lines_through_the_row_builder(monkeypatch):
    """The Xid row's own builder (what the fast path uses when the row is not as it knows
    it) gives the same."""
    monkeypatch.setattr(fastline, "DIRECT", False)
    r = random.Random("fastline-builder")
    fast = _fast()
    assert sum(_check(fast, _line(r).encode(), "dmesg.txt") is not None
               for _ in range(2000)) > 400


def test_the_caches_stay_bounded():
    fast = _fast()
    for i in range(10_000):
        got = fast.parse(f"[{i}.000001] NVRM: Xid (PCI:0000:3b:00): 13, pid={i}, name=a, x"
                         .encode())
        assert got is not None and got.details["pid"] == str(i)
    for i in range(10_000):  # a prefix per second
        got = fast.parse(f"Jan  1 {i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d} h kernel: "
                         f"NVRM: Xid (PCI:0000:3b:00): 13, pid={i}, name=a, x".encode())
        assert got is not None and got.stamps == (f"Jan  1 {i // 3600:02d}:{i // 60 % 60:02d}:"
                                                  f"{i % 60:02d}",)
    assert len(fast._bodies) <= 4096 and len(fast._stamps) <= 4096
    assert 0 < len(fast._heads) <= 4096


@settings(max_examples=200)
@given(prefix=st.text(alphabet="[] .:0123456789+-TZMayJunkernel,h\t", max_size=40),
       body=st.text(max_size=60), now=st.integers(0, 400))
def test_any_prefix_and_body(prefix, body, now):
    when = NOW + timedelta(days=now - 200)
    line = f"{prefix}NVRM: Xid (PCI:0000:3b:00): 13, {body}".encode("utf-8", "surrogatepass")
    _check(_fast("dmesg.txt", when), line, "dmesg.txt", when)

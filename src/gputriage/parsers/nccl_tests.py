"""nccl-tests output (``all_reduce_perf`` and friends): header, devices, size table, footer.

A run starts at its command line (``./build/all_reduce_perf -b 8 ...``), at its
``# nccl-tests version ...`` line, at ``# Collective test starting: <name>`` or at a
``# nThread ...`` header; one text may hold several runs. Table rows are read by
whitespace: newer versions print ``size count type redop root`` and two groups of
``time algbw busbw #wrong`` (out-of-place, in-place), older ones lack redop/root,
print ``N/A`` for #wrong without validation, or a float max error in its place.
Options that add columns (``#bitdiff``, per-iteration figures, a timestamp) are
read by the names of the table's column header. NCCL's own ``NCCL INFO`` lines
interleaved in the output are ignored.
"""

from __future__ import annotations

import re

from gputriage.parsers.nccl_lines import parse_version, split_records, strip_shippers
from gputriage.parsers.nccl_model import NcclTestDevice, NcclTestRow, NcclTestRun
from gputriage.text.fields import split_lines, strict_float, strict_int

__all__ = ["is_nccl_tests_line", "operation_of", "parse_nccl_tests", "tests_line"]

_COMMAND = re.compile(r"(?:^|[\s/=])(?P<name>[a-z][a-z_]{1,40}_perf)(?:_mpi)?(?:\s|$)")
_STARTING = re.compile(r"#\s{0,8}Collective test (?P<what>starting|concluded):\s{0,8}"
                       r"(?P<name>\w{1,60})")
_HEADER = re.compile(r"#\s{0,8}nThread\s{1,8}[0-9]")
_PARAM = re.compile(r"(?P<k>[A-Za-z][\w ]{0,30}?):?\s{1,8}(?P<v>-?[0-9.]{1,24}"
                    r"(?:\([^)\s]{0,20}\))?)"
                    r"(?=\s|$)")
_DEVICE = re.compile(
    r"#\s{0,8}Rank\s{1,8}(?P<rank>[0-9]{1,7})(?:\s{1,8}Group\s{1,8}[0-9]{1,7})?"
    r"(?:\s{1,8}Pid\s{1,8}(?P<pid>[0-9]{1,10}))?\s{1,8}on\s{1,8}(?P<host>\S{1,255})\s{1,8}"
    r"device\s{1,8}(?P<dev>[0-9]{1,5})\s{1,8}\[(?P<bus>[^\]]{0,40})\]\s{0,8}(?P<name>.{0,200}?)\s*$")
_AVG = re.compile(r"#\s{0,8}Avg bus bandwidth\s{0,8}:\s{0,8}(?P<v>[0-9.eE+-]{1,24}|N/A)")
_OOB = re.compile(r"#\s{0,8}Out of bounds values\s{0,8}:\s{0,8}(?P<v>[0-9]{1,18})")
_FAILURE = re.compile(r"\bTest (?:CUDA |NCCL )?failure\b|\b(?:NCCL|CUDA) failure\b.{0,200}'")
_TESTS_VERSION = re.compile(r"#\s{0,8}nccl-tests version \S{1,40}.{0,80}?nccl-library=([0-9]{4,6})")
_COMMENT = re.compile(r"#\s{0,40}(?:Using devices|size\s{1,40}count|\(B\)\s{1,40}\(elements\)|"
                      r"out-of-place\s{1,80}in-place)")
_COLUMNS = re.compile(r"#\s{0,40}size\s{1,40}count\s")  # the column header of a table
_DATE, _CLOCK = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"), re.compile(r"[0-9]{2}:[0-9]{2}:[0-9]{2}")
_CELL = re.compile(r"-?[0-9.]{1,24}(?:e[+-]?[0-9]{1,3})?|N/A|[0-9]{4}-[0-9]{2}-[0-9]{2}|"
                   r"[0-9]{2}:[0-9]{2}:[0-9]{2}")
_ROW_START = re.compile(r"\s{0,40}[0-9]{1,20}\s{1,40}[0-9]{1,20}\s{1,40}[A-Za-z]")


def operation_of(test: str | None) -> str | None:
    """``all_reduce_perf`` -> ``allreduce``, ``reduce_scatter_perf`` -> ``reducescatter``."""
    if not test:
        return None
    base = test.removesuffix("_mpi").removesuffix("_perf")
    return base.replace("_", "") or None


def parse_nccl_tests(text: str) -> list[NcclTestRun]:
    """Every nccl-tests run of a text ([] when there is none)."""
    p = _Parser()
    for raw in split_lines(text):
        if len(raw) <= 65536:
            p.line(strip_shippers(raw).strip())
    return [r for r in p.runs if _started(r) or r.test and r.errors]


class _Parser:
    """The runs of one text, line by line; ``cols`` are the column names of the current
    table's header (None before one)."""

    def __init__(self) -> None:
        self.runs: list[NcclTestRun] = []
        self.cur: NcclTestRun | None = None
        self.cols: tuple[str, ...] | None = None

    def start(self, name: str | None, line: str) -> NcclTestRun:
        self.cur = NcclTestRun(test=name, line=line, operation=operation_of(name))
        self.runs.append(self.cur)
        self.cols = None
        return self.cur

    def fresh(self, line: str) -> NcclTestRun:
        """The current run while nothing of it was read yet, else a new one."""
        return self.cur if self.cur is not None and not _started(self.cur) \
            else self.start(None, line)

    def line(self, s: str) -> None:
        if not s:
            return
        if "NCCL " in s and (records := split_records(s)):
            for rec in records:  # interleaved NCCL records: only the version is of use
                v = parse_version(rec.msg)
                if v and self.cur is not None:
                    self.cur.nccl_version = self.cur.nccl_version or v[0]
        elif s.startswith("#") and not _is_prompt(s):
            self.comment(s)
        elif _ROW_START.match(s):
            row = _row(s, self.cols)
            if row is not None:
                run = self.cur or self.start(None, s)
                if len(run.rows) < 4096:
                    run.rows.append(row)
        elif _FAILURE.search(s):
            (self.cur or self.start(None, s)).errors.append(s[:500])
        elif (m := _COMMAND.search(s)) and len(s) < 2000:
            run = self.fresh(s)
            run.test, run.operation, run.line = m.group("name"), operation_of(m.group("name")), s
        elif (v := parse_version(s)) and self.cur is not None:
            self.cur.nccl_version = self.cur.nccl_version or v[0]

    def comment(self, s: str) -> None:
        cur = self.cur
        if m := _STARTING.match(s):
            name = m.group("name")
            if m.group("what") == "starting":
                if cur is None or _started(cur) or cur.test not in (None, name):
                    cur = self.start(name, s)
                cur.test, cur.operation = name, operation_of(name)
        elif _HEADER.match(s):
            if cur is None or cur.params or cur.rows:
                cur = self.start(None, s)
            cur.params = {m.group("k").strip(): m.group("v")
                          for m in _PARAM.finditer(s.lstrip("# "))}
        elif (m := _DEVICE.match(s)) and (rank := strict_int(m.group("rank"))) is not None \
                and (dev := strict_int(m.group("dev"))) is not None:
            cur = cur or self.start(None, s)
            if len(cur.devices) < 65536:
                cur.devices.append(NcclTestDevice(
                    rank=rank, host=m.group("host"), pid=strict_int(m.group("pid")),
                    device=dev, bus=m.group("bus").strip() or None,
                    name=m.group("name").strip(), line=s[:500]))
        elif _COLUMNS.match(s):
            self.cols = _layout(s)
        elif cur is None:
            if m := _TESTS_VERSION.match(s):  # the first line a run prints
                self.start(None, s).nccl_version = _version_code(strict_int(m.group(1)))
        elif m := _AVG.match(s):
            cur.avg_busbw = strict_float(m.group("v"))
            cur.avg_line = s[:500]
        elif m := _OOB.match(s):
            cur.out_of_bounds = strict_int(m.group("v"))
        elif m := _TESTS_VERSION.match(s):
            self.fresh(s).nccl_version = _version_code(strict_int(m.group(1)))


def _is_prompt(s: str) -> bool:
    """A root shell prompt running a test binary: ``# ./build/all_reduce_perf -g 8``."""
    return re.match(r"#\s{1,4}(?:\./|/|mpirun|srun|\w{1,40}_perf)", s) is not None \
        and _COMMAND.search(s) is not None


def _started(run: NcclTestRun) -> bool:
    return bool(run.params or run.rows or run.devices or run.errors or run.avg_busbw is not None)


def _version_code(code: int | None) -> str | None:
    """``22105`` -> ``2.21.5`` (NCCL_VERSION_CODE; before 2.9 it was ``2708`` for 2.7.8)."""
    if code is None:
        return None
    if code < 10000:
        return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


_TIME_COLS = ("time", "cputime")


def _layout(s: str) -> tuple[str, ...] | None:
    """The column names of a ``#  size  count  type  redop  root  time  algbw ...``
    header (without the ``timestamp`` one, whose values are two tokens), when usable."""
    cols = tuple(c for c in s.lstrip("#").split() if c != "timestamp")
    ok = 1 <= sum(c in _TIME_COLS for c in cols) <= 2 and cols[:2] == ("size", "count")
    return cols if ok else None


def _row(s: str, cols: tuple[str, ...] | None = None) -> NcclTestRow | None:
    """One size row, read by the column names of its table's header when they fit (extra
    ``#bitdiff`` or per-iteration columns), else by its number of fields; None when the
    fields do not add up."""
    tok = s.split()
    if len(tok) > 4 and _DATE.fullmatch(tok[-2]) and _CLOCK.fullmatch(tok[-1]):
        tok = tok[:-2]  # the -report_timestamps column
    if cols is not None and len(tok) == len(cols):
        at = [i for i, c in enumerate(cols) if c in _TIME_COLS]
        middle, groups = tok[3:at[0]], [t for i in at for t in tok[i:i + 4]]
        counts = cols[at[0] + 3] == "#wrong"  # old versions print a max error instead
    elif 7 <= len(tok) <= 13:  # 3 + (redop, root) + one or two groups of 4
        n = 8 if len(tok) >= 11 else 4
        middle, groups, counts = tok[3:-n], tok[-n:], True
    else:
        return None
    groups += [""] * (8 - len(groups))
    if len(middle) > 2 or strict_float(groups[0]) is None and groups[0] != "N/A":
        return None
    redop, root = "none", -1
    for t in middle:
        if (number := strict_int(t)) is not None and re.fullmatch(r"-?[0-9]{1,7}", t):
            root = number
        else:
            redop = t
    vals = [strict_float(t) for t in groups]
    size, count = strict_int(tok[0]), strict_int(tok[1])
    if vals[1] is None and vals[2] is None or size is None or count is None:
        return None
    oop_wrong, ip_wrong = (_wrong(groups[3]), _wrong(groups[7])) if counts else (None, None)
    return NcclTestRow(
        size=size, count=count, dtype=tok[2], redop=redop, root=root,
        line=s[:500], oop_time_us=vals[0], oop_algbw=vals[1], oop_busbw=vals[2],
        oop_wrong=oop_wrong, ip_time_us=vals[4], ip_algbw=vals[5], ip_busbw=vals[6],
        ip_wrong=ip_wrong)


def _wrong(raw: str) -> int | None:
    """#wrong as a count (printed ``%g``: ``3``, ``1.67772e+07``); None for ``N/A`` and
    for the float max-error (``2e-07``) of the oldest versions, which had no header."""
    if re.fullmatch(r"[0-9]{1,18}", raw):
        return strict_int(raw)
    v = strict_float(raw) if "e+" in raw else None
    return int(v) if v is not None and v >= 1 and v == int(v) else None


def _wide_row(s: str) -> bool:
    """A row of a table with more columns than the usual two groups (``-R`` bitwise or
    per-iteration figures): numbers after ``size count type``, one word at most."""
    tok = s.split()
    return 14 <= len(tok) <= 40 and sum(not _CELL.fullmatch(t) for t in tok[3:]) <= 1


def is_nccl_tests_line(line: str) -> bool:
    """A header, comment, table or footer line of nccl-tests output."""
    s = strip_shippers(line).strip()
    if len(s) > 2000 or not s:
        return False
    if s.startswith("#"):
        return bool(_HEADER.match(s) or _COMMENT.match(s) or _DEVICE.match(s) or _AVG.match(s)
                    or _OOB.match(s) or _STARTING.match(s) or _TESTS_VERSION.match(s))
    if _ROW_START.match(s):
        return _row(s) is not None or _wide_row(s)
    return _FAILURE.search(s) is not None


# (beside is_nccl_tests_line: a failure, a bare "#" line, the test binary's command line)
_PERF_BIN = re.compile(r"(?:^|[\s/])[a-z_]+_perf(?:_mpi)?(?:\s|$)")
_TESTS_EXTRA = re.compile(
    r"^\s*(?:\S+:\s+)?Test (?:CUDA |NCCL )?failure\b|^\s*\.\. \S+ pid [0-9]+: Test failure"
    r"|^\s*#\s*$")


def tests_line(line: str) -> bool:
    """A line of nccl-tests output (header, table row, footer, failure, command)."""
    return (is_nccl_tests_line(line) or _TESTS_EXTRA.match(strip_shippers(line)) is not None
            or (_PERF_BIN.search(line) is not None and "NCCL" not in line))

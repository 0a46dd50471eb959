"""nccl-tests output (``all_reduce_perf`` and friends): header, devices, size table, footer.

A run starts at its command line (``./build/all_reduce_perf -b 8 ...``), at
``# Collective test starting: <name>`` or at a ``# nThread ...`` header; one
text may hold several runs. Table rows are read by whitespace: newer
versions print ``size count type redop root`` and two groups of ``time algbw
busbw #wrong`` (out-of-place, in-place), older ones lack redop/root, print
``N/A`` for #wrong without validation, or a float max error in its place.
NCCL's own ``NCCL INFO`` lines interleaved in the output are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gputriage.parsers.nccl_lines import parse_version, split_records, strip_shippers
from gputriage.parsers.nccl_model import NcclTestDevice, NcclTestRow, NcclTestRun

__all__ = ["is_nccl_tests_line", "operation_of", "parse_nccl_tests"]

_COMMAND = re.compile(r"(?:^|[\s/=])(?P<name>[a-z][a-z_]{1,40}_perf)(?:_mpi)?(?:\s|$)")
_STARTING = re.compile(r"#\s{0,8}Collective test (?P<what>starting|concluded):\s{0,8}"
                       r"(?P<name>\w{1,60})")
_HEADER = re.compile(r"#\s{0,8}nThread\s{1,8}\d")
_PARAM = re.compile(r"(?P<k>[A-Za-z][\w ]{0,30}?):?\s{1,8}(?P<v>-?[\d.]{1,24}(?:\([^)\s]{0,20}\))?)"
                    r"(?=\s|$)")
_DEVICE = re.compile(
    r"#\s{0,8}Rank\s{1,8}(?P<rank>\d{1,7})(?:\s{1,8}Group\s{1,8}\d{1,7})?"
    r"(?:\s{1,8}Pid\s{1,8}(?P<pid>\d{1,10}))?\s{1,8}on\s{1,8}(?P<host>\S{1,255})\s{1,8}"
    r"device\s{1,8}(?P<dev>\d{1,5})\s{1,8}\[(?P<bus>[^\]]{0,40})\]\s{0,8}(?P<name>.{0,200}?)\s*$")
_AVG = re.compile(r"#\s{0,8}Avg bus bandwidth\s{0,8}:\s{0,8}(?P<v>[\d.eE+-]{1,24}|N/A)")
_OOB = re.compile(r"#\s{0,8}Out of bounds values\s{0,8}:\s{0,8}(?P<v>\d{1,18})")
_FAILURE = re.compile(r"\bTest (?:CUDA |NCCL )?failure\b|\bTest NCCL failure\b|"
                      r"\bNCCL failure\b.{0,200}'|\bCUDA failure\b.{0,200}'")
_TESTS_VERSION = re.compile(r"#\s{0,8}nccl-tests version \S{1,40}.{0,80}?nccl-library=(\d{4,6})")
_COMMENT = re.compile(r"#\s{0,40}(?:Using devices|size\s{1,40}count|\(B\)\s{1,40}\(elements\)|"
                      r"out-of-place\s{1,80}in-place)")
_ROW_START = re.compile(r"\s{0,40}\d{1,20}\s{1,40}\d{1,20}\s{1,40}[A-Za-z]")


def operation_of(test: str | None) -> str | None:
    """``all_reduce_perf`` -> ``allreduce``, ``reduce_scatter_perf`` -> ``reducescatter``."""
    if not test:
        return None
    base = test.removesuffix("_mpi").removesuffix("_perf")
    return base.replace("_", "") or None


def parse_nccl_tests(text: str) -> list[NcclTestRun]:
    """Every nccl-tests run of a text ([] when there is none)."""
    runs: list[NcclTestRun] = []
    cur: NcclTestRun | None = None

    def start(name: str | None, line: str) -> NcclTestRun:
        run = NcclTestRun(test=name, line=line, operation=operation_of(name))
        runs.append(run)
        return run

    for raw in text.splitlines():
        if len(raw) > 65536:
            continue
        line = strip_shippers(raw).rstrip()
        if not line.strip():
            continue
        if "NCCL " in line and split_records(line):
            cur = _nccl_record(cur, line)
            continue
        s = line.strip()
        if s.startswith("#") and not _is_prompt(s):
            cur = _comment(cur, s, start)
        elif _ROW_START.match(s):
            row = _row(s)
            if row is not None:
                cur = cur or start(None, s)
                if len(cur.rows) < 4096:
                    cur.rows.append(row)
        elif _FAILURE.search(s):
            cur = cur or start(None, s)
            cur.errors.append(s[:500])
        elif (m := _COMMAND.search(s)) and len(s) < 2000:
            if cur is None or _started(cur):
                cur = start(m.group("name"), s)
            else:
                cur.test, cur.operation, cur.line = m.group("name"), \
                    operation_of(m.group("name")), s
        else:
            v = parse_version(s)
            if v and cur is not None:
                cur.nccl_version = cur.nccl_version or v[0]
    return [r for r in runs if _started(r) or r.test and r.errors]


def _is_prompt(s: str) -> bool:
    """A root shell prompt running a test binary: ``# ./build/all_reduce_perf -g 8``."""
    return re.match(r"#\s{1,4}(?:\./|/|mpirun|srun|\w{1,40}_perf)", s) is not None \
        and _COMMAND.search(s) is not None


def _started(run: NcclTestRun) -> bool:
    return bool(run.params or run.rows or run.devices or run.errors or run.avg_busbw is not None)


def _nccl_record(cur: NcclTestRun | None, line: str) -> NcclTestRun | None:
    """An interleaved NCCL record: only its version line is of use here."""
    for rec in split_records(line):
        v = parse_version(rec.msg)
        if v and cur is not None:
            cur.nccl_version = cur.nccl_version or v[0]
    return cur


def _comment(cur: NcclTestRun | None, s: str,
             start: Callable[[str | None, str], NcclTestRun]) -> NcclTestRun | None:
    if m := _STARTING.match(s):
        name = m.group("name")
        if m.group("what") == "concluded":
            return cur
        if cur is not None and not _started(cur) and cur.test in (None, name):
            cur.test, cur.operation = name, operation_of(name)
            return cur
        return start(name, s)
    if _HEADER.match(s):
        if cur is None or cur.params or cur.rows:
            cur = start(cur.test if cur is not None and not _started(cur) else None, s)
        cur.params = {m.group("k").strip(): m.group("v")
                      for m in _PARAM.finditer(s.lstrip("# "))}
        return cur
    if m := _DEVICE.match(s):
        cur = cur or start(None, s)
        if len(cur.devices) < 65536:
            cur.devices.append(NcclTestDevice(
                rank=int(m.group("rank")), host=m.group("host"),
                pid=int(m.group("pid")) if m.group("pid") else None, device=int(m.group("dev")),
                bus=m.group("bus").strip() or None, name=m.group("name").strip(), line=s[:500]))
        return cur
    if m := _AVG.match(s):
        if cur is not None:
            cur.avg_busbw = _float(m.group("v"))
            cur.avg_line = s[:500]
        return cur
    if m := _OOB.match(s):
        if cur is not None:
            cur.out_of_bounds = int(m.group("v"))
        return cur
    if m := _TESTS_VERSION.match(s):
        code = int(m.group(1))
        if cur is not None:
            cur.nccl_version = f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
        return cur
    return cur


def _row(s: str) -> NcclTestRow | None:
    """One size row; None when the columns do not add up."""
    tok = s.split()
    if len(tok) < 7 or len(tok) > 14:
        return None
    size, count, dtype = int(tok[0]), int(tok[1]), tok[2]
    middle, groups = tok[3:-8], tok[-8:]
    if len(tok) - 3 < 8:  # one group only (out-of-place)
        middle, groups = tok[3:-4], tok[-4:] + [""] * 4
    if len(middle) > 2 or not _float(groups[0]) and groups[0] != "N/A":
        return None
    redop, root = "none", -1
    for t in middle:
        if re.fullmatch(r"-?\d{1,7}", t):
            root = int(t)
        else:
            redop = t
    vals = [_float(t) for t in groups]
    if vals[1] is None and vals[2] is None:
        return None
    return NcclTestRow(
        size=size, count=count, dtype=dtype, redop=redop, root=root, line=s[:500],
        oop_time_us=vals[0], oop_algbw=vals[1], oop_busbw=vals[2], oop_wrong=_wrong(groups[3]),
        ip_time_us=vals[4], ip_algbw=vals[5], ip_busbw=vals[6], ip_wrong=_wrong(groups[7]))


def _float(raw: str) -> float | None:
    try:
        v = float(raw)
    except ValueError:
        return None
    return v if v == v and abs(v) != float("inf") else None


def _wrong(raw: str) -> int | None:
    """#wrong as a count; None for ``N/A`` and for the float max-error of old versions."""
    return int(raw) if re.fullmatch(r"\d{1,18}", raw) else None


def is_nccl_tests_line(line: str) -> bool:
    """A header, comment, table or footer line of nccl-tests output."""
    s = strip_shippers(line).strip()
    if len(s) > 2000 or not s:
        return False
    if s.startswith("#"):
        return bool(_HEADER.match(s) or _COMMENT.match(s) or _DEVICE.match(s) or _AVG.match(s)
                    or _OOB.match(s) or _STARTING.match(s) or _TESTS_VERSION.match(s))
    if _ROW_START.match(s):
        return _row(s) is not None
    return _FAILURE.search(s) is not None

"""Job outputs in a paste, and what a prompt line's command produces.

* ``nccl_log``: NCCL_DEBUG=INFO records (``host:pid:tid [dev] NCCL INFO ...``,
  with whatever prefixes a shipper added), bare ``NCCL WARN`` / ``NCCL version``
  lines, and the NCCL errors of the framework around it (PyTorch
  ProcessGroupNCCL watchdog lines with their wrapped continuation lines).
* ``nccl_tests``: the output of an nccl-tests binary (``all_reduce_perf`` and
  friends): header, device list, size table, footer and failure lines. NCCL
  records interleaved in it go to ``nccl_log``; the run is claimed around them.

The header lines of nccl-tests start with ``# `` like a root prompt; the
detector asks :func:`is_tests_prompt` before it takes such a line for a
barrier. :func:`source_for_command` maps a prompt's command to a source.
"""

from __future__ import annotations

import os
import re
from typing import Protocol

from gputriage import sources
from gputriage.parsers.nccl_lines import is_nccl_line, strip_shippers
from gputriage.parsers.nccl_tests import is_nccl_tests_line

__all__ = ["JOB_DETECTORS", "is_tests_prompt", "nccl_lines", "nccl_record",
           "source_for_command", "tests_line"]


class _Doc(Protocol):
    lines: list[str]
    owner: list[str | None]

    def free(self, i: int) -> bool: ...


# --- NCCL log ---------------------------------------------------------------------
_NCCL_RECORD = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b|^\W*NCCL version \d+\.\d+")
# framework lines that may wrap over the next lines (a PyTorch watchdog message)
_FRAMEWORK = re.compile(r"ProcessGroupNCCL|DistBackendError|\bWorkNCCL\(|ncclInternalError"
                        r"|ncclSystemError|ncclUnhandledCudaError|ncclRemoteError"
                        r"|ncclInvalidUsage|\bNCCL (?:error|communicator was aborted)")
_CONT_MAX = 16  # continuation lines kept after a framework error line
# ... an error (PyTorch's E level, an exception, a timeout), not a warning
_FRAMEWORK_ERROR = re.compile(r"\[E\d{3,4} |[Ee]rror|[Ee]xception|[Tt]imeout|timed out"
                              r"|DistBackendError")
# the start of another kind of record: a table, dmesg, a timestamp, XML, a prompt...
_FOREIGN = re.compile(r"^\s*(?:[|+]|\[\s*\d+\.\d+\]|\d{4}-\d\d-\d\d|[A-Z][a-z]{2} [ \d]\d "
                      r"\d\d:\d\d|<|GPU \d|CA '|\S+@\S+[:$#]|[$#] )")


def nccl_record(line: str) -> bool:
    """One line of an NCCL debug log or an NCCL error line of the framework."""
    if "NCCL" not in line and "nccl" not in line and "DistBackendError" not in line:
        return False
    return bool(_NCCL_RECORD.search(line) or _FRAMEWORK.search(line)) or is_nccl_line(line)


def nccl_lines(text: str) -> str:
    """The NCCL records of a large text, in order (without the wrapped lines of framework
    errors: for inputs too large for the full detector)."""
    kept = [ln for ln in text.splitlines()
            if ("NCCL" in ln or "nccl" in ln or "DistBackendError" in ln) and nccl_record(ln)]
    return "\n".join(kept) + "\n" if kept else ""


def _nccl(doc: _Doc) -> None:
    """Claim NCCL records, then the wrapped lines that follow a framework error (up to a
    blank line or the start of another kind of record)."""
    from gputriage.ingest.detect import is_kernel_line

    lines, owner = doc.lines, doc.owner
    for i, ln in enumerate(lines):
        if owner[i] is None and nccl_record(ln):
            owner[i] = "nccl_log"
    i = 0
    while i < len(lines):
        if (owner[i] != "nccl_log" or not _FRAMEWORK.search(lines[i])
                or not _FRAMEWORK_ERROR.search(lines[i])):
            i += 1
            continue
        j = i + 1
        while (j < len(lines) and j - i <= _CONT_MAX and lines[j].strip()
               and (owner[j] is None or owner[j] == "nccl_log")
               and not _FOREIGN.match(lines[j]) and not is_kernel_line(lines[j])
               and not tests_line(lines[j])):
            owner[j] = "nccl_log"
            j += 1
        i = j


# --- nccl-tests -------------------------------------------------------------------
_PERF_BIN = re.compile(r"(?:^|[\s/])[a-z_]+_perf(?:_mpi)?(?:\s|$)")
_TESTS_EXTRA = re.compile(
    r"^\s*(?:\S+:\s+)?Test (?:CUDA |NCCL )?failure\b|^\s*\.\. \S+ pid \d+: Test failure"
    r"|^\s*#\s*$")
# lines that make a run of candidate lines an nccl-tests output for sure
_TESTS_STRONG = re.compile(
    r"^\s*#\s*(?:nThread\s+\d|Using devices|Rank\s+\d+\s+Group|size\s+count|Avg bus bandwidth"
    r"|Out of bounds values|Collective test|nccl-tests version)"
    r"|Test (?:CUDA |NCCL )?failure")


def tests_line(line: str) -> bool:
    """A line of nccl-tests output (header, table row, footer, failure, command)."""
    return (is_nccl_tests_line(line) or _TESTS_EXTRA.match(strip_shippers(line)) is not None
            or (_PERF_BIN.search(line) is not None and "NCCL" not in line))


def is_tests_prompt(lines: list[str], i: int) -> bool:
    """Whether a ``# ...`` line that looks like a root prompt is an nccl-tests line
    (itself, or a comment line between two of them)."""
    ln = lines[i]
    if not ln.lstrip().startswith("#"):
        return False
    if is_nccl_tests_line(ln) or _TESTS_STRONG.match(ln):
        return True
    near = [lines[k] for k in (i - 1, i + 1) if 0 <= k < len(lines)]
    return any(x.lstrip().startswith("#") and (is_nccl_tests_line(x) or _TESTS_STRONG.match(x))
               for x in near)


def _tests(doc: _Doc) -> None:
    """Claim each run of nccl-tests lines (NCCL records and blank lines may sit in
    between) that holds at least one line only nccl-tests prints."""
    lines, owner = doc.lines, doc.owner
    i = 0
    while i < len(lines):
        if not (doc.free(i) and lines[i].strip() and tests_line(lines[i])):
            i += 1
            continue
        last = j = i
        while j < len(lines):
            if owner[j] == "nccl_log" or (doc.free(j) and not lines[j].strip()):
                j += 1
            elif doc.free(j) and tests_line(lines[j]):
                last = j
                j += 1
            else:
                break
        run = [k for k in range(i, last + 1) if doc.free(k)]
        if any(_TESTS_STRONG.search(strip_shippers(lines[k])) for k in run):
            for k in run:
                owner[k] = "nccl_tests"
        i = last + 1


JOB_DETECTORS = (_nccl, _tests)


# --- command hints ----------------------------------------------------------------
_FILE_SOURCES = {s.path: s.name for s in sources.SOURCES if s.kind == "file" and s.path}
_LOG_FILES = re.compile(r"/var/log/(?:syslog|messages|kern\.log|dmesg)")
_IB_TOOLS = frozenset({"ibstat", "ibstatus", "ibv_devinfo", "ibdev2netdev", "show_gids"})
_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "prterun", "srun", "salloc"})


def _perf_binary(prog: str) -> bool:
    return prog.endswith(("_perf", "_perf_mpi"))


def source_for_command(cmd: str) -> str | None:
    """The source a command line (``sudo nvidia-smi -q | grep X``) produces, if known."""
    first = cmd.split("|")[0].split()
    while first and (first[0] in ("sudo", "env", "command") or "=" in first[0]):
        first = first[1:]
    if not first:
        return None
    prog, args = os.path.basename(first[0]), [a.strip("'\"") for a in first[1:]]
    a = set(args)
    if _perf_binary(prog) or (prog in _LAUNCHERS
                              and any(_perf_binary(os.path.basename(x)) for x in args)):
        return "nccl_tests"
    if prog == "nvidia-smi":
        return _nvidia_smi(args, a)
    if prog == "dmesg":
        return "kernel_log"
    if prog == "journalctl":
        if a & {"-k", "--dmesg"} or "_TRANSPORT=kernel" in a:
            return "kernel_log"
        return "fabricmanager_journal" if "fabricmanager" in cmd else None
    if prog in ("cat", "tail", "head", "less", "more", "zcat", "grep"):
        return _file_command(args)
    if prog == "systemctl" and a & {"show", "status"}:
        if "persistenced" in cmd:
            return "systemctl_persistenced"
        return "systemctl_fabricmanager" if "fabricmanager" in cmd else None
    if prog == "lspci":
        return "lspci_nvidia" if "10de" in cmd or "nvidia" in cmd.lower() else None
    if prog == "nvidia-container-cli":
        return "nvidia_container_cli_info" if "info" in a else None
    if prog in _IB_TOOLS:
        return "ibstat"
    return {"lsmod": "proc_modules", "lscpu": "numactl",
            "numactl": "numactl" if a & {"-H", "--hardware"} else None}.get(prog)


def _nvidia_smi(args: list[str], a: set[str]) -> str | None:
    if "topo" in a:
        return "nvidia_smi_topo" if a & {"-m", "--matrix"} else None
    if "nvlink" in a:
        if a & {"-e", "--errorcounters"}:
            return "nvidia_smi_nvlink_errors"
        return "nvidia_smi_nvlink_status" if a & {"-s", "--status"} else None
    if any(re.match(r"--query-(?:gpu|remapped-rows|retired-pages|compute-apps)=", x) for x in a):
        return "nvidia_smi_csv"
    if a & {"-r", "--gpu-reset"}:
        return "gpu_reset"
    if a & {"-q", "--query", "-a"} or any(x.startswith("--query") and "=" not in x for x in a):
        if a & {"-u", "--unit"}:
            return None
        return "nvidia_smi_q_xml" if a & {"-x", "--xml-format"} else "nvidia_smi_q"
    rest = [x for x in args if not re.fullmatch(r"-i|--id(=\S+)?|\d+|-L|--list-gpus", x)]
    return None if rest else "nvidia_smi"


def _file_command(args: list[str]) -> str | None:
    for arg in args:
        if arg in _FILE_SOURCES:
            return _FILE_SOURCES[arg]
        if _LOG_FILES.match(arg):
            return "kernel_log"
        if "fabricmanager" in arg and arg.endswith(".log"):
            return "fabricmanager_journal"
    return None

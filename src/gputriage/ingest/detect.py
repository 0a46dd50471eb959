"""Recognise pasted command outputs by their content (never by file name).

A paste may hold one output or a shell session with several: prompt lines
(``$ cmd``, ``# cmd``, ``user@host:~$ cmd``) and markdown fences act as
barriers, and each block found is claimed by one source. Lines nobody
claims are ignored. A segment whose content is not recognised falls back on
the command in its prompt line (``$ nvidia-smi -q | grep Fabric``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

from gputriage.ingest.detect_jobs import JOB_DETECTORS, is_tests_prompt, source_for_command
from gputriage.parsers.device_query import is_device_query_line
from gputriage.parsers.fabricmanager import is_fm_message
from gputriage.parsers.gpu_reset import is_reset_context, is_reset_line, wraps
from gputriage.parsers.nvsmi_csv import csv_cells, is_csv_header, is_csv_row

__all__ = ["EXPECTED", "detect", "is_kernel_line", "kernel_lines", "source_for_command"]

EXPECTED = (
    "expected a gputriage snapshot (dir or .tar.gz), an nvidia-bug-report.log(.gz), or a "
    "pasted output: nvidia-smi -q -x XML, nvidia-smi -q text (or one of its sections), the "
    "nvidia-smi table (or an excerpt) or its error message, nvidia-smi -L, nvidia-smi "
    "--query-gpu/--query-remapped-rows/--query-retired-pages/--query-compute-apps CSV, "
    "nvidia-smi -r (GPU reset), deviceQuery, nvidia-smi topo -m, nvidia-smi nvlink -s, "
    "/proc/driver/nvidia/version, lsmod or /proc/modules, a kernel log "
    "(dmesg/journalctl/syslog), ibstat, ibstatus, ibv_devinfo, ibdev2netdev, show_gids, "
    "numactl -H, lscpu, lspci -vvv, systemctl show/status of "
    "nvidia-persistenced or nvidia-fabricmanager, a fabric manager log, "
    "nvidia-container-cli info, an NCCL_DEBUG=INFO log of a job, nccl-tests output "
    "(all_reduce_perf...)"
)

_BARRIER = "#barrier"
_PROMPT = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?"
    r"(?:[\w.-]+@[\w.-]+(?::[^\s$#]*)?\s*[$#]|\[[^\]\s]+@[^\]]+\]\s*[$#]|[$#])"
    r"\s+(?P<cmd>\S.*)$")
_BARE_CMD = re.compile(
    r"^\s*(?P<cmd>(?:sudo\s+)?(?:nvidia-smi|dmesg|journalctl|lsmod|ibstat|ibstatus|ibv_devinfo"
    r"|ibdev2netdev|show_gids|lscpu|numactl|lspci"
    r"|systemctl|nvidia-container-cli)(?:\s+(?:[-|]|topo\b|nvlink\b|show\b|status\b|info\b)"
    r".*)?)\s*$")
_FENCE = re.compile(r"^\s*```")

# --- kernel log lines -----------------------------------------------------------
_KERNEL_START = re.compile("|".join(f"(?:{p})" for p in (
    r"\s*(?:>\s*)?(?:<\d{1,3}>)?\[\s*\+?\d+\.\d+\]",  # dmesg raw, /proc/kmsg, dmesg -H delta
    r"\s*(?:>\s*)?\[[A-Z][a-z]{2}\s?\d{1,2} \d\d:\d\d\]",  # dmesg -H minute stamp
    r"\d{1,3},\d{1,20},\d{1,20},[^;]{0,32};",  # /dev/kmsg record
    r"\s*(?:[\w\-]{1,32} [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]:|nv_peer_mem:"
    r"|modprobe: (?:ERROR|FATAL): could not insert)\s",  # dmesg -t device / module messages
    r"\s*(?:>\s*)?\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]",
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d+[+-]\d\d:?\d\d\s",  # dmesg --time-format iso
    r"\s*kernel:\s",
    r"\{.*\"(?:_TRANSPORT|SYSLOG_IDENTIFIER)\"\s*:\s*\"kernel\"",  # journalctl -o json
    r"\s*(?:nvidia(?:-(?:modeset|nvlink|uvm|drm|peermem|nvswitch\d*))?|nvidia_uvm|nvidia_drm)"
    r"(?::|\s+[0-9a-f]{4}:[0-9a-f]{2}:)",
)))
_SYSLOG_KERNEL = re.compile(r"\d\d:\d\d:\d\d\S*\s+\S+\s+kernel(?:\[\d+\])?:\s")
_TALOS_KERNEL = re.compile(r"\bkern:\s*\w+:\s*\[")
_BOOT_MARK = re.compile(r"^-- (?:Boot [0-9a-f]+|Logs begin|Journal begins|No entries|Reboot)")


_ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")


def is_kernel_line(line: str) -> bool:
    """Whether one line looks like a kernel log record (any common format, colour
    escapes of ``dmesg --color`` / ``journalctl`` ignored)."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "NVRM:" in line or _KERNEL_START.match(line):
        return True
    if "kernel" in line and _SYSLOG_KERNEL.search(line):
        return True
    return "kern:" in line and _TALOS_KERNEL.search(line) is not None


# a syslog / journal record of any program: "May 31 05:33:40 host prog[123]: ..."
_SYSTEM_LOG = re.compile(
    r"^\s*(?:[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S*)"
    r"\s+\S+\s+[^\s:\[]+(?:\[\d+\])?:\s")


def is_system_log_line(line: str) -> bool:
    """A syslog/journal record of any program (kept with the kernel's: the system log)."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _SYSTEM_LOG.match(line) is not None


def _is_log(lines: list[str]) -> bool:
    """Kernel records present, or mostly system-log records."""
    if any(is_kernel_line(ln) for ln in lines):
        return True
    content = [ln for ln in lines if ln.strip()]
    syslog = sum(1 for ln in content if is_system_log_line(ln))
    return syslog > 0 and syslog * 2 >= len(content)


def kernel_lines(text: str) -> str:
    """The system log records (kernel first of all, and journal boot markers) of a
    text, in order."""
    lines = text.splitlines()
    if not _is_log(lines):
        return ""
    kept = [ln for ln in lines
            if is_kernel_line(ln) or is_system_log_line(ln) or _BOOT_MARK.match(ln)]
    return "\n".join(kept) + "\n" if kept else ""


# --- block detectors ---------------------------------------------------------------
class _Doc:
    """Lines of a paste and which source claimed each one."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.owner: list[str | None] = [None] * len(self.lines)

    def free(self, i: int) -> bool:
        return 0 <= i < len(self.lines) and self.owner[i] is None

    def extend(self, i: int, pred: Callable[[str], bool]) -> int:
        """First index >= i that is claimed or fails ``pred``."""
        while self.free(i) and pred(self.lines[i]):
            i += 1
        return i

    def claim(self, name: str, start: int, end: int) -> None:
        while end > start and not self.lines[end - 1].strip():
            end -= 1
        for j in range(start, end):
            if self.owner[j] is None:
                self.owner[j] = name

    def next_nonblank(self, i: int) -> int:
        while self.free(i) and not self.lines[i].strip():
            i += 1
        return i


def _blocks(doc: _Doc, name: str, start: re.Pattern[str], cont: Callable[[str], bool],
            confirm: Callable[[_Doc, int], bool] | None = None) -> None:
    """Claim every block that begins at a ``start`` line and goes on while ``cont``."""
    i = 0
    while i < len(doc.lines):
        if doc.free(i) and start.search(doc.lines[i]) and (confirm is None or confirm(doc, i)):
            end = doc.extend(i + 1, cont)
            doc.claim(name, i, end)
            i = max(end, i + 1)
        else:
            i += 1


def _lines(doc: _Doc, name: str, pat: re.Pattern[str]) -> None:
    for i, ln in enumerate(doc.lines):
        if doc.owner[i] is None and pat.search(ln):
            doc.owner[i] = name


_XML_END = re.compile(r"</nvidia_smi_log>")


def _xml(doc: _Doc) -> None:
    for i, ln in enumerate(doc.lines):
        if doc.free(i) and ("<nvidia_smi_log" in ln or (
                "<?xml" in ln and any("nvidia_smi_log" in x for x in doc.lines[i + 1:i + 4]))):
            end = doc.extend(i, lambda s: not _XML_END.search(s))
            doc.claim("nvidia_smi_q_xml", i, min(end + 1, len(doc.lines)))
            return


_Q_START = re.compile(r"^=+\s*NVSMI LOG\s*=+\s*$|^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                      r"[0-9A-Fa-f]{2}\.[0-7]\s*$")
_Q_CONT = re.compile(r"^\s*$|^\s|^[A-Z][\w ()/.,-]{0,80}\s:(?:\s|$)")


def _q_confirm(doc: _Doc, i: int) -> bool:
    j = doc.next_nonblank(i + 1)
    return "NVSMI" in doc.lines[i] or (doc.free(j) and bool(re.match(r"^\s+\S", doc.lines[j])))


_TABLE_HEAD = re.compile(r"^\s*\|\s*NVIDIA-SMI\s+\S")
_TABLE_LINE = re.compile(r"^\s*[+|]")
_CLOCK = re.compile(r"^\s*[A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d \d{4}\s*$")


def _table(doc: _Doc) -> None:
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _TABLE_HEAD.match(ln)):
            continue
        s = i
        while doc.free(s - 1) and _TABLE_LINE.match(doc.lines[s - 1]):
            s -= 1
        if doc.free(s - 1) and _CLOCK.match(doc.lines[s - 1]):
            s -= 1
        e = i + 1
        while doc.free(e):
            if _TABLE_LINE.match(doc.lines[e]):
                e += 1
            elif not doc.lines[e].strip() and _TABLE_LINE.match(
                    doc.lines[doc.next_nonblank(e)] if doc.free(doc.next_nonblank(e)) else ""):
                e = doc.next_nonblank(e)
            else:
                break
        doc.claim("nvidia_smi", s, e)


_GPU_ROW = re.compile(r"^\s*\|\s*\d{1,3}\s+[^|]*\|\s*(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:"
                      r"[0-9A-Fa-f]{2}\.[0-7]\s+\S*\s*\|")


def _table_excerpt(doc: _Doc) -> None:
    """Rows of the table without its header (people paste the GPUs that matter)."""
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _GPU_ROW.match(ln)):
            continue
        s = i
        while doc.free(s - 1) and _TABLE_LINE.match(doc.lines[s - 1]):
            s -= 1
        doc.claim("nvidia_smi", s, doc.extend(i + 1, lambda x: bool(_TABLE_LINE.match(x))))


# a section of nvidia-smi -q pasted without its GPU header (-q -d ROW_REMAPPER, a grep)
_Q_SECTION = re.compile(r"^(?:Remapped Rows|Retired Pages|Page Retirement|ECC Errors|ECC Mode"
                        r"|Temperature|GPU Power Readings|Power Readings|Clocks Event Reasons"
                        r"|Clocks Throttle Reasons|PCI|Fabric|FB Memory Usage|Utilization"
                        r"|Row Remapper)\s*$")
_Q_VALUE = re.compile(r"^\s+[A-Z][\w ()/.,-]{0,80}\s:\s*\S")


def _q_section_confirm(doc: _Doc, i: int) -> bool:
    return any(_Q_VALUE.match(x) for x in doc.lines[i + 1:i + 4])


def _csv_row_of_width(line: str, width: int) -> bool:
    return is_csv_row(line) and len(csv_cells(line)) == width


def _csv_body(line: str, width: int) -> bool:
    """A data row under a CSV header of ``width`` columns."""
    if not line.strip() or is_csv_header(line) or is_kernel_line(line):
        return False
    if len(csv_cells(line)) != width:
        return False
    return width > 1 or re.fullmatch(r"[\w.\[\]/%: -]{1,40}", line.strip()) is not None


def _csv(doc: _Doc) -> None:
    """nvidia-smi --query-* CSV: a header and its rows, or rows that carry a bus id or
    a GPU UUID (noheader); rows after a query's prompt line come by its command."""
    i = 0
    while i < len(doc.lines):
        ln = doc.lines[i]
        if doc.free(i) and is_csv_header(ln):
            width = len(csv_cells(ln))
            end = doc.extend(i + 1, partial(_csv_body, width=width))
        elif doc.free(i) and is_csv_row(ln) and not is_kernel_line(ln):
            width = len(csv_cells(ln))
            end = doc.extend(i + 1, partial(_csv_row_of_width, width=width))
        else:
            i += 1
            continue
        doc.claim("nvidia_smi_csv", i, end)
        i = max(end, i + 1)


def _reset(doc: _Doc) -> None:
    """GPU reset / MIG mode change messages, and what goes with them in a paste."""
    if not any(doc.free(i) and is_reset_line(ln) for i, ln in enumerate(doc.lines)):
        return
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and (is_reset_line(ln) or is_reset_context(ln))):
            continue
        doc.owner[i] = "gpu_reset"
        j = i + 1
        while wraps(ln) and doc.free(j) and doc.lines[j].strip() and not (
                is_reset_line(doc.lines[j]) or is_reset_context(doc.lines[j])):
            doc.owner[j] = "gpu_reset"
            j += 1


_DQ_CONT = re.compile(r"^\s*$|^\s|^(?:cuda\w+ returned|->|Result = |Detected \d+ CUDA|Device \d+: "
                      r"\"|There (?:is|are) no|deviceQuery, CUDA Driver|> )")


def _device_query(doc: _Doc) -> None:
    """deviceQuery output: from its banner (or its error) to its Result line."""
    i = 0
    while i < len(doc.lines):
        if not (doc.free(i) and is_device_query_line(doc.lines[i])):
            i += 1
            continue
        end = i + 1
        while doc.free(end) and _DQ_CONT.match(doc.lines[end]):
            end += 1
            if doc.lines[end - 1].startswith("Result = "):
                break
        doc.claim("device_query", i, end)
        i = end


_SMI_ERR = re.compile(r"^\s*(?:NVIDIA-SMI has failed|NVIDIA-SMI couldn't find|No devices were "
                      r"found|Unable to determine the device handle|Failed to initialize NVML:"
                      r"|NVML library version:)")
_SMI_L = re.compile(r"^\s*(?:GPU \d+: .+\(UUID: GPU-[^)]*\)\s*$|MIG .+Device\s+\d+: \(UUID: MIG-)")
_GPU_UUID = re.compile(r"^GPU \d+: .*\(UUID: ")
_LINK = re.compile(r"^\s+Link \d+: |^NVML: Unable to retrieve NVLink")


def _nvlink(doc: _Doc) -> None:
    for i, ln in enumerate(doc.lines):
        if doc.free(i) and _GPU_UUID.match(ln) and doc.free(i + 1) and _LINK.match(
                doc.lines[i + 1]):
            end = doc.extend(i + 1, lambda s: bool(_LINK.match(s) or s.strip() in ("", "...")
                                                   or set(s.strip()) == {"."}))
            body = "\n".join(doc.lines[i:end])
            errors = re.search(r"Link \d+: .*(?:Errors?|Replay|Recovery|CRC)", body)
            doc.claim("nvidia_smi_nvlink_errors" if errors else "nvidia_smi_nvlink_status",
                      i, end)


_TOPO_HEAD = re.compile(r"^\s*GPU0(?:\s+(?:GPU\d+|NIC\d+|mlx\S+|CPU|NUMA|Affinity|ID|GPU))*\s*$")
_TOPO_ROW = re.compile(r"^\s*(?:GPU\d+|NIC\d+|mlx\S+)\s")


def _topo(doc: _Doc) -> None:
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _TOPO_HEAD.match(ln)):
            continue
        j = doc.next_nonblank(i + 1)
        if not (doc.free(j) and re.match(r"^\s*GPU0\s+X\b", doc.lines[j])):
            continue
        e = doc.extend(j, lambda s: bool(_TOPO_ROW.match(s)))
        k = doc.next_nonblank(e)
        while doc.free(k) and re.match(r"^\s*(?:NIC )?Legend:\s*$", doc.lines[k]):
            e = doc.extend(k + 1, lambda s: not s.strip() or s[0].isspace())
            k = doc.next_nonblank(e)
        doc.claim("nvidia_smi_topo", i, e)


_INDENTED = re.compile(r"^(?:\s*$|\s)")
_LSPCI_HEAD = re.compile(r"^\s*(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] [^:]+:")


def _lspci(doc: _Doc) -> None:
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _LSPCI_HEAD.match(ln)):
            continue
        e = doc.extend(i + 1, lambda s: bool(re.match(r"^\s+\S|^\s*$", s))
                       and not _LSPCI_HEAD.match(s))
        if re.search(r"NVIDIA|\[10de:", ln):
            doc.claim("lspci_nvidia", i, e)
        elif re.search(r"Mellanox|\[15b3:", ln):
            doc.claim("lspci_mellanox", i, e)


_LSPCI_LINK = re.compile(r"^\s*(?:LnkCap|LnkSta|LnkCtl|DevSta|UESta|CESta)2?:\s")


def _lspci_excerpt(doc: _Doc) -> None:
    """An lspci excerpt without its device header (the LnkCap/LnkSta lines people
    paste): the indented run around those lines, as ``lspci_nvidia``."""
    if any(o in ("lspci_nvidia", "lspci_mellanox") for o in doc.owner):
        return
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _LSPCI_LINK.match(ln)):
            continue
        start = i
        while start > 0 and doc.free(start - 1) and doc.lines[start - 1][:1].isspace():
            start -= 1
        end = doc.extend(i + 1, lambda s: bool(s.strip()) and s[:1].isspace())
        doc.claim("lspci_nvidia", start, end)


_SHOW = re.compile(r"^[A-Z][A-Za-z]+=")
_STATUS_HEAD = re.compile(r"^\s*[●○×*]?\s*(?P<unit>nvidia-(?:persistenced|fabricmanager))"
                          r"(?:\.service)?\s+-\s")
_JOURNAL = re.compile(r"^(?:\S+\s+\d{1,2}|\d{4}-\d\d-\d\dT\S+)\s+\d\d:\d\d:\d\d\S*\s+\S+\s+\S+:|"
                      r"^\S+\s+\d{1,2} \d\d:\d\d:\d\d \S+ \S+:")


def _unit_source(text: str) -> str | None:
    if "persistenced" in text:
        return "systemctl_persistenced"
    return "systemctl_fabricmanager" if "fabricmanager" in text else None


def _systemctl(doc: _Doc) -> None:
    for i, ln in enumerate(doc.lines):
        m = _STATUS_HEAD.match(ln) if doc.free(i) else None
        if m and any("Loaded:" in x for x in doc.lines[i + 1:i + 4]):
            e = doc.extend(i + 1, lambda s: bool(_INDENTED.match(s) or _JOURNAL.match(s)))
            doc.claim(_unit_source(m.group("unit")) or "", i, e)
        elif doc.free(i) and re.match(r"^Unit nvidia-(?:persistenced|fabricmanager)\S* could "
                                      r"not be found", ln):
            doc.claim(_unit_source(ln) or "", i, i + 1)
        elif doc.free(i) and _SHOW.match(ln) and not (i and doc.free(i - 1)
                                                      and _SHOW.match(doc.lines[i - 1])):
            e = doc.extend(i, lambda s: bool(_SHOW.match(s)))
            block = "\n".join(doc.lines[i:e])
            name = _unit_source("\n".join(x for x in doc.lines[i:e]
                                          if x.startswith(("Id=", "Names=", "Description="))))
            if e - i >= 4 and name and re.search(r"^(?:ActiveState|LoadState)=", block, re.M):
                doc.claim(name, i, e)


_FM_LOG = re.compile(r"^\[[A-Z][a-z]{2} \d{1,2} \d{4} \d\d:\d\d:\d\d\] \[[A-Z]+\] \[tid \d+\]")
_FM_JOURNAL = re.compile(r"(?:^|\s)(?:nv-fabricmanager|nvidia-fabricmanager-start\.sh)(?:\[\d+\])?:"
                         r"|systemd\[1\]: .*(?:nvidia-fabricmanager|NVIDIA fabric manager)"
                         r"|^Job for nvidia-fabricmanager\S* failed")


def _fabricmanager(doc: _Doc) -> None:
    hits = [i for i, ln in enumerate(doc.lines) if doc.free(i) and _FM_LOG.match(ln)]
    if hits:
        end = doc.extend(hits[-1] + 1, lambda s: bool(s.strip()) and not s.startswith("["))
        doc.claim("fabricmanager_journal", hits[0], end)
    for i, ln in enumerate(doc.lines):
        if doc.owner[i] is None and (_FM_JOURNAL.search(ln) or is_fm_message(ln)):
            doc.owner[i] = "fabricmanager_journal"
            j = i + 1
            while doc.free(j) and re.match(r"^\s+\S", doc.lines[j]):
                doc.owner[j] = "fabricmanager_journal"
                j += 1


def _kernel(doc: _Doc) -> None:
    free = [ln for i, ln in enumerate(doc.lines) if doc.owner[i] is None]
    if not _is_log(free):
        return
    for i, ln in enumerate(doc.lines):
        if doc.owner[i] is None and (is_kernel_line(ln) or is_system_log_line(ln)
                                     or _BOOT_MARK.match(ln)):
            doc.owner[i] = "kernel_log"


def _container_cli(doc: _Doc) -> None:
    text = "\n".join(x for i, x in enumerate(doc.lines) if doc.owner[i] is None)
    if not (re.search(r"^NVRM version:", text, re.M) and re.search(r"^Device Index:", text, re.M)):
        return
    field = re.compile(r"^(?:NVRM|CUDA) version:|^(?:Device (?:Index|Minor)|Model|Brand|GPU UUID|"
                       r"Bus Location|Architecture):|^\s*$|^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ")
    _blocks(doc, "nvidia_container_cli_info", re.compile(r"^[IWEF]\d{4} |^NVRM version:"),
            lambda s: bool(field.match(s)))


_IBSTATUS = re.compile(r"^Infiniband device '[^']+' port \d+ status:\s*$")
_HCA_ID = re.compile(r"^hca_id:\s*\S+\s*$")
_IBDEV2NETDEV = re.compile(
    r"^\s*(?:(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\s+)?[A-Za-z][\w.-]*\s"
    r"[^=]*?\bport \d+(?:\s+\(\s*[A-Z_]+\s*\))?\s+<?=+>\s+\S+\s+"
    r"\((?:Up|Down|up|down|UP|DOWN)\)\s*$")
_GIDS_HEAD = re.compile(r"^\s*DEV\s+PORT\s+INDEX\s+GID\b")
_GIDS_ROW = re.compile(r"^\s*(?:-{2,}\s+)+-{2,}\s*$|^\s*[A-Za-z][\w.-]*\s+\d+\s+\d+\s+"
                       r"[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{0,4}){2,7}\s|^n_gids_found=\d+")


def _ib_tools(doc: _Doc) -> None:
    """ibstatus, ibv_devinfo, ibdev2netdev and show_gids outputs: the ``ibstat`` source."""
    _blocks(doc, "ibstat", _IBSTATUS, lambda s: bool(_INDENTED.match(s)))
    _blocks(doc, "ibstat", _HCA_ID, lambda s: bool(_INDENTED.match(s)))
    _lines(doc, "ibstat", _IBDEV2NETDEV)
    _blocks(doc, "ibstat", _GIDS_HEAD, lambda s: bool(_GIDS_ROW.match(s)))


_LSCPU_START = re.compile(r"^\s*(?:Architecture:\s+\S|NUMA:\s*$|NUMA node\(s\):\s+\d)")
_LSCPU_LINE = re.compile(r"^\s*[A-Za-z][\w()/.,+ -]*[\w)]:(?:\s|$)")
_LSCPU_KEY = re.compile(r"^\s*(?:NUMA node\d*(?:\(s\))? ?(?:CPU\(s\))?|Socket\(s\)|CPU\(s\)"
                        r"|Model name):")


def _lscpu(doc: _Doc) -> None:
    """``lscpu`` output (NUMA nodes and their CPUs): the ``numactl`` source."""
    i = 0
    while i < len(doc.lines):
        if not (doc.free(i) and _LSCPU_START.match(doc.lines[i])):
            i += 1
            continue
        end = doc.extend(i + 1, lambda s: bool(_LSCPU_LINE.match(s)))
        keys = sum(1 for ln in doc.lines[i:end] if _LSCPU_KEY.match(ln))
        if keys >= 2 or (keys >= 1 and "NUMA" in doc.lines[i]):
            doc.claim("numactl", i, end)
        i = max(end, i + 1)


_DETECTORS: tuple[Callable[[_Doc], None], ...] = (
    *JOB_DETECTORS,  # NCCL records first: the system-log detector would take shipped ones
    _xml,
    lambda d: _blocks(d, "nvidia_smi_q", _Q_START, lambda s: bool(_Q_CONT.match(s)), _q_confirm),
    lambda d: _blocks(d, "nvidia_smi_q", _Q_SECTION, lambda s: bool(_Q_CONT.match(s)),
                      _q_section_confirm),
    _systemctl,
    _container_cli,
    lambda d: _blocks(d, "proc_driver_nvidia_version", re.compile(r"^NVRM version: NVIDIA "),
                      lambda s: s.startswith("GCC version:")),
    _topo,
    _nvlink,
    _table,
    _table_excerpt,
    _reset,
    _device_query,
    _csv,
    lambda d: _lines(d, "nvidia_smi", _SMI_ERR),
    lambda d: _lines(d, "nvidia_smi", _SMI_L),
    lambda d: _blocks(d, "ibstat", re.compile(r"^CA '[^']+'\s*$"),
                      lambda s: bool(_INDENTED.match(s))),
    _ib_tools,
    lambda d: _blocks(d, "numactl", re.compile(r"^available: \d+ nodes? \("),
                      lambda s: bool(re.match(r"^(?:node\b|\s*\d+:|\s*$|No distance)", s))),
    _lscpu,
    _lspci,
    _lspci_excerpt,
    lambda d: _blocks(d, "dmidecode_slots", re.compile(r"^(?:Handle 0x[0-9A-Fa-f]+, DMI type 9\b"
                                                      r"|System Slot Information\s*$)"),
                      lambda s: not s.startswith("Handle ") or "DMI type 9" in s),
    lambda d: _blocks(d, "proc_modules", re.compile(r"^Module\s+Size\s+Used by"),
                      lambda s: bool(re.match(r"^\w+\s+\d+\s+\d+", s))),
    lambda d: _lines(d, "proc_modules", re.compile(
        r"^\w+ \d+ \d+ \S+ (?:Live|Loading|Unloading)\b|^nvidia\w*\s+\d+\s+\d+(?:\s+\S+)?\s*$")),
    _fabricmanager,
    _kernel,
)


_KEEP_COMMAND = frozenset({"nvidia_smi_csv", "gpu_reset"})
# commands of a reset session: stopping a GPU's holders, persistence mode, the reset
_HOLDER_CMD = re.compile(r"\b(?:killall|pkill|kill|fuser|lsof|systemctl\s+(?:stop|disable|mask)"
                         r"|nvidia-smi\b.*\s(?:-pm|--persistence-mode|-r|--gpu-reset|-mig))\b")


def _keeps_command(doc: _Doc, body: list[int], hint: str | None, cmd: str | None) -> str | None:
    """The source a prompt line belongs to: nccl-tests runs keep their command, and so
    do CSV queries (the command names the columns) and reset sessions (each command is
    a step)."""
    if not cmd:
        return None
    owners = {doc.owner[j] for j in body if doc.lines[j].strip()}
    if hint == "nccl_tests":
        return hint if hint in owners else None
    if len(owners) == 1 and owners <= _KEEP_COMMAND:
        return next(iter(owners))
    if not owners and "gpu_reset" in doc.owner and _HOLDER_CMD.search(cmd):
        return "gpu_reset"
    return None


def detect(text: str) -> list[tuple[str, str]]:
    """The ``(source_name, text)`` pieces found in a pasted text; ``[]`` when unrecognised.

    Pieces are in the order they appear; several blocks of one source are joined.
    """
    doc = _Doc(text)
    segments: list[tuple[int, int, str | None]] = [(0, 0, None)]  # (prompt, body, command)
    i = 0
    while i < len(doc.lines):
        ln = doc.lines[i]
        m = _PROMPT.match(ln) or _BARE_CMD.match(ln)
        if m and is_tests_prompt(doc.lines, i):
            m = None  # "# nThread 1 nGpus 8 ...": nccl-tests output, not a root prompt
        elif m or _FENCE.match(ln):
            cmd = m.group("cmd").strip() if m else None
            first = i
            doc.owner[i] = _BARRIER
            while cmd and cmd.endswith("\\") and i + 1 < len(doc.lines):
                i += 1
                doc.owner[i] = _BARRIER
                cmd = cmd[:-1] + " " + doc.lines[i].strip()
            segments.append((first, i + 1, cmd))
        i += 1
    for det in _DETECTORS:
        det(doc)
    nexts = [s for s, _, _ in segments[1:]] + [len(doc.lines)]
    for (prompt, start, cmd), nxt in zip(segments, nexts, strict=True):
        body = [j for j in range(start, nxt) if doc.owner[j] != _BARRIER]
        hint = source_for_command(cmd) if cmd else None
        if hint and all(doc.owner[j] is None for j in body) and any(
                doc.lines[j].strip() for j in body):
            for j in body:
                doc.owner[j] = hint
        keep = _keeps_command(doc, body, hint, cmd)
        if keep:
            for j in range(prompt, start):  # the command says what the output means
                doc.owner[j] = keep
    found: dict[str, list[str]] = {}
    for ln, owner in zip(doc.lines, doc.owner, strict=True):
        if owner and owner != _BARRIER:
            found.setdefault(owner, []).append(ln)
    return [(name, "\n".join(lns).strip("\n") + "\n") for name, lns in found.items()]

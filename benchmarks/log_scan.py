"""Kernel-log scanning throughput, side by side with the on-call's grep.

Generates a kernel log (default 1 GB, journalctl short-iso, or ``--format dmesg``,
``syslog``: kern.log's lines, the kernel's uptime in each, or ``rfc3339``: rsyslog's
stamps to the microsecond) in a temporary folder, of one ``--profile`` (or ``all`` in
turn):

  * quiet: about 0.1 % NVIDIA lines -- Xid, NVRM, nvidia-nvswitch SXid, mlx5 --
    among ordinary usb / ext4 / audit / systemd / TCP lines;
  * storm: as quiet, and 1 line in 10 an Xid (13/31/43/119 over 8 GPUs from 300
    processes, some followed by the Xid 45 of the same process);
  * busy-hca: as quiet, and 1 line in 6 a routine ``mlx5_core`` message (E-Switch,
    PCIe power, module events, firmware tracer, health dumps, rate limits, ...);

then times:

  * ``python -m gputriage logs FILE --json > out`` (when the ``logs`` command
    is not available yet: ``python -c`` calling ``gputriage.logscan.scan_paths``,
    and the report says so), its JSON size, and once ``logs FILE --no-pager``
    piped to a file: the terminal report's lines;
  * the scan alone (``scan_paths``) and the start-up alone (an empty log);
  * with ``--analyze``: ``python -m gputriage analyze FILE --json > out``;
  * ``grep -i -E 'nvidia|xid|nvrm' FILE > out2`` (output to a file: GNU grep
    stops at the first match when its output is /dev/null) and
    ``grep -ciE 'nvidia|xid|nvrm' FILE``;
  * µs per line of the profile's kind: the time beyond the quiet profile's time
    per byte (when quiet ran first), and directly (the scan of a file of the log's
    first 100,000 anchor lines, less start-up, per line);
  * the anchor search alone per engine (Hyperscan, ``bytes.find``), one thread with
    and without routine-line rejection, and two threads (Hyperscan).

and prints wall times (best of ``--repeat`` runs: the figure least disturbed
by other load; gputriage's runs, the baseline's and grep's taking turns, so that a
drift in the machine's load hits them alike), throughputs (MB/s), the ratios and
the peak RSS of the gputriage run: the largest single process
(``getrusage(RUSAGE_CHILDREN)``, measured in a wrapper child so that grep's figure
does not mix in) and the largest summed memory of its process tree (proportional set
sizes, so that pages forked workers share count once; sampled from /proc every 50 ms:
large plain files are searched by worker processes, which one process's figure leaves
out). The tree is sampled in one more run of each command, not in the timed ones: a read
of ``/proc/PID/smaps_rollup`` walks the page tables of the process's mappings (1-5 ms for
a worker that maps its part of the log), and sampling three processes every 50 ms on a
2-core machine made the 1 GB storm's run about a sixth slower (grep's, one process that
maps nothing, 2-5 %).

and, last, a table of the ratios to grep against issue 33's goal for the profile
(met or not; with ``--baseline SRC``, gputriage imported from another source tree is
timed in the same run, before and after side by side).

With ``--parts``, where a worker's CPU time goes, block by block (the anchor search, the
storm pass, the per-line parse, numbering, the result's pickle:
``benchmarks/scan_parts.py``), for this tree and the baseline.

Usage: python benchmarks/log_scan.py [--profile quiet|storm|busy-hca|all]
       [--format short-iso|dmesg|syslog|rfc3339|all] [--size 1GB] [--keep DIR] [--file LOG]
       [--repeat N] [--analyze] [--no-engines] [--parts] [--baseline SRC]
``--size 5GB`` is the memory check (peak RSS must stay under 200 MB).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_ORDINARY = (
    "usb {b}-{p}: new high-speed USB device number {n} using xhci_hcd",
    "usb {b}-{p}: New USB device found, idVendor=0bda, idProduct=5411, bcdDevice= 1.{n:02d}",
    "EXT4-fs (nvme0n1p{p}): mounted filesystem with ordered data mode. Quota mode: none.",
    "EXT4-fs (dm-{p}): re-mounted. Opts: errors=remount-ro",
    "audit: type=1400 audit({t}.{n:03d}:{m}): apparmor=\"STATUS\" operation=\"profile_load\" "
    "profile=\"unconfined\" name=\"snap-update-ns.lxd\" pid={m} comm=\"apparmor_parser\"",
    "audit: type=1300 audit({t}.{n:03d}:{m}): arch=c000003e syscall=44 success=yes exit=52",
    "systemd[1]: Started session-{m}.scope - Session {m} of User ubuntu.",
    "systemd[1]: Starting logrotate.service - Rotate log files...",
    "systemd-journald[{n}]: Data hash table of /var/log/journal/system.journal has a fill "
    "level at 75.0 (8534 of 11377 items, 6553600 file size, 767 bytes per hash table item)",
    "TCP: request_sock_TCP: Possible SYN flooding on port {n}. Sending cookies.",
    "IPv6: ADDRCONF(NETDEV_CHANGE): veth{m:x}: link becomes ready",
    "cni0: port {p}(veth{m:x}) entered forwarding state",
    "br-{m:x}: port {p}(vethab{n}) entered disabled state",
    "e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex, Flow Control: Rx/Tx",
    "perf: interrupt took too long (2504 > 2500), lowering kernel.perf_event_max_sample_rate "
    "to 79750",
    "kauditd_printk_skb: {n} callbacks suppressed",
    "xfs filesystem being remounted at /var/lib/containerd/tmpmounts/containerd-mount{m} "
    "supports timestamps until 2038",
    "overlayfs: fs on '/var/lib/docker/overlay2/l/{m:x}' does not support file handles, "
    "falling back to xino=off.",
    "nf_conntrack: nf_conntrack: table full, dropping packet",
    "Memory cgroup out of memory: Killed process {m} (java) total-vm:{m}kB, anon-rss:{n}kB",
)
_NVIDIA = (
    "NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
    "off the bus.",
    "NVRM: Xid (PCI:0000:{bus:02x}:00): 31, pid={m}, name=python3, Ch 0000003b, intr 00000000. "
    "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1c_00000000. Fault is of type "
    "FAULT_PDE ACCESS_TYPE_VIRT_READ",
    "NVRM: Xid (PCI:0000:{bus:02x}:00): 119, pid={m}, name=nvidia-smi, Timeout after 6s of "
    "waiting for RPC response from GPU{p} GSP! Expected function 76 (GSP_RM_CONTROL) "
    "(0x20801813 0x4c).",
    "NVRM: GPU at PCI:0000:{bus:02x}:00: GPU-509665ad-b600-ac93-3616-d754b23d{m:04x}",
    "NVRM: GPU Board Serial Number: 16501240{m:05d}",
    "nvidia-nvswitch{p}: SXid (PCI:0000:{bus:02x}:00.0): 20034, Fatal, Link {n} LTSSM Fault Up",
    "nvidia-nvswitch{p}: SXid (PCI:0000:{bus:02x}:00.0): 12028, Non-fatal, Link {n} egress "
    "non-posted PRIV error (First)",
    "mlx5_core 0000:{bus:02x}:00.0 ibp{bus}s0: Link down",
    "mlx5_core 0000:{bus:02x}:00.0: mlx5_fw_tracer_handle_traces:742:(pid {m}): FW tracer "
    "buffer full",
)


# busy HCA: the routine messages of a ConnectX adapter (none is an event)
_MLX5_ROUTINE = (
    "mlx5_core 0000:{bus:02x}:00.{p}: E-Switch: Total vports {n}, per vport: max uc(1024) "
    "max mc(16384)",
    "mlx5_core 0000:{bus:02x}:00.{p}: mlx5_pcie_event:304:(pid {m}): PCIe slot advertised "
    "sufficient power (75W).",
    "mlx5_core 0000:{bus:02x}:00.{p}: Port module event: module {p}, Cable plugged",
    "mlx5_core 0000:{bus:02x}:00.{p}: mlx5_fw_tracer_handle_traces:742:(pid {m}): FW tracer "
    "buffer full",
    "mlx5_core 0000:{bus:02x}:00.{p}: print_health_info:424:(pid {m}): assert_var[{p}] "
    "0x00000000",
    "mlx5_core 0000:{bus:02x}:00.{p}: firmware version: 28.39.{m}",
    "mlx5_core 0000:{bus:02x}:00.{p}: Rate limit: 127 rates are supported, range: 0Mbps to "
    "97656Mbps",
    "mlx5_core 0000:{bus:02x}:00.{p}: Flow counters: {m} bulk queries in flight",
    "mlx5_core 0000:{bus:02x}:00.{p}: MLX5E: StrdRq(1) RqSz(8) StrdSz(2048) RxCqeCmprss(0 "
    "basic)",
    "mlx5_core 0000:{bus:02x}:00.{p}: enabling device (0000 -> 0002)",
)
_BUSES = (0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb)
_PROCS = ("python3", "pt_main_thread", "torchrun", "nvidia-smi", "dcgmi", "llama-server",
          "vllm", "trainer")
_XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC {g}, TPC {t}, SM 0): Out Of Range Address",
    31: "Ch 0000003b, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{g} faulted @ "
        "0x7f1c_{a:08x}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 000000{t:02x}",
    45: "Ch 000000{t:02x}",
    119: "Timeout after 6s of waiting for RPC response from GPU{g} GSP! Expected function 76 "
         "(GSP_RM_CONTROL) (0x20801813 0x4c).",
}
PROFILES = ("quiet", "storm", "busy-hca")
# issue 33's goals: `logs --json` time over `grep -iE 'nvidia|xid|nvrm' > file` time (1 GB,
# an idle 2-core machine), and the peak memory of a storm (5 GB) in MB
GOALS = {"quiet": 1.0, "busy-hca": 1.0, "storm": 2.0}
MEMORY_GOAL_MB = 200
# syslog: kern.log's, the kernel's uptime in it; rfc3339: rsyslog's high-precision stamps
# (Ubuntu's default since 23.10), microseconds in each
FORMATS = ("short-iso", "dmesg", "syslog", "rfc3339")


class _Storm:
    """Xid lines of an incident: 13/31/43/119 over 8 GPUs from many processes, some
    followed by the Xid 45 of the channels torn down for the same process."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.pids = [(rng.randint(1000, 4_000_000), rng.choice(_PROCS)) for _ in range(300)]
        self.follow: list[tuple[int, int, str]] = []  # (bus, pid, name) owed an Xid 45

    def line(self) -> str:
        rng = self.rng
        if self.follow and rng.random() < 0.5:
            bus, pid, name = self.follow.pop(0)
            code = 45
        else:
            code = rng.choice((13, 13, 31, 31, 43, 119))
            bus = rng.choice(_BUSES)
            pid, name = rng.choice(self.pids)
            if code != 119 and rng.random() < 0.3 and len(self.follow) < 64:
                self.follow.append((bus, pid, name))
        text = _XID_TEXT[code].format(g=rng.randint(0, 7), t=rng.randint(0, 255),
                                      a=rng.getrandbits(32))
        return f"NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, pid={pid}, name={name}, {text}"


def _prefix(fmt: str, t0: int, second: int, i: int) -> str:
    if fmt == "dmesg":
        return f"[{second + i / 2000:12.6f}] "
    if fmt == "syslog":  # (rsyslog's traditional format, as Debian's kern.log has it)
        stamp = time.strftime("%b %e %H:%M:%S", time.gmtime(t0 + second))
        return f"{stamp} gpu-node-17 kernel: [{second + i / 2000:12.6f}] "
    if fmt == "rfc3339":
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + second))
        return f"{stamp}.{i * 500:06d}+00:00 gpu-node-17 kernel: "
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(t0 + second))
    return f"{stamp} gpu-node-17 kernel: "


def generate(path: Path, size: int, seed: int = 7, profile: str = "quiet",
             fmt: str = "short-iso") -> tuple[int, int]:
    """Write about ``size`` bytes of log to ``path`` (``profile``: quiet, storm,
    busy-hca; ``fmt``: one of FORMATS); returns (bytes written, lines holding an
    anchor that the profile put there)."""
    rng = random.Random(seed)
    storm = _Storm(random.Random(seed + 1))
    t0 = 1_724_990_000
    written = special = 0
    second = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < size:
            head = _prefix(fmt, t0, second, 0)
            second += 1
            out = []
            for i in range(2000):
                if fmt != "short-iso":  # (an uptime or a fraction: each line its own)
                    head = _prefix(fmt, t0, second, i)
                r = rng.random()
                if profile == "storm" and r < 0.1:
                    out.append(f"{head}{storm.line()}\n")
                    special += 1
                    continue
                if profile == "busy-hca" and r > 5 / 6:
                    tpl = rng.choice(_MLX5_ROUTINE)
                    special += 1
                elif r < 0.001:
                    tpl = rng.choice(_NVIDIA)
                    special += 1
                else:
                    tpl = rng.choice(_ORDINARY)
                msg = tpl.format(b=rng.randint(1, 4), p=rng.randint(0, 7), n=rng.randint(0, 99),
                                 m=rng.randint(1000, 99999), t=t0 + second,
                                 bus=rng.choice(_BUSES))
                out.append(f"{head}{msg}\n")
            chunk = "".join(out)
            fh.write(chunk)
            written += len(chunk)
    return written, special


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def _logs_command_available() -> bool:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-m", "gputriage", "logs", "--help"], env=env,
                          capture_output=True, check=False)
    return proc.returncode == 0


_WRAPPER = """
import os, resource, subprocess, sys, threading, time

def pss(pid):
    # proportional set size (KiB): pages that forked workers share count once in all;
    # VmRSS where smaps_rollup is missing
    for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            with open(f"/proc/{pid}/{name}") as fh:
                for line in fh:
                    if line.startswith(key):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
    return 0

def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
    except (OSError, ValueError):
        pass
    return out

def tree_rss(root):
    # summed memory (KiB) of root and its descendants
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += pss(pid)
        todo.extend(children(pid))
    return total

start = time.perf_counter()
peak_tree = [0]
sample = sys.argv[2] == "1"
with open(sys.argv[1], "wb") as out:
    proc = subprocess.Popen(sys.argv[3:], stdout=out)
    def watch():
        while proc.poll() is None:
            if os.path.isdir("/proc"):
                peak_tree[0] = max(peak_tree[0], tree_rss(proc.pid))
            time.sleep(0.05)
    t = threading.Thread(target=watch, daemon=True)
    if sample:
        t.start()
    rc = proc.wait()
wall = time.perf_counter() - start
if sample:
    t.join()
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{wall} {usage.ru_maxrss} {rc} {peak_tree[0]} {usage.ru_utime + usage.ru_stime}")
"""


_SCAN_SNIPPET = (
    "import sys, json; from gputriage.logscan import scan_paths; s = scan_paths(sys.argv[1:]); "
    "json.dump({'events': len(s.events), 'lines': s.lines, 'boots': len(s.boots), "
    "'formats': s.formats, 'problems': s.problems}, sys.stdout)"
)


def _timed(argv: list[str], out: Path, repeat: int = 1, src: Path | None = None,
           best: float = float("inf"), sample: bool = False) -> tuple[float, int, int, int]:
    """Best wall seconds of ``repeat`` runs of one command (run in a wrapper child), the
    largest peak RSS of one process (KiB), the largest summed memory (PSS) of its
    process tree (KiB, with ``sample`` only: sampled every 50 ms, worker processes
    included; else 0) and the last rc. ``src``: the source tree gputriage is imported
    from (default: this checkout's); ``best``: the best wall seconds of its earlier runs
    (their CPU seconds kept). A sampled run's time is not one to compare (see the module
    docstring): :func:`_tree_peak` samples in a run of its own."""
    env = {**os.environ, "PYTHONPATH": str(src or REPO / "src"), "LC_ALL": "C"}
    peak, tree, rc = 0, 0, 0
    cpu = CPU.get((tuple(argv), str(src)), best) if best < float("inf") else best
    for _ in range(max(1, repeat)):
        proc = subprocess.run([sys.executable, "-c", _WRAPPER, str(out), "1" if sample else "0",
                               *argv], env=env, capture_output=True, text=True, check=True)
        wall, one, code, summed, used = proc.stdout.split()
        best, peak = min(best, float(wall)), max(peak, int(one))
        tree, rc = max(tree, int(summed)), int(code)
        cpu = min(cpu, float(used))
    if not sample:  # (a sampled run's CPU seconds are not kept)
        CPU[tuple(argv), str(src)] = cpu
    return best, peak, tree, rc


# CPU seconds (user + system, the process and its workers) of the last timing of each
# command: what a shared machine's load disturbs least
CPU: dict[tuple[tuple[str, ...], str], float] = {}


def _tree_peak(argv: list[str], out: Path, src: Path | None = None) -> int:
    """The largest summed memory (PSS, KiB) of one run's process tree, sampled every 50
    ms in a run of its own (its time and CPU are not kept)."""
    return _timed(argv, out, 1, src, sample=True)[2]


def _cpu(argv: list[str], src: Path | None = None) -> float:
    return CPU.get((tuple(argv), str(src)), float("nan"))


# --- the anchor search alone, per engine -------------------------------------------------

def _search_alone(log: Path, engine: str, threads: int, reject: bool = True
                  ) -> tuple[float, int]:
    """Seconds to read ``log`` in 8 MiB blocks (page cache) and search each with
    ``anchor_hits`` under ``engine`` on ``threads`` threads, and the lines found (each
    block searched up to its last newline)."""
    from concurrent.futures import ThreadPoolExecutor

    from gputriage.logscan import ScanConfig
    from gputriage.logscan.search import anchor_hits, anchors_for

    config = ScanConfig(engine=engine, reject=reject)
    block = config.block
    size = log.stat().st_size
    fd = os.open(log, os.O_RDONLY)
    anchors = anchors_for(os.pread(fd, 4096, 0))
    bufs = [bytearray(block) for _ in range(threads)]

    def one(k: int) -> int:
        found = 0
        buf = bufs[k]
        for i in range(k, size // block + 1, threads):
            n = os.preadv(fd, [buf], i * block)
            end = buf.rfind(b"\n", 0, n) + 1
            found += len(anchor_hits(buf, 0, end, anchors, config))
        return found

    try:
        anchor_hits(bytearray(b"x\n"), 0, 2, anchors, config)  # compile outside the timing
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            found = sum(pool.map(one, range(threads)))
        return time.perf_counter() - start, found
    finally:
        os.close(fd)


def _engines(log: Path, repeat: int) -> None:
    """Print the anchor search alone per engine (one core; two threads where the engine
    searches outside the GIL)."""
    from gputriage.logscan import ScanConfig
    from gputriage.logscan.search import engine_for

    size_mb = log.stat().st_size / 1e6
    for engine in ("hyperscan", "python"):
        if engine_for(ScanConfig(engine=engine)) != engine:
            print(f"  anchor search, {engine}: not available here")
            continue
        runs = [(1, True), (1, False)] + ([(2, True)] if engine != "python" else [])
        for threads, reject in runs:
            n = repeat if engine != "python" else 1  # bytes.find: slow, one run
            best, found = min(_search_alone(log, engine, threads, reject) for _ in range(n))
            what = "routine lines dropped" if reject else "no rejection"
            print(f"  anchor search alone, {engine}, {threads} thread{'s' * (threads > 1)}, "
                  f"{what}: {best:.2f} s, {size_mb / best:.0f} MB/s, {found} lines")


# --- one profile -------------------------------------------------------------------------

def _anchor_lines(log: Path, out: Path, limit: int = 100_000) -> Path:
    """``out``: a file of the first ``limit`` lines of ``log`` holding an anchor (to time
    the parse of event lines directly)."""
    from gputriage.logscan.search import ANCHORS

    n = 0
    with log.open("rb") as src, out.open("wb") as dst:
        for line in src:
            if any(a in line for a in ANCHORS):
                dst.write(line)
                n += 1
                if n >= limit:
                    break
    return out


def _log_for(args: argparse.Namespace, profile: str) -> tuple[Path, int, Path | None]:
    """The log of ``profile`` (generated, or reused from ``--keep``), its special lines
    (-1 when unknown) and the folder to remove afterwards."""
    if args.file:
        return Path(args.file), -1, None
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gt-logscan-"))
    folder.mkdir(parents=True, exist_ok=True)
    size = _parse_size(args.size)
    log = folder / f"{profile}-{args.format}-{args.size}.log"
    count = log.with_suffix(".count")
    if args.keep and log.exists() and count.exists():
        print(f"reusing {log}")
        return log, int(count.read_text()), None
    start = time.perf_counter()
    _, special = generate(log, size, profile=profile, fmt=args.format)
    count.write_text(str(special))
    print(f"generated {log.stat().st_size / 1e6:.0f} MB ({profile}, {args.format}) in "
          f"{time.perf_counter() - start:.1f} s")
    return log, special, None if args.keep else folder


def _run_profile(args: argparse.Namespace, profile: str, quiet_rate: float | None
                 ) -> float:
    """Time one profile; returns gputriage's seconds per byte (for the next profiles)."""
    log, special, tmp = _log_for(args, profile)
    rep = args.repeat
    try:
        size = log.stat().st_size
        size_mb = size / 1e6
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=False)  # warm
        work = Path(tempfile.mkdtemp(prefix="gt-logscan-out-"))
        scan_argv = [sys.executable, "-c", _SCAN_SNIPPET, str(log)]
        have_logs = _logs_command_available()
        if have_logs:
            label = "gputriage logs --json"
            gt_argv = [sys.executable, "-m", "gputriage", "logs", str(log), "--json"]
        else:
            label = "scan_paths (python -c; the `logs` command does not exist yet)"
            gt_argv = scan_argv
        print(f"== profile {profile}: {log.name} ({size_mb:.0f} MB, "
              f"{special if special >= 0 else '?'} lines of the profile's kind); "
              f"{os.cpu_count()} CPUs; best of {rep} runs")
        # each run of this checkout, the baseline's and grep's in turn: the ratios are
        # those of the same load (a shared machine's drifts hit them alike)
        grep_argv = ["grep", "-i", "-E", "nvidia|xid|nvrm", str(log)]
        base = Path(args.baseline) if args.baseline else None
        warm = work / "warm.log"  # (bytecode and databases written: not timed)
        generate(warm, 1 << 20, profile=profile)
        for src in (None, base) if base is not None else (None,):
            _timed([str(warm) if a == str(log) else a for a in gt_argv], work / "out-warm", 1,
                   src)
        gt_wall = b_wall = grep_wall = float("inf")
        gt_rss = gt_rc = b_tree = 0
        for _ in range(max(1, rep)):
            gt_timing = _timed(gt_argv, work / "out", 1, best=gt_wall)
            gt_wall, gt_rss, gt_rc = gt_timing[0], max(gt_rss, gt_timing[1]), gt_timing[3]
            if base is not None:
                b_wall = _timed(gt_argv, work / "out-base", 1, base, best=b_wall)[0]
            grep_wall = _timed(grep_argv, work / "out2", 1, best=grep_wall)[0]
        gt_tree = _tree_peak(gt_argv, work / "out")
        if base is not None:
            b_tree = _tree_peak(gt_argv, work / "out-base", base)
        count_wall, _, _, _ = _timed(["grep", "-ciE", "nvidia|xid|nvrm", str(log)],
                                     work / "out-count", rep)
        print(f"gputriage: {label}: {gt_wall:.2f} s, {size_mb / gt_wall:.0f} MB/s, "
              f"peak RSS {gt_rss / 1024:.0f} MB (process tree {gt_tree / 1024:.0f} MB), "
              f"JSON {(work / 'out').stat().st_size} bytes, rc {gt_rc}")
        if have_logs:
            term = work / "out-term"
            t_wall, _, _, _ = _timed([sys.executable, "-m", "gputriage", "logs", str(log),
                                      "--no-pager"], term, 1)
            with term.open("rb") as fh:
                term_lines = sum(1 for _ in fh)
            print(f"  terminal report (logs --no-pager, piped): {term_lines} lines, "
                  f"{term.stat().st_size} bytes ({t_wall:.2f} s, one run)")
            sc_wall, sc_rss, _, _ = _timed(scan_argv, work / "out-scan", rep)
            sc_tree = _tree_peak(scan_argv, work / "out-scan")
            print(f"  of which the scan alone (gputriage.logscan.scan_paths): {sc_wall:.2f} s, "
                  f"{size_mb / sc_wall:.0f} MB/s, peak RSS {sc_rss / 1024:.0f} MB "
                  f"(process tree {sc_tree / 1024:.0f} MB)")
            empty = work / "empty.log"
            empty.write_bytes(b"")
            st_wall, _, _, _ = _timed([sys.executable, "-m", "gputriage", "logs", str(empty),
                                       "--json"], work / "out-start", rep)
            print(f"  start-up alone (gputriage logs EMPTY --json): {st_wall:.2f} s")
            if args.analyze:
                an_argv = [sys.executable, "-m", "gputriage", "analyze", str(log), "--json"]
                an_wall, an_rss, _, an_rc = _timed(an_argv, work / "out-analyze", rep)
                an_tree = _tree_peak(an_argv, work / "out-analyze")
                print(f"gputriage analyze --json: {an_wall:.2f} s, {size_mb / an_wall:.0f} "
                      f"MB/s, peak RSS {an_rss / 1024:.0f} MB (process tree "
                      f"{an_tree / 1024:.0f} MB), rc {an_rc}")
        for name, wall in (("grep -i -E 'nvidia|xid|nvrm' > file", grep_wall),
                           ("grep -ciE 'nvidia|xid|nvrm'", count_wall)):
            print(f"{name}: {wall:.2f} s, {size_mb / wall:.0f} MB/s; ratio gputriage/grep "
                  f"time {gt_wall / wall:.2f}")
        rows = [("this checkout", gt_wall, _cpu(gt_argv), gt_tree,
                 (work / "out").stat().st_size)]
        if base is not None:
            rows.append((f"--baseline {args.baseline}", b_wall, _cpu(gt_argv, base), b_tree,
                         (work / "out-base").stat().st_size))
        _goal_table(profile, size_mb, (grep_wall, _cpu(grep_argv)), rows, label)
        _per_event(log, special, gt_wall, size, quiet_rate, rep, work)
        if shutil.which("rg"):
            rg_wall, _, _, _ = _timed(["rg", "-i", "nvidia|xid|nvrm", str(log)], work / "out3",
                                      rep)
            print(f"rg -i: {rg_wall:.2f} s, {size_mb / rg_wall:.0f} MB/s")
        if args.parts:
            for who, src in (("", None), (f" (--baseline {args.baseline})", args.baseline)):
                if who and not src:
                    continue
                env = {**os.environ, "PYTHONPATH": str(src or REPO / "src")}
                parts = subprocess.run([sys.executable, str(REPO / "benchmarks" / "scan_parts.py"),
                                        str(log)], env=env, capture_output=True, text=True,
                                       check=True).stdout
                print(f"  worker{who}: {parts.strip()}")
        if not args.no_engines:
            _engines(log, rep)
        shutil.rmtree(work, ignore_errors=True)
        return gt_wall / size
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _goal_table(profile: str, size_mb: float, grep: tuple[float, float],
                rows: list[tuple[str, float, float, int, int]], label: str) -> None:
    """Print the ratios to grep side by side (the same run), with peak memory and output
    size, against issue 33's goal for the profile (met or not, by wall time; the CPU
    seconds are what a loaded machine disturbs least)."""
    goal = GOALS[profile]
    grep_wall, grep_cpu = grep
    print(f"-- goal ({profile}, measured at 1 GB on an idle 2-core machine): {label} "
          f"<= {goal:.1f}x grep -iE 'nvidia|xid|nvrm' > file; peak memory < "
          f"{MEMORY_GOAL_MB} MB (storm, 5 GB)")
    print(f"   {'gputriage':<34} {'wall s':>7} {'x grep':>7} {'goal':>5} {'met':>4} "
          f"{'cpu s':>6} {'x grep':>7} {'peak MB':>8} {'output B':>9}")
    for name, wall, cpu, tree_kib, out_bytes in rows:
        ratio = wall / grep_wall
        met = "yes" if ratio <= goal else "no"
        print(f"   {name:<34} {wall:7.2f} {ratio:7.2f} {goal:5.1f} {met:>4} {cpu:6.2f} "
              f"{cpu / grep_cpu:7.2f} {tree_kib / 1024:8.0f} {out_bytes:9d}")
    print(f"   {'grep (same run)':<34} {grep_wall:7.2f} {1.0:7.2f} {'':>10} {grep_cpu:6.2f} "
          f"{1.0:7.2f}   ({size_mb:.0f} MB input; "
          f"{'the goal is set for 1 GB' if size_mb < 900 else 'the size of the goal'})")
    if rows[0][3] / 1024 >= MEMORY_GOAL_MB:
        print(f"   peak memory goal (< {MEMORY_GOAL_MB} MB): NOT met")


def _per_event(log: Path, special: int, wall: float, size: int, quiet_rate: float | None,
               rep: int, work: Path) -> None:
    """Print µs per line of the profile's kind: from the quiet profile's time per byte
    when it ran, and directly (the scan of a file of the log's first 100,000 anchor
    lines, less the scan of an empty file, per line)."""
    if quiet_rate is not None and special > 0:
        extra = wall - quiet_rate * size
        print(f"  µs per line of the profile's kind (time beyond the quiet profile's per "
              f"byte, over {special} lines): {extra / special * 1e6:.1f}")
    events = _anchor_lines(log, work / "anchor-lines.log")  # (not beside the log)
    with events.open("rb") as fh:
        n = sum(1 for _ in fh)
    if n:
        empty = work / "empty-scan.log"
        empty.write_bytes(b"")
        full, _, _, _ = _timed([sys.executable, "-c", _SCAN_SNIPPET, str(events)],
                               work / "out-ev", rep)
        base, _, _, _ = _timed([sys.executable, "-c", _SCAN_SNIPPET, str(empty)],
                               work / "out-ev0", rep)
        print(f"  µs per anchor line, direct (scan_paths of the first {n} anchor lines "
              f"alone, less start-up): {(full - base) / n * 1e6:.1f}")
    events.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quiet", choices=(*PROFILES, "all"),
                        help="the log's mix (default quiet; all: each in turn)")
    parser.add_argument("--format", default="short-iso", choices=(*FORMATS, "all"),
                        help="the generated log's line format (default short-iso; all: each "
                        "in turn, the goals being the same in every one)")
    parser.add_argument("--size", default="1GB", help="log size to generate (e.g. 1GB, 5GB)")
    parser.add_argument("--file", help="time this existing log instead of generating one")
    parser.add_argument("--keep", help="generate into this folder and keep the logs (a log "
                        "already there for the same profile, format and size is reused)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each command; the best time counts (default 3)")
    parser.add_argument("--analyze", action="store_true",
                        help="also time `gputriage analyze --json` of the log")
    parser.add_argument("--baseline", metavar="SRC",
                        help="also time gputriage imported from this source tree (another "
                        "checkout's src/) in the same run: before and after side by side")
    parser.add_argument("--no-engines", action="store_true",
                        help="skip timing the anchor search alone per engine")
    parser.add_argument("--parts", action="store_true",
                        help="also where a worker's CPU time goes, block by block "
                        "(benchmarks/scan_parts.py), for this tree and --baseline")
    args = parser.parse_args()
    if args.format == "all" and args.file:
        parser.error("--format all generates a log of each format: not with --file")
    sys.path.insert(0, str(REPO / "src"))

    profiles = PROFILES if args.profile == "all" else (args.profile,)
    formats = FORMATS if args.format == "all" else (args.format,)
    # compiled Hyperscan databases kept for this run alone: each tree's first run compiles
    # them, its next runs load them, as a node's runs after its first do
    cache = Path(tempfile.mkdtemp(prefix="gt-logscan-hs-"))
    os.environ["GPUTRIAGE_CACHE_DIR"] = str(cache)
    print(f"compiled Hyperscan databases: kept in {cache} (the first run of each tree "
          "compiles them, its next runs load them)")
    # and the bytecode, as an installed package has it (where PYTHONDONTWRITEBYTECODE is
    # set, every run would compile the modules changed since their last bytecode, or all
    # of them in a fresh checkout): written by each profile's warm-up run of each tree
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache / "pycache")
    try:
        for fmt in formats:
            args.format = fmt
            quiet_rate = None
            for profile in profiles:
                rate = _run_profile(args, profile, quiet_rate)
                if profile == "quiet":
                    quiet_rate = rate
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

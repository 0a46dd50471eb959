"""Kernel-log scanning throughput, side by side with the on-call's grep.

Generates a kernel log in journalctl short-iso format (default 1 GB, about
0.1 % NVIDIA lines -- Xid, NVRM, nvidia-nvswitch SXid, mlx5 -- among ordinary
usb / ext4 / audit / systemd / TCP lines) in a temporary folder, then times:

  * ``python -m gputriage logs FILE --json > out`` (when the ``logs`` command
    is not available yet: ``python -c`` calling ``gputriage.logscan.scan_paths``,
    and the report says so);
  * ``python -m gputriage analyze FILE --json > out`` (a large kernel log is read
    whole by the same streaming scanner; its peak RSS must stay near the ``logs`` one);
  * ``grep -i -E 'nvidia|xid|nvrm' FILE > out2`` (output to a file: GNU grep
    stops at the first match when its output is /dev/null);

and prints both wall times (best of ``--repeat`` runs: the figure least disturbed
by other load), throughputs (MB/s), the ratio and the peak RSS of the gputriage
run: the largest single process (``getrusage(RUSAGE_CHILDREN)``, measured in a
wrapper child so that grep's figure does not mix in) and the largest summed
memory of its process tree (proportional set sizes, so that pages forked
workers share count once; sampled from /proc every 50 ms: large plain files
are searched by worker processes, which one process's figure leaves out).

Usage: python benchmarks/log_scan.py [--size 1GB] [--keep DIR] [--file LOG] [--repeat N]
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


def generate(path: Path, size: int, seed: int = 7) -> int:
    """Write about ``size`` bytes of log to ``path``; returns the bytes written."""
    rng = random.Random(seed)
    t0 = 1_724_990_000
    written = 0
    second = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < size:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(t0 + second))
            second += 1
            out = []
            for _ in range(2000):
                tpl = rng.choice(_NVIDIA) if rng.random() < 0.001 else rng.choice(_ORDINARY)
                msg = tpl.format(b=rng.randint(1, 4), p=rng.randint(0, 7), n=rng.randint(0, 99),
                                 m=rng.randint(1000, 99999), t=t0 + second,
                                 bus=rng.choice((0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba,
                                                 0xdb)))
                out.append(f"{stamp} gpu-node-17 kernel: {msg}\n")
            chunk = "".join(out)
            fh.write(chunk)
            written += len(chunk)
    return written


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
with open(sys.argv[1], "wb") as out:
    proc = subprocess.Popen(sys.argv[2:], stdout=out)
    def watch():
        while proc.poll() is None:
            if os.path.isdir("/proc"):
                peak_tree[0] = max(peak_tree[0], tree_rss(proc.pid))
            time.sleep(0.05)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    rc = proc.wait()
wall = time.perf_counter() - start
t.join()
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"{wall} {peak} {rc} {peak_tree[0]}")
"""


_SCAN_SNIPPET = (
    "import sys, json; from gputriage.logscan import scan_paths; s = scan_paths(sys.argv[1:]); "
    "json.dump({'events': len(s.events), 'lines': s.lines, 'boots': len(s.boots), "
    "'formats': s.formats, 'problems': s.problems}, sys.stdout)"
)


def _timed(argv: list[str], out: Path, repeat: int = 1) -> tuple[float, int, int, int]:
    """Best wall seconds of ``repeat`` runs of one command (run in a wrapper child), the
    largest peak RSS of one process (KiB), the largest summed memory (PSS) of its
    process tree (KiB, sampled every 50 ms; worker processes count here) and the last rc."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "LC_ALL": "C"}
    best, peak, tree, rc = float("inf"), 0, 0, 0
    for _ in range(max(1, repeat)):
        proc = subprocess.run([sys.executable, "-c", _WRAPPER, str(out), *argv], env=env,
                              capture_output=True, text=True, check=True)
        wall, one, code, summed = proc.stdout.split()
        best, peak = min(best, float(wall)), max(peak, int(one))
        tree, rc = max(tree, int(summed)), int(code)
    return best, peak, tree, rc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1GB", help="log size to generate (e.g. 1GB, 5GB)")
    parser.add_argument("--file", help="time this existing log instead of generating one")
    parser.add_argument("--keep", help="generate into this folder and keep the log")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each command; the best time counts (default 3)")
    args = parser.parse_args()

    tmp = None
    if args.file:
        log = Path(args.file)
    else:
        folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gt-logscan-"))
        tmp = None if args.keep else folder
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "kern.log"
        start = time.perf_counter()
        generate(log, _parse_size(args.size))
        print(f"generated {log.stat().st_size / 1e6:.0f} MB in "
              f"{time.perf_counter() - start:.1f} s")
    try:
        size_mb = log.stat().st_size / 1e6
        # warm the page cache so that neither side pays the first read
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=False)
        work = log.parent
        scan_argv = [sys.executable, "-c", _SCAN_SNIPPET, str(log)]
        if _logs_command_available():
            label = "gputriage logs --json"
            gt_argv = [sys.executable, "-m", "gputriage", "logs", str(log), "--json"]
        else:
            label = "scan_paths (python -c; the `logs` command does not exist yet)"
            gt_argv = scan_argv
        rep = args.repeat
        gt_wall, gt_rss, gt_tree, gt_rc = _timed(gt_argv, work / "out", rep)
        grep_wall, _, _, _ = _timed(["grep", "-i", "-E", "nvidia|xid|nvrm", str(log)],
                                    work / "out2", rep)
        print(f"input: {log} ({size_mb:.0f} MB); {os.cpu_count()} CPUs; best of {rep} runs")
        print(f"gputriage: {label}: {gt_wall:.2f} s, {size_mb / gt_wall:.0f} MB/s, "
              f"peak RSS {gt_rss / 1024:.0f} MB (process tree {gt_tree / 1024:.0f} MB), "
              f"rc {gt_rc}")
        if gt_argv is not scan_argv:
            sc_wall, sc_rss, sc_tree, _ = _timed(scan_argv, work / "out-scan", rep)
            print(f"  of which the scan alone (gputriage.logscan.scan_paths): {sc_wall:.2f} s, "
                  f"{size_mb / sc_wall:.0f} MB/s, peak RSS {sc_rss / 1024:.0f} MB "
                  f"(process tree {sc_tree / 1024:.0f} MB)")
            empty = work / "empty.log"
            empty.write_bytes(b"")
            st_wall, _, _, _ = _timed([sys.executable, "-m", "gputriage", "logs", str(empty),
                                       "--json"], work / "out-start", rep)
            print(f"  start-up alone (gputriage logs EMPTY --json): {st_wall:.2f} s")
            an_wall, an_rss, an_tree, an_rc = _timed(
                [sys.executable, "-m", "gputriage", "analyze", str(log), "--json"],
                work / "out-analyze", rep)
            print(f"gputriage analyze --json: {an_wall:.2f} s, {size_mb / an_wall:.0f} MB/s, "
                  f"peak RSS {an_rss / 1024:.0f} MB (process tree {an_tree / 1024:.0f} MB), "
                  f"rc {an_rc}")
        print(f"grep -i -E 'nvidia|xid|nvrm': {grep_wall:.2f} s, "
              f"{size_mb / grep_wall:.0f} MB/s")
        print(f"ratio gputriage/grep time: {gt_wall / grep_wall:.2f} "
              f"(throughput {grep_wall / gt_wall:.2f}x grep's)")
        if shutil.which("rg"):
            rg_wall, _, _, _ = _timed(["rg", "-i", "nvidia|xid|nvrm", str(log)], work / "out3",
                                      rep)
            print(f"rg -i: {rg_wall:.2f} s, {size_mb / rg_wall:.0f} MB/s")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

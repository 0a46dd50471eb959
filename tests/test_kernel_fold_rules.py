"""Kernel-log rules over storms folded while scanning: the findings of a folded storm are
those of the same log scanned whole (``KEEP`` made huge), with the occurrences counted,
dated and attributed the same; only the evidence lines elided may differ."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

import pytest
from golden import flat
from hostkit import snap

from gputriage.engine.analysis import analyze
from gputriage.facts.window import LogWindow
from gputriage.logscan import scan_text
from gputriage.logscan.events import DriverEvent
from gputriage.model import Action, Blame, Finding, Severity, Status
from gputriage.parsers import kernel_fold
from gputriage.parsers.kernel_fold import fold_key
from gputriage.rules.kernel_common import EVIDENCE_HEAD, EVIDENCE_TAIL, _evidence, latest_of

T0 = datetime(2024, 5, 14, 8, 0, 0, tzinfo=timezone.utc)
GPU, GPU2, HCA = "0000:18:00", "0000:9a:00", "0000:53:00.0"
FAULT13 = ("Graphics SM Warp Exception on (GPC {n}, TPC 1, SM 0): Out Of Range Address")
FAULT31 = ("Ch 0000000{n}, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted "
           "@ 0x7f8e_4d{n:06x}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")


def log(lines: Iterable[tuple[float, str]]) -> str:
    """A kernel log (journalctl short-iso form) of (seconds after T0, message)."""
    out = []
    for t, msg in lines:
        when = (T0 + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%S.%f+0000")
        out.append(f"{when} node kernel: {msg}\n")
    return "".join(out)


def xid(code: int, msg: str, bus: str = GPU, pid: int | None = None,
        name: str = "python3") -> str:
    who = f"pid={pid}, name={name}, " if pid is not None else ""
    return f"NVRM: Xid (PCI:{bus}): {code}, {who}{msg}"


def summary(f: Finding) -> tuple:
    occ = f.occurrences
    return (f.id, f.severity, f.action, f.blame, f.title, f.explanation, f.status,
            f.scope.pci_bus_id, f.scope.name,
            (occ.count, occ.first, occ.last, occ.current_boot) if occ else None,
            tuple(e.note for e in f.evidence))


def results(text: str, monkeypatch, window: LogWindow | None = None
            ) -> tuple[list[Finding], list[Finding]]:
    """(findings of ``text`` with storms folded, findings with nothing folded); checks
    that the folded scan did fold, and kept at most KEEP + 1 events per fold key."""
    folded = scan_text(text).events
    assert any(ev.count > 1 for ev in folded)
    per_key = Counter((ev.boot, fold_key(ev)) for ev in folded)
    resets = sum(1 for ev in folded if ev.kind == "driver-load" or (
        ev.kind == "xid" and ev.details.get("code") == "154"))
    assert max(per_key.values()) <= (kernel_fold.KEEP + 1) * (resets + 1)
    got = list(flat(analyze(snap(live=False, kernel_log=text), window).findings))
    with monkeypatch.context() as m:
        m.setattr(kernel_fold, "KEEP", 10**9)
        events = scan_text(text).events
        assert all(ev.count == 1 for ev in events)
        assert sum(ev.count for ev in folded) == len(events)
        whole = list(flat(analyze(snap(live=False, kernel_log=text), window).findings))
    return got, whole


def kernel(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.id.startswith(("xid.", "sxid.", "kernel."))]


def same(text: str, monkeypatch, window: LogWindow | None = None) -> list[Finding]:
    """The folded findings, after checking they are the unfolded ones."""
    got, whole = results(text, monkeypatch, window)
    assert sorted(map(summary, got), key=repr) == sorted(map(summary, whole), key=repr)
    assert kernel(got)
    for f in kernel(got):
        _check_evidence(f)
    return got


def _check_evidence(f: Finding) -> None:
    """Bounded evidence whose elided count adds up to the occurrences."""
    ev = f.evidence[0]
    if (f.occurrences is None or f.occurrences.count <= EVIDENCE_HEAD + EVIDENCE_TAIL
            or f.also or f.status is Status.PAST):  # merged, or the reset's line added
        return
    more = [int(m.group(1)) for line in ev.lines
            if (m := re.match(r"\.\.\. \((\d+) more occurrences\)$", line))]
    assert len(more) == 1, ev.lines
    shown = len(ev.lines) - 1 - sum(1 for line in ev.lines if "more lines of" in line)
    assert shown <= EVIDENCE_HEAD + EVIDENCE_TAIL
    assert shown + more[0] == f.occurrences.count, ev.lines


def find(findings: list[Finding], fid: str, status: Status = Status.CURRENT) -> Finding:
    hits = [f for f in findings if f.id == fid and f.status is status]
    assert len(hits) == 1, [(f.id, f.status, f.title) for f in findings]
    return hits[0]


# --- application faults across processes --------------------------------------------------

@pytest.mark.parametrize(("pids", "severity", "blame"), [
    (1, Severity.WARNING, Blame.JOB), (2, Severity.WARNING, Blame.NODE),
    (3, Severity.WARNING, Blame.NODE)])  # RESTART_APP: never a drain
def test_xid13_storm_from_one_or_more_processes(monkeypatch, pids, severity, blame):
    names = ("python3", "trainer", "vllm")
    text = log((i * 0.5, xid(13, FAULT13.format(n=i % 7), pid=1000 + i % pids,
                             name=names[i % pids])) for i in range(500))
    f = find(same(text, monkeypatch), "xid.13")
    assert (f.severity, f.blame, f.occurrences.count) == (severity, blame, 500)
    assert f.occurrences.last == (T0 + timedelta(seconds=249.5)).isoformat()
    assert "500 events" in f.title


def test_processes_beyond_the_storm_bound_still_suspect_the_gpu(monkeypatch):
    """300 pids of 3 programs: the folded event names 64, the verdict is the same."""
    names = ("python3", "trainer", "vllm")
    text = log((i, xid(13, FAULT13.format(n=0), pid=5000 + i, name=names[i % 3]))
               for i in range(300))
    got, whole = results(text, monkeypatch)
    f, w = find(got, "xid.13"), find(whole, "xid.13")
    assert (f.severity, f.action, f.blame, f.title) == (w.severity, w.action, w.blame, w.title)
    assert f.severity is Severity.WARNING and f.blame is Blame.NODE
    assert "at least 128 different processes of 3 programs" in f.explanation
    assert "300 different processes of 3 programs" in w.explanation


def test_one_program_restarted_under_200_pids_is_a_crash_loop(monkeypatch):
    """300 Xid 31 of one program under 200 pids: one job crash-looping either way; the
    folded storm names only some of the pids, and says so."""
    text = log((i, xid(31, FAULT31.format(n=i % 5), pid=7000 + i * 2 // 3, name="train.py"))
               for i in range(300))
    got, whole = results(text, monkeypatch)
    f, w = find(got, "xid.31"), find(whole, "xid.31")
    assert (f.severity, f.action, f.blame) == (w.severity, w.action, w.blame)
    assert (f.blame, f.action) == (Blame.JOB, Action.RESTART_JOB)
    assert w.title.endswith("one job (train.py) crash-looping: 200 restarts (300 events)")
    m = re.search(r"crash-looping: at least (\d+) restarts \(300 events\)$", f.title)
    assert m and 64 < int(m.group(1)) < 200, f.title
    assert "pids 7000, 7001, 7002, 7003, 7004, 7005, ..." in f.explanation
    assert f.occurrences == w.occurrences


# --- Xid 45 as a consequence, 119 repeating ------------------------------------------------

def test_xid13_then_45_pairs_fold_as_follow_ons(monkeypatch):
    lines = []
    for i in range(400):
        lines += [(i * 10.0, xid(13, FAULT13.format(n=1), pid=42)),
                  (i * 10.0 + 1, xid(45, f"Ch 000000{i % 90:02d}", pid=42))]
    got = same(log(lines), monkeypatch)
    f45, f13 = find(got, "xid.45"), find(got, "xid.13")
    assert f45.title.endswith("follow-on of Xid 13 (400 events)")
    assert (f45.severity, f45.action) == (Severity.INFO, Action.NONE)
    assert "followed by 400 Xid 45" in f13.explanation


def test_xid45_storm_half_of_it_following_another_xid(monkeypatch):
    """50 Xid 45 right after an Xid 13, then 250 long after it: the catalog's verdict,
    with how many follow another Xid."""
    lines = [(0.0, xid(13, FAULT13.format(n=1), pid=42))]
    lines += [(1 + i * 0.1, xid(45, "Ch 00000010", pid=42)) for i in range(50)]
    lines += [(1000 + i, xid(45, "Ch 00000010", pid=42)) for i in range(250)]
    f = find(same(log(lines), monkeypatch), "xid.45")
    assert "50 of them follow another Xid." in f.explanation


def test_xid45_storm_blamed_on_earlier_45s_only(monkeypatch):
    text = log((i, xid(45, "Ch 00000010 caused by previous Xid 45", pid=7)) for i in range(300))
    f = find(same(text, monkeypatch), "xid.45")
    assert "what began them is not in this log (300 events)" in f.title


def test_xid119_storm_escalates(monkeypatch):
    msg = ("Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
           "(GSP_RM_CONTROL) (0x20800a4c 0x4).")
    text = log((i * 30.0, xid(119, msg, pid=1234)) for i in range(200))
    f = find(same(text, monkeypatch), "xid.119")
    assert f.action is Action.DRAIN_AND_REPAIR and "repeating (200 events)" in f.title
    assert "timed out 200 times" in f.explanation


def test_storms_on_several_gpus_are_judged_per_gpu(monkeypatch):
    buses = [f"0000:{b:02x}:00" for b in (0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb)]
    text = log((i * 0.1, xid((13, 31, 43)[i % 3], FAULT13.format(n=i % 4), bus=buses[i % 8],
                             pid=100 + i % 5, name=f"job{i % 5}")) for i in range(2400))
    got = [f for f in same(text, monkeypatch) if f.id.startswith("xid.")]
    assert len(got) == 3 and all(len(f.scopes) == 8 for f in got)  # one per code, 8 GPUs


# --- resets in the middle of a storm -------------------------------------------------------

def test_a_reset_in_the_middle_of_a_storm_ends_its_first_half(monkeypatch):
    before = [(i, xid(13, FAULT13.format(n=1), pid=300 + i % 3, name=f"p{i % 3}"))
              for i in range(300)]
    reset = [(400.0, xid(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to "
                              "0x0 (None)"))]
    after = [(500 + i, xid(13, FAULT13.format(n=1), pid=900)) for i in range(300)]
    got = same(log(before + reset + after), monkeypatch)
    old, now = find(got, "xid.13", Status.PAST), find(got, "xid.13")
    assert old.occurrences.count == 300 and old.severity is Severity.INFO
    assert old.occurrences.last == (T0 + timedelta(seconds=299)).isoformat()
    assert now.occurrences.count == 300 and now.blame is Blame.JOB
    assert now.occurrences.first == (T0 + timedelta(seconds=500)).isoformat()


def test_a_driver_load_in_the_middle_of_a_storm(monkeypatch):
    msg = "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76."
    before = [(i * 2.0, xid(119, msg)) for i in range(150)]
    load = [(600.0, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 "
                    "18:56:32 UTC 2023")]
    after = [(700 + i * 2.0, xid(119, msg)) for i in range(100)]
    got = same(log(before + load + after), monkeypatch)
    assert find(got, "xid.119", Status.PAST).occurrences.count == 150
    assert find(got, "xid.119").occurrences.count == 100


# --- host events --------------------------------------------------------------------------

def test_aer_storm_on_a_gpu_and_on_a_port(monkeypatch):
    lines = []
    for i in range(1000):
        lines.append((i * 0.01, "pcieport 0000:17:01.0: AER: Corrected error received: "
                                "0000:18:00.0" if i % 2 else
                      "pcieport 0000:c0:01.1: PCIe Bus Error: severity=Corrected, "
                      "type=Physical Layer, (Receiver ID)"))
    lines.append((20.0, xid(13, FAULT13.format(n=1), pid=1)))
    got = same(log(lines), monkeypatch)
    counts = sorted(f.occurrences.count for f in got if f.id == "kernel.pcie-aer")
    assert counts == [500, 500]
    assert all(f.severity is Severity.WARNING for f in got if f.id == "kernel.pcie-aer")


def test_segfault_storm_in_a_gpu_library(monkeypatch):
    text = log((i, f"{('python', 'torchrun')[i % 2]}[{800 + i}]: segfault at 0 ip "
                   f"00007f00000{i:05x} sp 00007ffc00000000 error 4 in "
                   "libcuda.so.1[7f0000000000+100000]") for i in range(200))
    f = find(same(text, monkeypatch), "kernel.segfault-in-gpu-library")
    assert f.title == "process crashed inside libcuda.so.1 (python, torchrun) (200 events)"


def test_hung_task_storm_in_nvidia_code(monkeypatch):
    lines = []
    for i in range(120):
        lines += [(i * 121.0, f"INFO: task python:{4000 + i} blocked for more than 120 seconds."),
                  (i * 121.0, "Call Trace:"),
                  (i * 121.0, " os_acquire_mutex+0x1/0x2 [nvidia]")]
    f = find(same(log(lines), monkeypatch), "kernel.hung-task-in-nvidia")
    assert f.occurrences.count == 120 and f.action is Action.REBOOT_NODE


def link_storm(flaps: int, *, end_down: bool = False, both_lines: bool = False
               ) -> list[tuple[float, str]]:
    """A port that comes up at boot, then goes down and up ``flaps`` times."""
    def state(t: float, up: bool) -> list[tuple[float, str]]:
        out = [(t, f"mlx5_core {HCA} ibp83s0: Link {'up' if up else 'down'}")]
        if both_lines:
            out.append((t, f"mlx5_core {HCA} mlx5_0: Port: 1 Link {'ACTIVE' if up else 'DOWN'}"))
        return out

    lines = state(0.0, True)
    for i in range(flaps):
        lines += state(10.0 + i * 10, False)
        if not (end_down and i == flaps - 1):
            lines += state(15.0 + i * 10, True)
    return lines


@pytest.mark.parametrize("both_lines", [False, True])
def test_link_flapping_300_times(monkeypatch, both_lines):
    f = find(same(log(link_storm(300, both_lines=both_lines)), monkeypatch), "kernel.link-flaps")
    assert "down 300 times" in f.title and "up again" in f.title
    assert f.title.endswith(f"{(T0 + timedelta(seconds=10)).isoformat()} to "
                            f"{(T0 + timedelta(seconds=3005)).isoformat()}; up again)")


@pytest.mark.parametrize("both_lines", [False, True])
def test_link_flapping_then_down_for_good(monkeypatch, both_lines):
    text = log(link_storm(300, end_down=True, both_lines=both_lines))
    f = find(same(text, monkeypatch), "kernel.link-down")
    assert "went down 300 times" in f.title and "still down" in f.title
    assert f.severity is Severity.CRITICAL


def test_link_down_from_boot_and_flapping_later(monkeypatch):
    """Down at boot (dropped: training), then 200 flaps."""
    lines = [(0.0, f"mlx5_core {HCA} ibp83s0: Link down")] + link_storm(200)[0:]
    f = find(same(log(lines), monkeypatch), "kernel.link-flaps")
    assert "down 200 times" in f.title


# --- evidence, window ---------------------------------------------------------------------

def _folded_event(n: int, t0: float, t1: float) -> DriverEvent:
    """A storm of ``n`` Xid 13 lines from t0 to t1 as the scan folds it."""
    lines = [(t0 + (t1 - t0) * i / (n - 1), xid(13, FAULT13.format(n=1), pid=1))
             for i in range(n)]
    events = scan_text(log(lines)).events
    assert len(events) == kernel_fold.KEEP + 1
    return events[-1]


def test_evidence_of_a_folded_storm_ends_with_its_latest_line():
    events = scan_text(log((i, xid(13, FAULT13.format(n=1), pid=1)) for i in range(500))).events
    ev = _evidence(events)
    assert ev.note == "500 occurrences"
    assert ev.lines[:EVIDENCE_HEAD] == tuple(e.line for e in events[:EVIDENCE_HEAD])
    assert ev.lines[EVIDENCE_HEAD] == f"... ({500 - EVIDENCE_HEAD - 1} more occurrences)"
    assert ev.lines[-1] == events[-1].latest.line and "08:08:19" in ev.lines[-1]
    assert len(ev.lines) == EVIDENCE_HEAD + 2


def test_latest_of_a_group_may_be_a_folded_event_s_latest():
    """Individual events listed after a folded one may be older than its latest."""
    lines = [(float(i), xid(13, FAULT13.format(n=1), pid=1)) for i in range(100)]
    lines.append((200.0, xid(13, FAULT13.format(n=1), bus=GPU2, pid=1)))
    lines.append((300.0, xid(13, FAULT13.format(n=1), pid=1)))
    events = scan_text(log(sorted(lines))).events
    assert events[-1].bus_id == "0000:9a:00.0"
    assert latest_of(events).time == T0 + timedelta(seconds=300)
    ev = _evidence(events)  # the occurrences before the latest are not all known
    assert ev.lines[-2:] == ("... (94 more occurrences)", events[-2].latest.line)


def test_window_keeps_a_folded_storm_whose_latest_is_inside():
    storm = _folded_event(300, 0.0, 299.0)
    since = LogWindow(since=T0 + timedelta(seconds=200))
    assert since.admits(storm)  # straddles --since: kept whole
    assert not LogWindow(since=T0 + timedelta(seconds=300)).admits(storm)
    assert LogWindow(since=T0 + timedelta(seconds=300)).excluded([storm]) == [
        "--since 2024-05-14T08:05:00+00:00: 236 kernel-log events before "
        "2024-05-14T08:05Z not judged"]
    assert LogWindow(boot=-1).excluded([storm])[0].startswith("--boot -1: 236 kernel-log")


def test_corrected_memory_error_storm_counts_the_errors_each_line_reports(monkeypatch):
    text = log((i, f"EDAC MC1: 3 CE memory read error on DIMM_B2 (channel:0 slot:1 "
                   f"page:0x{i:x})") for i in range(200))
    f = find(same(text, monkeypatch), "kernel.host-memory-error")
    assert "(600 events)" in f.title and f.occurrences.count == 200


@pytest.mark.parametrize(("filler", "incidents"), [(45, 150), (0, 1)])
def test_gsp_dump_storm_counts_incidents(monkeypatch, filler, incidents):
    """GSP timeout banners without an Xid 119 line: a banner and its RPC history dump
    are one incident, and so are dumps that follow each other closely. A folded run of
    dumps is counted in incidents at the rate of the dumps before it: an estimate."""
    lines = []
    for i in range(150):
        lines += [(i * 60.0, "NVRM: _kgspLogXid119: ****** GSP Timeout ******"),
                  (i * 60.0 + 1, "NVRM: GPU0 RPC history (CPU -> GSP):")]
        lines += [(i * 60.0 + 2, f"systemd[1]: routine line {k}") for k in range(filler)]
    got, whole = results(log(lines), monkeypatch)
    f, w = find(got, "kernel.gsp-rpc-timeout"), find(whole, "kernel.gsp-rpc-timeout")
    assert (f.severity, f.action, f.occurrences) == (w.severity, w.action, w.occurrences)
    assert w.title.endswith(f"({incidents} event{'s' if incidents > 1 else ''})")
    m = re.search(r"\((\d+) events?\)$", f.title)
    assert m and abs(int(m.group(1)) - incidents) <= incidents // 100, f.title

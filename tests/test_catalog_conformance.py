"""The Xid and SXid catalogs never contradict NVIDIA's resolution buckets.

NVIDIA's Xid catalog gives each code an immediate action ("Resolution Bucket (Immediate
Action)": ``nvidia_bucket``) and an investigatory one (``nvidia_followup``); NVSentinel's
SXid mapping gives each NVSwitch code an action bucket. This project's severity, action
and blame may be more precise than the bucket, never opposite to it: a code NVIDIA says
to ignore or to answer by restarting the application never drains a node; a code that
only accompanies another ("follow other Xid", "informational only") never drains on its
own; a code whose recovery is a GPU reset or a reboot is never the job's fault; a code
whose fix is a software or firmware update is the node's configuration, never a hardware
repair. Each test names every row that breaks its rule.

The kernel-log rules read these rows and refine them with the GPU's context; the last
tests check that the refinements keep to the same rules (application-fault Xids never
drain however many processes raise them, on one node or many).
"""

from __future__ import annotations

import re

import pytest
from kernel_kit import A, B, judge, xid

from gputriage.knowledge.xid import SxidInfo, XidInfo, all_sxids, all_xids
from gputriage.model import DRAINING_ACTIONS, Action, Blame, Severity

# NVIDIA's immediate actions that never take a node out of service.
NEVER_DRAIN = frozenset({"IGNORE", "RESTART_APP", "WORKFLOW_XID_45", "XID_154"})
# Immediate actions that recover the GPU or the node: the node's side, never the job's.
NODE_RECOVERY = frozenset({"RESET_GPU", "RESTART_BM", "RESTART_VM", "CHECK_MECHANICALS",
                           "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR"})
# "Update software / firmware": the node's configuration, never a hardware repair.
SOFTWARE = frozenset({"UPDATE_SWFW"})
# An investigatory action saying the code only accompanies another one.
ACCOMPANIES = re.compile(r"follow other xid|informational only regarding another",
                         re.IGNORECASE)
# Every bucket the catalog may use (a new one must be placed in a rule above, or here).
OTHER_BUCKETS = frozenset({"CONTACT_SUPPORT", "CHECK_UVM"})
HARDWARE_REPAIR = frozenset({Action.DRAIN_AND_REPAIR, Action.PLAN_REPAIR})


def xid_contradictions(x: XidInfo) -> list[str]:
    """Why row ``x`` contradicts NVIDIA's buckets (empty when it does not)."""
    why: list[str] = []
    bucket = x.nvidia_bucket
    drains = x.action in DRAINING_ACTIONS
    if bucket is not None and bucket not in (NEVER_DRAIN | NODE_RECOVERY | SOFTWARE
                                             | OTHER_BUCKETS):
        why.append(f"bucket {bucket} is not placed in any conformance rule")
    if bucket in NEVER_DRAIN and (drains or x.severity is Severity.CRITICAL):
        why.append(f"{bucket} never drains, but the row says {x.severity.value} "
                   f"{x.action.value}")
    if x.nvidia_followup and ACCOMPANIES.search(x.nvidia_followup) and drains:
        why.append(f"'{x.nvidia_followup}' only accompanies another Xid: it never drains "
                   "on its own")
    if bucket in NODE_RECOVERY:
        if x.blame.side == "job":
            why.append(f"{bucket} recovers the GPU or node: not the job's fault "
                       f"({x.blame.value})")
        if not (drains or x.action is Action.PLAN_REPAIR):
            why.append(f"{bucket} needs a GPU or node recovery, but the action is "
                       f"{x.action.value}")
    if bucket in SOFTWARE and (x.blame is not Blame.CONFIG
                               or x.action not in (Action.FIX_SOFTWARE, Action.FIX_CONFIG)):
        why.append(f"{bucket} is a software or firmware update: blame config and "
                   f"fix-software/fix-config, not {x.blame.value} {x.action.value}")
    if bucket in OTHER_BUCKETS and x.blame.side == "job":
        why.append(f"{bucket} does not blame the job ({x.blame.value})")
    if drains and x.blame is not Blame.NODE:
        why.append(f"{x.action.value} takes the node out of service: it blames the node, "
                   f"not {x.blame.value}")
    return why


def sxid_contradictions(s: SxidInfo) -> list[str]:
    """Why SXid row ``s`` contradicts its NVIDIA action bucket (empty when it does not)."""
    why: list[str] = []
    drains = s.action in DRAINING_ACTIONS
    if s.bucket == "IGNORE":
        if drains or s.severity is Severity.CRITICAL or s.fatal:
            why.append(f"IGNORE never drains, but the row says {s.severity.value} "
                       f"{s.action.value}")
    elif s.bucket == "CHECK_FM_CONFIG":
        if s.blame is not Blame.CONFIG or s.action not in (Action.FIX_CONFIG,
                                                           Action.FIX_SOFTWARE):
            why.append("CHECK_FM_CONFIG is the fabric manager's configuration: blame config "
                       f"and fix-config, not {s.blame.value} {s.action.value}")
    elif s.bucket is not None:
        if s.blame is not Blame.NODE:
            why.append(f"{s.bucket} is the node's recovery: blame node, not {s.blame.value}")
        if not drains:
            why.append(f"{s.bucket} needs the fabric or GPU recovered, but the action is "
                       f"{s.action.value}")
    if s.action in HARDWARE_REPAIR and s.blame is Blame.CONFIG:
        why.append("a configuration fault is never a hardware repair")
    return why


def _report(rows: list[tuple[int, list[str]]]) -> str:
    return "\n".join(f"  {code}: {'; '.join(why)}" for code, why in rows)


def test_xid_rows_never_contradict_nvidia() -> None:
    bad = [(x.code, why) for x in all_xids() if (why := xid_contradictions(x))]
    assert not bad, f"{len(bad)} Xid row(s) contradict NVIDIA's catalog:\n{_report(bad)}"


def test_sxid_rows_never_contradict_nvidia() -> None:
    bad = [(s.code, why) for s in all_sxids() if (why := sxid_contradictions(s))]
    assert not bad, f"{len(bad)} SXid row(s) contradict NVIDIA's buckets:\n{_report(bad)}"


def test_the_rules_see_a_contradiction() -> None:
    """The checks fail on the rows they are there to catch (a check that cannot fail
    proves nothing)."""
    ignore = XidInfo(43, None, "m", (), "IGNORE", Action.RESET_GPU, Severity.CRITICAL,
                     Blame.NODE, "e", False)
    follow = XidInfo(45, None, "m", (), "WORKFLOW_XID_45", Action.DRAIN_AND_REPAIR,
                     Severity.CRITICAL, Blame.NODE, "e", False,
                     nvidia_followup="Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)")
    reset_job = XidInfo(109, None, "m", (), "RESET_GPU", Action.RESTART_JOB,
                        Severity.WARNING, Blame.JOB, "e", False)
    update = XidInfo(78, None, "m", (), "UPDATE_SWFW", Action.DRAIN_AND_REPAIR,
                     Severity.CRITICAL, Blame.NODE, "e", False)
    for row in (ignore, follow, reset_job, update):
        assert xid_contradictions(row), row.code
    fm = SxidInfo(1, None, "m", None, True, Action.DRAIN_AND_REPAIR, Severity.CRITICAL,
                  Blame.NODE, "e", bucket="CHECK_FM_CONFIG")
    quiet = SxidInfo(2, None, "m", None, True, Action.RESET_GPU, Severity.CRITICAL,
                     Blame.NODE, "e", bucket="IGNORE")
    assert sxid_contradictions(fm) and sxid_contradictions(quiet)


def test_accompanying_codes_are_recorded() -> None:
    """The catalog records which codes only accompany others (45, 154)."""
    followers = {x.code for x in all_xids()
                 if x.nvidia_followup and ACCOMPANIES.search(x.nvidia_followup)}
    assert {45, 154} <= followers


# --- the rules that read the rows keep to them ----------------------------------------

def _worst(findings) -> tuple[Severity, Action]:
    current = [f for f in findings if f.current]
    worst = max(current, key=lambda f: f.severity.rank)
    return worst.severity, worst.action


@pytest.mark.parametrize("code", [13, 31, 43])
@pytest.mark.parametrize("named", [True, False])
def test_application_faults_never_drain(code: int, named: bool) -> None:
    """Xid 13 / 31 / 43 from many processes on one GPU point at the GPU (a DCGM
    diagnostic at the next window), but NVIDIA's immediate action is RESTART_APP (43:
    IGNORE): never a drain, with or without process names."""
    events = [xid(code, A, pid=str(1000 + i), name=f"prog{i}" if named else None, t=i)
              for i in range(6)]
    severity, action = _worst(judge(events))
    assert action not in DRAINING_ACTIONS and severity is not Severity.CRITICAL


def test_one_jobs_faults_on_many_gpus_never_drain() -> None:
    """One job's crash raises Xid 31 and its Xid 45 teardowns on every GPU it used:
    not a node fault on any of them."""
    events = []
    for gpu, bus in enumerate((A, B)):
        events.append(xid(31, bus, pid=str(4000 + gpu), name="python", t=gpu))
        events += [xid(45, bus, pid=str(4000 + gpu), name="python", t=gpu + 0.5 + k / 10,
                       message="Ch 00000010, engmask 00000101")
                   for k in range(5)]
    found = judge(events)
    assert all(f.action not in DRAINING_ACTIONS for f in found), [
        (f.id, f.severity, f.action) for f in found]
    assert all(f.blame.side == "job" or f.severity.rank <= Severity.INFO.rank
               for f in found if f.current)


def test_xid45_storm_is_one_finding_per_gpu_counted() -> None:
    """672 Xid 45 teardowns on one GPU: one finding, counted, never a drain."""
    events = [xid(45, A, pid=str(7000 + i % 40), name="python", t=i * 15,
                  message="Ch 00000010, engmask 00000101") for i in range(672)]
    found = [f for f in judge(events) if f.id == "xid.45"]
    assert len(found) == 1
    assert "672" in found[0].title
    assert found[0].action not in DRAINING_ACTIONS


# --- across a fleet: one job's crash is no node's fault ----------------------------------

_MMU31 = ("Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
          "0x7f12_3c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")
_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


def _job_crash_dmesg(node: int) -> str:
    """A multi-node job's crash as one of its nodes logs it: every rank (one per GPU)
    takes an Xid 31, then the driver tears its channels down (Xid 43, 45)."""
    lines = []
    for rank, bus in enumerate(_BUSES):
        t = 5000.0 + node * 0.01 + rank * 0.002
        pid = 30000 + node * 100 + rank
        head = f"[{t:.6f}] NVRM: Xid (PCI:0000:{bus}:00): "
        lines.append(f"{head}31, pid={pid}, name=python3, {_MMU31}")
        lines.append(f"{head}43, pid={pid}, name=python3, Ch 00000010")
        lines += [f"[{t + 0.5 + k / 100:.6f}] NVRM: Xid (PCI:0000:{bus}:00): 45, pid={pid}, "
                  f"name=python3, Ch {16 + k:08x}" for k in range(3)]
    return "\n".join(lines) + "\n"


def _storm_dmesg(n: int) -> str:
    """``n`` Xid 45 teardowns on one GPU over three hours, from jobs that come and go."""
    return "\n".join(
        f"[{1000 + i * (10800 / n):.6f}] NVRM: Xid (PCI:0000:9a:00): 45, pid={8000 + i // 8}, "
        f"name=python3, Ch {i % 64:08x}" for i in range(n)) + "\n"


def _node_results(tmp_path, texts: dict[str, str]) -> list:
    from gputriage.engine.analysis import analyze
    from gputriage.fleet.report import record_from_result
    from gputriage.ingest import load_input
    from gputriage.results.document import to_json
    from gputriage.status import ExitStatus, exit_status

    records = []
    for name, text in texts.items():
        path = tmp_path / f"{name}.dmesg"
        path.write_text(text)
        result = analyze(load_input(str(path)))
        assert exit_status(result) is not ExitStatus.CRITICAL, (name, [
            (f.id, f.severity.value, f.action.value) for f in result.findings if f.current])
        assert not any(f.action in DRAINING_ACTIONS for f in result.findings), name
        records.append((result, record_from_result(to_json(result), name)))
    return records


def test_one_jobs_crash_on_many_nodes_drains_none_of_them(tmp_path) -> None:
    """One job's crash seen on 10 nodes (Xid 31 / 43 / 45 on all 8 GPUs of each):
    no node is drained, and the fleet shows the Xid 31 once, across the 10 nodes."""
    from gputriage.fleet.report import aggregate

    records = _node_results(tmp_path, {f"gpu-node{i:03d}": _job_crash_dmesg(i)
                                       for i in range(10)})
    for result, _ in records:
        xid31 = [f for f in result.findings if f.id == "xid.31" and f.current]
        assert xid31 and all(f.blame.side == "job" for f in xid31)
    report = aggregate([rec for _, rec in records])
    rows = {s.id: s for s in report.findings}
    assert rows["xid.31"].count == 10 and rows["xid.31"].severity == "warning"
    assert all(s.severity != "critical" for s in report.findings)


def test_xid45_storm_on_three_nodes_is_one_finding_per_node(tmp_path) -> None:
    """672 Xid 45 events on 3 nodes in 3 hours (224 each): one counted finding per node,
    never a drain, and one fleet row for the 3 nodes."""
    from gputriage.fleet.report import aggregate

    records = _node_results(tmp_path, {f"gb200-{i}": _storm_dmesg(224) for i in range(3)})
    for result, _ in records:
        found = [f for f in result.findings if f.id == "xid.45"]
        assert len(found) == 1 and "224" in found[0].title
        assert found[0].severity.rank <= Severity.WARNING.rank
    report = aggregate([rec for _, rec in records], min_severity="info")
    rows = [s for s in report.findings if s.id == "xid.45"]
    assert len(rows) == 1 and rows[0].count == 3


def test_xid109_alone_resets_the_gpu_after_the_jobs_fault_restarts_the_job() -> None:
    """NVIDIA's catalog: Xid 109 is RESET_GPU; after the job's own Xid 13 on the GPU it
    is that job's hang (restart it), never a drain."""
    alone = [f for f in judge([xid(109, A, message="CTX SWITCH TIMEOUT")]) if f.id == "xid.109"]
    assert alone[0].action is Action.RESET_GPU and alone[0].blame is Blame.NODE
    after = judge([xid(13, A, pid="4242", name="pt_main_thread"),
                   xid(109, A, t=30, message="CTX SWITCH TIMEOUT")])
    f = next(f for f in after if f.id == "xid.109")
    assert f.action is Action.RESTART_JOB and f.blame is Blame.JOB

"""nccl-tests results: runs that failed, runs that moved wrong data, and bus
bandwidth below what the hardware should give (the expectation is formed in
:mod:`gputriage.facts.nccl_bandwidth`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gputriage.facts.nccl import NcclLogText, on_sockets
from gputriage.knowledge.nccl_results import result_of
from gputriage.model import NODE, Action, Blame, Evidence, Finding, Severity, evidence
from gputriage.parsers.nccl_model import NET_IB, NcclLog, NcclProcess, NcclTestRow, NcclTestRun
from gputriage.rules.base import action_for, finding, rule
from gputriage.rules.modules import PEERMEM_MODULES, loaded_line
from gputriage.rules.nccl_transport_causes import socket_causes
from gputriage.text.words import human_number

if TYPE_CHECKING:
    from gputriage.facts.fabric import FabricNeed
    from gputriage.facts.nccl_bandwidth import Expectation
    from gputriage.facts.pcie import PcieLink
    from gputriage.parsers.infiniband import IbPort
    from gputriage.parsers.modules import Module
    from gputriage.parsers.systemd import UnitState

TESTS = "nccl_tests"
LOW = 0.80  # peak busbw below this share of the expectation: a warning
VERY_LOW = 0.50  # below this (with a verified figure and large sizes): critical
MIN_BYTES = 64 << 20  # runs whose largest size is smaller are not judged
FULL_BYTES = 1 << 30  # from here the largest size is taken to show the plateau

_NOT_INIT = re.compile(r"system not yet initialized", re.IGNORECASE)
_FAILED_ON = re.compile(r"^\s*(?:\.\.\s+)?(?P<host>[^\s:]{1,255})(?: pid [0-9]{1,10})?: Test "
                        r"(?:NCCL |CUDA )?failure")
_NCCL_FAIL = re.compile(r"Test NCCL failure \S+ '([^']+)'", re.IGNORECASE)
_CUDA_FAIL = re.compile(r"Test CUDA failure \S+ '([^']+)'", re.IGNORECASE)

def _label(run: NcclTestRun) -> str:
    return run.test or run.operation or "nccl-tests"


def _run_lines(run: NcclTestRun) -> list[str]:
    return [run.line] + [d.line for d in run.devices[:2]]


@rule("nccl.tests-failed", produces=("nccl.tests-failed",))
def tests_failed(nccl_tests: list[NcclTestRun], needs_fabric_manager: FabricNeed | None = None,
                 units: dict[str, UnitState] | None = None) -> Iterator[Finding]:
    """An nccl-tests run that stopped on an error. 'system not yet initialized' on an
    NVSwitch system means the fabric manager has not configured the fabric; a NCCL
    failure names the NCCL error."""
    for run in nccl_tests:
        if not run.errors:
            continue
        text = " ".join(run.errors)
        ev = [evidence(TESTS, _run_lines(run) + run.errors[:4])]
        if _NOT_INIT.search(text):
            yield _not_initialized(run, ev, needs_fabric_manager,
                                   (units or {}).get("nvidia-fabricmanager"))
            continue
        m = _NCCL_FAIL.search(text) or _CUDA_FAIL.search(text)
        what = m.group(1) if m else run.errors[0].strip()[:120]
        blame, action, why = Blame.UNKNOWN, Action.RESTART_JOB, (
            "The test aborted before measuring anything; the error names the failing call.")
        if (result := result_of(what)) is not None and result.code in (1, 2, 5, 6):
            blame, action, why = result.blame, result.action, result.why
        if "internal error" in what.lower():
            blame, action, why = _internal_error(run)
        kind = "NCCL" if _NCCL_FAIL.search(text) else "CUDA" if _CUDA_FAIL.search(text) else ""
        # the job's side, or a cause not known yet: never a reason to drain the node
        severity = (Severity.WARNING if blame in (Blame.UNKNOWN, Blame.JOB, Blame.JOB_CONFIG)
                    else Severity.CRITICAL)
        yield finding("nccl.tests-failed", severity,
                      f"{_label(run)} failed: {kind + ' ' if kind else ''}error '{what}'",
                      why, action, blame, NODE, ev)


def _internal_error(run: NcclTestRun) -> tuple[Blame, Action, str]:
    """NCCL's "internal error" in an nccl-tests run: setup failures are reported so (NCCL
    2.18 above all); on one host of several, the launch's settings for that host."""
    failing = sorted({m.group("host") for ln in run.errors if (m := _FAILED_ON.match(ln))})
    hosts = run.hosts
    advice = (" Rerun with NCCL_DEBUG=WARN (or INFO) to see the step that failed. The "
              "message's 'please report this issue' does not make it an NCCL bug, nor a GPU "
              "fault.")
    if len(hosts) > 1 and failing and set(failing) < set(hosts):
        return (Blame.JOB_CONFIG, Action.FIX_CONFIG,
                f"NCCL failed its setup on {', '.join(failing)} only, of the run's "
                f"{len(hosts)} hosts ({', '.join(hosts)}). NCCL reports setup failures such "
                "as a bootstrap interface it cannot use as an internal error, and a setting "
                "that fits one host but not another is the usual cause: an "
                "NCCL_SOCKET_IFNAME exported to every host (mpirun -x) while the hosts' "
                "interfaces have different names, or an address that host cannot reach. "
                "Give each host its own interface (a list such as "
                "NCCL_SOCKET_IFNAME=enp6s0,enp4s0, a common prefix, or /etc/nccl.conf on each "
                "host)." + advice)
    return (Blame.UNKNOWN, Action.RESTART_JOB,
            "NCCL stopped with an internal error before measuring anything: NCCL reports "
            "several setup failures (its bootstrap network, the environment) this way." + advice)


def _not_initialized(run: NcclTestRun, ev: list[Evidence], need: FabricNeed | None,
                     unit: UnitState | None) -> Finding:
    """CUDA error 802: the NVLink fabric is not ready (fabric manager not running)."""
    why = ("CUDA reports 'system not yet initialized' (error 802) when the GPUs of an "
           "NVSwitch system wait for the NVLink fabric: nvidia-fabricmanager is not running "
           "(or failed) and no CUDA program can start. Start nvidia-fabricmanager at the "
           "driver's exact version and check its log.")
    action = Action.FIX_CONFIG  # start and enable the service
    if unit is not None:
        state = unit.active_state or "unknown"
        why += f" Here nvidia-fabricmanager is {state}."
        ev.append(evidence("systemctl_fabricmanager", [f"ActiveState={state}"]))
        if state == "failed":  # it crashed: version mismatch or install, as fabric.* says
            action = Action.FIX_SOFTWARE
    if need is not None and need.needed:
        why += f" This host needs it: {need.reason}."
        ev.extend(need.evidence)
    elif need is not None:
        why += (f" This host does not look like an NVSwitch system ({need.reason}): check "
                "that the GPUs finished initialising (nvidia-smi -q Fabric State).")
    return finding("nccl.tests-failed", Severity.CRITICAL,
                   f"{_label(run)} failed: CUDA 'system not yet initialized' (fabric manager "
                   "not running?)", why, action, Blame.NODE, NODE, ev)


@rule("nccl.tests-wrong", produces=("nccl.tests-wrong",))
def tests_wrong(nccl_tests: list[NcclTestRun]) -> Iterator[Finding]:
    """nccl-tests checks every result: a #wrong count above 0 (or out-of-bounds
    values) means a collective delivered corrupt data."""
    for run in nccl_tests:
        bad = [r for r in run.rows if (r.oop_wrong or 0) + (r.ip_wrong or 0) > 0]
        oob = run.out_of_bounds or 0
        if not bad and oob <= 0:
            continue
        lines = _run_lines(run) + [r.line for r in bad[:6]]
        if oob > 0:
            lines.append(f"# Out of bounds values : {oob} FAILED")
        parts = [f"{run.wrong} wrong values in {len(bad)} of {len(run.rows)} sizes"] if bad \
            else []
        if oob > 0:
            parts.append(f"{oob} out-of-bounds values")
        yield finding(
            "nccl.tests-wrong", Severity.CRITICAL,
            f"{_label(run)}: {' and '.join(parts)}: data corruption",
            "The collective returned results that differ from the expected values. Unless "
            "the run forced an unsupported protocol (NCCL_PROTO=LL128 where NCCL disables "
            "it), that is a hardware fault on a GPU, NVLink/NVSwitch or NIC path: drain the "
            "node(s) and narrow it down with single-node and pairwise runs.",
            Action.DRAIN_AND_REPAIR, Blame.NODE, NODE, [evidence(TESTS, lines)])


def _size(n: int) -> str:
    """``8 GiB``, ``128 MiB``, ``4 KiB``, ``8 B``."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def _peak(run: NcclTestRun) -> tuple[NcclTestRow, float] | None:
    row = run.peak
    if row is None:
        return None
    return row, max(row.oop_busbw or 0.0, row.ip_busbw or 0.0)


@dataclass(frozen=True)
class Context:
    """What the job's NCCL log and this host's facts can say about low bandwidth."""

    log: NcclLog | None = None
    text: NcclLogText | None = None
    ib_ports: list[IbPort] | None = None
    has_infiniband: bool | None = None
    modules: dict[str, Module] | None = None
    pcie_links: list[PcieLink] | None = None


Hints = tuple[list[str], Blame, Action]


def _socket_hint(ctx: Context, on_tcp: list[NcclProcess], hints: list[str]) -> tuple[Blame, Action]:
    """NCCL on TCP between nodes: the same cause, action and blame as
    nccl.socket-transport gives."""
    hcas = bool(ctx.ib_ports or ctx.has_infiniband)
    causes = socket_causes(on_tcp, hcas, ctx.text or NcclLogText("", ctx.log))
    why = f" ({causes[0].title})" if causes else ""
    hints.append(f"NCCL used NET/Socket (TCP) between nodes{why}: see nccl.socket-transport")
    return (causes[0].blame, causes[0].action) if causes else (Blame.CONFIG, Action.FIX_CONFIG)


def _inter_node_hints(ctx: Context, exp: Expectation, hints: Hints) -> Hints:
    """Sockets, channels without GPUDirect, inactive rail ports, no nvidia_peermem."""
    found, blame, action = hints
    procs = ctx.log.processes if ctx.log else []
    on_tcp = [p for p in procs if on_sockets(p)]
    if on_tcp:
        blame, action = _socket_hint(ctx, on_tcp, found)
    ib = [c for p in procs for c in p.channels if c.family == NET_IB]
    no_gdr = [c for c in ib if c.gdr is False]
    if no_gdr:
        found.append(f"{len(no_gdr)} of {len(ib)} NET/IB channels run without GPUDirect "
                     "RDMA: see nccl.gdr-disabled")
    if exp.down_rails:
        found.append(f"rail port(s) {', '.join(exp.down_rails)} are not active: see "
                     "ib.port-not-active")
        blame, action = Blame.NODE, Action.DRAIN_AND_REPAIR
    if ctx.modules is not None and loaded_line(ctx.modules, PEERMEM_MODULES) is None:
        found.append("nvidia_peermem is not loaded here: see module.peermem-missing")
    return found, blame, action


def _hints(ctx: Context, exp: Expectation) -> Hints:
    """Known causes from the job's NCCL log and this host's facts."""
    hints: Hints = ([], Blame.UNKNOWN, Action.FIX_CONFIG)
    if exp.scope == "inter-node":
        hints = _inter_node_hints(ctx, exp, hints)
    slow = [ln for ln in ctx.pcie_links or []
            if ln.cur_width and ln.max_width and ln.cur_width < ln.max_width]
    if slow:
        hints[0].append(f"{slow[0].label} runs PCIe x{slow[0].cur_width} of "
                        f"x{slow[0].max_width}: see the pcie.* findings")
        return hints[0], Blame.NODE, Action.DRAIN_AND_REPAIR
    return hints


@rule("nccl.busbw-low", produces=("nccl.busbw-low",))
def busbw_low(nccl_expectations: list[tuple[NcclTestRun, Expectation | None]],
              nccl_log: NcclLog | None = None, nccl_log_text: NcclLogText | None = None,
              ib_ports: list[IbPort] | None = None, has_infiniband: bool | None = None,
              modules: dict[str, Module] | None = None,
              pcie_links: list[PcieLink] | None = None) -> Iterator[Finding]:
    """Peak bus bandwidth of an nccl-tests run (the best of out-of-place and in-place,
    normally at the largest sizes; the average is dragged down by small sizes and is not
    judged) below 80 % of what the GPUs' NVLink/PCIe or the node's NICs should give."""
    ctx = Context(nccl_log, nccl_log_text, ib_ports, has_infiniband, modules, pcie_links)
    for run, exp in nccl_expectations:
        peak = _peak(run)
        if exp is None or peak is None or not run.rows:
            continue
        row, busbw = peak
        largest = max(r.size for r in run.rows)
        if largest < MIN_BYTES or busbw >= LOW * exp.busbw_gbs:
            continue
        plateau = largest >= FULL_BYTES
        critical = busbw < VERY_LOW * exp.busbw_gbs and exp.verified and plateau
        hints, blame, action = _hints(ctx, exp)
        why = (f"Expectation: {exp.basis} ({'; '.join(exp.inputs)}). The peak is taken at "
               f"{_size(row.size)}, best of out-of-place and in-place")
        if run.avg_busbw is not None:
            why += (f"; the average ({human_number(run.avg_busbw)} GB/s) includes small sizes "
                    "and is not judged")
        why += "."
        if not plateau:
            why += (f" The largest size was only {_size(largest)}: run up to 8G (-e 8G) "
                    "before concluding.")
        if not exp.verified:
            why += " The expected figure is not a verified reference number."
        if hints:
            why += " Known causes here: " + "; ".join(hints) + "."
        elif exp.scope == "inter-node":
            why += (" Check the transport in the NCCL log (NCCL_DEBUG=INFO: NET/IB with "
                    "GDRDMA), every rail port's rate, and run 2-node tests with NCCL_ALGO=Ring.")
        else:
            why += (" Check NVLink state (nvidia-smi nvlink -s), that P2P is not disabled "
                    "and the GPUs' clocks and PCIe links.")
        ev = [evidence(TESTS, [run.line, row.line] + ([run.avg_line] if run.avg_line else []),
                       exp.line(busbw))]
        severity = Severity.CRITICAL if critical else Severity.WARNING
        if action_for(severity, action) is not action:
            why += " Slow but correct: repair the node's part at the next maintenance window."
        yield finding(
            "nccl.busbw-low", severity, f"{_label(run)}: {exp.line(busbw)}", why,
            action_for(severity, action), blame, NODE, ev)

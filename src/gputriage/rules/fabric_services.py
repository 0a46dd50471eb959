"""Rules on the services around the NVLink fabric, read from their logs: the fabric
manager's prerequisites on NVL5+ systems (ib_umad for its NVLink subnet manager), NVLS
multicast teams it lost track of, and the IMEX daemon of a multi-node NVLink domain."""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.facts.fabric import FM_SOURCE
from gputriage.model import Action, Blame, Finding, Scope, Severity, evidence
from gputriage.parsers.fabricmanager import FmEntry, FmLog
from gputriage.parsers.imex import ImexLog
from gputriage.rules.base import finding, rule
from gputriage.text.fields import split_lines

FM_UNIT = "nvidia-fabricmanager"
IMEX_UNIT = "nvidia-imex"


def _lines(entries: list[FmEntry], limit: int = 8) -> list[str]:
    unique = list({id(e): e for e in entries}.values())
    return [ln for e in unique for ln in split_lines(e.line)][:limit]


@rule("fabric.manager-prerequisite", produces=("fabric.manager-prerequisite",))
def manager_prerequisite(fm_log: FmLog) -> Iterator[Finding]:
    """On NVL5+ systems (HGX B200, GB200 and later) the fabric manager drives the
    NVSwitches through its NVLink subnet manager, which sends management datagrams over
    /dev/infiniband/umad*: without the ib_umad module its start script refuses to start
    it, or NVLSM fails in umad_init and the service crash-loops."""
    umad = fm_log.having("umad-missing")
    if not umad:
        return
    context = fm_log.having("nvl5") + [e for e in fm_log.entries
                                       if "NVL5+" in e.message or "Polling for" in e.message]
    yield finding(
        "fabric.manager-prerequisite", Severity.CRITICAL,
        "the fabric manager cannot start: kernel module ib_umad is not loaded",
        "On an NVL5+ system the fabric manager programs the NVSwitches through its NVLink "
        "subnet manager, which needs ib_umad (/dev/infiniband/umad*). Without it the service "
        "does not start (or restarts in a loop), the GPUs never finish fabric registration "
        "(Fabric State In Progress) and CUDA fails with error 802. The GPUs are not at "
        "fault: load ib_umad, make it load at boot, and restart the fabric manager.",
        Action.FIX_CONFIG, Blame.CONFIG, Scope("unit", name=FM_UNIT),
        [evidence(FM_SOURCE, _lines(context + umad))])


@rule("fabric.multicast-state", produces=("fabric.multicast-state",))
def multicast_state(fm_log: FmLog) -> Iterator[Finding]:
    """The fabric manager failed to set up or release an NVLS multicast team it no longer
    knows ("cannot find the team"): its multicast bookkeeping is out of step with the
    driver's, and NCCL jobs that use NVLink SHARP (NVLS, the default on NVSwitch systems
    from NCCL 2.17) hang or fail on this node until the fabric state is rebuilt."""
    lost = fm_log.having("multicast-team")
    if not lost:
        return
    yield finding(
        "fabric.multicast-state", Severity.CRITICAL,
        f"the fabric manager lost track of NVLS multicast teams ({len(lost)} failed "
        "setup/release record(s))",
        "The fabric manager's NVLS multicast teams no longer match the GPUs': NCCL jobs that "
        "use NVLink SHARP hang in their first collectives or fail to bind multicast memory "
        "here. This is the node's fabric software state, not the job and not the GPUs: drain "
        "the node and reboot it (or, with no job on it, stop the fabric manager, reset the "
        "GPUs and start it again). Jobs can run meanwhile elsewhere, or with "
        "NCCL_NVLS_ENABLE=0 at lower bandwidth.",
        Action.REBOOT_NODE, Blame.NODE, Scope("unit", name=FM_UNIT),
        [evidence(FM_SOURCE, _lines(lost),
                  f"{len(lost)} record(s)" if len(lost) > 1 else None)])


@rule("imex.daemon", produces=("imex.no-local-address", "imex.daemon-errors"))
def imex_daemon(imex_log: ImexLog) -> Iterator[Finding]:
    """The IMEX daemon stops when none of the addresses in its nodes_config.cfg is one of
    this node's: multi-node NVLink memory sharing is then unavailable to the domain's
    jobs. Other errors it logs are reported as they are."""
    version = f" (IMEX {imex_log.version})" if imex_log.version else ""
    unmatched = imex_log.having("no-local-address")
    if unmatched:
        yield finding(
            "imex.no-local-address", Severity.WARNING,
            f"the IMEX daemon found none of its nodes_config addresses on this node{version}",
            "IMEX needs one of the IP addresses listed in its node configuration file "
            "(/etc/nvidia-imex/nodes_config.cfg) to be an address of a local interface; "
            "none is, so the daemon does not start and jobs of the multi-node NVLink domain "
            "cannot share GPU memory across nodes. A configuration fault, not the GPUs': "
            "make the file list this node's address on the interface IMEX should use (in "
            "Kubernetes, the ComputeDomain daemon pod's address and networking).",
            Action.FIX_CONFIG, Blame.CONFIG, Scope("unit", name=IMEX_UNIT),
            [evidence("imex_log", [e.line for e in unmatched][:4])])
    others = [e for e in imex_log.errors if e.event != "no-local-address"]
    if others:
        yield finding(
            "imex.daemon-errors", Severity.WARNING,
            f"the IMEX daemon logged {len(others)} error(s){version}",
            "IMEX errors stop memory sharing between the nodes of the NVLink domain. Read "
            "them with the daemon's configuration (nodes_config.cfg, the bind interface and "
            "port) and the other nodes' IMEX logs; restart the daemon once fixed.",
            Action.NONE, Blame.UNKNOWN, Scope("unit", name=IMEX_UNIT),
            [evidence("imex_log", [e.line for e in others][:8])])

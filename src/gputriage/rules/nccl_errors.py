"""NCCL WARNs from the job's own log: IB completion errors, an RDMA device a rank
could not open, and the other WARNs. Job-level diagnoses (NCCL versions that
differ between ranks, an init that never completed, a framework watchdog timeout)
are in :mod:`.nccl_job`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from gputriage.facts.nccl import on_sockets
from gputriage.knowledge import nccl_warnings
from gputriage.knowledge.ib_status import ib_wc_status
from gputriage.knowledge.nccl_results import result_of
from gputriage.model import (
    DRAINING_ACTIONS,
    NODE,
    UNNAMED_HOST,
    Action,
    Blame,
    Finding,
    Occurrences,
    Scope,
    Severity,
    evidence,
)
from gputriage.rules.base import finding, rule
from gputriage.rules.nccl_completions import FLUSH, Completion, completions
from gputriage.rules.nccl_ib_advice import HostRdma, advice, cloud_vm, roce_path
from gputriage.text.fields import split_lines

if TYPE_CHECKING:
    from gputriage.parsers.hostcfg import KernelCmdline
    from gputriage.parsers.infiniband import IbPort
    from gputriage.parsers.modules import Module
    from gputriage.parsers.nccl_model import NcclLog, NcclProcess, NcclWarn

LOG = "nccl_log"
SHOWN = 6  # WARN lines kept as evidence per finding

_VENDOR = re.compile(r"vendor err ([0-9]+)")
_OPEN_FAIL = re.compile(r"could not open (?P<dev>[\w.-]+)|(?:Failed to open|Unable to open|"
                        r"cannot open) (?P<dev2>/dev/infiniband/\S+|uverbs[0-9]+|(?:mlx5|erdma|"
                        r"irdma|bnxt_re|efa|rxe)\w*)|ibv_open_device\S* (?:failed|error)",
                        re.IGNORECASE)
_ERRNO = re.compile(r"\(([^()]*?),?\s*errno ([0-9]+)\)|errno[ =]([0-9]+)")
_HANG_NOTE = re.compile(r"no peer here|may hang", re.IGNORECASE)
_RANK_ON = re.compile(r"Rank ([0-9]+) on (\S+)")


_NO_HOST = ""  # lines without a host prefix: grouped together, their title names none


def _host(p: NcclProcess) -> str:
    return p.host or _NO_HOST


def plural(count: int, word: str) -> str:
    """``1 WARN``, ``3 WARNs``, ``2 processes``."""
    if count == 1:
        return f"1 {word}"
    return f"{count} {word}{'es' if word.endswith('s') else 's'}"


def _status_name(code: int, warn: NcclWarn | None = None) -> tuple[str, str]:
    """(IBV_WC_* name, meaning) of an ibv_wc_status code."""
    if warn is not None and warn.ib_status_name:
        return warn.ib_status_name, warn.ib_meaning or ""
    found = ib_wc_status(code)
    return found if found else (f"status {code}", "")


# --- IB completion errors ----------------------------------------------------------------


def _where(comps: list[Completion]) -> tuple[str, Scope]:
    """Where the errors concentrate: one host, one peer, or spread; and the scope."""
    hosts = Counter(_host(c.proc) for c in comps)
    peers = Counter(c.peer for c in comps if c.peer)
    devices = {c.warn.device for c in comps if c.warn.device}
    top_host, n_host = hosts.most_common(1)[0]
    text = f"on {top_host}" if len(hosts) == 1 else (
        f"on {len(hosts)} hosts ({', '.join(sorted(hosts)[:4])})")
    if len(hosts) > 2 and n_host * 2 > len(comps):
        text = f"mostly on {top_host} ({n_host} of {len(comps)})"
    if len(peers) == 1:
        text += f" toward peer {next(iter(peers))}"
    elif peers and peers.most_common(1)[0][1] * 2 > len(comps) and len(peers) > 2:
        text += f", mostly toward peer {peers.most_common(1)[0][0]}"
    if len(hosts) == 1 and len(devices) == 1:
        dev = devices.pop()
        return f"{text} via {dev}", Scope("nic", name=dev)
    return text, NODE


def _flush_only(status: int | None, group: list[Completion], where: str,
                scope: Scope) -> Finding:
    """Errors without a status, or flushes with no earlier error: the cause is elsewhere."""
    name = "no status" if status is None else _status_name(FLUSH, group[0].warn)[0]
    return finding(
        "nccl.ib-completion-error", Severity.WARNING,
        f"{plural(len(group), 'IB completion error')} ({name}) {where}: the first error "
        "is not in this log",
        "Flush errors only say that a queue pair had already failed; the error that "
        "broke it was logged by another rank or before this excerpt. Find the first "
        "non-flush completion error across all ranks.", Action.NONE, Blame.UNKNOWN,
        scope, [evidence(LOG, [c.warn.line for c in group[:SHOWN]])],
        occurrences=Occurrences(len(group)))


def _root_error(status: int, group: list[Completion], echo: list[Completion],
                roce: bool | None, host: HostRdma) -> Finding:
    """The first error of its queue pairs: what it means and what to do."""
    where, scope = _where(group)
    vendors = sorted({m.group(1) for c in group if (m := _VENDOR.search(c.warn.message))})
    vendor = f", vendor err {'/'.join(vendors)}" if vendors else ""
    name, meaning = _status_name(status, group[0].warn)
    action, blame, context, todo, extra = advice(status, roce, host, group)
    then = f", then {len(echo)}x status 5 (flushed, secondary)" if echo else ""
    title = (f"{plural(len(group), 'IB completion error')}: status {status} ({name}{vendor}) "
             f"{where}{then}")
    meaning = meaning.strip().rstrip(".")
    why = f"{meaning[:1].upper()}{meaning[1:]}. {todo}" if meaning else f"{context} {todo}"
    if echo:
        why += (" The later status 5 (work request flushed) errors are consequences of "
                "this first error on the queue pair, not separate faults.")
    lines = [c.warn.line for c in group[:SHOWN]] + [c.warn.line for c in echo[:1]]
    note = f"{len(group)} with status {status}" + (f", {len(echo)} flushed" if echo else "")
    # critical only where this node itself must come out (its own HCA port is down, it
    # lost several peers at once) or its configuration breaks every job; a dead peer, the
    # path towards one peer, or cloud VMs not provisioned together: a warning for the
    # node's network, never a drain of this node on a peer's fault
    drains = action in DRAINING_ACTIONS
    severity = (Severity.CRITICAL if drains or (blame is Blame.CONFIG and not cloud_vm(group))
                else Severity.WARNING)
    return finding("nccl.ib-completion-error", severity, title, why, action, blame,
                   scope, [evidence(LOG, lines, note), *extra],
                   occurrences=Occurrences(len(group) + len(echo)))


@rule("nccl.ib-completion-error", produces=("nccl.ib-completion-error",))
def ib_completion_error(nccl_log: NcclLog, ib_ports: list[IbPort] | None = None,
                        modules: dict[str, Module] | None = None,
                        host_cmdline: KernelCmdline | None = None) -> Iterator[Finding]:
    """IB completion errors (a WARN with an ibv_wc_status): the first error on a queue
    pair is the cause, later 'work request flushed' (5) errors are its echo. Grouped by
    the first status; says whether they concentrate on one host or toward one peer."""
    comps = completions(nccl_log)
    roots: dict[int | None, list[Completion]] = {}
    for c in comps:
        if not c.secondary:
            roots.setdefault(c.status, []).append(c)
    roce = roce_path(comps, ib_ports)
    host = HostRdma(ib_ports or [], modules, host_cmdline)
    for status, group in roots.items():
        if status is None or status == FLUSH:
            yield _flush_only(status, group, *_where(group))
            continue
        procs = {id(c.proc) for c in group}
        echo = [c for c in comps if c.secondary and c.root == status and id(c.proc) in procs]
        yield _root_error(status, group, echo, roce, host)


# --- RDMA device that could not be opened ---------------------------------------------------


def _open_failures(p: NcclProcess) -> list[NcclWarn]:
    return [w for w in p.warns if _OPEN_FAIL.search(w.message)
            and "libibverbs" not in w.message]


def _open_details(p: NcclProcess, fails: list[NcclWarn]
                  ) -> tuple[list[str], list[str], str | None]:
    """(devices named, errnos as printed, the host) of a process's open failures."""
    devs: list[str] = []
    errnos: list[str] = []
    host = p.host
    for w in fails:
        m = _OPEN_FAIL.search(w.message)
        dev = w.device or (m and (m.group("dev") or m.group("dev2")))
        if dev and dev not in devs:
            devs.append(dev)
        if (e := _ERRNO.search(w.message)) and (e.group(2) or e.group(3)):
            text = (e.group(1) or "").strip()
            errnos.append(f"errno {e.group(2) or e.group(3)}" + (f", {text}" if text else ""))
        if host is None and (r := _RANK_ON.search(w.message)):
            host = r.group(2)
    return devs, errnos, host


def _open_failed(p: NcclProcess, fails: list[NcclWarn], host_devs: set[str]) -> Finding:
    devs, errnos, host = _open_details(p, fails)
    hang = [w for w in p.warns if _HANG_NOTE.search(w.message)]
    why = ("NCCL was told to use this RDMA device (or found it) but the process could "
           "not open it. In a container the usual cause is access, not a missing device: "
           "/dev/infiniband not mounted, the device cgroup or RDMA device plugin not "
           "granting uverbs, or file permissions; the errno NCCL prints can be clobbered "
           "by a library fallback, so do not trust it alone. Expose the device to the "
           "container, or leave it out with NCCL_IB_HCA.")
    present = [d for d in devs if d in host_devs]
    if present:
        why += f" This host's sysfs lists {', '.join(present)}, so the device exists."
    if hang:
        why += (" NCCL also warns that the job may hang: other ranks' channels on this "
                "device have no peer here.")
    title = (f"{host or _host(p)}: NCCL could not open RDMA device "
             f"{', '.join(devs) or '(unnamed)'}" + (f" ({errnos[0]})" if errnos else ""))
    return finding(
        "nccl.device-open-failed", Severity.CRITICAL if hang else Severity.WARNING, title,
        why, Action.FIX_CONFIG, Blame.CONFIG,
        Scope("nic", name=devs[0]) if len(devs) == 1 else NODE,
        [evidence(LOG, [w.line for w in (fails + hang)[:SHOWN]])],
        occurrences=Occurrences(len(fails)))


@rule("nccl.device-open-failed", produces=("nccl.device-open-failed",))
def device_open_failed(nccl_log: NcclLog,
                       ib_ports: list[IbPort] | None = None) -> Iterator[Finding]:
    """A rank could not open an RDMA device (verbs device or /dev/infiniband/uverbsN):
    inside a container that is device access (device cgroup, the /dev/infiniband mount,
    permissions), whatever errno the message shows."""
    host_devs = {p.device for p in ib_ports or []}
    for p in nccl_log.processes:
        fails = _open_failures(p)
        if fails:
            yield _open_failed(p, fails, host_devs)


# --- NVLS / multi-node NVLink (NVLink fabric) ----------------------------------------------

_CUDA_CODE = re.compile(r"Cuda failure ([0-9]{1,4})|CUDA error ([0-9]{1,4})|cuda error "
                        r"([0-9]{1,4})",
                        re.IGNORECASE)
_MNNVL = re.compile(r"MNNVL|IMEX|nvidia-caps-imex", re.IGNORECASE)
_NVLS = re.compile(r"nvls|multicast|cuMulticast", re.IGNORECASE)
# CUDA errors that say the process may not create or import the object (its devices or
# rights), as opposed to a fabric in a bad state (401, 999, ...)
_REFUSED = {1: "invalid argument", 800: "operation not permitted", 801: "not supported"}


def _fabric_warns(p: NcclProcess) -> tuple[list[NcclWarn], list[NcclWarn]]:
    """(NVLS warns, MNNVL warns) of a process: the WARN itself names nvls/multicast or
    MNNVL/IMEX, or is a CUDA failure right after such a WARN."""
    nvls: list[NcclWarn] = []
    mnnvl: list[NcclWarn] = []
    last: list[NcclWarn] | None = None
    for w in p.warns:
        where = f"{w.source_loc or ''} {w.message}"
        if _MNNVL.search(where):
            last = mnnvl
        elif _NVLS.search(where):
            last = nvls
        elif not (last is not None and _CUDA_CODE.search(w.message)):
            last = None
            continue
        last.append(w)
    return nvls, mnnvl


def _cuda_code(warns: list[NcclWarn]) -> int | None:
    for w in warns:
        m = _CUDA_CODE.search(w.message)
        if m:
            return int(next(g for g in m.groups() if g))
    return None


def _fabric_verdict(mnnvl: bool, code: int | None) -> tuple[str, str, Severity, Action, Blame]:
    if mnnvl:
        return ("multi-node NVLink (MNNVL) is available but not working",
                "NCCL found an NVLink domain spanning trays but could not import peers' "
                "memory across it: the IMEX channel device (/dev/nvidia-caps-imex-channels/"
                "channel0) is missing on this node or not passed into the container, or the "
                "IMEX service is down. Create the channel on every node (driver parameter "
                "NVreg_CreateImexChannel0=1, or mknod with the nvidia-caps-imex-channels "
                "major), expose it to the job and check the IMEX daemon; NCCL_MNNVL_ENABLE=0 "
                "works around it at the cost of cross-tray NVLink.",
                Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    if code in _REFUSED:
        return (f"NVLink SHARP (NVLS) setup refused by CUDA ({code}: {_REFUSED[code]})",
                "CUDA refused the multicast object NVLS needs; the GPUs and NVLink are not "
                "at fault and neither is the job's code. Either the job runs in a container "
                "without the fabric capability devices (/dev/nvidia-caps) or the rights to "
                "use them, or the node's fabric manager and GPUs were not brought up in the "
                "order the fabric manager guide requires (the fabric manager restarted "
                "without a GPU reset), which leaves multicast unusable. In a container, "
                "expose /dev/nvidia-caps; on the host, check nvidia-smi -q Fabric State and "
                "restart the fabric manager with the GPUs reset in between (or reboot). "
                "NCCL_NVLS_ENABLE=0 lets jobs run meanwhile (all-reduce loses some "
                "bandwidth).",
                Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    what = f" (CUDA error {code})" if code is not None else ""
    return (f"NVLink SHARP (NVLS) multicast setup failed on the node's NVLink fabric{what}",
            "NCCL believes multicast is available yet CUDA cannot bind the GPUs' memory to a "
            "multicast object: the node's NVLink fabric state is wrong. The usual cause is "
            "the fabric manager stopped or restarted without the GPU reset its user guide "
            "requires (its log then shows a non-critical error), or a fabric or IMEX "
            "registration that never completed, or stale multicast state left by an earlier "
            "job. This is the node's software state, not the job and not a part to replace: "
            "stop the fabric manager, reset all GPUs, start it again and check nvidia-smi -q "
            "Fabric State reads Completed (or reboot the node); look for SXids in the kernel "
            "log if it comes back. NCCL_NVLS_ENABLE=0 lets jobs run meanwhile at lower "
            "all-reduce bandwidth; draining the node protects the jobs until then.",
            Severity.CRITICAL, Action.FIX_SOFTWARE, Blame.CONFIG)


def _framework_fabric(log: NcclLog) -> list[NcclWarn]:
    """The framework's NCCL errors that carry NCCL's last error about NVLS (PyTorch's
    "Last error: Failed to bind NVLink SHARP (NVLS) Multicast memory ...")."""
    return [w for w in log.framework_errors
            if _NVLS.search(w.message) and _CUDA_CODE.search(w.message)]


@rule("nccl.nvls-failed", produces=("nccl.nvls-failed",))
def nvls_failed(nccl_log: NcclLog) -> Iterator[Finding]:
    """NVLS (NVLink SHARP multicast) and multi-node NVLink failures: CUDA errors on the
    NVLS path point at the node's NVLink fabric (fabric manager, NVSwitch, IMEX), unless
    CUDA refused the object outright (container without the caps devices: config)."""
    seen = False
    for p in nccl_log.processes:
        nvls, mnnvl = _fabric_warns(p)
        for warns, is_mnnvl in ((mnnvl, True), (nvls, False)):
            if not warns:
                continue
            seen = True
            title, why, sev, action, blame = _fabric_verdict(is_mnnvl, _cuda_code(warns))
            yield finding("nccl.nvls-failed", sev, f"{_host(p)}: {title}", why, action, blame,
                          NODE, [evidence(LOG, [w.line for w in warns[:SHOWN]])],
                          occurrences=Occurrences(len(warns)))
    framework = [] if seen else _framework_fabric(nccl_log)
    if framework:
        imex = any(_MNNVL.search(w.message) for w in framework)
        title, why, sev, action, blame = _fabric_verdict(imex, _cuda_code(framework))
        yield finding("nccl.nvls-failed", sev, title, why, action, blame, NODE,
                      [evidence(LOG, [ln for w in framework[:2] for ln in split_lines(w.line)])],
                      occurrences=Occurrences(len(framework)))


# --- every other WARN -------------------------------------------------------------------------

class _WarnClass(NamedTuple):
    """A kind of WARN that no specific rule judges, and how its finding reads."""

    name: str
    pattern: re.Pattern[str] | None  # None: every other WARN
    severity: Severity
    title: str  # what the WARNs are called in the title
    explanation: str
    action: Action
    blame: Blame


_WARN_CLASSES = (
    _WarnClass(
        "connection",
        re.compile(r"socket|Connection (?:closed|refused|reset|timed out)|connect|"
                   r"Connect\b|remote peer", re.IGNORECASE), Severity.WARNING,
        "connection failures",
        "A TCP connection between ranks (bootstrap, socket transport or proxy) failed or was "
        "closed by the peer: that peer usually died first (look at its log), or the network "
        "between the hosts (firewall, NCCL_SOCKET_IFNAME on an interface the peer cannot "
        "reach) is at fault.", Action.RESTART_JOB, Blame.UNKNOWN),
    _WarnClass(
        "system",
        re.compile(r"system error|/dev/shm|shared memory|shm_open|No space left|"
                   r"posix_fallocate|mmap", re.IGNORECASE), Severity.WARNING,
        "system errors",
        "NCCL got an error from the operating system. In containers it is usually /dev/shm too "
        "small for NCCL's shared-memory buffers (Docker's default is 64 MB: use --shm-size or "
        "--ipc=host), otherwise a resource limit (memlock, open files).", Action.FIX_CONFIG,
        Blame.CONFIG),
    _WarnClass(
        "cuda", re.compile(r"Cuda failure|CUDA error|cuda[A-Z]\w+ failed", re.IGNORECASE),
        Severity.WARNING, "CUDA failures",
        "A CUDA call inside NCCL failed; the message names the CUDA error. Illegal addresses "
        "point at the application, ECC and 'unknown error' at the GPU (look for Xids).",
        Action.RESTART_JOB, Blame.UNKNOWN),
    _WarnClass(
        "setup",
        re.compile(r"libibverbs|NET/OFI|NET/Plugin|plugin|No device found|provider",
                   re.IGNORECASE), Severity.INFO, "network setup messages",
        "The network plugin or the verbs library reported a problem while NCCL chose its "
        "network; what it fell back to is judged by the transport findings "
        "(nccl.socket-transport).", Action.NONE, Blame.UNKNOWN),
    _WarnClass(
        "limits", re.compile(r"ncclMaxSharedMem|maxSharedMem|exceeds", re.IGNORECASE),
        Severity.INFO, "resource notes",
        "NCCL adjusted a setting to what the device allows; harmless unless a failure follows.",
        Action.NONE, Blame.UNKNOWN),
)
_OTHER = _WarnClass("other", None, Severity.WARNING, "warnings",
                    "NCCL reported a problem not recognised here; read the lines in order, "
                    "the first WARN is usually the cause of the rest.", Action.RESTART_JOB,
                    Blame.UNKNOWN)


def _warn_class(w: NcclWarn) -> _WarnClass:
    for cls in _WARN_CLASSES:
        if cls.pattern is not None and cls.pattern.search(w.message):
            return cls
    return _OTHER


_CONNECT = re.compile(r"Connect to (?P<peer>[\w.:\[\]%-]{1,64}?)(?:<[0-9]{1,6}>)? failed"
                      r"\s{0,2}:\s{0,2}(?P<why>Connection refused|Connection timed out|"
                      r"No route to host|Network is unreachable|Host is down|"
                      r"Software caused connection abort|Connection reset by peer)",
                      re.IGNORECASE)


def _peer_failure(host: str | None, warns: list[NcclWarn]) -> Finding:
    """Connections from this host to one peer that refused them or never answered."""
    m = _CONNECT.search(warns[0].message)
    assert m is not None
    peer, why = m.group("peer"), m.group("why")
    refused = "refused" in why.lower()
    dropped = any(w in why.lower() for w in ("abort", "reset"))
    here = host or UNNAMED_HOST
    what = ("refused NCCL's connection" if refused else "dropped NCCL's connection"
            if dropped else "did not answer NCCL's connection")
    if dropped:
        detail = ("The connection was cut while it was being made (ECONNABORTED or "
                  "ECONNRESET): the rank there died or restarted at that moment, or something "
                  "on the path (a firewall, a load balancer, an MTU that differs) cut it.")
    elif refused:
        detail = ("It answered with a reset: the machine is reachable but nothing listens on "
                  "the port NCCL expects there, because its rank died or never started, or "
                  "its network setup is broken (a firewall, interfaces that differ).")
    else:
        detail = ("It never answered: that node is down, or unreachable from here (routing, "
                  "a firewall, an interface this node cannot reach).")
    return finding(
        "nccl.peer-connect-failed", Severity.WARNING,
        f"{host + ': ' if host else ''}the peer at {peer} {what} ({why}): that node is at "
        "fault",
        f"Every failed connection of {here} goes to one peer, {peer}. {detail} Neither "
        f"{here} nor the job's code is the cause. Find the node behind {peer} (the job's "
        "host list, getent hosts), read its rank's log and check its network; resubmit "
        "the job without that node and report it to the cluster's admins if it fails again.",
        Action.RESTART_JOB, Blame.NODE, Scope("peer", name=peer),
        [evidence(LOG, [w.line for w in warns[:SHOWN]])],
        occurrences=Occurrences(len(warns)))


def _known(host: str | None, row: nccl_warnings.NcclWarning, warns: list[NcclWarn],
           env: dict[str, str]) -> Finding:
    """A WARN of the catalog, judged as its row says (an NCCL_SOCKET_IFNAME the job set
    makes a missing interface the job's setting)."""
    blame, why = row.blame, f"{row.meaning} {row.cause}"
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if row.id == "nccl.no-socket-interface" and ifname:
        blame = Blame.JOB_CONFIG
        why += f" The job set NCCL_SOCKET_IFNAME={ifname}: check that every host has it."
    first = warns[0].message.strip()
    prefix = f"{host}: " if host else ""
    return finding(row.id, row.severity,
                   f"{prefix}{row.title} ({plural(len(warns), 'WARN')}): {first[:100]}",
                   f"{why} (Known from {row.source}.)", row.action, blame, NODE,
                   [evidence(LOG, [w.line for w in warns[:SHOWN]])],
                   occurrences=Occurrences(len(warns)))


def _framework_known(log: NcclLog, known: dict[tuple[str, str | None], list[NcclWarn]]) -> None:
    """A framework's NCCL error that carries NCCL's last WARN of the catalog (PyTorch's
    "Last error: Bootstrap : no socket interface found", XLA's "Last NCCL warning(error):
    ..."): judged as that WARN's row, unless a WARN line of the log already was."""
    rows_seen = {fid for fid, _ in known}
    for w in log.framework_errors:
        row = nccl_warnings.match(w.message)
        if row is not None and row.id not in rows_seen:
            known.setdefault((row.id, None), []).append(w)


def _unexplained(log: NcclLog) -> list[NcclWarn]:
    """The framework's NCCL errors whose cause nothing else in the log gives: no WARN line
    of NCCL's own, no known last error, no peer it could not reach, no NVLS failure."""
    if any(p.warns for p in log.processes):
        return []
    fabric = {id(w) for w in _framework_fabric(log)}
    return [w for w in log.framework_errors if w.kind == "nccl" and id(w) not in fabric
            and nccl_warnings.match(w.message) is None and not _CONNECT.search(w.message)]


def _framework_failed(warns: list[NcclWarn]) -> Finding:
    result = next((r for w in warns if (r := result_of(w.message)) is not None), None)
    what = f"{result.text} ({result.name})" if result else "an error it does not name"
    why = result.why if result else "The framework's message does not say which NCCL call failed."
    severity = Severity.WARNING
    return finding(
        "nccl.framework-error", severity, f"NCCL call failed: {what}",
        f"The framework reported a failed NCCL call, and the log holds none of NCCL's own "
        f"WARN lines that name the cause. {why} NCCL prints the cause with NCCL_DEBUG=WARN "
        "(INFO for the transport it chose): rerun the job with it and read the WARN before "
        "the error.", result.action if result else Action.RESTART_JOB,
        result.blame if result else Blame.UNKNOWN, NODE,
        [evidence(LOG, [ln for w in warns[:SHOWN] for ln in split_lines(w.line)[:4]])],
        occurrences=Occurrences(len(warns)))


@rule("nccl.framework-error", produces=("nccl.framework-error",))
def framework_error(nccl_log: NcclLog) -> Iterator[Finding]:
    """PyTorch's (or another framework's) NCCL error where the log says nothing more: the
    NCCL result it names, and how to make NCCL say the cause."""
    if warns := _unexplained(nccl_log):
        yield _framework_failed(warns)


@rule("nccl.warn", produces=("nccl.warn", "nccl.peer-connect-failed",
                             *(w.id for w in nccl_warnings.warnings())))
def other_warns(nccl_log: NcclLog) -> Iterator[Finding]:
    """NCCL WARNs not judged by a more specific rule (completion errors and device
    open failures are): a WARN of the known-message catalog as its row says; failed
    connections that all go to one peer as that peer's fault; the others one finding per
    kind and host, with the count and first lines."""
    groups: dict[tuple[str, str], tuple[_WarnClass, list[NcclWarn]]] = {}
    known: dict[tuple[str, str | None], list[NcclWarn]] = {}
    envs: dict[str | None, dict[str, str]] = {}
    peers: dict[str | None, list[NcclWarn]] = {}
    for p in nccl_log.processes:
        claimed = {id(w) for w in _open_failures(p)}
        if claimed:
            claimed |= {id(w) for w in p.warns if _HANG_NOTE.search(w.message)}
        claimed |= {id(w) for ws in _fabric_warns(p) for w in ws}
        envs.setdefault(p.host, {}).update(p.env)
        for w in p.warns:
            if (id(w) in claimed or w.kind == "ib-completion"
                    or "Got completion" in w.message):
                continue
            row = nccl_warnings.match(w.message)
            if row is not None:
                known.setdefault((row.id, p.host), []).append(w)
                continue
            if _CONNECT.search(w.message):
                peers.setdefault(p.host, []).append(w)
                continue
            cls = _warn_class(w)
            if cls.name == "setup" and on_sockets(p):
                continue  # the reason nccl.socket-transport gives for the fallback
            groups.setdefault((cls.name, _host(p)), (cls, []))[1].append(w)
    _framework_known(nccl_log, known)
    for w in nccl_log.framework_errors:  # PyTorch's "Last error: ... Connect to X failed"
        if nccl_warnings.match(w.message) is None and _CONNECT.search(w.message):
            peers.setdefault(None, []).append(w)
    rows = {w.id: w for w in nccl_warnings.warnings()}
    for (fid, host), warns in known.items():
        yield _known(host, rows[fid], warns, envs.get(host, {}))
    for host, warns in peers.items():
        targets = {m.group("peer") for w in warns if (m := _CONNECT.search(w.message))}
        if len(targets) == 1:
            yield _peer_failure(host, warns)
        else:
            cls = _warn_class(warns[0])
            groups.setdefault((cls.name, host or _NO_HOST), (cls, []))[1].extend(warns)
    for (_, host), (cls, warns) in groups.items():
        _, _, sev, what, why, action, blame = cls
        first = warns[0].message.strip()
        yield finding(
            "nccl.warn", sev, f"{host + ': ' if host else ''}NCCL {what} "
            f"({plural(len(warns), 'WARN')}): {first[:140]}", why, action, blame, NODE,
            [evidence(LOG, [w.line for w in warns[:SHOWN]])],
            occurrences=Occurrences(len(warns)))

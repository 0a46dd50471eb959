"""The steps that the knowledge catalogs give every id of theirs, row by row: each Xid
(``xid.N``, and DCGM's last Xid ``dcgm.xid.N``) from its row of knowledge/xid.csv (NVIDIA's
resolution bucket, the GPU part it names, this project's action), each SXid (``sxid.N``)
from knowledge/sxid.csv's bucket, each message of the job's catalog (``cuda.N``,
``container.*``) from its row's next step, each known NCCL WARN from
knowledge/nccl_warnings.csv. A row added to a catalog has its step without code
(:func:`catalog_repair`); an id with a repair of its own (next_steps/repairs.py's
``BY_ID``) keeps that one."""

from __future__ import annotations

import re

from gputriage.knowledge import nccl_warnings
from gputriage.knowledge.job_messages import CUDA_FAMILY, FRAMEWORK_FAMILY, message
from gputriage.knowledge.xid import XidInfo, sxid_info, xid_info
from gputriage.model import DRAINING_ACTIONS, Action, Finding
from gputriage.next_steps.container_stack import catalog_next
from gputriage.next_steps.hardware import (
    bus_arg,
    gsp,
    hardware_case,
    lost_gpu,
    nvlink,
    pcie,
    remap_check,
    rma,
)
from gputriage.next_steps.host import Host, Repair, dash_i, gpus, serials
from gputriage.next_steps.logs import contained_ecc, crash_loop
from gputriage.text.fields import strict_int

__all__ = ["catalog_repair", "message_id", "sxid_step", "xid_step"]

# codes whose step is their GPU part's (from the catalog's meaning of each)
_MEMORY = frozenset({48, 63, 94, 95, 140, 156, 171, 172})  # ECC, row remap, page retirement
_GSP = frozenset({119, 120})
_NVLINK = frozenset({74, 136, *range(144, 151)})
_PCIE_PATH = frozenset({32, 80})  # corrupted commands arriving over PCIe
_KERNEL_FAULTS = frozenset({13, 31, 43, 69})  # a kernel of the program faulted
_FOLLOWS = re.compile(r"follow-on of ((?:Xid [0-9]{1,3}(?:, )?)+)")
_ASKS = re.compile(r"the driver asks for: (.{1,80}?) \(")


def _code(fid: str) -> int | None:
    return strict_int(fid.rsplit(".", 1)[-1], signed=False)


def _again(code: int, f: Finding, host: Host) -> str:
    return f"if Xid {code} comes back on {gpus(f, host)}, {hardware_case(f, host)}"


def _job_xid(code: int, info: XidInfo, f: Finding, host: Host) -> str:
    """A restart of the job: what the code says of whose fault it is."""
    g = gpus(f, host)
    if code == 45:
        return (f"read the Xid logged before it on {g} (journalctl -k | grep -i xid) and act "
                "on that one; alone it means the process on it was killed or aborted (the "
                "job's own log, the OOM killer: dmesg | grep -i 'killed process'); "
                f"{host.called} needs nothing")
    if code == 109:
        return (f"restart the job; if Xid 109 comes back on {g} under another program, drain "
                f"{host.called} and reset it (nvidia-smi -r{dash_i(f)}), and update the driver "
                "if it follows the resets")
    if code == 137:
        return (f"if NVLink errors (Xid 74, 144-150) were logged on {g} at the same time, it "
                "follows them: act on those; alone, restart the job and look at the peer "
                "access it makes (the GPUs it enables peer access to, NCCL_P2P_LEVEL); "
                f"{host.called} needs nothing")
    if code in _PCIE_PATH:
        return (f"restart the job; if Xid {code} comes back on {g}, check its PCIe path "
                f"before blaming the job (lspci -vv -s {bus_arg(f)} | grep LnkSta; AER "
                "errors: journalctl -k | grep -i aer)")
    if info.nvidia_bucket == "RESTART_VM":
        return (f"restart the VM that owns {g}; if Xid {code} comes back, capture "
                "nvidia-bug-report.sh and send it to NVIDIA support")
    if info.nvidia_bucket == "CONTACT_SUPPORT":
        return (f"restart the job; if Xid {code} comes back on {g}, capture "
                "nvidia-bug-report.sh and send it to NVIDIA support (or the system vendor)")
    debug = (" (compute-sanitizer finds a faulting kernel's access)"
             if code in _KERNEL_FAULTS else "")
    return (f"restart the job: Xid {code} ({info.meaning}) on {g} points at the program; read "
            f"its own error{debug}; {host.called} needs nothing unless other programs hit Xid "
            f"{code} on {g} too, then run dcgmi diag -r 3 on it")


def _drain_xid(code: int, info: XidInfo, f: Finding, host: Host) -> str:
    g = gpus(f, host)
    if code == 79:
        return lost_gpu(f, host)
    if code in (64, 157):
        return rma(f, host)
    if code in _MEMORY:
        return (f"reset {g} (nvidia-smi -r{dash_i(f)}) so that the pending remap takes effect; "
                f"{remap_check(f, host)}; if the remap fails or the errors come back, "
                f"send it for RMA{serials(f, host)}")
    if code in _GSP:
        return gsp(f, host)
    if code in _NVLINK:
        return nvlink(f, host)
    if info.nvidia_bucket == "CHECK_MECHANICALS":
        return (f"check {g}'s auxiliary power cables, its seating and cooling (ipmitool sel "
                "list shows the BMC's power and thermal events)")
    if code == 167 or "PCIe" in info.meaning:
        return pcie(f, host)
    if code in (13, 31, 43):  # several programs fault on this GPU: the GPU is suspect
        return (f"run dcgmi diag -r 3 on {g}; if it fails, {hardware_case(f, host)}")
    return (f"reset {g} (nvidia-smi -r{dash_i(f)}) or reboot; {_again(code, f, host)}")


def _plan_xid(code: int, info: XidInfo, f: Finding, host: Host) -> str:
    g = gpus(f, host)
    if code in _MEMORY:
        return (f"reset {g} while it runs no job (nvidia-smi -r{dash_i(f)}) so that the pending "
                f"remap takes effect; {remap_check(f, host)}")
    if code == 155:
        return (f"find out whether the NVLink was taken down on purpose; if not, reset {g} "
                f"(nvidia-smi -r{dash_i(f)}) and nvidia-smi nvlink -s{dash_i(f)} should show "
                "every link up")
    if code == 159:
        return (f"reset {g} when it is idle if UVM or vGPU runs on it (nvidia-smi "
                f"-r{dash_i(f)}), and read the Xid logged before it for the cause")
    if code == 163:
        return (f"read the power and thermal events around it (nvidia-smi -q -d POWER"
                f"{dash_i(f)}; ipmitool sel list), then reset {g} or reload the driver")
    if code == 157:
        return (f"send {g}{serials(f, host)} for RMA: it has no spare left to retire the next "
                "faulty resource with")
    if code in (164, 165):
        return (f"replace {g}{serials(f, host)} where power smoothing matters: its "
                "power-smoothing circuitry is worn out")
    if code == 168:
        return (f"turn ECC on (nvidia-smi -e 1{dash_i(f)}) so that rows can be remapped, then "
                f"reset {g}; {remap_check(f, host)}")
    if info.action in DRAINING_ACTIONS:  # its own verdict drains: the same repair, planned
        return _drain_xid(code, info, f, host)
    if code in _NVLINK:
        return nvlink(f, host)
    return (f"capture nvidia-bug-report.sh and send it to NVIDIA support (or the system "
            f"vendor) with the Xid {code} lines of {g}")


def _recovery(f: Finding, host: Host) -> str:
    """Xid 154: the driver's own recovery action."""
    m = _ASKS.search(f.title)
    asks = f" ({m.group(1)})" if m else ""
    return (f"read the Xid logged before it on {gpus(f, host)} (it names the cause) and do "
            f"what the driver asks{asks}; nvidia-smi -q{dash_i(f)} shows the recovery action "
            "still pending until then")


def _xid_repair(code: int, info: XidInfo, f: Finding, host: Host) -> str | None:
    follows = _FOLLOWS.search(f.title)
    if code == 45 and follows:  # the teardowns of an Xid the log does not show
        return (f"look earlier in the kernel log (journalctl -k, the previous boot's) for "
                f"{follows.group(1)} on {gpus(f, host)} and act on it: these teardowns follow it")
    if code == 154:
        return _recovery(f, host)
    if code in (13, 31, 43) and (looping := crash_loop(f, host)):
        return looping
    if f.action is Action.RESTART_JOB:
        return contained_ecc(f, host) if code == 94 else _job_xid(code, info, f, host)
    if f.action is Action.RESET_GPU:
        if code in _MEMORY:
            return remap_check(f, host)
        if code in _GSP:
            return gsp(f, host)
        if code in _NVLINK:
            return nvlink(f, host)
        return _again(code, f, host)
    if f.action is Action.DRAIN_AND_REPAIR:
        return _drain_xid(code, info, f, host)
    if f.action is Action.REBOOT_NODE:
        return (f"power it off and on (ipmitool chassis power cycle: a cold boot), undo recent "
                f"hardware or firmware changes; {_again(code, f, host)}")
    if f.action is Action.PLAN_REPAIR:
        return _plan_xid(code, info, f, host)
    if f.action is Action.FIX_SOFTWARE:
        if code == 78:
            return ("install a vGPU manager on the host and a guest driver of one release "
                    f"branch, with a vGPU profile {gpus(f, host)} supports, then start the VM "
                    "again; nvidia-smi vgpu on the host should then list it")
        return (f"update the driver on {host.called} to the latest release of its branch (and "
                f"the GPU firmware with it); if Xid {code} comes back on {gpus(f, host)}, "
                "capture nvidia-bug-report.sh for NVIDIA support")
    if f.action is Action.FIX_CONFIG:
        return ("set every GPU of the NVLink domain to the same confidential-computing mode "
                "and NVLink encryption setting (the platform's CC deployment guide), then "
                f"reset them, {gpus(f, host)} among them")
    return None


def xid_step(f: Finding, host: Host) -> str | None:
    """The step of an Xid finding (``xid.N``; ``dcgm.xid.N``, DCGM's last Xid, which
    the kernel log must confirm first when it is not there)."""
    code = _code(f.id)
    info = xid_info(code) if code is not None else None
    if code is None or info is None:
        return None
    step = _xid_repair(code, info, f, host)
    if f.id.startswith("dcgm.") and "kernel log has it" not in f.explanation and step:
        return (f"find Xid {code} of {gpus(f, host)} in the kernel log (journalctl -k | grep -i "
                "xid: DCGM keeps the last Xid until the driver reloads, so it may be old); if "
                f"it is current there, {step}")
    return step


_SXID_REPAIRS = {  # NVIDIA's bucket -> the repair, inside the action's frame
    "RESET_FABRIC": "stop nvidia-fabricmanager, reset every GPU and NVSwitch together (the "
    "reboot does it) and start it again; if the SXid comes back, capture nvidia-bug-report.sh "
    "and /var/log/fabricmanager.log and open a case for the NVSwitch baseboard",
    "WORKFLOW_NVLINK_POTENTIALY_FATAL_ERR": "find the GPUs behind the switch port (the Xid 74 "
    "lines of the same minute name them) and, if the same port fails again, have that NVLink "
    "path (GPU, baseboard) repaired with nvidia-bug-report.sh attached",
    "RESET_GPU": "find the GPU behind the switch link (the Xid 74 lines of the same minute "
    "name it); if the SXid comes back after the reset, open a case for that GPU or the "
    "baseboard with nvidia-bug-report.sh attached",
    "INVESTIGATE_LINK_SI": "read the link's error counters (nvidia-smi nvlink -e) and the "
    "fabric manager log, and reseat or replace the NVLink cable, tray or baseboard the port "
    "belongs to",
    "CHECK_LINK_MECHANICAL_CONNECTIONS": "reseat the NVLink cables and connectors of the "
    "failing port; nvidia-smi nvlink -s should then show every link up and nvidia-smi nvlink "
    "-e counters stay still",
    "CHECK_THERMALS": "check the NVSwitch tray's cooling (fans, airflow, inlet temperature: "
    "ipmitool sdr type Temperature) and wait for the SXid that ends the over-temperature",
    "RUN_FIELDDIAG": "run NVIDIA's field diagnostics for the baseboard (from the system "
    "vendor) and open a hardware case if they fail",
    "UNEXPECTED_ERR_REPORT_ISSUE": "capture nvidia-bug-report.sh and /var/log/fabricmanager.log "
    "and open a case with NVIDIA or the system vendor for the NVSwitch baseboard; reboot it "
    "before it takes jobs again",
    "CHECK_FM_CONFIG": "compare the fabric manager's partition configuration "
    "(/usr/share/nvidia/nvswitch/fabricmanager.cfg and its log) with the GPUs' fabric state "
    "(nvidia-smi -q | grep -A4 Fabric) and fix the partition the traffic was refused in",
}


def sxid_step(f: Finding, host: Host) -> str | None:
    """The step of an NVSwitch SXid from its catalog row's bucket."""
    code = _code(f.id)
    info = sxid_info(code) if code is not None else None
    if info is None or f.action is Action.NONE:
        return None
    bucket = "UNEXPECTED_ERR_REPORT_ISSUE" if info.bucket == "REPORT_ISSUE" else info.bucket
    text = _SXID_REPAIRS.get(bucket or "")
    if text is not None:
        return text
    return ("match it with the NVLink counters (nvidia-smi nvlink -e) and the fabric manager "
            "log; if this SXid repeats on the same switch or port, capture "
            "nvidia-bug-report.sh and open a case for the NVSwitch baseboard")


def _known_warning(f: Finding, host: Host) -> str | None:
    found = nccl_warnings.row(f.id)
    return found.next if found is not None else None


def message_id(fid: str) -> str:
    """The catalog message of a finding id: ``container.nvml-*`` is NVML's ``nvml.*``
    (rules/container.py), ``cuda.N`` and ``container.*`` are their own."""
    return fid.replace("container.nvml-", "nvml.", 1)


def catalog_repair(fid: str) -> Repair | None:
    """The step a catalog gives the finding id ``fid`` (looked up when asked: a row added
    to a catalog answers at once); None for an id no catalog has a row of."""
    family, _, rest = fid.partition(".")
    if family == "xid" or fid.startswith("dcgm.xid."):
        code = _code(fid)
        return xid_step if code is not None and xid_info(code) is not None else None
    if family == "sxid":
        code = _code(fid)
        return sxid_step if code is not None and sxid_info(code) is not None else None
    if family == "nccl":
        return _known_warning if nccl_warnings.row(fid) is not None else None
    row = message(message_id(fid)) if rest else None
    if row is not None and (family in (CUDA_FAMILY, "container")
                            or row.family == FRAMEWORK_FAMILY):
        return catalog_next  # a CUDA error, the container stack's or a framework's message
    return None

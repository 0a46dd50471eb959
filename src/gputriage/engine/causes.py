"""One cause, one finding: consequences folded into their cause, and per-GPU repeats
of one finding merged into one finding that lists the GPUs.

A lost GPU is one fault, not three criticals (the Xid, the GPU missing from the
driver's list, nvidia-smi's lost handle); a fabric manager that is down is one fault,
not nine. :data:`RELATIONS` declares which finding explains which, each row with why;
:func:`fold` applies it. Pure and deterministic: findings in, findings out, in the
order the rules gave them (a merged finding takes its first member's place).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from gputriage.knowledge.xid import all_xids
from gputriage.model import (
    Blame,
    Evidence,
    Finding,
    Occurrences,
    Scope,
    Severity,
    finding_order,
    inconsistency,
    index_ranges,
)
from gputriage.text.fields import strict_int

__all__ = ["RELATIONS", "URGENCY", "Relation", "fold", "merge_repeats"]

SAME_GPU = "gpu"  # the consequence is on a GPU (bus id) the cause is on
ANYWHERE = "node"  # a node-level cause: it explains the consequence wherever it is


@dataclass(frozen=True)
class Relation:
    """``cause`` explains ``consequence`` (finding ids) where ``match`` says."""

    cause: str
    consequence: str
    match: str  # SAME_GPU | ANYWHERE
    why: str
    cause_at_least: Severity = Severity.OK  # only a cause this severe explains it


# Only certain causality: a row makes a finding disappear from the top level. When a
# consequence has several possible causes, the first row (in this order) whose cause is
# present wins; a cause that is itself a consequence hands everything to its own cause.
RELATIONS: tuple[Relation, ...] = (
    Relation("kernel.pcie-aer", "xid.79", SAME_GPU,
             "an uncorrected error on the GPU's own PCIe link (a surprise link down) is how "
             "a GPU falls off the bus; a critical kernel.pcie-aer is one on a GPU's link",
             Severity.CRITICAL),
    Relation("pcie.hop-degraded", "pcie.speed-degraded", SAME_GPU,
             "a GPU's or NIC's own link that trained down below a downtrained switch uplink "
             "is one fault of the path (the switch, its riser or cable): the hop names it"),
    Relation("pcie.hop-degraded", "pcie.width-degraded", SAME_GPU,
             "a GPU's or NIC's own narrow link below a downtrained switch uplink is one fault "
             "of the path: the hop names it"),
    Relation("pcie.hop-degraded", "kernel.pcie-bandwidth-limited", SAME_GPU,
             "the kernel's boot note that a device's bandwidth is limited by a link above "
             "it is that downtrained hop, seen from the device"),
    Relation("xid.79", "gpu.missing", SAME_GPU,
             "a GPU that fell off the bus stays on the PCI bus, but the driver has dropped it"),
    Relation("xid.79", "nvidia-smi.gpu-lost", SAME_GPU,
             "nvidia-smi cannot open a GPU that fell off the bus"),
    Relation("driver.gsp-firmware-missing", "driver.gpu-init-failed", ANYWHERE,
             "a GPU whose GSP firmware cannot be loaded cannot be initialised; the firmware "
             "file is the module's, missing for every GPU of the node"),
    Relation("driver.gpu-init-failed", "gpu.missing", SAME_GPU,
             "a GPU the driver failed to initialise stays on the PCI bus, unusable"),
    Relation("driver.gpu-init-failed", "nvidia-smi.gpu-lost", SAME_GPU,
             "nvidia-smi cannot open a GPU the driver failed to initialise"),
    Relation("driver.gpu-init-failed", "nvidia-smi.no-devices", ANYWHERE,
             "nvidia-smi lists the GPUs the driver initialised: 'no devices' means none came "
             "up, and the failed initialisation says why"),
    Relation("gpu.missing", "nvidia-smi.gpu-lost", SAME_GPU,
             "nvidia-smi's lost handle is the GPU the driver no longer lists"),
    Relation("fabric.manager-prerequisite", "fabric.manager-inactive", ANYWHERE,
             "the fabric manager of an NVL5+ system does not start without ib_umad"),
    Relation("fabric.manager-prerequisite", "fabric.state-not-completed", ANYWHERE,
             "GPUs register with the fabric only once the fabric manager runs, and it cannot "
             "start without ib_umad"),
    Relation("fabric.manager-inactive", "fabric.state-not-completed", ANYWHERE,
             "GPUs of an NVSwitch system register with the fabric only once the fabric "
             "manager has configured the switches"),
    *(Relation("driver.module-build-failed", c, ANYWHERE,
               "the driver's module did not build for the kernel, so none is loaded (for "
               "nvidia-smi to talk to); a critical module-build-failed is the driver's own",
               Severity.CRITICAL)
      for c in ("driver.not-loaded", "nvidia-smi.cannot-communicate")),
    *(Relation("driver.install-failed", c, ANYWHERE,
               "the installer could not load the module it installed, so none is loaded (for "
               "nvidia-smi to talk to)")
      for c in ("driver.not-loaded", "nvidia-smi.cannot-communicate")),
    Relation("driver.no-adapter-probed", "driver.install-failed", ANYWHERE,
             "a module that finds no GPU free to bind fails to load with 'No such device', "
             "and the installer stops there"),
    Relation("driver.version-mismatch", "nvidia-smi.nvml-init-failed", ANYWHERE,
             "NVML refuses to start when the library and the loaded module differ"),
    Relation("driver.version-mismatch", "cuda.device-query-failed", ANYWHERE,
             "libcuda refuses to start when it and the loaded module differ"),
    Relation("driver.not-loaded", "nvidia-smi.cannot-communicate", ANYWHERE,
             "nvidia-smi has no driver to talk to"),
    Relation("driver.not-loaded", "nvidia-smi.nvml-init-failed", ANYWHERE,
             "NVML has no driver to talk to"),
    Relation("driver.not-loaded", "devnode.missing", ANYWHERE,
             "the /dev/nvidia* nodes are made when the module loads"),
    Relation("driver.version-mismatch", "container.hook-driver-mismatch", ANYWHERE,
             "the container hook's NVML refuses the mismatched module as nvidia-smi does"),
    Relation("driver.version-mismatch", "container.nvml-version-mismatch", ANYWHERE,
             "the job's NVML refuses the mismatched module as nvidia-smi does"),
    Relation("driver.not-loaded", "container.hook-driver-not-loaded", ANYWHERE,
             "the container hook finds no driver on the host"),
    Relation("driver.not-loaded", "container.nvml-driver-not-loaded", ANYWHERE,
             "the job's NVML has no driver to talk to"),
    Relation("nvidia-smi.nvml-init-failed", "container.nvml-os-blocked", ANYWHERE,
             "nvidia-smi's NVML error and the program's are one blocked control device"),
    Relation("container.hook-nvml-error", "container.nvml-init-failed", ANYWHERE,
             "NVML fails inside the container for the reason it fails in the hook on the "
             "host"),
    # Xid 154 is the driver's summary of the recovery action an earlier error on the GPU
    # needs ("Node Reboot Required" after an Xid 79): a consequence, its action the cause's
    *(Relation(f"xid.{x.code}", "xid.154", SAME_GPU,
               "Xid 154 reports the recovery action the driver now asks for after an "
               "earlier Xid on the same GPU: that Xid is the cause, 154 its consequence")
      for x in all_xids() if x.code != 154 and x.blame is Blame.NODE),
    # every GPU gone from the bus: one fault, one power-cycle. The Xid 79s are how they
    # left (the finding of the whole node carries them), and a module that finds no GPU
    # to bind leaves nvidia-smi no driver to talk to
    Relation("host.gpus-gone", "xid.79", ANYWHERE,
             "the GPUs gone from the PCI bus are the ones that fell off it (Xid 79) and did "
             "not come back: one fault, one power-cycle of the node"),
    *(Relation("host.gpus-gone", c, ANYWHERE,
               "with no NVIDIA GPU on the PCI bus the kernel module has nothing to bind, so "
               "no driver answers nvidia-smi")
      for c in ("nvidia-smi.cannot-communicate", "driver.not-loaded",
                "nvidia-smi.no-devices", "devnode.missing")),
    Relation("xid.48", "xid.63", SAME_GPU,
             "a double-bit error makes the driver remap the row (or retire the page), "
             "which Xid 63 records"),
    Relation("xid.48", "xid.94", SAME_GPU,
             "the double-bit error was contained: Xid 94 names the process it ended, the GPU "
             "went on serving the others"),
    Relation("xid.48", "xid.171", SAME_GPU,
             "Xid 171 details the uncorrectable DRAM error that Xid 48 reports"),
    Relation("xid.64", "memory.remap-failed", SAME_GPU,
             "nvidia-smi's failed row remap is the one Xid 64 logged"),
    *(Relation("memory.uncorrectable", c, SAME_GPU,
               "an uncorrectable error since the last reset marks its page for retirement "
               "(or its row for remapping); the reset that error calls for applies it",
               Severity.CRITICAL)
      for c in ("memory.retired-pages-pending", "memory.remap-pending")),
    Relation("pcie.width-degraded", "kernel.pcie-bandwidth-limited", SAME_GPU,
             "the kernel's 'bandwidth limited' line reports the narrow link"),
    Relation("pcie.speed-degraded", "kernel.pcie-bandwidth-limited", SAME_GPU,
             "the kernel's 'bandwidth limited' line reports the slow link"),
    Relation("nccl.socket-transport", "nccl.busbw-low", ANYWHERE,
             "inter-node collectives over TCP sockets run well below the RDMA rate"),
    Relation("driver.version-mismatch", "cuda.driver-mismatch", ANYWHERE,
             "the job's error 803 is libcuda refusing a kernel module of another version"),
    Relation("fabric.manager-inactive", "cuda.fabric-not-ready", ANYWHERE,
             "CUDA returns 802 on an NVSwitch system until the fabric manager has "
             "configured the fabric"),
    Relation("fabric.state-not-completed", "cuda.fabric-not-ready", ANYWHERE,
             "CUDA returns 802 while the GPUs' fabric registration is not complete"),
    Relation("driver.not-loaded", "cuda.no-device", ANYWHERE,
             "CUDA sees no device when the driver is not loaded"),
    *(Relation(c, "cuda.no-device", ANYWHERE,
               "the container hook runs CUDA on the host before the container starts: its "
               "error is the same missing device")
      for c in ("container.hook-cuda-error", "container.hook-driver-not-loaded")),
    *(Relation(f"xid.{code}", "cuda.kernel-fault", ANYWHERE,
               "a hardware Xid in the window ended the job's kernel")
      for code in (79, 48, 94, 95, 64, 63)),
    *(Relation(c, "cuda.ecc-uncorrectable", ANYWHERE,
               "CUDA's uncorrectable ECC error is the memory error the driver reported")
      for c in ("xid.48", "xid.94", "xid.95", "xid.63", "xid.64", "memory.uncorrectable",
                "dcgm.ecc-uncorrectable")),
    *(Relation(c, "cuda.nvlink-uncorrectable", ANYWHERE,
               "CUDA's uncorrectable NVLink error is the link error the driver reported")
      for c in ("xid.74", "nvlink.errors", "nvlink.links-down")),
    # the container stack's configuration (rules/container_config.py) and the job's errors
    *(Relation("container.cdi-stale-spec", c, ANYWHERE,
               "a CDI spec of the previous driver mounts library files that are gone")
      for c in ("container.mount-missing-file", "container.cdi-host-device-missing")),
    Relation("container.runtime-daemon-mismatch", "container.unknown-runtime", ANYWHERE,
             "the daemon that refused the runtime reads another daemon.json than the one "
             "that registers it"),
    Relation("container.runtime-nvidia-missing", "container.unknown-runtime", ANYWHERE,
             "an engine without the nvidia runtime refuses --runtime=nvidia"),
    Relation("container.toolkit-cdi-mode-without-spec", "container.cdi-unresolvable", ANYWHERE,
             "in CDI mode with no NVIDIA spec no nvidia.com/gpu device resolves"),
    Relation("container.capabilities-no-compute", "container.no-compute-capability",
             ANYWHERE, "the container was given no compute capability, so no libcuda"),
    Relation("persistence.daemon-stopped", "persistence.daemon-inactive", ANYWHERE,
             "the unit is inactive because the daemon's last run ended, as its journal says"),
    Relation("persistence.daemon-stopped", "persistence.off", ANYWHERE,
             "the GPUs lost persistence mode when the daemon that held it stopped"),
    # Kubernetes: what the device plugin or the operator says explains what the node
    # advertises, and a node that advertises no GPU explains the GPU pods left Pending
    *(Relation(c, "k8s.gpus-not-advertised", ANYWHERE,
               "a node advertises the GPUs its device plugin registers; this is why it "
               "registers none") for c in (
        "k8s.plugin-nvml-missing", "k8s.plugin-no-nvml-platform",
        "k8s.plugin-incompatible-strategy", "k8s.plugin-stale-nvml",
        "k8s.plugin-unregistered", "k8s.operator-driver-failed", "k8s.operator-validation-stuck",
        "k8s.operator-operand-failing")),
    *(Relation(c, "k8s.gpus-short", ANYWHERE,
               "the kubelet stops offering the devices the plugin marked unhealthy")
      for c in ("k8s.plugin-stale-nvml", "k8s.plugin-devices-unhealthy")),
    # the GPU operator: operands wait for the validator, which waits for the driver
    *(Relation(c, "k8s.operator-operand-failing", ANYWHERE,
               "the device plugin, GFD and dcgm-exporter wait for the driver and the toolkit "
               "to be validated") for c in ("k8s.operator-driver-failed",
                                            "driver.container-modules-in-use",
                                            "k8s.operator-validation-stuck")),
    Relation("driver.container-modules-in-use", "k8s.operator-validation-stuck", ANYWHERE,
             "the validator's first step checks the driver the driver container could not "
             "load"),
    Relation("k8s.operator-driver-failed", "k8s.operator-validation-stuck", ANYWHERE,
             "the validator's first step checks the driver the driver container failed to "
             "install"),
    # issue 31 part D: the validator's CUDA error and a sharing config not in effect
    *(Relation("k8s.validator-cuda-error", c, ANYWHERE,
               "the operands and the GPUs wait for the validation the CUDA error stops")
      for c in ("k8s.operator-operand-failing", "k8s.gpus-not-advertised")),
    Relation("k8s.sharing-not-applied", "k8s.sharing-time-sliced", ANYWHERE,
             "the config would share the GPUs, but the plugin does not run with it"),
    Relation("k8s.plugin-nvml-missing", "container.nvml-library-not-found", ANYWHERE,
             "the plugin's container is the one that cannot load libnvidia-ml"),
    *(Relation(c, consequence, ANYWHERE,
               "the device plugin's NVML fails on the node as nvidia-smi's does")
      for c in ("driver.version-mismatch", "driver.not-loaded")
      for consequence in ("k8s.plugin-nvml-missing", "k8s.gpus-not-advertised")),
    *(Relation(c, "k8s.pending-insufficient-gpu", ANYWHERE,
               "the GPU pods wait for GPUs that a node has but does not offer")
      for c in ("k8s.gpus-not-advertised", "k8s.gpus-short", "k8s.plugin-unregistered")),
    # the kubelet refuses GPU pods (rules/k8s_allocate.py) for a GPU lost on the node
    *(Relation(c, "k8s.allocate-gpu-lost", ANYWHERE,
               "the device plugin's allocation fails on the GPU the node lost")
      for c in ("xid.79", "nvidia-smi.gpu-lost", "gpu.missing")),
    Relation("k8s.plugin-devices-unhealthy", "k8s.allocate-unhealthy-devices", ANYWHERE,
             "the kubelet refuses the devices the plugin marked unhealthy"),
    Relation("k8s.sharing-renamed", "k8s.pending-insufficient-gpu", ANYWHERE,
             "the pod asks for a name the shared GPUs no longer go by"),
    # DCGM's diagnostic (rules/dcgm_diag.py): what kept it from judging the GPUs
    *(Relation(c, "dcgm.cuda-not-ready", ANYWHERE,
               "the diagnostic's cuInit returns 'system not yet initialized' (802) until the "
               "fabric is configured") for c in ("fabric.manager-inactive",
                                                 "fabric.state-not-completed",
                                                 "cuda.fabric-not-ready")),
    *(Relation(c, "dcgm.persistence-off", ANYWHERE,
               "DCGM refuses to test GPUs without persistence mode, which is off")
      for c in ("persistence.daemon-stopped", "persistence.off")),
    *(Relation(c, "dcgm.pcie-failed", SAME_GPU,
               "the PCIe bandwidth test fails on a link trained below its width or speed",
               Severity.WARNING) for c in ("pcie.width-degraded", "pcie.speed-degraded")),
    *(Relation("dcgm.install-problem", c, ANYWHERE,
               "DCGM's tests fail or skip when its plugins, config or packages are broken")
      for c in ("dcgm.internal-error", "dcgm.no-result")),
    # DCGM on the host and its exporter (rules/dcgm_host.py, dcgm_exporter.py): the same
    # fact nvidia-smi gives folds under nvidia-smi's finding; DCGM blind for the node's cause
    *(Relation(c, d, SAME_GPU, "DCGM reads the same counter nvidia-smi does")
      for c, d in (("memory.uncorrectable", "dcgm.ecc-uncorrectable"),
                   ("memory.correctable-high", "dcgm.ecc-correctable-high"),
                   ("memory.remap-failed", "dcgm.remap-failed"),
                   ("memory.remap-exhausting", "dcgm.remap-failed"),
                   ("memory.remap-pending", "dcgm.remap-pending"),
                   ("pcie.replays", "dcgm.pcie-replays"),
                   ("nvlink.errors", "dcgm.nvlink-counters"))),
    Relation("nvlink.links-down", "dcgm.nvlink-down", ANYWHERE,
             "dcgmi and nvidia-smi report the same links down"),
    *(Relation(c, d, SAME_GPU, "DCGM's health watch and nvidia-smi read the same counters")
      for c, d in (("memory.uncorrectable", "dcgm.health-memory"),
                   ("dcgm.ecc-uncorrectable", "dcgm.health-memory"),
                   ("nvlink.errors", "dcgm.nvlink-errors"),
                   ("nvlink.errors", "dcgm.health-nvlink"),
                   ("pcie.replays", "dcgm.health-pcie"))),
    *(Relation(c, "dcgm.clock-events", SAME_GPU,
               "DCGM exports the clock-event reasons nvidia-smi shows")
      for c in ("clocks.hw-thermal-slowdown", "clocks.hw-power-brake", "clocks.hw-slowdown",
                "clocks.sw-thermal-slowdown")),
    *(Relation(f"xid.{x.code}", f"dcgm.xid.{x.code}", SAME_GPU,
               "DCGM's last Xid of the GPU is the one the kernel logged")
      for x in all_xids()),
    *(Relation(c, "dcgm.gpu-count-unexpected", ANYWHERE,
               "DCGM lists the GPUs the driver has; the missing one is the node's")
      for c in ("gpu.count-unexpected", "gpu.board-short", "gpu.missing", "expect.gpu-count")),
    Relation("dcgm.too-old", "dcgm.gpus-unseen", ANYWHERE,
             "a DCGM release that predates the GPUs does not list all of them"),
    *(Relation(c, "dcgm.hostengine-nvml-failed", ANYWHERE,
               "nv-hostengine needs NVML, which fails for the program or container itself")
      for c in ("driver.version-mismatch", "driver.not-loaded", "container.hook-nvml-error",
                "container.nvml-init-failed", "nvidia-smi.nvml-init-failed")),
    *(Relation(c, "dcgm.hostengine-unreachable", ANYWHERE,
               "a host engine that cannot initialise NVML is not there to answer dcgmi")
      for c in ("dcgm.hostengine-nvml-failed", "container.hook-nvml-error",
                "driver.version-mismatch", "driver.not-loaded")),
)

_BY_CONSEQUENCE: dict[str, tuple[Relation, ...]] = {}
for _rel in RELATIONS:
    _BY_CONSEQUENCE[_rel.consequence] = (*_BY_CONSEQUENCE.get(_rel.consequence, ()), _rel)


# How soon an on-call acts on a finding among those of the same severity and action
# (model.finding_order), higher first; every other finding 0. Cluster settings that all
# read "warning, fix the configuration" differ in what they cost while unfixed.
URGENCY: dict[str, int] = {
    # research pods evict production's GPU pods whenever the shared pool fills
    "k8s.lint-preempts-production": 50,
    # every start (rollout, drain, scale-up) takes minutes and saturates the shared link
    "k8s.lint-weights-herd": 40,
    # the kubelet kills the server before it has loaded: it never serves
    "k8s.lint-probe-vs-load": 40,
    # one namespace can take the whole pool: production's next pod stays Pending
    "k8s.lint-pool-no-quota": 30, "k8s.lint-pool-no-priority": 30,
    # a budget that allows no eviction blocks every drain and driver upgrade
    "k8s.lint-pdb-blocks-drain": 25,
    # a re-pull of a moving tag at every start
    "k8s.lint-pull-always": 20,
    # a risk at the next disruption, or a slower scale-up
    "k8s.lint-no-pdb": 10, "k8s.lint-hpa-cpu": 10,
}


def fold(findings: Sequence[Finding]) -> list[Finding]:
    """The findings with each consequence folded into its cause, then each finding
    repeated on several GPUs merged into one (at the top level and among a cause's
    consequences), each with its urgency."""
    return [replace(f, urgency=URGENCY[f.id]) if f.id in URGENCY else f
            for f in merge_repeats(attach(findings))]


# --- consequences ------------------------------------------------------------------------

def attach(findings: Sequence[Finding]) -> list[Finding]:
    """The findings with every consequence moved into its root cause's
    ``consequences``; a cause takes the worst severity of what it explains."""
    by_id: dict[str, list[int]] = {}
    for i, f in enumerate(findings):
        by_id.setdefault(f.id, []).append(i)
    parent: dict[int, int] = {}
    for i, f in enumerate(findings):
        for rel in _BY_CONSEQUENCE.get(f.id, ()):
            cause = next((j for j in by_id.get(rel.cause, ())
                          if j != i and explains(rel, findings[j], f)), None)
            if cause is not None:
                parent[i] = cause
                break
    children: dict[int, list[int]] = {}
    for i in sorted(parent):
        root = _root(i, parent)
        if root != i:
            children.setdefault(root, []).append(i)
    folded = {i for kids in children.values() for i in kids}
    return [_with_consequences(f, [findings[k] for k in children[i]]) if i in children else f
            for i, f in enumerate(findings) if i not in folded]


def explains(rel: Relation, cause: Finding, consequence: Finding) -> bool:
    """Whether ``cause`` explains ``consequence`` under ``rel``: the same status (history
    never explains a current failure), not after it, and on its GPU where that matters."""
    if (cause.status is not consequence.status or _after(cause, consequence)
            or cause.severity.rank < rel.cause_at_least.rank):
        return False
    if rel.match == SAME_GPU:
        return bool(_buses(cause) & _buses(consequence))
    return True


def _root(i: int, parent: dict[int, int]) -> int:
    """The cause at the top of ``i``'s chain (``i`` itself on a cycle)."""
    seen, node = {i}, i
    while node in parent:
        node = parent[node]
        if node in seen:
            return i
        seen.add(node)
    return node


def _buses(f: Finding) -> set[str]:
    """The bus ids of the GPUs, NICs and other PCI devices a finding covers (a device
    the input does not class, as a kernel line names it, is matched by its bus id)."""
    return {s.pci_bus_id.lower() for s in f.scopes
            if s.kind in ("gpu", "nic", "device") and s.pci_bus_id}


def _when(f: Finding) -> datetime | None:
    first = f.occurrences.first if f.occurrences else None
    try:
        return datetime.fromisoformat(first) if first else None
    except ValueError:
        return None  # a time as printed: no order to rely on


def _after(cause: Finding, consequence: Finding) -> bool:
    """Whether the cause first happened after the consequence did (both times known)."""
    a, b = _when(cause), _when(consequence)
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return False
    return a > b


def _with_consequences(cause: Finding, kids: list[Finding]) -> Finding:
    """``cause`` carrying ``kids``; raised to the worst of them, with that one's action
    (and blame where the cause's would not fit the action)."""
    worst = max(kids, key=lambda k: k.severity.rank)
    if worst.severity.rank > cause.severity.rank:
        blame = cause.blame
        if inconsistency(worst.severity, worst.action, blame):
            blame = worst.blame
        cause = replace(cause, severity=worst.severity, action=worst.action, blame=blame)
    return replace(cause, consequences=tuple(sorted((*cause.consequences, *kids),
                                                    key=finding_order)))


# --- per-GPU repeats ---------------------------------------------------------------------

def merge_repeats(findings: Iterable[Finding]) -> list[Finding]:
    """Findings with the same id, severity, action, blame and status on different GPUs
    become one: ``scope`` the first GPU, ``also`` the others, the title naming them."""
    groups: dict[tuple, list[Finding]] = {}
    for n, f in enumerate(findings):
        key = ((f.id, f.severity, f.action, f.blame, f.status) if f.scope.kind == "gpu"
               else (n,))
        groups.setdefault(key, []).append(f)
    out = []
    for members in groups.values():
        if len(members) == 1:
            f = members[0]
            out.append(replace(f, consequences=tuple(merge_repeats(f.consequences)))
                       if len(f.consequences) > 1 else f)
        else:
            out.append(_merge(sorted(members, key=_gpu_order)))
    return out


def _gpu_order(f: Finding) -> tuple:
    s = f.scope
    return (s.gpu_index is None, s.gpu_index or 0, s.pci_bus_id or "", s.uuid or "")


def _gpu_key(s: Scope) -> str:
    if s.pci_bus_id:
        return s.pci_bus_id.lower()
    return f"#{s.gpu_index}" if s.gpu_index is not None else (s.uuid or s.label())


def _merge(members: list[Finding]) -> Finding:
    first = members[0]
    scopes: dict[str, Scope] = {}
    for f in members:
        for s in f.scopes:
            scopes.setdefault(_gpu_key(s), s)
    gpus = list(scopes.values())
    refs = tuple(dict.fromkeys(r for f in members for r in f.references))
    return replace(
        first, title=merged_title(members, gpus) if len(gpus) > 1 else first.title,
        also=tuple(gpus[1:]), evidence=_merge_evidence(members), references=refs,
        occurrences=_merge_occurrences(members),
        consequences=tuple(merge_repeats(c for f in members for c in f.consequences)))


def _merge_evidence(members: list[Finding]) -> tuple[Evidence, ...]:
    """Each block once, noting the GPUs it shows."""
    blocks: dict[tuple[str, tuple[str, ...], str | None], list[Scope]] = {}
    for f in members:
        for e in f.evidence:
            blocks.setdefault((e.source, e.lines, e.note), []).append(f.scope)
    out = []
    for (source, lines, note), scopes in blocks.items():
        where = gpus_text(scopes)
        out.append(Evidence(source, lines, f"{where}: {note}" if note else where))
    return tuple(out)


def _merge_occurrences(members: list[Finding]) -> Occurrences | None:
    occ = [f.occurrences for f in members if f.occurrences is not None]
    if not occ:
        return None
    firsts = [o.first for o in occ if o.first]
    lasts = [o.last for o in occ if o.last]
    return Occurrences(sum(o.count for o in occ), min(firsts) if firsts else None,
                       max(lasts) if lasts else None, any(o.current_boot for o in occ))


# --- titles --------------------------------------------------------------------------------

_INLINE, _BRACKET, _EVENTS = "\x00", "\x01", "\x02"  # placeholders in a title template
_MODEL = r"(?: \((?![0-9])[^()]*\))?"  # " (NVIDIA H100 80GB HBM3)" after a GPU's label
_COUNT = re.compile(r"\b([0-9]+) events?\b")
_MAX_VARIANTS = 3  # differing words shown at most ("a / b / c / ...")
_MAX_NAMED = 8  # bus ids named in a title at most


def gpus_text(scopes: Sequence[Scope]) -> str:
    """``GPU 3``, ``GPUs 0-7``, ``GPUs 0000:9a:00.0, 0000:ab:00.0``."""
    keyed = {_gpu_key(s): s for s in scopes}
    unique = list(keyed.values())
    return ("GPU " if len(unique) == 1 else "GPUs ") + _gpu_list(unique)


def _gpu_list(scopes: Sequence[Scope]) -> str:
    """Indexes as ranges when every GPU has its own, else bus ids (or labels)."""
    indexes = {s.gpu_index for s in scopes if s.gpu_index is not None}
    if len(indexes) == len(scopes):
        return index_ranges(indexes)
    names = [s.pci_bus_id or s.label() for s in scopes]
    if len(names) > _MAX_NAMED:
        return ", ".join(names[:_MAX_NAMED]) + f" and {len(names) - _MAX_NAMED} more"
    return ", ".join(names)


def _mention(scope: Scope) -> re.Pattern[str]:
    """The ways a title names the GPU of ``scope``: ``GPU 4 (0000:9a:00.0)``,
    ``GPU 6 0000:ba:00.0 (model)``, ``GPU 0 (model)``, ``GPU 0000:9a:00.0``, a bus id."""
    bus = re.escape(scope.pci_bus_id) if scope.pci_bus_id else None
    alts = []
    if scope.gpu_index is not None:
        with_bus = rf"(?: \(?{bus}\)?)?" if bus else ""
        alts.append(rf"(?P<inline>\bGPU ?{scope.gpu_index}\b{with_bus}{_MODEL})")
    if bus:
        alts += [rf"(?P<gpu>\bGPU {bus}{_MODEL})", rf"(?P<bracket>\({bus}\))",
                 rf"(?P<bare>{bus})"]
    return re.compile("|".join(alts) or r"(?!)", re.IGNORECASE)


def _template(f: Finding) -> tuple[str, int]:
    """The title with its GPU and its event count replaced by placeholders, and the count."""
    title, count = f.title, 0
    m = _mention(f.scope).search(title)
    if m:
        mark = _BRACKET if m.lastgroup == "bracket" else _INLINE
        title = title[:m.start()] + mark + title[m.end():]
    counts = list(_COUNT.finditer(title))
    if len(counts) == 1 and (n := strict_int(counts[0].group(1))) is not None:
        count = n
        title = title[:counts[0].start()] + _EVENTS + title[counts[0].end():]
    return title, count


def merged_title(members: Sequence[Finding], gpus: Sequence[Scope]) -> str:
    """One title for a finding repeated on ``gpus``, derived from the members' titles:
    ``NVLink fabric state In Progress (status N/A) on 8 GPUs (0-7)``,
    ``Xid 119 on 2 GPUs (0001:6c:00.0, 0001:96:00.0): GSP firmware RPC timeout (2 events)``."""
    shapes = [_template(f) for f in members]
    text = _common([t for t, _ in shapes])
    total = sum(n for _, n in shapes)
    text = text.replace(_EVENTS, f"{total} event{'s' if total != 1 else ''}")
    phrase = f"{len(gpus)} GPUs ({_gpu_list(gpus)})"
    if _BRACKET in text:
        return text.replace(_BRACKET, f"({len(gpus)} GPUs: {_gpu_list(gpus)})", 1)
    if _INLINE not in text:
        return f"{text} on {phrase}"
    before, after = text.split(_INLINE, 1)
    if before:
        return before + phrase + after
    if after.startswith(": "):
        return f"{after[2:]} on {phrase}"
    return phrase + re.sub(r"^ (is|has|was) ",
                           lambda m: {"is": " are ", "has": " have ", "was": " were "}[m[1]],
                           after)


def _common(templates: list[str]) -> str:
    """One template for all: the shared words, the differing middle as ``a / b``."""
    distinct = list(dict.fromkeys(templates))
    if len(distinct) == 1:
        return distinct[0]
    words = [re.split(r"(\s+)", t) for t in distinct]
    shortest = min(len(w) for w in words)
    head = 0
    while head < shortest and len({w[head] for w in words}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head and len({w[-1 - tail] for w in words}) == 1:
        tail += 1
    middles = list(dict.fromkeys("".join(w[head:len(w) - tail]) for w in words))
    if any(not m.strip() or _INLINE in m or _BRACKET in m or _EVENTS in m for m in middles):
        return distinct[0]  # the differences straddle the GPU (or one has none): the first's
    shown = " / ".join(middles[:_MAX_VARIANTS])
    if len(middles) > _MAX_VARIANTS:
        shown += " / ..."
    start, end = "".join(words[0][:head]), "".join(words[0][len(words[0]) - tail:])
    return start + shown + end

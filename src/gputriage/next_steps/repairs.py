"""The repairs by finding id: what fixes a finding (reseat, reinstall, reload), with the
versions, GPUs and commands its host names. Every id a rule can produce has its own
row: in a table of its area (hardware, node software, the job's CUDA and containers,
the cluster, DCGM, logs; :data:`BY_ID` joins them) or in its catalog's row
(next_steps/catalogs.py: each Xid, SXid, CUDA, container and NCCL WARN message), or it
is one that only reports (next_steps/informational.py). ``repair`` looks one up."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gputriage.model import Finding
from gputriage.next_steps.catalogs import catalog_repair
from gputriage.next_steps.cluster import REPAIRS as CLUSTER
from gputriage.next_steps.container_stack import REPAIRS as CONTAINER_STACK
from gputriage.next_steps.cuda_jobs import REPAIRS as CUDA_JOBS
from gputriage.next_steps.hardware import REPAIRS as HARDWARE
from gputriage.next_steps.host import Host, Repair, dash_i, what
from gputriage.next_steps.logs import REPAIRS as LOG_REPAIRS
from gputriage.next_steps.monitoring import REPAIRS as MONITORING
from gputriage.next_steps.nccl import REPAIRS as NCCL
from gputriage.next_steps.node_software import REPAIRS as NODE_SOFTWARE
from gputriage.text.fields import strict_int

__all__ = ["BY_ID", "joined", "repair", "repair_of"]


def _mig_instances(f: Finding, host: Host) -> str:
    gpu = f" -i {f.scope.gpu_index}" if f.scope.gpu_index is not None else ""
    return (f"create the MIG instances {host.called} is meant to have: nvidia-smi mig{gpu} -lgip "
            f"lists the profiles, nvidia-smi mig{gpu} -cgi PROFILE[,PROFILE...] -C creates GPU "
            "and compute instances (under the GPU operator, set the node's nvidia.com/mig.config"
            " label and let mig-manager apply it), and nvidia-smi -L should then list the MIG "
            f"devices; if whole GPUs are wanted instead, turn MIG off (nvidia-smi{gpu} -mig 0, "
            "then reset the GPU)")


def _acs(f: Finding, host: Host) -> str:
    ports = re.findall(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", f.title)
    each = f"for {', '.join(ports)}" if ports else "for each bridge that shows it"
    return ("turn PCIe ACS off on " + host.called + ": in the BIOS (its ACS / PCIe access "
            "control setting; VT-d/IOMMU off or iommu=pt on the kernel command line where "
            f"nothing needs the isolation), or until the next boot {each}: setpci -s BUS "
            "ECAP_ACS+6.w=0000; sudo lspci -vvv | grep ACSCtl should then show SrcValid- "
            "ReqRedir- CmpltRedir-, and a P2P test (nccl-tests all_reduce_perf over the "
            "node's GPUs) should then finish at full bandwidth")


def _permissions(f: Finding, host: Host) -> str:
    return ("let the user or container open the GPUs: ls -l /dev/nvidia* (mode 0666, or a "
            "group the jobs' users are in) and, in a container, the NVIDIA runtime's device "
            "access (--gpus, the device plugin)")


def _weights(f: Finding, host: Host) -> str:
    if f.id == "weights.local-nvme-short":
        return ("free space on the local NVMe volume (df -h; old checkpoints, images: crictl "
                "rmi --prune) or stage on a larger one, then copy the weights there once")
    return ("stage the weights on local NVMe ahead of the start (a node-local cache or a "
            "pre-pull DaemonSet) and point the loader there; gputriage weights --replicas N "
            "--link RATE shows what it saves")


def _gpu_busy(f: Finding, host: Host) -> str:
    on = what(f, host)
    return (f"find what holds {on} (nvidia-smi --query-compute-apps=pid,process_name "
            "--format=csv) and its compute mode (nvidia-smi -q -d COMPUTE); stop the "
            "leftover process or set the mode to Default for the run (nvidia-smi -c 0), then "
            "rerun dcgmi diag on the idle GPU: only that run's result says anything of the "
            "hardware")


def _persistence(f: Finding, host: Host) -> str:
    if f.id == "persistence.daemon-inactive" or f.title.endswith("not started again"):
        return ("start the persistence daemon: systemctl enable --now nvidia-persistenced; "
                "journalctl -u nvidia-persistenced -b says why it stopped")
    if f.id == "persistence.daemon-stopped":
        return ("fix the nvidia-persistenced unit (Type=forking with its PIDFile, "
                "TimeoutStartSec), then systemctl restart nvidia-persistenced and check "
                "nvidia-smi -q | grep Persistence shows Enabled")
    return (f"turn persistence on for {what(f, host)}: systemctl enable --now "
            f"nvidia-persistenced (or nvidia-smi -pm 1{dash_i(f)})")


def _hugepages(f: Finding, host: Host) -> str | None:
    asked = _hugepages_asked(host.fact("host_cmdline"))
    for pool in host.fact("host_hugepages") or ():
        want = asked.get(pool.size_kb)
        if want is not None and pool.nr is not None and pool.nr < want:
            path = f"/sys/kernel/mm/hugepages/hugepages-{pool.size_kb}kB/nr_hugepages"
            return (f"reserve the {want} pages of {pool.size_kb} kB the kernel command line "
                    f"asks for (it has {pool.nr}): echo {want} > {path} now (memory may be "
                    "too fragmented to get them all), else reboot to reserve them at boot; "
                    "grep Huge /proc/meminfo shows the pool")
    return None


def _hugepages_asked(cmdline: Any) -> dict[int, int]:
    """Pages asked for on the kernel command line, by page size in kB."""
    sizes = {"2M": 2048, "2048K": 2048, "1G": 1048576, "1048576K": 1048576}
    asked: dict[int, int] = {}
    size = 2048
    params = list(getattr(cmdline, "params", ()) or ())
    for key, value in params:
        if key == "default_hugepagesz" and value:
            size = sizes.get(value.upper(), size)
    for key, value in params:
        if key == "hugepagesz" and value:
            size = sizes.get(value.upper(), size)
        elif key == "hugepages" and (count := strict_int(value, signed=False)) is not None:
            asked[size] = count
    return asked


def _nic_far(f: Finding, host: Host) -> str:
    nic = re.search(r"\bmlx5_[0-9]+\b", f.title) or re.search(r"\bNIC[0-9]+\b", f.title)
    card = nic.group(0) if nic else "the HCA"
    return (f"give the rank on {what(f, host)} a NIC on its own CPU socket (NCCL_IB_HCA, the "
            f"rail mapping) or move {card} to a slot on that socket; nvidia-smi topo -m should "
            "then show PIX, PXB or NODE between them")


def _numa_balancing(f: Finding, host: Host) -> str:
    return ("turn automatic NUMA balancing off: sysctl -w kernel.numa_balancing=0, and keep it "
            "off in /etc/sysctl.d/")


def _shm(f: Finding, host: Host) -> str:
    return ("give the job a larger /dev/shm (docker or podman --shm-size, a Kubernetes "
            "emptyDir of medium Memory on /dev/shm) and restart it")


def _nccl_version(f: Finding, host: Host) -> str:
    return ("run one NCCL version on every rank (the same container image or module on every "
            "node) and restart the job")


def _expected(f: Finding) -> str | None:
    """What the expectations file states, as the finding's title quotes it."""
    m = re.search(r"\bexpected (\S+(?: or later)?)", f.title)
    return m.group(1).rstrip(",;") if m else None


def _expect_driver(f: Finding, host: Host) -> str:
    want = _expected(f) or "expected"
    return (f"install the {want} driver (kernel module and userspace together, and the "
            f"fabric manager of the same version where NVSwitches are) on {host.called}, then "
            "reboot; nvidia-smi and /proc/driver/nvidia/version should both show it")


def _expect_cuda(f: Finding, host: Host) -> str:
    want = _expected(f) or "the expected version"
    return (f"install a driver that supports CUDA {want} on {host.called}, then reboot; "
            "nvidia-smi shows the CUDA version the driver supports")


def _expect_model(f: Finding, host: Host) -> str:
    return ("compare nvidia-smi -L with the node's record: replace the swapped board, or "
            "correct /etc/gputriage/expect.toml (or the node's pool) if the node is meant "
            "to hold these GPUs")


def _expect_switches(f: Finding, host: Host) -> str:
    return ("power-cycle it; if lspci -d 10de: still lists fewer NVSwitches than "
            "expect.toml states, have the NVSwitch baseboard repaired")


def _expect_ib(f: Finding, host: Host) -> str:
    return ("check the cable, transceiver and switch port of each port it names (ibstat; the "
            "switch's port counters) and replace what fails; ibstat should then show them "
            "Active at the expected rate")


def _expect_mig(f: Finding, host: Host) -> str:
    mode = "1" if "not enabled" in f.title else "0"
    return (f"set MIG mode on the idle GPUs (nvidia-smi -mig {mode}{dash_i(f)}), reset them "
            "(nvidia-smi -r) and find out what changed it")


def _expect_hugepages(f: Finding, host: Host) -> str | None:
    m = re.search(r"of ([0-9]+) kB reserved, expected ([0-9]+)", f.title)
    if not m:
        return None
    size, want = m.groups()
    return (f"reserve {want} pages: echo {want} > /sys/kernel/mm/hugepages/hugepages-{size}kB"
            "/nr_hugepages now, and at boot with hugepages= on the kernel command line")


def _devnodes(f: Finding, host: Host) -> str:
    return ("recreate the device nodes: nvidia-modprobe -c N for each GPU N and "
            "nvidia-modprobe -u -c=0 (or reboot), then ls -l /dev/nvidia* matches the GPUs")


def _stale_cdi(f: Finding, host: Host) -> str:
    """Regenerate the spec; a reboot first only where the loaded module and the libraries
    differ (decided from the facts when both are known)."""
    module, libs = host.driver.kernel_module, host.driver.userspace
    if module and libs and module != libs:
        first = (f"reboot first (the loaded module is {module}, the libraries {libs}); then "
                 "run ")
    elif module and libs:
        first = f"the loaded module and the libraries agree ({module}), so no reboot: run "
    else:
        first = ("if the loaded module (cat /proc/driver/nvidia/version) and the libraries "
                 "(nvidia-smi) differ, reboot first; then run ")
    # with the plugin's log read, its own step restarts its pods (after this one)
    plugin = ("" if host.fact("device_plugin_log") is not None
              else ", restart the NVIDIA device plugin's pods")
    return (f"{first}nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml, restart "
            f"containerd (or docker){plugin}, and nvidia-ctk cdi list should list the GPUs")


def _engine_runtime(f: Finding, host: Host) -> str:
    return ("run nvidia-ctk runtime configure --runtime=containerd (or docker; --config=$HOME/"
            ".config/docker/daemon.json for a rootless daemon), restart that engine and the "
            "device plugin, then run a CUDA container with --runtime=nvidia")


def _cri_not_loaded(f: Finding, host: Host) -> str:
    """The running containerd does not use the edited file: where the change belongs."""
    for dist in ("k3s", "rke2"):
        if f"{dist} never reads" in f.explanation:
            return (f"put the change in /var/lib/rancher/{dist}/agent/etc/containerd/"
                    f"config.toml.tmpl (a copy of the generated config.toml), restart {dist}, "
                    "then check crictl info shows it")
    return ("make the change in the file containerd is started with (containerd --config; "
            "the GPU operator's toolkit settings, or k3s/RKE2's config.toml.tmpl), restart "
            "it, then check crictl info shows it")


_OWN: dict[str, Repair] = {
    "weights.network-read": _weights, "weights.local-nvme-short": _weights,
    "container.cdi-stale-spec": _stale_cdi, "container.cdi-spec-version": _stale_cdi,
    "container.toolkit-cdi-mode-without-spec": _stale_cdi,
    "container.runtime-nvidia-missing": _engine_runtime,
    "container.runtime-daemon-mismatch": _engine_runtime,
    "container.cri-config-not-loaded": _cri_not_loaded,
    "expect.gpu-model": _expect_model, "expect.driver": _expect_driver,
    "expect.cuda": _expect_cuda, "expect.nvswitch-count": _expect_switches,
    "expect.infiniband": _expect_ib, "expect.mig": _expect_mig,
    "expect.persistence": _persistence, "expect.hugepages": _expect_hugepages,
    "nvidia-smi.no-permission": _permissions, "mig.no-instances": _mig_instances,
    "pcie.acs-redirect": _acs, "hugepages.not-reserved": _hugepages,
    "topology.nic-far": _nic_far, "topology.numa-balancing": _numa_balancing,
    "nccl.shared-mem-exceeded": _shm, "nccl.version-mismatch": _nccl_version,
    "devnode.wrong-number": _devnodes, "devnode.missing": _devnodes,
    "dcgm.persistence-off": _persistence, "dcgm.gpu-busy": _gpu_busy,
    **dict.fromkeys(("persistence.off", "persistence.daemon-inactive",
                     "persistence.daemon-stopped"), _persistence),
}


def joined(*tables: Mapping[str, Repair]) -> dict[str, Repair]:
    """The tables as one; ValueError when two answer one finding id (the later would
    silently win, the earlier be dead text)."""
    out: dict[str, Repair] = {}
    for table in tables:
        twice = sorted(out.keys() & table.keys())
        if twice:
            raise ValueError(f"next steps written twice for {', '.join(twice)}")
        out.update(table)
    return out


BY_ID: dict[str, Repair] = joined(
    HARDWARE, NODE_SOFTWARE, CUDA_JOBS, LOG_REPAIRS, NCCL, CONTAINER_STACK, CLUSTER, MONITORING,
    _OWN,
)
"""The repairs written for an id; the catalogs' rows answer the others (their own ids:
an id here overrides its catalog row, whose words ``gputriage explain`` still prints)."""


def repair_of(fid: str) -> Repair | None:
    """The repair of finding id ``fid``: its own row, else its catalog's; None when no
    row answers it (only an id that reports and never acts may have none)."""
    return BY_ID.get(fid) or catalog_repair(fid)


def repair(f: Finding, host: Host) -> str | None:
    """The repair of this finding: the one its rule's facts decided, else its id's; None:
    the action's frame alone applies."""
    if f.fix:
        return f.fix
    fn = repair_of(f.id)
    return fn(f, host) if fn is not None else None

"""The repairs of what a job's NCCL output and nccl-tests say: the transport NCCL fell
back to and why (each cause its own change), GPUDirect RDMA, the job's settings, the
NVLink fabric (NVLS, IMEX), IB completion errors, a peer that did not answer, stuck
inits, watchdog timeouts, bandwidth below expectation and corrupt results. A step names
whose change it is: the job's environment, its container, the node. :data:`REPAIRS`
joins :data:`gputriage.next_steps.repairs.BY_ID`."""

from __future__ import annotations

import re

from gputriage.model import Action, Blame, Finding
from gputriage.next_steps.hardware import remap_check
from gputriage.next_steps.host import Host, Repair

__all__ = ["REPAIRS"]

_TITLE_HOST = re.compile(r"^(?P<host>[A-Za-z0-9][\w.-]{0,252}): ")


def _node(f: Finding, host: Host) -> str:
    """The host a job's finding is about: the one its NCCL records named (the title's
    prefix), else the host's own name, else the node the log came from."""
    m = _TITLE_HOST.match(f.title)
    if m:
        return m.group("host")
    return host.called


def _nvls(f: Finding, host: Host) -> str:
    node = _node(f, host)
    reset = ("systemctl stop nvidia-fabricmanager; nvidia-smi -r (every GPU idle); "
             "systemctl start nvidia-fabricmanager")
    if "MNNVL" in f.title:
        return ("create the IMEX channel on every node (driver parameter "
                "NVreg_CreateImexChannel0=1, or mknod /dev/nvidia-caps-imex-channels/channel0 "
                "with the nvidia-caps-imex-channels major from /proc/devices), expose it to "
                "the job and check the IMEX service (systemctl status nvidia-imex); meanwhile "
                "NCCL_MNNVL_ENABLE=0 lets jobs run without cross-tray NVLink")
    if f.action is Action.FIX_CONFIG:
        return ("if the job runs in a container, give it the fabric capability devices "
                "(/dev/nvidia-caps); on the host, nvidia-smi -q | grep -A2 Fabric must read "
                f"State: Completed, else restart the fabric manager with a GPU reset ({reset}) "
                f"or reboot {node}; meanwhile NCCL_NVLS_ENABLE=0 in the job's environment "
                "lets it run")
    return (f"restore the fabric state of {node} once no job runs on it: {reset}, or reboot "
            "it; nvidia-smi -q | grep -A2 Fabric should then read State: Completed and "
            "journalctl -u nvidia-fabricmanager show no error. Until then jobs run with "
            "NCCL_NVLS_ENABLE=0")


def _peer(f: Finding, host: Host) -> str:
    peer = f.scope.name or "that peer"
    return (f"resubmit the job without the node at {peer} (getent hosts {peer} names it; "
            "sbatch --exclude=NAME, or keep the pod off it), then have that node checked: "
            "gputriage check on it, its interfaces (ip -br addr) and its firewall; "
            f"{_node(f, host)} needs nothing")


def _ib_completion(f: Finding, host: Host) -> str:
    m = re.search(r"toward peer (\S+)", f.title)
    peer = m.group(1) if m else "the peer"
    if f.action is Action.FIX_CONFIG and "Hyper-V" in f.explanation:
        return ("put the VMs in one VM scale set (or availability set, or cluster) so that they "
                "share an InfiniBand partition: recreate the one created apart (cat "
                "/sys/class/infiniband/*/ports/1/pkeys/0 must show the same key on both), then "
                "rerun the job; meanwhile it can run over Ethernet (NCCL_IB_DISABLE=1) at lower "
                "bandwidth")
    if f.action is Action.FIX_CONFIG:
        return ("disable ACS on the PCIe switches between the GPUs and the HCAs, boot with "
                "iommu=pt, and check nvidia-peermem (lsmod | grep peermem) or DMA-BUF on every "
                "node; NCCL_DEBUG=INFO should then show via NET/IB/N/GDRDMA")
    if f.action is Action.DRAIN_AND_REPAIR:
        return ("check this host's HCA ports and cables (ibstat; the port counters link_downed "
                "and symbol errors; mlxlink on RoCE) and replace the cable, transceiver or "
                "switch port that fails")
    return (f"check whether {peer}'s rank or node died first (its log, gputriage on its "
            "kernel log); if it was alive, read the port counters on both ends (perfquery, or "
            "ethtool -S NETDEV | grep -i -e err -e discard on RoCE) and the switch ports "
            f"between them; resubmit the job, without {peer}'s node if it fails again")


def _tests_failed(f: Finding, host: Host) -> str | None:
    if "system not yet initialized" in f.title:
        return ("start nvidia-fabricmanager at the driver's exact version (systemctl enable "
                "--now nvidia-fabricmanager; journalctl -u nvidia-fabricmanager -b says why it "
                "fails), then rerun the test")
    m = re.search(r"setup on (\S+(?:, \S+)*) only", f.explanation)
    if m and f.action is Action.FIX_CONFIG:
        return (f"give {m.group(1)} an interface setting that fits it: NCCL_SOCKET_IFNAME "
                "listing every host's interface (enp6s0,enp4s0, or a prefix they share) or "
                "/etc/nccl.conf on each host, then rerun the test with NCCL_DEBUG=WARN; the "
                "nodes need nothing")
    if f.action is Action.RESTART_JOB:
        return ("rerun the test with NCCL_DEBUG=WARN (or INFO, with NCCL_DEBUG_SUBSYS=INIT,NET) "
                "to see the step that failed, then act on what that names")
    return None


_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]{1,40})=([^\s,;:)]{1,40})")
_RERUN = "NCCL_DEBUG=INFO then shows the transport it picks"


def _unset(f: Finding, host: Host) -> str | None:
    """The job's own NCCL setting the title names (``NCCL_IB_DISABLE=1 set by the
    environment``): unset it."""
    m = _ENV.search(f.title)
    if m is None or f.blame is not Blame.JOB_CONFIG and "set by the" not in f.title:
        return None
    return (f"unset {m.group(1)}={m.group(2)} in the job's environment (its launch script or "
            f"container) and rerun it; {_RERUN}")


_SOCKET_CAUSES = (  # the cause nccl.socket-transport's title names -> its repair
    ("libibverbs could not be loaded", "install the RDMA user-space libraries in the job's "
     "image (rdma-core: libibverbs1 and ibverbs-providers on Debian and Ubuntu, libibverbs "
     "on RHEL, or MLNX_OFED's), then rerun; NCCL_DEBUG=INFO should then say NET/IB : Using "
     "the HCAs"),
    ("NCCL_IB_HCA=", "set NCCL_IB_HCA to HCAs this host has with active ports (ibv_devinfo; "
     "ibstat), or unset it, and rerun; " + _RERUN),
    ("OFI (libfabric) plugin", "attach and enable EFA on the instances (fi_info -p efa must "
     "list it) and give the container the EFA devices (the EFA device plugin's "
     "vpc.amazonaws.com/efa request), or remove the OFI plugin where no EFA exists; rerun "
     "with NCCL_DEBUG=INFO"),
    ("net plugin", "install the net plugin's release for this NCCL and the NIC's driver, or "
     "remove it so that NCCL's own IB transport runs; " + _RERUN),
    ("found no device although this host has HCAs", "expose the RDMA devices to the job's "
     "container (/dev/infiniband through the RDMA device plugin's resource, or --device with "
     "the IPC_LOCK capability) and check that its image has libibverbs; NCCL_DEBUG=INFO "
     "should then list the HCAs under NET/IB"),
    ("HCAs go unused", "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET to see why "
     "NCCL skipped the HCAs: /dev/infiniband missing in the container, libibverbs missing "
     "from the image, or NCCL_IB_DISABLE / NCCL_NET set by the job; fix the one it shows"),
)


def _socket_transport(f: Finding, host: Host) -> str:
    unset = _unset(f, host)
    if unset is not None:
        return unset
    for cause, text in _SOCKET_CAUSES:
        if cause in f.title:
            return text
    return ("rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET and act on its NET/IB "
            "and NET/Plugin lines: they say why NCCL chose TCP sockets")


def _gdr_disabled(f: Finding, host: Host) -> str:
    gdr = "NCCL_DEBUG=INFO should then show via NET/IB/N/GDRDMA"
    if "NCCL_NET_GDR_LEVEL=" in f.explanation and f.blame is Blame.JOB_CONFIG:
        m = _ENV.search(f.explanation[f.explanation.index("NCCL_NET_GDR_LEVEL="):])
        setting = f"{m.group(1)}={m.group(2)}" if m else "NCCL_NET_GDR_LEVEL"
        return (f"unset {setting} in the job's environment unless the platform needs it; {gdr}")
    if "peermem is not loaded" in f.title or "no GPUDirect support" in f.title:
        return ("load nvidia-peermem on every node (modprobe nvidia-peermem, and at boot: "
                "echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf), or use "
                "DMA-BUF (NVIDIA's recommended path: the open GPU kernel module, a kernel of "
                f"5.12 or later, a recent NCCL); {gdr}")
    if "although" in f.title:
        return ("rerun with NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH to see the GPU-HCA distance NCCL "
                "measured; give each GPU the HCA on its own PCIe switch (NCCL_IB_HCA per rank) "
                f"and, in a container, the host's /sys so that NCCL sees the topology; {gdr}")
    return ("give each rank the HCA nearest its GPU (rail-aligned NCCL_IB_HCA per rank, "
            "NCCL_CROSS_NIC=0) or move the HCA next to the GPU; nvidia-smi topo -m shows where "
            f"each NIC sits (PIX or PXB to its GPU allows GPUDirect RDMA); {gdr}")


def _shm_transport(f: Finding, host: Host) -> str:
    unset = _unset(f, host)
    if unset is not None:
        return unset.replace(_RERUN, "NCCL_DEBUG=INFO should then show P2P channels")
    return ("let the ranks open each other's GPU memory: run them in one container or share "
            "the IPC namespace (--ipc=host, hostIPC), give each process every GPU it talks "
            "to (no CUDA_VISIBLE_DEVICES split across the pair), and check that no "
            "NCCL_P2P_DISABLE is set; NCCL_DEBUG=INFO should then show P2P/CUMEM or P2P/IPC "
            "between NVLink-joined GPUs")


def _p2p_disabled(f: Finding, host: Host) -> str:
    settings = sorted({f"{m.group(1)}={m.group(2)}" for m in _ENV.finditer(f.title)})
    which = " and ".join(settings) or "NCCL_P2P_DISABLE / NCCL_SHM_DISABLE"
    return (f"unset {which} in the job's environment unless they work around a known "
            "peer-to-peer problem of this platform, and rerun; NCCL_DEBUG=INFO should then "
            "show P2P channels between the node's GPUs")


def _virtual_iface(f: Finding, host: Host) -> str:
    return ("set NCCL_SOCKET_IFNAME to the data network's interface on every host (ip -br addr "
            "lists them: the IPoIB or high-speed Ethernet one), or exclude the virtual ones "
            "with a '^' list (NCCL_SOCKET_IFNAME=^docker,lo,virbr); NCCL_DEBUG=INFO then shows "
            "NET/Socket : Using that interface")


def _node_split(f: Finding, host: Host) -> str:
    return ("set NCCL_NET_DISABLE_INTRA=1 so that GPUs of one host do not talk over the "
            "network, and on rail-isolated fabrics align NCCL_IB_HCA per rank with "
            "NCCL_CROSS_NIC=0 (or route between the rails); NCCL_DEBUG=INFO should then count "
            "one node per host (nNodes)")


def _device_open(f: Finding, host: Host) -> str:
    dev = f.scope.name if f.scope.kind == "nic" and f.scope.name else "the RDMA device"
    return (f"give the job's container {dev} (its /dev/infiniband/uverbsN through the RDMA "
            "device plugin's resource or --device, with the IPC_LOCK capability), or limit "
            "NCCL_IB_HCA to the devices it has; ibv_devinfo inside it must then list "
            f"{dev}")


def _init_incomplete(f: Finding, host: Host) -> str:
    if f.action is Action.FIX_CONFIG:  # stuck setting up the network
        return ("find the rank that never arrived (its log and host), then check the network "
                "setup every rank shares: one NCCL_SOCKET_IFNAME that all hosts reach, "
                "NCCL_IB_HCA naming HCAs each host has, no firewall between them "
                "(nc -z PEER PORT); rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET")
    return ("check the log covers the time of the hang, then read what the other ranks logged "
            "then (the rank that stopped first is the cause); rerun with NCCL_DEBUG=INFO "
            "NCCL_DEBUG_SUBSYS=INIT to see the step it stops at")


def _watchdog(f: Finding, host: Host) -> str:
    if f.action is Action.RESET_GPU:
        return (f"{remap_check(f, host)}; restart the job on other GPUs meanwhile (the other "
                "ranks only waited for this one)")
    if f.blame is Blame.JOB:
        return ("debug the rank's kernels (rerun with CUDA_LAUNCH_BLOCKING=1 or under "
                "compute-sanitizer) before resubmitting; the other ranks only waited for it")
    return ("find the rank that stopped first: read the other ranks' logs and their hosts' "
            "kernel logs for Xids (gputriage on each host's journal); restart the job, "
            "without a node whose GPU shows Xids")


def _tests_wrong(f: Finding, host: Host) -> str:
    return ("narrow it down: run nccl-tests (all_reduce_perf -b 8 -e 8G -c 1) on each node "
            "alone, then on pairs of nodes, and dcgmi diag -r 3 on the node that fails; repair "
            "the GPU, NVLink or NIC it names")


def _busbw_low(f: Finding, host: Host) -> str:
    unset = _unset(f, host)
    if unset is not None:
        return unset
    return ("act on the known cause the finding names first, then rerun all_reduce_perf up to "
            "8G (-b 8 -e 8G) and compare its peak with the expectation: across nodes check "
            "NET/IB with GDRDMA in NCCL_DEBUG=INFO and every rail port's rate (ibstat); on one "
            "node nvidia-smi nvlink -s, the GPUs' clocks and PCIe links")


_WARN_STEPS = {  # the WARN class nccl.warn's title names -> its repair
    "connection failures": "find the rank that failed first (its own log; gputriage on its "
    "host's kernel log) and check the network between the hosts (one NCCL_SOCKET_IFNAME "
    "every host reaches, no firewall: nc -z PEER PORT); then restart the job",
    "system errors": "give the job a larger /dev/shm (docker --shm-size or --ipc=host, a "
    "Kubernetes emptyDir of medium Memory on /dev/shm) and check its memlock and open-file "
    "limits (ulimit -l -n), then restart it",
    "CUDA failures": "read the CUDA error the WARN names: an illegal address is the "
    "application's (compute-sanitizer), ECC or an unknown error the GPU's (gputriage on the "
    "host's kernel log for Xids); restart the job once that is settled",
}


def _warn(f: Finding, host: Host) -> str:
    for what, text in _WARN_STEPS.items():
        if f"NCCL {what}" in f.title:
            return text
    return ("read the WARN lines in order (the first is usually the cause of the rest) and "
            "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the step it fails at")


def _framework_error(f: Finding, host: Host) -> str:
    """A framework's failed NCCL call with no WARN of NCCL's own in the log."""
    return ("rerun the job with NCCL_DEBUG=WARN (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "
            "for the transport it picks) so that NCCL prints the cause before the "
            "framework's error, and give that log to gputriage analyze; until then the "
            f"failed call ({f.title.split(': ', 1)[-1]}) names only its kind")


REPAIRS: dict[str, Repair] = {
    "nccl.framework-error": _framework_error, "nccl.nvls-failed": _nvls,
    "nccl.peer-connect-failed": _peer,
    "nccl.ib-completion-error": _ib_completion, "nccl.tests-failed": _tests_failed,
    "nccl.socket-transport": _socket_transport, "nccl.gdr-disabled": _gdr_disabled,
    "nccl.shm-transport": _shm_transport, "nccl.p2p-disabled": _p2p_disabled,
    "nccl.socket-iface-virtual": _virtual_iface, "nccl.node-split": _node_split,
    "nccl.device-open-failed": _device_open, "nccl.init-incomplete": _init_incomplete,
    "nccl.watchdog-timeout": _watchdog, "nccl.tests-wrong": _tests_wrong,
    "nccl.busbw-low": _busbw_low, "nccl.warn": _warn,
}

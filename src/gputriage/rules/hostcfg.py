"""Rules on host configuration that GPU jobs feel: hugepage pools that did not
fill, pools piled on one NUMA node, transparent hugepages, an IOMMU that
translates GPU DMA, the cgroup hierarchy, and running inside a container."""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.facts.host import DEFAULT_HUGEPAGE_KB, CgroupHierarchy, hugepage_pool_sizes
from gputriage.facts.stack import GpuSighting
from gputriage.model import Action, Blame, Evidence, Finding, Severity, evidence
from gputriage.parsers.devices import DevNode
from gputriage.parsers.hostcfg import KernelCmdline, parse_size_kb
from gputriage.parsers.memory import HugePagePool, MemInfo, NodeHugePages
from gputriage.parsers.pci import PciFunction
from gputriage.rules.base import finding, rule

MIN_POOL_PER_NODE = 2  # pools smaller than this many pages per node are not judged
STARVED_SHARE = 0.5  # a node holding under half of an even share is starved


def _size(kb: int) -> str:
    if kb % (1024 * 1024) == 0:
        return f"{kb // (1024 * 1024)} GiB"
    return f"{kb // 1024} MiB" if kb % 1024 == 0 else f"{kb} kB"


def _default_size(cmd: KernelCmdline | None, info: MemInfo | None) -> int:
    """The size a ``hugepages=`` without ``hugepagesz=`` applies to, in kB."""
    if info is not None and info.hugepagesize_kb:
        return info.hugepagesize_kb
    given = parse_size_kb(cmd.get("default_hugepagesz")) if cmd is not None else None
    return given or DEFAULT_HUGEPAGE_KB


def _cmdline_ev(cmd: KernelCmdline) -> Evidence:
    return evidence("proc_cmdline", [cmd.text])


@rule("hugepages.reserved", any_of=("host_hugepages", "host_hugepage_nodes", "host_meminfo"),
      produces=("hugepages.not-reserved",))
def hugepages_reserved(host_cmdline: KernelCmdline,
                       host_hugepages: list[HugePagePool] | None = None,
                       host_hugepage_nodes: list[NodeHugePages] | None = None,
                       host_meminfo: MemInfo | None = None) -> Iterator[Finding]:
    """Hugepages asked for on the kernel command line are allocated at boot; when
    memory is short or fragmented the kernel quietly allocates fewer, and jobs that
    rely on the pool fail or fall back to slow small pages."""
    cmd = host_cmdline
    actual = hugepage_pool_sizes(host_hugepages, host_hugepage_nodes, host_meminfo)
    default = _default_size(cmd, host_meminfo)
    seen: set[int] = set()
    for req in cmd.hugepage_requests():
        size = req.size_kb or default
        if size in seen or size not in actual:
            continue  # the kernel ignores a second request for one size
        seen.add(size)
        have, source, lines = actual[size]
        if have >= req.count:
            continue
        yield finding(
            "hugepages.not-reserved", Severity.WARNING,
            f"hugepages: the {_size(size)} pool holds {have} of {req.count} pages requested "
            f"at boot ({req.text})",
            "The kernel could not allocate the requested hugepages at boot (not enough "
            "contiguous memory) or the pool was shrunk since; jobs that expect them fail or "
            "run slower. Lower the request, or reserve them earlier (1 GiB pages only on the "
            "command line) and reboot.",
            Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[_cmdline_ev(cmd), evidence(source, lines)])


def _gpu_nodes(gpus: list[PciFunction] | None) -> set[int] | None:
    if not gpus:
        return None
    nodes = {g.numa_node for g in gpus if g.numa_node is not None and g.numa_node >= 0}
    return nodes or None


def _starved(counts: dict[int, int]) -> list[int]:
    """Nodes holding under :data:`STARVED_SHARE` of an even share of the pool (none
    for a pool too small to judge)."""
    total = sum(counts.values())
    if total < MIN_POOL_PER_NODE * len(counts):
        return []
    fair = total / len(counts)
    return sorted(n for n, c in counts.items() if c < fair * STARVED_SHARE)


def _imbalance(size: int, nodes: list[NodeHugePages], counts: dict[int, int],
               starved: list[int], gpu_nodes: set[int] | None) -> Finding:
    """The finding for one lopsided pool of ``size`` kB."""
    with_gpus = gpu_nodes is None or bool(gpu_nodes & set(starved))
    spread = ", ".join(f"node{n} {c}" for n, c in sorted(counts.items()))
    gpu_note = ("" if gpu_nodes is None else
                f"; GPUs sit on node(s) {', '.join(str(n) for n in sorted(gpu_nodes))}")
    return finding(
        "hugepages.node-imbalance", Severity.WARNING if with_gpus else Severity.INFO,
        f"{_size(size)} hugepages lopsided across NUMA nodes: {spread}{gpu_note}",
        "Processes on the starved node take their hugepages from the other socket "
        "(slower pinned-memory copies to their GPUs) or run out. Reserve the pages per "
        "node (hugepages=0:N,1:N, or nodeN/hugepages/.../nr_hugepages) to match where "
        "the GPUs and their jobs run.",
        Action.FIX_CONFIG, Blame.CONFIG,
        evidence=[evidence("hugepages_per_node", [
            f"node{n.node}/hugepages/hugepages-{size}kB/nr_hugepages: "
            f"{n.pools[size].nr if size in n.pools else 0} (cpus {n.cpulist})"
            for n in nodes])])


@rule("hugepages.numa", produces=("hugepages.node-imbalance",))
def hugepages_numa(host_hugepage_nodes: list[NodeHugePages],
                   host_cmdline: KernelCmdline | None = None,
                   host_meminfo: MemInfo | None = None,
                   pci_gpus: list[PciFunction] | None = None) -> Iterator[Finding]:
    """Hugepages reserved host-wide are spread over NUMA nodes as memory allows;
    a pool piled on one node makes processes on the other socket use remote
    memory (or run out) for their pinned GPU buffers."""
    nodes = [n for n in host_hugepage_nodes if n.has_cpus]
    if len(nodes) < 2:
        return
    default = _default_size(host_cmdline, host_meminfo)
    explicit = ({r.size_kb or default for r in host_cmdline.hugepage_requests() if r.per_node}
                if host_cmdline else set())
    gpu_nodes = _gpu_nodes(pci_gpus)
    for size in sorted({s for n in nodes for s in n.pools}):
        if size in explicit:
            continue
        counts = {n.node: (n.pools[size].nr or 0) if size in n.pools else 0 for n in nodes}
        starved = _starved(counts)
        if starved:
            yield _imbalance(size, nodes, counts, starved, gpu_nodes)


@rule("hugepages.thp", produces=("hugepages.thp",))
def thp_mode(host_thp: str, host_thp_defrag: str | None = None,
             host_thp_text: dict[str, str] | None = None) -> Iterator[Finding]:
    """Transparent hugepages set to ``always`` make the kernel compact memory to
    build huge pages for every process, which can stall latency-sensitive work."""
    if host_thp != "always":
        return
    texts = host_thp_text or {}
    ev = [evidence("thp_enabled", [texts.get("thp_enabled") or host_thp])]
    if host_thp_defrag:
        ev.append(evidence("thp_defrag", [texts.get("thp_defrag") or host_thp_defrag]))
    yield finding(
        "hugepages.thp", Severity.INFO,
        "transparent hugepages: always"
        + (f" (defrag {host_thp_defrag})" if host_thp_defrag else ""),
        "Usually harmless, but khugepaged and compaction can add latency spikes to "
        "CPU-side data loading and communication threads. madvise is the common choice "
        "on GPU servers; change it only if such stalls show up.",
        Action.NONE, Blame.CONFIG, evidence=ev)


def iommu_state(cmd: KernelCmdline) -> tuple[bool, bool]:
    """(translation enabled on the command line, passthrough mode requested)."""
    on = False
    for key in ("intel_iommu", "amd_iommu"):
        value = (cmd.get(key) or "").lower()
        if "on" in value.split(","):
            on = True
    if (cmd.get("iommu") or "").lower() == "off" or (
            cmd.get("intel_iommu") or "").lower().startswith("off"):
        on = False
    pt = (cmd.get("iommu") or "").lower() == "pt" or (
        cmd.get("iommu.passthrough") or "").lower() in ("1", "y", "on")
    if (cmd.get("iommu.passthrough") or "").lower() in ("0", "n", "off"):
        on, pt = True, False
    return on, pt


@rule("kernel.iommu", any_of=("pci_gpus", "visible_gpus"), produces=("kernel.iommu",))
def iommu(host_cmdline: KernelCmdline, pci_gpus: list[PciFunction] | None = None,
          visible_gpus: tuple[str, list[GpuSighting]] | None = None,
          has_infiniband: bool | None = None) -> Iterator[Finding]:
    """With the IOMMU translating every DMA, GPU peer-to-peer and GPUDirect RDMA
    traffic is slowed or blocked; passthrough mode (iommu=pt) keeps the IOMMU for
    device assignment without translating host devices."""
    cmd = host_cmdline
    on, pt = iommu_state(cmd)
    if not on or pt:
        return
    gpus = pci_gpus or []
    count = max(len(gpus), len(visible_gpus[1]) if visible_gpus else 0)
    if count == 0:
        return
    vfio = any(g.driver == "vfio-pci" for g in gpus)
    rdma = bool(has_infiniband)
    severe = (count > 1 or rdma) and not vfio
    tokens = " ".join(t for t in (cmd.token("intel_iommu"), cmd.token("amd_iommu"),
                                  cmd.token("iommu.passthrough")) if t)
    why = ("GPUs are bound to vfio-pci for VM assignment, which needs the IOMMU; iommu=pt "
           "still spares the host's own devices the translation." if vfio else
           f"{count} GPU(s){' and an RDMA NIC' if rdma else ''}: peer-to-peer copies and "
           "GPUDirect RDMA go through IOMMU translation (slower, or failing with ACS). Add "
           "iommu=pt to the kernel command line (or turn the IOMMU off) and reboot.")
    yield finding(
        "kernel.iommu", Severity.WARNING if severe else Severity.INFO,
        f"IOMMU translation on ({tokens}) without iommu=pt on a GPU host",
        why, Action.FIX_CONFIG, Blame.CONFIG, evidence=[_cmdline_ev(cmd)])


@rule("host.cgroup", produces=("host.cgroup-v1",))
def cgroup_version(host_cgroup: CgroupHierarchy) -> Iterator[Finding]:
    """cgroup v1 (legacy or hybrid) is being retired by systemd, Kubernetes and the
    container runtimes; worth knowing when planning upgrades."""
    cg = host_cgroup
    if cg.version != 1:
        return
    yield finding(
        "host.cgroup-v1", Severity.INFO, "host uses cgroup v1 (legacy or hybrid hierarchy)",
        "Recent systemd, Kubernetes and container runtime releases deprecate cgroup v1; "
        "GPU device access in containers is managed differently on v2. Plan the move to the "
        "unified hierarchy (systemd.unified_cgroup_hierarchy=1).",
        Action.NONE, Blame.CONFIG,
        evidence=[evidence(src, lines, limit=12) for src, lines in cg.evidence.items()])


@rule("host.container", produces=("host.container",))
def container(in_container: bool, container_cgroup_lines: list[str],
              devnodes: list[DevNode] | None = None) -> Iterator[Finding]:
    """Running inside a container: what the host shows is the container's view,
    and GPU devices are only those the runtime passed in."""
    if not in_container:
        return
    cgroup_lines = container_cgroup_lines
    nodes = devnodes
    gpu_nodes = sorted(n.path for n in nodes or [] if n.path.rpartition("/")[2][6:].isdigit()
                       and n.path.rpartition("/")[2].startswith("nvidia"))
    seen = ("" if nodes is None else
            f": it sees {len(gpu_nodes)} GPU device node(s)"
            + (f" ({', '.join(gpu_nodes[:8])})" if gpu_nodes else ""))
    ev = [evidence("proc_self_cgroup", cgroup_lines, limit=5)]
    if nodes:
        ev.append(evidence("dev_nvidia", [n.path for n in nodes], limit=20))
    yield finding(
        "host.container", Severity.INFO, f"running inside a container{seen}",
        "Findings describe the container's view: only the GPUs and device nodes the "
        "runtime passed in are visible, and host services (fabric manager, persistenced) "
        "are not. Run gputriage on the host for node-level checks.",
        Action.NONE, Blame.UNKNOWN, evidence=ev)

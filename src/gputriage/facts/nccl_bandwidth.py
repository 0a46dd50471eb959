"""What bus bandwidth an nccl-tests run should reach on this hardware.

:func:`expect_busbw` forms an :class:`Expectation` for one
:class:`~gputriage.parsers.nccl_model.NcclTestRun` from the run itself (its
device list: hosts, GPUs per host, GPU names), this host's facts (GPU model,
NVSwitches, the active HCA ports that carry GPU traffic and their rate) and
the NCCL log of the job when there is one. Figures come from
``knowledge/nccl_busbw.csv``. Where an input is missing it assumes nothing and
gives no expectation (:func:`expect_busbw_why` says why).

Registers the fact ``nccl_expectations``: ``[(run, Expectation | None)]``.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gputriage.facts.table import FactReader, FactTable
from gputriage.knowledge import GpuProfile, csv_rows, gpu_profile
from gputriage.parsers.nccl_model import NcclLog, NcclTestRun
from gputriage.text.words import human_number

if TYPE_CHECKING:  # (the host's parsers imported where a host's facts are read)
    from gputriage.parsers.infiniband import IbPort

FACTS = FactTable()

__all__ = ["BusbwFigure", "Expectation", "busbw_figures", "expect_busbw", "expect_busbw_why",
           "nccl_expectations", "operation", "rail_ports"]

INTRA = "intra-node"
INTER = "inter-node"
# Collectives whose busbw the reference figures describe (ring-style traffic).
RING_OPS = frozenset({"allreduce", "allgather", "reducescatter", "broadcast", "reduce"})


@dataclass(frozen=True)
class BusbwFigure:
    """One row of ``nccl_busbw.csv``."""

    link: str  # nvlink | pcie | net
    generation: int | None
    links: int | None
    algo: str  # ring | nvls
    value: float  # GB/s, or a fraction of the line rate for "net"
    verified: bool
    note: str


@functools.cache
def busbw_figures() -> tuple[BusbwFigure, ...]:
    """The expected-busbw table, in file order."""
    out = []
    for row in csv_rows("nccl_busbw.csv"):
        gen, links = row["generation"].strip(), row["links"].strip()
        out.append(BusbwFigure(row["link"], int(gen) if gen.isdigit() else None,
                               int(links) if links.isdigit() else None, row["algo"],
                               float(row["value"]), row["verified"] == "yes", row["note"]))
    return tuple(out)


def _figure(link: str, generation: int | None = None, algo: str = "ring") -> BusbwFigure | None:
    for f in busbw_figures():
        if f.link == link and f.algo == algo and (link == "net" or f.generation == generation):
            return f
    return None


@dataclass(frozen=True)
class Expectation:
    """The busbw a run should reach, and how that figure was formed."""

    busbw_gbs: float
    label: str  # what is expected of: "2x400G NDR per node", "8x H100 SXM5 NVLink4"
    basis: str  # "2x400G NDR per node, ~46 GB/s per NIC"
    scope: str  # "intra-node" | "inter-node"
    inputs: tuple[str, ...]  # where each input came from: "NICs: this host's ib_ports"
    from_host: bool  # some input is this host's own facts (not the job's output or log)
    verified: bool = True  # False: a figure the reference does not confirm
    nodes: int | None = None
    gpus_per_node: int | None = None
    rails: tuple[str, ...] = ()  # the HCA ports counted ("mlx5_0/1")
    down_rails: tuple[str, ...] = ()  # ports of the rail set that are not active

    def percent(self, busbw: float) -> int:
        """``busbw`` as a whole percentage of the expectation."""
        return round(100.0 * busbw / self.busbw_gbs) if self.busbw_gbs > 0 else 0

    def line(self, busbw: float) -> str:
        """``busbw 48.1 GB/s = 52 % of the ~92 GB/s expected for 2x400G NDR (inter-node)``."""
        return (f"busbw {human_number(busbw)} GB/s = {self.percent(busbw)} % of the "
                f"~{self.busbw_gbs:g} GB/s "
                f"expected for {self.label} ({self.scope})")


def operation(run: NcclTestRun) -> str | None:
    """The collective of a run without separators: ``allreduce``, ``allgather`` ..."""
    raw = run.operation or (run.test or "").removesuffix("_perf")
    return raw.replace("_", "").lower() or None


def _layout(run: NcclTestRun, log: NcclLog | None) -> tuple[int | None, int | None, str]:
    """(nodes, GPUs per node, where that came from)."""
    if run.devices:
        per_host = Counter(d.host for d in run.devices)
        return len(per_host), max(per_host.values()), "nccl-tests device list"
    for p in (log.processes if log else []):
        for c in p.comms:
            if c.nnodes:
                local = c.local_ranks or (c.nranks // c.nnodes if c.nranks else None)
                return c.nnodes, local, "NCCL log (nNodes)"
    return None, None, ""


def _profile(run: NcclTestRun, facts: FactReader | None) -> tuple[GpuProfile | None, str, str]:
    """(profile, how the GPUs are named, where that came from)."""
    names = {d.name for d in run.devices if d.name}
    profiles = {gpu_profile(n) for n in names}
    if names and None not in profiles and len(profiles) == 1:
        return profiles.pop(), sorted(names)[0], "nccl-tests device list"
    if names and len(profiles - {None}) > 1:
        return None, "mixed GPU models", ""
    if facts is not None:
        from gputriage.facts.fabric import gpu_profile_for

        visible = facts.maybe("visible_gpus")
        host_names = {g.name for g in visible[1] if g.name} if visible else set()
        found = gpu_profile_for(facts, sorted(host_names)[0] if len(host_names) == 1 else None)
        if found is not None:
            return found, found.model, "this host's GPU inventory"
    return None, "", ""


def _switched(profile: GpuProfile, per_node: int, facts: FactReader | None) -> bool:
    """Whether the SXM GPUs sit on an NVSwitch baseboard (full NVLink between any pair)."""
    if 4 not in profile.baseboard_gpus or per_node > 4:
        return True
    if facts is None:
        return False
    visible = facts.maybe("visible_gpus")
    return bool(facts.maybe("nvswitches")) or bool(visible and len(visible[1]) >= 8)


def _intra(profile: GpuProfile | None, per_node: int, op: str,
           facts: FactReader | None) -> tuple[float, str, str, bool] | str:
    """(busbw, label, basis, verified) inside one node, or why there is no figure."""
    if profile is None:
        return "the GPU model is unknown"
    head = f"{per_node}x {profile.model}"
    if profile.form == "superchip":
        return f"no intra-node figure for {profile.model} superchips"
    if profile.form == "sxm" and profile.nvlink_gen:
        fig = _figure("nvlink", profile.nvlink_gen)
        if fig is None:
            return f"no reference figure for NVLink{profile.nvlink_gen}"
        if not _switched(profile, per_node, facts):
            return f"no reference figure for {per_node} {profile.model} GPUs without NVSwitch"
        value, verified, note = fig.value, fig.verified, ""
        if fig.links and profile.nvlink_links and profile.nvlink_links != fig.links:
            value = round(fig.value * profile.nvlink_links / fig.links)
            verified, note = False, f", scaled to {profile.nvlink_links} links"
        nvls = _figure("nvlink", profile.nvlink_gen, "nvls")
        if op == "allreduce" and nvls and not note:
            note = f" (allreduce with NVLS up to ~{nvls.value:g})"
        label = f"{head} NVLink{profile.nvlink_gen}"
        basis = (f"{label} intra-node, ring ~{value:g} GB/s{note}"
                 + ("" if verified else " (unverified)"))
        return value, label, basis, verified
    if profile.form == "pcie" and profile.nvlink_links and per_node <= 2:
        return "two cards that may share an NVLink bridge: no figure"
    fig = _figure("pcie", profile.pcie_gen)
    if fig is None:
        return f"no reference figure for PCIe Gen{profile.pcie_gen}"
    label = f"{head} over PCIe Gen{profile.pcie_gen}"
    basis = f"{label} intra-node, ~{fig.value:g} GB/s" + ("" if fig.verified else " (unverified)")
    return fig.value, label, basis, fig.verified


def rail_ports(ports: list[IbPort], affinity: dict | None = None) -> list[IbPort]:
    """The HCA ports that carry GPU traffic: those ``ib_gpu_affinity`` calls GPU rails,
    else the fastest set of identical HCA ports (model and link layer)."""
    affinity = affinity or {}
    rails = [p for p in ports if getattr(affinity.get(p.device), "rail", None)]
    if rails:
        return rails
    groups: dict[tuple[str | None, str | None], list[IbPort]] = {}
    for p in ports:
        if getattr(affinity.get(p.device), "rail", None) is not False:
            groups.setdefault((p.hca_type, p.link_layer), []).append(p)
    scored = [(max((p.rate_gbps or 0.0) for p in g if p.is_active), len(g), g)
              for g in groups.values() if any(p.is_active and p.rate_gbps for p in g)]
    return max(scored, key=lambda t: (t[0], t[1]))[2] if scored else []


# 4X InfiniBand port rate (Gb/s) -> generation (shared/reference/topology_and_links.md), for
# tools that print the rate alone (ibstat "Rate: 400").
_IB_4X = {40: "QDR", 56: "FDR", 100: "EDR", 200: "HDR", 400: "NDR", 800: "XDR"}


def _rate_name(port: IbPort, rate: float) -> str:
    """``400G NDR``, ``200G HDR``, ``100G RoCE``."""
    if port.link_layer and port.link_layer.lower() == "ethernet":
        return f"{rate:g}G RoCE"
    speed = port.speed if port.speed and port.speed.isalpha() else ""
    if not speed and port.width in (None, "4X"):
        speed = _IB_4X.get(int(rate), "") if rate == int(rate) else ""
    return f"{rate:g}G {speed}".strip()


def _network(facts: FactReader | None, per_node: int | None,
             log: NcclLog | None) -> tuple[float, str, str, tuple[str, ...],
                                           tuple[str, ...]] | str:
    """(per-node busbw, label, basis, rail ports, down rail ports) over the network, or
    why not."""
    ports = facts.maybe("ib_ports") if facts is not None else None
    if not ports:
        devs = {d for p in (log.processes if log else []) for d in p.ib_devices}
        if devs:
            return (f"the NCCL log names {len(devs)} IB device(s) but not their rate "
                    "(no ibstat or sysfs InfiniBand data of the host)")
        return "no HCA port data of the host (ibstat or sysfs InfiniBand)"
    group = rail_ports(ports, facts.maybe("ib_gpu_affinity") if facts is not None else None)
    active = [p for p in group if p.is_active and p.rate_gbps]
    if not active:
        return "no active HCA port on the host"
    rates = Counter(p.rate_gbps for p in active)
    rate = max(rates.items(), key=lambda kv: (kv[1], kv[0] or 0.0))[0] or 0.0
    used = [p for p in active if p.rate_gbps == rate]
    nics = min(len(used), per_node) if per_node else len(used)
    fig = _figure("net")
    share = fig.value if fig else 0.92
    per_nic = round(share * rate / 8, 1)
    label = f"{nics}x{_rate_name(used[0], rate)} per node"
    basis = f"{label}, ~{per_nic:g} GB/s per NIC"
    if nics < len(used):
        basis += f" ({len(used)} NICs, {per_node} GPU(s) per node)"
    down = tuple(p.key for p in group if p.is_down)
    return round(nics * per_nic, 1), label, basis, tuple(p.key for p in used), down


def expect_busbw_why(run: NcclTestRun, facts: FactReader | None) -> tuple[Expectation | None, str]:
    """The expectation for ``run``, or None with the reason no figure can be formed."""
    op = operation(run)
    if op not in RING_OPS:
        return None, f"no reference figure for {op or 'an unnamed test'}"
    log = facts.maybe("nccl_log") if facts is not None else None
    nodes, per_node, layout_from = _layout(run, log)
    if not nodes or not per_node:
        return None, "the run lists no devices (hosts and GPUs per host unknown)"
    if nodes * per_node < 2:
        return None, "a single rank moves nothing over a link"
    profile, gpu_name, gpu_from = _profile(run, facts)
    inputs = [f"layout: {layout_from}"] + ([f"GPUs: {gpu_from}"] if gpu_from else [])
    from_host = "host" in gpu_from
    intra = _intra(profile, per_node, op, facts) if per_node > 1 else "one GPU per node"
    if nodes == 1:
        if isinstance(intra, str):
            return None, intra
        value, label, basis, verified = intra
        return Expectation(value, label, basis, INTRA, tuple(inputs), from_host, verified, nodes,
                           per_node), ""
    net = _network(facts, per_node, log)
    if isinstance(net, str):
        return None, net
    value, label, basis, rails, down = net
    inputs.append("NICs: this host's HCA ports (assumed alike on every node)")
    verified = True
    if not isinstance(intra, str) and intra[0] < value:
        value, label, verified = intra[0], intra[1], intra[3]
        basis = f"{intra[2]} (below the network's {basis})"
    return Expectation(value, label, basis, INTER, tuple(inputs), True, verified, nodes, per_node,
                       rails, down), ""


def expect_busbw(run: NcclTestRun, facts: FactReader | None) -> Expectation | None:
    """The busbw ``run`` should reach here, or None when it cannot be told."""
    return expect_busbw_why(run, facts)[0]


@FACTS.fact("nccl_expectations")
def nccl_expectations(facts: FactReader) -> list[tuple[NcclTestRun, Expectation | None]]:
    """Every nccl-tests run with the busbw it should reach (None: cannot tell)."""
    return [(run, expect_busbw(run, facts)) for run in facts.get("nccl_tests")]

"""Rules on MIG (Multi-Instance GPU) partitions as nvidia-smi lists them: the table's
MIG devices box, ``nvidia-smi -L``'s MIG lines, ``nvidia-smi mig -lgi`` / ``-lci``.

A GPU in MIG mode runs CUDA work only inside its instances: with MIG on and no GPU
instance (or GPU instances without compute instances) it runs nothing at all, which is
a configuration left half done, not a fault of the GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

from gputriage.model import NODE, Action, Blame, Evidence, Finding, Severity, evidence, gpu_scope
from gputriage.parsers.nvsmi import MigDevice, SmiReport
from gputriage.rules.base import finding, rule

Reports = Sequence[tuple[str, SmiReport]]
_EMPTY_NOTES = ("No GPU instances found", "No compute instances found", "No MIG devices found")


def _enabled(smi: Reports) -> dict[int, tuple[str, str]]:
    """GPU index -> (source, the GPU's line) for GPUs whose current MIG mode is Enabled."""
    out: dict[int, tuple[str, str]] = {}
    for source, report in smi:
        for g in report.gpus:
            if (g.mig_mode_current or "").lower() == "enabled" and g.index not in out:
                bus = f" {g.pci_bus_id}" if g.pci_bus_id else ""
                out[g.index] = (source, f"GPU {g.index}{bus} ({g.name or '?'}): MIG mode "
                                        "Enabled")
    return out


def _listed(smi: Reports) -> list[tuple[str, SmiReport]]:
    return [(s, r) for s, r in smi if r.mig_devices is not None]


def _empty_notes(report: SmiReport) -> list[str]:
    return [n for n in report.mig_notes if n.startswith(_EMPTY_NOTES)]


def _covers(report: SmiReport, index: int) -> bool:
    """Whether a listing says which instances GPU ``index`` has: the table's MIG box
    covers the GPUs of its own table, a "no instances" message every GPU; -L and mig
    -lgi name only the GPUs they list."""
    if _empty_notes(report) and not report.mig_devices:
        return True
    return report.mig_listing == "table" and any(g.index == index for g in report.gpus)


@rule("mig.no-instances", produces=("mig.no-instances",))
def no_instances(smi: Reports) -> Iterator[Finding]:
    """A GPU in MIG mode without any MIG instance (or with GPU instances but no compute
    instance) can run no CUDA work: MIG was enabled and its partitions never created
    (or destroyed and not recreated)."""
    enabled = _enabled(smi)
    for source, report in _listed(smi):
        notes = _empty_notes(report)
        have = {d.gpu_index for d in report.mig_devices or ()}
        idle = [i for i in enabled if i not in have and _covers(report, i)]
        if not idle and not (notes and not report.mig_devices and not enabled):
            continue
        what = "compute" if any(n.startswith("No compute") for n in notes) else "GPU"
        if idle:
            title = (f"MIG mode is on but {', '.join(f'GPU {i}' for i in idle)} "
                     f"{'has' if len(idle) == 1 else 'have'} no {what} instance: no CUDA work "
                     "runs there")
        else:
            title = (f"MIG is enabled but nvidia-smi finds no {what} instance: the MIG GPUs "
                     "run no CUDA work")
        ev = [evidence(enabled[i][0], [enabled[i][1]]) for i in idle]
        ev.append(evidence(source, notes or ["MIG devices: none listed"]))
        yield finding(
            "mig.no-instances", Severity.WARNING, title,
            "With MIG enabled, CUDA work runs only inside MIG instances; a GPU without a GPU "
            "instance (or whose GPU instances have no compute instance) accepts no job, and "
            "in Kubernetes advertises no MIG device. Create the instances this node is meant "
            "to have (nvidia-smi mig -cgi PROFILES -C, or the GPU operator's nvidia.com/"
            "mig.config label for mig-manager), or turn MIG off if whole GPUs are wanted.",
            Action.FIX_CONFIG, Blame.CONFIG,
            gpu_scope(None, idle[0]) if len(idle) == 1 else NODE, ev)


def _profiles(devices: list[MigDevice]) -> str:
    counts = Counter(d.profile for d in devices if d.profile)
    if not counts:
        return f"{len(devices)} instance(s)"
    return ", ".join(f"{p} x{n}" if n > 1 else p for p, n in counts.most_common())


@rule("mig.layout", produces=("mig.layout",))
def layout(smi: Reports) -> Iterator[Finding]:
    """The MIG instances each GPU has, as the first listing that shows some says."""
    for source, report in _listed(smi):
        devices = report.mig_devices or []
        if not devices:
            continue
        by_gpu: dict[int | None, list[MigDevice]] = {}
        for d in devices:
            by_gpu.setdefault(d.gpu_index, []).append(d)
        parts = [f"GPU {'?' if i is None else i}: {_profiles(ds)}" for i, ds in by_gpu.items()]
        ev: list[Evidence] = [evidence(source, [d.line for d in devices][:24])]
        yield finding(
            "mig.layout", Severity.INFO,
            f"MIG: {len(devices)} instance(s) on {len(by_gpu)} GPU(s) ({'; '.join(parts)})",
            "The MIG instances nvidia-smi lists (from "
            f"{_LISTING.get(report.mig_listing or '', 'its listing')}). Each is a separate "
            "device for CUDA and, under the device plugin, a separate resource; compare "
            "them with the layout the node is meant to have (mig-parted's config).",
            Action.NONE, Blame.UNKNOWN, evidence=ev)
        return


_LISTING = {"table": "the MIG devices box of its table", "list": "nvidia-smi -L",
            "gpu-instances": "nvidia-smi mig -lgi", "compute-instances": "nvidia-smi mig -lci"}

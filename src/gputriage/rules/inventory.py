"""Rules on the GPU inventory: every GPU on the PCI bus should be one the
driver can use, and a baseboard carries a known number of GPUs."""

from __future__ import annotations

from collections.abc import Iterator

from gputriage import knowledge
from gputriage.facts import Facts
from gputriage.model import Action, Blame, Finding, Severity
from gputriage.rules.base import evidence, finding, gpu_scope, rule

PASSTHROUGH_DRIVERS = {"vfio-pci", "pci-stub"}


@rule("gpu.count", requires=("pci_gpus", "visible_gpus"),
      produces=("gpu.missing", "gpu.count-ok", "gpu.passthrough"))
def gpu_count(facts: Facts) -> Iterator[Finding]:
    """Compare NVIDIA GPU functions on the PCI bus (by class, not audio or
    NVSwitch functions) with the GPUs the driver can use; name the missing ones."""
    pci_gpus = facts.get("pci_gpus")
    if not pci_gpus or facts.maybe("driver_loaded") is False:
        return  # driver.presence covers these
    source, visible = facts.get("visible_gpus")
    lost = facts.maybe("lost_gpus", {})
    passthrough = [f for f in pci_gpus if f.driver in PASSTHROUGH_DRIVERS]
    if passthrough:
        yield finding(
            "gpu.passthrough", Severity.INFO,
            f"{len(passthrough)} GPU(s) bound to {passthrough[0].driver} for passthrough",
            "GPUs given to virtual machines are not expected to be visible to this host's "
            "driver.", Action.NONE, Blame.CONFIG,
            evidence=[evidence(facts.get("pci_source"), [f"{f.address} driver={f.driver}"
                                               for f in passthrough])])
    expected = [f for f in pci_gpus if f.driver not in PASSTHROUGH_DRIVERS]
    seen = {g.bus_id for g in visible if g.bus_id and g.bus_id not in lost}
    if not any(g.bus_id for g in visible):
        # the source lists no bus ids: compare counts only
        if len(visible) < len(expected):
            yield finding(
                "gpu.missing", Severity.CRITICAL,
                f"{len(expected) - len(visible)} GPU(s) on PCI not visible to the driver "
                f"({len(visible)} of {len(expected)})", _MISSING_WHY, Action.DRAIN_AND_REPAIR,
                Blame.NODE,
                evidence=[evidence(facts.get("pci_source"), [_line(f) for f in expected]),
                          evidence(source, [g.line for g in visible])])
        return
    missing = [f for f in expected if f.address not in seen]
    for f in missing:
        ev = [evidence(facts.get("pci_source"), [_line(f)], "on the PCI bus"),
              evidence(source, [f"{f.address} is not among the {len(seen)} GPUs listed"])]
        for lost_source, line in lost.get(f.address, []):
            ev.append(evidence(lost_source, [line]))
        other = f.driver if f.driver and f.driver != "nvidia" else None
        title = f"GPU {f.address} is on the PCI bus but not usable by the driver"
        action, blame, why = Action.DRAIN_AND_REPAIR, Blame.NODE, _MISSING_WHY
        if other == "nouveau":
            title = f"GPU {f.address} is held by the nouveau driver"
            action, blame = Action.FIX_CONFIG, Blame.CONFIG
            why = ("nouveau, not nvidia, drives this GPU. Blacklist nouveau, rebuild the "
                   "initramfs and reboot.")
        yield finding("gpu.missing", Severity.CRITICAL, title, why, action, blame,
                      gpu_scope(f.address), ev)
    if not missing:
        yield finding(
            "gpu.count-ok", Severity.OK,
            f"all {len(expected)} GPU(s) on the PCI bus are visible to the driver",
            f"Compared the PCI bus with {source}.", Action.NONE, Blame.UNKNOWN)


def _in_vm(facts: Facts) -> bool:
    """GPUs passed through to a VM (nvidia-smi's virtualization mode says so)."""
    for _, report in facts.maybe("smi", []):
        for g in report.gpus:
            if g.virtualization_mode and g.virtualization_mode.lower() not in ("none", "n/a"):
                return True
    return False


_MISSING_WHY = (
    "The GPU is on the PCI bus but the driver cannot use it: it fell off the bus, failed "
    "to initialise, or stopped responding. Jobs here see fewer GPUs or hang. A GPU reset "
    "rarely helps: drain the node, power-cycle it, and reseat or RMA the GPU if it recurs.")


def _line(f) -> str:
    return (f"{f.address} [{(f.vendor or 0):04x}:{(f.device or 0):04x}] "
            f"driver={f.driver or 'none'}")


@rule("gpu.count-unexpected", requires=("visible_gpus",), produces=("gpu.count-unexpected",))
def gpu_count_unexpected(facts: Facts) -> Iterator[Finding]:
    """Baseboard GPUs come in fixed counts (HGX: 4 or 8): seven visible H100 SXM
    means one is gone, even when the PCI bus no longer shows it."""
    source, visible = facts.get("visible_gpus")
    pci_gpus = facts.maybe("pci_gpus")
    if not visible or (pci_gpus is not None and len(pci_gpus) > len(visible)):
        return  # gpu.count names the missing ones
    profiles = {knowledge.gpu_profile(g.name) for g in visible}
    if len(profiles) != 1:
        return
    profile = profiles.pop()
    if profile is None or not profile.baseboard_gpus or len(visible) in profile.baseboard_gpus:
        return
    if len(visible) * 2 <= max(profile.baseboard_gpus) or _in_vm(facts):
        return  # VMs and partitions get subsets of a board; only "one short" is telling
    sizes = " or ".join(str(n) for n in profile.baseboard_gpus)
    yield finding(
        "gpu.count-unexpected", Severity.WARNING,
        f"{len(visible)} {profile.model} GPUs visible; its baseboards carry {sizes}",
        "A GPU is probably missing altogether (not even on the PCI bus): one that did not "
        "train its link or fell off hard. Check lspci and the kernel log, power-cycle, then "
        "reseat or RMA.", Action.DRAIN_AND_REPAIR, Blame.NODE,
        evidence=[evidence(source, [g.line for g in visible])])

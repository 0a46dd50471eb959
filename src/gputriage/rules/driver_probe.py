"""The driver refusing a GPU at probe time: a PCI memory region (BAR) the firmware or the
hypervisor did not map, a GPU the loaded kernel module does not drive (the open module on
a GPU without GSP, a GPU this branch left to a legacy driver), and probe failures whose
cause the log does not show. None of these is a faulty GPU: the GPU stays unusable until
the platform's configuration or the driver package is fixed.

Facts from the driver's own messages (``nv-pci.c`` / ``nv.c``), NVIDIA's driver README
(chapters "Open Linux Kernel Modules", "GSP Firmware", "Supported NVIDIA GPU Products"
and its legacy-driver notes), NVIDIA/gpu-operator#492 (a VM without 64-bit MMIO for the
GPUs' BAR1) and negativo17/nvidia-driver#158 (the open module on a Pascal GPU).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence, gpu_scope
from gputriage.parsers.kernel_fold import weight
from gputriage.parsers.kernel_model import DriverEvent
from gputriage.rules.base import finding, rule
from gputriage.text.fields import split_lines

DOC_README = "https://download.nvidia.com/XFree86/Linux-x86_64/latest/README/index.html"
_KINDS = ("bar-invalid", "gpu-unsupported")
# GPU init failures other rules report: a probe failure on their GPU is their consequence
_OTHER_CAUSES = ("rm-init-adapter-failed", "gsp-firmware-missing", "fallen-off-bus", "gsp-error",
                 "gsp-rpc-timeout")


def _lines(events: Sequence[DriverEvent]) -> list[str]:
    return [ln for e in events for ln in split_lines(e.line)]


def _evidence(events: Sequence[DriverEvent], probes: Sequence[DriverEvent],
              summary: Sequence[DriverEvent]) -> list[Evidence]:
    n = weight(events)
    out = [evidence("kernel_log", _lines([*events, *probes]),
                    f"{n} occurrences" if n > 1 else None, limit=12)]
    if summary:
        out.append(evidence("kernel_log", _lines(summary), "the driver's probe summary"))
    return out


def _bar(bus: str | None, events: Sequence[DriverEvent]) -> tuple[str, str]:
    d = events[0].details
    region = f"BAR{d['bar']} is {d['size_mb']}M" if "bar" in d else "a BAR is invalid"
    gpu = f"GPU {bus}" if bus else "a GPU"
    title = f"{gpu} refused by the driver: {region}, its PCI memory region is not mapped"
    why = ("The PCI memory window the firmware or the hypervisor assigned to this GPU is empty "
           "or invalid, so the driver refuses the device; the GPU itself is not faulty. A "
           "GPU's BAR1 maps its framebuffer and needs a large 64-bit window. In a virtual "
           "machine, give the VM 64-bit MMIO space for its passthrough GPUs (VMware: "
           "pciPassthru.use64bitMMIO = TRUE and pciPassthru.64bitMMIOSizeGB at least the "
           "GPUs' BAR1 sizes added up, with EFI firmware; KVM/OVMF: a large enough 64-bit PCI "
           "hole). On bare metal, enable Above 4G Decoding (and a large MMIO-high window) in "
           "the BIOS, or boot with pci=realloc. lspci -vv -s BUS then shows Region 1 with "
           "its full size and the GPU appears in nvidia-smi after the driver reloads.")
    if d.get("above_4g") == "yes":
        why += (" The driver also says the 64-bit BAR sits above 4 GB behind a bridge "
                "without a matching prefetchable window: a platform or kernel problem to "
                "fix in the BIOS (or with pci=realloc).")
    return title, why


def _unsupported(bus: str | None, events: Sequence[DriverEvent]) -> tuple[str, str, Action]:
    d = events[0].details
    gpu = f"GPU {bus}" if bus else "a GPU"
    if d.get("reason") == "legacy-branch":
        name = f" ({d['gpu_name']})" if d.get("gpu_name") else ""
        branch = d.get("legacy_branch") or "a legacy"
        version = d.get("driver_version") or "installed"
        return (f"the {version} driver ignores {gpu}{name}: it is supported by the {branch} "
                "legacy driver only",
                f"NVIDIA moved this GPU generation to the {branch} legacy branch; newer "
                "branches no longer drive it. Install the legacy branch's driver (and pin its "
                "packages so an upgrade does not replace it), or replace the GPU. The GPU "
                "is not faulty.", Action.FIX_SOFTWARE)
    pci = f" (PCI ID {d['pci_id']})" if d.get("pci_id") else ""
    return (f"{gpu}{pci} is not supported by the open NVIDIA kernel module: it has no GSP",
            "The open kernel modules (nvidia.ko from open-gpu-kernel-modules, the default "
            "flavour from driver 560 on) drive only GPUs with a GPU System Processor: Turing "
            "and newer. This GPU is older, so the module refuses it; the GPU is not faulty. "
            "Install the proprietary kernel module of the same driver version (the "
            "distribution's non-open flavour: kernel instead of kernel-open, nvidia-driver-N "
            "instead of nvidia-driver-N-open, or the runfile with -m=kernel), rebuild it for "
            "the running kernel and reboot; nvidia-smi should then list the GPU.",
            Action.FIX_SOFTWARE)


def _probe(bus: str | None, events: Sequence[DriverEvent]) -> tuple[str, str]:
    errors = sorted({e.details["error"] for e in events if e.details.get("error")})
    err = f" (error {', '.join(errors)})" if errors else ""
    if bus is None:
        d = {k: v for e in events for k, v in e.details.items()}
        what = (f"{d['devices']} GPU(s)" if d.get("devices") else "every GPU")
        title = f"the nvidia driver failed to probe {what}: none came up"
    else:
        title = f"GPU {bus}: the nvidia driver's probe failed{err}"
    return (title,
            "The kernel module loaded but refused the GPU at probe time, so it is not usable. "
            "The driver prints why just before this line in the full kernel log (an invalid "
            "BAR, a GPU the module does not support, missing GSP firmware, a device bound to "
            "another driver such as vfio-pci or nouveau): read dmesg | grep -i -e NVRM -e "
            "nvidia around it.")


def _verdict(kind: str, bus: str | None, events: Sequence[DriverEvent]
             ) -> tuple[str, Severity, str, str, Action, Blame]:
    if kind == "bar-invalid":
        title, why = _bar(bus, events)
        return "driver.bar-unmapped", Severity.CRITICAL, title, why, Action.FIX_CONFIG, \
            Blame.CONFIG
    if kind == "gpu-unsupported":
        title, why, action = _unsupported(bus, events)
        return "driver.gpu-unsupported", Severity.CRITICAL, title, why, action, Blame.CONFIG
    title, why = _probe(bus, events)
    return "driver.probe-failed", Severity.WARNING, title, why, Action.FIX_CONFIG, Blame.UNKNOWN


@rule("driver.probe", produces=("driver.bar-unmapped", "driver.gpu-unsupported",
                                "driver.probe-failed"))
def probe_refusals(driver_events: Sequence[DriverEvent]) -> Iterator[Finding]:
    """GPUs the driver refused at probe time: an unmapped BAR (platform or hypervisor
    configuration), a GPU the loaded module does not drive (software), and probe failures
    whose cause is not in the log. A probe failure the driver explained, and its summary
    lines, join the evidence of the cause."""
    causes: dict[tuple[str, str | None], list[DriverEvent]] = {}
    probes: dict[str | None, list[DriverEvent]] = {}
    for ev in driver_events:
        if ev.kind == "probe-failed":
            probes.setdefault(ev.bus_id, []).append(ev)
        elif ev.kind in _KINDS:
            causes.setdefault((ev.kind, ev.bus_id), []).append(ev)
    other = {ev.bus_id for ev in driver_events if ev.kind in _OTHER_CAUSES}
    summary = probes.pop(None, [])
    for bus in other:
        probes.pop(bus, None)  # its RmInitAdapter / GSP finding says why
    for (kind, bus), events in sorted(causes.items(), key=lambda kv: kv[0][1] is None):
        shown = probes.pop(bus, []) if bus else [e for b in list(probes) for e in probes.pop(b)]
        fid, severity, title, why, action, blame = _verdict(kind, bus, events)
        yield finding(fid, severity, title, why, action, blame,
                      gpu_scope(bus) if bus else Scope(),
                      _evidence(events, shown, summary), (DOC_README,))
        summary = []  # quoted once, with the first cause
    if causes or other:
        probes.pop(None, None)
    elif summary and not probes:
        probes[None] = summary
    for bus, events in probes.items():
        fid, severity, title, why, action, blame = _verdict("probe-failed", bus, events)
        yield finding(fid, severity, title, why, action, blame,
                      gpu_scope(bus) if bus else Scope(),
                      _evidence(events, (), summary if bus is not None else ()),
                      (DOC_README,))
        summary = []

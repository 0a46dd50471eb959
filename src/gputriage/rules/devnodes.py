"""Rules on the /dev/nvidia* device nodes CUDA opens."""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.facts.stack import GpuSighting
from gputriage.model import Action, Blame, Finding, Scope, Severity, evidence
from gputriage.parsers.devices import DevNode
from gputriage.parsers.driver import ProcGpu
from gputriage.parsers.modules import Module
from gputriage.rules.base import finding, rule

NVIDIA_MAJOR = 195
CTL_MINOR = 255


@rule("devnode.check", produces=("devnode.missing", "devnode.wrong-number"))
def device_nodes(devnodes: list[DevNode], modules: dict[str, Module],
                 char_majors: dict[str, int] | None = None, in_container: bool | None = None,
                 proc_gpus: list[ProcGpu] | None = None,
                 visible_gpus: tuple[str, list[GpuSighting]] | None = None
                 ) -> Iterator[Finding]:
    """/dev/nvidiactl (195:255), /dev/nvidia-uvm (the dynamic major listed in
    /proc/devices) and one /dev/nvidiaN (195:N) per GPU must exist as character
    devices with the right numbers."""
    mods = modules
    if "nvidia" not in mods:
        return
    nodes = {n.path: n for n in devnodes}
    majors = char_majors or {}
    listing = evidence("dev_nvidia", [f"{n.path} {n.kind or '?'} {n.major}:{n.minor}"
                                      for n in nodes.values()] or ["(no /dev/nvidia* nodes)"])
    expected: list[tuple[str, int | None, int | None, bool]] = [
        ("/dev/nvidiactl", NVIDIA_MAJOR, CTL_MINOR, True)]
    if "nvidia_uvm" in mods:
        expected.append(("/dev/nvidia-uvm", majors.get("nvidia-uvm"), 0, True))
    for gpu_minor in _gpu_minors(proc_gpus, visible_gpus):
        expected.append((f"/dev/nvidia{gpu_minor}", NVIDIA_MAJOR, gpu_minor, False))
    for path, major, minor, essential in expected:
        node = nodes.get(path)
        if node is None:
            container_gpu = bool(in_container) and not essential
            yield finding(
                "devnode.missing", Severity.INFO if container_gpu else Severity.CRITICAL,
                f"{path} does not exist",
                ("In a container only the GPUs given to it appear." if container_gpu else
                 "CUDA opens this device node; without it programs fail with 'no CUDA-capable "
                 "device'. The nodes are made by nvidia-modprobe or udev at module load: run "
                 "nvidia-modprobe (-u -c=0 for nvidia-uvm) and check the udev rules."),
                Action.NONE if container_gpu else Action.FIX_CONFIG, Blame.CONFIG,
                Scope("device", name=path), [listing])
            continue
        wrong = node.kind != "char" or (major is not None and node.major != major) or (
            minor is not None and node.minor != minor)
        if wrong:
            want = f"char {major if major is not None else '?'}:{minor}"
            yield finding(
                "devnode.wrong-number", Severity.CRITICAL,
                f"{path} is {node.kind} {node.major}:{node.minor}, expected {want}",
                "A stale or hand-made node points at the wrong device (often left over from "
                "another driver version, whose dynamic major changed). Remove it and let "
                "nvidia-modprobe recreate it.", Action.FIX_CONFIG, Blame.CONFIG,
                Scope("device", name=path), [listing])


def _gpu_minors(proc: list[ProcGpu] | None,
                visible: tuple[str, list[GpuSighting]] | None) -> list[int]:
    if proc:
        return sorted({g.device_minor for g in proc if g.device_minor is not None})
    if visible:
        return sorted({g.minor for g in visible[1] if g.minor is not None})
    return []

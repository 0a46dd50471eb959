"""Rules on the /dev/nvidia* device nodes CUDA opens."""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.facts import Facts
from gputriage.model import Action, Blame, Finding, Scope, Severity
from gputriage.rules.base import evidence, finding, rule

NVIDIA_MAJOR = 195
CTL_MINOR = 255


@rule("devnode.check", requires=("devnodes", "modules"),
      produces=("devnode.missing", "devnode.wrong-number"))
def device_nodes(facts: Facts) -> Iterator[Finding]:
    """/dev/nvidiactl (195:255), /dev/nvidia-uvm (the dynamic major listed in
    /proc/devices) and one /dev/nvidiaN (195:N) per GPU must exist as character
    devices with the right numbers."""
    mods = facts.get("modules")
    if "nvidia" not in mods:
        return
    nodes = {n.path: n for n in facts.get("devnodes")}
    majors = facts.maybe("char_majors", {})
    in_container = bool(facts.maybe("in_container"))
    listing = evidence("dev_nvidia", [f"{n.path} {n.kind or '?'} {n.major}:{n.minor}"
                                      for n in nodes.values()] or ["(no /dev/nvidia* nodes)"])
    expected: list[tuple[str, int | None, int | None, bool]] = [
        ("/dev/nvidiactl", NVIDIA_MAJOR, CTL_MINOR, True)]
    if "nvidia_uvm" in mods:
        expected.append(("/dev/nvidia-uvm", majors.get("nvidia-uvm"), 0, True))
    for gpu_minor in _gpu_minors(facts):
        expected.append((f"/dev/nvidia{gpu_minor}", NVIDIA_MAJOR, gpu_minor, False))
    for path, major, minor, essential in expected:
        node = nodes.get(path)
        if node is None:
            container_gpu = in_container and not essential
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


def _gpu_minors(facts: Facts) -> list[int]:
    proc = facts.maybe("proc_gpus")
    if proc:
        return sorted({g.device_minor for g in proc if g.device_minor is not None})
    visible = facts.maybe("visible_gpus")
    if visible:
        return sorted({g.minor for g in visible[1] if g.minor is not None})
    return []

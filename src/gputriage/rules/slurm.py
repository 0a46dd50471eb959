"""Rules on what Slurm says of a GPU node: a gres/gpu count lower than slurm.conf
configures (Slurm has drained it or set it INVAL), slurmd unable to autodetect its GPUs
through NVML, and job steps the OOM killer hit (the host's memory, not the GPU's).

Facts from Slurm's documentation (gres.conf: AutoDetect=nvml needs a Slurm built with
NVML; a node registering fewer GRES than configured is drained or set INVAL with that
reason) and slurmctld's own messages.
"""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.model import Action, Blame, Finding, Scope, Severity, evidence
from gputriage.parsers.slurm_log import SlurmEvent, SlurmLog
from gputriage.rules.base import finding, rule

SOURCE = "slurm_log"
DOC = "https://slurm.schedmd.com/gres.conf.html"


def _scope(node: str | None) -> Scope:
    return Scope("slurm-node", name=node) if node else Scope()


def _lines(events: list[SlurmEvent]) -> list[str]:
    return list(dict.fromkeys(e.line for e in events))[:8]


@rule("slurm.gres-count", produces=("slurm.gpu-count-low",))
def gres_count(slurm_log: SlurmLog) -> Iterator[Finding]:
    """A node that registered fewer GPUs than slurm.conf gives it: Slurm took it out. Some
    GPUs but not all is a GPU the driver lost (Xid 79) or a MIG layout changed; none at
    all is more often slurmd not seeing the GPUs (the driver not up when it started,
    AutoDetect=nvml without NVML, gres.conf's File= paths) than every GPU failing."""
    by_node: dict[str | None, list[SlurmEvent]] = {}
    for ev in slurm_log.of("gres-count-low"):
        by_node.setdefault(ev.node, []).append(ev)
    rejected = slurm_log.of("registration-rejected")
    for node, events in by_node.items():
        last = events[-1]
        have, want = last.have, last.want
        where = node or "the node"
        count = f"{have} of {want}" if have is not None and want is not None else "fewer"
        none = have == 0
        why = ("slurmd found no GPU at all: more often slurmd not seeing them than every "
               "GPU failing at once: the driver was not loaded (or nvidia-persistenced not "
               "up) when slurmd started, AutoDetect=nvml in gres.conf with a Slurm built "
               "without NVML, or File= paths that do not exist" if none else
               "a GPU is missing: the driver lost one (Xid 79, fallen off the bus) or did "
               "not bring it up, or the MIG layout changed and slurm.conf still counts the "
               "old one")
        shown = [evidence(SOURCE, _lines(events + [r for r in rejected if r.node == node]))]
        yield finding(
            "slurm.gpu-count-low", Severity.WARNING,
            f"Slurm: {where} registered {count} configured GPUs (gres/gpu), so it is out "
            "of service",
            f"slurmctld compared the GPUs slurmd reported with slurm.conf's Gres= for "
            f"{where} and found {count}: it set the node DRAIN or INVAL, so no job lands "
            f"there until it is fixed and resumed. Here {why}. What the node itself shows "
            "decides: nvidia-smi -L on it lists the GPUs the driver sees.",
            Action.FIX_CONFIG, Blame.UNKNOWN, _scope(node), shown, references=(DOC,))


@rule("slurm.gpu-autodetect", produces=("slurm.nvml-autodetect-unavailable",))
def gpu_autodetect(slurm_log: SlurmLog) -> Iterator[Finding]:
    """slurmd told to autodetect GPUs through NVML by a Slurm built without it."""
    events = slurm_log.of("nvml-autodetect")
    if not events:
        return
    node = next((e.node for e in events if e.node), None)
    yield finding(
        "slurm.nvml-autodetect-unavailable", Severity.WARNING,
        "slurmd cannot autodetect the GPUs: this Slurm was built without NVML",
        "gres.conf asks for AutoDetect=nvml, but this slurmd was built without NVML (the "
        "NVIDIA management library was not found when Slurm was configured), so it finds "
        "no GPU and the node registers without its gres/gpu. Install a Slurm build with "
        "NVML support (its gpu_nvml plugin), or list the GPUs in gres.conf with "
        "File=/dev/nvidia[0-N] instead of AutoDetect=nvml, then restart slurmd.",
        Action.FIX_SOFTWARE, Blame.CONFIG, _scope(node), [evidence(SOURCE, _lines(events))],
        references=(DOC,))


@rule("slurm.oom-kill", produces=("slurm.step-oom-killed",))
def step_oom(slurm_log: SlurmLog) -> Iterator[Finding]:
    """A job step the kernel's OOM killer hit inside its cgroup: the job asked for less
    host memory than it used. The GPU's memory is another matter (CUDA's out of memory)."""
    events = slurm_log.of("oom-kill")
    if not events:
        return
    steps = ", ".join(dict.fromkeys(e.detail for e in events if e.detail))
    yield finding(
        "slurm.step-oom-killed", Severity.WARNING,
        f"the OOM killer ended tasks of {steps or 'a job step'} (host memory)",
        "slurmstepd saw the kernel's OOM killer end tasks of the step inside its memory "
        "cgroup: the job used more host RAM than it asked for (--mem, --mem-per-cpu, "
        "--mem-per-gpu). This is the host's memory, not the GPU's (CUDA reports that as out "
        "of memory), and not the node's fault: raise the job's memory request or lower its "
        "use (data loader workers, pinned-memory buffers), and resubmit it.",
        Action.RESTART_JOB, Blame.JOB_CONFIG, evidence=[evidence(SOURCE, _lines(events))])

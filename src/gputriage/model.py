"""Core result types: findings, their scope and evidence, skipped rules, the host
summary and the GPU rows.

Everything a rule produces and a view renders is defined here, as plain
frozen dataclasses with a stable JSON form (see docs/json-schema.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from gputriage.text.fields import strict_float
from gputriage.vocabulary import (
    DRAINING_ACTIONS,
    Action,
    Blame,
    Severity,
    Status,
    action_rank,
    inconsistency,
)

# The result types, and the vocabulary they are written in (re-exported from
# gputriage.vocabulary, so that a rule imports everything a finding needs from here).
__all__ = [
    "DRAINING_ACTIONS", "NODE", "UNKNOWN_STATE", "Action", "Blame", "DriverVersions",
    "Evidence", "Finding", "GpuRow", "HealthyChange", "HostIdentity", "HostSummary",
    "Occurrences", "Result", "Scope", "Severity", "Skipped", "Status", "evidence",
    "UNNAMED_HOST", "finding_order", "gpu_scope", "inconsistency", "index_ranges",
]


@dataclass(frozen=True)
class Scope:
    """What a finding is about: the node, one GPU, or a module / unit / port."""

    kind: str = "node"  # node | gpu | module | unit | nic | port | device
    gpu_index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    name: str | None = None  # module, unit, NIC or port name

    def label(self) -> str:
        if self.kind == "gpu":
            parts = [f"GPU {self.gpu_index}" if self.gpu_index is not None else "GPU"]
            if self.pci_bus_id:
                parts.append(self.pci_bus_id)
            return " ".join(parts)
        if self.kind == "node":
            return "node"
        return f"{self.kind} {self.name}" if self.name else self.kind


NODE = Scope()


@dataclass(frozen=True)
class Evidence:
    """Lines from one source that prove a finding."""

    source: str
    lines: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class Occurrences:
    """How often and when an event-based finding happened (log findings)."""

    count: int
    first: str | None = None  # time as ISO 8601 when known, else as printed
    last: str | None = None
    current_boot: bool = True  # False: history from an earlier boot, not a current failure


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    title: str
    explanation: str
    action: Action
    blame: Blame
    scope: Scope = NODE
    evidence: tuple[Evidence, ...] = ()
    references: tuple[str, ...] = ()
    occurrences: Occurrences | None = None
    status: Status = Status.CURRENT
    status_note: str | None = None  # why it is not current: the reset, the acknowledgement
    also: tuple[Scope, ...] = ()  # the same finding on these other scopes (GPUs)
    consequences: tuple[Finding, ...] = ()  # what this cause explains, folded in
    step: str | None = None  # the concrete next step, with versions, GPUs and commands
    # the repair the rule's own facts decided (the build to install, the driver to reach),
    # placed by next_steps in the frame of the action; None: the id's repair. Not in the
    # JSON form (the step is) nor in equality
    fix: str | None = field(default=None, compare=False)
    # how soon to act on it among findings of the same severity and action, higher first
    # (an eviction of production now before a drain blocked later); an ordering hint set
    # by the engine, not in the JSON form nor in equality
    urgency: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        why = inconsistency(self.severity, self.action, self.blame)
        if why:
            raise ValueError(f"finding {self.id}: {why}")

    @property
    def current(self) -> bool:
        """Whether it counts in the verdict (not history, not acknowledged)."""
        return self.status is Status.CURRENT

    @property
    def scopes(self) -> tuple[Scope, ...]:
        """Every scope it covers: its own, then the others of a per-GPU repeat."""
        return (self.scope, *self.also)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id, "severity": self.severity.value, "title": self.title,
            "explanation": self.explanation, "action": self.action.value,
            "blame": self.blame.value, "scope": _scope_json(self.scope),
            "evidence": [{k: (list(v) if isinstance(v, tuple) else v)
                          for k, v in asdict(e).items() if v is not None}
                         for e in self.evidence],
            "references": list(self.references),
        }
        if self.occurrences is not None:
            data["occurrences"] = asdict(self.occurrences)
        data["status"] = self.status.value
        if self.status_note:
            data["status_note"] = self.status_note
        if self.also:
            data["also"] = [_scope_json(s) for s in self.also]
        if self.consequences:
            data["consequences"] = [c.to_json() for c in self.consequences]
        if self.step:
            data["step"] = self.step
        return data


def _scope_json(scope: Scope) -> dict[str, Any]:
    return {k: v for k, v in asdict(scope).items() if v is not None}


@dataclass(frozen=True)
class Skipped:
    """A rule that could not run, and why (missing inputs are reported, not hidden)."""

    rule: str
    reason: str


@dataclass(frozen=True)
class DriverVersions:
    """The NVIDIA driver as each layer reports it."""

    kernel_module: str | None = None  # the loaded kernel module
    userspace: str | None = None  # NVML / nvidia-smi library
    cuda: str | None = None  # the highest CUDA version the driver supports

    def to_json(self) -> dict[str, Any]:
        return {"kernel_module": self.kernel_module, "userspace": self.userspace,
                "cuda": self.cuda}


UNNAMED_HOST = "the node these outputs came from"  # a host no input names


@dataclass(frozen=True)
class HostIdentity:
    """Who a host is: its name, boot, kernel, OS and driver stack versions."""

    hostname: str | None = None
    kernel: str | None = None  # uname -r
    os: str | None = None  # os-release PRETTY_NAME
    boot_id: str | None = None
    boot_time: str | None = None  # ISO 8601: the snapshot's time less the uptime
    driver: DriverVersions = DriverVersions()
    container_toolkit: str | None = None  # nvidia-ctk --version

    @property
    def called(self) -> str:
        """The host in a sentence: its name, else the node the outputs came from (never
        "this host": read from pasted files, that is the machine gputriage runs on)."""
        return self.hostname or UNNAMED_HOST


@dataclass(frozen=True)
class HealthyChange:
    """What changed since the host's last healthy check (``check`` with history)."""

    when: str  # ISO 8601 time of that healthy check
    changes: tuple[str, ...]  # "key: old -> new"

    def to_json(self) -> dict[str, Any]:
        return {"when": self.when, "changes": list(self.changes)}


@dataclass(frozen=True)
class HostSummary(HostIdentity):
    """The ``host`` part of a result: the identity, GPU counts and the verdict."""

    gpus_on_pci: int | None = None
    gpus_visible: int | None = None
    rules_run: int = 0  # rules that need inputs and could run
    verdict: str | None = None  # ok | warning | critical | unknown
    changed_since_healthy: HealthyChange | None = None
    # what a --since / --boot window judged of the kernel log (WindowReport.to_json)
    log_window: dict[str, Any] | None = None

    @classmethod
    def of(cls, identity: HostIdentity, **summary: Any) -> HostSummary:
        """The summary of a host of ``identity``."""
        known = {f.name: getattr(identity, f.name) for f in fields(HostIdentity)}
        return cls(**known, **summary)

    def to_json(self) -> dict[str, Any]:
        """The JSON form, keys in the documented order."""
        data = {"hostname": self.hostname, "kernel": self.kernel, "os": self.os,
                "boot_id": self.boot_id, "driver": self.driver.to_json(),
                "gpus_on_pci": self.gpus_on_pci, "gpus_visible": self.gpus_visible,
                "rules_run": self.rules_run, "boot_time": self.boot_time,
                "container_toolkit": self.container_toolkit, "verdict": self.verdict}
        if self.changed_since_healthy is not None:
            data["changed_since_healthy"] = self.changed_since_healthy.to_json()
        if self.log_window is not None:
            data["log_window"] = self.log_window
        return data


UNKNOWN_STATE = "unknown"  # GpuRow.state of a GPU the driver could not be asked about


@dataclass(frozen=True)
class GpuRow:
    """One GPU of a result: as the driver lists it, or only seen on the PCI bus."""

    index: int | None
    pci_bus_id: str | None
    name: str | None = None
    uuid: str | None = None
    visible: bool = True  # False: on PCI (or lost) but not usable by the driver
    listed: bool = True  # listed by the driver (its persistence mode is then reported)
    persistence_mode: bool | None = None
    serial: str | None = None
    vbios: str | None = None
    firmware: str | None = None  # GSP firmware
    severity: Severity = Severity.OK  # the worst of the findings scoped to it
    # "unknown": listed, but the driver could not be asked about it (NVML or nvidia-smi
    # failed to initialise, or hung): its severity says only what the logs show
    state: str | None = None

    @property
    def unknown(self) -> bool:
        return self.state == UNKNOWN_STATE

    def to_json(self) -> dict[str, Any]:
        """The JSON form: board facts only when known, persistence only when listed,
        ``state`` only when the GPU's state is unknown."""
        data: dict[str, Any] = {"index": self.index, "pci_bus_id": self.pci_bus_id,
                                "name": self.name, "uuid": self.uuid}
        if self.listed:
            data["persistence_mode"] = self.persistence_mode
        data["visible"] = self.visible
        for key, value in (("serial", self.serial), ("vbios", self.vbios),
                           ("firmware", self.firmware)):
            if value:
                data[key] = value
        data["severity"] = self.severity.value
        if self.state:
            data["state"] = self.state
        return data


@dataclass
class Result:
    """One analysed host: findings, skipped rules, facts summary, provenance."""

    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    host: HostSummary = field(default_factory=HostSummary)
    gpus: list[GpuRow] = field(default_factory=list)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    unreadable: list[str] = field(default_factory=list)
    job_faults_fail: bool = False  # the job's faults may fail the check (exit 2)
    not_read: list[str] = field(default_factory=list)  # what was skipped, and why

    @property
    def worst(self) -> Severity:
        """The worst severity of the current findings, node's and job's."""
        return _worst(f for f in self.findings if f.current)

    def worst_of(self, side: str) -> Severity:
        """The worst severity of the current findings of ``side`` (node | job)."""
        return _worst(f for f in self.findings if f.current and f.blame.side == side)

    def sorted_findings(self) -> list[Finding]:
        """Current findings first; then worst first, what happened first, by id."""
        return sorted(self.findings, key=finding_order)


def finding_order(f: Finding) -> tuple[bool, int, int, bool, int, bool, tuple[int, float, str],
                                       str, str]:
    """The order an on-call acts in: current before history and acknowledged; worst
    first; then the most drastic action (a drain before a reset, before a fix, before a
    restart), the most certain blame (an unknown one last), the most urgent; then the
    causal order (earliest first event; findings with no time after those with one) and
    the id."""
    first = f.occurrences.first if f.occurrences and f.occurrences.first else None
    return (not f.current, -f.severity.rank, action_rank(f.action), f.blame is Blame.UNKNOWN,
            -f.urgency, first is None, _time_key(first), f.id, f.scope.label())


def _time_key(when: str | None) -> tuple[int, float, str]:
    """A first-event time as a sort key: ISO 8601 times in time order (naive ones read as
    UTC), then dmesg uptime seconds in numeric order ("999.5" before "1000.2"), then
    other printed forms as text."""
    if not when:
        return (3, 0.0, "")
    uptime = strict_float(when)
    if uptime is not None:
        return (1, uptime, "")
    try:
        at = datetime.fromisoformat(when)
    except ValueError:
        return (2, 0.0, when)
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return (0, at.timestamp(), "")


def _worst(findings: Iterable[Finding]) -> Severity:
    return max((f.severity for f in findings), key=lambda s: s.rank, default=Severity.OK)


# -- building blocks of findings ------------------------------------------------------

def evidence(source: str, lines: Iterable[str], note: str | None = None,
             limit: int = 40) -> Evidence:
    """Evidence from one source; long runs of lines are cut to ``limit``."""
    kept = [ln.rstrip("\n") for ln in lines if ln is not None]
    if len(kept) > limit:
        extra = len(kept) - limit
        kept = kept[:limit] + [f"... ({extra} more lines)"]
    return Evidence(source, tuple(kept), note)


def gpu_scope(bus_id: str | None, index: int | None = None, uuid: str | None = None) -> Scope:
    return Scope(kind="gpu", gpu_index=index, uuid=uuid, pci_bus_id=bus_id)


def index_ranges(indices: Iterable[int]) -> str:
    """``0-3, 5, 7-8`` from GPU indices."""
    spans: list[list[int]] = []
    for i in sorted(set(indices)):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)

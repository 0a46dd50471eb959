"""Core result types: findings, their scope and evidence, skipped rules.

Everything a rule produces and a view renders is defined here, as plain
frozen dataclasses with a stable JSON form (see docs/json-schema.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class Severity(str, Enum):
    """How bad a finding is; ordered so that ``max()`` gives the worst."""

    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.OK: 0, Severity.INFO: 1, Severity.WARNING: 2, Severity.CRITICAL: 3}


class Action(str, Enum):
    """The closed vocabulary of next steps an on-call can take."""

    NONE = "none"
    RESTART_JOB = "restart-job"
    RESET_GPU = "reset-gpu"
    REBOOT_NODE = "reboot-node"
    DRAIN_AND_REPAIR = "drain-and-repair"
    FIX_SOFTWARE = "fix-software"
    FIX_CONFIG = "fix-config"


class Blame(str, Enum):
    """The on-call's first question: is it the node or the job?"""

    NODE = "node"
    JOB = "job"
    CONFIG = "config"
    UNKNOWN = "unknown"


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

    def to_json(self) -> dict:
        data = asdict(self)
        data["severity"] = self.severity.value
        data["action"] = self.action.value
        data["blame"] = self.blame.value
        data["scope"] = {k: v for k, v in asdict(self.scope).items() if v is not None}
        data["evidence"] = [
            {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(e).items()
             if v is not None}
            for e in self.evidence
        ]
        data["references"] = list(self.references)
        if self.occurrences is None:
            data.pop("occurrences", None)
        return data


@dataclass(frozen=True)
class Skipped:
    """A rule that could not run, and why (missing inputs are reported, not hidden)."""

    rule: str
    reason: str


@dataclass
class Result:
    """One analysed host: findings, skipped rules, facts summary, provenance."""

    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    host: dict = field(default_factory=dict)
    gpus: list[dict] = field(default_factory=list)
    inputs: list[dict] = field(default_factory=list)
    manifest: dict | None = None
    unreadable: list[str] = field(default_factory=list)

    @property
    def worst(self) -> Severity:
        return max((f.severity for f in self.findings), key=lambda s: s.rank,
                   default=Severity.OK)

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (-f.severity.rank, f.id, f.scope.label()))

"""The closed vocabularies every finding is written in: severity, action, blame and
status, and the one rule that ties them (:func:`inconsistency`); the verdict words
and the name of the published result document.

Kept apart from :mod:`gputriage.model` (whose dataclasses cost start-up time) so that
the knowledge tables and the offline commands (``xid``, ``explain``) load only these.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["ACTION_ORDER", "ACTION_WORDS", "AT_FAULT", "DRAINING_ACTIONS", "JOB_VERDICTS",
           "RESULT_SCHEMA", "VERDICTS", "Action", "Blame", "EventKind", "Severity", "Status",
           "action_rank", "inconsistency"]

# The schema of the published result (check --json, a watch's /result): written by
# gputriage.results.document, read back by gputriage.results.reader.
RESULT_SCHEMA = "gputriage/result/v1"
# A result's verdict words (the node's side may be unknown; the job's never is), and
# which side is at fault.
VERDICTS = ("ok", "warning", "critical", "unknown")
JOB_VERDICTS = ("ok", "warning", "critical")
AT_FAULT = ("node", "job", "node and job", "neither")


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
    PLAN_REPAIR = "plan-repair"  # degraded, still in service: repair at the next window


class Blame(str, Enum):
    """The on-call's first question: is it the node or the job?

    ``config`` is the node's configuration (modules, services, settings: the node's
    side); ``job-config`` is the job's own settings (its environment variables,
    launch options: the job's side)."""

    NODE = "node"
    JOB = "job"
    CONFIG = "config"
    JOB_CONFIG = "job-config"
    UNKNOWN = "unknown"

    @property
    def side(self) -> str:
        """``job`` for the job and its settings, else ``node``."""
        return "job" if self in (Blame.JOB, Blame.JOB_CONFIG) else "node"


class Status(str, Enum):
    """Whether a finding is a current failure, or only reported."""

    CURRENT = "current"
    PAST = "past"  # ended by a GPU reset, a driver reload or a reboot: history
    ACKNOWLEDGED = "acknowledged"  # an operator acknowledged it (``gputriage ack``)


# Most drastic first: the order an on-call acts in among findings of one severity (a
# node out of service before a GPU reset, before a repair planned, a fix, a restart).
ACTION_ORDER = (Action.DRAIN_AND_REPAIR, Action.REBOOT_NODE, Action.RESET_GPU,
                Action.PLAN_REPAIR, Action.FIX_SOFTWARE, Action.FIX_CONFIG, Action.RESTART_JOB,
                Action.NONE)
_ACTION_RANK = {a: i for i, a in enumerate(ACTION_ORDER)}


def action_rank(action: Action) -> int:
    """0 for the most drastic action, up to ``len(ACTION_ORDER) - 1`` for none."""
    return _ACTION_RANK[action]


# Actions that take a node or a GPU out of service: only a critical finding that
# blames the node may ask for them, so that what drains (exit status 2) and what the
# report says to do never disagree.
DRAINING_ACTIONS = frozenset({Action.DRAIN_AND_REPAIR, Action.REBOOT_NODE,
                              Action.RESET_GPU})


def inconsistency(severity: Severity, action: Action, blame: Blame) -> str | None:
    """Why this severity, action and blame cannot go together; None when they can."""
    if action in DRAINING_ACTIONS and severity is not Severity.CRITICAL:
        return f"{action.value} takes the node out of service: it needs severity critical"
    if action in DRAINING_ACTIONS and blame.side == "job":
        return f"{action.value} blames the node, not the job ({blame.value})"
    if severity is Severity.CRITICAL and action is Action.NONE:
        return "a critical finding needs an action"
    if severity is Severity.OK and action is not Action.NONE:
        return "an ok finding takes no action"
    return None


# Each action in the on-call's words (the offline catalog views: xid, explain).
ACTION_WORDS: dict[str, str] = {
    "none": "nothing to do now",
    "restart-job": "restart the job / look at the application",
    "reset-gpu": "drain the GPU and reset it",
    "reboot-node": "drain and reboot the node",
    "drain-and-repair": "cordon, drain and open a hardware repair",
    "fix-software": "upgrade or fix the software",
    "fix-config": "fix the configuration",
    "plan-repair": "stays in service: repair at the next maintenance window",
}


class EventKind(str, Enum):
    """The kind of a kernel-log event. A ``str``: ``ev.kind == "xid"`` holds, and the
    JSON form is the plain name."""

    API_MISMATCH = "api-mismatch"
    FALLEN_OFF_BUS = "fallen-off-bus"
    RM_INIT_ADAPTER_FAILED = "rm-init-adapter-failed"
    NO_ADAPTER_PROBED = "no-adapter-probed"
    BAR_INVALID = "bar-invalid"  # a PCI memory region the driver cannot use: GPU refused
    GPU_UNSUPPORTED = "gpu-unsupported"  # the loaded module does not drive this GPU
    PROBE_FAILED = "probe-failed"  # the driver's probe of a GPU failed (or its summary)
    GSP_FIRMWARE_MISSING = "gsp-firmware-missing"
    MODULE_LOAD_FAILED = "module-load-failed"
    XID = "xid"
    SXID = "sxid"
    GSP_RPC_TIMEOUT = "gsp-rpc-timeout"
    GSP_ERROR = "gsp-error"
    GPU_RESET_REQUIRED = "gpu-reset-required"
    PEERMEM_INVALID_CONTEXT = "peermem-invalid-context"
    PEERMEM_LOAD_FAILED = "peermem-load-failed"
    NVLINK_ERROR = "nvlink-error"
    PCIE_AER = "pcie-aer"
    PCIE_BANDWIDTH_LIMITED = "pcie-bandwidth-limited"
    MLX5_LINK = "mlx5-link"
    HCA_FIRMWARE_OLD = "hca-firmware-old"  # an mlx4/mlx5 driver asks for newer HCA firmware
    LINK_STATE = "link-state"
    HW_ERROR = "hw-error"
    STORAGE_ERROR = "storage-error"  # block-device, NVMe, md or filesystem I/O failures
    SEGFAULT = "segfault"
    HUNG_TASK = "hung-task"
    SOFT_LOCKUP = "soft-lockup"
    DRIVER_LOAD = "driver-load"  # the nvidia module (re)loaded: every GPU re-initialised

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

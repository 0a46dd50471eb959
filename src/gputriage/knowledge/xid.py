"""The Xid and SXid catalogs: what each code means and what to do about it.

Two CSV tables in this package (``xid.csv``, ``sxid.csv``) hold the facts
taken from NVIDIA's documentation (code, mnemonic, NVIDIA's resolution
bucket, Fabric Manager category, fatality) next to this project's own
judgement in the closed vocabularies of :mod:`gputriage.model` (action,
severity, blame) and its own short wording. An Xid's ``kernel_event`` is the
kernel-log message that reports the same failure without its number (a GPU
fallen off the bus is Xid 79). They are loaded once, on first use; the
kernel-log rules read every verdict from here.
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from gputriage.text.fields import strict_hex, strict_int
from gputriage.vocabulary import Action, Blame, EventKind, Severity, inconsistency

_HERE = Path(__file__).parent  # the catalogs beside this module (see knowledge._HERE)
ORIGINS = frozenset({"hardware", "driver", "application", "memory", "system", "thermal",
                     "nvlink", "firmware", "fabric"})
SXID_CATEGORIES = frozenset({"non-fatal", "fatal", "always-fatal", "other-notable"})


@dataclass(frozen=True)
class XidInfo:
    """One Xid code: NVIDIA's facts and this project's judgement."""

    code: int
    mnemonic: str | None
    meaning: str
    origins: tuple[str, ...]
    nvidia_bucket: str | None
    action: Action
    severity: Severity
    blame: Blame
    explanation: str
    legacy: bool
    kernel_event: str | None = None  # the message kind that reports it without the number
    nvidia_followup: str | None = None  # the catalog's investigatory action ("IGNORE (follow
    # other Xid)": a code that only accompanies another)


@dataclass(frozen=True)
class SxidInfo:
    """One NVSwitch SXid code: NVIDIA's facts and this project's judgement.

    ``bucket`` is NVIDIA's action bucket for the code (NVSentinel's mapping)
    and ``origins`` the likely origins, in the same vocabulary as Xids.
    """

    code: int
    mnemonic: str | None
    meaning: str
    category: str | None
    fatal: bool
    action: Action
    severity: Severity
    blame: Blame
    explanation: str
    origins: tuple[str, ...] = ()
    bucket: str | None = None


def _rows(name: str) -> list[dict[str, str]]:
    text = (_HERE / name).read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def _opt(raw: str) -> str | None:
    raw = raw.strip()
    return raw or None


def _origins(raw: str) -> tuple[str, ...]:
    found = tuple(o for o in raw.split("|") if o)
    unknown = set(found) - ORIGINS
    if unknown:
        raise ValueError(f"unknown origin(s) {sorted(unknown)} in catalog")
    return found


def _verdict(table: str, code: int, severity: Severity, action: Action, blame: Blame) -> None:
    """A row's severity, action and blame must go together (a draining action is for
    a critical node fault only): ValueError naming the row when they do not."""
    why = inconsistency(severity, action, blame)
    if why:
        raise ValueError(f"{table} row {code}: {why}")


def _event_kind(raw: str) -> str | None:
    kind = _opt(raw)
    return None if kind is None else EventKind(kind).value  # ValueError when unknown


def _severity(raw: str) -> Severity:
    sev = Severity(raw)
    if sev is Severity.OK:
        raise ValueError("catalog severity must be critical, warning or info")
    return sev


@functools.cache
def _xids() -> dict[int, XidInfo]:
    table: dict[int, XidInfo] = {}
    for row in _rows("xid.csv"):
        info = XidInfo(
            code=int(row["code"]),
            mnemonic=_opt(row["mnemonic"]),
            meaning=row["meaning"],
            origins=_origins(row["origins"]),
            nvidia_bucket=_opt(row["nvidia_bucket"]),
            action=Action(row["action"]),
            severity=_severity(row["severity"]),
            blame=Blame(row["blame"]),
            explanation=row["explanation"],
            legacy=row["legacy"] == "yes",
            kernel_event=_event_kind(row["kernel_event"]),
            nvidia_followup=_opt(row["nvidia_followup"]),
        )
        _verdict("xid.csv", info.code, info.severity, info.action, info.blame)
        table[info.code] = info
    return table


@functools.cache
def _sxids() -> dict[int, SxidInfo]:
    table: dict[int, SxidInfo] = {}
    for row in _rows("sxid.csv"):
        category = _opt(row["category"])
        if category is not None and category not in SXID_CATEGORIES:
            raise ValueError(f"unknown SXid category {category!r}")
        info = SxidInfo(
            code=int(row["code"]),
            mnemonic=_opt(row["mnemonic"]),
            meaning=row["meaning"],
            category=category,
            fatal=row["fatal"] == "yes",
            action=Action(row["action"]),
            severity=_severity(row["severity"]),
            blame=Blame(row["blame"]),
            explanation=row["explanation"],
            origins=_origins(row["origins"]),
            bucket=_opt(row["bucket"]),
        )
        _verdict("sxid.csv", info.code, info.severity, info.action, info.blame)
        table[info.code] = info
    return table


def xid_info(code: int) -> XidInfo | None:
    """The catalog entry of Xid ``code``, or None when the catalog does not know it."""
    return _xids().get(code)


def all_xids() -> tuple[XidInfo, ...]:
    """Every catalogued Xid, by code."""
    return tuple(_xids()[c] for c in sorted(_xids()))


def xid_for_event(kind: str) -> XidInfo | None:
    """The Xid whose failure a kernel-log message of ``kind`` reports without the
    number (``fallen-off-bus``: Xid 79), or None."""
    return next((x for x in _xids().values() if x.kernel_event == kind), None)


def sxid_info(code: int) -> SxidInfo | None:
    """The catalog entry of NVSwitch SXid ``code``, or None when unknown."""
    return _sxids().get(code)


def all_sxids() -> tuple[SxidInfo, ...]:
    """Every catalogued SXid, by code."""
    return tuple(_sxids()[c] for c in sorted(_sxids()))


# Xid 154 / nvidia-smi "GPU Recovery Action" names and NVML's numeric values.
_RECOVERY_NAMES: tuple[tuple[str, Action], ...] = (
    ("node reboot required", Action.REBOOT_NODE),
    ("system reboot", Action.REBOOT_NODE),
    ("reboot", Action.REBOOT_NODE),
    ("drain and reset", Action.RESET_GPU),      # drain the work, then reset the GPU
    ("drain p2p", Action.RESTART_JOB),          # stop the peer-to-peer jobs, then look again
    ("gpu reset required", Action.RESET_GPU),
    ("bus reset", Action.RESET_GPU),
    ("reset", Action.RESET_GPU),
    ("recover imex domain", Action.FIX_CONFIG),
    ("none", Action.NONE),
)
_RECOVERY_CODES = {0: Action.NONE, 1: Action.RESET_GPU, 2: Action.REBOOT_NODE,
                   3: Action.RESTART_JOB, 4: Action.RESET_GPU, 5: Action.FIX_CONFIG,
                   6: Action.RESET_GPU, 7: Action.REBOOT_NODE}
_CHANGED_TO = re.compile(r"\bto\s+(.*)$", re.IGNORECASE)
_NUMBER = re.compile(r"^\s*(0x[0-9a-f]+|[0-9]+)\b", re.IGNORECASE)


def recovery_action(text: str) -> Action | None:
    """Our action for a GPU recovery action as printed by Xid 154 or nvidia-smi.

    Accepts the bare name ("GPU Reset Required", "Node Reboot Required",
    "Drain and Reset", "Drain P2P", "None"), the value with its number
    ("0x1 (GPU Reset Required)") or the whole Xid 154 message, of which the
    new action (after "to") counts. "Drain and Reset" means drain the work
    then reset the GPU (reset-gpu); "Drain P2P" means stopping the jobs that
    use peer-to-peer traffic before the driver says more (restart-job).
    Returns None when the text names no known action.
    """
    if not isinstance(text, str):
        return None
    value = text.strip()
    changed = _CHANGED_TO.search(value)
    if changed and "changed" in value.lower():
        value = changed.group(1)
    lowered = " ".join(value.lower().replace("_", " ").split())
    inner = re.search(r"\(([^)]*)\)", lowered)
    for candidate in ([inner.group(1)] if inner else []) + [lowered]:
        for name, action in _RECOVERY_NAMES:
            if re.search(rf"\b{name}\b", candidate):
                return action
    number = _NUMBER.match(lowered)
    if number:
        raw = number.group(1)
        code = strict_hex(raw) if raw[:2] in ("0x", "0X") else strict_int(raw, signed=False)
        return None if code is None else _RECOVERY_CODES.get(code)
    return None

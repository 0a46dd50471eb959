"""Kernel-log events as the scanner gives them, and the kernel rules' judgement of them:
shared by the kernel-log rule tests, the Xid catalog verdicts and the consistency checks."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gputriage.logscan.events import DriverEvent
from gputriage.rules.kernel_log import judge_events, judge_sxids
from gputriage.rules.kernel_xid import judge_xids

T0 = datetime(2024, 5, 14, 8, 0, 0, tzinfo=timezone.utc)
A, B = "0000:18:00.0", "0000:9a:00.0"


def xid(code: int, bus: str | None = A, *, pid: str | None = None, name: str | None = None,
        t: float = 0.0, boot: int = 0, message: str = "fault", **details: str) -> DriverEvent:
    """An Xid event as the scanner gives it (line in the classic form)."""
    short = bus[:-2] if bus else "..."
    fields = ""
    if pid is not None:
        fields += f"pid={pid}, name={name or '<unknown>'}, "
    line = f"[{100 + t:.6f}] NVRM: Xid (PCI:{short}): {code}, {fields}{message}"
    d = {"code": str(code), "message": message, **details}
    if pid is not None:
        d["pid"] = pid
        if name:
            d["process"] = name
    return DriverEvent("xid", line, bus, f"{100 + t:.6f}", d, time=T0 + timedelta(seconds=t),
                       uptime_s=100 + t, boot=boot)


def other(kind: str, line: str, bus: str | None = None, *, t: float = 0.0, boot: int = 0,
          **details: str) -> DriverEvent:
    return DriverEvent(kind, line, bus, None, dict(details), time=T0 + timedelta(seconds=t),
                       boot=boot)


def judge(events, gpus=None):
    gpus = gpus or {}
    return (list(judge_xids(events, gpus)) + list(judge_sxids(events))
            + list(judge_events(events, gpus)))


def one(findings, fid, bus=None):
    hits = [f for f in findings if f.id == fid and (bus is None or f.scope.pci_bus_id == bus)]
    assert len(hits) == 1, [(f.id, f.scope.pci_bus_id, f.title) for f in findings]
    return hits[0]


def sxid(code: int, severity: str, link: str = "28", t: float = 0.0) -> DriverEvent:
    line = (f"nvidia-nvswitch3: SXid (PCI:0000:07:00.0): {code}, {severity}, Link {link} "
            "LTSSM Fault Up")
    return other("sxid", line, "0000:07:00.0", t=t, code=str(code), severity=severity,
                  link=link, switch="nvidia-nvswitch3", message="LTSSM Fault Up")

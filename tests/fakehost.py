"""A simulated host for collection tests: a root directory and scripted commands."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

from gputriage.collect.host import CommandOutcome


class FakeHost:
    """Files live under ``root``; commands answer from ``commands`` by argv."""

    def __init__(self, root: Path, commands: dict[tuple[str, ...], tuple[int, str]] | None = None,
                 hang: dict[tuple[str, ...], float] | None = None) -> None:
        self.root = root
        self.commands = commands or {}
        self.hang = hang or {}
        self.calls: list[list[str]] = []

    def write(self, path: str, text: str) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def run(self, argv: list[str], timeout_s: float, cap_bytes: int) -> CommandOutcome:
        self.calls.append(argv)
        key = tuple(argv)
        if key in self.hang:
            time.sleep(self.hang[key])
        if key not in self.commands:
            return CommandOutcome(argv, not_found=True, error="command not found")
        rc, out = self.commands[key]
        data = out.encode()
        return CommandOutcome(argv, output=data[-cap_bytes:], rc=rc, duration_s=0.01,
                              truncated=len(data) > cap_bytes)

    def now(self) -> datetime:
        return datetime(2026, 12, 1, 3, 0, tzinfo=timezone.utc)

    def nvml_argv(self) -> list[str]:
        return ["nvml-probe"]


def gpu_host(root: Path, cls: type[FakeHost] = FakeHost, **kw: object) -> FakeHost:
    """A FakeHost (of ``cls``) named gpu-node-001 with one H100 on PCI (0000:18:00.0) and
    the nvidia module loaded; ``kw`` go to the constructor (commands, hang)."""
    host = cls(root, **kw)  # type: ignore[arg-type]
    host.write("/proc/modules", "nvidia 56463360 10 nvidia_uvm, Live 0x0 (POE)\n")
    host.write("/proc/sys/kernel/hostname", "gpu-node-001\n")
    host.write("/sys/bus/pci/devices/0000:18:00.0/vendor", "0x10de\n")
    host.write("/sys/bus/pci/devices/0000:18:00.0/class", "0x030200\n")
    host.write("/sys/bus/pci/devices/0000:18:00.0/device", "0x2330\n")
    return host

"""Rules on persistence: datacenter GPUs should stay initialised between jobs."""

from __future__ import annotations

from collections.abc import Iterator

from gputriage import knowledge
from gputriage.hostfacts.stack import GpuSighting
from gputriage.model import Action, Blame, Finding, Scope, Severity
from gputriage.parsers.systemd import UnitState
from gputriage.rules.base import evidence, finding, rule


@rule("persistence.mode", produces=("persistence.off",))
def persistence_mode(visible_gpus: tuple[str, list[GpuSighting]],
                     units: dict[str, UnitState] | None = None) -> Iterator[Finding]:
    """Persistence mode off on datacenter GPUs: every job pays the driver's
    initialisation, and GPU state (ECC, clocks) resets when the last client exits."""
    source, gpus = visible_gpus
    off = [g for g in gpus if g.persistence_mode is False and knowledge.is_datacenter(g.name)]
    if not off:
        return
    unit = (units or {}).get("nvidia-persistenced")
    hint = ("nvidia-persistenced is not running" if unit is not None and not unit.active
            else "enable nvidia-persistenced")
    yield finding(
        "persistence.off", Severity.WARNING,
        f"persistence mode off on {len(off)} of {len(gpus)} datacenter GPU(s)",
        "Without persistence the driver tears the GPUs down when the last process exits: "
        "every job start pays seconds of initialisation and settings reset. "
        f"{hint[0].upper() + hint[1:]} (or nvidia-smi -pm 1).", Action.FIX_CONFIG,
        Blame.CONFIG, evidence=[evidence(source, [f"{g.line}: persistence mode off"
                                                  for g in off])])


@rule("persistence.daemon", produces=("persistence.daemon-inactive",))
def persistence_daemon(units: dict[str, UnitState]) -> Iterator[Finding]:
    """nvidia-persistenced installed but not running (failed, or killed at boot)."""
    unit = units.get("nvidia-persistenced")
    if unit is None or not unit.installed or unit.active:
        return
    lines = [f"{k}={unit.raw[k]}" for k in ("LoadState", "ActiveState", "SubState", "Result",
                                            "ExecMainStatus", "UnitFileState") if k in unit.raw]
    yield finding(
        "persistence.daemon-inactive", Severity.WARNING,
        f"nvidia-persistenced is {unit.active_state or 'not active'}"
        + (f" ({unit.result})" if unit.result and unit.result != "success" else ""),
        "The daemon keeps GPUs initialised between jobs. Look at its journal "
        "(journalctl -u nvidia-persistenced) for why it stopped, fix the unit, and enable "
        "it at boot.", Action.FIX_CONFIG, Blame.CONFIG,
        Scope("unit", name="nvidia-persistenced"),
        [evidence("systemctl_persistenced", lines or [f"ActiveState={unit.active_state}"])])

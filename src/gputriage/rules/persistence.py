"""Rules on persistence: datacenter GPUs should stay initialised between jobs."""

from __future__ import annotations

from collections.abc import Iterator

from gputriage import knowledge
from gputriage.facts.stack import GpuSighting
from gputriage.model import Action, Blame, Finding, Scope, Severity, evidence
from gputriage.parsers.persistenced import PdEntry, PersistencedLog
from gputriage.parsers.systemd import UnitState
from gputriage.rules.base import finding, rule


@rule("persistence.mode", produces=("persistence.off",))
def persistence_mode(visible_gpus: tuple[str, list[GpuSighting]],
                     units: dict[str, UnitState] | None = None) -> Iterator[Finding]:
    """Persistence mode off on datacenter GPUs: every job pays the driver's
    initialisation, and GPU state (ECC, clocks) resets when the last client exits.

    NVIDIA's driver persistence guide (docs.nvidia.com/deploy/driver-persistence) makes
    it a recommendation for headless Linux data-center GPUs, kept by nvidia-persistenced:
    not a fault. A warning only where this node's services are known and the daemon is
    not running (a cluster node left without it); from a pasted table alone, which cannot
    tell a shared cluster node from a workstation running one job, it is information."""
    source, gpus = visible_gpus
    off = [g for g in gpus if g.persistence_mode is False and knowledge.is_datacenter(g.name)]
    if not off:
        return
    unit = (units or {}).get("nvidia-persistenced")
    daemon_down = units is not None and (unit is None or not unit.active)
    hint = ("nvidia-persistenced is not running" if unit is not None and not unit.active
            else "enable nvidia-persistenced")
    why = ("Without persistence the driver tears the GPUs down when the last process exits: "
           "every job start pays seconds of initialisation and settings reset. "
           f"{hint[0].upper() + hint[1:]} (or nvidia-smi -pm 1).")
    if not daemon_down:
        why += (" NVIDIA recommends it for data-center GPUs shared by many jobs; on a "
                "workstation or a GPU that runs one long job it changes nothing that matters.")
    yield finding(
        "persistence.off", Severity.WARNING if daemon_down else Severity.INFO,
        f"persistence mode off on {len(off)} of {len(gpus)} datacenter GPU(s)", why,
        Action.FIX_CONFIG, Blame.CONFIG,
        evidence=[evidence(source, [f"{g.line}: persistence mode off" for g in off])])


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


_PD_UNIT = "nvidia-persistenced"
_PD_PID_FILE = "/var/run/nvidia-persistenced/nvidia-persistenced.pid"
_CONFIRM = "`nvidia-smi -q | grep Persistence` must then show Enabled on every GPU."


@rule("persistence.journal", produces=("persistence.daemon-stopped",))
def persistence_journal(persistenced_journal: PersistencedLog,
                        units: dict[str, UnitState] | None = None) -> Iterator[Finding]:
    """The daemon's journal ends with its last run stopped: killed by SIGTERM or shut down
    after it started, or its start failed, with no start since."""
    ended = persistenced_journal.ended
    if not ended:
        return
    unit = (units or {}).get(_PD_UNIT)
    if unit is not None and unit.active:
        return  # running now: the journal's stop is history
    run = persistenced_journal.last_run
    asked = any(e.event == "stopping" for e in run)
    timed_out = any(e.event == "timeout" for e in run)
    started = any(e.event in ("started", "registered") for e in run)
    devices = persistenced_journal.devices
    title, cause = _stop_story(asked, timed_out, started, ended)
    held = (f" It had registered {', '.join(devices[:4])}"
            + (f" and {len(devices) - 4} more" if len(devices) > 4 else "")
            + ", now left without it." if devices else "")
    unit_note = ("" if unit is not None else
                 " Run `gputriage check` on the node (or `systemctl status nvidia-persistenced`)"
                 " to confirm the unit is still down.")
    registered = [e for e in run if e.event == "registered"][:2]
    lines = [e.line for e in run if e.event not in (None, "registered") or e in registered
             or e.program == "systemd"]
    yield finding(
        "persistence.daemon-stopped", Severity.WARNING, title,
        f"{cause}{held} Without the daemon the GPUs drop persistence mode: the driver tears "
        "them down when the last client exits, so every job pays a slow first CUDA "
        "initialisation and GPU state (clocks, ECC, settings) resets between jobs. "
        f"{_fix(asked, timed_out)} {_CONFIRM}{unit_note}",
        Action.FIX_CONFIG, Blame.CONFIG, Scope("unit", name=_PD_UNIT),
        [evidence("persistenced_journal", lines, limit=16)]
        + ([evidence("systemctl_persistenced", [f"ActiveState={unit.active_state}"])]
           if unit is not None and unit.active_state else []))


def _stop_story(asked: bool, timed_out: bool, started: bool,
                ended: list[PdEntry]) -> tuple[str, str]:
    """The title and the first sentence: how the last run ended."""
    if timed_out:
        return ("nvidia-persistenced was killed: its start timed out",
                "systemd gave up waiting for the daemon to report it had started "
                "(TimeoutStartSec) and terminated it.")
    if asked:
        return ("nvidia-persistenced was stopped and not started again",
                "systemd stopped the daemon on request (systemctl stop, a package upgrade or "
                "a shutdown) and nothing started it again.")
    signal = next((e.signal for e in ended if e.signal is not None), None)
    if signal is not None and started:
        return (f"nvidia-persistenced got signal {signal} right after it started",
                f"The daemon started, then received signal {signal} with no stop asked for: "
                "systemd killed it, which usually means the unit's Type= does not match how "
                "the daemon starts (it forks into the background: a Type=simple or "
                "Type=notify unit sees its first process exit, or waits for a notification "
                "that never comes, and stops the service), or the start timed out.")
    return ("nvidia-persistenced failed and is not running",
            "The daemon's last start failed (its journal ends with the failure and no later "
            "start).")


def _fix(asked: bool, timed_out: bool) -> str:
    if asked:
        return "Start it again and enable it at boot: systemctl enable --now nvidia-persistenced."
    timeout = ("raise TimeoutStartSec in the unit (the driver's initialisation of many GPUs "
               "can be slow)" if timed_out else "check TimeoutStartSec")
    return (f"Fix the unit: Type=forking with PIDFile={_PD_PID_FILE} (or the unit the driver "
            f"ships, without --no-persistence-mode in ExecStart), {timeout}, and look at the "
            "earlier records for why a start failed; then systemctl restart "
            "nvidia-persistenced.")

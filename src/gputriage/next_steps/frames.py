"""The frames of the steps: how the node leaves and re-enters service (drain, reboot,
reset, plan) or, for configuration, software and the job, the repair itself."""

from __future__ import annotations

from collections.abc import Callable

from gputriage.model import Action, Finding
from gputriage.next_steps.host import Host, bus_ids, gpu_scopes, what

__all__ = ["FRAMES", "Frame", "confirm_first"]


def _drain_cmd(f: Finding, host: Host) -> str:
    h = host.name
    return (f"scontrol update nodename={h} state=drain reason=\"gputriage {f.id}\", "
            f"or kubectl cordon {h}")


def _resume_cmd(host: Host) -> str:
    h = host.name
    return f"scontrol update nodename={h} state=resume, or kubectl uncordon {h}"


def _ack_cmd(f: Finding, reason: str) -> str:
    buses = bus_ids(f)
    gpu = f" --gpu {buses[0]}" if len(buses) == 1 else ""
    return f"gputriage ack {f.id}{gpu} --reason \"{reason}\""


def _drain(f: Finding, host: Host, fix: str | None) -> str:
    fix = fix or (f"repair {what(f, host)}: capture nvidia-bug-report.sh and open a "
                  "hardware case with the system vendor")
    return (f"Drain {host.called} ({_drain_cmd(f, host)}), then {fix}; then "
            f"{_ack_cmd(f, 'repaired')} and resume it ({_resume_cmd(host)}).")


def _reboot(f: Finding, host: Host, fix: str | None) -> str:
    fix = fix or (f"reboot it to recover {what(f, host)}" if gpu_scopes(f) else "reboot it")
    return (f"Drain {host.called} ({_drain_cmd(f, host)}), then {fix}; once gputriage "
            f"check says OK after the reboot, resume it ({_resume_cmd(host)}).")


def _reset(f: Finding, host: Host, fix: str | None) -> str:
    buses = bus_ids(f)
    if len(buses) == 1:
        reset = (f"once {what(f, host)} runs no process (nvidia-smi "
                 f"--query-compute-apps=pid,process_name --format=csv -i {buses[0]}) reset it: "
                 f"nvidia-smi -r -i {buses[0]}")
    elif buses:
        reset = (f"once {what(f, host)} run no process, reset each: nvidia-smi -r -i BUS "
                 f"for {', '.join(buses)}")
    else:
        reset = "once no process uses the GPUs, reset them: nvidia-smi -r"
    after = f"; {fix}" if fix else ""
    return (f"With {host.called} drained ({_drain_cmd(f, host)}), {reset} (reboot if the reset "
            f"fails){after}; then {_ack_cmd(f, 'GPU reset')} and resume it "
            f"({_resume_cmd(host)}).")


def _plan(f: Finding, host: Host, fix: str | None) -> str:
    fix = fix or f"repair {what(f, host)}"
    return (f"Keep {host.called} in service and, at the next maintenance window, {fix}; "
            f"until then {_ack_cmd(f, 'repair planned')} --until 14d records the "
            "plan.")


_VERBS = {Action.DRAIN_AND_REPAIR: "repair it", Action.REBOOT_NODE: "reboot it",
          Action.RESET_GPU: "reset the GPU"}


def confirm_first(f: Finding, host: Host, fix: str | None) -> str:
    """A draining action whose fault is not known (an unknown blame never drains by
    itself): tell whose it is first, then drain only if it is the node's."""
    fix = fix or "read the node's kernel log for Xids (journalctl -k | grep -i xid)"
    return (f"Tell first whether {host.called} is at fault: {fix}; only if it is, drain it "
            f"({_drain_cmd(f, host)}) and {_VERBS.get(f.action, 'repair it')}, then "
            f"{_ack_cmd(f, 'repaired')} and resume it ({_resume_cmd(host)}).")


def _plain(default: Callable[[Finding, Host], str]) -> Callable[[Finding, Host, str | None],
                                                                 str]:
    """A frame that is the repair itself (configuration, software, the job)."""
    def frame(f: Finding, host: Host, fix: str | None) -> str:
        text = fix or default(f, host)
        return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
    return frame


def _fix_config(f: Finding, host: Host) -> str:
    if f.blame.side == "job":
        return (f"fix the job's settings ({f.title}) and resubmit it; {host.called} "
                "needs nothing")
    return (f"fix the configuration of {what(f, host)} on {host.called} ({f.title}), then run "
            "gputriage check again")


def _fix_software(f: Finding, host: Host) -> str:
    on = f" for {what(f, host)}" if f.scope.kind != "node" else ""
    return (f"update or reinstall the software at fault{on} on {host.called} ({f.title}), then "
            "run gputriage check again")


def _restart_job(f: Finding, host: Host) -> str:
    on = f" on {what(f, host)}" if gpu_scopes(f) else ""
    return (f"restart the job and read its own error{on}; if it fails the same way again, "
            f"run gputriage on {host.called}'s kernel log before blaming the job or the node")


Frame = Callable[[Finding, Host, str | None], str]  # (finding, host, repair) -> step
FRAMES: dict[Action, Frame] = {
    Action.DRAIN_AND_REPAIR: _drain,
    Action.REBOOT_NODE: _reboot,
    Action.RESET_GPU: _reset,
    Action.PLAN_REPAIR: _plan,
    Action.FIX_CONFIG: _plain(_fix_config),
    Action.FIX_SOFTWARE: _plain(_fix_software),
    Action.RESTART_JOB: _plain(_restart_job),
}

"""The repairs of what DCGM reports and of the monitoring stack itself: its diagnostic
and health watches (each watched system's own repair), its host engine and dcgm-exporter
(rules/dcgm_*.py). :data:`REPAIRS` joins :data:`gputriage.next_steps.repairs.BY_ID`."""

from __future__ import annotations

from gputriage.model import Action, Blame, Finding, Severity
from gputriage.next_steps.hardware import (
    cooling,
    hardware_case,
    nvlink,
    pcie,
    remap_check,
    thermal,
)
from gputriage.next_steps.host import Host, Repair, dash_i, fixed, serials, what

__all__ = ["REPAIRS"]


_FIXED = {  # DCGM's own problems and the monitoring stack's (rules/dcgm_*.py)
    "dcgm.install-problem": "install one released DCGM whose dcgmi, nv-hostengine and "
    "plugins are of one version, with the CUDA support package for the driver's CUDA "
    "(datacenter-gpu-manager-4-cudaNN), restart nvidia-dcgm, and dcgmi diag -r 1 must run "
    "every test it lists",
    "dcgm.deployment-cascade": "fix the first check that failed (for persistence mode: "
    "systemctl enable --now nvidia-persistenced, or nvidia-smi -pm 1), then dcgmi diag -r 1 "
    "must pass every deployment check before the node goes back into service",
    "dcgm.diag-mig-blocked": "test these GPUs while MIG can be off: when they are idle, "
    "nvidia-smi -mig 0 (the GPU is reset), dcgmi diag -r 3, then re-create the MIG layout; "
    "a health check should skip dcgmi diag on MIG nodes",
    "dcgm.exporter-nvml-missing": "give the exporter's pod the NVIDIA runtime "
    "(runtimeClassName: nvidia in its DaemonSet or Helm values, or nvidia as the node's "
    "default runtime), then its log must show 'NVML provider successfully initialized' or "
    "'Starting webserver' and curl NODE:9400/metrics must list DCGM_FI_DEV_* samples",
    "dcgm.exporter-profiling-unsupported": "upgrade dcgm-exporter, or remove the "
    "DCGM_FI_PROF_* lines from its counters CSV (its ConfigMap), and restart its pod",
    "dcgm.profiling-busy": "list who holds the performance monitor (another nv-hostengine "
    "or dcgm-exporter: ps -ef | grep -e nv-hostengine -e dcgm-exporter; a profiler: ncu, "
    "nsys, nvprof), keep one host engine (dcgm-exporter -r localhost:5555), then dcgmi dmon "
    "-e 1002,1003 must print values",
    "dcgm.nvswitch-libs-missing": "install libnvidia-nscq of the driver's version where "
    "the host engine runs, restart nvidia-dcgm, and dcgmi discovery -l must list the "
    "NVSwitches",
    "dcgm.exporter-hostengine-unreachable": "run the host engine the exporter is pointed "
    "at (systemctl enable --now nvidia-dcgm, or the GPU operator's DCGM pod) at the address "
    "DCGM_REMOTE_HOSTENGINE_INFO names, or remove that variable so that the exporter starts "
    "its own; curl NODE:9400/metrics must then list DCGM_FI_DEV_* samples",
    "dcgm.exporter-metrics-file-invalid": "mount a well-formed counters CSV (the raw file "
    "of the exporter's release, one 'DCGM_FI_..., gauge|counter, help' per line) with -f "
    "or its ConfigMap, then restart the exporter's pod; its log must then reach 'Starting "
    "webserver'",
    "dcgm.exporter-stale": "restart dcgm-exporter (delete its pod, or systemctl restart it) "
    "after every nv-hostengine restart, or upgrade it to a release that reconnects; its "
    "DCGM_FI_DEV_* values must then change from scrape to scrape",
    "dcgm.exporter-unsupported-gpu": "monitor these GPUs with an nvidia-smi based exporter "
    "and keep dcgm-exporter off their nodes (a nodeSelector on the GPU product label); the "
    "GPUs need nothing",
    "dcgm.hostengine-nvml-failed": "give nv-hostengine the GPUs: in a container the NVIDIA "
    "runtime (runtimeClassName: nvidia, or --gpus all), on the host a working nvidia-smi "
    "first; then restart it, and dcgmi discovery -l must list every GPU",
}


def _dcgm_rerun(f: Finding, host: Host) -> str:
    """DCGM's diagnostic: the repair is in the finding; the check is a clean rerun."""
    gpu = f" -i {f.scope.gpu_index}" if f.scope.gpu_index is not None else ""
    if f.id == "dcgm.test-failed":
        return (f"run the diagnostic on it again (dcgmi diag -r 3{gpu}) and repair or RMA "
                f"{what(f, host)}{serials(f, host)} if it fails again")
    where = ("on the whole node (sbatch --exclusive, or outside Slurm)"
             if f.blame is Blame.JOB_CONFIG else "on the node")
    return f"rerun dcgmi diag -r 3{gpu} {where}: every test must pass"


def _dcgm_upgrade(f: Finding, host: Host) -> str:
    """A DCGM bug fixed in a later release: the release is in the finding's title."""
    fixed_in = f.title.rsplit("fixed in DCGM ", 1)[-1] if "fixed in DCGM " in f.title else ""
    target = f"DCGM {fixed_in} or later" if fixed_in else "the DCGM release that fixed it"
    return (f"upgrade DCGM on {host.called} to {target} (the datacenter-gpu-manager "
            "packages, or the DCGM/exporter image of the GPU operator), restart nvidia-dcgm; "
            "dcgmi --version must show it, and dcgmi diag at the same level must then pass; "
            "a failure that stays is the GPU's")


def _dcgm_service(f: Finding, host: Host) -> str:
    return ("start or restart DCGM's host engine (systemctl restart nvidia-dcgm; in Kubernetes "
            "the GPU operator's nvidia-dcgm pod), upgrading DCGM first if it is older than the "
            "GPUs; dcgmi discovery -l should then list every GPU")


def _health_memory(f: Finding, host: Host) -> str:
    return (f"reset {what(f, host)} (nvidia-smi -r{dash_i(f)}) so that pending remaps take "
            f"effect; {remap_check(f, host)}; if a remap failed or errors come back, send it "
            f"for RMA{serials(f, host)}")


def _health_sm(f: Finding, host: Host) -> str:
    return (f"run dcgmi diag -r 3 on {what(f, host)} when it is idle; if it fails, "
            f"{hardware_case(f, host)}")


def _health_inforom(f: Finding, host: Host) -> str:
    return (f"replace {what(f, host)}{serials(f, host)}: capture nvidia-bug-report.sh and "
            "open an RMA (its infoROM, the store of its error records, is corrupted; a reboot "
            "does not repair it)")


def _health_power(f: Finding, host: Host) -> str:
    return (f"check the power of {what(f, host)}: its power cables and the node's PSUs "
            "(ipmitool sdr type 'Power Supply'; ipmitool sel list) and its power limit "
            f"(nvidia-smi -q -d POWER{dash_i(f)})")


def _health_driver(f: Finding, host: Host) -> str:
    return ("read the driver's error in the kernel log (journalctl -k | grep -i -e xid -e "
            "nvrm) and act on the Xid it names; gputriage check on the node gives its step")


def _health_nvswitch(f: Finding, host: Host) -> str:
    return ("read the NVSwitch errors in the kernel log (journalctl -k | grep -i sxid) and the "
            "fabric manager's log, and act on the SXids they name (gputriage check gives "
            "their steps)")


def _health_unknown(f: Finding, host: Host) -> str:
    if f.action is Action.FIX_SOFTWARE:  # DCGM's own check failed
        return ("read nv-hostengine's log (/var/log/nv-hostengine.log), restart it (systemctl "
                "restart nvidia-dcgm) and run dcgmi health -c again: it must answer for every "
                "system")
    return ("run dcgmi health -c -j and read what DCGM says of that system, and compare with "
            f"nvidia-smi -q{dash_i(f)}")


def _nvlink_unverified(f: Finding, host: Host) -> str:
    """DCGM's PCIe test failed only on NVLink links reported down: does the GPU have any?"""
    if f.severity is Severity.INFO:  # nvidia-smi showed the GPU has no NVLink link
        return ("nothing to repair on the GPU: run a DCGM release that skips NVLink on GPUs "
                "without it, or run the diagnostic without its NVLink check, and rerun "
                f"dcgmi diag -r 2{_diag_i(f)}")
    return (f"run nvidia-smi nvlink -s{dash_i(f)} on {host.called}: no link listed (a PCIe "
            "card without a bridge) means DCGM's report is a false alarm; links listed as "
            "inactive mean they are really down: then drain and run the NVLink checks")


def _diag_i(f: Finding) -> str:
    return f" -i {f.scope.gpu_index}" if f.scope.gpu_index is not None else ""


def _clocks(f: Finding, host: Host) -> str:
    return thermal(f, host) if f.action is Action.DRAIN_AND_REPAIR else cooling(f, host)


def _checker_mark(f: Finding, host: Host) -> str:
    """A health checker's mark: the step follows what its DCGM code means."""
    if "IMEX" in f.title:
        if f.action is Action.NONE:
            return ("nothing to repair: mute DCGM_FR_IMEX_UNHEALTHY (DCGM health code 122) in "
                    f"the checker for nodes such as {host.called} that have no multi-node "
                    "NVLink domain, and clear the condition it set")
        return ("check IMEX where it belongs: systemctl status nvidia-imex (or the "
                "ComputeDomain's IMEX pods), /etc/nvidia-imex/nodes_config.cfg and "
                "nvidia-imex-ctl -N; at idle with no ComputeDomain the mark is expected")
    if f.blame is Blame.JOB:
        return ("find the job that raised the Xid (the kernel log's pid and the time) and fix "
                "it; then clear the checker's condition on the node, which stays set")
    if f.blame is Blame.CONFIG:
        return (f"check DCGM on {host.called}: systemctl status nvidia-dcgm (or the host "
                "engine pod), dcgmi discovery -l must list the GPUs; then restart the "
                "checker's pod so that its condition is set again from a working DCGM")
    if "NVLink" in f.title:
        return (f"read the links now: nvidia-smi nvlink -s{dash_i(f)} on {host.called}; a "
                "mark raised at boot while links trained clears itself, links still down "
                "need a GPU reset or a reboot, and a repair if they stay down")
    return (f"run gputriage check on {host.called} and read the checker's event for the "
            "node (kubectl get events --field-selector involvedObject.name=NODE): act on "
            "what the GPU shows now")


REPAIRS: dict[str, Repair] = {
    "dcgm.checker-mark": _checker_mark, "dcgm.health-imex": _checker_mark,
    **{fid: fixed(text) for fid, text in _FIXED.items()},
    "dcgm.power-marginal": _dcgm_rerun, "dcgm.test-failed": _dcgm_rerun,
    "dcgm.internal-error": _dcgm_rerun, "dcgm.deployment-failed": _dcgm_rerun,
    "dcgm.hostengine-unreachable": _dcgm_service, "dcgm.gpus-unseen": _dcgm_service,
    "dcgm.too-old": _dcgm_service, "dcgm.known-false-alarm": _dcgm_upgrade,
    "dcgm.health-pcie": pcie, "dcgm.health-nvlink": nvlink,
    "dcgm.health-memory": _health_memory, "dcgm.health-sm": _health_sm,
    "dcgm.health-inforom": _health_inforom, "dcgm.health-thermal": thermal,
    "dcgm.health-power": _health_power, "dcgm.health-driver": _health_driver,
    "dcgm.health-nvswitch": _health_nvswitch, "dcgm.health-unknown": _health_unknown,
    "dcgm.clock-events": _clocks, "dcgm.nvlink-down-without-nvlink": _nvlink_unverified,
    **dict.fromkeys(("dcgm.nvlink-counters", "dcgm.nvlink-errors"), nvlink),
}

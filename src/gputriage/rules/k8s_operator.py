"""The NVIDIA GPU operator: its driver container, its validation chain, the operands that
wait on both, and its driver upgrades.

The operator installs in order: the driver (built for the node's running kernel), the
container toolkit, then its validator checks driver, toolkit, CUDA and the plugin, one
init container each (``Init:2/4``: stuck at the third, cuda). The device plugin, GFD and
dcgm-exporter wait for the driver and the toolkit to be validated, so when the driver
fails every operand of that node waits or crash-loops: one cause, folded under it
(:mod:`gputriage.engine.causes`). A driver upgrade cordons and drains the node by design.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gputriage.knowledge.job_messages import Message, scan_line
from gputriage.model import DRAINING_ACTIONS, Action, Blame, Evidence, Finding, Severity, evidence
from gputriage.parsers.gpu_operator_log import GpuOperatorLog, OpEntry
from gputriage.parsers.k8s_model import Cluster, KDaemonSet, KPod
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import object_scope
from gputriage.text.fields import strict_int

SOURCE = "gpu_operator_log"
NAMESPACES = ("gpu-operator", "nvidia-gpu-operator", "gpu-operator-resources")
STEPS = ("driver", "toolkit", "cuda", "plugin")  # the validator's init containers, in order
# operand -> its pods' (and DaemonSet's) name
OPERANDS = (
    ("driver", re.compile(r"^nvidia-(?:driver-daemonset|vgpu-manager-daemonset)")),
    ("validator", re.compile(r"^nvidia-operator-validator")),
    ("cuda-validator", re.compile(r"^nvidia-cuda-validator")),
    ("plugin-validator", re.compile(r"^nvidia-device-plugin-validator")),
    ("toolkit", re.compile(r"^nvidia-container-toolkit")),
    ("device-plugin", re.compile(r"^nvidia-device-plugin")),
    ("gpu-feature-discovery", re.compile(r"^gpu-feature-discovery")),
    ("dcgm-exporter", re.compile(r"^nvidia-dcgm-exporter")),
    ("dcgm", re.compile(r"^nvidia-dcgm")),
    ("mig-manager", re.compile(r"^nvidia-mig-manager")),
    ("node-status-exporter", re.compile(r"^nvidia-node-status-exporter")),
)
_INIT = re.compile(r"^Init:(?P<done>[0-9]+)/(?P<of>[0-9]+)$")
_WHY = {
    "kernel-unresolved": "the packages of the running kernel (headers, kernel-devel) are not "
                         "in the driver container's repositories",
    "modules-missing": "the running kernel's /lib/modules tree is not there to build against",
    "packages-failed": "the package repositories could not be reached or lack the packages",
    "build-failed": "the kernel module did not compile against the running kernel",
    "nouveau": "the open-source nouveau driver holds the GPUs, and the NVIDIA driver cannot "
               "load beside it",
    "key-rejected": "Secure Boot refused the module: it is unsigned, or signed with a key the "
                    "firmware does not trust",
    "modprobe-failed": "the kernel refused to load the module",
    "fatal": "the installer stopped",
}
_FIX = {
    "nouveau": "blacklist nouveau (blacklist nouveau and options nouveau modeset=0 in a file "
               "of /etc/modprobe.d), rebuild the initramfs (update-initramfs -u, or dracut "
               "-f) and reboot; lsmod | grep nouveau must then print nothing",
    "key-rejected": "sign the modules with a key enrolled in the machine's MOK list "
                    "(mokutil --import, then a reboot to enroll it; DKMS signs with it), use "
                    "the operator's precompiled signed driver images, or disable Secure Boot",
}


def operand(name: str) -> str | None:
    """Which operand a pod or DaemonSet is, by its name."""
    return next((op for op, pattern in OPERANDS if pattern.match(name)), None)


def failing(pod: KPod) -> str | None:
    """Why an operator pod is not running as it should (its status); None when it is."""
    status = pod.status or ""
    if status in ("Running", "Completed", "Succeeded", ""):
        bad = [c for c in pod.containers if c.reason in ("CrashLoopBackOff", "Error")]
        if bad:
            return bad[0].reason
        # running but not ready, and restarted: its container keeps failing its start
        return f"{status}, {pod.ready} ready" if status == "Running" and pod.unready \
            and pod.restarts else None
    return status


def _pods(cluster: Cluster | None, *operands: str) -> list[KPod]:
    if cluster is None:
        return []
    by_operand = cluster.derived("operator_pods", _operator_pods)
    return [p for p in cluster.pods if id(p) in by_operand and by_operand[id(p)] in operands]


def _operator_pods(cluster: Cluster) -> dict[int, str]:
    """The operand of each of the cluster's pods that is one (by the pod's id)."""
    return {id(p): op for p in cluster.pods if (op := operand(p.name)) is not None}


def _pod_lines(pods: list[KPod]) -> list[str]:
    return [ln for p in pods for ln in (p.lines or [p.ref])]


def _restarts(pod: KPod) -> str:
    return f", {pod.restarts} restarts" if pod.restarts else ""


def _driver_sets(cluster: Cluster | None) -> list[KDaemonSet]:
    return [d for d in (cluster.daemonsets if cluster else []) if operand(d.name) == "driver"
            and d.desired is not None and d.ready is not None and d.ready < d.desired]


def _driver_failures(log: GpuOperatorLog | None) -> list[OpEntry]:
    """The driver container's failures in its log, none when it installed since."""
    failures = [e for e in (log.failures if log else []) if e.component == "driver"]
    done = log.having("done") if log else []
    if log and failures and done and \
            log.entries.index(done[-1]) > log.entries.index(failures[-1]):
        return []  # it installed since
    return failures


def _driver_evidence(log: GpuOperatorLog | None, failures: list[OpEntry],
                     sets: list[KDaemonSet], pods: list[KPod]) -> list[Evidence]:
    """The driver's failing log lines and its not-ready DaemonSets' and pods' lines."""
    ev: list[Evidence] = []
    if failures and log is not None:
        shown = log.having("install-start", "kernel-resolved", "nfd-kernel") + failures
        ev.append(evidence(SOURCE, [e.line for e in log.entries if e in shown]))
    if sets or pods:
        ev.append(evidence("cluster", [ln for d in sets for ln in (d.lines or [d.ref])]
                           + _pod_lines(pods)))
    return ev


def _driver_not_ready(sets: list[KDaemonSet], pods: list[KPod],
                      ev: list[Evidence]) -> Finding:
    """The driver DaemonSet or pods not ready, with no failure in the log to say why."""
    where = "; ".join([f"{d.ref}: {d.ready} of {d.desired} ready" for d in sets]
                      + [f"{p.ref}: {failing(p)}{_restarts(p)}" for p in pods])
    return finding(
        "k8s.operator-driver-failed", Severity.WARNING,
        f"the GPU operator's driver is not ready ({where})",
        "The operator's driver container has not installed the driver on those nodes, "
        "so nothing GPU runs there; the other GPU nodes are not concerned. Its log says "
        "why (kubectl logs -n gpu-operator <driver pod> -c nvidia-driver-ctr): usually "
        "the running kernel's headers, a failed build, Secure Boot or a host driver "
        "already loaded. Fix it on the node's side.", Action.FIX_SOFTWARE, Blame.CONFIG,
        object_scope("DaemonSet", sets[0].name, sets[0].namespace) if sets else
        object_scope("Pod", pods[0].name, pods[0].namespace), ev)


@rule("k8s.operator-driver", any_of=("gpu_operator_log", "cluster"),
      produces=("k8s.operator-driver-failed", "driver.container-modules-in-use"))
def operator_driver(gpu_operator_log: GpuOperatorLog | None = None,
                    cluster: Cluster | None = None) -> Iterator[Finding]:
    """The operator's driver container could not install the driver: the running kernel's
    packages unreachable or unresolved, a failed build, Secure Boot, a host driver in the
    way; or its DaemonSet is not ready (then its log says why)."""
    log = gpu_operator_log
    failures = _driver_failures(log)
    sets = _driver_sets(cluster)
    pods = [p for p in _pods(cluster, "driver") if failing(p)]
    if not (failures or sets or pods):
        return
    ev = _driver_evidence(log, failures, sets, pods)
    if not failures:
        yield _driver_not_ready(sets, pods, ev)
        return
    if failures[0].event == "module-in-use":
        yield _modules_in_use(log, ev)
        return
    yield _driver_failed(log, failures, ev)


def _modules_in_use(log: GpuOperatorLog | None, ev: list[Evidence]) -> Finding:
    """The driver container cannot unload the nvidia modules loaded on the node."""
    driver = log.driver if log else None
    tore_down = bool(log and log.having("teardown"))
    if log is not None:  # the installer's steps up to the refusal, then what else is shown
        steps = [e.line for e in log.having("install-start", "teardown", "module-in-use")]
        ev = [evidence(SOURCE, list(dict.fromkeys(steps)), limit=12),
              *[e for e in ev if e.source != SOURCE]]
    return finding(
        "driver.container-modules-in-use", Severity.WARNING,
        "the driver container cannot unload the NVIDIA kernel modules: something on the node "
        "still uses them",
        f"Before it installs driver {driver or '(version not shown)'} the driver container "
        + ("stopped the persistence daemon and " if tore_down else "")
        + "tried to unload the nvidia modules already loaded on the node, and they are in "
        "use: a driver installed on the host, or a previous driver container's modules still "
        "held by GPU clients (nvidia-persistenced, the device plugin, DCGM or dcgm-exporter, "
        "GFD, Xorg, running GPU jobs). The new driver cannot load until they are released; "
        "the GPUs are not at fault. Find the holders (lsmod | grep nvidia shows the use "
        "counts; lsof /dev/nvidia*), stop them and restart the driver pod, or drain and "
        "reboot the node before switching driver versions; with a driver meant to stay on "
        "the host, set driver.enabled=false in the ClusterPolicy instead.",
        Action.FIX_SOFTWARE, Blame.NODE, evidence=ev)


def _driver_failed(log: GpuOperatorLog | None, failures: list[OpEntry],
                   ev: list[Evidence]) -> Finding:
    first = failures[0]
    kernel = log.kernel if log else None
    driver = log.driver if log else None
    why = _WHY.get(first.event or "", "a step of the installer failed")
    fix = _FIX.get(first.event or "") or (
        f"update the node to a kernel whose packages the repositories still carry "
        f"(yum/apt update of the kernel, then reboot), or add an archive repository with "
        f"{'kernel ' + kernel if kernel else 'the running kernel'}'s packages to the driver "
        "container, or use precompiled driver images, or install the driver on the host "
        "and set driver.enabled=false")
    on = f" for kernel {kernel}" if kernel else ""
    if not _in_container(log, failures):  # a host's own install or modprobe, pasted alone
        return finding(
            "k8s.operator-driver-failed", Severity.CRITICAL,
            f"the NVIDIA kernel module could not be installed or loaded{on}: "
            f"{first.message[:120]}",
            f"Installing or loading driver {driver or '(version not shown)'}{on} failed: "
            f"{why}. Without the module no GPU of the node works. The node's OS is at "
            f"fault, not the GPUs: {_FIX.get(first.event or '') or 'fix what the message names'}"
            ".", Action.FIX_SOFTWARE, Blame.CONFIG, evidence=ev)
    return finding(
        "k8s.operator-driver-failed", Severity.CRITICAL,
        f"the GPU operator's driver container failed{on}: {first.message[:120]}",
        f"The driver container could not install driver {driver or '(version not shown)'}"
        f"{on}: {why}. Without it no GPU of the node works, and the device plugin, GFD and "
        f"dcgm-exporter wait or crash-loop behind it. The node's OS is at fault, not the "
        f"GPUs: {fix}.", Action.FIX_SOFTWARE, Blame.CONFIG, evidence=ev)


def _in_container(log: GpuOperatorLog | None, failures: list[OpEntry]) -> bool:
    """Whether the failure is the operator's driver container's: its log says more than
    the failing lines (the installer's steps, a pod prefix), not a bare modprobe error."""
    if log is None:
        return True
    failing = {id(e) for e in failures}
    return any(e.pod or (id(e) not in failing and e.event) for e in log.entries)


def _stuck_step(pod: KPod) -> str | None:
    m = _INIT.match(pod.status or "")
    done = strict_int(m.group("done"), lo=0, hi=len(STEPS) - 1) if m else None
    if m and done is not None and strict_int(m.group("of")) == len(STEPS):
        return STEPS[done]
    waiting = [c.name for c in pod.containers if c.init and c.state != "terminated"]
    for name in waiting:
        step = next((s for s in STEPS if name.startswith(s)), None)
        if step:
            return step
    return None


def _log_step(log: GpuOperatorLog | None) -> tuple[str | None, list[OpEntry]]:
    if log is None:
        return None, []
    found = [e for e in log.failures if e.component == "validator"]
    for e in found:
        if e.event in ("cuda-error", "cuda-alloc-failed", "cuda-failed"):
            return "cuda", found
        if e.event == "validation-failed" and e.detail:
            return e.detail.lower(), found
        if e.event == "resources-undiscovered":
            return "plugin", found
        if e.event == "smi-not-found":
            return ("toolkit" if "toolkit" in (e.line or "") else "driver"), found
    return None, found


def _validation_step(log_step: str | None, validators: list[KPod],
                     others: list[KPod]) -> str | None:
    """The step validation is stuck at: the log's, else a failing validator pod's."""
    step = log_step
    for p in others:
        step = step or ("cuda" if operand(p.name) == "cuda-validator" else "plugin")
    for p in validators:
        step = step or _stuck_step(p)
    return step


def _validation_title(step: str | None, pods: list[KPod]) -> str:
    """The title of a stuck validation: its step and the failing pods' states."""
    state = "; ".join(f"{p.name}: {failing(p)}{_restarts(p)}" for p in pods)
    return (f"GPU operator validation stuck at the {step} step" if step
            else "GPU operator validation stuck") + (f" ({state})" if state else "")


def _cuda_stuck(title: str, ev: list[Evidence]) -> Finding:
    """Validation stuck at the cuda step: the CUDA workload fails on the node."""
    return finding(
        "k8s.operator-validation-stuck", Severity.WARNING, title,
        "The driver and the toolkit validated, but the CUDA workload (a vectorAdd in the "
        "cuda-validation container) fails on the node, so the validator never marks it "
        "ready. Read its error first (kubectl logs -n <namespace> <cuda-validator pod> "
        "-c cuda-validation): a CUDA error names a driver, runtime or GPU problem, and "
        "only a GPU error reported on the node (Xid, nvidia-smi) blames the hardware.",
        Action.FIX_CONFIG, Blame.UNKNOWN, evidence=ev)


def validator_cuda_error(log: GpuOperatorLog | None) -> tuple[Message, OpEntry] | None:
    """The CUDA error the cuda validator's sample printed ("(error code system not yet
    initialized)"), as the CUDA error catalog knows it; None when it names none."""
    for e in (log.having("cuda-error") if log else []):
        hits = scan_line(f"CUDA error: {e.detail}") if e.detail else []
        if hits:
            return hits[0].message, e
    return None


def _cuda_error(msg: Message, entry: OpEntry, title: str, ev: list[Evidence]) -> Finding:
    """The cuda validator's CUDA error, judged as the catalog judges it for a job, except
    that the validator's sample is the operator's own: a fault the catalog puts on a
    job or on software of the node is the node's configuration here."""
    hardware = msg.action in DRAINING_ACTIONS
    blame = msg.blame if hardware or msg.blame is Blame.UNKNOWN else Blame.CONFIG
    action = Action.FIX_CONFIG if msg.action is Action.RESTART_JOB else msg.action
    severity = max(msg.severity, Severity.WARNING, key=lambda s: s.rank)
    protect = ("" if hardware or severity is not Severity.CRITICAL else
               " No GPU job can run on the node until then: keep jobs off it (cordon) to "
               "protect them, but nothing needs a hardware repair.")
    return finding(
        "k8s.validator-cuda-error", severity,
        f"CUDA validation fails on the node with CUDA error {msg.code} ({msg.text})"
        f"{title[title.find(' ('):] if title.endswith(')') else ''}",
        f"The operator's cuda validator runs NVIDIA's vectorAdd sample on the node and it "
        f"failed with {msg.name} ('{entry.detail}'). {msg.meaning} {msg.cause} "
        f"To tell: {msg.decide}.{protect}", action, blame, evidence=ev)


_NO_GPU = ("the plugin step waits for the node to advertise nvidia.com/gpu (or "
           "nvidia.com/mig-*) and nothing does. The device plugin is disabled "
           "(devicePlugin.enabled=false in the ClusterPolicy, or the node labelled "
           "nvidia.com/gpu.deploy.device-plugin=false), not running on the node, or registered "
           "no GPU (its log says why). With the plugin disabled on purpose (a DRA driver or "
           "another plugin serves the GPUs) this step can never pass, and until the validator "
           "skips it for a disabled plugin (gpu-operator PR #2686) it crash-loops there while "
           "the driver and the operands work: re-enable the device plugin, or accept the "
           "validator's loop there.")
_TAKEN = ("the plugin step's test pod (nvidia-device-plugin-validator) asks for a GPU and "
          "the kubelet found none free (UnexpectedAdmissionError): GPU pods took them first. Set "
          "validator.plugin.env WITH_WORKLOAD=false in the ClusterPolicy so that the step "
          "checks the node's advertised GPUs without running a workload, or free a GPU.")


def _plugin_stuck(title: str, ev: list[Evidence], log: GpuOperatorLog | None,
                  pods: list[KPod]) -> Finding:
    """Validation stuck at the plugin step: the node never advertises a GPU, or the
    plugin validator's test pod found every GPU taken."""
    undiscovered = bool(log and log.having("resources-undiscovered"))
    refused = any((p.status or "") == "UnexpectedAdmissionError" for p in pods)
    why = (_TAKEN if refused and not undiscovered else _NO_GPU if undiscovered else
           f"either {_NO_GPU[0].lower()}{_NO_GPU[1:]} Or {_TAKEN}")
    return finding(
        "k8s.operator-validation-stuck", Severity.WARNING, title,
        f"The driver, toolkit and CUDA steps passed; {why} The operator's configuration, "
        "not the GPUs.", Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)


def _step_stuck(step: str | None, no_driver: bool, title: str, ev: list[Evidence]) -> Finding:
    """Validation stuck at the driver, toolkit or plugin step (or one not told)."""
    where = (" No driver pod runs in the operator's namespace: the operator does not install "
             "the driver (driver.enabled=false) and expects one on the host, which has none "
             "(or the driver root is set wrong)." if no_driver and step in (None, "driver",
                                                                            "toolkit") else "")
    return finding(
        "k8s.operator-validation-stuck", Severity.WARNING, title,
        f"The validator cannot get past the {step or 'first failing'} step, so the operands "
        f"that wait for it (device plugin, GFD, dcgm-exporter) do not start.{where} Install "
        "the driver on the host or enable the operator's driver DaemonSet, check the "
        "driver root (/run/nvidia/driver with the operator's driver), then read the "
        "validator's init container logs (kubectl logs <validator pod> -c "
        f"{step or 'driver'}-validation).", Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)


@rule("k8s.operator-validation", any_of=("gpu_operator_log", "cluster"),
      produces=("k8s.operator-validation-stuck", "k8s.validator-cuda-error"))
def operator_validation(gpu_operator_log: GpuOperatorLog | None = None,
                        cluster: Cluster | None = None) -> Iterator[Finding]:
    """The operator's validator stuck at a step (driver, toolkit, cuda, plugin): from its
    pod's ``Init:x/4``, a failing cuda- or plugin-validator pod, or the validator's log."""
    validators = [p for p in _pods(cluster, "validator") if failing(p)]
    others = [p for p in _pods(cluster, "cuda-validator", "plugin-validator") if failing(p)]
    log_step, entries = _log_step(gpu_operator_log)
    step = _validation_step(log_step, validators, others)
    if not (validators or others or entries):
        return
    drivers = _pods(cluster, "driver")
    no_driver = cluster is not None and bool(cluster.pods) and not drivers
    if step is None and no_driver:
        step = "driver"
    ev = []
    if entries:
        ev.append(evidence(SOURCE, [e.line for e in entries]))
    if validators or others:
        ev.append(evidence("cluster", _pod_lines(validators + others)))
    title = _validation_title(step, validators + others)
    known = validator_cuda_error(gpu_operator_log) if step == "cuda" else None
    if known is not None:
        yield _cuda_error(*known, title, ev)
        return
    if step == "cuda":
        yield _cuda_stuck(title, ev)
        return
    if step == "plugin":
        yield _plugin_stuck(title, ev, gpu_operator_log, others)
        return
    yield _step_stuck(step, no_driver, title, ev)


@rule("k8s.operator-operands", produces=("k8s.operator-operand-failing",))
def operator_operands(cluster: Cluster) -> Iterator[Finding]:
    """Operand pods (device plugin, GFD, dcgm-exporter, toolkit, MIG manager) waiting in
    Init or crash-looping: what the driver or the validation behind them leaves undone."""
    pods = [p for p in _pods(cluster, "toolkit", "device-plugin", "gpu-feature-discovery",
                             "dcgm-exporter", "dcgm", "mig-manager", "node-status-exporter")
            if failing(p)]
    if not pods:
        return
    state = "; ".join(f"{p.name}: {failing(p)}{_restarts(p)}" for p in pods[:6])
    waiting = all((p.status or "").startswith("Init:") and "Crash" not in (p.status or "")
                  for p in pods)
    yield finding(
        "k8s.operator-operand-failing", Severity.WARNING,
        f"{len(pods)} GPU operator operand pod(s) not running ({state})",
        ("They wait in their init container for the driver and the toolkit to be validated"
         if waiting else "They crash-loop or wait, as operands do while the driver or the "
         "validation they depend on is missing") + ": fix the driver or validation first "
        "(the operator's driver and validator pods and their logs), then they start on their "
        "own.", Action.FIX_CONFIG, Blame.CONFIG,
        object_scope("Pod", pods[0].name, pods[0].namespace),
        [evidence("cluster", _pod_lines(pods))])


@rule("k8s.operator-upgrade", any_of=("gpu_operator_log", "cluster"),
      produces=("k8s.operator-upgrade",))
def operator_upgrade(gpu_operator_log: GpuOperatorLog | None = None,
                     cluster: Cluster | None = None) -> Iterator[Finding]:
    """A driver upgrade by the operator's upgrade controller (GPUDriverUpgrade events, the
    node's upgrade state label): cordon and drain are its design, not an outage."""
    events = [e for e in (cluster.events if cluster else []) if e.reason == "GPUDriverUpgrade"]
    states = [m.group(1) for e in events
              if (m := re.search(r"state label to ([\w-]+)", e.message))]
    labels = [n.labels.get("nvidia.com/gpu-driver-upgrade-state") for n in
              (cluster.nodes.values() if cluster else [])]
    states += [s for s in labels if s]
    log_lines: list[str] = []
    if gpu_operator_log is not None:
        states += gpu_operator_log.upgrade_states
        log_lines = [e.line for e in gpu_operator_log.of("upgrade")]
    if not states:
        return
    last = states[-1]
    ev = [evidence(SOURCE, log_lines), evidence("cluster", [e.line for e in events if e.line])]
    nodes = sorted({e.name for e in events if e.name})
    on = f" on {', '.join(nodes)}" if nodes else ""
    if last == "upgrade-failed":
        yield finding(
            "k8s.operator-upgrade", Severity.WARNING, f"GPU driver upgrade failed{on}",
            "The operator's upgrade controller marked the node upgrade-failed: read the "
            "driver pod's log on that node, fix it, then set the node's "
            "nvidia.com/gpu-driver-upgrade-state label back to upgrade-required.",
            Action.FIX_SOFTWARE, Blame.CONFIG, evidence=ev)
        return
    done = last == "upgrade-done"
    yield finding(
        "k8s.operator-upgrade", Severity.OK if done else Severity.INFO,
        f"GPU driver upgrade by the operator{on}: {last}",
        f"The operator's upgrade controller went through {' -> '.join(dict.fromkeys(states))}. "
        "Cordoning, waiting for jobs and deleting GPU pods are its steps, by design: not a "
        "hardware problem." + (" The upgrade is done." if done else
                               " The node comes back when the state reaches upgrade-done."),
        Action.NONE, Blame.UNKNOWN, evidence=ev)

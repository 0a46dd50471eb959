"""The device plugin's and the GPU operator's rules (rules/k8s_stack.py,
rules/k8s_operator.py): each cause blamed and acted on, with the cluster's pods and
DaemonSets built here, and the corpus samples of both judged as MANIFEST says."""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import CALM, GPU_FAULTS, check_judged
from hostkit import run

from gputriage.engine.causes import fold
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.device_plugin_log import parse_device_plugin_log
from gputriage.parsers.gpu_operator_log import parse_gpu_operator_log
from gputriage.parsers.k8s_model import Cluster, KDaemonSet, KEvent, KNode, KPod
from gputriage.rules.k8s_operator import (
    operator_driver,
    operator_operands,
    operator_upgrade,
    operator_validation,
)
from gputriage.rules.k8s_stack import plugin_health, plugin_start

FIXTURES = Path(__file__).parent / "fixtures" / "k8s"
NVML_FAIL = """\
2022/05/13 23:09:23 Loading NVML
2022/05/13 23:09:23 Failed to initialize NVML: could not load NVML library.
2022/05/13 23:09:23 If this is a GPU node, did you set the docker default runtime to 'nvidia'?
"""
TEGRA = (
    "I0110 10:00:00.000001       1 main.go:279] Retrieving plugins.\n"
    "I0110 10:00:00.000002       1 factory.go:104] Detected Tegra platform: "
    "/sys/devices/soc0/family has 'tegra' prefix\n"
    "E0110 10:00:00.000003       1 factory.go:112] Incompatible platform detected\n")
INCOMPATIBLE = """\
E0718 10:42:07.181895       1 factory.go:112] Incompatible strategy detected auto
I0718 10:42:07.181938       1 main.go:381] No devices found. Waiting indefinitely.
"""
REGISTERED = (
    "I0822 07:26:02.687308       1 main.go:256] Retreiving plugins.\n"
    "I0822 07:26:02.700674       1 server.go:125] Registered device plugin for "
    "'nvidia.com/gpu' with Kubelet\n")
DRIVER = (FIXTURES / "B-operator-driver-build-failed.log").read_text()
OPERANDS = """\
NAME                                       READY   STATUS                  RESTARTS   AGE
nvidia-container-toolkit-daemonset-ktrv6   1/1     Running                 0          22m
nvidia-device-plugin-daemonset-4ghzp       0/1     Init:0/1                0          22m
nvidia-operator-validator-qpv7s            0/1     Init:CrashLoopBackOff   9          22m
"""
UPGRADE = """\
"nvidia.com/gpu-driver-upgrade-enabled":"true"
cordon-required
"""

# the kubelet's journal after a restart the plugin did not follow (its registration lost)
KUBELET_LOST = ("E0604 15:51:53.763503   15104 kuberuntime_manager.go:749] container start "
                "failed: CreateContainerConfigError: endpoint not found in cache for a "
                "registered resource: nvidia.com/gpu\n")


def test_a_lost_endpoint_is_config_and_quiet_once_the_plugin_registered_again():
    f = next(f for f in run(device_plugin_log=KUBELET_LOST).findings
             if f.id == "k8s.plugin-unregistered")
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.CONFIG, Action.FIX_CONFIG)
    again = KUBELET_LOST + ("I0604 15:53:02.112233       1 server.go:165] Registered device "
                            "plugin for 'nvidia.com/gpu' with Kubelet\n")
    f = next(f for f in run(device_plugin_log=again).findings
             if f.id == "k8s.plugin-unregistered")
    assert f.severity is Severity.INFO and f.action is Action.NONE


RULE_CASES = {
    "k8s.plugin-start": [
        ({"device_plugin_log": NVML_FAIL}, "k8s.plugin-nvml-missing"),
        ({"device_plugin_log": TEGRA}, "k8s.plugin-no-nvml-platform"),
        ({"device_plugin_log": INCOMPATIBLE}, "k8s.plugin-incompatible-strategy"),
        ({"device_plugin_log": REGISTERED}, "k8s.plugin-registered"),
    ],
    "k8s.plugin-health": [
        ({"device_plugin_log": (FIXTURES / "B-plugin-xid79-cri.log").read_text()},
         "k8s.plugin-devices-unhealthy"),
        ({"device_plugin_log": (FIXTURES / "B-plugin-stale-nvml.log").read_text()},
         "k8s.plugin-stale-nvml"),
        ({"device_plugin_log": KUBELET_LOST}, "k8s.plugin-unregistered"),
    ],
    "k8s.operator-driver": [({"gpu_operator_log": DRIVER}, "k8s.operator-driver-failed")],
    "k8s.operator-validation": [({"k8s_table": OPERANDS}, "k8s.operator-validation-stuck")],
    # alone (no validator or driver pod to fold them under)
    "k8s.operator-operands": [({"k8s_table": "\n".join(OPERANDS.splitlines()[:3]) + "\n"},
                               "k8s.operator-operand-failing")],
    "k8s.operator-upgrade": [({"gpu_operator_log": UPGRADE}, "k8s.operator-upgrade")],
}

# the corpus samples of the GPU stack: (must, must_not); MANIFEST's diagnosis is the truth
NVML_LIB = "container.nvml-library-not-found"
GOLDEN = {
    # healthy registrations: the legacy Go log ("Retreiving" [sic]), klog, a MIG fallback
    "devplugin-2020-legacy-log": (("k8s.plugin-registered=ok",), (CALM, NVML_LIB, *GPU_FAULTS)),
    "devplugin-v0.14.0-klog-healthy": (("k8s.plugin-registered=ok",), (CALM, *GPU_FAULTS)),
    "device-plugin-registered-ok-mig-single": (("k8s.plugin-registered=ok",),
                                               (CALM, *GPU_FAULTS)),
    "openshift-devplugin-0.13.0": (("k8s.plugin-registered=ok",), (CALM, *GPU_FAULTS)),
    # the plugin's container cannot load libnvidia-ml: the runtime, not the GPUs
    "devplugin182-microk8s": (("k8s.plugin-nvml-missing=warning",),
                              (CALM, NVML_LIB, "k8s.plugin-no-nvml-platform", *GPU_FAULTS)),
    "devplugin303-failed-to-initialize-nvml": (("k8s.plugin-nvml-missing=warning",),
                                               (CALM, NVML_LIB, *GPU_FAULTS)),
    # the node image without libnvidia-ml (its own quote of the error folds under it)
    "device-plugin-non-nvml-platform-eks": (("k8s.plugin-nvml-missing=warning", NVML_LIB),
                                            (CALM, "k8s.plugin-no-nvml-platform", *GPU_FAULTS)),
    "device-plugin-jetson-nano": (("k8s.plugin-no-nvml-platform=warning",),
                                  (CALM, "k8s.plugin-nvml-missing", NVML_LIB, *GPU_FAULTS)),
    "k3s-devplugin-incompatible-strategy": (("k8s.plugin-incompatible-strategy=warning",),
                                            (CALM, *GPU_FAULTS)),
    "minikube-docker-driver-devplugin": (("k8s.plugin-incompatible-strategy=warning",),
                                         (CALM, *GPU_FAULTS)),
    # the driver container cannot build for the running kernel: the node's OS
    "gpu-operator-driver-centos7-kernel-862": (("k8s.operator-driver-failed=critical",),
                                               (CALM, *GPU_FAULTS)),
    "gpu-operator-driver-could-not-resolve-kernel": (
        ("k8s.operator-driver-failed=critical", "k8s.operator-operand-failing"),
        (CALM, *GPU_FAULTS)),
    "gpu-operator-ds-driver-daemonset-0-ready": (("k8s.operator-driver-failed=warning",),
                                                 (CALM, *GPU_FAULTS)),
    "gpu-operator-toolkit-validation": (
        ("k8s.operator-validation-stuck=warning", "k8s.operator-operand-failing"),
        (CALM, *GPU_FAULTS)),
    "openshift-cuda-validator-init-error": (("k8s.operator-validation-stuck=warning",),
                                            (CALM, *GPU_FAULTS)),
    "gpu-operator-driver-upgrade-node-events": (("k8s.operator-upgrade=ok",),
                                                (CALM, *GPU_FAULTS)),
}


@pytest.mark.parametrize(("part", "must", "must_not"),
                         [pytest.param(p, m, n, id=p) for p, (m, n) in GOLDEN.items()])
def test_corpus_sample_judged(corpus, part, must, must_not) -> None:
    check_judged(corpus.sample(part).path, must, must_not)


def _pod(name: str, status: str, restarts: int = 0, ns: str = "gpu-operator") -> KPod:
    return KPod(name, ns, status=status, restarts=restarts, lines=[f"{name}  {status}"])


def test_each_engine_gets_its_own_fix() -> None:
    log = parse_device_plugin_log(NVML_FAIL)
    k3s = Cluster(nodes={"n1": KNode("n1", kubelet_version="v1.29.4+k3s1",
                                     runtime_version="containerd://1.7.15-k3s1")})
    found = list(plugin_start(log, k3s))
    assert "config.toml.tmpl" in found[0].explanation and "daemon.json" not in \
        found[0].explanation
    docker = Cluster(nodes={"n1": KNode("n1", runtime_version="docker://20.10.16")})
    assert "daemon.json" in next(iter(plugin_start(log, docker))).explanation
    unknown = next(iter(plugin_start(log, None)))  # no engine said: every fix, by engine
    assert all(w in unknown.explanation for w in ("daemon.json", "config.toml.tmpl",
                                                  "microk8s enable gpu"))
    assert (unknown.blame, unknown.action) == (Blame.CONFIG, Action.FIX_CONFIG)


def test_a_crash_looping_plugin_pod_is_said() -> None:
    cluster = Cluster(pods=[_pod("nvidia-device-plugin-daemonset-42pzg", "CrashLoopBackOff",
                                 1102, "kube-system")])
    f = next(iter(plugin_start(parse_device_plugin_log(NVML_FAIL), cluster)))
    assert "CrashLoopBackOff" in f.explanation and "1102 restarts" in f.explanation
    assert any(e.source == "cluster" for e in f.evidence)


def test_registered_names_what_the_nodes_advertise() -> None:
    node = KNode("gpu-1", capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "8"},
                 lines=["  nvidia.com/gpu:     8"])
    cluster = Cluster(nodes={"gpu-1": node})
    f = next(iter(plugin_start(parse_device_plugin_log(REGISTERED), cluster)))
    assert f.severity is Severity.OK and "gpu-1: 8 nvidia.com/gpu" in f.explanation


def test_the_last_start_decides() -> None:
    """A failed start followed by a registration is healthy now."""
    log = parse_device_plugin_log(NVML_FAIL + REGISTERED)
    assert [f.id for f in plugin_start(log)] == ["k8s.plugin-registered"]


@pytest.mark.parametrize(("fixture", "severity", "blame", "action"), [
    ("B-plugin-xid79-cri.log", Severity.CRITICAL, Blame.NODE, Action.DRAIN_AND_REPAIR),
    ("B-plugin-xid31-prefix.log", Severity.WARNING, Blame.JOB, Action.RESTART_JOB),
])
def test_unhealthy_device_blamed_by_the_xid_catalog(fixture, severity, blame, action) -> None:
    log = parse_device_plugin_log((FIXTURES / fixture).read_text())
    [f] = list(plugin_health(log))
    assert (f.severity, f.blame, f.action) == (severity, blame, action)
    assert f.scope.kind == "gpu" and f.scope.uuid and f.scope.uuid.startswith("GPU-")
    assert any("XidCriticalError" in ln for e in f.evidence for ln in e.lines)


def test_stale_nvml_restarts_the_pods_and_is_not_the_gpus() -> None:
    log = parse_device_plugin_log((FIXTURES / "B-plugin-stale-nvml.log").read_text())
    [f] = list(plugin_health(log))
    assert f.id == "k8s.plugin-stale-nvml" and f.blame is Blame.CONFIG
    assert "Restart the plugin, GFD and dcgm-exporter pods" in f.explanation
    mismatch = parse_device_plugin_log(
        "2023/01/01 00:00:00 Loading NVML\n2023/01/01 00:00:00 Failed to initialize NVML: "
        "Driver/library version mismatch\n")
    assert [f.id for f in plugin_health(mismatch)] == ["k8s.plugin-stale-nvml"]
    assert not list(plugin_start(mismatch))  # the stale NVML, not a missing runtime


@pytest.mark.parametrize(("status", "step"), [
    ("Init:0/4", "driver"), ("Init:1/4", "toolkit"), ("Init:2/4", "cuda"), ("Init:3/4", "plugin"),
])
def test_validation_step_from_the_init_count(status, step) -> None:
    cluster = Cluster(pods=[_pod("nvidia-operator-validator-99l6b", status, 41),
                            _pod("nvidia-driver-daemonset-hs6rw", "Running")])
    [f] = list(operator_validation(None, cluster))
    assert f"at the {step} step" in f.title
    assert f.blame is (Blame.UNKNOWN if step == "cuda" else Blame.CONFIG)


def test_validator_log_names_its_cuda_error() -> None:
    log = parse_gpu_operator_log((FIXTURES / "B-operator-cuda-validation.log").read_text())
    [f] = list(operator_validation(log, None))
    assert f.id == "k8s.validator-cuda-error" and "CUDA error 100" in f.title
    assert f.blame is Blame.CONFIG and f.action is Action.FIX_CONFIG


def test_validator_without_a_known_cuda_error_is_stuck_at_the_cuda_step() -> None:
    log = parse_gpu_operator_log("cuda workload validation failed\n")
    [f] = list(operator_validation(log, None))
    assert "cuda step" in f.title and "cuda-validation" in f.explanation


def test_driver_daemonset_not_ready_points_at_its_log() -> None:
    ds = KDaemonSet("nvidia-driver-daemonset", "gpu-operator", desired=1, current=1, ready=0,
                    lines=["nvidia-driver-daemonset   1   1   0"])
    healthy = KDaemonSet("nvidia-device-plugin-daemonset", "gpu-operator", desired=5, ready=5)
    [f] = list(operator_driver(None, Cluster(daemonsets=[ds, healthy])))
    assert f.severity is Severity.WARNING and "nvidia-driver-ctr" in f.explanation
    assert f.scope.kind == "daemonset"


def test_a_driver_installed_since_is_not_a_failure() -> None:
    log = parse_gpu_operator_log(DRIVER + "Loading NVIDIA driver kernel modules...\n"
                                 "Done, now waiting for signal\n")
    assert not list(operator_driver(log, None))
    [f] = list(operator_driver(parse_gpu_operator_log(DRIVER), None))
    assert "6.5.0-1017-azure" in f.title and f.action is Action.FIX_SOFTWARE


def test_operands_fold_under_the_driver() -> None:
    log = parse_gpu_operator_log(DRIVER)
    cluster = Cluster(pods=[_pod("nvidia-dcgm-exporter-4f8fz", "CrashLoopBackOff", 1106),
                            _pod("gpu-feature-discovery-bmrgf", "Init:0/1")])
    found = [*operator_driver(log, cluster), *operator_operands(cluster)]
    [top] = fold(found)
    assert top.id == "k8s.operator-driver-failed"
    assert [c.id for c in top.consequences] == ["k8s.operator-operand-failing"]


@pytest.mark.parametrize(("states", "severity"), [
    (("upgrade-required", "cordon-required"), Severity.INFO),
    (("cordon-required", "upgrade-done"), Severity.OK),
    (("upgrade-required", "upgrade-failed"), Severity.WARNING),
])
def test_upgrade_flow(states, severity) -> None:
    events = [KEvent("GPUDriverUpgrade", f"Successfully updated node state label to {s}",
                     "Normal", "Node", "gpu-7", line=f"node/gpu-7 ... {s}") for s in states]
    [f] = list(operator_upgrade(None, Cluster(events=events)))
    assert f.severity is severity and "gpu-7" in f.title


def test_whole_paste_folds_operands_under_validation() -> None:
    result = run(k8s_table=OPERANDS)
    top = {f.id: f for f in result.findings}
    assert "k8s.operator-operand-failing" not in top
    assert [c.id for c in top["k8s.operator-validation-stuck"].consequences] == [
        "k8s.operator-operand-failing"]

"""The GPU stack in Kubernetes as the corpus rows 290-338 brought it, each as a class: a GPU
the device plugin cannot watch for Xids, the operator's driver pod restarting, the driver
container unable to unload modules in use, plugin validation waiting for a GPU nothing
advertises, nvidia-smi's corrupted infoROM, and nvidia-smi -L behind kubectl's --prefix."""

from __future__ import annotations

import pytest
from golden import by_id
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.device_plugin_log import parse_device_plugin_log, split_log_line
from gputriage.parsers.nvsmi_table import parse_nvsmi_table

UUID = "GPU-edae6d5d-6698-fb8d-2c6b-2a791224f089"
TOO_OLD = [
    f"2018/02/27 16:43:50 Warning: GPU with UUID {UUID} is too old to support healtchecking "
    "with error: %!s(MISSING). Marking it unhealthy",
    f"W0301 10:00:00.000000       1 health.go:140] Device {UUID} is too old to support "
    "healthchecking.\nI0301 10:00:00.000001       1 health.go:145] Marking device "
    f"{UUID} as unhealthy: Not Supported",
]
TEARDOWN = """\
========== NVIDIA Software Installer ==========
Starting installation of NVIDIA driver version 535.104.05 for Linux kernel version 5.15.0-91-generic
Stopping NVIDIA persistence daemon...
Unloading NVIDIA driver kernel modules...
Could not unload NVIDIA driver kernel modules, driver is in use
"""
PODS = """\
NAME                                  READY   STATUS     RESTARTS   AGE
nvidia-container-toolkit-daemonset-a  0/1     Init:0/1   0          5m
nvidia-operator-validator-b           0/1     Init:0/4   0          5m
nvidia-driver-daemonset-c             0/{n}     Running    {r}          6m
"""
INFOROM = "WARNING: infoROM is corrupted at gpu 0000:0B:00.0\n"


@pytest.mark.parametrize("text", TOO_OLD)
def test_a_gpu_too_old_for_xid_events_is_the_plugins_not_the_gpus(text):
    log = parse_device_plugin_log(text)
    assert log.having("healthcheck-unsupported")[0].device == UUID
    f = by_id(run(device_plugin_log=text + "\n"))["k8s.plugin-healthcheck-unsupported"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.CONFIG,
                                               Action.FIX_SOFTWARE)
    assert "DP_DISABLE_HEALTHCHECKS=xids" in f.explanation and "marked unhealthy" in f.title
    assert f.scope.uuid == UUID


def test_a_1x_plugin_that_exits_on_not_supported_is_the_same_class(tmp_path):
    """The 1.x plugins exited where later ones say 'too old to support healthchecking':
    'Fatal: nvml: Not Supported' and a panic, pasted on its own (no 'device-plugin' in
    the paste), is the plugin's health check, not a healthy node nor a GPU fault."""
    paste = tmp_path / "dp.log"
    paste.write_text("2019/03/04 11:02:07 Loading NVML\n"
                     "2019/03/04 11:02:07 Starting to serve on /var/lib/kubelet/"
                     "device-plugins/nvidia.sock\n"
                     "2019/03/04 11:02:08 Fatal: nvml: Not Supported\n"
                     "panic: Fatal: nvml: Not Supported\n")
    f = by_id(analyze(load_input(str(paste))))["k8s.plugin-healthcheck-unsupported"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.CONFIG,
                                               Action.FIX_SOFTWARE)
    assert f.title.endswith("the plugin exits")


def test_logrus_lines_are_split_like_the_others():
    parts = split_log_line('time="2023-02-08T14:19:01Z" level=info msg="GPU resources are not '
                           'yet discovered by the node, retry: 24"')
    assert parts.prefixed and parts.level == "I" and parts.message.startswith("GPU resources")


def test_plugin_validation_waiting_for_a_gpu_nothing_advertises():
    text = "".join(f'time="2023-02-08T14:19:{i:02d}Z" level=info msg="GPU resources are not yet '
                   f'discovered by the node, retry: {i}"\n' for i in range(24, 30))
    assert "gpu_operator_log" in dict(detect(text))
    f = by_id(run(gpu_operator_log=text))["k8s.operator-validation-stuck"]
    assert "plugin step" in f.title and "devicePlugin.enabled=false" in f.explanation
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)


def test_a_plugin_validator_refused_at_admission_is_the_race_not_a_missing_plugin():
    pods = ("NAME                                   READY   STATUS                     RESTARTS\n"
            "nvidia-device-plugin-daemonset-p2q9w   1/1     Running                    0\n"
            "nvidia-device-plugin-validator-8s7tq   0/1     UnexpectedAdmissionError   0\n"
            "nvidia-operator-validator-d7k2m        0/1     Init:3/4                   4\n")
    f = by_id(run(k8s_table=pods))["k8s.operator-validation-stuck"]
    assert "WITH_WORKLOAD=false" in f.explanation and "nothing does" not in f.explanation
    assert "WITH_WORKLOAD=false" in (f.step or "")


def test_the_driver_container_cannot_unload_modules_in_use():
    found = by_id(run(gpu_operator_log=TEARDOWN))
    f = found["driver.container-modules-in-use"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.NODE, Action.FIX_SOFTWARE)
    assert "k8s.operator-driver-failed" not in found
    assert "Stopping NVIDIA persistence daemon..." in f.evidence[0].lines
    assert "driver.enabled=false" in f.explanation and "lsmod" in f.explanation


@pytest.mark.parametrize(("containers", "restarts", "failing"), [
    (2, 3, True), (2, 0, False), (1, 5, True), ("²", 3, False), ("١", 3, False)])
def test_a_driver_pod_running_but_never_ready(containers, restarts, failing):
    """READY counts fewer ready containers than the pod has, and it restarted; a count
    that is not ASCII digits is unknown (int("²") would raise)."""
    found = by_id(run(k8s_table=PODS.format(n=containers, r=restarts)))
    if failing:
        f = found["k8s.operator-driver-failed"]
        assert f.severity is Severity.WARNING and "ready" in f.title
        assert f.action not in (Action.DRAIN_AND_REPAIR, Action.REBOOT_NODE)
    else:
        assert "k8s.operator-driver-failed" not in found


@pytest.mark.parametrize("where", ["below", "above"])
def test_a_corrupted_inforom_is_the_gpus(tmp_path, where):
    """The GPU's, planned: the GPU still runs work (DCGM's infoROM watch is a warning),
    so it is repaired at the next window, not drained (knowledge/node_messages.csv)."""
    table = ("| NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |\n"
             "|===============================+======================+======================|\n"
             "|   0  Tesla P100-PCIE...  On   | 00000000:0B:00.0 Off |                    0 |\n"
             "| N/A   42C    P0    29W / 250W |      0MiB / 16280MiB |      0%      Default |\n"
             "+-------------------------------+----------------------+----------------------+\n")
    path = tmp_path / "p.txt"
    path.write_text(table + INFOROM + "14\n" if where == "below" else INFOROM + table)
    f = by_id(analyze(load_input(str(path))))["nvidia-smi.inforom-corrupted"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.NODE,
                                               Action.PLAN_REPAIR)
    assert f.scope.pci_bus_id == "0000:0b:00.0"


def test_nvidia_smi_list_behind_kubectl_prefix_counts_one_gpu_per_uuid():
    line = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-4404041a-04cf-1ccf-9e70-f139a9b1e23c)"
    text = f"[pod/pod/ctr0] {line}\n[pod/pod/ctr1] {line}\n[pod/pod/ctr1] GPU 1: NVIDIA " \
           "A100-SXM4-40GB (UUID: GPU-5504041a-04cf-1ccf-9e70-f139a9b1e23c)\n"
    assert "nvidia_smi" in dict(detect(text))
    report = parse_nvsmi_table(text)
    assert report.format == "list" and len(report.gpus) == 2
    assert not [f for f in run(nvidia_smi=text).findings
                if f.severity.rank >= Severity.WARNING.rank]


@pytest.mark.parametrize(("text", "container"), [
    ("modprobe: ERROR: could not insert 'nvidia': Required key not available\n", False),
    ("========== NVIDIA Software Installer ==========\nStarting installation of NVIDIA driver "
     "version 550.90.07 for Linux kernel version 5.15.0-105-generic\nLoading NVIDIA driver "
     "kernel modules...\nmodprobe: ERROR: could not insert 'nvidia': Key was rejected by "
     "service\n", True),
])
def test_secure_boot_refusing_the_module_is_said_and_fixed_as_such(text, container,
                                                                    tmp_path):
    """ENOKEY ('Required key not available') and EKEYREJECTED are Secure Boot's; a bare
    modprobe line is the host's own load, not the operator's driver container."""
    paste = tmp_path / "paste.txt"
    paste.write_text(text)
    f = by_id(analyze(load_input(str(paste))))["k8s.operator-driver-failed"]
    assert "Secure Boot" in f.explanation and "mokutil" in (f.step or "")
    assert ("driver container" in f.title) is container


def test_nouveau_holding_the_gpus_is_blacklisted_not_repaired(tmp_path):
    paste = tmp_path / "paste.txt"
    paste.write_text("ERROR: The Nouveau kernel driver is currently in use by your system.  "
                     "This driver is incompatible with the NVIDIA driver, and must be disabled "
                     "before proceeding.\n")
    f = by_id(analyze(load_input(str(paste))))["k8s.operator-driver-failed"]
    assert f.blame is Blame.CONFIG and "nouveau" in f.explanation
    assert "blacklist nouveau" in (f.step or "") and "initramfs" in (f.step or "")

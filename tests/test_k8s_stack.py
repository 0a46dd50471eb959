"""The device plugin's and the GPU operator's logs: their parsers and detectors, on the
corpus's captures and on fixtures in the formats the corpus lacks (CRI log lines,
``kubectl logs --prefix --timestamps``, the health checker's records)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.parsers.device_plugin_log import parse_device_plugin_log, split_log_line
from gputriage.parsers.gpu_operator_log import parse_gpu_operator_log

FIXTURES = Path(__file__).parent / "fixtures" / "k8s"

SOURCE_SAMPLES = {
    "device_plugin_log": ("corpus:devplugin-2020-legacy-log", "corpus:devplugin-v0.14.0-klog",
                          "corpus:devplugin182-microk8s", "corpus:k3s-devplugin-incompatible",
                          "corpus:minikube-docker-driver-devplugin",
                          "corpus:device-plugin-registered-ok-mig-single",
                          "corpus:device-plugin-non-nvml-platform-eks",
                          "fixture:k8s/B-plugin-xid79-cri.log",
                          "fixture:k8s/B-plugin-xid31-prefix.log",
                          "fixture:k8s/B-plugin-stale-nvml.log"),
    "gpu_operator_log": ("corpus:gpu-operator-driver-centos7-kernel-862",
                         "corpus:gpu-operator-driver-could-not-resolve-kernel",
                         "fixture:k8s/B-operator-driver-build-failed.log",
                         "fixture:k8s/B-operator-cuda-validation.log"),
}


def _detected(text: str, name: str) -> str:
    found = dict(detect(text))
    assert name in found, sorted(found)
    return found[name]


@pytest.mark.parametrize(("line", "time", "level", "pod", "message"), [
    ("2020/05/11 12:46:28 Loading NVML", "2020/05/11 12:46:28", None, None, "Loading NVML"),
    ("I0822 07:26:02.687308       1 main.go:256] Retreiving plugins.", "0822 07:26:02.687308",
     "I", None, "Retreiving plugins."),
    # the thread id trimmed by the author (minikube sample)
    ("E1106 09:17:18.873659 factory.go:112] Incompatible strategy detected auto",
     "1106 09:17:18.873659", "E", None, "Incompatible strategy detected auto"),
    ("2024-01-02T03:04:05.123Z stderr F I0102 03:04:05.000001 1 main.go:1] No devices found. "
     "Waiting indefinitely.", "0102 03:04:05.000001", "I", None,
     "No devices found. Waiting indefinitely."),
    ("[pod/nvidia-device-plugin-daemonset-x/ctr] 2023-06-20T10:02:11.4Z Loading NVML",
     "2023-06-20T10:02:11.4Z", None, "nvidia-device-plugin-daemonset-x", "Loading NVML"),
    ("`I0402 12:47:47.247247       1 main.go:279] Retrieving plugins.", "0402 12:47:47.247247",
     "I", None, "Retrieving plugins."),
])
def test_log_prefixes(line, time, level, pod, message) -> None:
    parts = split_log_line(line)
    assert (parts.time, parts.level, parts.pod, parts.message) == (time, level, pod, message)
    assert parts.prefixed


def test_legacy_log_registers_with_the_sic_wording(corpus) -> None:
    text = _detected(corpus.sample("devplugin-2020-legacy-log").text(), "device_plugin_log")
    log = parse_device_plugin_log(text)
    assert [e.event for e in log.entries][:4] == ["loading-nvml", "starting", "starting",
                                                  "retrieving"]
    assert log.resources == ["nvidia.com/gpu"]
    assert "Capacity:" not in text  # the describe output below it is not the plugin's


def test_config_dump_and_mig_fallback(corpus) -> None:
    text = _detected(corpus.sample("device-plugin-registered-ok-mig-single").text(),
                     "device_plugin_log")
    log = parse_device_plugin_log(text)
    assert log.configured_strategy == "single" and log.mig_strategy == "none"
    assert log.config and log.config["flags"]["failOnInitError"] is True
    assert log.config_lines[0].strip() == "{"


def test_nvml_failure_and_its_hints(corpus) -> None:
    log = parse_device_plugin_log(_detected(
        corpus.sample("devplugin303-failed-to-initialize-nvml").text(), "device_plugin_log"))
    failed = log.having("nvml-init-failed")
    assert failed and failed[0].detail == "could not load NVML library."
    assert log.having("hint-docker-runtime") and log.having("hint-not-gpu-node")


def test_eks_non_nvml_platform_leaves_the_reporters_words(corpus) -> None:
    text = _detected(corpus.sample("device-plugin-non-nvml-platform-eks").text(),
                     "device_plugin_log")
    assert "Since last week" not in text  # the prose that quotes the error is not the log
    log = parse_device_plugin_log(text)
    assert [e.event for e in log.having("platform-non-nvml", "platform-non-tegra",
                                        "incompatible-platform")] == [
        "platform-non-nvml", "platform-non-tegra", "incompatible-platform"]


def test_jetson_named_by_the_command_line(corpus) -> None:
    log = parse_device_plugin_log(_detected(
        corpus.sample("device-plugin-jetson-nano").text(), "device_plugin_log"))
    assert log.tegra_hint and "jetson" in log.tegra_hint
    plain = parse_device_plugin_log(_detected(
        corpus.sample("devplugin-v0.14.0-klog").text(), "device_plugin_log"))
    assert plain.tegra_hint is None  # "Detected non-Tegra platform" names no Tegra


def test_health_records() -> None:
    log = parse_device_plugin_log((FIXTURES / "B-plugin-xid79-cri.log").read_text())
    xid = log.having("xid-unhealthy")[0]
    assert (xid.xid, xid.device) == (79, "GPU-6d3a1b52-0c8e-4c5d-9a0e-2f1d8b7c4e11")
    assert xid.time == "0312 21:40:57.601166"
    marked = log.having("device-unhealthy")[0]
    assert (marked.resource, marked.device) == ("nvidia.com/gpu", xid.device)
    stale = parse_device_plugin_log((FIXTURES / "B-plugin-stale-nvml.log").read_text())
    assert stale.having("event-error")[0].detail == "ERROR_UNKNOWN"
    pods = parse_device_plugin_log((FIXTURES / "B-plugin-xid31-prefix.log").read_text()).pods
    assert pods == ["nvidia-device-plugin-daemonset-7xk2p"]


def test_the_plugin_takes_its_nvml_lines_before_the_job_log(corpus) -> None:
    found = dict(detect(corpus.sample("devplugin182-microk8s").text()))
    assert "job_log" not in found and "Failed to initialize NVML" in found["device_plugin_log"]
    job = "2020/10/14 18:04:53 Failed to initialize NVML: could not load NVML library.\n"
    assert "device_plugin_log" not in dict(detect(job))  # no record only the plugin prints


@pytest.mark.parametrize("text", ["", "hello\nworld\n", "Loading\n{\n", "\x00\x01 NVML"])
def test_garbage_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_device_plugin_log(text)
    with pytest.raises(ParseError):
        parse_gpu_operator_log(text)


def test_driver_container_keeps_kernel_driver_and_failing_step(corpus) -> None:
    log = parse_gpu_operator_log(_detected(
        corpus.sample("gpu-operator-driver-centos7-kernel-862").text(), "gpu_operator_log"))
    assert (log.kernel, log.driver) == ("3.10.0-862.el7.x86_64", "450.80.02")
    # "Unable to open the file '/lib/modules/...'" and the verdict share one line
    assert [e.event for e in log.failures] == ["kernel-unresolved"]
    assert "/lib/modules/3.10.0-862.el7.x86_64" in log.failures[0].message
    build = parse_gpu_operator_log((FIXTURES / "B-operator-driver-build-failed.log").read_text())
    assert build.kernel == "6.5.0-1017-azure" and build.failures[0].event == "build-failed"


def test_nfd_gives_the_kernel_when_the_installer_does_not(corpus) -> None:
    text = _detected(corpus.sample("gpu-operator-driver-could-not-resolve-kernel").text(),
                     "gpu_operator_log")
    log = parse_gpu_operator_log(text)
    assert log.kernel == "4.15.0-115-generic"
    assert "All nvidia pods" not in text and "CrashLoopBackOff" not in text


def test_validator_records_and_upgrade_states(corpus) -> None:
    log = parse_gpu_operator_log((FIXTURES / "B-operator-cuda-validation.log").read_text())
    assert {e.event for e in log.failures} == {"cuda-error", "cuda-failed"}
    assert log.having("cuda-error")[0].detail == "no CUDA-capable device is detected"
    assert {e.component for e in log.failures} == {"validator"}
    up = parse_gpu_operator_log(_detected(
        corpus.sample("gpu-operator-driver-upgrade-node-events").text(), "gpu_operator_log"))
    assert up.upgrade_states[-1] == "upgrade-done"

"""nvidia-ctk's log lines and docker info's runtimes (parsers/ctk_log.py,
rules/container_ctk.py): a healthy configuration says so, its benign warning included;
an error or a runtime docker does not list is the node's configuration."""

from __future__ import annotations

import pytest
from golden import by_id
from hostkit import run

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.model import Blame, Severity
from gputriage.parsers.ctk_log import parse_ctk_log

SOURCE_SAMPLES = {"nvidia_ctk_log": ("corpus:nvidiactk-runtime-configure-containerd-v3",
                                     "corpus:nvidiactk-runtime-configure-docker-containerd-v1")}
CONTAINERD = """\
INFO[0000] Using config version 2
INFO[0000] Using CRI runtime plugin name "io.containerd.grpc.v1.cri"
WARN[0000] could not infer options from runtimes [runc]; using defaults
INFO[0000] Wrote updated config to /etc/containerd/config.toml
INFO[0000] It is recommended that containerd daemon be restarted.
"""
DOCKER = """\
INFO[0000] Loading config from /etc/docker/daemon.json
INFO[0000] Wrote updated config to /etc/docker/daemon.json
INFO[0000] It is recommended that docker daemon be restarted.
"""
FAILED = ("INFO[0000] Auto-detected mode as \"nvml\"\n"
          "ERRO[0000] failed to generate CDI spec: failed to create device CDI specs: failed to "
          "initialize NVML: ERROR_LIBRARY_NOT_FOUND\n")

RULE_CASES = {
    "container.ctk": [
        ({"nvidia_ctk_log": CONTAINERD}, "container.ctk-configured"),
        ({"nvidia_ctk_log": DOCKER + " Runtimes: io.containerd.runc.v2 runc\n"},
         "container.ctk-runtime-not-loaded"),
    ],
}


def test_parse_containerd_configure():
    log = parse_ctk_log(CONTAINERD)
    assert log.written == ["/etc/containerd/config.toml"] and log.engines == ["containerd"]
    assert (log.config_version, log.cri_plugin) == ("2", "io.containerd.grpc.v1.cri")
    assert log.restart == ["containerd"]
    assert [x.benign for x in log.of("WARN")] == [True]


@pytest.mark.parametrize("prefix", ["", "[pod/nvidia-container-toolkit-daemonset-x/ctr] ",
                                    "2025-01-02T03:04:05.6Z stderr F "])
def test_a_healthy_configure_is_ok_in_any_frame(prefix):
    text = "".join(prefix + ln + "\n" for ln in CONTAINERD.splitlines())
    assert "nvidia_ctk_log" in dict(detect("$ sudo nvidia-ctk runtime configure "
                                           "--runtime=containerd\n" + text))
    found = by_id(run(nvidia_ctk_log=text))
    f = found["container.ctk-configured"]
    assert f.severity is Severity.OK and "default runtime options" in f.explanation
    assert not [x for x in found.values() if x.severity.rank >= Severity.WARNING.rank]


def test_docker_lists_the_runtime_with_runc_as_default():
    f = by_id(run(nvidia_ctk_log=DOCKER + " Runtimes: nvidia runc\n Default Runtime: runc\n"))
    assert f["container.ctk-configured"].severity is Severity.OK
    assert "--gpus" in f["container.ctk-configured"].explanation


def test_docker_without_the_runtime_was_not_restarted():
    f = by_id(run(nvidia_ctk_log=DOCKER + " Runtimes: io.containerd.runc.v2 runc\n"))
    g = f["container.ctk-runtime-not-loaded"]
    assert (g.severity, g.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "not restarted" in g.explanation


def test_an_error_is_a_failure_of_the_configuration():
    f = by_id(run(nvidia_ctk_log=FAILED))["container.ctk-failed"]
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)


def test_other_logrus_short_lines_are_not_nvidia_ctks():
    text = "INFO[0000] starting server on :8080\nWARN[0001] slow request /health\n"
    assert "nvidia_ctk_log" not in dict(detect(text))
    with pytest.raises(ParseError):
        parse_ctk_log("hello\nworld\n")

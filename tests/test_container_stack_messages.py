"""The container stack's messages that the corpus rows 288-326 brought, each as a class
(rules/container.py, knowledge/messages/*.csv): the image's CUDA requirement judged
against the driver and the GPU, SELinux, the cosmetic group warning, /proc/driver/nvidia
left by a driver change, an NVML symbol a legacy driver lacks, a run without --gpus, a
hook error wrapped mid-word by the paste, and the same catalog in a pod's events."""

from __future__ import annotations

import pytest
from golden import by_id
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.knowledge.job_messages import find, scan_line
from gputriage.model import Action, Blame, Severity

K80_470 = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.199.02   Driver Version: 470.199.02   CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla K80           On   | 00000000:05:00.0 Off |                    0 |
| N/A   33C    P8    26W / 149W |      0MiB / 11441MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""
REQUIRE = ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>={v}, please "
           "update your driver to a newer version, or use an earlier cuda container\n")
HOOK = ("docker: Error response from daemon: OCI runtime create failed: container_linux.go:370: "
        "starting container process caused: process_linux.go:459: container init caused: "
        "Running hook #0:: error running hook: exit status 1, stdout: , stderr: {cause}: "
        "unknown.\n")


def _paste(tmp_path, text: str) -> dict:
    path = tmp_path / "paste.txt"
    path.write_text(text)
    return by_id(analyze(load_input(str(path))))


@pytest.mark.parametrize(("want", "driver_min"), [("11.0", "450.51.05"), ("12.8", "570.26"),
                                                  ("12.4", "550.54.14")])
def test_an_image_newer_than_the_driver_is_the_nodes_driver_to_upgrade(want, driver_min):
    f = by_id(run(job_log=REQUIRE.format(v=want)))["container.cuda-requirement"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.NODE, Action.FIX_SOFTWARE)
    assert driver_min in f.explanation and "Windows" in f.explanation


def test_an_image_newer_than_the_gpu_is_the_jobs():
    """No driver of CUDA 12 serves a Kepler K80: upgrading cannot help, the image must."""
    f = by_id(run(job_log=REQUIRE.format(v="12.2"), nvidia_smi=K80_470))[
        "container.cuda-requirement"]
    assert f.blame is Blame.JOB_CONFIG and "K80" in f.title


@pytest.mark.parametrize(("line", "fid", "severity", "blame"), [
    ("/bin/nvidia-docker: line 34: /bin/docker: Permission denied", "container.selinux-denied",
     Severity.WARNING, Blame.CONFIG),
    ("SELinux is preventing /usr/bin/bash from entrypoint access on the file /usr/bin/docker.",
     "container.selinux-denied", Severity.WARNING, Blame.CONFIG),
    ("groups: cannot find name for group ID 993", "container.group-name-missing", Severity.INFO,
     Blame.UNKNOWN),
    ("root@5f0c1d2e3a4b:/# groups: cannot find name for group ID 44",
     "container.group-name-missing", Severity.INFO, Blame.UNKNOWN),
    ("./nvidia-ctk: symbol lookup error: ./nvidia-ctk: undefined symbol: "
     "nvmlDeviceGetMaxMigDeviceCount", "container.nvml-symbol-missing", Severity.WARNING,
     Blame.NODE),
    ("dcgm-exporter: symbol lookup error: /usr/bin/dcgm-exporter: undefined symbol: "
     "nvmlDeviceGetGpuFabricInfoV", "container.nvml-symbol-missing", Severity.WARNING,
     Blame.NODE),
    (HOOK.format(cause="nvidia-container-cli: mount error: mount operation failed: /var/lib/"
                       "docker/overlay2/ab12/merged/proc/driver/nvidia/params: no such file or "
                       "directory"), "container.mount-proc-driver", Severity.CRITICAL,
     Blame.NODE),
])
def test_catalog_messages_of_the_container_stack(tmp_path, line, fid, severity, blame):
    found = _paste(tmp_path, line + "\n")
    assert (found[fid].severity, found[fid].blame) == (severity, blame)
    assert "container.hook-failed" not in found and "container.mount-missing-file" not in found


def test_the_group_warning_is_healthy(tmp_path):
    found = _paste(tmp_path, "groups: cannot find name for group ID 993\n"
                             "I have no name!@0a1b2c3d4e5f:/$ nvidia-smi -L\n"
                             "GPU 0: NVIDIA A10 (UUID: GPU-f15ae561-21b1-6003-c768-861fc285203b)\n")
    assert not [f for f in found.values() if f.severity.rank >= Severity.WARNING.rank]


def test_a_library_file_missing_stays_the_configurations(tmp_path):
    found = _paste(tmp_path, HOOK.format(
        cause="nvidia-container-cli: mount error: stat failed: /usr/lib/x86_64-linux-gnu/"
              "libnvidia-ml.so.535.104.05: no such file or directory"))
    assert "container.mount-missing-file" in found and "container.mount-proc-driver" not in found


@pytest.mark.parametrize("cause", [
    "nvidia-container-cli: mount error: mount operation failed: /var/lib/docker/overlay2/9c1e/"
    "merged/proc/driver/nvidia/params/version/registry: no such file or directory",
    "nvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/bd45/"
    "merged/usr/bin/nvidia-smi: file exists",
])
def test_explain_says_one_message_of_a_hook_error_as_analyze_does(tmp_path, cause):
    """The hook's failure wraps its cause: explain, like analyze, names the cause alone (not
    the wrapper, nor a second message whose verdict contradicts it)."""
    text = HOOK.format(cause=cause)
    said = [m.id for m in find(text)]
    judged = {f.id for f in _paste(tmp_path, text).values() if f.id.startswith("container.")}
    assert len(said) == 1 and set(said) == judged


@pytest.mark.parametrize("width", [120, 150, 212])
def test_a_hook_error_wrapped_mid_word_is_read_whole(tmp_path, width):
    text = HOOK.format(cause="nvidia-container-cli: mount error: file creation failed: /var/lib/"
                             "docker/overlay2/bd45/merged/usr/bin/nvidia-smi: file exists")
    wrapped = "\n".join(text[i:i + width] for i in range(0, len(text), width))
    found = _paste(tmp_path, wrapped + "\n")
    f = found["container.mount-file-exists"]
    assert f.blame is Blame.JOB_CONFIG and "/usr/bin/nvidia-smi" in f.title
    assert "container.hook-failed" not in found


def test_long_records_of_a_log_are_not_joined_as_wrapped_pieces(monkeypatch):
    """A log of long records that all start alike (logrus, slog, ollama) is read line by
    line: paste detection runs this reader on every input, and joining each record with
    the next four made it scan every line five more times."""
    from gputriage.parsers import job_log

    scanned: list[str] = []

    def counting(line: str, lineno: int = 0):
        scanned.append(line)
        return scan_line(line, lineno)

    monkeypatch.setattr(job_log, "scan_line", counting)
    records = [f'time="2024-05-01T10:00:{i:02d}Z" level=info msg="collecting GPU {i % 8} '
               f'metrics through the driver and NVML, device uuid GPU-{i:04d}" extra=value'
               for i in range(40)]
    job_log.parse_job_log("\n".join(records) + "\nRuntimeError: CUDA error: out of memory\n")
    assert len(scanned) == len(records) + 1


def test_short_lines_are_never_joined():
    assert not scan_line("nvidia-container-cli: m")
    assert [h.message.id for h in scan_line("ount error: file creation failed: /x: file "
                                            "exists")] == []


@pytest.mark.parametrize(("launch", "blame"), [
    ("$ docker run --rm ghcr.io/acme/app:latest --list-gpus", Blame.JOB_CONFIG),
    ("❯ podman run -it quay.io/acme/app", Blame.JOB_CONFIG),
    ("$ docker run --rm --gpus all ghcr.io/acme/app:latest --list-gpus", Blame.UNKNOWN),
])
def test_a_run_without_a_gpu_request_is_the_jobs(tmp_path, launch, blame):
    found = _paste(tmp_path, launch + "\n[app] Detecting GPUs...\n[app] No GPUs detected\n")
    f = found["cuda.no-device"]
    assert f.blame is blame and f.severity is Severity.WARNING
    assert f.action not in (Action.DRAIN_AND_REPAIR, Action.REBOOT_NODE)


def test_a_runtime_missing_in_a_pods_events(tmp_path):
    found = _paste(tmp_path, (
        "Events:\n  Type     Reason                  Age                 From     Message\n"
        "  ----     ------                  ----                ----     -------\n"
        "  Warning  FailedCreatePodSandBox  8s (x21 over 9m2s)  kubelet  Failed to create pod "
        "sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime "
        "for \"nvidia\" is configured\n"))
    f = found["container.unknown-runtime"]
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "RuntimeClass" in f.explanation and "nouveau" in f.explanation
    assert {e.source for e in f.evidence} == {"cluster"}

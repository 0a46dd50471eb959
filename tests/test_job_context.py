"""Where a job's output was printed (parsers/job_context.py): container and host prompts,
the commands that start or enter a container, what it was given; and how that context
reaches the job log in a paste, where prompts are barriers."""

from __future__ import annotations

import pytest

from gputriage.ingest.detect import detect
from gputriage.parsers.job_context import is_context_line, read_context
from gputriage.parsers.job_log import parse_job_log


@pytest.mark.parametrize(("line", "inside"), [
    ("root@098b49afe624:/# nvidia-smi", True),
    ("(container) $ nvidia-smi -L", True),
    ("[root@9d5cd5caa6d9 /]# nvidia-smi", True),
    ("(host) # nvidia-smi -L", False),
])
def test_prompts_say_where_the_output_was_printed(line, inside):
    ctx = read_context([line])
    assert ctx.in_container is inside
    assert (ctx.container_commands if inside else ctx.host_commands)[0].startswith("nvidia-smi")


def test_an_ordinary_prompt_or_hostname_is_not_context():
    assert not is_context_line("user@gpu-node-017:~$ nvidia-smi")
    assert not is_context_line("root@deadbeef:/# ls")  # 8 hex digits: a host name
    assert read_context(["user@gpu-node-017:~$ nvidia-smi"]).in_container is None


def test_a_launch_line_says_what_the_container_was_given():
    ctx = read_context([
        "sudo docker run --rm --runtime=nvidia --gpus all -e NVIDIA_VISIBLE_DEVICES=0,1 "
        "-e NVIDIA_DRIVER_CAPABILITIES=utility nvidia/cuda:12.4.1-base nvidia-smi"])
    assert (ctx.engine, ctx.gpus, ctx.runtime) == ("docker", "all", "nvidia")
    assert (ctx.visible_devices, ctx.driver_capabilities) == ("0,1", "utility")
    assert ctx.lacks_compute
    assert ctx.in_container is None  # a run line alone does not show where output came from


@pytest.mark.parametrize(("caps", "lacks"), [("compute,utility", False), ("all", False),
                                             ("utility", True), ("graphics,video", True)])
def test_capabilities_without_compute(caps, lacks):
    assert read_context([f"NVIDIA_DRIVER_CAPABILITIES={caps}"]).lacks_compute is lacks


def test_exec_and_cdi_devices_and_the_podman_shim():
    ctx = read_context(["$ sudo podman run --device nvidia.com/gpu=all --rm -it img",
                        "Emulate Docker CLI using podman. Create /etc/containers/nodocker to "
                        "quiet msg.",
                        "kubectl exec -it trainer-0 -- nvidia-smi -L"])
    assert ctx.gpus == "nvidia.com/gpu=all"
    assert ctx.engine == "podman" and ctx.podman_as_docker
    assert ctx.in_container and ctx.ran_in_container("nvidia-smi")


def test_a_non_nvidia_adapter_is_noted():
    ctx = read_context(["Graphics Mesa Intel® Xe Graphics (TGL GT2)",
                        "GPU 0: NVIDIA A10 (UUID: GPU-f15ae561)"])
    assert ctx.other_gpus == ["Graphics Mesa Intel® Xe Graphics (TGL GT2)"]


def test_a_paste_gives_the_prompts_to_the_job_log_and_the_output_to_nvidia_smi():
    paste = ("(container) $ nvidia-smi -L\n"
             "Failed to initialize NVML: Unknown Error\n"
             "(host) # nvidia-smi -L\n"
             "GPU 0: NVIDIA A10 (UUID: GPU-f15ae561-21b1-6003-c768-861fc285203b)\n")
    pieces = dict(detect(paste))
    assert "Failed to initialize NVML" in pieces["nvidia_smi"]
    assert "GPU 0: NVIDIA A10" in pieces["nvidia_smi"]
    log = parse_job_log(pieces["job_log"])
    assert not log.hits
    assert log.context.ran_in_container("nvidia-smi") and log.context.ran_on_host("nvidia-smi")


def test_env_lines_go_to_the_job_log_only_beside_a_job():
    alone = dict(detect("NVIDIA_VISIBLE_DEVICES=all\nNVIDIA_DRIVER_CAPABILITIES=utility\n"))
    assert "job_log" not in alone
    beside = dict(detect("NVIDIA_DRIVER_CAPABILITIES=utility\n"
                         "RuntimeError: Found no NVIDIA driver on your system.\n"))
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in beside["job_log"]


def test_the_corpus_container_prompts_reach_the_job_log(corpus):
    text = corpus.sample("nvml-unknown-after-daemon-reload").path.read_text()
    log = parse_job_log(dict(detect(text))["job_log"])
    assert log.context.in_container and log.context.gpus == "all"
    assert log.context.ran_in_container("nvidia-smi")


@pytest.mark.parametrize(("line", "command"), [
    ("$ docker run --rm ubuntu nvidia-smi", "nvidia-smi"),
    ("docker run --rm -e NVIDIA_VISIBLE_DEVICES=none --runtime=nvidia "
     "nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi -L", "nvidia-smi -L"),
    ("sudo podman run -it --device nvidia.com/gpu=all -v /data:/data img python train.py",
     "python train.py"),
])
def test_a_run_line_names_the_command_it_runs_in_the_container(line, command):
    ctx = read_context([line])
    assert ctx.container_commands == [command]
    assert ctx.ran_in_container(command.split()[0])


def test_a_launch_named_in_a_sentence_is_not_a_job_log():
    """A document that mentions `docker run` or `kubectl exec` in prose holds no job's
    output: nothing claims it (a typed command, or one beside a job's error, does)."""
    prose = ("What the text carries counts: a container's prompt, a `docker run` without\n"
             "`--gpus` or a `kubectl exec` before the error makes it the container's.\n")
    assert "job_log" not in dict(detect(prose))
    typed = "$ docker run --rm ubuntu nvidia-smi\nNo devices were found\n"
    assert "job_log" in dict(detect(typed))

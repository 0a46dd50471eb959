"""Container scenarios on the healthy HGX host: a job's output from inside a container
while the host's own stack works."""

from __future__ import annotations

from gputriage.scenarios.model import Host, Outcome, healthy_hgx_h100
from gputriage.scenarios.render_nccl import GPU_NAME

__all__ = ["container_nvml_unknown_error"]

_CONTAINER = "3f9c2a7b1d04"  # a container's host name: 12 hex digits, as Docker makes them


def _job_output(host: Host) -> str:
    """What the job printed: nvidia-smi worked when the container started, then, after a
    `systemctl daemon-reload` on the host, NVML lost its device access."""
    prompt = f"root@{_CONTAINER}:/workspace#"
    return (
        "$ docker run --gpus all --rm -it -e NVIDIA_DRIVER_CAPABILITIES=compute,utility "
        "nvcr.io/nvidia/pytorch:24.03-py3 bash\n"
        f"{prompt} nvidia-smi -L | head -1\n"
        f"GPU 0: {GPU_NAME} (UUID: {host.gpus[0].uuid})\n"
        f"{prompt} python train.py --resume\n"
        "[rank0] step 4100 loss 1.873\n"
        f"{prompt} nvidia-smi -L\n"
        "Failed to initialize NVML: Unknown Error\n")


def container_nvml_unknown_error() -> Host:
    """The healthy host; the job's container lost /dev/nvidia* after a daemon-reload."""
    host = healthy_hgx_h100()
    host.command_overrides["job_log"] = Outcome(_job_output(host), 0)
    return host

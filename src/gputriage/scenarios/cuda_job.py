"""Scenario ``cuda-driver-too-old``: a job built for CUDA 12.8 on a node whose driver
(535, CUDA 12.2) is older than that.

CUDA 12.8 starts on 535 under minor-version compatibility (12.x runs on any driver at
or above 525.60.13), so PyTorch loads and sees the GPUs; what compatibility does not
cover is JIT-compiling PTX newer than the driver. The job's own kernels (compiled at
run time to PTX by the 12.8 toolchain) fail with error 222. The node is healthy for
CUDA 12.2 jobs: the fix is the job's build, or a driver upgrade to 570 or later.
"""

from __future__ import annotations

from gputriage.scenarios.model import Host, Outcome, healthy_hgx_h100

OLD_DRIVER = "535.161.07"
OLD_CUDA = "12.2"

JOB_OUTPUT = """\
+ python -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())'
torch.__version__ = 2.7.0+cu128
torch.version.cuda = 12.8
torch.cuda.is_available() True
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/train.py", line 214, in <module>
[rank0]:     loss = model(batch)
[rank0]:   File "/usr/local/lib/python3.12/site-packages/triton/backends/nvidia/driver.py", \
line 71, in load_binary
[rank0]: RuntimeError: Triton Error [CUDA]: the provided PTX was compiled with an unsupported \
toolchain.
"""


def cuda_driver_too_old() -> Host:
    """The healthy node on driver 535.161.07 (CUDA 12.2) running a cu128 job."""
    host = healthy_hgx_h100()
    host.userspace_version = OLD_DRIVER
    host.kernel_module_version = OLD_DRIVER
    host.cuda_version = OLD_CUDA
    host.command_overrides["job_log"] = Outcome(JOB_OUTPUT, 0)
    return host

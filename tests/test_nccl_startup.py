"""What ``gputriage nccl FILE --json`` imports for a job's log alone: start-up is most of
a small log's time, and the judging imports run beside the workers that read a large
one. The rules of the NCCL areas name host facts (fabric, PCIe, systemd units, NVML,
kernel modules) in annotations only: with no host output among the inputs, none of
their parsers or fact areas is imported.

One child process runs the command on a generated job log and reports the package's
modules imported when the command ended.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nccl_kit import job_log

SRC = Path(__file__).resolve().parent.parent / "src"

_CHILD = """
import json, sys
from gputriage.cli import main

code = main(["nccl", sys.argv[1], "--json"])
sys.stderr.write(json.dumps({"code": code, "modules": sorted(
    m for m in sys.modules if m.startswith("gputriage."))}))
"""

# what only a host output feeds: its parsers and fact areas
HOST_ONLY = {"gputriage.facts.fabric", "gputriage.facts.pcie", "gputriage.facts.expectations",
             "gputriage.parsers.fabricmanager", "gputriage.parsers.lspci",
             "gputriage.parsers.nvlink", "gputriage.parsers.systemd", "gputriage.parsers.nvml",
             "gputriage.parsers.modules", "gputriage.parsers.nvsmi_xml"}


def test_a_job_log_alone_imports_no_host_output_parser(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(job_log())
    done = subprocess.run([sys.executable, "-c", _CHILD, str(log)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(SRC)}, timeout=60, check=False)
    found = json.loads(done.stderr.strip().splitlines()[-1])
    assert found["code"] in (0, 1, 2), found["code"]
    modules = set(found["modules"])
    assert "gputriage.rules.nccl_transport" in modules  # (the job's rules ran)
    assert not modules & HOST_ONLY, sorted(modules & HOST_ONLY)

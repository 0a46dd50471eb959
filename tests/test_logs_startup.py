"""What ``gputriage logs FILE --json`` imports: start-up is most of a small log's time,
and what is imported before the scan starts is in every worker process it forks.

One child process runs the command on an empty kernel log and reports the package's
modules imported when the scan began and when the command ended.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gputriage.facts.registry import AREAS as FACT_AREAS
from gputriage.rules import AREAS as RULE_AREAS
from gputriage.rules import LOG_AREAS

SRC = Path(__file__).resolve().parent.parent / "src"

_CHILD = """
import json, sys
from gputriage import logscan
from gputriage.cli import main

seen = {}
scan = logscan.scan_paths

def spy(*args, **kwargs):
    seen["at_scan"] = sorted(m for m in sys.modules if m.startswith("gputriage."))
    return scan(*args, **kwargs)

logscan.scan_paths = spy
code = main(["logs", sys.argv[1], "--json"])
seen["at_end"] = sorted(m for m in sys.modules if m.startswith("gputriage."))
seen["code"] = code
sys.stderr.write(json.dumps(seen))
"""

# the fact areas a kernel log's rules read (the host's identity asks for the names the
# Kubernetes and NCCL inputs give, which a log alone does not have)
LOG_FACT_AREAS = {"stack", "identity", "resets", "expectations", "k8s", "nccl"}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict:
    empty = tmp_path_factory.mktemp("startup") / "kern.log"
    empty.write_bytes(b"")
    done = subprocess.run([sys.executable, "-c", _CHILD, str(empty)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(SRC)}, timeout=60, check=False)
    found: dict = json.loads(done.stderr.strip().splitlines()[-1])
    assert found["code"] == 3, found  # an empty log: unknown
    return found


def _under(modules: list[str], package: str) -> set[str]:
    return {m.removeprefix(f"gputriage.{package}.") for m in modules
            if m.startswith(f"gputriage.{package}.")}


def test_only_the_fact_areas_a_kernel_log_needs_are_imported(imported):
    """The registry imports an area when one of its facts is asked for: an eager import
    of every area (or a log rule asking for another area's fact) fails here."""
    areas = _under(imported["at_end"], "facts") & set(FACT_AREAS)
    assert areas <= LOG_FACT_AREAS, sorted(areas - LOG_FACT_AREAS)
    assert "stack" in areas  # the log's own facts


def test_only_the_log_rules_are_imported(imported):
    areas = _under(imported["at_end"], "rules") & set(RULE_AREAS)
    assert areas == set(LOG_AREAS)


def test_no_parser_of_an_absent_source_and_no_next_step_without_a_finding(imported):
    parsers = _under(imported["at_end"], "parsers")
    absent = {"nccl_log", "nccl_build", "nccl_model", "lspci", "nvsmi_xml", "nvsmi_table",
              "nvsmi_csv", "k8s_model", "k8s_objects", "job_log", "dcgmi"}
    assert not parsers & absent, sorted(parsers & absent)
    assert not any(m.startswith("gputriage.next_steps") for m in imported["at_end"])


def test_the_scan_starts_before_the_engine_rules_and_views_are_imported(imported):
    early = [m for m in imported["at_scan"]
             if m.startswith(("gputriage.engine", "gputriage.rules", "gputriage.views",
                              "gputriage.facts.store", "gputriage.facts.registry",
                              "gputriage.next_steps", "gputriage.model"))]
    assert early == []

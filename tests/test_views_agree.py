"""The terminal report and the JSON document say the same of every scenario: the
verdict, the host line's facts, each GPU's row and state, the counts of current
findings, and `-q`'s line is the report's first."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from analysed import Analysed

from gputriage.cli import Environment, main
from gputriage.scenarios import list_scenarios

NAMES = [s.name for s in list_scenarios()]


@pytest.fixture(scope="module")
def built(analysed: Analysed) -> Path:
    return analysed.all_built()


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue()


@pytest.fixture(scope="module")
def report(analysed: Analysed) -> Callable[[str], tuple[int, str]]:
    """``analyze SCENARIO``'s exit status and report: run once a scenario, for all tests
    (tests/analysed.py)."""
    def of(name: str) -> tuple[int, str]:
        code, out, _ = analysed.cli("analyze", name)
        return code, out
    return of


def _row_word(gpu: dict) -> str:
    """The state word the GPU table must print for this JSON row."""
    if not gpu["visible"]:
        return "MISSING"
    if gpu["severity"] in ("warning", "critical"):
        return gpu["severity"].upper()
    return "UNKNOWN" if gpu.get("state") == "unknown" else "OK"


@pytest.mark.parametrize("name", NAMES)
def test_the_report_says_what_the_json_says(analysed: Analysed,
                                            report: Callable[[str], tuple[int, str]],
                                            name: str) -> None:
    code, text = report(name)
    json_code, doc_text, _ = analysed.cli("analyze", "--json", name)
    doc = json.loads(doc_text)
    lines = text.splitlines()
    assert code == json_code == doc["exit_status"]
    assert lines[0].split()[0] == doc["verdict"].upper()

    host = doc["host"]
    [host_line] = [line for line in lines if line.startswith("host ")]
    for value in (host["hostname"], host["kernel"], host["driver"]["kernel_module"]):
        if value:
            assert value in host_line, value
    if host["gpus_on_pci"] is not None:
        assert f"GPUs {host['gpus_on_pci']} on PCI" in host_line
    if host["gpus_visible"] is not None:
        assert f"/ {host['gpus_visible']} visible" in host_line

    gpu_lines = [line for line in lines if re.match(r"^GPU (\d+|\?) ", line)]
    assert len(gpu_lines) == len(doc["gpus"])
    for gpu in doc["gpus"]:
        [row] = [line for line in gpu_lines if gpu["pci_bus_id"] in line]
        assert row.split()[-1] == _row_word(gpu), (gpu["pci_bus_id"], row)
        if gpu["index"] is not None:
            assert row.startswith(f"GPU {gpu['index']} ")

    counts = dict((word, int(n)) for n, word in re.findall(
        r"(\d+) (critical|warning|info|ok)\b", lines[lines.index(host_line) + 1]))
    current = [f for f in doc["findings"] if f["status"] == "current"]
    for sev in ("critical", "warning", "info", "ok"):
        assert counts.get(sev, 0) == sum(_counted(f) == sev for f in current), sev


def _counted(finding: dict) -> str:
    """The severity a finding counts with: a job's fault is a warning at most (the
    scenarios do not set --job-faults-fail)."""
    if finding["blame"] in ("job", "job-config") and finding["severity"] == "critical":
        return "warning"
    return finding["severity"]


@pytest.mark.parametrize("name", NAMES)
def test_quiet_prints_the_reports_first_line(built: Path, report: Callable[[str], tuple[int, str]],
                                             name: str) -> None:
    code, text = report(name)
    quiet_code, quiet = _run("analyze", "-q", str(built / name))
    assert quiet_code == code
    assert quiet == text.splitlines()[0] + "\n"

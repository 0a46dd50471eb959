"""DCGM's own false alarms (``knowledge/dcgm_false_alarms.csv``, rules/dcgm_diag_bugs.py):
a dcgmi diag failure of the shape of a bug DCGM fixed later is DCGM's on a release that
has it (config, upgrade DCGM, never a drain), the GPU's on a release without it, and keeps
its verdict with a note where no release is shown. Synthetic variants of the documented
bugs: the releases in and out of each range, the version from the diag's header or from
dcgmi --version."""

from __future__ import annotations

import pytest
from hostkit import run

from gputriage.knowledge.dcgm_false_alarms import false_alarms, matching
from gputriage.model import Action, Blame, Severity


def _row(name: str, value: str) -> str:
    return f"| {name:<25} | {value:<45}  |"


RULE = "+---------------------------+------------------------------------------------+"
HW = "+-----  Hardware  ----------+------------------------------------------------+"
INTEGRATION = "+-----  Integration  -------+------------------------------------------------+"


def _diag(version: str | None, *rows: str) -> str:
    meta = ([_row("DCGM Version", version)] if version else [])
    head = (["|-----  Metadata  ----------+------------------------------------------------|",
             *meta] if meta else [])
    return "\n".join(["Successfully ran diagnostic for group.", RULE,
                      _row("Diagnostic", "Result"), RULE.replace("-", "="), *head, *rows,
                      RULE]) + "\n"


def _thermal(version: str | None) -> str:
    return _diag(version, HW, _row("GPU Memory", "Pass - GPUs: 1"), _row("", "Fail - GPU: 0"),
                 _row("Warning", "GPU 0 Thermal violations totaling 13.3 second"),
                 _row("", "s started at 9.7 seconds into the test for GP"), _row("", "U 0"))


def _nvlink(version: str | None) -> str:
    return _diag(version, INTEGRATION, _row("PCIe", "Fail - All"),
                 _row("Warning", "GPU 0 GPU 0's NvLink link 1 is currently down"),
                 _row("", " Run a field diagnostic on the GPU."))


def test_rows_name_their_source_and_fixed_release() -> None:
    rows = false_alarms()
    assert {r.id for r in rows} >= {"profiling-brand-name", "inactive-nvlinks",
                                    "nvbandwidth-level4", "thermal-3x",
                                    "pending-page-retirement-health"}
    for r in rows:
        assert r.fixed_in and len(r.source.split()) >= 3 and r.input in (
            "diag", "health", "profiling")
        assert r.affects(r.fixed_in) is False and r.affects(None) is None


@pytest.mark.parametrize(("version", "affected"), [
    ("3.0.4", True), ("3.3.9", True), ("4.2.3", False), ("4.3.1", False), ("4.5.2", False),
    ("2.4.7", False)])
def test_thermal_range(version: str, affected: bool) -> None:
    (alarm,) = [a for a in false_alarms() if a.id == "thermal-3x"]
    assert alarm.affects(version) is affected


def test_a_thermal_failure_of_dcgm_3x_is_dcgms_own() -> None:
    (f,) = run(dcgmi_diag=_thermal("3.3.9")).findings
    assert (f.id, f.blame, f.action, f.severity) == (
        "dcgm.known-false-alarm", Blame.CONFIG, Action.FIX_SOFTWARE, Severity.WARNING)
    assert "4.3.1" in f.title and "GPU 0" in f.title
    assert "cluster-health-scanner#78" in " ".join(f.references)


def test_the_same_failure_on_a_fixed_release_is_the_gpus() -> None:
    (f,) = run(dcgmi_diag=_thermal("4.3.1")).findings
    assert (f.id, f.severity, f.blame) == ("dcgm.test-failed", Severity.CRITICAL, Blame.NODE)
    assert "reports this falsely" not in f.explanation


def test_without_a_release_the_verdict_stands_with_a_note() -> None:
    (f,) = run(dcgmi_diag=_thermal(None)).findings
    assert (f.id, f.severity) == ("dcgm.test-failed", Severity.CRITICAL)
    assert "DCGM 3.0 up to 4.0 reports this falsely" in f.explanation
    assert "dcgmi --version" in f.explanation


def test_dcgmi_version_gives_the_release_when_the_diag_does_not() -> None:
    result = run(dcgmi_diag=_thermal(None), dcgmi_version="dcgmi  version: 3.1.7\n")
    (f,) = [x for x in result.findings if x.id.startswith("dcgm.") and "diag" in x.title]
    assert (f.id, f.blame) == ("dcgm.known-false-alarm", Blame.CONFIG)
    assert "dcgmi_version" in {e.source for e in f.evidence}


def test_inactive_nvlinks_before_3_1_6() -> None:
    (f,) = run(dcgmi_diag=_nvlink("3.0.4")).findings
    assert (f.id, f.action) == ("dcgm.known-false-alarm", Action.FIX_SOFTWARE)
    assert "3.1.6" in f.title
    later = run(dcgmi_diag=_nvlink("3.3.9")).findings
    assert [x.id for x in later] != ["dcgm.known-false-alarm"]


def test_a_thermal_warning_beside_a_real_error_is_not_the_bug() -> None:
    text = _diag("3.3.9", HW, _row("GPU Memory", "Pass - GPUs: 1"), _row("", "Fail - GPU: 0"),
                 _row("Warning", "GPU 0 Thermal violations totaling 13.3 second"),
                 _row("", "s started at 9.7 seconds into the test for GP"), _row("", "U 0"),
                 _row("Error", "GPU 0 had uncorrectable memory errors and 2 ro"),
                 _row("", "ws were remapped"))
    (f,) = run(dcgmi_diag=text).findings
    assert (f.id, f.severity) == ("dcgm.test-failed", Severity.CRITICAL)


def test_nvbandwidth_at_level_4_only() -> None:
    said = ["NVBandwidth failed: memory copy utilization too low on GPU 0"]
    assert matching("diag", "nvbandwidth", said, 4) is not None
    assert matching("diag", "nvbandwidth", said, 3) is None
    assert matching("diag", "memory", said, 4) is None
    (alarm,) = [a for a in false_alarms() if a.id == "nvbandwidth-level4"]
    assert alarm.affects("4.4.2") and not alarm.affects("4.5.1")

"""Views: terminal report, JSON result (gputriage/result/v1) and exit status."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from gputriage.model import (
    NODE,
    Action,
    Blame,
    DriverVersions,
    Evidence,
    Finding,
    GpuRow,
    HealthyChange,
    HostSummary,
    Result,
    Scope,
    Severity,
    Skipped,
)
from gputriage.results import document as jsonview
from gputriage.results.document import SCHEMA, TOP_LEVEL_KEYS, dumps, to_json
from gputriage.status import ExitStatus, exit_status, verdict
from gputriage.views.terminal import EVIDENCE_CAP, render_terminal

REPO = Path(__file__).resolve().parent.parent

XID_LINE = "[ 1234.5678] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
MARKUP_LINE = "[bold red]not markup[/] [link=x]y[/link] :smile:"
UTF_LINE = "température élevée → 95 °C · ГПУ 温度"


def _gpu_scope(index: int, bus: str) -> Scope:
    return Scope(kind="gpu", gpu_index=index, pci_bus_id=bus, uuid=f"GPU-{index:08d}-aaaa")


def _finding(fid: str, sev: Severity, title: str, scope: Scope = NODE,
             lines: tuple[str, ...] = (), source: str = "kmsg") -> Finding:
    return Finding(
        id=fid, severity=sev, title=title,
        explanation=f"Why {title} matters.",
        action=(Action.DRAIN_AND_REPAIR if sev is Severity.CRITICAL
                else Action.NONE if sev is Severity.OK else Action.FIX_CONFIG),
        blame=Blame.NODE if sev is Severity.CRITICAL else Blame.CONFIG,
        scope=scope,
        evidence=(Evidence(source=source, lines=lines, note="tail of log"),) if lines else (),
        references=("https://docs.nvidia.com/deploy/xid-errors/",),
    )


def _result(**overrides) -> Result:
    long_lines = tuple(f"line {i:02d} [x]" for i in range(20))
    findings = [
        _finding("info-driver", Severity.INFO, "Driver branch is production", NODE),
        _finding("ok-ecc", Severity.OK, "ECC enabled on all GPUs", NODE),
        _finding("warn-persistence", Severity.WARNING, "Persistence mode off",
                 _gpu_scope(1, "0000:2a:00.0"), ("Persistence Mode : Disabled",),
                 source="nvidia-smi-q"),
        _finding("xid-79", Severity.CRITICAL, "GPU fell off the bus",
                 _gpu_scope(3, "0000:3b:00.0"), (XID_LINE, MARKUP_LINE, UTF_LINE)),
        _finding("warn-long", Severity.WARNING, "Many retired pages", NODE, long_lines,
                 source="retired-pages"),
        _finding("crit-fm", Severity.CRITICAL, "Fabric manager down",
                 Scope(kind="unit", name="nvidia-fabricmanager.service"),
                 ("fabricmanager: [ERROR] NVSwitch fatal",), source="journal"),
        _finding("info-mig", Severity.INFO, "MIG disabled", _gpu_scope(0, "0000:18:00.0")),
    ]
    gpus = [
        GpuRow(i, bus, "NVIDIA H100 80GB HBM3", f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd",
               visible=i != 2, persistence_mode=i != 1)
        for i, bus in enumerate(["0000:18:00.0", "0000:2a:00.0", "0000:34:00.0",
                                 "0000:3b:00.0"])
    ]
    base = dict(
        findings=findings,
        skipped=[Skipped("ib-link-down", "no ibstat input"),
                 Skipped("nccl-timeouts", "no NCCL log")],
        host=HostSummary(hostname="gpu-node-017", kernel="5.15.0-105-generic",
                         os="Ubuntu 22.04.4 LTS",
                         driver=DriverVersions("550.54.15", "550.54.15", "12.4"),
                         gpus_on_pci=4, gpus_visible=3, boot_id="b00t", verdict="critical"),
        gpus=gpus,
        inputs=[{"origin": "snapshot.tar.gz", "sources": ["kmsg", "nvidia-smi-q"]}],
        manifest={"schema": "gputriage/snapshot/v1", "host": "gpu-node-017",
                  "sources": {"kmsg": {"rc": 0, "truncated": False}}},
        unreadable=["dmesg.txt: permission denied [root only]"],
    )
    base.update(overrides)
    return Result(**base)


def _render(result: Result, *, verbose: bool = False, width: int = 120) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    render_terminal(result, console, verbose=verbose)
    return buf.getvalue()


# -- terminal ---------------------------------------------------------------------

def test_header_has_host_kernel_driver_counts_and_verdict() -> None:
    lines = _render(_result()).splitlines()
    assert lines[0].startswith("CRITICAL gpu-node-017: ")  # the verdict, the causes, the host
    at = next(i for i, line in enumerate(lines) if line.startswith("host      "))
    assert at > lines.index("")
    for part in ("gpu-node-017", "kernel 5.15.0-105-generic",
                 "driver 550.54.15 / CUDA 12.4", "GPUs 4 on PCI / 3 visible"):
        assert part in lines[at]
    assert len(lines[at]) <= 120
    assert "2 critical · 2 warning · 2 info · 1 ok" in lines[at + 1]


def test_header_driver_mismatch_shows_both() -> None:
    res = Result(host=HostSummary(hostname="n1",
                                  driver=DriverVersions("550.54.15", "535.161.08")))
    host = next(line for line in _render(res).splitlines() if line.startswith("host "))
    assert "driver 550.54.15 module / 535.161.08 userspace / CUDA ?" in host


def test_findings_worst_first() -> None:
    out = _render(_result())
    pos = {t: out.index(t) for t in ("GPU fell off the bus", "Fabric manager down",
                                     "Persistence mode off", "Many retired pages",
                                     "Driver branch is production", "ECC enabled")}
    crit = max(pos["GPU fell off the bus"], pos["Fabric manager down"])
    warn = (pos["Persistence mode off"], pos["Many retired pages"])
    assert crit < min(warn)
    assert max(warn) < pos["Driver branch is production"] < pos["ECC enabled"]


def test_finding_detail_lines() -> None:
    out = _render(_result())
    assert "blame: node · action: drain-and-repair" in out
    assert "Why GPU fell off the bus matters." in out
    assert "source: kmsg · tail of log" in out
    assert "[GPU 3 0000:3b:00.0]" in out
    assert "[unit nvidia-fabricmanager.service]" in out
    # OK/INFO findings are compact: no explanation outside verbose mode.
    assert "Why MIG disabled matters." not in out
    assert "Why MIG disabled matters." in _render(_result(), verbose=True)


def test_evidence_brackets_markup_and_unicode_survive() -> None:
    out = _render(_result())
    assert XID_LINE in out
    assert MARKUP_LINE in out
    assert UTF_LINE in out
    assert "fabricmanager: [ERROR] NVSwitch fatal" in out


def test_evidence_capped_unless_verbose() -> None:
    out = _render(_result())
    assert f"line {EVIDENCE_CAP - 1:02d} [x]" in out
    assert f"line {EVIDENCE_CAP:02d} [x]" not in out
    assert f"(+{20 - EVIDENCE_CAP} more lines)" in out
    verbose = _render(_result(), verbose=True)
    assert "line 19 [x]" in verbose and "more lines" not in verbose


def test_gpu_lines() -> None:
    lines = _render(_result()).splitlines()

    def gpu_line(index: int) -> str:
        hits = [ln for ln in lines if ln.strip().startswith(f"GPU {index} ")]
        assert len(hits) == 1, hits
        return hits[0]

    assert "0000:18:00.0" in gpu_line(0) and "NVIDIA H100 80GB HBM3" in gpu_line(0)
    assert "GPU-00000000" in gpu_line(0) and "dddd" not in gpu_line(0)
    assert gpu_line(0).rstrip().endswith("OK")  # INFO finding does not degrade a GPU
    assert "persistence off" in gpu_line(1) and gpu_line(1).rstrip().endswith("WARNING")
    assert gpu_line(2).rstrip().endswith("MISSING")
    assert gpu_line(3).rstrip().endswith("CRITICAL")


def test_gpu_matched_by_uuid_or_bus_when_index_differs() -> None:
    scope = Scope(kind="gpu", pci_bus_id="00000000:18:00.0")
    res = Result(findings=[_finding("x", Severity.CRITICAL, "bad", scope)],
                 gpus=[GpuRow(7, "0000:18:00.0")])
    line = [ln for ln in _render(res).splitlines() if ln.startswith("GPU 7")][0]
    assert line.rstrip().endswith("CRITICAL")


def test_skipped_and_unreadable() -> None:
    out = _render(_result())
    assert "2 rules skipped (missing inputs)" in out
    assert "ib-link-down" not in out
    assert "dmesg.txt: permission denied [root only]" in out
    verbose = _render(_result(), verbose=True)
    assert "ib-link-down: no ibstat input" in verbose
    assert "kmsg, nvidia-smi-q" in verbose


def test_sparse_result_renders() -> None:
    out = _render(Result())
    assert "the node these outputs came from" in out and "OK" in out and "No findings." in out
    odd = Result(host=HostSummary(hostname="[b]x[/b]", driver=DriverVersions("550", "550"),
                                  verdict="unknown"),
                 gpus=[GpuRow(None, None), GpuRow(None, None, visible=False, listed=False)])
    out = _render(odd)
    assert "[b]x[/b]" in out and "UNKNOWN" in out and "driver 550" in out


def test_control_characters_and_ascii_console() -> None:
    res = Result(findings=[_finding("c", Severity.WARNING, "ctl", NODE,
                                    ("\x1b[31mred\x1b[0m\x00", UTF_LINE))])
    out = _render(res)
    assert "\x1b" not in out and "\\x1b[31mred" in out
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="strict")
    render_terminal(res, Console(file=stream, width=100, color_system=None))
    stream.flush()
    assert b"ctl" in raw.getvalue()


def test_default_console_honours_no_color(monkeypatch, capsys) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("FORCE_COLOR", "")
    render_terminal(_result())
    out = capsys.readouterr().out
    assert "\x1b[" not in out and "GPU fell off the bus" in out


def test_colour_console_does_not_crash() -> None:
    buf = io.StringIO()
    render_terminal(_result(), Console(file=buf, width=80, force_terminal=True,
                                       color_system="truecolor"), verbose=True)
    assert "\x1b[" in buf.getvalue() and "NVRM: Xid (PCI:0000:3b:00)" in buf.getvalue()


def test_import_terminal_does_not_import_rich() -> None:
    code = ("import sys, gputriage.views.terminal, gputriage.results.document, "
            "gputriage.status; print('rich' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "False"


# -- JSON -------------------------------------------------------------------------

def test_json_round_trip_and_top_level_keys() -> None:
    when = datetime(2024, 5, 1, 3, 0, tzinfo=timezone.utc)
    text = dumps(_result(), generated=when)
    doc = json.loads(text)
    assert list(doc) == list(TOP_LEVEL_KEYS)
    assert doc["schema"] == SCHEMA == "gputriage/result/v1"
    assert doc["generated"] == "2024-05-01T03:00:00+00:00"
    assert doc["verdict"] == "critical" and doc["exit_status"] == 2
    assert doc["tool_version"]
    assert [f["severity"] for f in doc["findings"]] == (
        ["critical"] * 2 + ["warning"] * 2 + ["info"] * 2 + ["ok"])
    xid = next(f for f in doc["findings"] if f["id"] == "xid-79")
    assert xid["evidence"][0]["lines"] == [XID_LINE, MARKUP_LINE, UTF_LINE]
    assert xid["scope"] == {"kind": "gpu", "gpu_index": 3, "uuid": "GPU-00000003-aaaa",
                            "pci_bus_id": "0000:3b:00.0"}
    assert doc["skipped"][0] == {"rule": "ib-link-down", "reason": "no ibstat input"}
    assert doc["host"]["driver"]["cuda"] == "12.4"
    assert doc["gpus"][2]["visible"] is False
    assert doc["manifest"]["schema"] == "gputriage/snapshot/v1"
    assert doc["unreadable"] == ["dmesg.txt: permission denied [root only]"]
    assert UTF_LINE in text  # readable UTF-8, not \\u escapes
    assert dumps(_result(), generated=when) == text  # deterministic


def test_json_every_top_level_key_documented() -> None:
    doc = (REPO / "docs" / "json-schema.md").read_text(encoding="utf-8")
    for key in TOP_LEVEL_KEYS:
        assert f"`{key}`" in doc, key
    for key in ("id", "severity", "title", "explanation", "action", "blame", "scope",
                "evidence", "references", "gpu_index", "pci_bus_id", "source", "lines",
                "note", "rule", "reason", "origin", "sources"):
        assert f"`{key}`" in doc, key


def test_json_empty_result_and_odd_values() -> None:
    doc = to_json(Result())
    assert doc["verdict"] == "ok" and doc["exit_status"] == 0 and doc["manifest"] is None
    assert doc["generated"].endswith("+00:00")
    odd = {"temp": float("nan"), "sev": Severity.WARNING, "tags": {"b", "a"},
           1: (1, 2), "path": Path("x") / "y", "raw": b"\xff"}
    assert jsonview.plain(odd) == {"temp": None, "sev": "warning", "tags": ["a", "b"], "1": [1, 2],
                    "path": str(Path("x") / "y"), "raw": "\ufffd"}


def test_json_host_and_gpu_rows_keep_the_documented_keys_and_order() -> None:
    host = HostSummary(hostname="n", driver=DriverVersions(cuda="12.4"), rules_run=3,
                       verdict="ok", changed_since_healthy=HealthyChange("t", ("a: 1 -> 2",)))
    assert list(host.to_json()) == [
        "hostname", "kernel", "os", "boot_id", "driver", "gpus_on_pci", "gpus_visible",
        "rules_run", "boot_time", "container_toolkit", "verdict", "changed_since_healthy"]
    assert host.to_json()["driver"] == {"kernel_module": None, "userspace": None,
                                        "cuda": "12.4"}
    assert host.to_json()["changed_since_healthy"] == {"when": "t", "changes": ["a: 1 -> 2"]}
    assert "changed_since_healthy" not in HostSummary().to_json()
    listed = GpuRow(0, "0000:18:00.0", "H100", "GPU-1", persistence_mode=None, vbios="96",
                    severity=Severity.WARNING)
    assert listed.to_json() == {"index": 0, "pci_bus_id": "0000:18:00.0", "name": "H100",
                                "uuid": "GPU-1", "persistence_mode": None, "visible": True,
                                "vbios": "96", "severity": "warning"}
    only_pci = GpuRow(None, "0000:9a:00.0", visible=False, listed=False)
    assert list(only_pci.to_json()) == ["index", "pci_bus_id", "name", "uuid", "visible",
                                        "severity"]


def test_naive_generated_time_is_utc() -> None:
    doc = jsonview.to_json(Result(), generated=datetime(2024, 1, 2, 3, 4, 5))
    assert doc["generated"] == "2024-01-02T03:04:05+00:00"


# -- exit status ----------------------------------------------------------------

@pytest.mark.parametrize(("severity", "expected"), [
    (Severity.OK, ExitStatus.OK),
    (Severity.INFO, ExitStatus.OK),
    (Severity.WARNING, ExitStatus.WARNING),
    (Severity.CRITICAL, ExitStatus.CRITICAL),
])
def test_exit_status_by_worst_severity(severity: Severity, expected: ExitStatus) -> None:
    res = Result(findings=[_finding("a", Severity.OK, "fine"), _finding("b", severity, "x")])
    assert exit_status(res) is expected
    assert to_json(res)["exit_status"] == int(expected)


def test_exit_status_unknown_and_codes() -> None:
    res = Result(findings=[_finding("b", Severity.CRITICAL, "x")],
                 host=HostSummary(verdict="unknown"))
    assert exit_status(res) is ExitStatus.UNKNOWN and verdict(res) == "unknown"
    assert exit_status(Result()) is ExitStatus.OK
    assert [int(s) for s in ExitStatus] == [0, 1, 2, 3, 64, 66, 70]


# -- robustness -----------------------------------------------------------------

_text = st.text(max_size=40)


_maybe = st.one_of(_text, st.none())
_hosts = st.builds(HostSummary, hostname=_maybe, kernel=_maybe, os=_maybe,
                   driver=st.builds(DriverVersions, _maybe, _maybe, _maybe),
                   gpus_on_pci=st.one_of(st.integers(), st.none()),
                   verdict=st.one_of(st.sampled_from(["ok", "critical", "unknown"]), _maybe))


@settings(max_examples=60, deadline=None)
@given(title=_text, lines=st.lists(_text, max_size=12), host=_hosts,
       sev=st.sampled_from(list(Severity)))
def test_views_never_crash_on_arbitrary_text(title: str, lines: list[str], host: HostSummary,
                                             sev: Severity) -> None:
    res = Result(findings=[_finding(title or "t", sev, title, NODE, tuple(lines),
                                    source=title)],
                 host=host, gpus=[GpuRow(0, title, title, title)],
                 unreadable=[title])
    out = _render(res, verbose=True)
    for line in lines:
        for part in line.splitlines():
            if part.strip() and part.isascii() and part.isprintable():
                assert part.strip() in out
    assert json.loads(dumps(res))["findings"][0]["title"] == title

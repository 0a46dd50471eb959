"""``gputriage logs`` and ``gputriage xid``, and the window options of ``analyze``."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from rich.console import Console

from gputriage.cli import EXIT_INPUT, EXIT_USAGE, Environment, main
from gputriage.logscan.events import DriverEvent
from gputriage.model import (
    Action,
    Blame,
    Finding,
    HostSummary,
    Occurrences,
    Result,
    Scope,
    Severity,
)
from gputriage.views.terminal import render_terminal
from gputriage.views.timeline import build_timeline

XID79 = ("[ 4254.197860] NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, "
         "GPU has fallen off the bus.\n")
XID31 = ("[ 5100.000001] NVRM: Xid (PCI:0000:18:00): 31, pid=4411, name=python, Ch 00000008, "
         "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_3 faulted @ "
         "0x7e9f_4f200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n")
BOOTS = """-- Boot 1b0e8c2f3a4d4e5f8a9b0c1d2e3f4a5b --
2024-05-13T22:10:01+0000 node kernel: Linux version 5.15.0-105-generic
2024-05-13T23:41:17+0000 node kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
-- Boot 7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f --
2024-05-14T06:02:11+0000 node kernel: Linux version 5.15.0-105-generic
2024-05-14T06:02:40+0000 node kernel: nvidia-uvm: Loaded the UVM driver, major device number 508.
"""  # noqa: E501


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def log(tmp_path):
    def write(text: str, name: str = "kern.log") -> str:
        path = tmp_path / name
        if name.endswith(".gz"):
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
        return str(path)
    return write


def test_logs_prints_the_timeline_and_the_findings(log):
    code, out, err = cli("logs", log(XID79 + XID31 + XID31))
    assert code == 2, err
    assert "GPU 0000:5d:00.0" in out and "GPU 0000:18:00.0" in out
    assert "Xid 79" in out and "fallen off the bus" in out
    assert "x2" in out  # the burst of two Xid 31 folds into one row
    assert "read 3 lines" in out
    assert out.index("Xid 79  ") < out.index("CRITICAL  Xid 79 on")  # timeline, then findings


def test_logs_json_document(log):
    code, out, _ = cli("logs", "--json", log(XID79 + XID31))
    doc = json.loads(out)
    assert code == 2 and doc["schema"] == "gputriage/logs/v1"
    assert doc["verdict"] == "critical" and doc["exit_status"] == 2
    assert doc["scan"]["lines"] == 2 and doc["scan"]["formats"]
    lanes = {lane["pci_bus_id"]: lane for lane in doc["timeline"]}
    assert lanes["0000:5d:00.0"]["events"][0]["code"] == 79
    f = next(f for f in doc["findings"] if f["id"] == "xid.79")
    assert f["occurrences"]["count"] == 1 and f["occurrences"]["current_boot"] is True
    assert doc["window"] == {"boot": None, "since": None}


def test_logs_several_files_and_gzip_make_one_timeline(log):
    code, out, _ = cli("logs", "--json", log(XID31, "a.log"), log(XID79, "b.log.gz"))
    doc = json.loads(out)
    assert code == 2
    assert {lane["pci_bus_id"] for lane in doc["timeline"]} == {"0000:5d:00.0", "0000:18:00.0"}


def test_logs_earlier_boot_is_history(log):
    path = log(BOOTS)
    code, out, _ = cli("logs", path)
    assert code == 0
    assert "earlier boot" in out
    code, out, _ = cli("logs", "--json", "--boot", "0", path)
    assert code == 0 and json.loads(out)["findings"] == []
    code, out, _ = cli("logs", "--json", "--boot", "-1", path)
    doc = json.loads(out)
    assert code == 0 and [f["id"] for f in doc["findings"]] == ["xid.79"]
    assert doc["findings"][0]["occurrences"]["current_boot"] is False
    assert doc["window"]["boot"] == -1


def test_logs_since_window(log):
    path = log(BOOTS)
    code, out, _ = cli("logs", "--json", "--since", "2024-05-14T00:00:00Z", path)
    assert code == 0 and json.loads(out)["findings"] == []
    assert json.loads(out)["window"]["since"].startswith("2024-05-14T00:00:00")


@pytest.mark.parametrize("args", [["--since", "soonish"], ["--boot", "3"], ["--boot", "x"]])
def test_logs_bad_window_is_a_usage_error(log, args):
    code, _, err = cli("logs", *args, log(XID79))
    assert code == EXIT_USAGE and "usage error" in err


def test_logs_missing_file_is_an_input_error(tmp_path):
    code, out, err = cli("logs", str(tmp_path / "nope.log"))
    assert code == EXIT_INPUT and "nope.log" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_logs_binary_input_never_tracebacks(tmp_path):
    path = tmp_path / "garbage.bin"
    path.write_bytes(bytes(range(256)) * 64 + b"\n" + XID79.encode())
    code, out, err = cli("logs", str(path))
    assert code in (0, 2, 3, EXIT_INPUT), err
    assert "Traceback" not in out + err and "internal error" not in err


def test_analyze_accepts_the_window_options(log):
    path = log(BOOTS)
    code, out, _ = cli("analyze", "--json", "--boot", "-1", path)
    doc = json.loads(out)
    assert code == 0
    assert [f["id"] for f in doc["findings"] if f["id"].startswith("xid.")] == ["xid.79"]
    code, _, err = cli("analyze", "--since", "whenever", path)
    assert code == EXIT_USAGE


def test_xid_explains_codes():
    code, out, _ = cli("xid", "79", "45")
    assert code == 0
    assert "Xid 79" in out and "fallen off the bus" in out and "Xid 45" in out


def test_xid_unknown_code_says_so_and_exits_0():
    code, out, _ = cli("xid", "99999")
    assert code == 0 and "not in the catalog" in out


def test_xid_json_and_sxid():
    code, out, _ = cli("xid", "--json", "48", "123456")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "gputriage/xid/v1" and doc["catalog"] == "xid"
    assert [e["known"] for e in doc["entries"]] == [True, False]
    code, out, _ = cli("xid", "--sxid", "--json", "20034")
    assert code == 0 and json.loads(out)["entries"][0]["kind"] == "sxid"


def test_xid_rejects_non_numbers():
    code, _, err = cli("xid", "seventy-nine")
    assert code == EXIT_USAGE and "not an Xid code" in err
    assert cli("xid", "Xid79")[0] == 0


def test_terminal_shows_occurrences_under_the_title():
    f = Finding("xid.31", Severity.WARNING, "Xid 31 on GPU 0: fault (3 events)", "why",
                Action.RESTART_JOB, Blame.JOB, Scope(kind="gpu", gpu_index=0),
                occurrences=Occurrences(3, "2024-05-14T08:00:00+00:00",
                                        "2024-05-14T08:05:00+00:00"))
    old = Finding("xid.79", Severity.INFO, "earlier boot: Xid 79", "history", Action.NONE,
                  Blame.NODE, occurrences=Occurrences(1, "x", "x", current_boot=False))
    buf = io.StringIO()
    render_terminal(Result(findings=[f, old], host=HostSummary(verdict="warning")),
                    Console(file=buf, width=120, color_system=None), verbose=True)
    text = buf.getvalue()
    assert "3 events" in text and "first 2024-05-14T08:00:00+00:00" in text
    assert "last 2024-05-14T08:05:00+00:00" in text
    assert "earlier boot (history, not a current failure)" in text


def test_timeline_folds_bursts_and_orders_gpus():
    def ev(code: int, bus: str, boot: int = 0) -> DriverEvent:
        return DriverEvent("xid", f"NVRM: Xid (PCI:{bus[:-2]}): {code}, x", bus, None,
                           {"code": str(code)}, boot=boot)
    lanes = build_timeline([ev(31, "0000:9a:00.0"), ev(31, "0000:9a:00.0"),
                            ev(79, "0000:18:00.0", boot=-1), ev(31, "0000:9a:00.0")],
                           {"0000:9a:00.0": (4, None), "0000:18:00.0": (0, None)})
    assert [lane.gpu_index for lane in lanes] == [0, 4]
    assert [(r.code, r.count) for r in lanes[1].rows] == [(31, 3)]
    assert lanes[0].rows[0].boot == -1 and lanes[0].label == "GPU 0 0000:18:00.0"


def test_logs_refuses_binary_input_and_skips_it_beside_a_log(log, tmp_path):
    junk = tmp_path / "core.bin"
    junk.write_bytes(bytes(range(256)) * 64)
    code, _, err = cli("logs", str(junk))
    assert code == EXIT_INPUT and "binary data" in err and err.count("\n") == 1
    code, out, _ = cli("logs", "--json", str(junk), log(XID79))
    doc = json.loads(out)
    assert code == 2
    assert any("binary data" in p for p in doc["scan"]["problems"])


def _log_only_result(text: str):
    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.store import Facts
    from gputriage.logscan import scan_text
    from gputriage.snapshot.bundle import Snapshot

    facts = Facts(Snapshot({}, None, "logs"))
    facts.prefill("log_scan", scan_text(text, "test"))
    return analyze_facts(facts)


def test_log_areas_hold_every_rule_a_kernel_log_can_feed(corpus):
    """``logs`` runs only the LOG_AREAS rules: every other rule must be skipped when a
    kernel log is all there is (else ``logs`` would miss its findings)."""
    from gputriage.rules import LOG_AREAS

    texts = [XID79, XID31, BOOTS] + [s.text() for s in corpus.category("4")]
    log_modules = {f"gputriage.rules.{a}" for a in LOG_AREAS}
    fed = set()
    for text in texts:
        result = _log_only_result(text)
        skipped = {s.rule for s in result.skipped}
        from gputriage.rules import all_rules

        for r in all_rules():
            if r.id not in skipped:
                fed.add(r.func.__module__)
    assert fed <= log_modules, fed - log_modules
    assert fed == log_modules  # each log area has a rule the log feeds


def test_logs_runs_the_log_rules_and_finds_what_analyze_finds(log):
    path = log(XID79 + XID31)
    code, out, _ = cli("logs", path, "--json")
    doc = json.loads(out)
    code2, out2, _ = cli("analyze", path, "--json")
    logs_ids = {f["id"] for f in doc["findings"]}
    analyze_ids = {f["id"] for f in json.loads(out2)["findings"]}
    assert logs_ids == analyze_ids and "xid.79" in logs_ids
    assert code == code2 == 2


def test_json_is_indented_for_a_terminal_and_compact_when_piped(log):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    path = log(XID79)
    piped, tty = io.StringIO(), Tty()
    assert main(["logs", path, "--json"], Environment(stdout=piped, stderr=io.StringIO())) == 2
    assert main(["logs", path, "--json"], Environment(stdout=tty, stderr=io.StringIO())) == 2
    assert piped.getvalue().count("\n") == 1 and '\n  "' in tty.getvalue()
    assert json.loads(piped.getvalue()) == json.loads(tty.getvalue())


def test_logs_full_lists_every_event_kept_and_json_says_so(log):
    path = log(XID79 + XID31 * 3)
    _, out, _ = cli("logs", "--json", path)
    doc = json.loads(out)
    lanes = {lane["pci_bus_id"]: lane for lane in doc["timeline"]}
    assert [r["count"] for r in lanes["0000:18:00.0"]["events"]] == [3]  # one burst
    # the Xid 79 line is two events (the Xid, the GPU fallen off the bus) and one burst:
    # the timeline shows the line once
    assert doc["totals"] == {"events": 4, "bursts": 2, "bursts_left_out": 0,
                             "events_left_out": 0, "full": False}
    assert doc["scan"]["events"] == doc["scan"]["kept"] == 5
    _, out, _ = cli("logs", "--json", "--full", path)
    doc = json.loads(out)
    lanes = {lane["pci_bus_id"]: lane for lane in doc["timeline"]}
    assert [r["count"] for r in lanes["0000:18:00.0"]["events"]] == [1, 1, 1]
    assert doc["totals"]["full"] is True and doc["totals"]["bursts"] == 5
    code, out, _ = cli("logs", "--full", path)
    assert code == 2 and "x3" not in out.split("CRITICAL  Xid 79 on")[0]


def test_logs_help_says_what_full_lists(capsys):
    from gputriage.parsers.kernel_fold import KEEP

    assert cli("logs", "--help")[0] == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"the first {KEEP} of each kind, code and device, then one line per folded run" \
        in text

"""Say what was not read (issue 12, items 5 and 6): large kernel logs read whole by the
streaming scanner, window options that count what they exclude, a boot that does not
exist, fleet duplicates in the terminal view, and inputs that are not kernel logs."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gputriage.cli import EXIT_INPUT, EXIT_USAGE, Environment, main
from gputriage.engine.analysis import analyze
from gputriage.ingest import load_inputs, streamed
from gputriage.ingest.detect import detect
from gputriage.logscan import scan_text
from gputriage.parsers.kernel_log import shape_refusal

REPO = Path(__file__).resolve().parent.parent
KERNEL_CATEGORIES = ("4-kernel-xid",)

BOOTS = """-- Boot 1b0e8c2f3a4d4e5f8a9b0c1d2e3f4a5b --
2024-05-13T22:10:01+0000 node kernel: Linux version 5.15.0-105-generic
2024-05-13T23:41:17+0000 node kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
-- Boot 7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f --
2024-05-14T06:02:11+0000 node kernel: Linux version 5.15.0-105-generic
2024-05-14T09:00:00+0000 node kernel: NVRM: Xid (PCI:0000:18:00): 31, pid=4411, name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_3 faulted @ 0x7e9f_4f200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ
2024-05-14T11:30:00+0000 node kernel: NVRM: Xid (PCI:0000:18:00): 31, pid=4412, name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_3 faulted @ 0x7e9f_4f200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ
"""  # noqa: E501
ONE_BOOT = "".join(ln + "\n" for ln in BOOTS.splitlines()[4:])


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def write(tmp_path: Path, text: str, name: str = "kern.log") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- 1. a large kernel log is read whole, streaming ------------------------------------
def big_log(tmp_path: Path, lines: int) -> str:
    """A journalctl -k log: an Xid 79 first (far outside any tail), then filler."""
    filler = ("2024-05-14T06:{m:02d}:00+0000 node kernel: usb 1-{n}: new high-speed USB "
              "device number {n} using xhci_hcd\n")
    with (tmp_path / "big.log").open("w") as fh:
        fh.write("2024-05-14T06:00:00+0000 node kernel: NVRM: Xid (PCI:0000:9a:00): 79, "
                 "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
        for i in range(lines):
            fh.write(filler.format(m=i % 60, n=i % 7))
    return str(tmp_path / "big.log")


def test_a_large_kernel_log_is_scanned_whole_not_its_tail(tmp_path, monkeypatch):
    path = big_log(tmp_path, 20000)
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", 64 << 10)
    assert streamed.is_large_kernel_log(path)
    snap = load_inputs([path])
    cap = snap.get("kernel_log")
    assert isinstance(cap, streamed.ScannedLog) and cap.text == ""  # never held
    assert cap.scan.bytes == Path(path).stat().st_size
    result = analyze(snap)
    assert "xid.79" in {f.id for f in result.findings}
    assert result.not_read == []


def test_small_logs_and_other_texts_are_read_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", 64 << 10)
    assert not streamed.is_large_kernel_log(write(tmp_path, ONE_BOOT))
    assert not streamed.is_large_kernel_log(str(REPO / "README.md"))
    assert not streamed.is_large_kernel_log("-")


def test_a_large_log_joins_the_kernel_log_of_other_inputs(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", 64 << 10)
    big = big_log(tmp_path, 20000)
    small = write(tmp_path, ONE_BOOT, "small.log")
    result = analyze(load_inputs([big, small]))
    assert {"xid.79", "xid.31"} <= {f.id for f in result.findings}


def test_a_capped_read_is_said_in_not_read(tmp_path, monkeypatch):
    import gputriage.ingest as ingest

    monkeypatch.setattr(ingest, "CAP_BYTES", 4096)  # the tail reader, for streams
    path = big_log(tmp_path, 2000)
    result = analyze(load_inputs([path]))
    assert any("only the last 4.0 KiB read" in line for line in result.not_read)
    code, out, _ = cli("analyze", "--json", path)
    assert json.loads(out)["not_read"]


# -- 2. window options -----------------------------------------------------------------
def test_since_counts_the_events_it_excludes(tmp_path):
    path = write(tmp_path, BOOTS)
    since = datetime(2024, 5, 14, 10, tzinfo=timezone.utc)
    early = [ev for ev in scan_text(BOOTS).events if ev.time and ev.time < since]
    assert len(early) >= 2  # the Xid 79 of the boot before, the first Xid 31
    code, out, _ = cli("analyze", "--json", "--since", "2024-05-14T10:00Z", path)
    lines = json.loads(out)["not_read"]
    assert lines == [f"--since 2024-05-14T10:00Z: {len(early)} kernel-log events before "
                     "2024-05-14T10:00Z not judged"]
    code, out, _ = cli("analyze", "--json", "--since", "2024-05-14T11:30:30Z", path)
    assert f"{len(early) + 1} kernel-log events before 2024-05-14T11:30:30Z" in \
        json.loads(out)["not_read"][0]


def test_boot_counts_the_events_of_other_boots(tmp_path):
    path = write(tmp_path, BOOTS)
    other = [ev for ev in scan_text(BOOTS).events if ev.boot != 0]
    assert other
    code, out, _ = cli("analyze", "--json", "--boot", "0", path)
    assert json.loads(out)["not_read"] == [
        f"--boot 0: {len(other)} kernel-log events of other boots not judged"]
    code, out, _ = cli("analyze", "--json", path)
    assert json.loads(out)["not_read"] == []


@pytest.mark.parametrize("command", ["analyze", "logs"])
def test_a_boot_that_does_not_exist_is_a_usage_error(tmp_path, command):
    path = write(tmp_path, ONE_BOOT)
    code, out, err = cli(command, "--boot", "-1", path)
    assert code == EXIT_USAGE and out == ""
    assert "--boot -1: no such boot; the log has 1 boot (0)" in err
    code, _, err = cli(command, "--boot", "-2", write(tmp_path, BOOTS, "two.log"))
    assert code == EXIT_USAGE and "the log has 2 boots (-1, 0)" in err
    assert cli(command, "--boot", "-1", write(tmp_path, BOOTS, "two.log"))[0] in (0, 1, 2)


# -- 3. fleet: duplicates and skipped inputs in the terminal view ------------------------
def test_fleet_terminal_lists_duplicates_and_skipped_inputs(tmp_path):
    from gputriage.scenarios import build_scenario

    (tmp_path / "fleet").mkdir()
    build_scenario("healthy-8xh100", tmp_path / "fleet" / "a")
    build_scenario("xid79-gpu-lost", tmp_path / "b.tar.gz")
    (tmp_path / "fleet" / "c").mkdir()
    (tmp_path / "fleet" / "c" / "manifest.json").write_text("{not json")
    code, out, _ = cli("fleet", str(tmp_path / "fleet"), str(tmp_path / "b.tar.gz"))
    assert "1 input skipped, 1 duplicate input" in out
    assert "skipped 1 unusable input:" in out and "/c" in out
    assert "1 input repeated a host already seen" in out
    assert "kept" in out and "left out" in out and "b.tar.gz" in out


# -- 4. inputs are what they claim -------------------------------------------------------
def kernel_samples(corpus):
    return [s for s in corpus.samples if s.category in KERNEL_CATEGORIES]


def test_every_corpus_kernel_log_passes_the_shape_check(corpus):
    samples = kernel_samples(corpus)
    assert len(samples) >= 40
    for s in samples:
        lines = s.path.read_text(errors="replace").splitlines()
        assert shape_refusal(s.path.name, lines) is None, s.path.name
        code, _, err = cli("logs", str(s.path))
        assert code not in (EXIT_INPUT, EXIT_USAGE), (s.path.name, err)


REFUSED = ["README.md", "docs/contributing.md", "docs/json-schema.md", "docs/fleet.md",
           "src/gputriage/engine/analysis.py", "src/gputriage/knowledge/xid.csv"]


@pytest.mark.parametrize("name", REFUSED)
def test_documents_code_and_tables_are_not_kernel_logs(name):
    code, out, err = cli("logs", str(REPO / name))
    assert code == EXIT_INPUT and out == ""
    assert f"{name}: not a kernel log (" in err and "kernel-log lines in the first" in err
    assert "kernel_log" not in {n for n, _ in detect((REPO / name).read_text())}


def test_a_markdown_row_quoting_an_xid_is_not_a_log_line():
    row = ("| Xid 79 | `[ 12.3] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off "
           "the bus.` | drain |\n")
    json_line = '  "lines": ["[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off"]\n'
    assert detect(row * 3 + json_line) == []
    alert = ("Xid errors on instance: ip-1, Error: May 19 07:08:57 ip-1 kernel: [680111.6] "
             "NVRM: Xid (PCI:0000:10:1c): 63, pid=1850, Row Remapper\n")
    assert [n for n, _ in detect(alert)] == ["kernel_log"]


def test_logs_skips_a_document_beside_a_log_and_says_so(tmp_path):
    path = write(tmp_path, BOOTS)
    code, out, _ = cli("logs", "--json", str(REPO / "README.md"), path)
    doc = json.loads(out)
    assert code in (1, 2) and doc["scan"]["events"]
    assert any("README.md: not a kernel log" in p for p in doc["scan"]["problems"])


def test_analyze_ignores_a_document_beside_a_log_with_a_note(tmp_path):
    path = write(tmp_path, BOOTS)
    code, out, _ = cli("analyze", "--json", str(REPO / "README.md"), path)
    doc = json.loads(out)
    assert any(line.startswith(str(REPO / "README.md")) for line in doc["not_read"])
    assert "xid.79" in {f["id"] for f in doc["findings"]}

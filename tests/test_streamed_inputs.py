"""Large inputs of ``analyze`` / ``triage`` read as a stream (issue 33): a kernel log on
stdin or compressed, a job's log with NCCL lines, a traceback and pasted kernel lines;
``logs``, ``analyze`` and ``triage`` give the same counts for the same log."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from nccl_kit import job_log

from gputriage.cli import Environment, main
from gputriage.engine.analysis import analyze
from gputriage.errors import InputError
from gputriage.ingest import bigtext, load_inputs, streamed

REPO = Path(__file__).resolve().parent.parent
SMALL = 64 << 10  # the streaming threshold in these tests (16 MiB in use)

_XIDS = (
    "NVRM: Xid (PCI:0000:{bus}:00): 13, pid={pid}, name=python3, Graphics SM Warp Exception "
    "on (GPC 1, TPC 2, SM 0): Out Of Range Address",
    "NVRM: Xid (PCI:0000:{bus}:00): 31, pid={pid}, name=torchrun, Ch 0000003b, intr 00000000. "
    "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1c_a669f000. Fault is of type "
    "FAULT_PDE ACCESS_TYPE_VIRT_READ",
    "NVRM: Xid (PCI:0000:{bus}:00): 43, pid={pid}, name=python3, Ch 0000002c",
)
_BUSES = ("18", "2a", "3a", "5d")
_FILLER = "usb 1-{n}: new high-speed USB device number {n} using xhci_hcd"


def storm(lines: int, boots: int = 2) -> str:
    """A journalctl -k short-iso log of ``boots`` boots: an Xid storm over four GPUs
    (one line in ten), an Xid 79 in the earlier boot, routine lines between."""
    out: list[str] = []
    per_boot = lines // boots
    for b in range(boots):
        out.append(f"-- Boot {b:032x} --")
        day = 14 + b
        out.append(f"2024-05-{day}T06:00:00+0000 node kernel: Linux version 5.15.0-105-generic")
        if b == 0:
            out.append(f"2024-05-{day}T06:00:01+0000 node kernel: NVRM: Xid (PCI:0000:9a:00): "
                       "79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
        for i in range(per_boot):
            stamp = f"2024-05-{day}T{7 + i // 3600 % 12:02d}:{i // 60 % 60:02d}:{i % 60:02d}+0000"
            if i % 10 == 3:
                msg = _XIDS[i // 10 % 3].format(bus=_BUSES[i // 30 % 4], pid=1000 + i % 17)
            else:
                msg = _FILLER.format(n=i % 7)
            out.append(f"{stamp} node kernel: {msg}")
    return "\n".join(out) + "\n"


def cli(*argv: str, stdin: bytes | None = None,
        monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, dict]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(stdin)))
    out, err = io.StringIO(), io.StringIO()
    code = main([*argv, "--json"], Environment(stdout=out, stderr=err))
    assert out.getvalue(), err.getvalue()
    return code, json.loads(out.getvalue())


def counts(doc: dict) -> set[tuple[str, str, str, str]]:
    """What each finding counts: its id, scope, the other GPUs, and its occurrences
    (count, first and last time, boot)."""
    return {(f["id"], json.dumps(f["scope"], sort_keys=True),
             json.dumps(f.get("also"), sort_keys=True),
             json.dumps(f.get("occurrences"), sort_keys=True)) for f in doc["findings"]}


@pytest.fixture(autouse=True)
def small_head(monkeypatch: pytest.MonkeyPatch) -> None:
    """The detector judges 16 KiB of a large text's head and tail (1 MiB in use)."""
    import gputriage.ingest as ingest

    monkeypatch.setattr(ingest, "DETECT_BYTES", 16 << 10)
    monkeypatch.setattr(bigtext, "DETECT_BYTES", 16 << 10)


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", SMALL)


@pytest.mark.parametrize("how", ["plain", "gzip", "stdin", "stdin-gzip"])
def test_logs_analyze_and_triage_count_the_same(tmp_path, monkeypatch, small_threshold, how):
    text = storm(800)
    data = text.encode()
    assert len(data) > SMALL
    path = tmp_path / "kern.log"
    path.write_bytes(data)
    _, logs = cli("logs", str(path))
    if how.endswith("gzip"):
        data = gzip.compress(data)
        path = tmp_path / "kern.log.gz"
        path.write_bytes(data)
    docs = {}
    for command in ("analyze", "triage"):
        if how.startswith("stdin"):
            code, docs[command] = cli(command, "-", stdin=data, monkeypatch=monkeypatch)
        else:
            code, docs[command] = cli(command, str(path))
        assert code == logs["exit_status"] == 1  # the Xid 79 is of an earlier boot
    want = counts(logs)
    assert {"xid.79", "xid.13", "xid.31", "xid.43"} <= {fid for fid, *_ in want}
    assert len(want) == 7  # three Xids in each boot, the Xid 79 of the first
    assert counts(docs["analyze"]) == want
    judged = counts(docs["triage"])  # triage lists what is current
    assert len(judged) == 3 and judged <= want
    assert docs["analyze"]["not_read"] == []


def test_a_large_kernel_log_on_stdin_is_streamed_not_held(monkeypatch, small_threshold):
    data = storm(1000).encode()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    snap = load_inputs(["-"])
    cap = snap.get("kernel_log")
    assert isinstance(cap, streamed.ScannedLog) and cap.text == ""
    assert cap.scan.bytes == len(data) and cap.origin == "<stdin>"


def test_a_small_stream_is_read_as_before(monkeypatch):
    data = storm(200).encode()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    snap = load_inputs(["-"])
    cap = snap.get("kernel_log")
    assert not isinstance(cap, streamed.ScannedLog) and "Xid" in (cap.text or "")


# -- a job's log -----------------------------------------------------------------------
TRACEBACK = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 412, in <module>
    loss.backward()
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
"""  # noqa: E501
KERNEL_PASTE = ("[Tue May 14 09:00:00 2024] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', "
                "name=<unknown>, GPU has fallen off the bus.\n")


def job_text(steps: int) -> str:
    """A training job's log: its start, NCCL's INFO lines, steps, a pasted kernel line,
    more steps, then a CUDA error and its traceback at the end."""
    step = ("2025-03-02 10:{m:02d}:{s:02d},000 [rank0] INFO train.py:412 step {n} loss "
            "{loss:.4f} lr 3.0e-04 tokens/s 51234.5\n")
    out = [job_log(env=("NCCL_IB_DISABLE=1",))]
    out += [step.format(m=n // 60 % 60, s=n % 60, n=n, loss=2.0 / (n + 1)) for n in range(steps)]
    out.append(KERNEL_PASTE)
    out += [step.format(m=n // 60 % 60, s=n % 60, n=n, loss=2.0 / (n + 1))
            for n in range(steps, 2 * steps)]
    out.append(TRACEBACK)
    return "".join(out)


def verdicts(result) -> list[tuple]:
    return sorted((f.id, f.severity.value, f.blame.value, f.action.value)
                  for f in result.findings)


def test_a_job_log_gives_the_same_findings_streamed(tmp_path, monkeypatch):
    text = job_text(1500)
    assert len(text) > 2 * bigtext.DETECT_BYTES  # judged on its head and tail either way
    path = tmp_path / "job.log"
    path.write_text(text)
    held = load_inputs([str(path)])
    assert not any(isinstance(c, (streamed.ScannedLog, bigtext.ParsedNccl))
                   for c in held.captures.values())
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", SMALL)
    snap = load_inputs([str(path)])
    assert isinstance(snap.get("kernel_log"), streamed.ScannedLog)
    assert isinstance(snap.get("nccl_log"), bigtext.ParsedNccl)
    assert set(snap.names()) == set(held.names())
    assert snap.text("job_log") == held.text("job_log")
    found = verdicts(analyze(snap))
    assert found == verdicts(analyze(held))
    assert {"nccl.socket-transport", "xid.79"} <= {fid for fid, *_ in found}


@pytest.mark.parametrize("dress", ["colour", "prefixed"])
def test_a_coloured_or_prefixed_job_log_gives_the_same_findings_streamed(
        tmp_path, monkeypatch, dress):
    """A paste from a colour terminal, or a container runtime's log with its prefix on
    every line: judged on the same lines streamed or held."""
    text = job_text(1500)
    if dress == "colour":
        text = text.replace("RuntimeError", "\x1b[31mRuntimeError\x1b[0m")
    else:
        text = "".join(f"2025-03-02T10:00:00.000000000Z stderr F {line}\n"
                       for line in text.splitlines())
    path = tmp_path / "job.log"
    path.write_text(text)
    held = load_inputs([str(path)])
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", SMALL)
    snap = load_inputs([str(path)])
    assert isinstance(snap.get("nccl_log"), bigtext.ParsedNccl)
    assert snap.text("job_log") == held.text("job_log")
    assert verdicts(analyze(snap)) == verdicts(analyze(held))


def test_a_job_log_on_stdin_is_streamed(monkeypatch, small_threshold):
    data = job_text(600).encode()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    snap = load_inputs(["-"])
    assert isinstance(snap.get("nccl_log"), bigtext.ParsedNccl)
    assert snap.get("nccl_log").origin == "<stdin>"
    assert "job_log" in snap.names()


def test_a_kernel_log_and_a_job_log_on_stdin_make_one_timeline(tmp_path, monkeypatch,
                                                                small_threshold):
    kern = tmp_path / "kern.log"
    kern.write_text(storm(800, boots=1))
    data = job_text(600).encode()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    snap = load_inputs([str(kern), "-"])
    cap = snap.get("kernel_log")
    assert isinstance(cap, streamed.ScannedLog) and cap.origin == f"{kern}, <stdin>"
    found = {f.id for f in analyze(snap).findings}
    assert {"xid.13", "xid.31", "xid.79", "nccl.socket-transport"} <= found


def test_a_job_log_without_kernel_lines_has_no_kernel_log(tmp_path, small_threshold):
    path = tmp_path / "job.log"
    path.write_text(job_text(600).replace(KERNEL_PASTE, ""))
    snap = load_inputs([str(path)])
    assert "kernel_log" not in snap.names() and "nccl_log" in snap.names()


def test_a_large_text_with_nothing_known_in_it_is_refused_as_a_small_one(
        tmp_path, monkeypatch, small_threshold):
    prose = "".join(f"Line {i} of a design document about nothing in particular.\n"
                    for i in range(3000))
    path = tmp_path / "notes.txt"
    path.write_text(prose)
    assert streamed.large_kind(str(path)) == bigtext.MIXED
    with pytest.raises(InputError, match="unrecognised content"):
        load_inputs([str(path)])
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(prose.encode())))
    with pytest.raises(InputError, match="<stdin>: unrecognised content"):
        load_inputs(["-"])


def test_a_bug_report_is_not_streamed(tmp_path, small_threshold):
    path = tmp_path / "nvidia-bug-report.log"
    path.write_text("____________________________________________\n\n"
                    "Start of NVIDIA bug report log file.  Please include this file, along\n"
                    + storm(1000))
    assert streamed.large_kind(str(path)) is None


# -- memory, on a large file -------------------------------------------------------------
def _peak_rss_mb(argv: list[str], stdin_path: Path | None = None) -> tuple[int, float]:
    """Run gputriage in a child; its exit status and peak RSS (MB)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    wrapper = ("import resource, subprocess, sys; "
               "rc = subprocess.call(sys.argv[1:], stdin=sys.stdin, stdout=subprocess.DEVNULL); "
               "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    with (stdin_path.open("rb") if stdin_path else open(os.devnull, "rb")) as fh:
        out = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m", "gputriage",
                              *argv], stdin=fh, env=env, capture_output=True, text=True,
                             check=True, timeout=600).stdout.split()
    return int(out[0]), int(out[1]) / 1024


@pytest.mark.slow  # writes a 300 MB log and analyses it three times (about a minute)
def test_memory_of_a_large_log_is_bounded(tmp_path):
    kern = tmp_path / "kern.log"
    block = storm(20000, boots=1).split("\n", 2)[2]  # one boot's lines, repeated
    with kern.open("w") as fh:
        fh.write("2024-05-14T06:00:00+0000 node kernel: Linux version 5.15.0-105-generic\n")
        while fh.tell() < 300 << 20:
            fh.write(block)
    job = tmp_path / "job.log"
    with job.open("w") as fh:
        part = job_text(20000)
        while fh.tell() < 300 << 20:
            fh.write(part)
    try:
        for argv, stdin in ((["analyze", "--json", "-"], kern),
                            (["triage", "--json", str(kern)], None),
                            (["analyze", "--json", str(job)], None)):
            code, peak = _peak_rss_mb(argv, stdin)
            assert code in (1, 2) and peak < 200, (argv, code, peak)
    finally:  # pytest keeps its last temporary folders: not 600 MB of them
        kern.unlink()
        job.unlink()


# -- the host a large log names ---------------------------------------------------------
def _host(snap) -> str | None:
    return analyze(snap).host.hostname


@pytest.mark.parametrize("how", ["plain", "gzip", "stdin"])
def test_a_streamed_kernel_log_names_its_host_as_a_held_one(tmp_path, monkeypatch, how):
    """Its syslog-framed lines name the host whether it is held or scanned whole: the
    next steps say "drain gpu-b12", not "the node these outputs came from"."""
    data = storm(2000).replace(" node kernel:", " gpu-b12 kernel:").encode()
    path = tmp_path / "kern.log"
    path.write_bytes(gzip.compress(data) if how == "gzip" else data)
    assert _host(load_inputs([str(path)])) == "gpu-b12"
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", SMALL)
    if how == "stdin":
        monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
        snap = load_inputs(["-"])
    else:
        snap = load_inputs([str(path)])
    assert isinstance(snap.get("kernel_log"), streamed.ScannedLog)
    assert _host(snap) == "gpu-b12"


def test_a_streamed_job_log_names_the_host_of_its_kernel_lines(tmp_path, monkeypatch):
    framed = ("2024-05-14T09:00:00+0000 gpu-b12 kernel: NVRM: Xid (PCI:0000:18:00): 79, "
              "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
    path = tmp_path / "job.log"
    path.write_text(job_text(1500).replace(KERNEL_PASTE, framed))
    assert _host(load_inputs([str(path)])) == "gpu-b12"
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", SMALL)
    snap = load_inputs([str(path)])
    assert isinstance(snap.get("kernel_log"), streamed.ScannedLog)
    assert _host(snap) == "gpu-b12"


def test_the_head_a_host_is_read_from_is_as_long_either_way():
    from gputriage.facts.stack import LOG_HOST_BYTES

    assert bigtext.HOST_TEXT == LOG_HOST_BYTES


def test_a_line_too_long_to_hold_is_cut_and_said(tmp_path, monkeypatch):
    """A line longer than LINE_CAP is read up to it, the rest dropped and said; the
    lines after it are read as ever (a 200 MB line once cost 14 s and 855 MB)."""
    text = job_text(1500)
    cut = text.index("\n", len(text) // 3) + 1
    long_line = "x" * (3 << 20) + " NCCL INFO never read\n"  # (over a read block too)
    path = tmp_path / "job.log"
    path.write_text(text[:cut] + long_line + text[cut:])
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", SMALL)
    monkeypatch.setattr(bigtext, "LINE_CAP", 64 << 10)
    snap = load_inputs([str(path)])
    assert f"{path}: 1 line(s) longer than 64.0 KiB; the rest of each was not read" \
        in snap.problems
    plain = tmp_path / "plain.log"
    plain.write_text(text)
    assert verdicts(analyze(snap)) == verdicts(analyze(load_inputs([str(plain)])))


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_large_input_of_blank_lines_is_an_empty_file(tmp_path, monkeypatch, small_threshold,
                                                       how):
    """As a small one is: said at once (64 MiB of newlines once took 39 s and 400 MB:
    each blank line went through the record tests and the detector)."""
    data = b"\n" * (4 << 20)
    path = tmp_path / "blank.log"
    path.write_bytes(data)
    if how == "stdin":
        monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    with pytest.raises(InputError, match=r"(?:blank\.log|<stdin>): empty file$"):
        load_inputs([str(path) if how == "file" else "-"])


def test_blank_stretches_in_a_streamed_job_log_change_nothing(tmp_path, monkeypatch):
    text = job_text(1500)
    cut = text.index("\n", len(text) // 2) + 1
    path = tmp_path / "job.log"
    path.write_text(text[:cut] + "\n" * (3 << 20) + text[cut:])
    plain = tmp_path / "plain.log"
    plain.write_text(text)
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", SMALL)
    snap = load_inputs([str(path)])
    assert isinstance(snap.get("nccl_log"), bigtext.ParsedNccl)
    assert verdicts(analyze(snap)) == verdicts(analyze(load_inputs([str(plain)])))


@pytest.mark.parametrize("html", [False, True])
def test_analyze_judges_meanwhile_while_workers_scan_a_large_log(tmp_path, monkeypatch,
                                                                 small_threshold, html):
    """Where worker processes scan a large kernel log for analyze or triage, what judges
    it is imported in the meantime (once, and not for a log read here); the report is the
    same either way."""
    import threading
    from dataclasses import replace

    from gputriage.commands import host
    from gputriage.logscan import config

    path = tmp_path / "kern.log"
    path.write_text(storm(800))
    _, alone = cli("analyze", str(path))
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(config, "DEFAULT", replace(config.DEFAULT, workers=2, process_min=0,
                                                   block=8192, task=8192))
    calls: list[object] = []
    real = host.import_judging

    def judging(*how: bool) -> None:
        calls.append(how)
        real(*how)
    monkeypatch.setattr(host, "import_judging", judging)
    argv = ["analyze", str(path)] + (["--html", str(tmp_path / "r.html")] if html else [])
    _, forked = cli(*argv)  # (JSON, not quiet)
    assert calls == [(True, False, html)] and counts(forked) == counts(alone)
    calls.clear()
    engine = host.import_engine
    monkeypatch.setattr(host, "import_engine", lambda: calls.append("engine") or engine())
    _, triaged = cli("triage", str(path))
    assert calls == ["engine"] and triaged["verdict"]
    calls.clear()
    load_inputs([str(path)], meanwhile=lambda: calls.append(True))
    assert calls == [True]
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", 1 << 40)  # (read here: none)
    load_inputs([str(path)], meanwhile=lambda: calls.append(True))
    assert calls == [True]

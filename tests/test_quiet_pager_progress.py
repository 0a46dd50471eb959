"""``-q`` (the one-line verdict), the pager for long reports on a terminal, and progress on
stderr for long reads: each on a pretend terminal, and silent when piped."""

from __future__ import annotations

import io
import json
import os

import pytest
from fakehost import FakeHost

from gputriage.cli import Environment, main
from gputriage.logscan import scan_paths
from gputriage.model import Action, Blame, Finding, HostSummary, Result, Scope, Severity
from gputriage.scenarios import build_scenario
from gputriage.views.oneline import verdict_line

XID79 = ("[ {t:.6f}] NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, "
         "GPU has fallen off the bus.\n")
FILLER = "[ {t:.6f}] eth0: link up, 100Gbps, full duplex, flow control rx/tx enabled\n"


class Tty(io.StringIO):
    """A terminal, as far as the CLI can tell."""

    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("quiet-scenarios")
    return {n: str(build_scenario(n, root / n))
            for n in ("healthy-8xh100", "gpu-fallen-off-bus", "xid31-one-job")}


@pytest.fixture(scope="module")
def big_log(tmp_path_factory) -> str:
    """A 24 MB kernel log: an Xid 79 among link lines (three 8 MiB reads). Written once:
    the tests only read it."""
    lines = [FILLER.format(t=i / 100) for i in range(300_000)]
    lines.insert(1000, XID79.format(t=10.0))
    path = tmp_path_factory.mktemp("big") / "kern.log"
    path.write_text("".join(lines))
    return str(path)


def _run(argv: list[str], *, stdout: io.StringIO | None = None,
         stderr: io.StringIO | None = None, **env) -> tuple[int, str, str]:
    out, err = stdout or io.StringIO(), stderr or io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err, **env))
    return code, out.getvalue(), err.getvalue()


# -q: the verdict line and the exit status

def test_quiet_prints_only_the_verdict_line_with_the_same_exit_status(built):
    code, out, err = _run(["analyze", "-q", built["gpu-fallen-off-bus"]])
    full_code, full, _ = _run(["analyze", built["gpu-fallen-off-bus"]])
    assert code == full_code == 2
    assert out.count("\n") == 1 and err == ""
    assert out.startswith("CRITICAL gpu-node-017: ")
    assert "Xid 79" in out and "— drain and repair; 1 cause, 2 consequences" in out


def test_quiet_verdict_of_a_healthy_host_and_of_a_job_fault(built):
    code, out, _ = _run(["analyze", "--quiet", built["healthy-8xh100"]])
    assert (code, out) == (0, "OK gpu-node-017: no current fault — nothing to do\n")
    code, out, _ = _run(["analyze", "-q", built["xid31-one-job"]])
    assert code == 1 and out.count("\n") == 1
    assert out.startswith("WARNING gpu-node-017: job: ") and "restart the job" in out


def test_quiet_on_logs_nccl_and_triage(built, big_log, corpus):
    code, out, err = _run(["logs", "-q", big_log])
    assert code == 2 and out.count("\n") == 1 and err == ""
    assert out.startswith(f"CRITICAL {big_log}: ") and "drain and repair" in out
    nccl = corpus.category("5-nccl")[0].path
    code, out, _ = _run(["nccl", "-q", str(nccl)])
    assert out.count("\n") == 1 and out.split()[0] in ("OK", "WARNING", "CRITICAL", "UNKNOWN")
    assert code == _run(["nccl", str(nccl)])[0]
    code, out, _ = _run(["triage", "-q", built["gpu-fallen-off-bus"]])
    assert code == 2 and out.count("\n") == 1 and out.startswith("CRITICAL gpu-node-017: ")


def test_json_wins_over_quiet(built):
    code, out, _ = _run(["analyze", "-q", "--json", built["gpu-fallen-off-bus"]])
    assert code == 2 and json.loads(out)["schema"] == "gputriage/result/v1"


def test_verdict_line_names_the_scope_and_stays_one_line():
    gpu = Scope(kind="gpu", gpu_index=3, pci_bus_id="0000:5d:00.0")
    f = Finding("pcie.x", Severity.WARNING, "link trained at x8\nof x16", "why",
                Action.PLAN_REPAIR, Blame.NODE, gpu)
    result = Result(findings=[f], host=HostSummary(hostname="n1"))
    line = verdict_line(result, unicode=False)
    assert line == ("WARNING n1: GPU 3 0000:5d:00.0: link trained at x8\\x0aof x16 - plan a "
                    "repair at the next window; 1 cause, 0 consequences")
    assert verdict_line(Result(host=HostSummary(verdict="unknown"))).startswith(
        "UNKNOWN the node these outputs came from: could not tell")


# the pager

def test_long_report_on_a_terminal_goes_through_the_pager(built, monkeypatch):
    monkeypatch.setenv("LINES", "20")
    monkeypatch.setenv("COLUMNS", "100")
    paged: list[str] = []
    code, out, _ = _run(["analyze", built["gpu-fallen-off-bus"]], stdout=Tty(),
                        pager=paged.append)
    assert code == 2 and out == ""
    assert len(paged) == 1 and paged[0].count("\n") > 20 and "Xid 79" in paged[0]


def test_no_pager_when_short_piped_quiet_json_or_no_pager(built, monkeypatch):
    monkeypatch.setenv("LINES", "20")
    paged: list[str] = []
    path = built["gpu-fallen-off-bus"]
    for argv, stdout in ((["analyze", "--no-pager", path], Tty()),
                         (["analyze", path], io.StringIO()),
                         (["analyze", "-q", path], Tty()),
                         (["analyze", "--json", path], Tty())):
        code, out, _ = _run(argv, stdout=stdout, pager=paged.append)
        assert code == 2 and out, argv
    assert paged == []
    monkeypatch.setenv("LINES", "500")
    code, out, _ = _run(["analyze", path], stdout=Tty(), pager=paged.append)
    assert paged == [] and "Xid 79" in out


def test_pager_for_logs_nccl_and_triage(built, big_log, monkeypatch):
    monkeypatch.setenv("LINES", "5")
    paged: list[str] = []
    for argv in (["logs", big_log], ["triage", built["gpu-fallen-off-bus"]]):
        _, out, _ = _run(argv, stdout=Tty(), pager=paged.append)
        assert out == "", argv
    assert len(paged) == 2 and all("Xid 79" in p or "79" in p for p in paged)


def test_the_default_pager_runs_the_command_named(built, monkeypatch, tmp_path):
    from gputriage.commands import common

    seen = tmp_path / "paged.txt"
    monkeypatch.setenv("GPUTRIAGE_PAGER", f"tee {seen}")
    out = Tty()
    monkeypatch.setattr(common, "current_env", lambda: Environment(stdout=out))
    common.run_pager("line one\nline two\n")
    assert seen.read_text() == "line one\nline two\n"
    monkeypatch.setenv("GPUTRIAGE_PAGER", "")  # empty: no pager
    common.run_pager("plain\n")
    monkeypatch.setenv("GPUTRIAGE_PAGER", "/nonexistent/pager")  # cannot run: printed
    common.run_pager("fallback\n")
    assert out.getvalue() == "plain\nfallback\n"


# progress on stderr

def test_progress_of_a_large_log_on_a_terminal_stderr(big_log):
    code, _, err = _run(["logs", big_log], stderr=Tty(), progress_after_s=0)
    assert code == 2
    assert "kern.log" in err and "MB" in err


def test_progress_is_silent_when_piped_or_quiet(big_log):
    assert _run(["logs", big_log], progress_after_s=0)[2] == ""
    assert _run(["logs", "-q", big_log], stderr=Tty(), progress_after_s=0)[2] == ""
    assert _run(["logs", big_log], stderr=Tty())[2] == ""  # quicker than a second


def test_progress_of_nccl_logs(tmp_path):
    line = "node1:1234:1234 [0] NCCL INFO Channel 00/08 : 0[0] -> 1[1] via P2P/IPC\n"
    path = tmp_path / "rank0.log"
    path.write_text(line * 40_000)
    _, _, err = _run(["nccl", str(path)], stderr=Tty(), progress_after_s=0)
    assert "rank0.log" in err
    assert _run(["nccl", str(path)], progress_after_s=0)[2] == ""


def test_progress_of_sources_collected(tmp_path):
    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    _, _, err = _run(["check", "--no-history"], stderr=Tty(), progress_after_s=0, host=host)
    assert "collecting" in err and "sources" in err
    _, _, err = _run(["check", "-q", "--no-history"], stderr=Tty(), progress_after_s=0,
                     host=FakeHost(tmp_path / "r2"))
    assert "collecting" not in err


def test_scan_reports_bytes_read_of_plain_compressed_and_worker_read_files(big_log, tmp_path):
    import gzip

    from gputriage.logscan import ScanConfig

    seen: list[tuple[str, int, int | None]] = []
    gz = tmp_path / "kern.log.1.gz"
    with open(big_log, "rb") as src:
        gz.write_bytes(gzip.compress(src.read()))
    scan_paths([big_log, str(gz)], progress=lambda *a: seen.append(a))
    size = os.path.getsize(big_log)
    plain = [s for s in seen if s[0] == big_log]
    assert plain[-1] == (big_log, size, size)
    packed = [s for s in seen if s[0] == str(gz)]
    assert packed and packed[-1][1] == packed[-1][2] == gz.stat().st_size
    seen.clear()  # large plain files read by forked workers report too
    scan_paths([big_log], progress=lambda *a: seen.append(a),
               config=ScanConfig(block=1 << 20, process_min=1 << 20, workers=2))
    assert seen[-1] == (big_log, size, size) and len(seen) > 10


def test_progress_of_analyze_reading_a_large_log(big_log):
    """analyze streams a large log whole (ingest.streamed): the bytes read show on a
    terminal's stderr, nothing when piped or quiet."""
    code, _, err = _run(["analyze", big_log], stderr=Tty(), progress_after_s=0)
    assert code == 2
    assert "kern.log" in err and "MB" in err
    assert _run(["analyze", big_log], progress_after_s=0)[2] == ""
    assert _run(["analyze", "-q", big_log], stderr=Tty(), progress_after_s=0)[2] == ""

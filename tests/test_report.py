"""The terminal report an on-call reads: the opening line (verdict, side at fault, worst
finding, next step), the other side's line, what was not read, per-GPU repeats,
consequences, next steps, the acknowledged and history sections, and piped output."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from gputriage.cli import Environment, main
from gputriage.engine import analyze
from gputriage.ingest import load_inputs
from gputriage.model import (
    NODE,
    Action,
    Blame,
    Evidence,
    Finding,
    HostSummary,
    Occurrences,
    Result,
    Scope,
    Severity,
    Status,
)
from gputriage.scenarios import build_scenario
from gputriage.snapshot import Snapshot
from gputriage.views.opening import CAPPED, index_ranges, worst_current
from gputriage.views.terminal import render_terminal

IB_DISABLED = "nccltests188-ib-disable-env-socket-over-ipoib"
BUSES = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
         "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]


WIDE = 2000  # no wrapping: one printed line per logical line


def _render(result: Result, *, verbose: bool = False, width: int = WIDE) -> str:
    buf = io.StringIO()
    render_terminal(result, Console(file=buf, width=width, color_system=None),
                    verbose=verbose)
    return buf.getvalue()


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def _opening(lines: list[str]) -> list[str]:
    """The opening lines: those before the host line."""
    return lines[:next(i for i, line in enumerate(lines) if line.startswith("host "))]


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("report")
    return {name: build_scenario(name, root / name)
            for name in ("fabric-manager-down", "gpu-fallen-off-bus", "healthy-8xh100",
                         "nccl-socket-fallback")}


def _gpu(i: int) -> Scope:
    return Scope(kind="gpu", gpu_index=i, pci_bus_id=BUSES[i])


def _f(fid: str, sev: Severity = Severity.CRITICAL, title: str = "", *,
       action: Action | None = None, blame: Blame = Blame.NODE, scope: Scope = NODE,
       **kw) -> Finding:
    if action is None:
        action = {Severity.CRITICAL: Action.DRAIN_AND_REPAIR, Severity.WARNING:
                  Action.PLAN_REPAIR, Severity.INFO: Action.NONE}.get(sev, Action.NONE)
    return Finding(fid, sev, title or f"title of {fid}", f"why {fid}", action, blame,
                   scope, **kw)


# -- the opening line on scenarios ------------------------------------------------

def test_fabric_manager_down_opens_with_the_node_fault_and_its_step(scenarios) -> None:
    result = analyze(Snapshot.load(scenarios["fabric-manager-down"]))
    lines = _lines(_render(result))
    worst = worst_current(result)
    assert worst is not None and worst.blame.side == "node"
    assert lines[0].startswith("CRITICAL  node ")
    assert "fabricmanager" in lines[0].replace("-", "")
    assert lines[0].endswith(f"-> {worst.action.value}")
    # its step next; no job was judged: no line about it; then the host line
    assert _opening(lines)[1:] == ([f"          next: {worst.step}"] if worst.step else [])
    assert lines[len(_opening(lines))].startswith("host      gpu-node-017")


def test_gpu_fallen_off_bus_opens_with_the_gpu_and_drain(scenarios) -> None:
    result = analyze(Snapshot.load(scenarios["gpu-fallen-off-bus"]))
    lines = _lines(_render(result))
    worst = worst_current(result)
    assert worst is not None
    assert lines[0].startswith("CRITICAL  node fault: ")
    assert "9a:00.0" in lines[0]
    assert worst.title in lines[0]
    assert lines[0].endswith("-> drain-and-repair")
    assert worst.action is Action.DRAIN_AND_REPAIR
    if worst.step:
        assert lines[1] == f"          next: {worst.step}"


def test_healthy_host_says_there_is_nothing_to_do(scenarios) -> None:
    lines = _lines(_render(analyze(Snapshot.load(scenarios["healthy-8xh100"]))))
    assert lines[0] == "OK        no current fault: nothing to do"
    assert lines[1].startswith("host      ")


# -- node vs job, said plainly ------------------------------------------------------

NOT_NODE = "          the node is not at fault: the job's settings are (NCCL_IB_DISABLE=1)"


def test_job_log_with_ib_disabled_names_the_job(corpus, monkeypatch) -> None:
    """`analyze job.log`: the job's settings are at fault, not the node (exit 1)."""
    monkeypatch.setenv("COLUMNS", str(WIDE))
    code, out, err = _cli("analyze", str(corpus.sample(IB_DISABLED).path))
    opening = _opening(_lines(out))
    assert code == 1, err
    assert opening[0].startswith("WARNING   job ")
    assert "NCCL_IB_DISABLE=1" in opening[0]
    assert NOT_NODE in opening
    assert opening.index(NOT_NODE) <= 2  # under the verdict line and its step


def test_node_fault_with_a_job_log_says_the_job_is_not_at_fault(scenarios, corpus,
                                                                  monkeypatch) -> None:
    """A host whose GPU fell off with a clean NCCL log: the node, not the job."""
    monkeypatch.setenv("COLUMNS", str(WIDE))
    clean = corpus.sample("nccl1189-h20-net-ib-gdrdma").path
    code, out, _ = _cli("analyze", str(scenarios["gpu-fallen-off-bus"]), str(clean))
    opening = _opening(_lines(out))
    assert code == 2
    assert opening[0].startswith("CRITICAL  node fault: ")
    assert opening[-1] == "          the job is not at fault"


def test_check_snapshot_with_job_output_names_the_job(scenarios, corpus, monkeypatch,
                                                     tmp_path) -> None:
    """`check --snapshot HOST JOB_OUTPUT`: a healthy node and a job that disabled IB."""
    monkeypatch.setenv("COLUMNS", str(WIDE))
    expect = tmp_path / "expect.toml"
    expect.write_text("", encoding="utf-8")  # nothing expected: the node as it is
    code, out, err = _cli("check", "--state-dir", str(tmp_path / "state"), "--expect",
                          str(expect), "--snapshot", str(scenarios["healthy-8xh100"]),
                          str(corpus.sample(IB_DISABLED).path))
    opening = _opening(_lines(out))
    assert code == 1, err
    assert opening[0].startswith("WARNING   job ")
    assert NOT_NODE in opening


def test_node_and_job_both_at_fault_get_a_line_each(scenarios, corpus) -> None:
    path = corpus.sample(IB_DISABLED).path
    result = analyze(load_inputs([str(scenarios["gpu-fallen-off-bus"]), str(path)]))
    opening = _opening(_lines(_render(result)))
    assert opening[0].startswith("CRITICAL  node fault: ")
    job = [line for line in opening if line.startswith("          job: WARNING ")]
    assert len(job) == 1 and "NCCL_IB_DISABLE=1" in job[0]


def test_capped_job_faults_say_so_once(scenarios) -> None:
    """The socket-fallback job is critical on the job's side: exit 1 unless asked."""
    result = analyze(Snapshot.load(scenarios["nccl-socket-fallback"]))
    text = _render(result)
    opening = _opening(_lines(text))
    assert opening[0].startswith("WARNING   job ")
    assert opening[-2:] == [NOT_NODE, f"          {CAPPED}"]
    assert text.count(CAPPED) == 1
    result.job_faults_fail = True
    lines = _lines(_render(result))
    assert lines[0].startswith("CRITICAL  job ")
    assert CAPPED not in "\n".join(lines)


def test_job_blamed_without_settings_says_the_job_is() -> None:
    crash = _f("xid.13", Severity.WARNING, "Xid 13 from one job restarted 7 times",
               action=Action.RESTART_JOB, blame=Blame.JOB, scope=_gpu(2))
    lines = _lines(_render(Result(findings=[crash])))
    assert lines[0] == ("WARNING   job fault: GPU 2 0000:3a:00.0: Xid 13 from one job "
                        "restarted 7 times -> restart-job")
    assert lines[1] == "          the node is not at fault: the job is"


# -- what was not read comes first ----------------------------------------------------

def test_not_read_lines_follow_the_opening_line() -> None:
    res = Result(findings=[_f("xid.79", title="GPU fell off the bus", scope=_gpu(4))],
                 not_read=["kernel log: read only the last 256 MiB of 286 MiB",
                           "--since 1h: 41 events before it not judged"])
    lines = _lines(_render(res))
    assert lines[0].startswith("CRITICAL  node fault: GPU 4 0000:9a:00.0: GPU fell off")
    assert lines[1] == "          not read: kernel log: read only the last 256 MiB of 286 MiB"
    assert lines[2] == "          not read: --since 1h: 41 events before it not judged"
    assert lines[3].startswith("host      ")


# -- per-GPU repeats, consequences, next steps -----------------------------------------

def _folded() -> Result:
    lost = _f("gpu.missing", title="GPU 0000:9a:00.0 is on the PCI bus but not usable",
              scope=_gpu(4), evidence=(Evidence("nvml", ("0000:9a:00.0 is not listed",)),))
    smi = _f("nvidia-smi.gpu-lost", title="nvidia-smi cannot open a GPU", scope=_gpu(4))
    xid = _f("xid.79", title="Xid 79 on GPU 4: fallen off the bus", scope=_gpu(4),
             occurrences=Occurrences(1, "2024-05-14T08:18:27+00:00"),
             consequences=(lost, smi),
             step="drain the node, power-cycle it; reseat or RMA GPU 4 (0000:9a:00.0)")
    fabric = _f("fabric.state-not-completed", title="NVLink fabric state In Progress",
                action=Action.FIX_SOFTWARE, scope=_gpu(0),
                also=tuple(_gpu(i) for i in range(1, 8)),
                step="install nvidia-fabricmanager 550.54.15 to match the driver, then "
                     "start it")
    pair = _f("pcie.width", Severity.WARNING, "PCIe link at x8 of x16", scope=_gpu(3),
              also=(_gpu(5),))
    return Result(findings=[pair, fabric, xid])


def test_consequences_and_step_are_rendered_under_their_cause() -> None:
    text = _render(_folded())
    lines = _lines(text)
    assert lines[0] == ("CRITICAL  node fault: Xid 79 on GPU 4: fallen off the bus "
                        "(explains 2 other findings) -> drain-and-repair")
    assert lines[1] == ("          next: drain the node, power-cycle it; reseat or RMA GPU 4 "
                        "(0000:9a:00.0)")
    assert ("          next: drain the node, power-cycle it; reseat or RMA GPU 4 "
            "(0000:9a:00.0)") in lines
    assert ("          explains: gpu.missing  GPU 0000:9a:00.0 is on the PCI bus but not "
            "usable") in lines
    assert "          explains: nvidia-smi.gpu-lost  nvidia-smi cannot open a GPU" in lines
    assert "0000:9a:00.0 is not listed" not in text  # a consequence's evidence: verbose
    verbose = _render(_folded(), verbose=True)
    assert "0000:9a:00.0 is not listed" in verbose
    assert "explains: gpu.missing  GPU 0000:9a:00.0 is on the PCI bus but not usable  " \
           "[GPU 4 0000:9a:00.0]" in verbose


def test_per_gpu_repeat_is_compact_or_listed() -> None:
    lines = _lines(_render(_folded()))
    assert "          on 8 GPUs: 0-7" in lines
    assert "          also on GPU 5 0000:ab:00.0" in lines
    verbose = _lines(_render(_folded(), verbose=True))
    assert any(line.startswith("          also on GPU 1 0000:2a:00.0, GPU 2 0000:3a:00.0")
               for line in verbose)
    # every GPU of the repeat is marked in the GPU table's sense (current findings)
    assert "fabric.state-not-completed" in "\n".join(lines)


def test_repeat_in_the_opening_line_is_compact() -> None:
    res = Result(findings=[f for f in _folded().findings if f.id != "xid.79"])
    lines = _lines(_render(res))
    assert lines[0] == ("CRITICAL  node fault: NVLink fabric state In Progress (on 8 GPUs: "
                        "0-7) -> fix-software")
    assert lines[1] == ("          next: install nvidia-fabricmanager 550.54.15 to match the "
                        "driver, then start it")


def test_index_ranges() -> None:
    assert index_ranges([7, 0, 1, 2, 3, 5]) == "0-3, 5, 7"
    assert index_ranges([4]) == "4"


# -- acknowledged and past findings ------------------------------------------------------

def _with_history() -> Result:
    current = _f("pcie.width", Severity.WARNING, "PCIe link at x8 of x16", scope=_gpu(3))
    acked = _f("xid.48", title="Xid 48 double-bit ECC error on GPU 5", scope=_gpu(5),
               action=Action.RESET_GPU, status=Status.ACKNOWLEDGED,
               status_note="acknowledged by alice at 2024-05-14T09:00Z until "
                           "2024-05-21T09:00Z: GPU reset, row remap pending",
               evidence=(Evidence("kernel_log", ("NVRM: Xid (PCI:0000:ab:00): 48",)),))
    past = _f("xid.119", title="Xid 119 GSP RPC timeout on GPU 3", scope=_gpu(3),
              action=Action.RESET_GPU, status=Status.PAST,
              status_note="ended by a GPU reset at 2024-05-14T08:40:00+00:00")
    return Result(findings=[past, acked, current],
                  host=HostSummary(hostname="gpu-node-017", verdict="critical"))


def test_acknowledged_and_history_sections() -> None:
    res = _with_history()
    text = _render(res)
    lines = _lines(text)
    assert lines[0] == ("WARNING   node fault: GPU 3 0000:5d:00.0: PCIe link at x8 of x16 "
                        "-> plan-repair")
    counts = next(line for line in lines if "1 warning" in line)
    assert counts.strip() == "1 warning · 1 acknowledged · 1 history"
    ack_at = lines.index("Acknowledged (1)")
    past_at = lines.index("History (ended by a reset or a reboot) (1)")
    assert lines.index("WARNING   PCIe link at x8 of x16  [GPU 3 0000:5d:00.0]  pcie.width") \
        < ack_at < past_at
    assert lines[ack_at + 1] == (
        "CRITICAL  Xid 48 double-bit ECC error on GPU 5  [GPU 5 0000:ab:00.0]  xid.48 · "
        "acknowledged by alice at 2024-05-14T09:00Z until 2024-05-21T09:00Z: GPU reset, "
        "row remap pending")
    assert lines[past_at + 1].endswith("xid.119 · ended by a GPU reset at "
                                       "2024-05-14T08:40:00+00:00")
    assert "NVRM: Xid (PCI:0000:ab:00): 48" not in text  # one line each unless verbose
    verbose = _render(res, verbose=True)
    assert "NVRM: Xid (PCI:0000:ab:00): 48" in verbose
    assert "acknowledged: acknowledged by alice" in verbose


def test_only_history_is_ok_and_says_where_it_is() -> None:
    res = _with_history()
    res.findings = [f for f in res.findings if not f.current]
    lines = _lines(_render(res))
    assert lines[0] == ("OK        no current fault: nothing to do (2 acknowledged or in "
                        "history, below)")
    assert "No current findings." in lines
    assert any(line.strip().endswith("no current findings · 1 acknowledged · 1 history")
               for line in lines)


def test_current_finding_with_a_note_shows_it() -> None:
    f = _f("xid.48", title="Xid 48 on GPU 5", scope=_gpu(5),
           status_note="new events since it was acknowledged by alice")
    assert "          note: new events since it was acknowledged by alice" in _lines(
        _render(Result(findings=[f])))


def test_acknowledged_gpu_is_not_marked_in_the_gpu_table() -> None:
    from gputriage.model import GpuRow

    res = _with_history()
    res.gpus = [GpuRow(5, BUSES[5], "H100"), GpuRow(3, BUSES[3], "H100")]
    rows = {line.split()[1]: line for line in _lines(_render(res)) if line.startswith("GPU ")}
    assert rows["5"].endswith("OK") and rows["3"].endswith("WARNING")


# -- piped output -------------------------------------------------------------------------

WORD = re.compile(r"[A-Za-z][A-Za-z0-9-]{2,}")


def test_piped_report_at_width_80_breaks_no_word(scenarios) -> None:
    """The CLI writes to a pipe: rich's non-tty console of 80 columns. Lines wrap at
    spaces (hanging under the text), never inside a word of a title, step or host line."""
    code, out, _ = _cli("analyze", str(scenarios["fabric-manager-down"]))
    assert code == 2
    lines = out.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    assert "\x1b[" not in out
    result = analyze(Snapshot.load(scenarios["fabric-manager-down"]))
    tokens = set(out.split())
    for f in result.findings:
        for word in WORD.findall(f.title) + WORD.findall(f.step or ""):
            assert any(word in t for t in tokens), (word, f.id)
    for word in ("gpu-node-017", "5.15.0-105-generic", "550.54.15"):
        assert any(word in t for t in tokens)
    # wrapped opening lines hang under the text, not under the verdict
    wrapped = lines[1]
    assert wrapped.startswith(" " * 10) and wrapped[10] != " "
    # the GPU table drops the short UUID rather than wrapping a row
    gpu_rows = [line for line in lines if line.startswith("GPU ")]
    assert len(gpu_rows) == 8 and all("CRITICAL" in row or "OK" in row for row in gpu_rows)


# -- the JSON contract documents what the report renders ----------------------------------

def test_json_schema_documents_the_new_keys_and_values() -> None:
    from gputriage.model import Status as St

    doc = (Path(__file__).resolve().parent.parent / "docs" / "json-schema.md").read_text(
        encoding="utf-8")
    for key in ("verdicts", "not_read", "node", "job", "at_fault", "job_faults_fail",
                "status", "status_note", "also", "consequences", "step", "job-config",
                "plan-repair", *(s.value for s in St)):
        assert f"`{key}`" in doc, key
    for value in (*(a.value for a in Action), *(b.value for b in Blame)):
        assert f"`{value}`" in doc, value

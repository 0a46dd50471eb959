"""The terminal report an on-call reads: the one-line verdict (host, worst cause, action
in words, causes and consequences), the next step, the other side's line, what was not
read, then the causes, then the details (host line, GPUs); per-GPU repeats, consequences,
the acknowledged and history sections, and piped output."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from gputriage.cli import Environment, main
from gputriage.engine.analysis import analyze
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
    index_ranges,
)
from gputriage.scenarios import build_scenario
from gputriage.snapshot.bundle import Snapshot
from gputriage.views.oneline import verdict_line
from gputriage.views.opening import CAPPED, worst_current
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
    """The opening lines: those before the first blank line."""
    return lines[:lines.index("")] if "" in lines else lines


def _host_at(lines: list[str]) -> int:
    """Where the host line (the details) starts."""
    return next(i for i, line in enumerate(lines) if line.startswith("host "))


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
    assert lines[0] == verdict_line(result)
    assert lines[0].startswith("CRITICAL gpu-node-017: nvidia-fabricmanager is failed")
    assert lines[0].endswith(" — fix the software; 1 cause, 1 consequence")
    # its step next; no job was judged: no line about it; then the causes, the details
    assert _opening(lines)[1:] == ([f"          next: {worst.step}"] if worst.step else [])
    cause = len(_opening(lines)) + 1
    assert lines[cause].startswith(f"CRITICAL  {worst.title}  [") and worst.id in lines[cause]
    assert _host_at(lines) > cause and lines[_host_at(lines)].startswith("host      gpu-node")


def test_gpu_fallen_off_bus_opens_with_the_gpu_and_drain(scenarios) -> None:
    result = analyze(Snapshot.load(scenarios["gpu-fallen-off-bus"]))
    lines = _lines(_render(result))
    worst = worst_current(result)
    assert worst is not None
    assert lines[0] == (f"CRITICAL gpu-node-017: {worst.title} — drain and repair; 1 cause, "
                        "2 consequences")
    assert "9a:00.0" in lines[0]
    assert worst.action is Action.DRAIN_AND_REPAIR
    if worst.step:
        assert lines[1] == f"          next: {worst.step}"


def test_healthy_host_says_there_is_nothing_to_do(scenarios) -> None:
    lines = _lines(_render(analyze(Snapshot.load(scenarios["healthy-8xh100"]))))
    assert lines[0] == "OK gpu-node-017: no current fault — nothing to do"
    assert lines[1] == ""
    assert lines[2].startswith("host      ")


# -- node vs job, said plainly ------------------------------------------------------

NOT_NODE = "          the node is not at fault: the job's settings are (NCCL_IB_DISABLE=1)"


def test_job_log_with_ib_disabled_names_the_job(corpus, monkeypatch) -> None:
    """`analyze job.log`: the job's settings are at fault, not the node (exit 1)."""
    monkeypatch.setenv("COLUMNS", str(WIDE))
    code, out, err = _cli("analyze", str(corpus.sample(IB_DISABLED).path))
    opening = _opening(_lines(out))
    assert code == 1, err
    assert opening[0].startswith("WARNING ") and ": job: " in opening[0]
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
    assert opening[0].startswith("CRITICAL gpu-node-017: Xid 79 ")
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
    assert opening[0].startswith("WARNING gpu-node-017: job: ")
    assert NOT_NODE in opening


def test_node_and_job_both_at_fault_get_a_line_each(scenarios, corpus) -> None:
    path = corpus.sample(IB_DISABLED).path
    result = analyze(load_inputs([str(scenarios["gpu-fallen-off-bus"]), str(path)]))
    opening = _opening(_lines(_render(result)))
    assert opening[0].startswith("CRITICAL gpu-node-017: Xid 79 ")
    job = [line for line in opening if line.startswith("          job: WARNING ")]
    assert len(job) == 1 and "NCCL_IB_DISABLE=1" in job[0]


def test_capped_job_faults_say_so_once(scenarios) -> None:
    """The socket-fallback job is critical on the job's side: exit 1 unless asked."""
    result = analyze(Snapshot.load(scenarios["nccl-socket-fallback"]))
    text = _render(result)
    opening = _opening(_lines(text))
    assert opening[0].startswith("WARNING gpu-node-017: job: ")
    assert opening[-2:] == [NOT_NODE, f"          {CAPPED}"]
    assert text.count(CAPPED) == 1
    result.job_faults_fail = True
    lines = _lines(_render(result))
    assert lines[0].startswith("CRITICAL gpu-node-017: job: ")
    assert CAPPED not in "\n".join(lines)


def test_job_blamed_without_settings_says_the_job_is() -> None:
    crash = _f("xid.13", Severity.WARNING, "Xid 13 from one job restarted 7 times",
               action=Action.RESTART_JOB, blame=Blame.JOB, scope=_gpu(2))
    lines = _lines(_render(Result(findings=[crash])))
    assert lines[0] == ("WARNING the node these outputs came from: "
                        "job: GPU 2 0000:3a:00.0: Xid 13 from one job "
                        "restarted 7 times — restart the job; 1 cause, 0 consequences")
    assert lines[1] == "          the node is not at fault: the job is"


# -- what was not read comes first ----------------------------------------------------

def test_not_read_lines_follow_the_opening_line() -> None:
    res = Result(findings=[_f("xid.79", title="GPU fell off the bus", scope=_gpu(4))],
                 not_read=["kernel log: read only the last 256 MiB of 286 MiB",
                           "--since 1h: 41 events before it not judged"])
    lines = _lines(_render(res))
    assert lines[0].startswith("CRITICAL the node these outputs came from: "
                                   ""
                        "GPU 4 0000:9a:00.0: GPU fell off")
    assert lines[1] == "          not read: kernel log: read only the last 256 MiB of 286 MiB"
    assert lines[2] == "          not read: --since 1h: 41 events before it not judged"
    assert lines[3] == ""
    assert lines[4].startswith("CRITICAL  GPU fell off the bus  [GPU 4 0000:9a:00.0]  xid.79")


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
    assert lines[0] == ("CRITICAL the node these outputs came from: "
                        "Xid 79 on GPU 4: fallen off the bus — drain and "
                        "repair; 3 causes, 2 consequences")
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
    assert lines[0] == ("CRITICAL the node these outputs came from: "
                        "NVLink fabric state In Progress (on 8 GPUs: "
                        "0-7) — fix the software; 2 causes, 0 consequences")
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
    assert lines[0] == ("WARNING gpu-node-017: GPU 3 0000:5d:00.0: PCIe link at x8 of x16 "
                        "— plan a repair at the next window; 1 cause, 0 consequences")
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
    assert lines[0] == "OK gpu-node-017: no current fault — nothing to do (2 acknowledged or past)"
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


def test_piped_report_is_whole_lines_without_padding(scenarios, monkeypatch) -> None:
    """The CLI writes to a pipe (a StringIO): nothing wrapped, padded or coloured, even
    with COLUMNS set; each finding's header is one line; evidence is quoted verbatim."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = _cli("analyze", str(scenarios["fabric-manager-down"]))
    assert code == 2
    lines = out.splitlines()
    assert "\x1b[" not in out
    assert all(line == line.rstrip() for line in lines)
    assert max(len(line) for line in lines) > 80
    result = analyze(Snapshot.load(scenarios["fabric-manager-down"]))
    assert lines[0] == verdict_line(result)
    for f in (f for f in result.findings if f.current):
        head = f"{f.severity.value.upper():<10}{f.title}  [{f.scope.label()}]  {f.id}"
        assert head in lines, f.id
        for ev in f.evidence if f.severity.rank >= Severity.WARNING.rank else ():
            for quoted in ev.lines[:8]:
                assert " " * 12 + str(quoted) in lines, (f.id, quoted)
    # the GPU table: aligned columns, two spaces apart, every column kept
    gpu_rows = [line for line in lines if line.startswith("GPU ")]
    assert len(gpu_rows) == 8 and all(row.split()[-1] in ("CRITICAL", "OK") for row in gpu_rows)
    assert len({row.index("  0000:") for row in gpu_rows}) == 1
    assert all("GPU-" in row for row in gpu_rows)


def test_report_on_an_80_column_terminal_wraps_between_words(scenarios) -> None:
    """On a terminal, lines wrap at its width, between words, hanging under the text."""
    result = analyze(Snapshot.load(scenarios["fabric-manager-down"]))
    buf = io.StringIO()
    render_terminal(result, Console(file=buf, width=80, force_terminal=True,
                                    color_system=None))
    lines = buf.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert lines[1].startswith(" " * 10) and lines[1][10] != " "
    tokens = set(buf.getvalue().split())
    for f in result.findings:
        for word in WORD.findall(f.title) + WORD.findall(f.step or ""):
            assert any(word in t for t in tokens), (word, f.id)
    # the GPU table drops the short UUID rather than wrapping a row
    gpu_rows = [line for line in lines if line.startswith("GPU ")]
    assert len(gpu_rows) == 8 and not any("GPU-" in row for row in gpu_rows)


# -- the console: terminal or not, COLUMNS, NO_COLOR, TERM=dumb ---------------------------

class _Tty(io.StringIO):
    """A pretend terminal."""

    def isatty(self) -> bool:
        return True


def _console_env(monkeypatch, **env: str) -> None:
    for var in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "TERM", "TTY_COMPATIBLE"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)


def _styled(stream: io.StringIO) -> str:
    from gputriage.views.console import make_console

    render_terminal(_folded(), make_console(stream))
    return stream.getvalue()


def test_terminal_console_honours_columns(monkeypatch) -> None:
    from gputriage.views.console import make_console

    _console_env(monkeypatch, COLUMNS="50", TERM="xterm-256color")
    assert make_console(_Tty()).width == 50
    lines = _styled(_Tty()).splitlines()
    assert max(len(re.sub(r"\x1b\[[0-9;]*m", "", line)) for line in lines) <= 50
    # piped, COLUMNS does not wrap: the lines are as long as what they say
    lines = _styled(io.StringIO()).splitlines()
    assert lines[0] == verdict_line(_folded()) and len(lines[0]) > 50


@pytest.mark.parametrize("env, colour", [
    ({"TERM": "xterm-256color"}, True),
    ({"TERM": "xterm-256color", "NO_COLOR": "1"}, False),
    ({"TERM": "xterm-256color", "NO_COLOR": ""}, True),  # empty: unset (no-color.org)
    ({"TERM": "dumb"}, False),
])
def test_terminal_console_honours_no_color_and_dumb_terminals(monkeypatch, env,
                                                              colour) -> None:
    _console_env(monkeypatch, **env)
    assert ("\x1b[" in _styled(_Tty())) is colour
    assert "\x1b[" not in _styled(io.StringIO())  # never when piped


def test_piped_console_drops_trailing_blanks_across_writes(monkeypatch) -> None:
    from gputriage.views.console import PIPED_WIDTH, make_console

    _console_env(monkeypatch, COLUMNS="40", FORCE_COLOR="")
    buf = io.StringIO()
    console = make_console(buf)
    assert not console.is_terminal and console.width == PIPED_WIDTH
    console.file.write("a  ")
    console.file.flush()
    console.file.write("b \t\n   \nc  \n")
    assert buf.getvalue() == "a  b\n\nc\n"


def test_console_of_stderr(monkeypatch, capsys) -> None:
    import sys

    from gputriage.views.console import make_console

    _console_env(monkeypatch)
    console = make_console(stderr=True)
    console.print("to stderr   ")
    assert capsys.readouterr().err == "to stderr\n"
    assert make_console(sys.stdout).file is not sys.stderr


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


def test_a_warning_to_watch_says_so_not_nothing_to_do():
    """A warning that asks for no action now (an NVSwitch non-fatal error to watch, a
    link speed that cannot be judged idle) heads the report as one to watch."""
    from gputriage.model import Action, Blame, Finding, HostSummary, Result, Severity
    from gputriage.views.oneline import verdict_line

    f = Finding("fabric.manager-errors", Severity.WARNING, "1 NVSwitch non-fatal error",
                "Watch for them.", Action.NONE, Blame.NODE)
    line = verdict_line(Result(findings=[f], host=HostSummary(hostname="gpu-n1")))
    assert line.endswith("1 NVSwitch non-fatal error — no action now: watch it; 1 cause, "
                         "0 consequences"), line

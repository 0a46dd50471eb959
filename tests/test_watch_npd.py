"""``gputriage npd``, the node-problem-detector custom plugin: NPD's exit codes (0 OK,
1 problem, anything else Unknown) and its one line, on scenario hosts; the ``--from``
path that reads a running watch's ``/result``; and the monitor config NPD loads
(deploy/node-problem-detector/gputriage-monitor.json) checked the way NPD checks it."""

from __future__ import annotations

import io
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hostile import trickled
from resultkit import document, finding, gpu_scope, host

from gputriage.cli import Environment, main
from gputriage.model import Finding, Status
from gputriage.scenarios import build_scenario
from gputriage.watch import npd as plugin

REPO = Path(__file__).resolve().parent.parent
MONITOR = REPO / "deploy" / "node-problem-detector" / "gputriage-monitor.json"
NPD_MAX_OUTPUT = 80  # NPD's default max_output_length


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["npd", *argv], Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("npd-scenarios")
    return {name: build_scenario(name, root / name)
            for name in ("healthy-8xh100", "gpu-fallen-off-bus", "xid31-one-job",
                         "xid48-row-remap")}


def _line(out: str) -> str:
    lines = out.splitlines()
    assert len(lines) == 1, out
    assert len(lines[0].encode()) <= NPD_MAX_OUTPUT, lines[0]
    return lines[0]


# --- exit codes and the line, on scenario hosts --------------------------------

def test_healthy_node_is_ok(scenarios: dict[str, Path]) -> None:
    code, out, _ = run("--snapshot", str(scenarios["healthy-8xh100"]))
    assert code == plugin.OK
    assert _line(out) == "OK: no node-side GPU problem"


def test_fallen_off_bus_is_a_problem_naming_the_gpu(scenarios: dict[str, Path]) -> None:
    for level in ("critical", "warning"):
        code, out, _ = run("--snapshot", str(scenarios["gpu-fallen-off-bus"]),
                           "--level", level)
        assert code == plugin.PROBLEM
        line = _line(out)
        assert line.startswith("CRITICAL xid.79")
        assert "0000:9a:00.0" in line and "Xid 79" in line


def test_a_jobs_fault_leaves_the_node_ok_and_says_so(scenarios: dict[str, Path]) -> None:
    for level in ("critical", "warning"):
        code, out, _ = run("--snapshot", str(scenarios["xid31-one-job"]), "--level", level)
        assert code == plugin.OK, out  # check exits 1 here: the job's warning
        line = _line(out)
        assert line.startswith("OK: node fine; the job's fault: xid.31")
        assert "GPU 2 0000:3a:00.0" in line


def test_acknowledged_cause_is_not_a_problem(scenarios: dict[str, Path],
                                             tmp_path: Path) -> None:
    state = tmp_path / "state"
    snap = str(scenarios["gpu-fallen-off-bus"])
    assert run("--snapshot", snap, "--state-dir", str(state))[0] == plugin.PROBLEM
    ack = main(["ack", "xid.79", "--gpu", "0000:9a:00.0", "--reason", "reseated",
                "--state-dir", str(state)], Environment(stdout=io.StringIO(),
                                                        stderr=io.StringIO()))
    assert ack == 0
    code, out, _ = run("--snapshot", snap, "--state-dir", str(state))
    assert code == plugin.OK, out


@pytest.mark.parametrize("content", [b"this is not anything gputriage reads\n",
                                     b"\x1f\x8b\x08\x00truncated gzip"])
def test_unreadable_input_is_unknown(tmp_path: Path, content: bytes,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # short names: the line says what was wrong with them
    bad = "bad.tar.gz" if content.startswith(b"\x1f") else "bad.txt"
    (tmp_path / bad).write_bytes(content)
    code, out, _ = run("--snapshot", bad)
    assert code == plugin.UNKNOWN
    line = _line(out)
    assert line.startswith(f"UNKNOWN: {bad}: ")


def test_missing_input_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run("--snapshot", "absent")
    assert code == plugin.UNKNOWN
    assert _line(out) == "UNKNOWN: absent: no such file or directory"


@pytest.mark.slow  # waits out the check's deadline
def test_a_check_past_its_deadline_is_unknown(monkeypatch: pytest.MonkeyPatch,
                                              scenarios: dict[str, Path]) -> None:
    from gputriage.commands import host
    from gputriage.commands import npd as command

    release = threading.Event()

    def hung(*args: Any, **kwargs: Any) -> Any:
        release.wait(10)
        raise RuntimeError("released")

    monkeypatch.setattr(host, "judge_host", hung)
    monkeypatch.setattr(command, "ANALYSIS_GRACE_S", 0.2)
    try:
        code, out, _ = run("--snapshot", str(scenarios["healthy-8xh100"]), "--deadline", "1")
    finally:
        release.set()
    assert code == plugin.UNKNOWN
    assert "did not finish in 1 s" in _line(out)


# --- the judgement itself --------------------------------------------------------

def _doc(*findings: Finding, unknown: bool = False, **extra: Any) -> dict[str, Any]:
    """The result document of ``findings``; ``unknown``: the check could not tell."""
    return document(*findings, host_summary=host(verdict="unknown" if unknown else None),
                    **extra)


def test_levels_warnings_and_unknowns() -> None:
    gpu = gpu_scope(6, "0000:ba:00.0")
    warn = finding("remap.pending", "warning", scope=gpu)
    assert plugin.judge(_doc(warn)).status == plugin.OK
    said = plugin.judge(_doc(warn))
    assert "WARNING remap.pending GPU 6 0000:ba:00.0" in said.message
    said = plugin.judge(_doc(warn), level="warning")
    assert said.status == plugin.PROBLEM
    assert said.message.startswith("WARNING remap.pending GPU 6 0000:ba:00.0: ")
    # a critical of the node wins over what could not be told; nothing found does not
    crit = finding("xid.79", "critical", scope=gpu, also=(gpu, gpu))
    said = plugin.judge(_doc(warn, crit, unknown=True))
    assert said.status == plugin.PROBLEM
    assert said.message == "CRITICAL xid.79 GPU 6 0000:ba:00.0 +2 GPUs: the xid.79 title"
    said = plugin.judge(_doc(warn, crit, unknown=True), level="warning")
    assert said.message.startswith("CRITICAL xid.79 GPU 6 0000:ba:00.0 +2 GPUs (+1 more): ")
    said = plugin.judge(_doc(unknown=True, unreadable=["nvidia_smi_q"]))
    assert said.status == plugin.UNKNOWN and "nvidia_smi_q" in said.message
    # acknowledged, past and job-blamed criticals never make the node a problem
    quiet = _doc(finding("xid.79", "critical", status=Status.ACKNOWLEDGED),
                 finding("xid.48", "critical", status=Status.PAST),
                 finding("cuda.oom", "critical", blame="job-config"))
    assert (quiet["verdict"], quiet["verdicts"]["node"]) == ("warning", "ok")
    said = plugin.judge(quiet)
    assert said.status == plugin.OK and "the job's fault: cuda.oom" in said.message
    # what is not a valid result is Unknown, the line saying what is wrong with it
    assert plugin.judge({"schema": "other"}).status == plugin.UNKNOWN
    assert plugin.judge(["not", "a", "dict"]).status == plugin.UNKNOWN
    broken = quiet | {"findings": [{**quiet["findings"][0], "severity": "fatal"}]}
    said = plugin.judge(broken, max_length=200)
    assert said.status == plugin.UNKNOWN
    assert said.message == ("UNKNOWN: not a gputriage result: findings[0].severity: 'fatal' "
                            "is not one of ok, info, warning, critical")


def test_the_line_stays_printable_ascii_within_the_limit() -> None:
    title = "überlang\tline\nwith \x1b[31mescapes " + "x" * 300
    said = plugin.judge(_doc(finding("odd", "critical", title=title)), max_length=60)
    assert len(said.message.encode()) <= 60 and said.message.endswith("...")
    assert re.fullmatch(r"[ -~]+", said.message), said.message
    assert plugin.shorten("short", 10) == "short"


# --- --from: a running watch's /result -------------------------------------------

class _Watch:
    """A stand-in for ``gputriage watch --listen``: serves ``doc`` on /result."""

    def __init__(self, doc: Any, status: int = 200) -> None:
        self.doc, self.status, self.asked = doc, status, []
        watch = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name
                watch.asked.append(self.path)
                body = json.dumps(watch.doc).encode()
                self.send_response(watch.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # stop() waits for the loop's next poll: 0.05 s, not the default 0.5 s
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def lost_doc(scenarios: dict[str, Path]) -> dict[str, Any]:
    out = io.StringIO()
    main(["check", "--snapshot", str(scenarios["gpu-fallen-off-bus"]), "--json",
          "--no-history"], Environment(stdout=out, stderr=io.StringIO()))
    return json.loads(out.getvalue())


@pytest.fixture
def watch_of(lost_doc: dict[str, Any]) -> Iterator[Any]:
    started: list[_Watch] = []

    def start(doc: Any = None, status: int = 200) -> _Watch:
        started.append(_Watch(lost_doc if doc is None else doc, status))
        return started[-1]

    yield start
    for watch in started:
        watch.stop()


def test_from_a_watch_judges_its_last_result(watch_of: Any) -> None:
    watch = watch_of()
    start = time.monotonic()
    code, out, _ = run("--from", watch.url)
    assert code == plugin.PROBLEM and "0000:9a:00.0" in _line(out)
    assert watch.asked == ["/result"]
    assert run("--from", f"{watch.url}/result")[0] == plugin.PROBLEM
    assert time.monotonic() - start < 10  # no check run here (a bound, not a benchmark)


def test_from_a_stale_or_broken_watch_is_unknown(watch_of: Any,
                                                 lost_doc: dict[str, Any]) -> None:
    old = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat(timespec="seconds")
    code, out, _ = run("--from", watch_of({**lost_doc, "generated": old}).url)
    assert code == plugin.UNKNOWN and "s old" in _line(out)
    code, out, err = run("--from", watch_of({"no": "result"}).url, "--fallback",
                         "--snapshot", "absent")
    assert code == plugin.UNKNOWN and "absent" in _line(out)
    assert "did not answer a gputriage result (JSON without a schema" in err  # why, in full
    code, out, _ = run("--from", watch_of({"no": "result"}).url)
    assert code == plugin.UNKNOWN and "did not answer a gputriage" in _line(out)
    code, out, _ = run("--from", watch_of(status=503).url)
    assert code == plugin.UNKNOWN and "503" in _line(out)


def _garbage(conn: socket.socket, stopped: threading.Event) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")


TRICKLES = {  # a byte every 0.1 s, for ever
    "body": trickled(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{", 0.1, b"x"),
    "headers": trickled(b"HTTP/1.1 200 OK\r\nX-Slow: ", 0.1, b"x"),
}


def test_a_reply_that_is_not_http_is_unreachable_and_falls_back(
        serve_hostile: Any, scenarios: dict[str, Path]) -> None:
    url = serve_hostile(_garbage).url
    code, out, _ = run("--from", url)
    assert code == plugin.UNKNOWN and "unreachable: not an HTTP answer" in _line(out)
    code, out, err = run("--from", url, "--fallback",
                         "--snapshot", str(scenarios["gpu-fallen-off-bus"]))
    assert code == plugin.PROBLEM and "xid.79" in _line(out)
    assert "checking here" in err


@pytest.mark.slow  # waits out the read deadline
@pytest.mark.parametrize("where", sorted(TRICKLES))
def test_a_watch_answering_a_byte_at_a_time_is_cut_off(serve_hostile: Any, where: str) -> None:
    url = serve_hostile(TRICKLES[where]).url
    start = time.monotonic()
    with pytest.raises(OSError, match="did not answer within 1 s"):
        plugin.fetch_result(url, timeout_s=1.0)
    assert time.monotonic() - start < 3  # one deadline in all, not one per read


@pytest.mark.slow  # waits out the fetch's deadline
def test_the_fallback_check_gets_what_the_fetch_left(serve_hostile: Any,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     scenarios: dict[str, Path]) -> None:
    from gputriage.commands import npd as command

    budgets: list[float] = []

    def check(from_snapshot: Any, deadline: float, *args: Any) -> dict[str, Any]:
        budgets.append(deadline)
        return _check_json(scenarios["healthy-8xh100"])

    monkeypatch.setattr(command, "FETCH_TIMEOUT_S", 1.0)
    monkeypatch.setattr(command, "_bounded_check", check)
    code, out, _ = run("--from", serve_hostile(TRICKLES["body"]).url, "--fallback",
                       "--deadline", "5")
    assert code == plugin.OK, out
    (budget,) = budgets
    assert 3.0 <= budget <= 4.05  # 5 s, less the second the watch took


def test_unknown_exit_changes_only_the_unknown_status(scenarios: dict[str, Path],
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run("--snapshot", "absent", "--unknown-exit", "0")
    assert code == 0 and _line(out).startswith("UNKNOWN: ")
    code, out, _ = run("--snapshot", str(scenarios["gpu-fallen-off-bus"]),
                       "--unknown-exit", "0")
    assert code == plugin.PROBLEM
    assert run("--snapshot", "absent")[0] == plugin.UNKNOWN  # the default


def test_unreachable_watch_is_unknown_or_falls_back(watch_of: Any,
                                                    scenarios: dict[str, Path]) -> None:
    watch = watch_of()
    url = watch.url
    watch.stop()
    code, out, _ = run("--from", url)
    assert code == plugin.UNKNOWN and "unreachable" in _line(out)
    code, out, err = run("--from", url, "--fallback",
                         "--snapshot", str(scenarios["gpu-fallen-off-bus"]))
    assert code == plugin.PROBLEM and "xid.79" in _line(out)
    assert "checking here" in err
    assert run("--from", "ftp://x")[0] == plugin.UNKNOWN


# --- the monitor config NPD loads -------------------------------------------------

_GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|m|s|ms))+$")


def _seconds(text: str) -> float:
    """A Go duration (``time.ParseDuration``) in seconds; ValueError otherwise."""
    if not _GO_DURATION.match(text):
        raise ValueError(text)
    unit = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * unit[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(h|m|s|ms)", text))


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_monitor_config_is_valid_for_npd() -> None:
    config = json.loads(MONITOR.read_text(encoding="utf-8"))
    # what NPD's CustomPluginConfig.Validate / ApplyConfiguration require
    assert config["plugin"] == "custom"
    assert isinstance(config["source"], str) and config["source"]
    global_cfg = config["pluginConfig"]
    timeout = _seconds(global_cfg["timeout"])
    interval = _seconds(global_cfg["invoke_interval"])
    assert timeout < interval  # one invocation ends before the next is due
    assert isinstance(global_cfg["max_output_length"], int)
    assert isinstance(global_cfg["concurrency"], int) and global_cfg["concurrency"] >= 1
    conditions = {c["type"]: c for c in config["conditions"]}
    for cond in conditions.values():
        assert set(cond) == {"type", "reason", "message"}
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", cond["reason"])
    kinds = set()
    for rule in config["rules"]:
        kinds.add(rule["type"])
        assert rule["type"] in ("temporary", "permanent")
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", rule["reason"])
        if rule["type"] == "permanent":  # NPD: "does not have preset default condition"
            assert rule["condition"] in conditions
        assert rule["path"].endswith("/gputriage") and rule["args"][0] == "npd"
        rule_timeout = _seconds(rule.get("timeout", global_cfg["timeout"]))
        assert rule_timeout <= timeout  # NPD: "plugin timeout is greater than global"
        # the check gives up (Unknown) well before NPD kills it
        from gputriage.commands.npd import ANALYSIS_GRACE_S

        assert float(_option(rule["args"], "--deadline")) + ANALYSIS_GRACE_S < rule_timeout
        assert int(_option(rule["args"], "--max-length")) <= global_cfg["max_output_length"]
        # NPD makes an event of any status but 0 of a temporary rule: Unknown is 0 there;
        # the permanent rule's condition turns Unknown on 2
        unknown = int(_option(rule["args"], "--unknown-exit")) \
            if "--unknown-exit" in rule["args"] else plugin.UNKNOWN
        assert unknown == (0 if rule["type"] == "temporary" else plugin.UNKNOWN)
    assert kinds == {"temporary", "permanent"}


def _check_json(snapshot: Path) -> dict[str, Any]:
    out = io.StringIO()
    main(["check", "--snapshot", str(snapshot), "--json", "--no-history"],
         Environment(stdout=out, stderr=io.StringIO()))
    return dict(json.loads(out.getvalue()))


def test_monitor_rules_run_as_written(watch_of: Any, lost_doc: dict[str, Any],
                                      scenarios: dict[str, Path]) -> None:
    """Each rule's arguments, as NPD passes them, against a stand-in watch: accepted by
    the CLI, NPD's codes, a line within the monitor's max_output_length."""
    config = json.loads(MONITOR.read_text(encoding="utf-8"))
    limit = config["pluginConfig"]["max_output_length"]
    healthy = _check_json(scenarios["healthy-8xh100"])
    remap = _check_json(scenarios["xid48-row-remap"])
    dead = watch_of()
    dead.stop()
    for rule in config["rules"]:
        args = list(rule["args"][1:])
        at = args.index("--from") + 1
        unknown = 0 if rule["type"] == "temporary" else plugin.UNKNOWN
        for doc, expected in ((lost_doc, plugin.PROBLEM), (healthy, plugin.OK),
                              (remap, plugin.PROBLEM), (None, unknown)):
            args[at] = watch_of(doc).url if doc is not None else dead.url
            code, out, _ = run(*args)
            assert code == expected, (rule["reason"], out)
            assert len(_line(out).encode()) <= limit
            assert _line(out).startswith("UNKNOWN: ") == (doc is None)

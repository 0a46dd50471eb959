"""``gputriage watch`` as users run it: the command in process (on a scenario snapshot, on
a simulated host whose nvidia-smi hangs), its HTTP endpoints, its textfile, its bad
options, and a real ``gputriage watch`` process stopped with SIGTERM."""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakehost import FakeHost, gpu_host
from prometheus_client.parser import text_string_to_metric_families

from gputriage.cli import main
from gputriage.commands.common import Environment
from gputriage.scenarios import build_scenario

WAIT_S = 30.0  # the longest any wait here may take (each is done far sooner)
FALLEN_BUS = "0000:9a:00.0"


@pytest.fixture(scope="module")
def fallen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_scenario("gpu-fallen-off-bus",
                          tmp_path_factory.mktemp("watch-cli") / "fallen.tar.gz")


def _run(argv: list[str], host: Any = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err, host=host))
    return code, out.getvalue(), err.getvalue()


def _series(text: str, name: str, **labels: str) -> list[Any]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


# --- the command -----------------------------------------------------------------------------

def test_max_cycles_runs_that_many_checks_and_writes_the_textfile(fallen, tmp_path):
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    code, out, err = _run(["watch", "--snapshot", str(fallen), "--interval", "0",
                           "--max-cycles", "3", "--textfile", str(textfiles)])
    assert code == 0, err
    assert out == ""  # the log is on stderr
    assert [line.split(" info ")[1].split(":")[0] for line in err.splitlines()
            if " info check " in line] == ["check 1", "check 2", "check 3"]
    text = (textfiles / "gputriage.prom").read_text()
    [xid] = _series(text, "gputriage_finding", id="xid.79")
    assert (xid.labels["severity"], xid.labels["bus_id"]) == ("critical", FALLEN_BUS)
    assert _series(text, "gputriage_checks_total", outcome="ok")[0].value == 3
    assert [p.name for p in textfiles.iterdir()] == ["gputriage.prom"]  # no temp file left


def test_the_expected_gpu_count_of_expect_is_served_beside_the_usable_count(fallen,
                                                                            tmp_path):
    expect = tmp_path / "expect.toml"
    expect.write_text("[gpu]\ncount = 8\n", encoding="utf-8")
    code, _, err = _run(["watch", "--snapshot", str(fallen), "--interval", "0",
                         "--max-cycles", "1", "--textfile", str(tmp_path), "--no-history",
                         "--expect", str(expect)])
    assert code == 0, err
    text = (tmp_path / "gputriage.prom").read_text()
    assert _series(text, "gputriage_gpus_expected")[0].value == 8
    assert _series(text, "gputriage_gpus")[0].value == 7
    [short] = _series(text, "gputriage_finding", id="expect.gpu-count")
    assert short.labels["bus_id"] == FALLEN_BUS


def _hung_host(root: Path) -> FakeHost:
    """A host with an NVIDIA GPU on PCI whose ``nvidia-smi -q -x`` hangs."""
    return gpu_host(root, commands={("nvidia-smi", "-q", "-x"): (0, "")},
                    hang={("nvidia-smi", "-q", "-x"): 5.0})


@pytest.mark.slow  # waits out a collector's timeout
def test_a_hung_collector_is_a_finding_and_the_next_cycle_still_runs(tmp_path):
    host = _hung_host(tmp_path / "root")
    code, _, err = _run(["watch", "--interval", "0", "--max-cycles", "2", "--deadline", "1",
                         "--textfile", str(tmp_path)], host=host)
    assert code == 0, err
    assert " info check 2: " in err
    assert "nvidia_smi_q_xml:timeout" in err  # said once, while it lasts
    assert err.count("sources not read") == 1
    text = (tmp_path / "gputriage.prom").read_text()
    assert _series(text, "gputriage_finding", id="driver.wedged")
    assert _series(text, "gputriage_source_up", source="nvidia_smi_q_xml")[0].value == 0
    assert _series(text, "gputriage_checks_total", outcome="ok")[0].value == 2


def test_acknowledgements_apply_at_each_cycle(fallen, tmp_path):
    """What ``check`` does each cycle: an ack made while the watch runs counts next time."""
    from gputriage.commands.watch import _check
    from gputriage.watch.logs import WatchLog

    state = tmp_path / "state"
    check = _check(Environment(), WatchLog(io.StringIO()), from_snapshot=str(fallen),
                   expectations=None, timeout=None, deadline=90, opt_in={},
                   state_dir=str(state),
                   no_history=False, history_every_s=3600)
    [xid] = [f for f in check().findings if f.id == "xid.79"]
    assert xid.current
    assert _run(["ack", "--gpu", FALLEN_BUS, "--reason", "reseated, INC-7",
                 "--state-dir", str(state)])[0] == 0
    [xid] = [f for f in check().findings if f.id == "xid.79"]
    assert not xid.current and "INC-7" in (xid.status_note or "")
    code, out, _ = _run(["history", "--json", "--state-dir", str(state)])
    assert code == 0 and len(json.loads(out)["entries"]) == 2  # the change was recorded


def test_a_history_that_raises_is_a_warning_not_a_failed_check(fallen, tmp_path,
                                                              monkeypatch):
    from gputriage.commands.watch import _check
    from gputriage.watch import recording
    from gputriage.watch.logs import WatchLog

    def broken(result: Any) -> tuple:
        raise TypeError("'<' not supported between instances of 'int' and 'NoneType'")

    monkeypatch.setattr(recording, "signature", broken)
    log = io.StringIO()
    check = _check(Environment(), WatchLog(log), from_snapshot=str(fallen),
                   expectations=None, timeout=None, deadline=90, opt_in={},
                   state_dir=str(tmp_path / "state"), no_history=False, history_every_s=3600)
    assert any(f.id == "xid.79" for f in check().findings)
    assert " warning history not recorded " in log.getvalue() and "TypeError" in log.getvalue()


def test_an_unreadable_snapshot_is_an_input_error_at_start(tmp_path):
    garbage = tmp_path / "node.tar.gz"
    garbage.write_bytes(b"\x1f\x8b\x08\x00 not a whole gzip")
    code, _, err = _run(["watch", "--snapshot", str(garbage), "--interval", "0",
                         "--max-cycles", "2", "--no-history"])
    assert code == 66, err
    assert len(err.splitlines()) == 1 and "node.tar.gz" in err and " check 1" not in err


@pytest.mark.parametrize(("argv", "says"), [
    (["--listen", "9400"], "expected ADDR:PORT"),
    (["--listen", "::1:9400"], "brackets"),
    (["--listen", "127.0.0.1:99999"], "0 to 65535"),
    (["--listen", "[::1]9400"], "[IPv6]:PORT"),
    (["--listen", "[]:9400"], "[IPv6]:PORT"),
    # digits that are not ASCII, signs, spaces: issue 29 (exit 70 before)
    (["--listen", "127.0.0.1:\u00b2"], "0 to 65535"),
    (["--listen", "127.0.0.1:\u0661\u0662"], "0 to 65535"),
    (["--listen", "127.0.0.1:--1"], "0 to 65535"),
    (["--listen", "127.0.0.1: 80"], "0 to 65535"),
    (["--listen", "nul\x00host:80"], "not an address here"),
    (["--textfile", "/nonexistent/gputriage-dir"], "no such directory"),
    (["--node-name", "n1"], "--node-conditions"),
])
def test_bad_options_are_usage_errors(argv, says, fallen):
    code, _, err = _run(["watch", "--snapshot", str(fallen), "--max-cycles", "1", *argv])
    assert code == 64 and says in err and "Traceback" not in err, err


def test_an_address_in_use_is_a_usage_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = _run(["watch", "--listen", f"127.0.0.1:{port}", "--max-cycles", "1"])
    assert code == 64 and "cannot listen on 127.0.0.1" in err and "Traceback" not in err


def test_an_unwritable_textfile_directory_is_refused_before_the_first_cycle(tmp_path):
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    target = Path("/proc") if root else tmp_path  # root writes into a mode 0500 directory
    tmp_path.chmod(0o500)
    try:
        code, _, err = _run(["watch", "--textfile", str(target), "--max-cycles", "1"])
    finally:
        tmp_path.chmod(0o700)
    assert code == 64 and "cannot write there" in err and " check 1" not in err, err


def test_the_textfile_is_never_seen_half_written(fallen, tmp_path):
    """A reader racing 20 rewrites sees a whole file each time (temp file + rename)."""
    result: list[int] = []
    writer = threading.Thread(target=lambda: result.append(_run(
        ["watch", "--snapshot", str(fallen), "--interval", "0", "--max-cycles", "20",
         "--textfile", str(tmp_path), "--no-history"])[0]), daemon=True)
    writer.start()
    reads = 0
    pause = threading.Event()
    while writer.is_alive():
        pause.wait(0.002)  # leave the writer some of the interpreter
        for path in tmp_path.iterdir():
            assert not path.name.endswith(".prom") or path.name == "gputriage.prom"
        try:
            text = (tmp_path / "gputriage.prom").read_text()
        except FileNotFoundError:
            continue
        reads += 1
        assert text.endswith("\n") and "gputriage_build_info{" in text.splitlines()[-1]
        assert 'id="xid.79"' in text
    writer.join(timeout=WAIT_S)
    assert result == [0] and reads > 0


# --- the HTTP endpoints ----------------------------------------------------------------------

@pytest.fixture
def served(fallen: Path) -> Iterator[tuple[str, Any]]:
    """A watch state with one check done, served on a free loopback port; stopped after."""
    from gputriage.watch.loop import Watch, WatchState
    from gputriage.watch.metrics import make_registry
    from gputriage.watch.server import WatchServer

    state = WatchState(60, 120)
    registry = make_registry(state)
    server = WatchServer("127.0.0.1:0", state, registry)
    server.start()
    try:
        yield f"http://{server.address}", Watch(
            lambda: _load(fallen), state, _quiet_log(), max_cycles=1)
    finally:
        server.stop()


def _load(path: Path) -> Any:
    from gputriage.engine.analysis import analyze
    from gputriage.ingest import load_inputs

    return analyze(load_inputs([str(path)]))


def _quiet_log() -> Any:
    from gputriage.watch.logs import WatchLog

    return WatchLog(io.StringIO())


def _get(url: str, accept: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_metrics_healthz_and_result_are_served(served, fallen):
    base, watch = served
    assert _get(f"{base}/result")[0] == 503  # no check yet
    assert _get(f"{base}/healthz")[:1] == (200,)
    watch.run()
    code, kind, text = _get(f"{base}/metrics")
    assert code == 200 and kind.startswith("text/plain")
    assert _series(text, "gputriage_finding", id="xid.79", bus_id=FALLEN_BUS)
    code, kind, text = _get(f"{base}/metrics", "application/openmetrics-text; version=1.0.0")
    assert code == 200 and kind.startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n")
    assert _get(f"{base}/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
    code, kind, text = _get(f"{base}/result")
    doc = json.loads(text)
    assert (code, kind, doc["schema"], doc["verdict"]) == (
        200, "application/json", "gputriage/result/v1", "critical")
    _, check_json, _ = _run(["check", "--snapshot", str(fallen), "--json", "--no-history"])
    expected = json.loads(check_json)
    assert [f["id"] for f in doc["findings"]] == [f["id"] for f in expected["findings"]]
    assert _get(f"{base}/nope")[0] == 404


@pytest.mark.parametrize(("text", "parsed"), [
    (":9400", ("", 9400)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9400", ("::1", 9400)),
    ("localhost:80", ("localhost", 80)),
])
def test_listen_addresses(text, parsed):
    from gputriage.watch.server import parse_listen

    assert parse_listen(text) == parsed


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("listen", [":0", "[::1]:0"])
def test_every_address_and_ipv6_are_served(listen):
    from gputriage.watch.loop import WatchState
    from gputriage.watch.metrics import make_registry
    from gputriage.watch.server import WatchServer

    if "::1" in listen and not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine")
    state = WatchState(60, 120)
    server = WatchServer(listen, state, make_registry(state))
    server.start()
    try:
        port = server.address.rsplit(":", 1)[1]
        host = "[::1]" if "::1" in listen else "127.0.0.1"  # ":PORT" takes IPv4 too
        assert _get(f"http://{host}:{port}/healthz")[0] == 200
    finally:
        server.stop()


def _server_with_log(log: io.StringIO, **limits: Any) -> Any:
    from gputriage.watch.httpd import Limits
    from gputriage.watch.logs import WatchLog
    from gputriage.watch.loop import WatchState
    from gputriage.watch.metrics import make_registry
    from gputriage.watch.server import WatchServer

    state = WatchState(60, 120)
    server = WatchServer("127.0.0.1:0", state, make_registry(state), log=WatchLog(log),
                         limits=Limits(**limits))
    server.start()
    return server


def _port(server: Any) -> int:
    return int(server.address.rsplit(":", 1)[1])


def test_an_idle_connection_is_closed():
    from gputriage.watch.server import LIMITS

    assert LIMITS.request_timeout_s <= 60 and LIMITS.idle_timeout_s <= 60
    server = _server_with_log(io.StringIO(), request_timeout_s=0.3)
    try:
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=WAIT_S) as idle:
            start = time.monotonic()
            assert idle.recv(1) == b""  # closed by the server
            assert time.monotonic() - start < 10
    finally:
        server.stop()


def test_the_metrics_text_is_made_again_only_for_a_new_state(monkeypatch):
    """A flood of scrapes reuses one text; a check that changes the state gets a new one
    at once, and an unchanged state's text is made again after METRICS_REUSE_S."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

    from gputriage.watch import server as module
    from gputriage.watch.httpd import Request
    from gputriage.watch.logs import WatchLog
    from gputriage.watch.loop import WatchState

    made: list[int] = []

    class Counting:
        def collect(self) -> Iterator[Any]:
            made.append(1)
            yield GaugeMetricFamily("made", "texts made", value=len(made))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Counting())
    state = WatchState(60, 120)
    served = module.WatchServer("127.0.0.1:0", state, registry, log=WatchLog(io.StringIO()))
    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    scrape = Request("GET", "/metrics", {"host": "x"})
    try:
        first = served.answer(scrape).body
        assert all(served.answer(scrape).body == first for _ in range(50)) and made == [1]
        state.count("skipped_overlap")  # what a check does to the state
        assert served.answer(scrape).body != first and len(made) == 2
        now[0] += module.METRICS_REUSE_S
        served.answer(scrape)
        assert len(made) == 3
    finally:
        served.stop()


def _ask(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_a_client_gone_mid_answer_is_no_traceback_and_a_bug_one_log_line(capfd,
                                                                          monkeypatch):
    import struct

    log = io.StringIO()
    server = _server_with_log(log)
    try:
        for _ in range(3):  # the request sent, the connection reset at once
            with socket.create_connection(("127.0.0.1", _port(server)),
                                          timeout=WAIT_S) as gone:
                gone.sendall(b"GET /result HTTP/1.1\r\nHost: x\r\n\r\n")
                gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert _ask(_port(server)).startswith(b"HTTP/1.1 200 OK\r\n")
        assert log.getvalue() == "" and capfd.readouterr().err == ""

        def bug(self: Any, request: Any) -> Any:
            raise ValueError("a bug")

        monkeypatch.setattr(server.server, "handler", bug.__get__(server))
        assert _ask(_port(server)).startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
        assert _ask(_port(server)).startswith(b"HTTP/1.1 500 ")  # still serving
        assert capfd.readouterr().err == ""  # no traceback
        lines = log.getvalue().splitlines()
        assert len(lines) == 2 and all(" error HTTP request failed " in line
                                       and "ValueError: a bug" in line for line in lines)
    finally:
        server.stop()


def test_healthz_says_why_when_checks_do_not_complete(served):
    base, watch = served
    with watch.state.lock:
        watch.state.last_end -= 1000  # as if the loop had stalled for 1000 s
    code, _, text = _get(f"{base}/healthz")
    assert code == 503 and text.startswith("no check has completed for")


# --- a real process --------------------------------------------------------------------------

@pytest.mark.slow  # a watch process, then SIGTERM
def test_sigterm_stops_a_running_watch_with_status_0(fallen):
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputriage", "watch", "--snapshot", str(fallen),
         "--interval", "60", "--listen", "127.0.0.1:0", "--no-history",
         "--log-format", "json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        seen: list[dict] = []
        while not any(line["msg"] == "check 1: critical" for line in seen):
            seen.append(json.loads(lines.get(timeout=WAIT_S)))
        address = seen[0]["fields"]["listen"]
        assert _get(f"http://{address}/healthz")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0
        rest = []
        while not lines.empty():
            rest.append(json.loads(lines.get()))
        assert [line["msg"] for line in rest][-2:] == ["stopping on SIGTERM", "stopped"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)

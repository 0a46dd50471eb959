"""``gputriage watch`` as users run it beside Prometheus: a real ``prometheus`` (Debian's
package) scrapes a real ``gputriage watch --listen`` on a scenario host (GPU 4 fell off
the bus) and a real node_exporter (``prometheus-node-exporter``) that reads the watch's
``--textfile``; the finding series and their labels are asserted through Prometheus's
HTTP API, and the textfile through ``promtool check metrics``. Prometheus loads the
shipped rules (deploy/prometheus/gputriage-rules.yaml): the node's critical alert goes
pending on both ways in, and nothing is said about the job.

Every process listens on 127.0.0.1 on a free port and is killed when the module ends;
every wait is bounded. Skipped, saying which, when a program is not installed (.ci/run
installs them when it can).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gputriage.scenarios import build_scenario

PROGRAMS = ("prometheus", "promtool", "prometheus-node-exporter")
WAIT_S = 30.0  # the longest any wait here may take
LOST_BUS = "0000:9a:00.0"  # GPU 4 of gpu-fallen-off-bus
RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "gputriage-rules.yaml"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    any(shutil.which(p) is None for p in PROGRAMS),
    reason="needs " + ", ".join(p for p in PROGRAMS if shutil.which(p) is None)
           + " (Debian packages prometheus, prometheus-node-exporter; .ci/run installs them)")]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return int(answer.status), answer.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def _wait(what: str, probe: Callable[[], Any], procs: list[subprocess.Popen]) -> Any:
    """``probe()`` until it gives something truthy, at most ``WAIT_S``; a process of the
    stack that died fails the wait at once, with its output."""
    end = time.monotonic() + WAIT_S
    while True:
        for proc in procs:
            if proc.poll() is not None:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                pytest.fail(f"{proc.args[0]} exited {proc.returncode} while waiting for "
                            f"{what}:\n{out[-3000:]}")
        try:
            got = probe()
        except OSError:
            got = None
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail(f"no {what} within {WAIT_S:.0f} s")
        time.sleep(0.2)


@dataclass
class Stack:
    """The running stack: the watch, node_exporter and Prometheus, and their files."""

    prometheus: str  # base URL
    watch: str
    node_exporter: str
    textfile: Path
    procs: list[subprocess.Popen]

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        status, body = _get(url)
        doc = json.loads(body)
        assert status == 200 and doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def wait_query(self, promql: str) -> list[dict[str, Any]]:
        return list(_wait(f"series for {promql}", lambda: self.query(promql), self.procs))


def _start(argv: list[str], procs: list[subprocess.Popen], cwd: Path) -> subprocess.Popen:
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    procs.append(proc)
    return proc


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def _prometheus_config(watch_port: int, exporter_port: int) -> str:
    return (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {json.dumps(str(RULES))}\n"
        "scrape_configs:\n"
        "  - job_name: gputriage\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{watch_port}']\n"
        "  - job_name: node\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("prometheus")
    snapshot = build_scenario("gpu-fallen-off-bus", root / "snapshot")
    textfile = root / "textfile"
    textfile.mkdir()
    watch_port, exporter_port, prom_port = _free_port(), _free_port(), _free_port()
    (root / "prometheus.yml").write_text(_prometheus_config(watch_port, exporter_port),
                                         encoding="utf-8")
    procs: list[subprocess.Popen] = []
    try:
        _start([sys.executable, "-m", "gputriage", "watch", "--snapshot", str(snapshot),
                "--interval", "1", "--listen", f"127.0.0.1:{watch_port}",
                "--textfile", str(textfile), "--no-history",
                "--state-dir", str(root / "state")], procs, root)
        _start(["prometheus-node-exporter", "--collector.disable-defaults",
                "--collector.textfile", f"--collector.textfile.directory={textfile}",
                f"--web.listen-address=127.0.0.1:{exporter_port}"], procs, root)
        _start(["prometheus", f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}"], procs, root)
        running = Stack(f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{watch_port}",
                        f"http://127.0.0.1:{exporter_port}", textfile / "gputriage.prom",
                        procs)
        _wait("Prometheus ready", lambda: _get(f"{running.prometheus}/-/ready")[0] == 200,
              procs)
        yield running
    finally:
        _stop(procs)


def _labels(series: dict[str, Any]) -> dict[str, str]:
    return dict(series["metric"])


def test_prometheus_scrapes_the_finding_series_with_their_labels(stack: Stack) -> None:
    (up,) = stack.wait_query('up{job="gputriage"} == 1')
    assert _labels(up)["instance"] == stack.watch.removeprefix("http://")
    (series,) = stack.wait_query('gputriage_finding{job="gputriage"}')
    labels = _labels(series)
    assert labels["__name__"] == "gputriage_finding"
    assert {k: labels[k] for k in ("id", "severity", "blame", "action", "bus_id")} == {
        "id": "xid.79", "severity": "critical", "blame": "node",
        "action": "drain-and-repair", "bus_id": LOST_BUS}
    # the lost GPU has no index nor UUID: their labels are empty, which Prometheus stores
    # as absent
    assert set(labels) == {"__name__", "job", "instance", "id", "severity", "blame",
                           "action", "bus_id"}
    assert float(series["value"][1]) == 1.0


def test_prometheus_has_the_gpu_health_and_verdict(stack: Stack) -> None:
    lost = stack.wait_query(f'gputriage_gpu_health{{job="gputriage",bus_id="{LOST_BUS}"}}')
    states = {_labels(s)["state"]: float(s["value"][1]) for s in lost}
    assert states == {"ok": 0.0, "warning": 0.0, "critical": 1.0, "unknown": 0.0}
    healthy = stack.query('gputriage_gpu_health{job="gputriage",state="ok"} == 1')
    assert len(healthy) == 7  # the other seven GPUs of the node
    (verdict,) = stack.query('gputriage_verdict{job="gputriage"} == 1')
    assert _labels(verdict)["state"] == "critical"
    (status,) = stack.query('gputriage_check_exit_status{job="gputriage"}')
    assert float(status["value"][1]) == 2.0
    (build,) = stack.query('gputriage_build_info{job="gputriage"}')
    assert _labels(build)["version"]


def test_node_exporter_serves_the_textfile_to_the_same_prometheus(stack: Stack) -> None:
    (series,) = stack.wait_query('gputriage_finding{job="node"}')
    labels = _labels(series)
    assert (labels["id"], labels["severity"], labels["bus_id"]) == (
        "xid.79", "critical", LOST_BUS)
    assert labels["instance"] == stack.node_exporter.removeprefix("http://")
    # node_exporter read the file without an error (its own series says so)
    (error,) = stack.wait_query('node_textfile_scrape_error{job="node"}')
    assert float(error["value"][1]) == 0.0
    # the same finding series through both ways in
    direct = {(_labels(s)["id"], _labels(s)["bus_id"])
              for s in stack.query('gputriage_finding{job="gputriage"}')}
    assert direct == {("xid.79", LOST_BUS)}


def test_promtool_accepts_the_textfile(stack: Stack) -> None:
    _wait("the textfile", stack.textfile.exists, stack.procs)
    text = stack.textfile.read_text(encoding="utf-8")
    assert 'id="xid.79"' in text
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=WAIT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ... and promtool does reject what is not valid (so the check above means something)
    broken = text.replace("# TYPE gputriage_checks_total counter",
                          "# TYPE gputriage_checks_total counter\n# TYPE gputriage_checks_total "
                          "gauge")
    proc = subprocess.run(["promtool", "check", "metrics"], input=broken, capture_output=True,
                          text=True, timeout=WAIT_S)
    assert proc.returncode != 0


def test_npd_plugin_reads_the_running_watch(stack: Stack) -> None:
    """node-problem-detector's plugin against the same watch: exit 1 (NonOK), the GPU."""
    _wait("the watch's /result", lambda: _get(f"{stack.watch}/result")[0] == 200, stack.procs)
    proc = subprocess.run([sys.executable, "-m", "gputriage", "npd", "--from", stack.watch],
                          capture_output=True, text=True, timeout=WAIT_S)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("CRITICAL xid.79") and LOST_BUS in line and len(line) <= 80


def test_the_shipped_rules_raise_the_nodes_critical_and_nothing_else(stack: Stack) -> None:
    """The alert waits out its 2 minutes as pending, with the finding and the host."""
    # one alert per way in: the textfile's arrives a scrape of node_exporter later
    query = 'ALERTS{alertname="GPUTriageNodeCritical"}'

    def both() -> list[dict[str, Any]] | None:
        found = stack.query(query)
        return found if {_labels(a)["job"] for a in found} == {"gputriage", "node"} else None

    pending = list(_wait(f"both series for {query}", both, stack.procs))
    for alert in pending:
        labels = _labels(alert)
        assert (labels["alertstate"], labels["severity"], labels["id"], labels["bus_id"]) \
            == ("pending", "critical", "xid.79", LOST_BUS)
    (recorded,) = stack.wait_query(
        'instance_severity:gputriage_node_findings:sum{job="gputriage"}')
    assert (_labels(recorded)["severity"], float(recorded["value"][1])) == ("critical", 1.0)
    for quiet in ("GPUTriageJobFault", "GPUTriageGPULost", "GPUTriageCheckStale",
                  "GPUTriageMetricsAbsent", "GPUTriageMetricsGone", "GPUTriageCheckUnknown"):
        assert stack.query(f'ALERTS{{alertname="{quiet}"}}') == [], quiet
    status, body = _get(f"{stack.prometheus}/api/v1/rules?type=alert")
    loaded = {r["name"] for g in json.loads(body)["data"]["groups"] for r in g["rules"]}
    assert status == 200 and "GPUTriageFlappingLatched" in loaded

"""gputriage as a client of a hostile server (issue 29): ``npd --from`` against a
"watch" and ``k8s status`` against an "API server" that answer too much, JSON that
costs too much to decode, or a byte at a time. Each runs the real command in a child
process on 127.0.0.1 and bounds its peak memory (its own rusage) and its time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hostile import Answer, Hostile, Routed, streamed, trickled

REPO = Path(__file__).resolve().parents[2]
NPD_MEMORY_LIMIT_MIB = 256  # deploy/node-problem-detector/node-problem-detector.yaml

# ``gputriage ARGV`` reporting its own peak RSS at exit: VmHWM of the process's memory
# since exec (the children's ru_maxrss counts the memory of the parent it was forked
# from, a test worker of a few hundred MiB)
_MEASURED = """
import atexit, os, runpy, sys
def peak():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["GPUTRIAGE_PEAK_FILE"], "w") as out:
        out.write(kib)
atexit.register(peak)
sys.argv = ["gputriage", *sys.argv[1:]]
runpy.run_module("gputriage", run_name="__main__", alter_sys=True)
"""


def run_measured(argv: list[str], timeout_s: float = 60.0, src: Path | None = None
                 ) -> tuple[int, str, str, float, float]:
    """``gputriage ARGV`` (of the source tree ``src``, this checkout's by default) in a
    child: exit status, stdout, stderr, peak RSS (MiB; infinite when it did not say,
    killed past ``timeout_s``) and wall seconds."""
    with tempfile.TemporaryDirectory(prefix="gputriage-peak-") as tmp:
        peak_file = Path(tmp) / "peak"
        env = {**os.environ, "PYTHONPATH": str(src or REPO / "src"),
               "GPUTRIAGE_PEAK_FILE": str(peak_file)}
        start = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-c", _MEASURED, *argv], env=env,
                                  capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code, out, err = -9, str(exc.stdout or ""), str(exc.stderr or "")
        took = time.monotonic() - start
        peak = int(peak_file.read_text()) / 1024 if peak_file.exists() else float("inf")
    return code, out, err, peak, took


# --- npd --from ------------------------------------------------------------------------

RESULT_HEAD = b'{"schema":"gputriage/result/v1","findings":['


@pytest.mark.parametrize("length", [True, False], ids=["announced", "unannounced"])
def test_npd_reads_no_more_than_a_result_can_be(serve_hostile: Any, length: bool) -> None:
    # the issue: a 57 MiB body took 1.5 GB (the plugin's limit is 256 MiB)
    server = serve_hostile(streamed(57 * 2**20, b"[],", RESULT_HEAD, length))
    code, out, err, peak, took = run_measured(["npd", "--from", server.url])
    assert peak < NPD_MEMORY_LIMIT_MIB / 2 and took < 30, (peak, took)
    assert code == 2 and out.startswith("UNKNOWN: watch: ") and "too much" in out, out
    assert err == ""


def test_npd_refuses_a_result_too_costly_to_decode(serve_hostile: Any) -> None:
    from gputriage.watch.npd import RESULT_MAX_BYTES

    # under the byte cap, but 2 bytes a list: ~100 MiB as objects
    server = serve_hostile(streamed(RESULT_MAX_BYTES - 16, b"[],", RESULT_HEAD))
    code, out, _, peak, _ = run_measured(["npd", "--from", server.url,
                                          "--max-length", "200"])
    assert peak < NPD_MEMORY_LIMIT_MIB / 2, peak
    assert code == 2 and "too costly to decode" in out and "MiB decoded" in out, out


# --- k8s status --------------------------------------------------------------------------

EMPTY_LIST = streamed(0, b" ", b'{"kind":"List","apiVersion":"v1","metadata":{},"items":[]}')
NO_GROUPS = streamed(0, b" ", b'{"kind":"APIGroupList","apiVersion":"v1","groups":[]}')


def kubeconfig(server: Hostile, path: Path) -> Path:
    """A kubeconfig (JSON is YAML) pointing at ``server`` with a bearer token."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "hostile",
        "clusters": [{"name": "hostile", "cluster": {"server": server.url}}],
        "users": [{"name": "reader", "user": {"token": "hostile-token"}}],
        "contexts": [{"name": "hostile", "context": {"cluster": "hostile",
                                                     "user": "reader"}}]}))
    return path


def api_server(pods: Answer) -> Routed:
    """An API server that serves no object but answers its pod list with ``pods``."""
    return lambda path: pods if path == "/api/v1/pods" else \
        NO_GROUPS if path == "/apis" else EMPTY_LIST


@pytest.mark.slow  # waits out a 2 s deadline
def test_k8s_status_timeout_is_a_deadline_not_a_read_timeout(serve_hostile: Any,
                                                             tmp_path: Path) -> None:
    # the issue: one header line every 5 s kept --timeout 10 reading for ever (here 0.5 s:
    # far within the client's read timeouts too)
    server = serve_hostile(trickled(b"HTTP/1.1 200 OK\r\n", 0.5, b"X-Slow: a\r\n"))
    config = kubeconfig(server, tmp_path / "kubeconfig")
    code, out, err, _, took = run_measured(["k8s", "status", "--kubeconfig", str(config),
                                            "--timeout", "2"], timeout_s=30)
    assert took < 10, f"still reading after {took:.0f} s"
    assert code == 3 and out == "" and "timed out after 2 s" in err, err
    assert err.count("\n") == 1


POD = b'{"metadata":{"name":"p","namespace":"default","uid":"u"},"spec":{},"status":{}},'


def pod_list(size: int, length: bool) -> Answer:
    """A valid PodList of ``size`` bytes, whatever the limit asked."""
    return streamed(size, POD, b'{"kind":"PodList","apiVersion":"v1","metadata":{},'
                    b'"items":[', tail=POD[:-1] + b"]}", length=length)


def forbidden(size: int) -> Answer:
    """A 403 whose Status message makes it ``size`` bytes."""
    return streamed(size, b"forbidden ", b'{"kind":"Status","apiVersion":"v1",'
                    b'"status":"Failure","message":"', tail=b'","code":403}',
                    status="403 Forbidden")


@pytest.mark.slow  # a 151 MiB page, in a child
def test_k8s_status_reads_a_huge_page_in_bounded_memory(serve_hostile: Any,
                                                        tmp_path: Path) -> None:
    # the issue: one page of 151 MiB took 593 MiB (a page ignoring the limit asked for)
    server = serve_hostile(api_server(pod_list(151 * 2**20, length=False)), routed=True)
    config = kubeconfig(server, tmp_path / "kubeconfig")
    code, out, err, peak, took = run_measured(
        ["k8s", "status", "--kubeconfig", str(config), "--json"], timeout_s=120)
    assert peak < 256, f"peak RSS {peak:.0f} MiB"
    assert code in (0, 1, 3) and err == "", err
    doc = json.loads(out)
    assert "too large" in doc["not_read"]["Pod"]
    pod_asks = [p for p in server.asked if p.startswith("/api/v1/pods")]
    assert [p.split("limit=")[1].split("&")[0] for p in pod_asks] == ["500", "125", "31",
                                                                      "7", "1"]


@pytest.mark.slow  # a 5 MiB message, twice
def test_k8s_status_cuts_an_api_servers_message(serve_hostile: Any, tmp_path: Path) -> None:
    # the issue: a 5 MB message of a 403 made a 30 MB report
    server = serve_hostile(api_server(forbidden(5 * 2**20)), routed=True)
    config = kubeconfig(server, tmp_path / "kubeconfig")
    for extra in ([], ["--json"]):
        code, out, err, _, _ = run_measured(["k8s", "status", "--kubeconfig", str(config),
                                             "--no-pager", *extra])
        assert err == "" and code in (0, 1, 3), err
        assert len(out) < 64 * 1024, f"a report of {len(out)} bytes"
        assert "forbidden: forbidden forbidden" in out and "..." in out


def test_an_error_answer_is_cut_before_any_client_generation_reads_it(serve_hostile: Any,
                                                                       tmp_path: Path) -> None:
    """The clients before v37 build an ApiException from the whole body of a non-2xx
    answer (its ``data``): the connection pool hands them the cut answer instead."""
    from kubernetes.client.exceptions import ApiException

    from gputriage.collect import k8s_api

    server = serve_hostile(forbidden(5 * 2**20))
    config = kubeconfig(server, tmp_path / "kubeconfig")
    api, _, _ = k8s_api.api_client(k8s_api.ReadOptions(kubeconfig=str(config)))
    k8s_api._cut_error_answers(api)
    # what the older client's REST layer does with every list answer
    answer = api.rest_client.pool_manager.request("GET", f"{server.url}/api/v1/pods",
                                                  preload_content=False)
    error = ApiException(http_resp=answer)
    assert error.status == 403 and len(error.body) <= k8s_api.ERROR_MAX_BYTES
    assert k8s_api._status_message(answer.data).startswith("forbidden forbidden")
    api.close()

"""Latching and "this node again" through the real ``gputriage check`` and its history
store, on scenario hosts that share a host name (gpu-node-017): an InfiniBand port that
comes and goes latches after 3 strikes, a one-off does not, the latch holds on a clean
check until acknowledged; an Xid 48 GPU reset and acknowledged that fails again is
escalated from a GPU reset to a hardware repair, with the count and the times.

Marked slow: about a dozen real checks, one to two seconds each."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BUS = "0000:ab:00.0"  # GPU 5 of xid48-row-remap


def _gt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gputriage", *args], capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("scenarios")
    out = {}
    for name in ("ib-port-polling", "healthy-8xh100", "xid48-row-remap"):
        built = _gt("scenario", "build", name, "-o", str(where / name))
        assert built.returncode == 0, built.stderr
        out[name] = where / name
    return out


def _check(snapshot: Path, state: Path) -> tuple[int, dict]:
    proc = _gt("check", "--json", "--snapshot", str(snapshot), "--state-dir", str(state))
    return proc.returncode, json.loads(proc.stdout)


def _ids(doc: dict) -> dict[str, dict]:
    return {f["id"]: f for f in doc["findings"] if f.get("status") == "current"}


def test_a_flapping_port_latches_and_a_one_off_does_not(hosts: dict[str, Path],
                                                        tmp_path: Path) -> None:
    port, healthy = hosts["ib-port-polling"], hosts["healthy-8xh100"]
    one_off = tmp_path / "one-off"
    for snap in (port, healthy, healthy):
        code, doc = _check(snap, one_off)
    assert code == 0 and "flapping.ib-port" not in _ids(doc)

    flapping = tmp_path / "flapping"
    for snap in (port, healthy, port, healthy):
        code, doc = _check(snap, flapping)
        assert "flapping.ib-port" not in _ids(doc)  # two strikes: not yet
    code, doc = _check(port, flapping)  # the third
    latch = _ids(doc)["flapping.ib-port"]
    assert code == 2 and latch["severity"] == "critical"
    assert latch["action"] == "drain-and-repair" and latch["occurrences"]["count"] == 3
    # the port is up again: the node stays latched
    code, doc = _check(healthy, flapping)
    assert code == 2 and "flapping.ib-port" in _ids(doc)
    # repaired and acknowledged: clean again
    acked = _gt("ack", "flapping.ib-port", "--reason", "new cable, INC-9",
                "--state-dir", str(flapping))
    assert acked.returncode == 0, acked.stderr
    code, doc = _check(healthy, flapping)
    assert code == 0 and "flapping.ib-port" not in _ids(doc)


def test_a_gpu_reset_that_fails_again_is_escalated(hosts: dict[str, Path],
                                                   tmp_path: Path) -> None:
    xid48, state = hosts["xid48-row-remap"], tmp_path / "state"
    code, doc = _check(xid48, state)
    assert code == 2 and _ids(doc)["xid.48"]["action"] == "reset-gpu"
    acked = _gt("ack", "xid.48", "--gpu", BUS, "--reason", "GPU reset, INC-5",
                "--state-dir", str(state))
    assert acked.returncode == 0, acked.stderr
    code, doc = _check(xid48, state)
    assert "xid.48" not in _ids(doc)  # acknowledged
    again = tmp_path / "again"
    shutil.copytree(xid48, again)
    when = (datetime.now(timezone.utc) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S")
    with (again / "sources" / "kernel_log.txt").open("a", encoding="utf-8") as fh:
        fh.write(f"{when}+0000 gpu-node-017 kernel: NVRM: Xid (PCI:0000:ab:00): 48, "
                 "pid='<unknown>', name=<unknown>, An uncorrectable double bit error "
                 "(DBE) has been detected on GPU in the framebuffer.\n")
    code, doc = _check(again, state)
    f = _ids(doc)["xid.48"]
    assert code == 2 and f["action"] == "drain-and-repair"
    assert "again: 1x in 7 days" in f["title"]
    assert "INC-5" in json.dumps(f["evidence"])

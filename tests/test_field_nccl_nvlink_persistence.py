"""Issue 31, part F: what the field pastes of NCCL's IB completion errors, launchers'
per-rank prefixes, old NCCL's interface lines, NVLink status pastes and persistence mode.

Real captures (tests/fixtures/field, each from a public thread) and synthetic variants of
each class: other statuses and wordings, other prefixes, other GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputriage.engine.analysis import analyze
from gputriage.facts.stack import GpuSighting
from gputriage.ingest import load_text
from gputriage.ingest.detect import detect
from gputriage.model import Blame, Finding, Result, Severity
from gputriage.parsers.systemd import UnitState
from gputriage.rules.persistence import persistence_mode
from gputriage.status import exit_status
from gputriage.text.framing import unframe_lines

FIELD = Path(__file__).resolve().parent / "fixtures" / "field"
DRAINS = {"drain-and-repair", "reboot-node", "reset-gpu"}


def judge(text: str) -> Result:
    return analyze(load_text(text, "paste"))


def the(result: Result, finding_id: str) -> Finding:
    return next(f for f in result.findings if f.id == finding_id)


def warned(result: Result) -> list[Finding]:
    return [f for f in result.findings if f.severity.rank >= Severity.WARNING.rank]


# --- IB completion errors: the status's documented meaning gives blame and severity -----

@pytest.mark.parametrize(("name", "peer"), [
    ("corpus:nccl1405-ib-plugin-warn-status12", "10.216.210.236"),
    ("corpus:nccl1814-roce-warn-status12", "172.36.143.59"),
    ("nccl1664-bare-completion-line.txt", "7.6.13.83"),
])
def test_retry_exceeded_is_a_network_warning_naming_the_peer(name: str, peer: str,
                                                              request: pytest.FixtureRequest
                                                              ) -> None:
    kind, _, part = name.partition(":")
    text = (request.getfixturevalue("corpus").sample(part).text() if kind == "corpus" and part
            else (FIELD / name).read_text())
    result = judge(text)
    f = the(result, "nccl.ib-completion-error")
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.NODE)
    assert peer in f.title and "IBV_WC_RETRY_EXC_ERR" in f.title
    assert f.action.value not in DRAINS and int(exit_status(result)) == 1


@pytest.mark.parametrize("line", [
    "NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129",
    "h1:1:2 [0] transport/net_ib.cc:1151 NCCL WARN NET/IB : Got completion from peer "
    "192.168.17.147<38560> with error 12, opcode 0, len 0, vendor err 129",
    "h1:1:2 [3] transport/net_ib.cc:2360 NCCL WARN NET/IB: Got completion from peer "
    "10.1.0.9<50000> with status=13 opcode=1 len=0 vendor err 135 (Send) hca mlx5_3",
    "h1:1:2 [3] net_ib.cc:2360 NCCL WARN NET/IB : Got completion from peer 10.1.0.9<5> with "
    "status=20 opcode=1 len=0 vendor err 0 (Send)",
])
def test_path_and_peer_statuses_never_drain_this_node(line: str) -> None:
    result = judge(line + "\n")
    f = the(result, "nccl.ib-completion-error")
    assert f.severity is Severity.WARNING and f.blame is Blame.NODE
    assert int(exit_status(result)) == 1


def test_one_host_losing_several_peers_still_points_at_its_own_link() -> None:
    lines = "".join(
        f"gpu-a:7:9 [0] transport/net_ib.cc:1615 NCCL WARN NET/IB : Got completion from peer "
        f"10.0.0.{n}<5{n}> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
        for n in (2, 3, 4))
    f = the(judge(lines), "nccl.ib-completion-error")
    assert (f.severity, f.blame, f.action.value) == (Severity.CRITICAL, Blame.NODE,
                                                     "drain-and-repair")


def test_gpudirect_access_error_stays_configuration() -> None:
    line = ("H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
            "from peer fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, "
            "vendor err 81 (Send)\n")
    f = the(judge(line), "nccl.ib-completion-error")
    assert f.blame is Blame.CONFIG and f.action.value == "fix-config"


# --- launchers' per-rank prefixes -------------------------------------------------------

WARN12 = ("gpu-a:3468:3905 [4] transport/net_ib.cc:1615 NCCL WARN NET/IB : Got completion from "
          "peer 10.0.0.7<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)")
XID79 = "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."


@pytest.mark.parametrize("prefix", ["[trainer0|0]:", "[1,0]<stderr>:", "[1,12]<stdout>: ",
                                    "[default3]:", "0: ", " 12: ", "node07 | ", "gpu-a7: "])
def test_rank_prefixes_come_off_every_line(prefix: str) -> None:
    lines = [prefix + XID79, prefix + XID79.replace("1843", "1844")]
    payloads, taken = unframe_lines(lines)
    assert payloads == [XID79, XID79.replace("1843", "1844")] and all(taken)
    result = judge("\n".join(lines) + "\n")
    assert the(result, "xid.79").severity is Severity.CRITICAL


@pytest.mark.parametrize("prefix", ["[trainer0|0]:", "[1,0]<stderr>:", "0: ", "node07 | "])
def test_an_nvidia_smi_table_under_a_rank_prefix_is_read(prefix: str) -> None:
    table = (FIELD / "daskcuda859-table-pm-off.txt").read_text().splitlines()[2:]
    got = detect("".join(f"{prefix}{ln}\n" for ln in table))
    assert [name for name, _ in got] == ["nvidia_smi"]


def test_an_ompi_tagged_nccl_log_is_read_per_host() -> None:
    result = judge((FIELD / "nccl224-ompi-tagged.log").read_text())
    f = the(result, "nccl.socket-iface-virtual")
    assert "flannel.1" in f.title and f.blame is Blame.CONFIG


@pytest.mark.parametrize("lines", [
    ["  24:          0          0   PCI-MSI 1 nvidia",
     "  25:          0          3   PCI-MSI 2 nvidia"],  # /proc/interrupts
    ["[rank3]: Traceback (most recent call last):", "[rank3]:   File \"x.py\", line 1"],
    ["[abc|def]: not a rank", "[abc|def]: not a rank"],
])
def test_what_only_looks_like_a_rank_prefix_stays(lines: list[str]) -> None:
    payloads, taken = unframe_lines(lines)
    assert payloads == lines and not any(taken)


# --- old NCCL's interface lines ---------------------------------------------------------

def test_nccl21_interface_lines_are_interface_choices() -> None:
    result = judge((FIELD / "horovod584-nccl21-iface-lo.log").read_text())
    f = the(result, "nccl.socket-iface-virtual")
    assert "lo" in f.title and f.severity is Severity.WARNING
    assert f.blame in (Blame.CONFIG, Blame.JOB_CONFIG) and int(exit_status(result)) == 1


@pytest.mark.parametrize(("word", "iface"), [("INFO", "docker0"), ("NCCL INFO", "veth12ab"),
                                             ("INFO", "virbr0")])
def test_nccl20_interface_lines_name_a_virtual_interface(word: str, iface: str) -> None:
    text = "".join(
        f"{host}:1892:1900 [0] {word} NET : Using interface {name}:{addr}<0>\n"
        for host in ("cx50", "cx51")
        for name, addr in ((iface, "172.17.0.1"), ("eno1", "192.168.12.50")))
    text += f"cx50:1892:1900 [0] {word} NET/IB : Using interface eno1 for sideband communication\n"
    text += f"cx50:1892:1900 [0] {word} Using internal Network Socket\n"
    f = the(judge(text), "nccl.socket-iface-virtual")
    assert iface in f.title and f.action.value == "fix-config"


# --- NVLink status pastes ---------------------------------------------------------------

@pytest.mark.parametrize("text", [
    (FIELD / "gpud1085-nvlink-all-inactive.txt").read_text(),
    "$ nvidia-smi nvlink --status\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aa)\n"
    "\tNVML: Unable to retrieve NVLink information as all links are inActive\n",
    "node07: GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aa)\n"
    "node07: \tNVML: Unable to retrieve NVLink information as all links are inActive\n",
    "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aa)\nall links are inActive\n",
])
def test_all_links_inactive_is_the_nvlink_status_source(text: str) -> None:
    assert [name for name, _ in detect(text)] == ["nvidia_smi_nvlink_status"]
    assert "nvlink.links-down" in {f.id for f in judge(text).findings}


def test_real_inactive_links_drain_the_node() -> None:
    result = judge((FIELD / "azhpc73-nvlink-s-two-inactive.txt").read_text())
    f = the(result, "nvlink.links-down")
    assert f.severity is Severity.CRITICAL and f.blame is Blame.NODE and "3, 5" in f.title


def test_nvlink_capabilities_are_claimed_and_judge_nothing() -> None:
    text = ("$ nvidia-smi nvlink -c\nGPU 0: Tesla V100-SXM2-16GB (UUID: GPU-aa)\n"
            "\t Link 0, P2P is supported: true\n\t Link 0, Access to system memory supported: "
            "true\n\t Link 1, P2P is supported: true\n")
    assert [name for name, _ in detect(text)] == ["nvidia_smi_nvlink_status"]
    assert not warned(judge(text))


# --- persistence mode -------------------------------------------------------------------

def test_a_healthy_table_with_persistence_off_raises_nothing() -> None:
    result = judge((FIELD / "daskcuda859-table-pm-off.txt").read_text())
    assert not warned(result) and int(exit_status(result)) == 0
    assert the(result, "persistence.off").severity is Severity.INFO


OFF = ("nvidia_smi", [GpuSighting("0000:34:00.0", "nvidia_smi", 0, "NVIDIA H100 80GB HBM3",
                                  persistence_mode=False, line="GPU 0")])


@pytest.mark.parametrize(("units", "severity"), [
    (None, Severity.INFO),  # a pasted table: the host's services are not known
    ({}, Severity.WARNING),  # a collected node without the daemon
    ({"nvidia-persistenced": UnitState(load_state="loaded", active_state="failed")},
     Severity.WARNING),
    ({"nvidia-persistenced": UnitState(load_state="loaded", active_state="active")},
     Severity.INFO),
])
def test_persistence_off_matters_where_no_daemon_keeps_the_gpus(units, severity) -> None:
    [f] = persistence_mode(OFF, units)
    assert f.severity is severity and f.blame is Blame.CONFIG


def test_consumer_gpus_with_persistence_off_are_not_reported() -> None:
    gpus = ("nvidia_smi", [GpuSighting(None, "nvidia_smi", 0, "NVIDIA GeForce RTX 3080",
                                       persistence_mode=False)])
    assert list(persistence_mode(gpus, {})) == []

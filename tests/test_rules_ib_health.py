"""The RDMA tools' other outputs (rdma link, perfquery, ibdev2netdev's netdev states, the
"no device" complaints) and the rules on them, on small inputs of each class with
variants, and on the real captures of category 6."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import pytest
from hostkit import run

from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.ib_tools import perfquery_counter
from gputriage.parsers.infiniband import parse_ib_problems, parse_ibstat

SOURCE_SAMPLES = {"ibstat": ("corpus:rccl1423-rdma-link", "corpus:treydock-perfquery",
                             "corpus:imbue-h100-ibdev2netdev",
                             "corpus:dsxinfra5251-ibv-devinfo-no-ib-devices")}

RDMA_LINK_FLAP = """\
link mlx5_2/1 subnet_prefix fe80:0000:0000:0000 lid 12 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP netdev ib2
link mlx5_2/1 subnet_prefix fe80:0000:0000:0000 lid 12 sm_lid 1 lmc 0 state DOWN physical_state POLLING netdev ib2
link mlx5_2/1 subnet_prefix fe80:0000:0000:0000 lid 12 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP netdev ib2
"""
# older iproute2: "<index>/<port>: <dev>/<port>: ..."
RDMA_LINK_OLD = """\
0/1: mlx5_0/1: state ACTIVE physical_state LINK_UP netdev enp65s0f0np0
1/1: mlx5_1/1: state DOWN physical_state DISABLED netdev enp65s0f1np1
"""
PERFQUERY_ERRORS = """\
# Port counters: Lid 41 port 1 (CapMask: 0x1400)
PortSelect:......................1
CounterSelect:...................0x1b01
SymbolErrorCounter:..............0
LinkErrorRecoveryCounter:........0
LinkDownedCounter:...............0
PortRcvErrors:...................2417
PortRcvRemotePhysicalErrors:.....0
LocalLinkIntegrityErrors:........3
PortXmitData:....................98221311
PortRcvData:.....................98120030
"""
PERFQUERY_CONGESTED = PERFQUERY_ERRORS.replace("2417", "0").replace(
    "LocalLinkIntegrityErrors:........3", "LocalLinkIntegrityErrors:........0"
) + "PortXmitDiscards:................52113\n"
IPOIB_DOWN = """\
mlx5_0 port 1 ==> ib0 (Down)
mlx5_1 port 1 ==> ib1 (Down)
mlx5_2 port 1 ==> eno2np0 (Up)
"""
POD_VF = "[root@trainer-0 /]# ibdev2netdev\nmlx5_7 port 1 ==> net2 (Down)\n"
NO_PROVIDERS = ("libibverbs: Warning: couldn't load driver 'libmlx5-rdmav34.so': "
                "libmlx5-rdmav34.so: cannot open shared object file: No such file or directory\n"
                "No IB devices found\n")
NO_UMAD = ("ibwarn: [2114] umad_init: can't read ABI version from "
           "/sys/class/infiniband_mad/abi_version (No such file or directory): is ib_umad "
           "module loaded?\nibpanic: [2114] main: can't init UMAD library: (No such file or "
           "directory)\n")
NO_DEVICE = "$ ibv_devinfo\nNo IB devices found\n"
FIRMWARE_KERNEL = ("[   12.401122] mlx4_core 0000:81:00.0: Installed FW has unsupported command "
                   "interface revision 2\n")

RULE_CASES = {
    "ib.port-unstable": [({"ibstat": RDMA_LINK_FLAP}, "ib.port-unstable")],
    "ib.port-errors": [({"ibstat": PERFQUERY_ERRORS}, "ib.port-errors")],
    "ib.link-state-unshown": [({"ibstat": IPOIB_DOWN}, "ib.link-state-unshown")],
    "ib.no-devices": [({"ibstat": NO_PROVIDERS}, "ib.no-devices"),
                      ({"ibstat": "No IB devices found\n"}, "ib.no-devices")],
}


def _found(text: str) -> dict:
    return {f.id: f for f in run(**dict(detect(text))).findings}


def test_rdma_link_readings_keep_their_history() -> None:
    [port] = parse_ibstat(RDMA_LINK_FLAP)
    assert (port.key, port.state, port.phys_state, port.lid, port.netdev) == (
        "mlx5_2/1", "Active", "LinkUp", 12, "ib2")
    assert [(s, p) for s, p, _ in port.history] == [("Active", "LinkUp"), ("Down", "Polling")]
    old = {p.key: p for p in parse_ibstat(RDMA_LINK_OLD)}
    assert old["mlx5_1/1"].phys_state == "Disabled" and not old["mlx5_0/1"].history


def test_a_port_that_dropped_between_readings_is_unstable_even_if_active_now() -> None:
    f = _found(RDMA_LINK_FLAP)["ib.port-unstable"]
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.PLAN_REPAIR, Blame.NODE)
    assert "Active/LinkUp -> Down/Polling -> Active/LinkUp" in f.title
    assert "rdma link show mlx5_2/1" in f.step


def test_repeated_identical_readings_are_not_unstable() -> None:
    steady = RDMA_LINK_FLAP.splitlines()[0] + "\n"
    assert "ib.port-unstable" not in _found(steady * 3)
    ibstat = ("CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n"
              "\t\tPhysical state: LinkUp\n\t\tRate: 400\n")
    assert "ib.port-unstable" not in _found(ibstat + "\n" + ibstat)


def test_a_port_that_ends_down_is_not_active_not_unstable() -> None:
    down_last = "\n".join(RDMA_LINK_FLAP.splitlines()[:2]) + "\n"
    found = _found(down_last)
    assert "ib.port-not-active" in found and "ib.port-unstable" not in found


def test_perfquery_counters_map_to_the_kernels_names() -> None:
    [port] = parse_ibstat(PERFQUERY_ERRORS)
    assert (port.key, port.lid) == ("LID 41/1", 41)
    assert port.counters["port_rcv_errors"] == 2417
    assert port.counters["local_link_integrity_errors"] == 3
    assert port.counters["port_xmit_data"] == 98221311
    assert port.counter_lines["port_rcv_errors"] == "PortRcvErrors:...................2417"
    # values through the one converter: hex as perfquery -x may print it, no other digits
    assert perfquery_counter("PortRcvErrors", "0x1F") == ("port_rcv_errors", 31)
    assert perfquery_counter("PortRcvErrors", "2\u00b2") is None
    assert perfquery_counter("PortSelect", "1") is None


def test_perfquery_receive_errors_are_a_warning_with_the_perfquery_check() -> None:
    f = _found(PERFQUERY_ERRORS)["ib.port-errors"]
    assert f.severity is Severity.WARNING and f.blame is Blame.NODE
    assert "2417 port_rcv_errors" in f.title and "perfquery -x 41 1" in f.step
    assert f.evidence[0].lines[0].startswith("PortRcvErrors:")


def test_discards_are_congestion_not_a_fault_of_the_port() -> None:
    f = _found(PERFQUERY_CONGESTED)["ib.port-errors"]
    assert f.severity is Severity.INFO and f.action is Action.NONE


def test_symbol_errors_from_perfquery_keep_one_finding_for_the_link() -> None:
    text = PERFQUERY_ERRORS.replace("SymbolErrorCounter:..............0",
                                    "SymbolErrorCounter:..............65535")
    found = _found(text)
    assert "ib.symbol-errors" in found and "ib.port-errors" not in found
    assert found["ib.symbol-errors"].evidence[0].lines[0].startswith("SymbolErrorCounter")


def test_clean_perfquery_with_huge_traffic_is_calm(corpus) -> None:
    found = _found(corpus.sample("treydock-perfquery").text())
    assert not [f for f in found.values() if f.severity.rank >= Severity.WARNING.rank]


@pytest.mark.parametrize("line", [
    "mlx5_0 port 1 ==> ibp26s0 (Down)",
    "mlx5_0   port  1  ==>  ibp26s0        (Down)  # CX-7 1/8 infiniband",
    "0000:1a:00.0 mlx5_0 (MT4129 - MCX75310AAS-NEAT) NVIDIA ConnectX-7 fw 28.39.1002 port 1 "
    "==> ib0 (Down)",
])
def test_an_ipoib_netdev_down_says_nothing_of_the_link(line: str) -> None:
    found = _found(line + "\n")
    assert "ib.port-not-active" not in found
    assert found["ib.link-state-unshown"].severity is Severity.INFO


def test_a_roce_netdev_down_is_the_link_down() -> None:
    found = _found("mlx5_4 port 1 ==> enp65s0f0np0 (Down)\n")
    assert found["ib.port-not-active"].severity is Severity.WARNING


def test_a_pods_vf_down_is_its_link_state_configuration() -> None:
    f = _found(POD_VF)["ib.port-not-active"]
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert "linkState: enable" in f.step and "cable" not in f.step


@pytest.mark.parametrize(("text", "kind"), [
    (NO_PROVIDERS, "provider-missing"),
    ("libibverbs: Warning: couldn't open config directory '/etc/libibverbs.d'.\n"
     "No IB devices found\n", "provider-missing"),
    ("libibverbs: Warning: no userspace device-specific driver found for "
     "/sys/class/infiniband_verbs/uverbs0\n", "provider-missing"),
    (NO_UMAD, "umad-missing"),
    ("Failed to get IB devices list: Function not implemented\n", "uverbs-missing"),
    ("Fatal error:  device '*': sys files not found (/sys/class/infiniband/*/ports)\n",
     "no-device"),
])
def test_the_tools_no_device_complaints(text: str, kind: str) -> None:
    assert kind in {p.kind for p in parse_ib_problems(text)}
    assert parse_ibstat(text) == []
    assert [name for name, _ in detect(text)] == ["ibstat"]


def test_nvlsm_umad_lines_are_the_fabric_managers_not_the_tools() -> None:
    line = ("10.0.0.9: nvlsm: ibwarn: [15] umad_init: can't read ABI version from "
            "/sys/class/infiniband_mad/abi_version (No such file or directory): is ib_umad "
            "module loaded?\n")
    assert not parse_ib_problems(line)
    assert [name for name, _ in detect(line)] == ["fabricmanager_journal"]


@pytest.mark.parametrize(("text", "blame", "action", "words"), [
    (NO_PROVIDERS, Blame.CONFIG, Action.FIX_CONFIG, "ibverbs-providers"),
    (NO_UMAD, Blame.CONFIG, Action.FIX_CONFIG, "modprobe ib_umad"),
    (NO_DEVICE, Blame.UNKNOWN, Action.FIX_CONFIG, "lspci -d 15b3:"),
    ("Fatal error:  device '*': sys files not found (/sys/class/infiniband/*/ports)\n"
     + FIRMWARE_KERNEL, Blame.NODE, Action.FIX_SOFTWARE, "firmware"),
])
def test_no_device_says_who_acts(text: str, blame: Blame, action: Action, words: str) -> None:
    f = _found(text)["ib.no-devices"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, blame, action)
    assert words in f.step


def test_a_tool_that_lost_one_device_among_others_is_not_no_devices(corpus) -> None:
    assert "ib.no-devices" not in _found(corpus.sample("gpud-ibstat-azure").text())


def test_hca_firmware_lines_are_kernel_events() -> None:
    from gputriage.logscan.events import scan_driver_events
    events = scan_driver_events(FIRMWARE_KERNEL + "[  939.3] mlx4_en 0000:0d:00.0: LSO not "
                                "supported, please upgrade to later FW version to enable LSO\n")
    kinds = [e.kind for e in events]
    assert kinds == ["hca-firmware-old", "hca-firmware-old"]
    assert events[0].bus_id == "0000:81:00.0" and events[0].details["driver"] == "mlx4_core"

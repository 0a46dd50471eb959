"""Host-side kernel-log classes: PCIe AER tied to the GPU, EDAC / MCE / APEI hardware
errors, nvidia-peermem load failures, link flaps, GSP dumps without their Xid, GPU
library segfaults, /dev/kmsg records and colour escapes (own fixtures, inline)."""

from __future__ import annotations

import pytest

from gputriage.ingest.detect import detect
from gputriage.logscan import scan_text
from gputriage.model import Action, Blame, Severity
from gputriage.rules.kernel_log import judge_events


def findings(text: str):
    return list(judge_events(scan_text(text).events, {}))


def one(found, fid: str):
    hits = [f for f in found if f.id == fid]
    assert len(hits) == 1, [(f.id, f.title) for f in found]
    return hits[0]


AER_GPU = """\
[ 811.102] pcieport 0000:40:01.1: AER: Uncorrected (Fatal) error received: 0000:40:01.1
[ 811.103] pcieport 0000:40:01.1: PCIe Bus Error: severity=Uncorrected (Fatal), \
type=Transaction Layer, (Receiver ID)
[ 811.104] pcieport 0000:40:01.1:   device [1022:1483] error status/mask=00000020/00000000
[ 811.105] pcieport 0000:40:01.1:    [ 5] SDES                   (First)
[ 811.106] nvidia 0000:41:00.0: AER: can't recover (no error_detected callback)
[ 812.001] pcieport 0000:40:01.1: AER: device recovery failed
"""


def test_fatal_aer_on_the_gpu_link_is_one_gpu_finding():
    f = one(findings(AER_GPU), "kernel.pcie-aer")
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.DRAIN_AND_REPAIR,
                                               Blame.NODE)
    assert f.scope.kind == "gpu" and f.scope.pci_bus_id == "0000:41:00.0"
    assert "0000:40:01.1" in f.title and "SDES" in f.title and "cannot recover" in f.title
    assert any("error status/mask" in ln for ev in f.evidence for ln in ev.lines)


def test_aer_on_an_hca_is_named_and_a_warning():
    text = ("[ 5.0] mlx5_core 0000:b3:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), "
            "type=Transaction Layer, (Requester ID)\n"
            "[ 5.0] mlx5_core 0000:b3:00.0:   device [15b3:101b] error status/mask=00100000/"
            "00000000\n[ 5.0] mlx5_core 0000:b3:00.0:    [20] UnsupReq               (First)\n")
    f = one(findings(text), "kernel.pcie-aer")
    assert f.severity is Severity.WARNING and "HCA 0000:b3:00.0 [15b3:101b]" in f.title
    assert "UnsupReq" in f.title


def test_corrected_aer_on_a_port_stays_information():
    text = "[ 9.1] pcieport 0000:00:03.0: AER: Multiple Corrected error received: id=0018\n"
    assert one(findings(text), "kernel.pcie-aer").severity is Severity.INFO


@pytest.mark.parametrize(("text", "fid", "severity", "needle"), [
    ("[ 70.1] EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 "
     "slot:0 page:0x1234 offset:0x0 grain:32)\n", "kernel.host-memory-error", Severity.CRITICAL,
     "CPU_SrcID#0_MC#0_Chan#1_DIMM#0"),
    ("[ 70.1] EDAC MC1: 3 CE memory read error on DIMM_B2 (channel:0 slot:1 page:0x1)\n",
     "kernel.host-memory-error", Severity.INFO, "DIMM_B2"),
    ("[ 9.0] {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0\n"
     "[ 9.0] {1}[Hardware Error]: event severity: recoverable\n"
     "[ 9.0] {1}[Hardware Error]:  Error 0, type: recoverable\n"
     "[ 9.0] {1}[Hardware Error]:   section_type: memory error\n"
     "[ 9.0] {1}[Hardware Error]:   DIMM location: P1-DIMMA1\n",
     "kernel.host-memory-error", Severity.CRITICAL, "P1-DIMMA1"),
    ("[ 3.0] mce: [Hardware Error]: CPU 12: Machine Check: 0 Bank 5: be00000000800400\n"
     "[ 3.0] mce: [Hardware Error]: TSC 0 ADDR fef1a140\n", "kernel.hardware-error",
     Severity.CRITICAL, "uncorrectable"),
    ("[ 3.0] mce: [Hardware Error]: Machine check events logged\n", "kernel.hardware-error",
     Severity.INFO, "corrected"),
])
def test_host_hardware_errors(text, fid, severity, needle):
    f = one(findings(text), fid)
    assert f.severity is severity and needle in f.title and f.blame is Blame.NODE
    if severity is Severity.CRITICAL:
        assert f.action is Action.DRAIN_AND_REPAIR


@pytest.mark.parametrize("text", [
    "[Fri Feb 12 11:47:20 2021] nv_peer_mem: Unknown symbol ib_register_peer_memory_client "
    "(err 0)\n",
    "[ 8.1] nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client\n",
    "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n",
])
def test_peermem_load_failures_mean_no_gpudirect_rdma(text):
    f = one(findings(text), "kernel.peermem-load-failed")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_SOFTWARE,
                                               Blame.CONFIG)
    assert "GDRDMA" in f.explanation and "GPUDirect RDMA is off" in f.title


def _link(state: str, t: float, port: str = "0000:53:00.0 enp83s0f0np0") -> str:
    return f"[{t:12.6f}] mlx5_core {port}: Link {state}\n"


def test_link_flaps_counted_and_still_down_is_critical():
    text = "".join(_link(s, t) for s, t in (("up", 900), ("down", 4435), ("up", 4441),
                                            ("down", 4443), ("up", 4450), ("down", 4451)))
    f = one(findings(text), "kernel.link-down")
    assert f.severity is Severity.CRITICAL and "3 times" in f.title and f.scope.kind == "nic"


def test_link_flaps_that_recovered_are_a_warning_one_blip_information():
    text = "".join(_link(s, t) for s, t in (("up", 900), ("down", 1000), ("up", 1005),
                                            ("down", 2000), ("up", 2004)))
    f = one(findings(text), "kernel.link-flaps")
    assert f.severity is Severity.WARNING and "2 times" in f.title
    blip = "".join(_link(s, t) for s, t in (("up", 900), ("down", 1000), ("up", 1005)))
    assert one(findings(blip), "kernel.link-flaps").severity is Severity.INFO


def test_link_down_during_nic_init_is_not_a_fault():
    booted = _link("down", 5.2) + _link("up", 21.1)
    assert not [f for f in findings(booted) if f.id.startswith("kernel.link")]
    never = one(findings(_link("down", 5.2)), "kernel.link-down-at-boot")
    assert never.severity is Severity.INFO


def test_carrier_loss_per_interface_and_ib_port_states():
    text = ("Dec  6 19:25:33 n1 systemd-networkd[2385]: eth0: Lost carrier\n"
            "Dec  6 19:25:33 n1 systemd-networkd[2385]: ib1: Lost carrier\n")
    found = [f for f in findings(text) if f.id == "kernel.link-down"]
    assert sorted(f.scope.name for f in found) == ["eth0", "ib1"]
    ports = ("[ 900.0] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE\n"
             "[ 950.0] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN\n")
    assert "mlx5_3" in one(findings(ports), "kernel.link-down").title


def test_netdev_watchdog():
    text = "[ 77.0] NETDEV WATCHDOG: ens1f0 (mlx5_core): transmit queue 3 timed out\n"
    f = one(findings(text), "kernel.netdev-tx-timeout")
    assert f.severity is Severity.WARNING and "ens1f0" in f.title


def test_gsp_history_dump_without_its_xid_is_a_gsp_timeout():
    text = ("[ 2638.641531] NVRM: GPU0 GSP RPC buffer contains function 76 (GSP_RM_CONTROL)\n"
            "[ 2638.641541] NVRM: GPU0 RPC history (CPU -> GSP):\n"
            "[ 2638.641549] NVRM:      0    76   GSP_RM_CONTROL        0x2080a097 0x490\n"
            "[ 2638.641608] NVRM: GPU0 RPC event history (CPU <- GSP):\n")
    f = one(findings(text), "kernel.gsp-rpc-timeout")
    assert f.severity is Severity.CRITICAL and f.occurrences.count == 1
    banner = "[ 9.0] NVRM: GPU 0000:9b:00.0: _kgspLogXid119: ***** GSP Timeout *****\n"
    assert one(findings(banner), "kernel.gsp-rpc-timeout").scope.pci_bus_id == "0000:9b:00.0"
    with_xid = banner + ("[ 9.1] NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, Timeout "
                         "waiting for RPC from GPU0 GSP!\n")
    assert not [f for f in findings(with_xid) if f.id == "kernel.gsp-rpc-timeout"]


def test_segfault_names_the_library_and_is_an_echo_after_a_lost_gpu():
    crash = ("[ 50.0] python[881]: segfault at 0 ip 00007f sp 00007f error 4 in "
             "libnccl.so.2[7f00+e97000]\n")
    f = one(findings(crash), "kernel.segfault-in-gpu-library")
    assert "libnccl.so.2" in f.title and f.blame is Blame.JOB
    lost = "[ 40.0] NVRM: GPU at 0000:01:00.0 has fallen off the bus.\n"
    assert not [f for f in findings(lost + crash) if f.id.startswith("kernel.segfault")]


def test_kmsg_records_and_colour_escapes_are_read():
    kmsg = ("6,100,5000000,-;usb 1-1: new device\n"
            "3,101,6000000,-;pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: "
            "0000:03:00.0\n"
            "4,102,6100000,-;NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.\n")
    assert [n for n, _ in detect(kmsg)] == ["kernel_log"]
    assert [e.kind for e in scan_text(kmsg).events] == ["pcie-aer", "xid", "fallen-off-bus"]
    colour = ("\x1b[32m[  811.1]\x1b[0m \x1b[33mNVRM:\x1b[0m \x1b[1;31mXid (PCI:0000:03:00): "
              "79, GPU has fallen off the bus.\x1b[0m\n"
              "Dec  6 19:25:33 n1 kernel: \x1b[0;1;31mmlx5_core 0000:53:00.0 ib0: Link down"
              "\x1b[0m\n")
    assert [n for n, _ in detect(colour)] == ["kernel_log"]
    events = scan_text(colour).events
    assert [e.kind for e in events] == ["xid", "fallen-off-bus", "mlx5-link"]
    assert "\x1b" not in events[0].line and events[2].details["interface"] == "ib0"


def test_dmesg_human_and_bare_device_lines_are_kernel_logs():
    human = ("[Feb12 11:47] nvidia 0000:03:00.0: AER: can't recover (no error_detected "
             "callback)\n[  +0.000008] pcieport 0000:00:03.0: AER: device recovery failed\n")
    bare = "pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0\n"
    assert [n for n, _ in detect(human)] == ["kernel_log"]
    assert [n for n, _ in detect(bare)] == ["kernel_log"]
    assert scan_text(human).events[0].bus_id == "0000:03:00.0"

"""Kernel-log classes read from pasted fragments: the driver refusing a GPU at probe time
(an unmapped BAR, the open module on a GPU without GSP, a legacy GPU), failing disks,
container network churn, a contained ECC error under its Xid 48, harmless nvidia-peermem
teardown, nv_peer_mem built against other symbols, and Xid 31's MMU fault details. Each
class is tried in several framings (dmesg, dmesg -T, journal, syslog, no prefix)."""

from __future__ import annotations

import pytest
from golden import flat

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.logscan import scan_text
from gputriage.model import Action, Blame, Severity

BAR_DMESG = (
    "[83260.063553] NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\n"
    "               NVRM: BAR1 is 0M @ 0x0 (PCI:0000:14:00.0)\n"
    "[83260.063557] nvidia: probe of 0000:14:00.0 failed with error -1\n"
    "[83260.106438] NVRM: The NVIDIA probe routine failed for 1 device(s).\n")
# a bare-metal H100 box whose BIOS left 4G decoding off: journal framing, every line stamped
BAR_JOURNAL = (
    "2025-03-02T10:11:12+0000 gpu-b07 kernel: NVRM: This PCI I/O region assigned to your "
    "NVIDIA device is invalid:\n"
    "2025-03-02T10:11:12+0000 gpu-b07 kernel: NVRM: BAR1 is 0M @ 0x0 (PCI:0000:9a:00.0)\n"
    "2025-03-02T10:11:12+0000 gpu-b07 kernel: nvidia 0000:9a:00.0: probe with driver nvidia "
    "failed with error -1\n"
    "2025-03-02T10:11:12+0000 gpu-b07 kernel: NVRM: None of the NVIDIA devices were "
    "initialized.\n")
# the old driver's wording: a 64-bit BAR above 4 GB, and "graphics adapters"
BAR_OLD = (
    "[   11.903867] NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\n"
    "[   11.903868] NVRM: BAR1 is 256M @ 0x00000000 (PCI:0000:00:10.0)\n"
    "[   11.903873] NVRM: This is a 64-bit BAR mapped above 4GB by the system BIOS or\n"
    "[   11.903893] nvidia: probe of 0000:00:10.0 failed with error -1\n"
    "[   11.903954] NVRM: None of the NVIDIA graphics adapters were initialized!\n")
OPEN_NO_GSP = (
    "Aug 14 09:10:11 ws kernel: NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1b80)\n"
    "Aug 14 09:10:11 ws kernel: NVRM: installed in this system is not supported by open\n"
    "Aug 14 09:10:11 ws kernel: NVRM: nvidia.ko because it does not include the required GPU\n"
    "Aug 14 09:10:11 ws kernel: NVRM: System Processor (GSP).\n"
    "Aug 14 09:10:11 ws kernel: NVRM: Please see the 'Open Linux Kernel Modules' and 'GSP\n"
    "Aug 14 09:10:11 ws kernel: NVRM: Firmware' sections in the driver README, available on\n"
    "Aug 14 09:10:11 ws kernel: NVRM: the Linux graphics driver download page at\n"
    "Aug 14 09:10:11 ws kernel: NVRM: www.nvidia.com.\n"
    "Aug 14 09:10:11 ws kernel: nvidia 0000:01:00.0: probe with driver nvidia failed with "
    "error -1\n"
    "Aug 14 09:10:11 ws kernel: NVRM: The NVIDIA probe routine failed for 1 device(s).\n")
LEGACY = (
    "[Sat Mar  1 10:00:01 2026] NVRM: The NVIDIA Tesla V100-SXM2-32GB GPU installed in this "
    "system is\n"
    "[Sat Mar  1 10:00:01 2026] NVRM:  supported through the NVIDIA 580.xx Legacy drivers. "
    "Please\n"
    "[Sat Mar  1 10:00:01 2026] NVRM:  visit http://www.nvidia.com/object/unix.html for more\n"
    "[Sat Mar  1 10:00:01 2026] NVRM:  information.  The 590.44.01 NVIDIA driver will "
    "ignore\n"
    "[Sat Mar  1 10:00:01 2026] NVRM:  this GPU.  Continuing probe...\n"
    "[Sat Mar  1 10:00:01 2026] nvidia 0000:18:00.0: probe with driver nvidia failed with "
    "error -1\n")
PROBE_ONLY = ("[    5.638722] nvidia 0000:67:00.0: probe with driver nvidia failed with "
              "error -1\n[    5.858636] NVRM: The NVIDIA probe routine failed for 1 device(s).\n")
DISK = (
    "[470907.282230] blk_update_request: I/O error, dev nvme2n1, sector 6442712256 op "
    "0x1:(WRITE) flags 0x1000 phys_seg 8 prio class 0\n"
    "[470911.895805] XFS (md127): log I/O error -5\n")
DISK_NEW_KERNEL = (  # 5.14+: no blk_update_request prefix; an ext4 volume
    "2025-06-01T03:04:05.123456+00:00 gpu-03 kernel: I/O error, dev sdb, sector 2048 op "
    "0x1:(WRITE) flags 0x800 phys_seg 1 prio class 2\n"
    "2025-06-01T03:04:05.223456+00:00 gpu-03 kernel: Aborting journal on device sdb1-8.\n"
    "2025-06-01T03:04:05.323456+00:00 gpu-03 kernel: EXT4-fs (sdb1): Remounting filesystem "
    "read-only\n")
DISK_READS = (
    "[ 8113.901245] Buffer I/O error on dev nvme0n1p1, logical block 0, async page read\n"
    "[ 8113.911245] critical medium error, dev sda, sector 9912 op 0x0:(READ) flags 0x0 "
    "phys_seg 1 prio class 0\n")
DISK_NVME_GONE = (
    "[91222.015566] nvme nvme0: controller is down; will reset: CSTS=0xffffffff, "
    "PCI_STATUS=0xffff\n"
    "[91222.512345] nvme nvme0: Removing after probe failure status: -19\n")
VETH = (
    "2025-01-02T15:20:12+0800 a800-77 kernel: docker0: port 1(vetha17b2cc) entered disabled "
    "state\n"
    "2025-01-02T15:20:12+0800 a800-77 kernel: device vetha17b2cc left promiscuous mode\n"
    "2025-01-02T15:20:12+0800 a800-77 kernel: IPv6: ADDRCONF(NETDEV_UP): veth9d4400a: link is "
    "not ready\n"
    "Dec  6 19:25:33 gpu1 systemd-networkd[2385]: veth1234abc: Lost carrier\n"
    "Dec  6 19:25:34 gpu1 systemd-networkd[2385]: cali12345: Lost carrier\n"
    "Dec  6 19:25:34 gpu1 systemd-networkd[2385]: flannel.1: Lost carrier\n"
    "Dec  6 19:25:35 gpu1 systemd-networkd[2385]: br-3f1c2a9d8e77: Lost carrier\n")
XID48_94 = (
    "2024-11-15T12:02:03,470068+00:00 NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', "
    "name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the "
    "framebuffer at physAddr 0x12bac1c3e0 partition 2, subpartition 1.\n"
    "2024-11-15T12:02:03,498753+00:00 NVRM: Xid (PCI:0000:19:00): 63, pid='<unknown>', "
    "name=<unknown>, Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset "
    "gpu to activate.\n"
    "2024-11-15T12:02:03,521616+00:00 NVRM: Xid (PCI:0000:19:00): 94, pid=1248209, "
    "name=python3.10, Ch 00000008\n"
    "2024-11-15T12:02:03,552642+00:00 NVRM: Xid (PCI:0000:19:00): 94, pid=1248209, "
    "name=python3.10, Ch 00000009\n")
PEERMEM_TEARDOWN = "".join(
    f"[25033.{266922 + i:06d}] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected "
    "invalid context, skipping further processing\n" for i in range(40))
NV_PEER_MEM = (
    "[  366.264584] nv_peer_mem: disagrees about version of symbol nvidia_p2p_get_pages\n"
    "[  366.264587] nv_peer_mem: Unknown symbol nvidia_p2p_get_pages (err -22)\n"
    "[  366.264610] nv_peer_mem: disagrees about version of symbol "
    "ib_register_peer_memory_client\n"
    "[  366.264611] nv_peer_mem: Unknown symbol ib_register_peer_memory_client (err -22)\n")
XID31_HOST = (
    "[22859.081860] NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030, "
    "intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ 0x10_00200000. Fault is "
    "of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n"
    "[23203.142515] NVRM: Xid (PCI:0000:01:00): 31, pid=14566, name=python, Ch 00000030, "
    "intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ 0x10_00200000. Fault is "
    "of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n")

# the rule fires on these sources (tests/test_conformance.py runs each case)
RULE_CASES = {
    "driver.probe": [({"kernel_log": BAR_DMESG}, "driver.bar-unmapped"),
                     ({"kernel_log": OPEN_NO_GSP}, "driver.gpu-unsupported"),
                     ({"kernel_log": PROBE_ONLY}, "driver.probe-failed")],
}


def _findings(text: str, tmp_path):
    path = tmp_path / "paste.txt"
    path.write_text(text)
    return flat(analyze(load_input(str(path))).findings)


def _one(found, fid):
    hits = [f for f in found if f.id == fid]
    assert len(hits) == 1, [(f.id, f.severity.value) for f in found]
    return hits[0]


def _loud(found):
    return [(f.id, f.severity.value) for f in found if f.severity.rank >= Severity.WARNING.rank]


@pytest.mark.parametrize("text, bus, bar", [
    (BAR_DMESG, "0000:14:00.0", "BAR1 is 0M"),
    (BAR_JOURNAL, "0000:9a:00.0", "BAR1 is 0M"),
    (BAR_OLD, "0000:00:10.0", "BAR1 is 256M"),
])
def test_an_unmapped_bar_is_the_platform_configuration_not_the_gpu(text, bus, bar, tmp_path):
    found = _findings(text, tmp_path)
    f = _one(found, "driver.bar-unmapped")
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.FIX_CONFIG,
                                               Blame.CONFIG)
    assert f.scope.pci_bus_id == bus and bar in f.title
    assert "64bitMMIO" in f.explanation and "Above 4G" in f.explanation
    assert not [x for x in found if x.id.startswith(("xid.", "driver.gpu-init"))]
    assert not [x for x in found if x.id == "driver.probe-failed"], "the cause says it"
    assert any("probe" in ln for e in f.evidence for ln in e.lines)
    assert "64bitMMIO" in (f.step or "")
    if "above 4GB" in text:
        assert "above 4 GB" in f.explanation


def test_the_open_module_on_a_gpu_without_gsp_is_software_not_hardware(tmp_path):
    f = _one(_findings(OPEN_NO_GSP, tmp_path), "driver.gpu-unsupported")
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.FIX_SOFTWARE,
                                               Blame.CONFIG)
    assert "10de:1b80" in f.title and "GSP" in f.title and f.scope.pci_bus_id == "0000:01:00.0"
    assert "proprietary" in (f.step or "")


def test_a_gpu_left_to_a_legacy_branch_names_the_branch(tmp_path):
    f = _one(_findings(LEGACY, tmp_path), "driver.gpu-unsupported")
    assert "580.xx" in f.title and "590.44.01" in f.title and "V100" in f.title
    assert f.action is Action.FIX_SOFTWARE and f.blame is Blame.CONFIG
    assert "580.xx legacy driver" in (f.step or "")


def test_a_probe_failure_without_its_cause_is_not_a_drain(tmp_path):
    f = _one(_findings(PROBE_ONLY, tmp_path), "driver.probe-failed")
    assert f.severity is Severity.WARNING and f.blame is Blame.UNKNOWN
    assert f.scope.pci_bus_id == "0000:67:00.0"


@pytest.mark.parametrize("text, device, critical", [
    (DISK, "nvme2n1", True), (DISK_NEW_KERNEL, "sdb", True),
    (DISK_NVME_GONE, "nvme0", True), (DISK_READS, "nvme0n1", False),
])
def test_a_failing_disk_is_the_node_not_its_gpus(text, device, critical, tmp_path):
    found = _findings(text, tmp_path)
    f = _one(found, "kernel.storage-error")
    assert f.blame is Blame.NODE and f.scope.name == device
    assert (f.severity, f.action) == ((Severity.CRITICAL, Action.DRAIN_AND_REPAIR) if critical
                                      else (Severity.WARNING, Action.PLAN_REPAIR))
    assert not [x for x in found if x.id.startswith(("xid.", "driver.", "gpu."))]


def test_disk_lines_name_the_disk_and_volume(tmp_path):
    f = _one(_findings(DISK + DISK_NEW_KERNEL, tmp_path), "kernel.storage-error")
    for part in ("nvme2n1", "XFS on md127", "sdb", "ext4"):
        assert part in f.title, f.title
    assert "nvme smart-log /dev/nvme2n1" in (f.step or "")


def test_routine_mount_lines_are_not_storage_errors():
    text = ("[    5.1] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.\n"
            "[    5.2] XFS (md127): Mounting V5 Filesystem\n"
            "[    5.3] XFS (md127): Ending clean mount\n")
    assert not [e for e in scan_text(text).events if e.kind == "storage-error"]


def test_an_empty_virtual_floppy_or_cd_drive_is_no_failing_disk(tmp_path):
    # a VM probing its virtual floppy and CD-ROM without media, old and new kernels
    text = ("[    3.456789] blk_update_request: I/O error, dev fd0, sector 0\n"
            "[    3.456800] Buffer I/O error on dev fd0, logical block 0, async page read\n"
            "[   12.100000] I/O error, dev sr0, sector 0 op 0x0:(READ) flags 0x80700 phys_seg 1 "
            "prio class 0\n"
            "[   12.200000] Buffer I/O error on dev sr0, logical block 0, async page read\n")
    assert not [e for e in scan_text(text).events if e.kind == "storage-error"]
    assert not _loud(_findings(text, tmp_path))
    disk = text.replace("fd0", "sda").replace("sr0", "sdb")
    assert _one(_findings(disk, tmp_path), "kernel.storage-error").severity is Severity.WARNING


def test_container_network_churn_is_healthy(tmp_path):
    found = _findings(VETH, tmp_path)
    assert not _loud(found)
    # a physical port losing its carrier is still a link down
    real = _findings("Dec  6 19:25:33 gpu1 systemd-networkd[2385]: ib1: Lost carrier\n",
                     tmp_path)
    assert _one(real, "kernel.link-down").severity is Severity.CRITICAL
    for virtual in ("podman0", "lxdbr0", "CloudflareWARP", "lo:1"):  # NCCL's list too
        assert not _loud(_findings(f"Dec  6 19:25:33 gpu1 kernel: {virtual}: Lost carrier\n",
                                   tmp_path))


def test_a_contained_ecc_error_folds_under_its_double_bit_error(tmp_path):
    analyzed = analyze(load_input(str(_write(tmp_path, XID48_94))))
    top = {f.id: f for f in analyzed.findings}
    assert "xid.94" not in top and top["xid.48"].severity is Severity.CRITICAL
    assert {c.id for c in top["xid.48"].consequences} >= {"xid.63", "xid.94"}
    assert "python3.10 pid 1248209" in top["xid.48"].explanation


def test_a_contained_ecc_error_alone_restarts_the_job_and_resets_later(tmp_path):
    alone = XID48_94.split("\n", 2)[2]
    f = _one(_findings(alone, tmp_path), "xid.94")
    assert f.action is Action.RESTART_JOB
    assert "killed" in (f.step or "") and "application's" not in (f.step or "")
    assert "ROW_REMAPPER" in (f.step or "")


def test_peermem_invalid_context_teardown_stays_info(tmp_path):
    f = _one(_findings(PEERMEM_TEARDOWN, tmp_path), "kernel.peermem-invalid-context")
    assert f.severity is Severity.INFO and "R560" in f.explanation


def test_nv_peer_mem_built_against_other_symbols_names_both_sides(tmp_path):
    f = _one(_findings(NV_PEER_MEM, tmp_path), "kernel.peermem-load-failed")
    assert f.blame is Blame.CONFIG and f.action is Action.FIX_SOFTWARE
    assert "nvidia_p2p_" in f.explanation and "ib_core" in f.explanation
    assert "nv_peer_mem" in (f.step or "") and "installed NVIDIA driver" in (f.step or "")
    ib_only = _one(_findings(NV_PEER_MEM.replace("nvidia_p2p_get_pages", "ib_umem_get"),
                             tmp_path), "kernel.peermem-load-failed")
    assert "different ib_core" in ib_only.explanation


def test_xid31_host_engine_faults_point_at_the_program_and_its_stack(tmp_path):
    f = _one(_findings(XID31_HOST, tmp_path), "xid.31")
    assert f.blame is Blame.JOB and f.severity is Severity.WARNING
    assert "HOST0" in f.explanation and "0x10_00200000" in f.explanation
    assert "not a failing GPU" in f.explanation
    assert (f.step or "").startswith("Do not resubmit python unchanged")


def test_multi_line_messages_join_whatever_their_stamps():
    """The driver prints a message's lines microseconds apart: dmesg uptimes, ISO
    fractions and syslog seconds all join; a gap of seconds does not."""
    for text in (LEGACY, BAR_JOURNAL, BAR_OLD,
                 LEGACY.replace("[Sat Mar  1 10:00:01 2026] ", "[  12.345670] ")):
        kinds = [e.kind for e in scan_text(text).events]
        assert kinds[0] in ("gpu-unsupported", "bar-invalid"), kinds
    apart = ("[  100.000000] NVRM: This PCI I/O region assigned to your NVIDIA device is "
             "invalid:\n[  107.000000] NVRM: BAR1 is 0M @ 0x0 (PCI:0000:14:00.0)\n")
    (ev,) = [e for e in scan_text(apart).events if e.kind == "bar-invalid"]
    assert "bar" not in ev.details


def _write(tmp_path, text: str):
    path = tmp_path / "paste.txt"
    path.write_text(text)
    return path


def test_steps_name_the_host_the_logs_lines_name(tmp_path):
    """A journal of gpu-b07 drains gpu-b07, not "<node>" (issue 32); lines of two hosts
    name no one."""
    lost = ("Dec  6 19:25:33 at7tj000004 systemd-networkd[2385]: ib1: Lost carrier\n"
            "Dec  6 19:25:34 at7tj000004 kernel: docker0: port 1(veth9d4400a) entered "
            "disabled state\n")
    down = _one(_findings(lost, tmp_path), "kernel.link-down")
    assert "scontrol update nodename=at7tj000004 state=drain" in (down.step or "")
    two = lost.replace("34 at7tj000004", "34 at7tj000005")
    down = _one(_findings(two, tmp_path), "kernel.link-down")
    assert "at7tj00000" not in (down.step or "") and "<node>" in (down.step or "")


def test_the_drivers_summary_is_quoted_once(tmp_path):
    second = BAR_DMESG.replace("14:00.0", "1c:00.0").replace("83260.0635", "83260.0735")
    two = second.split("[83260.106438]")[0] + BAR_DMESG.replace("1 device(s)", "2 device(s)")
    (f,) = [x for x in _findings(two, tmp_path) if x.id == "driver.bar-unmapped"]
    lines = [ln for e in f.evidence for ln in e.lines]
    assert len(lines) == len(set(lines)) and any("2 device(s)" in ln for ln in lines)
    probes = PROBE_ONLY.replace("67:00.0", "68:00.0") + PROBE_ONLY.split("\n")[0] + "\n"
    lines = [ln for x in _findings(probes, tmp_path) for e in x.evidence for ln in e.lines]
    assert len(lines) == len(set(lines))

"""Renderers for what nvidia-smi and NVML say about a simulated host.

Each function returns the exact text (or JSON document) the real tool gives
for the modelled state: ``nvidia-smi -q -x`` (R550 layout), the >=530 summary
table, ``topo -m``, ``nvlink -s`` / ``-e`` and the collector's NVML JSON.
"""

from __future__ import annotations

import json
from xml.sax.saxutils import escape

from gputriage.scenarios.model import Gpu, GpuProcess, Host

PRODUCT = "NVIDIA H100 80GB HBM3"
VBIOS = "96.00.74.00.01"
MEM_TOTAL_MIB = 81559
NVLINK_COUNT = 18
NVLINK_GBPS = "26.562 GB/s"
ECC_KEYS = ("sram_correctable", "sram_uncorrectable_parity", "sram_uncorrectable_secded",
            "dram_correctable", "dram_uncorrectable")


def _yes(flag: bool) -> str:
    return "Yes" if flag else "No"


def _xml(name: str, value: str | list, depth: int, out: list[str]) -> None:
    pad = "\t" * depth
    if isinstance(value, list):
        out.append(f"{pad}<{name}>")
        for child, child_value in value:
            _xml(child, child_value, depth + 1, out)
        out.append(f"{pad}</{name}>")
    else:
        out.append(f"{pad}<{name}>{escape(value)}</{name}>")


def _gpu_xml(host: Host, g: Gpu) -> list:
    """The children of one ``<gpu>`` element, in the R550 order."""
    reasons = ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
               "hw_thermal_slowdown", "hw_power_brake_slowdown", "sync_boost",
               "sw_thermal_slowdown", "display_clocks_setting"]
    volatile = [(k, str(g.ecc_volatile.get(k, 0))) for k in ECC_KEYS]
    aggregate = [(k, str(g.ecc_aggregate.get(k, 0))) for k in ECC_KEYS]
    hist = dict(zip(("max", "high", "partial", "low", "none"), g.remap_histogram, strict=True))
    registered = g.fabric_state == "Completed"
    bus = g.bus_upper
    return [
        ("product_name", PRODUCT), ("product_brand", "NVIDIA"),
        ("product_architecture", "Hopper"), ("display_mode", "Enabled"),
        ("display_active", "Disabled"),
        ("persistence_mode", "Enabled" if host.persistenced_active else "Disabled"),
        ("addressing_mode", "None"),
        ("mig_mode", [("current_mig", "Disabled"), ("pending_mig", "Disabled")]),
        ("mig_devices", "None"),
        ("accounting_mode", "Disabled"), ("accounting_mode_buffer_size", "4000"),
        ("driver_model", [("current_dm", "N/A"), ("pending_dm", "N/A")]),
        ("serial", g.serial), ("uuid", g.uuid), ("minor_number", str(g.index)),
        ("vbios_version", VBIOS), ("multigpu_board", "No"),
        ("board_id", f"0x{int(g.bus[5:7], 16) << 8:x}"),
        ("board_part_number", "692-2G520-0200-000"), ("gpu_part_number", "2330-885-A1"),
        ("gpu_fru_part_number", "N/A"), ("gpu_module_id", str(g.module_id)),
        ("inforom_version", [("img_version", "G520.0200.00.05"), ("oem_object", "2.1"),
                             ("ecc_object", "7.16"), ("pwr_object", "N/A")]),
        ("inforom_bbx_flush", [("latest_timestamp", "N/A"), ("latest_duration", "N/A")]),
        ("gpu_operation_mode", [("current_gom", "N/A"), ("pending_gom", "N/A")]),
        ("c2c_mode", "Disabled"),
        ("gpu_virtualization_mode", [("virtualization_mode", "None"),
                                     ("host_vgpu_mode", "N/A"),
                                     ("vgpu_heterogeneous_mode", "N/A")]),
        ("gpu_reset_status", [("reset_required", _yes(g.reset_required)),
                              ("drain_and_reset_recommended", "No")]),
        ("gsp_firmware_version", host.kernel_module_version),
        ("ibmnpu", [("relaxed_ordering_mode", "N/A")]),
        ("pci", [
            ("pci_bus", bus[9:11]), ("pci_device", bus[12:14]), ("pci_domain", "0000"),
            ("pci_base_class", "3"), ("pci_sub_class", "2"),
            ("pci_device_id", "233010DE"), ("pci_bus_id", bus),
            ("pci_sub_system_id", "16C110DE"),
            ("pci_gpu_link_info", [
                ("pcie_gen", [("max_link_gen", str(g.pcie_gen_max)),
                              ("current_link_gen", str(g.pcie_gen)),
                              ("device_current_link_gen", str(g.pcie_gen)),
                              ("max_device_link_gen", "5"),
                              ("max_host_link_gen", "5")]),
                ("link_widths", [("max_link_width", f"{g.pcie_width_max}x"),
                                 ("current_link_width", f"{g.pcie_width}x")]),
            ]),
            ("pci_bridge_chip", [("bridge_chip_type", "N/A"), ("bridge_chip_fw", "N/A")]),
            ("replay_counter", str(g.replays)), ("replay_rollover_counter", "0"),
            ("tx_util", "0 KB/s"), ("rx_util", "0 KB/s"),
            ("atomic_caps_inbound", "N/A"), ("atomic_caps_outbound", "N/A"),
        ]),
        ("fan_speed", "N/A"), ("performance_state", g.perf_state),
        ("clocks_event_reasons", [
            (f"clocks_event_reason_{r}", "Active" if r in g.clock_events else "Not Active")
            for r in reasons]),
        ("sparse_operation_mode", "Disabled"),
        ("fb_memory_usage", [("total", f"{MEM_TOTAL_MIB} MiB"), ("reserved", "454 MiB"),
                             ("used", f"{g.memory_used_mib} MiB"),
                             ("free", f"{MEM_TOTAL_MIB - 454 - g.memory_used_mib} MiB")]),
        ("bar1_memory_usage", [("total", "131072 MiB"), ("used", "1 MiB"),
                               ("free", "131071 MiB")]),
        ("cc_protected_memory_usage", [("total", "0 MiB"), ("used", "0 MiB"),
                                       ("free", "0 MiB")]),
        ("compute_mode", "Default"),
        ("utilization", [("gpu_util", f"{g.utilization_pct} %"),
                         ("memory_util", f"{g.memory_util_pct} %"),
                         ("encoder_util", "0 %"), ("decoder_util", "0 %"),
                         ("jpeg_util", "0 %"), ("ofa_util", "0 %")]),
        ("encoder_stats", [("session_count", "0"), ("average_fps", "0"),
                           ("average_latency", "0")]),
        ("fbc_stats", [("session_count", "0"), ("average_fps", "0"),
                       ("average_latency", "0")]),
        ("ecc_mode", [("current_ecc", "Enabled"), ("pending_ecc", "Enabled")]),
        ("ecc_errors", [
            ("volatile", volatile),
            ("aggregate", [*aggregate, ("sram_threshold_exceeded", "No")]),
            ("aggregate_uncorrectable_sram_sources", [
                ("sram_l2", "0"), ("sram_sm", "0"), ("sram_microcontroller", "0"),
                ("sram_pcie", "0"), ("sram_other", "0")]),
        ]),
        ("retired_pages", [
            ("multiple_single_bit_retirement", [("retired_count", "N/A"),
                                                ("retired_pagelist", "N/A")]),
            ("double_bit_retirement", [("retired_count", "N/A"),
                                       ("retired_pagelist", "N/A")]),
            ("pending_blacklist", "N/A"), ("pending_retirement", "N/A"),
        ]),
        ("remapped_rows", [
            ("remapped_row_corr", str(g.remapped_corr)),
            ("remapped_row_unc", str(g.remapped_unc)),
            ("remapped_row_pending", _yes(g.remap_pending)),
            ("remapped_row_failure", _yes(g.remap_failure)),
            ("row_remapper_histogram", [
                (f"row_remapper_histogram_{k}", f"{n} bank(s)") for k, n in hist.items()]),
        ]),
        # Hopper on R550 reports temperatures relative to T.Limit
        ("temperature", [
            ("gpu_temp", f"{g.temp_c} C"), ("gpu_temp_tlimit", f"{87 - g.temp_c} C"),
            ("gpu_temp_max_tlimit_threshold", "-8 C"),
            ("gpu_temp_slow_tlimit_threshold", "-2 C"),
            ("gpu_temp_max_gpu_tlimit_threshold", "0 C"),
            ("gpu_target_temperature", "N/A"), ("memory_temp", f"{g.temp_c + 6} C"),
            ("gpu_temp_max_mem_tlimit_threshold", "0 C")]),
        ("supported_gpu_target_temp", [("gpu_target_temp_min", "N/A"),
                                       ("gpu_target_temp_max", "N/A")]),
        ("gpu_power_readings", [
            ("power_state", g.perf_state), ("power_draw", f"{g.power_w:.2f} W"),
            ("current_power_limit", "700.00 W"), ("requested_power_limit", "700.00 W"),
            ("default_power_limit", "700.00 W"), ("min_power_limit", "200.00 W"),
            ("max_power_limit", "700.00 W")]),
        ("gpu_memory_power_readings", [("power_draw", f"{g.power_w * 0.66:.2f} W")]),
        ("module_power_readings", [
            ("power_state", g.perf_state), ("power_draw", "N/A"),
            ("current_power_limit", "N/A"),
            ("requested_power_limit", "N/A"), ("default_power_limit", "N/A"),
            ("min_power_limit", "N/A"), ("max_power_limit", "N/A")]),
        ("clocks", [("graphics_clock", f"{g.sm_clock_mhz} MHz"),
                    ("sm_clock", f"{g.sm_clock_mhz} MHz"),
                    ("mem_clock", "2619 MHz"), ("video_clock", "765 MHz")]),
        ("applications_clocks", [("graphics_clock", "1980 MHz"), ("mem_clock", "2619 MHz")]),
        ("default_applications_clocks", [("graphics_clock", "1980 MHz"),
                                         ("mem_clock", "2619 MHz")]),
        ("deferred_clocks", [("mem_clock", "N/A")]),
        ("max_clocks", [("graphics_clock", "1980 MHz"), ("sm_clock", "1980 MHz"),
                        ("mem_clock", "2619 MHz"), ("video_clock", "1545 MHz")]),
        ("max_customer_boost_clocks", [("graphics_clock", "1980 MHz")]),
        ("clock_policy", [("auto_boost", "N/A"), ("auto_boost_default", "N/A")]),
        ("voltage", [("graphics_volt", "670.000 mV")]),
        ("fabric", [("state", g.fabric_state), ("status", g.fabric_status),
                    ("cliqueId", "0" if registered else "N/A"),
                    ("clusterUuid", "00000000-0000-0000-0000-000000000000" if registered
                     else "N/A"),
                    ("health", [("bandwidth", "N/A")])]),
        ("supported_clocks", [("supported_mem_clock", [
            ("value", "2619 MHz"), ("supported_graphics_clock", "1980 MHz"),
            ("supported_graphics_clock", "1965 MHz"), ("supported_graphics_clock", "345 MHz")])]),
        ("processes", [("process_info", [
            ("gpu_instance_id", "N/A"), ("compute_instance_id", "N/A"),
            ("pid", str(p.pid)), ("type", "C"), ("process_name", p.name),
            ("used_memory", f"{p.used_mib} MiB")]) for p in g.processes]),
        ("accounted_processes", []),
    ]


def _timestamp(host: Host) -> str:
    return host.now.strftime("%a %b %d %H:%M:%S %Y")


def nvidia_smi_q_xml(host: Host) -> str:
    """``nvidia-smi -q -x`` (DTD v12, as R550 prints it)."""
    out = ['<?xml version="1.0" ?>',
           '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
           "<nvidia_smi_log>"]
    for name, value in (("timestamp", _timestamp(host)),
                        ("driver_version", host.userspace_version),
                        ("cuda_version", host.cuda_version),
                        ("attached_gpus", str(len(host.gpus)))):
        _xml(name, value, 1, out)
    for g in host.gpus:
        body: list[str] = []
        for name, value in _gpu_xml(host, g):
            _xml(name, value, 2, body)
        out.append(f'\t<gpu id="{g.bus_upper}">')
        out.extend(body)
        out.append("\t</gpu>")
        out.append("")
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


def _rule(fill: str, left: str, right: str) -> str:
    """A horizontal rule of the 3-column box (41/24/22 wide)."""
    return left + "+".join(fill * w for w in (41, 24, 22)) + right


def _cells(*texts: str) -> str:
    return "|" + "|".join(t.ljust(w) for t, w in zip(texts, (41, 24, 22), strict=True)) + "|"


def _wide(text: str) -> str:
    return "|" + text.ljust(89) + "|"


_RULE = _rule("-", "+", "+")
_WIDE = "+" + "-" * 89 + "+"


def nvidia_smi_table(host: Host) -> str:
    """Plain ``nvidia-smi`` in the >=530 layout, with the Processes box."""
    ver, cuda = host.userspace_version, host.cuda_version
    lines = [
        time_line(host), _WIDE,
        f"| NVIDIA-SMI {ver:<23}Driver Version: {ver:<15}CUDA Version: {cuda:<9}|",
        _rule("-", "|", "+"),
        _cells(" GPU  Name                 Persistence-M ", " Bus-Id          Disp.A ",
               " Volatile Uncorr. ECC "),
        _cells(" Fan  Temp   Perf          Pwr:Usage/Cap ", "           Memory-Usage ",
               " GPU-Util  Compute M. "),
        _cells("", "", "               MIG M. "),
        _rule("=", "|", "|"),
    ]
    pm = "On" if host.persistenced_active else "Off"
    for g in host.gpus:
        power = f"{round(g.power_w)}W /  700W"
        memory = f"{g.memory_used_mib}MiB /  {MEM_TOTAL_MIB}MiB"
        ecc = str(sum(g.ecc_volatile.get(k, 0) for k in ECC_KEYS if "uncorrectable" in k))
        util = f"{g.utilization_pct}%"
        lines += [
            f"| {g.index:>3}  {PRODUCT:<26}{pm:>7}  |   {g.bus_upper} Off | {ecc:>20} |",
            f"| N/A   {g.temp_c:>2}C    {g.perf_state:<2} {power:>23} | {memory:>22} | "
            f"{util:>7}      Default |",
            f"|{'':41}|{'':24}| {'Disabled':>20} |",
            _RULE,
        ]
    lines += [
        " " * 91, _WIDE,
        _wide(" Processes:"),
        _wide("  GPU   GI   CI        PID   Type   Process name                              "
              "GPU Memory"),
        _wide("        ID   ID                                                               "
              "Usage"),
        "|" + "=" * 89 + "|",
    ]
    rows = [_process_row(g.index, proc) for g in host.gpus for proc in g.processes]
    lines += rows or [_wide("  No running processes found")]
    lines.append(_WIDE)
    return "\n".join(lines) + "\n"


def _process_row(index: int, proc: GpuProcess) -> str:
    """One row of the Processes box, aligned under its header."""
    return _wide(f"  {index:>3}   N/A  N/A  {proc.pid:>9}      C   {proc.name:<38}"
                 f"{proc.used_mib:>10}MiB")


def time_line(host: Host) -> str:
    """The date line nvidia-smi prints above the table."""
    return host.now.strftime("%a %b %d %H:%M:%S %Y       ")


def nvidia_smi_topo(host: Host) -> str:
    """``nvidia-smi topo -m``: NV18 mesh, a PIX NIC beside each GPU that shares its
    PCIe switch with one, NODE within a socket and SYS across sockets."""
    gpus, nics = host.gpus, host.nics
    names = [f"GPU{g.index}" for g in gpus] + [f"NIC{i}" for i in range(len(nics))]
    numa = [g.numa for g in gpus] + [n.numa for n in nics]
    # the PCIe switch (named by its GPU's index) each device sits behind
    switch = [g.index for g in gpus] + [n.switch for n in nics]

    def link(a: int, b: int) -> str:
        if a == b:
            return " X "
        if a < len(gpus) and b < len(gpus):
            return "NV18"
        if switch[a] is not None and switch[a] == switch[b]:
            return "PIX"
        return "NODE" if numa[a] == numa[b] else "SYS"

    out = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a, name in enumerate(names):
        cells = [link(a, b) for b in range(len(names))]
        row = name + "\t" + "\t".join(cells)
        if a < len(gpus):
            row += f"\t{host.cpulist(numa[a])}\t{numa[a]}\t\tN/A"
        out.append(row)
    out += ["", "Legend:", "",
            "  X    = Self",
            "  SYS  = Connection traversing PCIe as well as the SMP interconnect between "
            "NUMA nodes (e.g., QPI/UPI)",
            "  NODE = Connection traversing PCIe as well as the interconnect between PCIe "
            "Host Bridges within a NUMA node",
            "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically "
            "the CPU)",
            "  PXB  = Connection traversing multiple PCIe bridges (without traversing the "
            "PCIe Host Bridge)",
            "  PIX  = Connection traversing at most a single PCIe bridge",
            "  NV#  = Connection traversing a bonded set of # NVLinks",
            "", "NIC Legend:", ""]
    out += [f"  NIC{i}: {n.name}" for i, n in enumerate(nics)]
    return "\n".join(out) + "\n\n"


def nvidia_smi_nvlink_status(host: Host) -> str:
    """``nvidia-smi nvlink -s``: 18 links per H100."""
    out: list[str] = []
    for g in host.gpus:
        out.append(f"GPU {g.index}: {PRODUCT} (UUID: {g.uuid})")
        for link in range(NVLINK_COUNT):
            state = NVLINK_GBPS if link < g.nvlinks_up else "<inactive>"
            out.append(f"\t Link {link}: {state}")
    return "\n".join(out) + "\n"


def nvidia_smi_nvlink_errors(host: Host) -> str:
    """``nvidia-smi nvlink -e``: per-link error counters (all zero when healthy)."""
    out: list[str] = []
    for g in host.gpus:
        out.append(f"GPU {g.index}: {PRODUCT} (UUID: {g.uuid})")
        for link in range(NVLINK_COUNT):
            for counter in ("Replay Errors", "Recovery Errors", "CRC Errors"):
                out.append(f"\t Link {link}: {counter}: 0")
    return "\n".join(out) + "\n"


def nvml_json(host: Host) -> str:
    """The collector's NVML document (schema ``gputriage/nvml/v1``)."""
    major, minor = host.cuda_version.split(".")
    if host.nvml_init_error is not None:
        code, text = host.nvml_init_error
        doc: dict = {"schema": "gputriage/nvml/v1", "available": False, "error": text,
                     "error_code": code, "library_version": None, "driver_version": None,
                     "cuda_driver_version": None, "device_count": None, "devices": []}
        return json.dumps(doc, indent=2) + "\n"
    devices = []
    for g in host.gpus:
        if g.lost:
            devices.append({"index": g.index, "name": None, "uuid": None, "pci_bus_id": None,
                            "serial": None, "minor_number": None, "persistence_mode": None,
                            "error": "GPU is lost", "error_code": 15})
            continue
        devices.append({"index": g.index, "name": PRODUCT, "uuid": g.uuid,
                        "pci_bus_id": g.bus_upper, "serial": g.serial,
                        "minor_number": g.index, "persistence_mode": host.persistenced_active,
                        "error": None})
    doc = {"schema": "gputriage/nvml/v1", "available": True, "error": None,
           "library_version": f"12.{host.userspace_version}",
           "driver_version": host.userspace_version,
           "cuda_driver_version": int(major) * 1000 + int(minor) * 10,
           "device_count": len(host.gpus), "devices": devices}
    return json.dumps(doc, indent=2) + "\n"

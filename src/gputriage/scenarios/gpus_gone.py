"""The node that lost every GPU: the HGX baseboard dropped off the PCI bus (Xid 79 on
all eight GPUs), nvidia-persistenced was stopped and the nvidia modules unloaded, and
the PCI bus shows no NVIDIA function. Only the kernel log and the device nodes left
behind say it had GPUs."""

from __future__ import annotations

from dataclasses import replace

from gputriage.scenarios.model import Host, Outcome, healthy_hgx_h100
from gputriage.scenarios.render_host import dev_nvidia, pci_devices, proc_devices
from gputriage.scenarios.render_logs import kernel_log, lspci_nvidia, persistenced_journal

NVML_ERROR_DRIVER_NOT_LOADED = 9
NVSMI_NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                   "driver. Make sure that the latest NVIDIA driver is installed and running.\n")
NVSMI_COMMANDS = ("nvidia_smi", "nvidia_smi_q_xml", "nvidia_smi_topo",
                  "nvidia_smi_nvlink_status", "nvidia_smi_nvlink_errors")
FELL_OFF_AT = 40_917.552  # seconds after boot
UNLOADED_AT = 42_306.118


def gpus_gone() -> Host:
    """Every GPU fell off the bus and is gone from it; the driver is unloaded."""
    host = healthy_hgx_h100()
    t = FELL_OFF_AT
    for g in host.gpus:
        short = g.bus[:-2]  # 0000:9a:00
        host.kernel_events += [
            (t, f"NVRM: GPU at PCI:{short}: {g.uuid}"),
            (t, f"NVRM: GPU Board Serial Number: {g.serial}"),
            (t, f"NVRM: Xid (PCI:{short}): 79, pid='<unknown>', name=<unknown>, GPU has "
                "fallen off the bus."),
            (t + 0.0001, f"NVRM: GPU {g.bus}: GPU has fallen off the bus."),
        ]
        t += 0.0213
    host.kernel_events.append((UNLOADED_AT, "nvidia-nvlink: Unregistered Nvlink Core, major "
                                            f"device number {host.majors['nvidia-nvlink']}"))
    # what the host showed before it lost them: the boot's kernel log, and the GPU
    # device nodes nvidia-modprobe created (they outlive the module); what it shows now:
    # a PCI bus without NVIDIA functions (the GPUs stay in the model, lost, so that
    # their serials and UUIDs in the log are known to the redaction tests)
    log = kernel_log(host)
    nodes = dev_nvidia(replace(host, switches=[]))
    bare = replace(host, gpus=[], switches=[])
    host.command_overrides["pci_devices"] = Outcome(pci_devices(bare), 0)
    host.command_overrides["lspci_nvidia"] = Outcome(lspci_nvidia(bare), 0)
    for g in host.gpus:
        g.lost, g.in_driver = True, False
    host.switches, host.nvidia_modules = [], []
    host.persistenced_active = False  # stopped to unload the driver
    host.command_overrides["persistenced_journal"] = Outcome(
        persistenced_journal(host, stopped_at=UNLOADED_AT - 2.417), 0)
    host.command_overrides["kernel_log"] = Outcome(log, 0)
    host.command_overrides["dev_nvidia"] = Outcome(nodes, 0)
    host.command_overrides["proc_devices"] = Outcome(
        "".join(ln for ln in proc_devices(host).splitlines(keepends=True)
                if "nvidia" not in ln), 0)
    for name in NVSMI_COMMANDS:
        host.command_overrides[name] = Outcome(NVSMI_NO_DRIVER, 9)
    host.command_overrides["nvidia_container_cli_info"] = Outcome(
        "nvidia-container-cli: initialization error: nvml error: driver not loaded\n", 1)
    host.nvml_init_error = (NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded")
    host.absent |= {"proc_driver_nvidia_version", "proc_driver_nvidia_gpus"}
    return host

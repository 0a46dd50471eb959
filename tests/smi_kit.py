"""nvidia-smi outputs written for the rule tests: ``nvidia-smi -q -x`` documents from
nested dicts (a GPU's memory health, temperatures, power and clock reasons), a minimal
``nvidia-smi -q`` text of PCIe links and processes, and ``nvidia-smi nvlink -e`` counters.
Shared by the memory, thermal, PCIe, fabric and DCGM rule tests."""

from __future__ import annotations

from typing import Any

H100 = "NVIDIA H100 80GB HBM3"


# -- nvidia-smi -q -x ---------------------------------------------------------------------

def _elem(tag: str, value: Any, depth: int) -> str:
    pad = "\t" * depth
    if isinstance(value, dict):
        inner = "".join(_elem(k, v, depth + 1) for k, v in value.items())
        return f"{pad}<{tag}>\n{inner}{pad}</{tag}>\n"
    return f"{pad}<{tag}>{value}</{tag}>\n"


def gpu(bus: str = "00000000:18:00.0", name: str = "NVIDIA H100 80GB HBM3",
        **sections: Any) -> str:
    """One ``<gpu>`` element: the product name plus the given sections (dicts nest)."""
    body = _elem("product_name", name, 2) + "".join(
        _elem(tag, value, 2) for tag, value in sections.items())
    return f'\t<gpu id="{bus}">\n{body}\t</gpu>\n'


def smi_xml(*gpus: str, driver: str = "550.54.15") -> str:
    """A whole ``nvidia-smi -q -x`` document holding the given ``<gpu>`` elements."""
    return ('<?xml version="1.0" ?>\n'
            '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
            f"\t<driver_version>{driver}</driver_version>\n"
            f"\t<attached_gpus>{len(gpus)}</attached_gpus>\n" + "".join(gpus)
            + "</nvidia_smi_log>\n")


ECC_ON = {"current_ecc": "Enabled", "pending_ecc": "Enabled"}


def ecc(vol_unc: int = 0, agg_unc: int = 0, vol_cor: int = 0, agg_cor: int = 0) -> dict:
    """An ``<ecc_errors>`` block in the SRAM/DRAM schema."""
    def scope(cor: int, unc: int) -> dict:
        return {"sram_correctable": 0, "sram_uncorrectable_parity": 0,
                "sram_uncorrectable_secded": 0, "dram_correctable": cor,
                "dram_uncorrectable": unc}
    return {"volatile": scope(vol_cor, vol_unc), "aggregate": scope(agg_cor, agg_unc)}


def remap(pending: str = "No", failure: str = "No", unc: int = 0, corr: int = 0) -> dict:
    return {"remapped_row_corr": corr, "remapped_row_unc": unc,
            "remapped_row_pending": pending, "remapped_row_failure": failure}


def retired(pending: str = "No", sbe: int = 0, dbe: int = 0) -> dict:
    return {"multiple_single_bit_retirement": {"retired_count": sbe},
            "double_bit_retirement": {"retired_count": dbe},
            "pending_blacklist": pending, "pending_retirement": pending}


def healthy_gpu(bus: str = "00000000:18:00.0", **changes: Any) -> str:
    sections = {"ecc_mode": ECC_ON, "ecc_errors": ecc(), "retired_pages": retired(),
                "remapped_rows": remap()}
    sections.update(changes)
    return gpu(bus, **{k: v for k, v in sections.items() if v is not None})


def xml_host(*gpus: str) -> dict:
    return {"nvidia_smi_q_xml": smi_xml(*gpus)}


# -- clocks, temperature and power (the thermal rules) ---------------------------------

REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
           "hw_thermal_slowdown", "hw_power_brake_slowdown", "sync_boost",
           "sw_thermal_slowdown", "display_clocks_setting")


def reasons(*active: str, old: bool = False) -> dict:
    """A clock event (or, with ``old``, throttle) reasons block with ``active`` on."""
    prefix = "clocks_throttle_reason_" if old else "clocks_event_reason_"
    return {prefix + r: "Active" if r in active else "Not Active" for r in REASONS}


def hot_gpu(temp: int = 60, *active: str, util: int = 100, draw: float = 400.0,
            limit: float = 700.0, default: float = 700.0, name: str = "NVIDIA H100 80GB HBM3",
            bus: str = "00000000:18:00.0", tlimit: dict | None = None,
            absolute: dict | None = None) -> str:
    """A GPU with temperature, power, utilisation and clock-reason sections."""
    temperature = {"gpu_temp": f"{temp} C"}
    if tlimit is not None:
        temperature.update({k: f"{v} C" for k, v in tlimit.items()})
    if absolute is not None:
        temperature.update({k: f"{v} C" for k, v in absolute.items()})
    return gpu(bus, name, performance_state="P0",
               clocks_event_reasons=reasons(*active),
               fb_memory_usage={"total": "81559 MiB", "used": "60000 MiB" if util else "1 MiB"},
               utilization={"gpu_util": f"{util} %"},
               temperature=temperature,
               gpu_power_readings={"power_draw": f"{draw:.2f} W",
                                   "current_power_limit": f"{limit:.2f} W",
                                   "default_power_limit": f"{default:.2f} W"})


# -- nvidia-smi -q: PCIe links, utilisation and processes -----------------------------

def smi_q(gpus: list[dict]) -> str:
    """A minimal ``nvidia-smi -q`` text; each GPU dict: bus, gen, max_gen, width,
    max_width, replays, util, pstate, used, virt, procs (idle compute processes)."""
    out = ["==============NVSMI LOG==============", "",
           "Driver Version                            : 550.54.15",
           "CUDA Version                              : 12.4", "",
           f"Attached GPUs                             : {len(gpus)}"]
    for g in gpus:
        bus = g["bus"].upper().replace("0000:", "00000000:", 1)
        out += [f"GPU {bus}",
                "    Product Name                          : "
                + g.get("name", "NVIDIA H100 80GB HBM3"),
                "    GPU Virtualization Mode",
                f"        Virtualization Mode               : {g.get('virt', 'None')}",
                "    PCI",
                f"        Bus Id                            : {bus}",
                "        GPU Link Info",
                "            PCIe Generation",
                f"                Max                       : {g.get('max_gen', 5)}",
                f"                Current                   : {g.get('gen', 5)}",
                "            Link Width",
                f"                Max                       : {g.get('max_width', 16)}x",
                f"                Current                   : {g.get('width', 16)}x",
                f"        Replays Since Reset               : {g.get('replays', 0)}",
                f"    Performance State                     : {g.get('pstate', 'P0')}",
                "    FB Memory Usage",
                "        Total                             : 81559 MiB",
                f"        Used                              : {g.get('used', 1)} MiB",
                "    Utilization",
                f"        Gpu                               : {g.get('util', 0)} %"]
        for pid in range(g.get("procs", 0)):
            out += ["    Processes" if pid == 0 else "",
                    "        GPU instance ID                   : N/A",
                    "        Compute instance ID               : N/A",
                    f"        Process ID                        : {4242 + pid}",
                    "            Type                          : C",
                    "            Name                          : llama-server",
                    "            Used GPU Memory               : 20000 MiB"]
    return "\n".join(out) + "\n"


# -- nvidia-smi nvlink -e -----------------------------------------------------------------

def nvlink_errors(counts: dict[tuple[int, int], dict[str, int]], gpus: int = 2) -> str:
    out = []
    for i in range(gpus):
        out.append(f"GPU {i}: {H100} (UUID: GPU-{i:08x}-0000)")
        for n in range(2):
            values = {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0}
            values.update(counts.get((i, n), {}))
            out += [f"\t Link {n}: {k}: {v}" for k, v in values.items()]
    return "\n".join(out) + "\n"

"""Read NVML through nvidia-ml-py and print one JSON document.

Run as a child process (``python -I .../nvml_probe.py``, see
``LiveHost.nvml_argv``) so that the collector can kill it when a wedged driver
makes NVML hang. An init failure is data: its error text and code go into the
document. It runs as a plain file in isolated mode, so it imports only the
standard library and nvidia-ml-py, never gputriage itself.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SCHEMA = "gputriage/nvml/v1"


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _try(fn, *args) -> Any:
    try:
        return fn(*args)
    except Exception:  # any NVML error means "not available"
        return None


def read_nvml(nvml: Any) -> dict:
    """Readings from an nvidia-ml-py compatible module (injectable for tests)."""
    doc: dict[str, Any] = {"schema": SCHEMA, "available": False, "error": None,
                           "error_code": None, "library_version": None, "driver_version": None,
                           "cuda_driver_version": None, "device_count": None, "devices": []}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError or a missing library
        doc["error"] = _text(exc)
        doc["error_code"] = getattr(exc, "value", None)
        return doc
    try:
        doc["available"] = True
        doc["library_version"] = _try(lambda: _text(nvml.nvmlSystemGetNVMLVersion()))
        doc["driver_version"] = _try(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        doc["cuda_driver_version"] = _try(nvml.nvmlSystemGetCudaDriverVersion)
        count = nvml.nvmlDeviceGetCount()
        doc["device_count"] = count
        for i in range(count):
            doc["devices"].append(_read_device(nvml, i))
    except Exception as exc:
        doc["error"] = _text(exc)
        doc["error_code"] = getattr(exc, "value", None)
    finally:
        _try(nvml.nvmlShutdown)
    return doc


def _read_device(nvml: Any, index: int) -> dict:
    dev: dict[str, Any] = {"index": index, "error": None}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:
        dev["error"] = _text(exc)
        return dev
    dev["name"] = _try(lambda: _text(nvml.nvmlDeviceGetName(handle)))
    dev["uuid"] = _try(lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
    dev["serial"] = _try(lambda: _text(nvml.nvmlDeviceGetSerial(handle)))
    dev["minor_number"] = _try(nvml.nvmlDeviceGetMinorNumber, handle)
    pci = _try(nvml.nvmlDeviceGetPciInfo, handle)
    dev["pci_bus_id"] = _text(pci.busId) if pci is not None else None
    mode = _try(nvml.nvmlDeviceGetPersistenceMode, handle)
    dev["persistence_mode"] = None if mode is None else bool(mode)
    return dev


def main() -> int:
    try:
        import pynvml
    except ImportError as exc:
        doc = {"schema": SCHEMA, "available": False,
               "error": f"nvidia-ml-py not importable: {exc}", "error_code": None}
    else:
        doc = read_nvml(pynvml)
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

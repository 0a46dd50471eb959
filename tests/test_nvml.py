"""NVML: the probe (with a fake nvidia-ml-py) and the parser of its document."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputriage.collect.nvml_probe import read_nvml
from gputriage.errors import ParseError
from gputriage.parsers.nvml import parse_nvml


class FakeNVMLError(Exception):
    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


class FakeNvml:
    """The slice of pynvml the probe uses."""

    def __init__(self, count=2, init_error=None, bad_index=None):
        self.count, self.init_error, self.bad_index = count, init_error, bad_index

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetNVMLVersion(self):
        return "12.550.54.15"

    def nvmlSystemGetDriverVersion(self):
        return b"550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        if i == self.bad_index:
            raise FakeNVMLError(15, "GPU is lost")
        return i

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:08d}"

    def nvmlDeviceGetSerial(self, h):
        return "165442300159" + str(h)

    def nvmlDeviceGetMinorNumber(self, h):
        return h

    def nvmlDeviceGetPciInfo(self, h):
        return type("Pci", (), {"busId": f"00000000:{0x18 + h:02X}:00.0"})()

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1


def test_probe_reads_devices_and_parser_round_trips():
    doc = json.loads(json.dumps(read_nvml(FakeNvml())))
    reading = parse_nvml(doc)
    assert reading.available and reading.device_count == 2
    assert reading.library_driver_version == "550.54.15"
    assert reading.driver_version == "550.54.15"
    assert reading.devices[1].pci_bus_id == "00000000:19:00.0"
    assert reading.devices[0].persistence_mode is True


def test_probe_records_init_error_as_data():
    err = FakeNVMLError(18, "RM has detected an NVML/RM version mismatch.")
    reading = parse_nvml(read_nvml(FakeNvml(init_error=err)))
    assert not reading.available and reading.version_mismatch
    assert "version mismatch" in reading.error


def test_probe_records_a_lost_device():
    reading = parse_nvml(read_nvml(FakeNvml(count=3, bad_index=1)))
    assert reading.devices[1].error == "GPU is lost"
    assert reading.devices[2].uuid == "GPU-00000002"


def test_probe_runs_as_a_child_process_without_a_driver():
    src = Path(__file__).resolve().parent.parent / "src"
    out = subprocess.run([sys.executable, "-m", "gputriage.collect.nvml_probe"],
                         capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0
    reading = parse_nvml(json.loads(out.stdout))
    assert reading.available in (True, False)  # no driver here: an error text instead
    if not reading.available:
        assert reading.error


@pytest.mark.parametrize("doc", [[], "x", {"devices": []}, None, 3])
def test_parser_rejects_foreign_documents(doc):
    with pytest.raises(ParseError):
        parse_nvml(doc)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=20))
def test_parser_never_crashes(doc):
    if isinstance(doc, dict):
        doc.setdefault("available", True)
    with contextlib.suppress(ParseError):
        parse_nvml(doc)

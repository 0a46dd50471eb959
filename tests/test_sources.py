"""Every source is declared once, end to end (issue 11): how it is collected, its parser
(or why it is kept as text), its detector and aliases, and a real sample of it that the
detector recognises and the parser reads. Every file of tests/fixtures says in
tests/fixtures/PROVENANCE.tsv whether it is a real capture (and from where) or written
from documentation; only real ones (and corpus samples) count as real samples."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conformance_kit import (
    alias_problems,
    declaration_problems,
    detector_problems,
    registry_problems,
    sample_problems,
)
from declared import no_sample_yet, source_samples

from gputriage import sources
from gputriage.ingest.bugreport import split_bug_report
from gputriage.ingest.detect import EXPECTED
from gputriage.sources import PARSED
from gputriage.text.prompts import source_for_command, source_for_section

TESTS = Path(__file__).parent
FIXTURES = TESTS / "fixtures"
BUG_REPORT = FIXTURES / "ingest" / "nvidia-bug-report.log"
PROVENANCE = FIXTURES / "PROVENANCE.tsv"
KINDS_OF_FIXTURE = {"real", "written", "recorded"}
ALL_TEST_TEXT = "\n".join(p.read_text() for p in TESTS.glob("test_*.py"))

# Samples of each parsed source: "corpus:<part of a corpus file name>", "fixture:<path
# under tests/fixtures>", or "bugreport" (its section of the bug-report fixture). A source
# with a detector is recognised in each one, and its parser reads it; a corpus sample and a
# fixture PROVENANCE.tsv marks real are its real samples. A test module of a newer source
# declares its own in a SOURCE_SAMPLES dict of the same shape (tests/declared.py).
SOURCE_SAMPLES: dict[str, tuple[str, ...]] = {
    "nvidia_smi_q_xml": ("corpus:netdata-tesla-p100-pcie-510.47.03-aggregate-sbe.xml",
                         "corpus:telegraf-a10g-aws-515.105.01-pcie-x8.xml",
                         "fixture:nvsmi/xml-565-event-reasons-fabric.xml"),
    "nvidia_smi_q": ("corpus:thamada-8x-h100-sxm-nvidia-smi-a-565.57.01",
                     "corpus:rtxpro6000-blackwell-q-d-row-remapper",
                     "fixture:nvsmi/q-old-470-throttle-pascal-ecc.txt", "bugreport"),
    "nvidia_smi": ("corpus:thamada-8x-h100-sxm-565.57.01",
                   "corpus:xxd3vin19-unable-to-determine-device-handle",
                   "fixture:nvsmi/table-418-no-gi-ci.txt", "fixture:nvsmi/list-L.txt"),
    "nvidia_smi_csv": ("corpus:smc57-query-gpu-csv", "corpus:amax-a100-pcie-query-retired-pages",
                       "corpus:dcgmexp94-query-compute-apps"),
    "gpu_reset": ("corpus:nvsentinel1690-gpu-reset-in-use",
                  "corpus:gpuop118-a100-mig-disable-pending-gpu-reset"),
    "nvidia_smi_topo": ("corpus:sglang30401-check-env-8x-h100-8nic-pix-topo",
                        "corpus:oyanghd-dgx-a100-40g-8gpu-10nic-nps4-topo"),
    "nvidia_smi_nvlink_status": ("corpus:gpud-nvidia-smi-nvlink-status-8x-a100",
                                 "corpus:azurehpc-nvlink-status-a100-all-links-inactive"),
    "nvml": ("fixture:sources/nvml-library-not-found.json",),
    "proc_driver_nvidia_version": ("corpus:proc-driver-nvidia-version-proprietary-570.181",
                                   "bugreport"),
    "proc_driver_nvidia_gpus": ("bugreport",),
    "proc_modules": ("corpus:gdrcopy234-clara", "bugreport"),
    "proc_devices": ("fixture:sources/proc_devices-vm-no-nvidia.txt",),
    "pci_devices": ("fixture:pci/hgx-h100-8gpu-nvswitch-cx7.json",
                    "fixture:sources/pci_devices-vm-virtio-nic.json"),
    "lspci_nvidia": ("corpus:hwloc653-lspci-vv-a100-sxm4-40gb-header",
                     "corpus:jan183-rtx4090-riser-lnkcap", "bugreport"),
    "dmidecode_slots": ("corpus:cn-notes-connectx6-dmidecode-slot",),
    "proc_meminfo": ("bugreport",),
    "hugepages": ("fixture:sources/hugepages-vm-no-pools.json",),
    "hugepages_per_node": ("fixture:sources/hugepages_per_node-vm-one-node.json",),
    "thp_enabled": ("fixture:sources/thp_enabled-madvise.txt",),
    "numa_balancing": ("fixture:sources/numa_balancing-off.txt",),
    "proc_cmdline": ("bugreport",),
    "numactl": ("corpus:legion1338-numactl-power9", "corpus:xpuperf129-gh200-lscpu"),
    "kernel_log": ("corpus:nolebase-h100-xid79-fallen-off-bus-crash-dump",
                   "corpus:stackhpc287-api-mismatch-syslog", "bugreport"),
    "systemctl_fabricmanager": ("corpus:xe9780-b300-systemctl-status-fabricmanager",),
    "fabricmanager_journal": ("corpus:gpud-fabricmanager-log-multicast",
                              "corpus:nvtrust128-h20-journalctl-fabricmanager"),
    "ibstat": ("corpus:doc-ibstat-mt25418", "corpus:bernie-connectx6-mlx5-ibv-devinfo",
               "corpus:cx7-roce-ibdev2netdev", "corpus:nccl1510-show-gids",
               "corpus:gpud-ibstatus-a100-all-active"),
    "nccl_log": ("corpus:nccl1189-h20-net-ib-gdrdma", "corpus:nccl1412-init-complete"),
    "device_query": ("corpus:devicequery-pass-gtx770", "corpus:aws-p5-devicequery"),
    "nccl_tests": ("corpus:nccltests264-all-reduce-perf-cuda-failure",),
    "nvidia_container_cli_info": ("corpus:nvidia-container-cli-info-8x-rtx2080ti",),
}
# Parsed sources with no real capture yet (none exists in the corpus, and the machines
# the real fixtures came from have no such hardware; written fixtures of some are samples
# above). Adding a real sample means removing it here. A test module of a newer source
# declares its own in a NO_SAMPLE_YET dict of the same shape (tests/declared.py).
NO_SAMPLE_YET = {
    "sys_module_nvidia": "a /sys/module tree of a host with the NVIDIA driver loaded",
    "dev_nvidia": "the /dev/nvidia* nodes of a GPU host",
    "nvidia_libs": "the driver's library file names on a GPU host",
    "infiniband": "a /sys/class/infiniband tree of a host with an HCA",
    "lspci_mellanox": "lspci -vvv of a ConnectX function",
    "nvidia_smi_nvlink_errors": "nvidia-smi nvlink -e of an NVLink system",
    "systemctl_persistenced": "systemctl status or show of nvidia-persistenced",
    "cgroup_controllers": "/sys/fs/cgroup/cgroup.controllers of a cgroup v2 host",
    # written fixtures only (tests/fixtures/PROVENANCE.tsv)
    "proc_driver_nvidia_gpus": "/proc/driver/nvidia/gpus/*/information of a GPU host",
    "proc_meminfo": "/proc/meminfo of a GPU host",
    "proc_cmdline": "/proc/cmdline of a GPU host",
    "cdi_specs": "a CDI spec that nvidia-ctk cdi generate wrote on a GPU host",
    "container_env": "the NVIDIA_* environment inside a GPU container",
    "container_toolkit_config": "the NVIDIA Container Toolkit's config.toml of a GPU host",
    "weights_host": "gputriage weights --host-report run on a GPU node",
}


SAMPLES = source_samples()  # these and the SOURCE_SAMPLES of every other test module
MISSING = no_sample_yet()  # these and the NO_SAMPLE_YET of every other test module


def _provenance() -> dict[str, tuple[str, str]]:
    """{path under tests/fixtures: (kind, where it comes from)} of PROVENANCE.tsv."""
    lines = [line for line in PROVENANCE.read_text(encoding="utf-8").splitlines()
             if line and not line.startswith("#")]
    rows = list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))
    found = {row["file"]: (row["kind"], row["from"]) for row in rows}
    assert len(found) == len(rows), "a file is listed twice in PROVENANCE.tsv"
    return found


FIXTURE_PROVENANCE = _provenance()


def is_real(ref: str) -> bool:
    """Whether a sample reference names a real capture: a corpus sample, or a fixture
    (the bug report's, for "bugreport") that PROVENANCE.tsv marks real."""
    kind, _, what = ref.partition(":")
    if kind == "corpus":
        return True
    path = what if kind == "fixture" else str(BUG_REPORT.relative_to(FIXTURES))
    return FIXTURE_PROVENANCE.get(path, ("", ""))[0] == "real"


def _cases() -> list[tuple[str, str]]:
    return [(name, ref) for name, refs in SAMPLES.items() for ref in refs]


def _sample_text(ref: str, name: str, request: pytest.FixtureRequest) -> str:
    kind, _, what = ref.partition(":")
    if kind == "corpus":
        return request.getfixturevalue("corpus").sample(what).text()
    if kind == "fixture":
        return (FIXTURES / what).read_text(encoding="utf-8")
    return split_bug_report(BUG_REPORT.read_text(encoding="utf-8"))[name]


# --- declarations (the checks of tests/conformance_kit.py, on every source) ------------
def test_sources_are_unique_and_described() -> None:
    problems = registry_problems(sources.SOURCES)
    problems += [p for s in sources.SOURCES for p in declaration_problems(s)]
    assert not problems, "\n".join(problems)


def test_every_parser_is_called_by_a_test() -> None:
    for source in PARSED:
        func = (sources.BY_NAME[source].parser or "").partition(":")[2]
        assert func in ALL_TEST_TEXT, f"no test calls {sources.BY_NAME[source].parser}"


def test_detectors_are_documented_ordered_and_expected() -> None:
    problems = [p for s in sources.SOURCES for p in detector_problems(s)]
    assert not problems, "\n".join(problems)
    assert "\n" not in EXPECTED


def test_each_alias_stands_for_its_source() -> None:
    problems = [p for s in sources.SOURCES for p in alias_problems(s)]
    assert not problems, "\n".join(problems)


def test_every_parsed_source_has_a_real_sample_or_says_what_is_missing() -> None:
    assert set(SAMPLES) <= set(sources.BY_NAME)
    missing = {name for name in PARSED if not any(map(is_real, SAMPLES.get(name, ())))}
    assert missing == set(MISSING), missing ^ set(MISSING)


def test_every_fixture_says_whether_it_is_real_or_written() -> None:
    """One PROVENANCE.tsv row per file of tests/fixtures, naming an existing file, its kind
    and where it comes from."""
    files = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*")
             if p.is_file() and p != PROVENANCE}
    listed = set(FIXTURE_PROVENANCE)
    assert not files - listed, f"say in PROVENANCE.tsv where these come from: {files - listed}"
    assert not listed - files, f"PROVENANCE.tsv lists files that are gone: {listed - files}"
    for path, (kind, origin) in FIXTURE_PROVENANCE.items():
        assert kind in KINDS_OF_FIXTURE, (path, kind)
        assert len(origin.split()) >= 3, f"{path}: say where it comes from"


def test_sample_references_name_existing_fixtures() -> None:
    for name, ref in _cases():
        kind, _, what = ref.partition(":")
        assert kind in ("corpus", "fixture", "bugreport"), (name, ref)
        if kind == "fixture":
            assert what in FIXTURE_PROVENANCE, (name, ref)


# --- samples -----------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "ref"), _cases(), ids=[f"{n}<-{r}" for n, r in _cases()])
def test_sample_is_recognised_and_parsed(name: str, ref: str,
                                         request: pytest.FixtureRequest) -> None:
    problems = sample_problems(name, _sample_text(ref, name, request))
    assert not problems, (ref, problems)


@pytest.mark.parametrize(("cmd", "source"), [
    ("nvidia-smi -q -x", "nvidia_smi_q_xml"),
    ("sudo nvidia-smi --xml-format --query", "nvidia_smi_q_xml"),  # words in any order
    ("nvidia-smi -a -d ROW_REMAPPER | grep -i pending", "nvidia_smi_q"),  # extra args kept
    ("nvidia-smi -q -u", None),  # "!": -u (the unit query) is excluded
    ("nvidia-smi nvlink -s -e", "nvidia_smi_nvlink_errors"),
    ("nvidia-smi -i 0 -L", "nvidia_smi"),  # "?": only these arguments
    ("nvidia-smi -pm 0", None),
    ("lspci -nn | grep -i NVIDIA", "lspci_nvidia"),  # "~": the line mentions it
    ("systemctl status nvidia-fabricmanager.service", "systemctl_fabricmanager"),
    ("zcat /var/log/syslog.2.gz", "kernel_log"),  # a reader and a path alias
    ("tail -n 50 fabricmanager.log", "fabricmanager_journal"),  # relative to its folder
    ("srun -N 2 --mpi=pmix ./build/all_reduce_perf -b 8", "nccl_tests"),  # a launcher
    ("grep -i huge /proc/meminfo", "proc_meminfo"),  # a file source's own path
    ("dmesg:", "kernel_log"),  # a bug-report section header
])
def test_alias_grammar(cmd: str, source: str | None) -> None:
    assert source_for_command(cmd) == source


def test_bug_report_sections_follow_the_aliases() -> None:
    assert source_for_section("/proc/driver/nvidia/gpus/0000:18:00.0/information") == (
        "proc_driver_nvidia_gpus")
    assert source_for_section("/var/log/fabricmanager.log") == "fabricmanager_journal"
    assert source_for_section("/proc/modules") == "proc_modules"
    assert source_for_section("/var/log/Xorg.0.log") is None

"""GPU memory health rules (ECC, page retirement, row remapping) on hand-written
nvidia-smi outputs, the nvsmi fixtures and the real captures of category 1.

The documents are written by tests/smi_kit.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import flat
from hostkit import ids, run
from hypothesis import given, settings
from hypothesis import strategies as st
from smi_kit import ECC_ON, ecc, gpu, healthy_gpu, remap, retired, smi_xml, xml_host

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity

FIXTURES = Path(__file__).parent / "fixtures" / "nvsmi"
AREAS = ("memory.", "clocks.", "thermal.", "power.")


RULE_CASES = {
    "memory.ecc-mode": [
        (xml_host(healthy_gpu(ecc_mode={"current_ecc": "Disabled", "pending_ecc": "Disabled"})),
         "memory.ecc-disabled"),
    ],
    "memory.ecc-errors": [
        (xml_host(healthy_gpu(ecc_errors=ecc(vol_unc=2, agg_unc=2))), "memory.uncorrectable"),
        (xml_host(healthy_gpu(ecc_errors=ecc(vol_cor=1500, agg_cor=4000))),
         "memory.correctable-high"),
    ],
    "memory.page-retirement": [
        (xml_host(healthy_gpu(retired_pages=retired("Yes", dbe=1))),
         "memory.retired-pages-pending"),
    ],
    "memory.row-remapping": [
        (xml_host(healthy_gpu(remapped_rows=remap("Yes", unc=1))), "memory.remap-pending"),
        (xml_host(healthy_gpu(remapped_rows=remap("No", "Yes", unc=3))), "memory.remap-failed"),
    ],
}

def mine(result, prefixes=AREAS):
    return [f for f in result.findings if f.id.startswith(prefixes)]


def one(result, fid):
    found = [f for f in result.findings if f.id == fid]
    assert len(found) == 1, [(f.id, f.title) for f in result.findings]
    return found[0]


def test_healthy_gpus_give_nothing():
    result = run(**xml_host(healthy_gpu(), healthy_gpu("00000000:2A:00.0")))
    assert not mine(result)
    assert not [s for s in result.skipped if s.rule.startswith("memory.")]


def test_remap_pending_is_reset_not_rma_with_exact_lines():
    f = one(run(**xml_host(healthy_gpu(), healthy_gpu("00000000:2A:00.0",
                                                      remapped_rows=remap("Yes", unc=1)))),
            "memory.remap-pending")
    # a warning: the reset that applies the remap is planned, the GPU stays in service
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.PLAN_REPAIR, Blame.NODE)
    assert "nvidia-smi -r" in f.explanation
    assert f.scope.kind == "gpu" and f.scope.pci_bus_id == "0000:2a:00.0"
    assert f.scope.gpu_index == 1
    assert "GPU 1 0000:2a:00.0" in f.title and "1 uncorrectable" in f.title
    lines = [ln.strip() for e in f.evidence for ln in e.lines]
    assert "<remapped_row_pending>Yes</remapped_row_pending>" in lines
    assert f.evidence[0].source == "nvidia_smi_q_xml"
    assert "reset" in f.explanation


def test_remap_failure_is_drain_and_repair_only():
    result = run(**xml_host(healthy_gpu(remapped_rows=remap("Yes", "Yes", unc=3))))
    f = one(result, "memory.remap-failed")
    assert (f.severity, f.action) == (Severity.CRITICAL, Action.DRAIN_AND_REPAIR)
    assert "memory.remap-pending" not in ids(result)


def test_volatile_uncorrectable_is_critical_reset():
    f = one(run(**xml_host(healthy_gpu(ecc_errors=ecc(vol_unc=2, agg_unc=5)))),
            "memory.uncorrectable")
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.RESET_GPU, Blame.NODE)
    assert "2 uncorrectable" in f.title
    lines = [ln.strip() for e in f.evidence for ln in e.lines]
    assert "<dram_uncorrectable>2</dram_uncorrectable>" in lines
    assert "<sram_correctable>0</sram_correctable>" not in lines  # zero counters left out


def test_lifetime_uncorrectable_alone_is_info():
    f = one(run(**xml_host(healthy_gpu(ecc_errors=ecc(agg_unc=1)))), "memory.uncorrectable")
    assert f.severity == Severity.INFO and f.action == Action.NONE


@pytest.mark.parametrize(("vol", "agg", "expected"), [
    (0, 3, None), (0, 999, None), (0, 1000, Severity.INFO), (4, 2000, Severity.WARNING),
    (1200, 1200, Severity.WARNING)])
def test_corrected_thresholds(vol, agg, expected):
    result = run(**xml_host(healthy_gpu(ecc_errors=ecc(vol_cor=vol, agg_cor=agg))))
    found = [f for f in result.findings if f.id == "memory.correctable-high"]
    assert [f.severity for f in found] == ([expected] if expected else [])


def test_ecc_disabled_only_on_datacenter_gpus():
    off = {"current_ecc": "Disabled", "pending_ecc": "Disabled"}
    f = one(run(**xml_host(healthy_gpu(ecc_mode=off))), "memory.ecc-disabled")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    geforce = gpu("00000000:01:00.0", "NVIDIA GeForce RTX 4090", ecc_mode=off)
    assert "memory.ecc-disabled" not in ids(run(**xml_host(geforce)))
    unsupported = healthy_gpu(ecc_mode={"current_ecc": "N/A", "pending_ecc": "N/A"})
    assert "memory.ecc-disabled" not in ids(run(**xml_host(unsupported)))


@pytest.mark.parametrize(("name", "warned"), [
    # workstation cards ship with ECC off: their default, not a misconfiguration
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", False),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", False),
    ("NVIDIA RTX 4000 SFF Ada Generation", False),
    ("NVIDIA RTX A6000", False),
    # the server edition and data-center parts ship with it on
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", True),
    ("NVIDIA L40S", True),
    ("Tesla T4", True),
])
def test_ecc_disabled_is_the_default_of_workstation_cards(name, warned):
    off = {"current_ecc": "Disabled", "pending_ecc": "Disabled"}
    found = ids(run(**xml_host(gpu("00000000:61:00.0", name, ecc_mode=off))))
    assert ("memory.ecc-disabled" in found) is warned


def test_ecc_enabled_at_next_reset_says_reset():
    f = one(run(**xml_host(healthy_gpu(ecc_mode={"current_ecc": "Disabled",
                                                 "pending_ecc": "Enabled"}))),
            "memory.ecc-disabled")
    # the node's setting, applied by a reset when idle: a configuration fix, not a drain
    assert f.action == Action.FIX_CONFIG and f.blame == Blame.CONFIG and "next reset" in f.title
    assert "reset the GPU when it is idle" in f.explanation


def test_retired_pages_pending():
    f = one(run(**xml_host(healthy_gpu(retired_pages=retired("Yes", sbe=1, dbe=2)))),
            "memory.retired-pages-pending")
    assert (f.severity, f.action) == (Severity.WARNING, Action.PLAN_REPAIR)
    assert "2 double-bit" in f.title


@pytest.mark.parametrize("name", ["Tesla V100-SXM3-32GB", "Tesla P100-PCIE-16GB", "Tesla T4"])
def test_uncorrectable_error_with_its_page_pending_is_one_cause(name):
    # pre-Ampere: the double-bit error marked its page; the reset it calls for retires it
    host = gpu("00000000:34:00.0", name, ecc_mode=ECC_ON, ecc_errors=ecc(vol_unc=1, agg_unc=9),
               retired_pages=retired("Yes", dbe=2), remapped_rows="N/A")
    result = run(**xml_host(host))
    (f,) = [x for x in result.findings if x.severity.rank >= Severity.WARNING.rank]
    assert (f.id, f.action) == ("memory.uncorrectable", Action.RESET_GPU)
    assert [c.id for c in f.consequences] == ["memory.retired-pages-pending"]
    assert "-d PAGE_RETIREMENT -i 0000:34:00.0" in f.step and "ROW_REMAPPER" not in f.step


def test_uncorrectable_error_with_its_row_pending_checks_the_remapper():
    host = healthy_gpu(ecc_errors=ecc(vol_unc=1), remapped_rows=remap("Yes", unc=1),
                       retired_pages="N/A")
    (f,) = [x for x in run(**xml_host(host)).findings if x.severity.rank >= Severity.WARNING.rank]
    assert [c.id for c in f.consequences] == ["memory.remap-pending"]
    assert "-d ROW_REMAPPER" in f.step and "PAGE_RETIREMENT" not in f.step


def test_pending_retirement_alone_stays_a_planned_repair():
    # no uncorrectable error since the reset: nothing to fold it under
    host = gpu("00000000:34:00.0", "Tesla V100-SXM2-16GB", ecc_mode=ECC_ON,
               ecc_errors=ecc(agg_unc=3), retired_pages=retired("Yes", dbe=1))
    f = one(run(**xml_host(host)), "memory.retired-pages-pending")
    assert (f.severity, f.action) == (Severity.WARNING, Action.PLAN_REPAIR)


Q_TEXT = """==============NVSMI LOG==============

Attached GPUs                             : 2
GPU 00000000:18:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 0
        Pending                           : No
        Remapping Failure Occurred        : No

GPU 00000000:2A:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    Remapped Rows
        Correctable Error                 : 2
        Uncorrectable Error               : 0
        Pending                           : Yes
        Remapping Failure Occurred        : No
"""


def test_text_output_quotes_the_right_gpu_section():
    f = one(run(nvidia_smi_q=Q_TEXT), "memory.remap-pending")
    assert f.scope.pci_bus_id == "0000:2a:00.0" and f.scope.gpu_index == 1
    lines = f.evidence[0].lines
    assert lines[0].strip() == "Remapped Rows"
    assert any(ln.strip().startswith("Correctable Error") and ln.endswith(": 2") for ln in lines)
    assert "2 correctable" in f.title


TABLE = """+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  NVIDIA A100-SXM...  On   | 00000000:18:00.0 Off |                    3 |
| N/A   40C    P0    90W / 400W |   1000MiB / 81251MiB |     40%      Default |
|                               |                      |             Disabled |
+-------------------------------+----------------------+----------------------+
"""


def test_table_ecc_column_and_no_double_finding_with_xml():
    f = one(run(nvidia_smi=TABLE), "memory.uncorrectable")
    assert f.evidence[0].source == "nvidia_smi"
    assert "00000000:18:00.0" in f.evidence[0].lines[0]
    both = run(nvidia_smi=TABLE,
               nvidia_smi_q_xml=smi_xml(healthy_gpu(ecc_errors=ecc(vol_unc=3))))
    f = one(both, "memory.uncorrectable")
    assert f.evidence[0].source == "nvidia_smi_q_xml"


def test_repeated_lines_keep_their_section_path():
    f = one(analyze(load_input(str(FIXTURES / "q-old-470-throttle-pascal-ecc.txt"))),
            "memory.uncorrectable")
    lines = f.evidence[0].lines
    assert "ECC Errors / Volatile / Double Bit / Total : 2" in lines
    assert "ECC Errors / Aggregate / Double Bit / Total : 2" in lines


@pytest.mark.parametrize(("name", "expected"), [
    ("xml-565-event-reasons-fabric.xml", {"memory.uncorrectable", "memory.remap-pending"}),
    ("q-old-470-throttle-pascal-ecc.txt", {"memory.uncorrectable",
                                           "memory.retired-pages-pending"}),
    ("table-470-old-layout-processes.txt", {"memory.uncorrectable"}),
    ("table-418-no-gi-ci.txt", set()),
    ("list-L.txt", set()),
])
def test_nvsmi_fixtures(name, expected):
    result = analyze(load_input(str(FIXTURES / name)))
    # a pending retirement or remap is said under the uncorrectable error that caused it
    assert {f.id for f in flat(result.findings) if f.id.startswith("memory.")} == expected


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_never_breaks_the_rules(text):
    for source in ("nvidia_smi_q", "nvidia_smi", "nvidia_smi_q_xml"):
        run(**{source: "GPU 00000000:18:00.0\n    Remapped Rows\n" + text})


# -- real captures ---------------------------------------------------------------------------

def _analyze(sample):
    return analyze(load_input(str(sample.path)))


def test_corpus_row_remapper_pending_is_drain_and_reset(corpus):
    result = _analyze(corpus.sample("rtxpro6000-blackwell-q-d-row-remapper"))
    f = one(result, "memory.remap-pending")
    assert f.action == Action.PLAN_REPAIR and f.severity == Severity.WARNING
    assert f.scope.pci_bus_id == "0000:55:00.0"
    assert not {"memory.remap-failed", "memory.uncorrectable"} & ids(result)


def test_corpus_p100_lifetime_sbe_is_at_most_info(corpus):
    result = _analyze(corpus.sample("netdata-tesla-p100"))
    assert all(f.severity.rank <= Severity.INFO.rank for f in mine(result))


@pytest.mark.parametrize("name", [
    "azurehpc-nvsmi-q-page-retirement", "thamada-8x-h100-sxm-nvidia-smi-a",
    "thamada-1x-h200-passthrough",
    "thamada-l40s", "telegraf-a10g", "aws-p5-h100-fabric-state", "cudackpt22"])
def test_corpus_healthy_samples_raise_nothing(corpus, name):
    result = _analyze(corpus.sample(name))
    bad = [(f.id, f.title) for f in mine(result) if f.severity.rank >= Severity.WARNING.rank]
    assert not bad


def test_every_category_1_sample_is_read_without_error(corpus):
    for sample in corpus.category("1"):
        result = _analyze(sample)
        assert not [s for s in result.skipped if s.rule.startswith("memory.")], sample.name

"""MIG listings of nvidia-smi (the table's MIG devices box, -L, mig -lgi / -lci and their
messages): the parser, the detector, and the rules on MIG instances."""

from __future__ import annotations

import pytest
from hostkit import run

from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.nvsmi_table import parse_nvsmi_table

SEP = "+-------------------------------------------------------+"
LGI = "\n".join([
    SEP,
    "| GPU instances:                                        |",
    "| GPU   Name             Profile  Instance   Placement  |",
    "|                          ID       ID       Start:Size |",
    "|=======================================================|",
    "|   0  MIG 3g.40gb          9        2          4:4     |",
    SEP,
    "|   0  MIG 4g.40gb          5        1          0:4     |",
    SEP]) + "\n"
LCI = """+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement    |
|       Instance                       ID        ID       Start:Size   |
|         ID                                                           |
|====================================================================|
|   0      1       MIG 3g.20gb          2         0          0:3      |
+--------------------------------------------------------------------+
|   1      2       MIG 7g.80gb          4         0          0:7      |
+--------------------------------------------------------------------+
"""
LIST = """GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 3g.20gb     Device  0: (UUID: MIG-b2f1b6b2-91b1-5b9a-a1d8-2a1a6f1d6c0e)
  MIG 3g.20gb     Device  1: (UUID: MIG-43c8b7a6-0a3a-5c0e-9c4f-3b0d8b6e1a55)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-1a2b3c4d-d33d-2b2c-524d-9e3d8d2b8a77)
"""
TABLE_HEAD = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|                                         |                      |               MIG M. |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                   On |
| N/A   31C    P0              42W / 400W |      0MiB / 81920MiB |     N/A      Default |
|                                         |                      |              {mode} |
+-----------------------------------------+----------------------+----------------------+
"""
MIG_BOX_EMPTY = """
+---------------------------------------------------------------------------------------+
| MIG devices:                                                                          |
+------------------+--------------------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |                   Memory-Usage |        Vol|      Shared           |
|      ID  ID  Dev |                     BAR1-Usage | SM     Unc| CE ENC DEC OFA JPG    |
|                  |                                |        ECC|                       |
|==================+================================+===========+=======================|
|  No MIG devices found                                                                 |
+---------------------------------------------------------------------------------------+
"""
MIG_BOX_ONE = MIG_BOX_EMPTY.replace(
    "|  No MIG devices found                                                                 |",
    "|  0    1   0   0  |              13MiB / 40192MiB  | 42      0 |  3   0    2    0    0 |")
NO_GI = "No GPU instances found: Not Found\n"
NO_CI = "No compute instances found: Not Found\n"
NO_MIG = "No MIG-enabled devices found.\n"

RULE_CASES = {
    "mig.no-instances": [({"nvidia_smi": TABLE_HEAD.format(mode="Enabled") + MIG_BOX_EMPTY},
                          "mig.no-instances"),
                         ({"nvidia_smi": NO_GI}, "mig.no-instances")],
    "mig.layout": [({"nvidia_smi": LGI}, "mig.layout")],
}


def _ids(result, severity: Severity = Severity.INFO) -> set[str]:
    return {f.id for f in result.findings if f.severity.rank >= severity.rank}


def test_lgi_rows_parse_with_profile_and_placement():
    report = parse_nvsmi_table(LGI)
    assert (report.format, report.mig_listing) == ("mig", "gpu-instances")
    assert [(d.gpu_index, d.gpu_instance, d.profile, d.profile_id, d.placement)
            for d in report.mig_devices] == [(0, 2, "3g.40gb", 9, "4:4"),
                                             (0, 1, "4g.40gb", 5, "0:4")]


def test_lci_rows_parse_with_their_gpu_instance():
    report = parse_nvsmi_table(LCI)
    assert [(d.gpu_index, d.gpu_instance, d.compute_instance, d.profile)
            for d in report.mig_devices] == [(0, 1, 0, "3g.20gb"), (1, 2, 0, "7g.80gb")]


def test_list_mig_lines_belong_to_the_gpu_above_them():
    report = parse_nvsmi_table(LIST)
    assert report.format == "list" and len(report.gpus) == 2
    assert [(d.gpu_index, d.device, d.profile) for d in report.mig_devices] == [
        (0, 0, "3g.20gb"), (0, 1, "3g.20gb")]


@pytest.mark.parametrize("prefix", ["", "$ sudo nvidia-smi mig -lgi\n",
                                    "root@gpu-b12:~# nvidia-smi mig -i 0 -lgi\n",
                                    "the layout on the node:\n\n"])
def test_lgi_is_recognised_after_a_prompt_or_text(prefix):
    text = prefix + LGI
    assert "nvidia_smi" in dict(detect(text))
    result = run(nvidia_smi=dict(detect(text))["nvidia_smi"])
    assert "mig.layout" in _ids(result) and not _ids(result, Severity.WARNING)


def test_mig_on_without_instances_in_the_table_names_the_gpu():
    result = run(nvidia_smi=TABLE_HEAD.format(mode="Enabled") + MIG_BOX_EMPTY)
    (f,) = [f for f in result.findings if f.id == "mig.no-instances"]
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert "GPU 0" in f.title and f.scope.gpu_index == 0
    assert "nvidia-smi mig -i 0 -cgi" in f.step and "<node>" not in f.title


def test_mig_on_with_an_instance_is_quiet():
    result = run(nvidia_smi=TABLE_HEAD.format(mode="Enabled") + MIG_BOX_ONE)
    assert not _ids(result, Severity.WARNING) and "mig.layout" in _ids(result)


@pytest.mark.parametrize(("text", "what"), [(NO_GI, "no GPU instance"),
                                            (NO_CI, "no compute instance")])
def test_mig_messages_without_instances_warn(text, what):
    (f,) = [f for f in run(nvidia_smi=text).findings if f.id == "mig.no-instances"]
    assert what in f.title and f.blame is Blame.CONFIG


def test_mig_disabled_says_nothing_loud():
    for text in (NO_MIG, TABLE_HEAD.format(mode="Disabled")):
        assert not _ids(run(nvidia_smi=text), Severity.WARNING), text


def test_other_gpus_of_an_lgi_listing_are_not_judged():
    # mig -lgi lists only GPUs with instances: GPU 1 in MIG mode may just be elsewhere
    result = run(nvidia_smi=LGI, nvidia_smi_q=Q_MIG_TWO)
    assert not _ids(result, Severity.WARNING)


Q_MIG_TWO = """==============NVSMI LOG==============

Attached GPUs                             : 2
GPU 00000000:07:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    MIG Mode
        Current                           : Enabled
        Pending                           : Enabled

GPU 00000000:0F:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    MIG Mode
        Current                           : Enabled
        Pending                           : Enabled
"""


def test_corpus_mig_listings_are_healthy(corpus):
    for part in ("dcgm138-nvidia-smi-mig-lgi", "gpuexporter-h100-mig-4-instances",
                 "cnd-gpuop-mig-single-h100-7x-1g10gb"):
        result = run(nvidia_smi=dict(detect(corpus.sample(part).text()))["nvidia_smi"])
        assert "mig.layout" in _ids(result) and not _ids(result, Severity.WARNING), part

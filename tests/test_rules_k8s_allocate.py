"""The kubelet's refusal of a pod's devices (rules/k8s_allocate.py) and KAI's queue quota
(rules/k8s_admission.py), read from every form they are pasted in: a describe event row,
a ``kubectl get events`` row without its header, the bare message (a pod's status, the
kubelet's journal), wrapped over several lines."""

from __future__ import annotations

import pytest
from golden import by_id
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.k8s_describe import GET_EVENT_ROW, parse_k8s_describe

LINK_LOST = ("Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: "
             "rpc error: code = Unknown desc = error getting list of preferred allocation "
             "devices: unable to get device link information: error getting NVLink for devices "
             "(3, 0): failed to get nvlink remote pci info: failed to get nvlink state: GPU is "
             "lost, which is unexpected")
DEVICE_LOST = ("Pod Allocate failed due to device plugin GetPreferredAllocation rpc failed with "
               "err: rpc error: code = Unknown desc = Unable to retrieve list of available "
               "devices: error creating nvml.Device 5: nvml: GPU is lost, which is unexpected")
TAKEN = ("  Warning  UnexpectedAdmissionError  3m  kubelet  Allocate failed due to requested "
         "number of devices unavailable for nvidia.com/gpu. Requested: 2, Available: 1, which "
         "is unexpected\n")
KAI = ("Non-preemptible workload is over quota. Workload requested {req} GPUs, but team-a quota "
       "is {quota} GPUs, while {alloc} GPUs are already allocated for non-preemptible pods.\n")

RULE_CASES = {
    "k8s.allocate": [
        ({"k8s_describe": f"  Warning  UnexpectedAdmissionError  2m  kubelet  {LINK_LOST}\n"},
         "k8s.allocate-gpu-lost"),
        ({"k8s_describe": TAKEN}, "k8s.allocate-devices-unavailable"),
    ],
    "k8s.admission": [
        ({"k8s_describe": KAI.format(req="0.2", quota="0.3", alloc="0.1")},
         "k8s.scheduler-quota-exact-fit"),
        ({"k8s_describe": KAI.format(req="1", quota="2", alloc="2")}, "k8s.pending-queue-quota"),
    ],
}


def _analyze(tmp_path, text: str):
    path = tmp_path / "paste.txt"
    path.write_text(text)
    return analyze(load_input(str(path)))


@pytest.mark.parametrize("text", [
    f"  Warning  UnexpectedAdmissionError  2m  kubelet  {LINK_LOST}\n",  # describe's row
    f"5m   Warning   UnexpectedAdmissionError   pod/train-0   {LINK_LOST}\n",  # get events
    f"Message:  Pod {LINK_LOST}\n",  # describe pod's status message
    f"Jan 12 10:01:02 gpu-7 kubelet[2211]: E0112 10:01:02.123 2211 manager.go:1 \"{LINK_LOST}\"\n",
    f"[pod/train-0/main] Pod was rejected: {LINK_LOST}\n",
    DEVICE_LOST + "\n",
])
def test_a_lost_gpu_refused_at_admission_in_any_frame(tmp_path, text):
    found = by_id(_analyze(tmp_path, text))
    f = found["k8s.allocate-gpu-lost"]
    assert (f.severity, f.blame, f.action) == (Severity.CRITICAL, Blame.NODE,
                                               Action.DRAIN_AND_REPAIR)


def test_a_wrapped_event_message_is_read_whole():
    text = ("Warning  UnexpectedAdmissionError  pod/...  Allocate failed due to device plugin "
            "GetPreferredAllocation rpc failed\nwith err: rpc error: code = Unknown desc = "
            "error getting list of preferred allocation devices:\nunable to get device link "
            "information: ...\n\nNormal  Scheduled  pod/x  Successfully assigned\n")
    assert dict(detect(text))["k8s_describe"].count("\n") >= 3
    events = parse_k8s_describe(dict(detect(text))["k8s_describe"]).events
    first = events[0]
    assert "unable to get device link information" in first.message
    assert len(first.lines) == 3 and first.kind == "Pod"
    f = by_id(run(k8s_describe=text))["k8s.allocate-gpu-lost"]
    assert "cut off" in f.explanation  # the reason is elided: said so


def test_another_nvml_reason_is_not_a_drain():
    text = LINK_LOST.replace("GPU is lost", "Unknown Error")
    f = by_id(run(k8s_describe=f"  Warning  UnexpectedAdmissionError  1m  kubelet  {text}\n"))
    g = f["k8s.allocate-nvml-failed"]
    assert g.severity is Severity.WARNING and g.action not in (Action.DRAIN_AND_REPAIR,
                                                                Action.REBOOT_NODE)
    assert "k8s.allocate-gpu-lost" not in f


def test_devices_taken_before_admission_are_a_race_not_the_gpus():
    f = by_id(run(k8s_describe=TAKEN))["k8s.allocate-devices-unavailable"]
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "requested 2, available 1" in f.title and "WITH_WORKLOAD=false" in f.explanation


@pytest.mark.parametrize(("message", "fid", "blame"), [
    ("Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
     "nvidia.com/gpu, which is unexpected", "k8s.allocate-unhealthy-devices", Blame.UNKNOWN),
    ("Allocate failed due to rpc error: code = Unknown desc = request for 'nvidia.com/gpu: 2' "
     "too large: maximum request size for shared resources is 1, which is unexpected",
     "k8s.allocate-shared-limit", Blame.JOB_CONFIG),
])
def test_other_refusals(message, fid, blame):
    f = by_id(run(k8s_describe=f"  Warning  UnexpectedAdmissionError  9s  kubelet  {message}\n"))
    assert f[fid].blame is blame and f[fid].severity is Severity.WARNING


def test_the_refusal_folds_under_the_lost_gpu(tmp_path):
    text = (DEVICE_LOST + "\n\nUnable to determine the device handle for GPU 0000:C1:00.0: GPU "
            "is lost.  Reboot the system to recover this GPU\n")
    result = _analyze(tmp_path, text)
    top = {f.id: f for f in result.findings}
    assert "nvidia-smi.gpu-lost" in top and "k8s.allocate-gpu-lost" not in top
    assert "k8s.allocate-gpu-lost" in {c.id for c in top["nvidia-smi.gpu-lost"].consequences}


def test_a_table_of_get_events_stays_the_tables(tmp_path):
    text = ("LAST SEEN   TYPE      REASON                     OBJECT        MESSAGE\n"
            f"2m          Warning   UnexpectedAdmissionError   pod/train-0   {LINK_LOST}\n")
    found = dict(detect(text))
    assert "k8s_table" in found and "k8s_describe" not in found
    assert "k8s.allocate-gpu-lost" in by_id(_analyze(tmp_path, text))


def test_get_events_rows_are_read_once_each(monkeypatch):
    """Whether a run of ``kubectl get events`` rows stands under the table's header is
    told once per run: paste detection looked back over the run from every row (a
    3,000-row table took 15 times as long to recognise)."""
    from gputriage.parsers import detect_k8s
    calls = []

    class Counting:
        def match(self, line: str):
            calls.append(line)
            return GET_EVENT_ROW.match(line)

    monkeypatch.setattr(detect_k8s, "GET_EVENT_ROW", Counting())
    rows = [f"{n}m   Normal   Pulled   pod/train-{n}   Container image already present"
            for n in range(200)]
    text = "LAST SEEN   TYPE   REASON   OBJECT   MESSAGE\n" + "\n".join(rows) + "\n"
    assert "k8s_table" in dict(detect(text))
    assert len(calls) <= len(rows) + 1


@pytest.mark.parametrize(("req", "quota", "alloc", "fid"), [
    ("0.2", "0.3", "0.1", "k8s.scheduler-quota-exact-fit"),  # 0.1 + 0.2 > 0.3 in floats
    ("0.7", "1", "0.3", "k8s.scheduler-quota-exact-fit"),
    ("0.25", "0.3", "0.1", "k8s.pending-queue-quota"),
    ("1", "1", "1", "k8s.pending-queue-quota"),
])
def test_kai_quota_exact_fit_is_the_schedulers_rounding(req, quota, alloc, fid):
    found = by_id(run(k8s_describe=KAI.format(req=req, quota=quota, alloc=alloc)))
    assert fid in found and len(found) == 1
    f = found[fid]
    assert f.severity is Severity.WARNING and f.action not in (Action.DRAIN_AND_REPAIR,
                                                               Action.REBOOT_NODE)
    assert f.blame is (Blame.CONFIG if fid.endswith("exact-fit") else Blame.JOB_CONFIG)


def test_kai_quota_in_a_wrapped_event(tmp_path):
    text = ("2026-08-03T07:24:04Z  Warning  infer-claim-2  Unschedulable  kai-scheduler\n"
            "  NonPreemptibleOverQuota: Non-preemptible workload is over quota. Workload "
            "requested 1 GPUs,\n  but Inference Prod quota is 1 GPUs, while 1 GPUs are already "
            "allocated for non-preemptible pods.\n")
    f = by_id(_analyze(tmp_path, text))["k8s.pending-queue-quota"]
    assert "Inference Prod" in f.title

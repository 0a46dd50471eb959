"""Clock-event, temperature and power rules on hand-written nvidia-smi outputs,
the nvsmi fixtures and the real captures of categories 1 and 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostkit import ids, run
from smi_kit import gpu, hot_gpu, reasons, xml_host

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity

FIXTURES = Path(__file__).parent / "fixtures" / "nvsmi"
AREAS = ("clocks.", "thermal.", "power.")
H100_TLIMIT = {"gpu_temp_max_tlimit_threshold": -8, "gpu_temp_slow_tlimit_threshold": -2,
               "gpu_temp_max_gpu_tlimit_threshold": 0}
ABS_A10 = {"gpu_temp_max_threshold": 98, "gpu_temp_slow_threshold": 95,
           "gpu_temp_max_gpu_threshold": 88}


RULE_CASES = {
    "thermal.limits": [
        (xml_host(hot_gpu(92, name="NVIDIA A10G", absolute=ABS_A10)), "thermal.near-limit"),
        (xml_host(hot_gpu(84, tlimit={"gpu_temp_tlimit": 1, **H100_TLIMIT})),
         "thermal.near-limit"),
    ],
    "clocks.event-reasons": [
        (xml_host(hot_gpu(60, "hw_slowdown")), "clocks.hw-slowdown"),
        (xml_host(hot_gpu(89, "hw_slowdown", "hw_thermal_slowdown")),
         "clocks.hw-thermal-slowdown"),
        (xml_host(hot_gpu(50, "hw_slowdown", "hw_power_brake_slowdown")),
         "clocks.hw-power-brake"),
        (xml_host(hot_gpu(80, "sw_thermal_slowdown")), "clocks.sw-thermal-slowdown"),
    ],
    "power.limit": [
        (xml_host(hot_gpu(70, "sw_power_cap", draw=698.0)), "power.at-limit"),
    ],
}

def mine(result):
    return [f for f in result.findings if f.id.startswith(AREAS)]


def one(result, fid):
    found = [f for f in result.findings if f.id == fid]
    assert len(found) == 1, [(f.id, f.title) for f in result.findings]
    return found[0]


def test_busy_healthy_gpu_gives_nothing():
    result = run(**xml_host(hot_gpu(65, tlimit={"gpu_temp_tlimit": 22, **H100_TLIMIT})))
    assert not mine(result)


def test_idle_reason_never_alarms():
    result = run(**xml_host(hot_gpu(30, "gpu_idle", util=0, draw=70.0)))
    assert not mine(result)


def test_hw_slowdown_busy_is_critical_idle_warning():
    busy = one(run(**xml_host(hot_gpu(60, "hw_slowdown"))), "clocks.hw-slowdown")
    assert (busy.severity, busy.action, busy.blame) == (
        Severity.CRITICAL, Action.DRAIN_AND_REPAIR, Blame.NODE)
    assert "while busy" in busy.title and busy.scope.pci_bus_id == "0000:18:00.0"
    idle = one(run(**xml_host(hot_gpu(40, "hw_slowdown", util=0, draw=80.0))),
               "clocks.hw-slowdown")
    assert idle.severity == Severity.WARNING


def test_hw_slowdown_with_cool_gpu_points_at_power():
    f = one(run(**xml_host(hot_gpu(55, "hw_slowdown",
                                   tlimit={"gpu_temp_tlimit": 32, **H100_TLIMIT}))),
            "clocks.hw-slowdown")
    assert "PSU" in f.explanation
    lines = [ln.strip() for e in f.evidence for ln in e.lines]
    assert "<clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>" in lines
    assert "<gpu_temp>55 C</gpu_temp>" in lines
    assert not any("Not Active" in ln for ln in lines)


def test_specific_hw_reason_replaces_the_generic_one():
    result = run(**xml_host(hot_gpu(90, "hw_slowdown", "hw_thermal_slowdown")))
    f = one(result, "clocks.hw-thermal-slowdown")
    assert (f.severity, f.action) == (Severity.CRITICAL, Action.DRAIN_AND_REPAIR)
    assert "clocks.hw-slowdown" not in ids(result)
    brake = one(run(**xml_host(hot_gpu(50, "hw_slowdown", "hw_power_brake_slowdown"))),
                "clocks.hw-power-brake")
    assert "PSU" in brake.explanation


def test_sw_thermal_is_a_cooling_warning():
    f = one(run(**xml_host(hot_gpu(83, "sw_thermal_slowdown"))), "clocks.sw-thermal-slowdown")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.NODE)


def test_old_throttle_reason_names_are_understood():
    g = gpu("00000000:18:00.0", "Tesla V100-SXM2-16GB",
            clocks_throttle_reasons=reasons("hw_slowdown", old=True),
            utilization={"gpu_util": "90 %"})
    assert "clocks.hw-slowdown" in ids(run(**xml_host(g)))


@pytest.mark.parametrize(("temp", "tlimit", "near"), [(80, 7, False), (84, 3, True),
                                                      (90, -3, True)])
def test_tlimit_margins(temp, tlimit, near):
    result = run(**xml_host(hot_gpu(temp, tlimit={"gpu_temp_tlimit": tlimit, **H100_TLIMIT})))
    assert ("thermal.near-limit" in ids(result)) is near


def test_absolute_limits_and_max_operating():
    assert "thermal.near-limit" not in ids(run(**xml_host(hot_gpu(
        80, name="NVIDIA A10G", absolute=ABS_A10))))
    f = one(run(**xml_host(hot_gpu(89, name="NVIDIA A10G", absolute=ABS_A10))),
            "thermal.near-limit")
    assert "maximum operating" in f.title
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.NODE)
    assert any("<gpu_temp_slow_threshold>95 C</gpu_temp_slow_threshold>" in ln
               for e in f.evidence for ln in e.lines)


def _table(name: str, temp: int, draw: int, cap: int) -> str:
    return ("+-----------------------------------------------------------------------------+\n"
            "| NVIDIA-SMI 550.90.07    Driver Version: 550.90.07    CUDA Version: 12.4     |\n"
            "|-------------------------------+----------------------+----------------------+\n"
            "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |\n"
            "| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |\n"
            "|===============================+======================+======================|\n"
            f"|   0  {name:<20} On   | 00000000:18:00.0 Off |                    0 |\n"
            f"| N/A   {temp}C    P0   {draw}W / {cap}W |  60000MiB / 81559MiB |"
            "    100%      Default |\n"
            "+-------------------------------+----------------------+----------------------+\n")


def test_profile_limits_when_the_gpu_reports_none():
    f = one(run(nvidia_smi=_table("NVIDIA H100 80GB HBM3", 86, 500, 700)),
            "thermal.near-limit")
    assert "89 C" in f.title and "usual one of this model" in f.explanation
    assert f.evidence[0].source == "nvidia_smi" and "86C" in f.evidence[0].lines[1]
    assert "thermal.near-limit" not in ids(run(nvidia_smi=_table("NVIDIA H100 80GB HBM3",
                                                                  80, 500, 700)))


def test_unknown_model_uses_a_generic_level_and_says_so():
    assert "thermal.near-limit" not in ids(run(nvidia_smi=_table("NVIDIA Mystery X1", 84,
                                                                 200, 300)))
    f = one(run(nvidia_smi=_table("NVIDIA Mystery X1", 88, 200, 300)), "thermal.near-limit")
    assert "generic" in f.title and "not known" in f.explanation


def test_memory_temperature_near_its_limit():
    g = gpu("00000000:18:00.0", "NVIDIA A100-SXM4-80GB",
            temperature={"gpu_temp": "60 C", "gpu_temp_slow_threshold": "89 C",
                         "memory_temp": "92 C", "gpu_temp_max_mem_threshold": "95 C"})
    f = one(run(**xml_host(g)), "thermal.near-limit")
    assert "memory 92 C" in f.title


def test_power_at_limit_is_info_unless_capped():
    f = one(run(**xml_host(hot_gpu(70, "sw_power_cap", draw=699.0))), "power.at-limit")
    assert (f.severity, f.action) == (Severity.INFO, Action.NONE)
    capped = one(run(**xml_host(hot_gpu(70, "sw_power_cap", draw=449.0, limit=450.0))),
                 "power.at-limit")
    assert capped.action == Action.FIX_CONFIG and "lowered from 700 W" in capped.title
    assert capped.severity == Severity.INFO


@pytest.mark.parametrize(("active", "draw"), [(("sw_power_cap",), 500.0), ((), 699.0)])
def test_power_not_at_limit_or_not_capping(active, draw):
    assert "power.at-limit" not in ids(run(**xml_host(hot_gpu(70, *active, draw=draw))))


def test_power_from_the_table_alone():
    f = one(run(nvidia_smi=_table("NVIDIA H100 80GB HBM3", 70, 699, 700)), "power.at-limit")
    assert f.severity == Severity.INFO


def test_fixture_with_hw_slowdown_and_sw_thermal():
    result = analyze(load_input(str(FIXTURES / "xml-565-event-reasons-fabric.xml")))
    assert {f.id for f in mine(result)} == {"clocks.hw-slowdown", "clocks.sw-thermal-slowdown"}
    f = one(result, "clocks.hw-slowdown")
    assert f.severity == Severity.CRITICAL and "71 C" in f.title


def test_old_text_fixture_power_cap_not_pinned():
    result = analyze(load_input(str(FIXTURES / "q-old-470-throttle-pascal-ecc.txt")))
    assert not mine(result)


# -- real captures ---------------------------------------------------------------------------

def test_corpus_healthy_gpus_raise_nothing(corpus):
    for sample in corpus.category("1") + corpus.category("2"):
        if not sample.expected.lower().startswith("healthy"):
            continue
        result = analyze(load_input(str(sample.path)))
        bad = [(f.id, f.title) for f in mine(result) if f.severity.rank >= Severity.WARNING.rank]
        assert not bad, sample.name


def test_corpus_tlimit_temperatures_read_as_margins(corpus):
    from gputriage.facts.store import Facts
    from gputriage.rules.thermal import thermal_state

    facts = Facts(load_input(str(corpus.sample("thamada-1x-h200-passthrough").path)))
    (view,) = facts.get("smi_views")
    state = thermal_state(view)
    assert (state.temp, state.headroom, state.slowdown, state.basis) == (28, 61, 89, "t.limit")
    assert not state.over_max_operating

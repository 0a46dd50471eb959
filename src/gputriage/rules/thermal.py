"""Rules on clocks, temperature and power: active clock-event (throttle)
reasons, temperatures close to the slowdown limit, power draw pinned at the
limit.

Temperature limits come from the GPU itself (absolute thresholds, or the
relative "T.Limit" margins newer drivers print), else from the model's
profile in :mod:`gputriage.knowledge`, else from a conservative generic level.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from gputriage import knowledge
from gputriage.facts.smi_views import SmiView
from gputriage.model import Action, Blame, Evidence, Finding, Severity
from gputriage.parsers.nvsmi import parse_float, parse_int
from gputriage.rules.base import action_for, finding, rule

#: within this many degrees of the slowdown temperature a GPU is "near the limit"
NEAR_LIMIT_C = 5
#: a GPU of unknown limits is called hot from this temperature (most datacenter
#: GPUs slow down between 87 and 95 C)
GENERIC_HOT_C = 85
#: power draw at or above this share of the enforced limit is "at the limit"
AT_LIMIT_SHARE = 0.95
#: a power limit below this share of the default/TDP counts as capped
CAPPED_SHARE = 0.9

_CLOCK_SECTIONS = ("clocks event reasons", "clocks throttle reasons")
_TEMP_SECTIONS = ("temperature",)
_POWER_SECTIONS = ("gpu power readings", "power readings")


def _active(line: str) -> bool:
    """A clock-reason line that reads Active (not "Not Active")."""
    return bool(re.search(r"(?::\s*|>)Active\b", line))


def _temp_or_power(line: str) -> bool:
    low = line.lower()
    return any(k in low for k in ("current temp", "gpu_temp>", "gpu temp", "t.limit", "tlimit",
                                  "slow", "max operating", "power draw", "power limit",
                                  "power_draw", "power_limit"))


@dataclass
class Thermal:
    """What is known about one GPU's temperature and how far it is from its limits."""

    temp: int | None
    slowdown: int | None  # absolute slowdown temperature, when known
    headroom: int | None  # degrees to the slowdown limit (or the closest limit known)
    over_max_operating: bool
    basis: str  # where the limit came from: "reported", "t.limit", "profile", "generic"
    mem_temp: int | None = None
    mem_headroom: int | None = None


def thermal_state(view: SmiView) -> Thermal:
    """The GPU's temperature against the best-known limits."""
    temp = view.value("temperature_c")
    mem_temp = parse_int(view.raw("temperature/memory temp", "temperature/memory current temp"))
    mem_max = parse_int(view.raw("temperature/gpu temp max mem threshold",
                                 "temperature/memory max operating temp"))
    profile = knowledge.gpu_profile(view.name)
    if mem_max is None and profile is not None:
        mem_max = profile.temp_memory_max_c
    mem_headroom = mem_max - mem_temp if mem_temp is not None and mem_max is not None else None
    tlimit = _margin(view.raw("temperature/gpu temp tlimit", "temperature/gpu t.limit temp"))
    if tlimit is not None:
        slow_t = _margin(view.raw("temperature/gpu temp slow tlimit threshold",
                                  "temperature/gpu slowdown t.limit temp"))
        maxop_t = _margin(view.raw("temperature/gpu temp max gpu tlimit threshold",
                                   "temperature/gpu max operating t.limit temp"))
        headroom: int | None = tlimit - (slow_t if slow_t is not None and slow_t < 0 else 0)
        slowdown: int | None = temp + headroom if temp is not None else None
        over = maxop_t is not None and tlimit <= maxop_t
        return Thermal(temp, slowdown, headroom, over, "t.limit", mem_temp, mem_headroom)
    slowdown = view.value("temp_slowdown_c")
    max_op = parse_int(view.raw("temperature/gpu temp max gpu threshold",
                                "temperature/gpu max operating temp"))
    basis = "reported"
    if slowdown is None and profile is not None and profile.temp_slowdown_c is not None:
        slowdown, basis = profile.temp_slowdown_c, "profile"
        max_op = max_op if max_op is not None else profile.temp_max_operating_c
    if slowdown is None:
        headroom = GENERIC_HOT_C - temp if temp is not None else None
        return Thermal(temp, None, headroom, False, "generic", mem_temp, mem_headroom)
    headroom = slowdown - temp if temp is not None else None
    over = temp is not None and max_op is not None and temp >= max_op
    return Thermal(temp, slowdown, headroom, over, basis, mem_temp, mem_headroom)


def _margin(raw: str | None) -> int | None:
    """A signed T.Limit margin in degrees; None when absent or implausible."""
    value = parse_int(raw)
    return value if value is not None and -60 <= value <= 150 else None


def _temp_evidence(view: SmiView) -> list[Evidence]:
    return view.section(_TEMP_SECTIONS, fallback=[]) or view.table_rows()


@rule("thermal.limits", produces=("thermal.near-limit",))
def near_limit(smi_views: list[SmiView]) -> Iterator[Finding]:
    """A GPU (or its memory) within a few degrees of its slowdown temperature, or
    above its maximum operating temperature: one step from losing clocks."""
    for view in smi_views:
        st = thermal_state(view)
        gpu_near = st.headroom is not None and (
            st.headroom <= (0 if st.basis == "generic" else NEAR_LIMIT_C))
        mem_near = st.mem_headroom is not None and st.mem_headroom <= NEAR_LIMIT_C
        if not (gpu_near or st.over_max_operating or mem_near):
            continue
        parts = []
        if gpu_near or st.over_max_operating:
            if st.basis == "generic":
                parts.append(f"{st.temp} C (limits unknown for this model; generic alarm "
                             f"level {GENERIC_HOT_C} C)")
            elif st.headroom is not None and st.headroom <= 0:
                parts.append(f"{st.temp} C, at or past its slowdown temperature"
                             + (f" {st.slowdown} C" if st.slowdown is not None else ""))
            elif gpu_near:
                parts.append(f"{st.temp} C, {st.headroom} C below slowdown"
                             + (f" ({st.slowdown} C)" if st.slowdown is not None else ""))
            else:
                parts.append(f"{st.temp} C, above its maximum operating temperature")
        if mem_near:
            parts.append(f"memory {st.mem_temp} C, {st.mem_headroom} C below its limit")
        basis = {"profile": " The limit is the usual one of this model, as the GPU did not "
                            "report its own.",
                 "generic": " This model's limits are not known here, so a generic level is "
                            "used; read them with nvidia-smi -q -d TEMPERATURE."}.get(st.basis,
                                                                                     "")
        yield finding(
            "thermal.near-limit", Severity.WARNING,
            f"{view.label}: running hot: {'; '.join(parts)}",
            "Close to the slowdown temperature the GPU cuts its clocks hard, and jobs slow "
            "down or stall their peers. Check fans, airflow, blanking panels and inlet "
            f"temperature for this slot.{basis}", Action.FIX_CONFIG, Blame.NODE, view.scope,
            _temp_evidence(view) or [])


_HW_REASONS = {
    "hw_thermal_slowdown": (
        "clocks.hw-thermal-slowdown", "hardware thermal slowdown active",
        "The GPU's hardware thermal protection cut its clocks (by half or more): it reached "
        "its slowdown temperature{temp_note}. Jobs on it run far slower and hold back their "
        "peers. Drain the node and fix its cooling (fans, heatsink, airflow)."),
    "hw_power_brake_slowdown": (
        "clocks.hw-power-brake", "hardware power brake active",
        "The board's external power-brake signal is asserted, which cuts the clocks hard. "
        "The chassis raises it on power-supply trouble (a failed PSU, lost redundancy, power "
        "cabling). Drain the node and check its PSUs and the BMC's power events."),
}


HW_REASONS = frozenset(_HW_REASONS)  # the reasons that cut the clocks hard: drain
# the active reasons that mean trouble (idle, application clocks, power capping do not)
TROUBLE_REASONS = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                             "sw_thermal_slowdown"})


@rule("clocks.event-reasons",
      produces=("clocks.hw-slowdown", "clocks.hw-thermal-slowdown", "clocks.hw-power-brake",
                "clocks.sw-thermal-slowdown"))
def clock_reasons(smi_views: list[SmiView]) -> Iterator[Finding]:
    """Active clock-event (throttle) reasons that mean trouble: hardware slowdown
    (thermal, power brake) and software thermal slowdown. Idle, application
    clocks and power capping are normal and never alarm here."""
    for view in smi_views:
        reasons = view.value("clock_event_reasons") or {}
        active = {k for k, v in reasons.items() if v}
        if not active & TROUBLE_REASONS:
            continue
        st = thermal_state(view)
        ev = (view.section(_CLOCK_SECTIONS, keep=_active)
              + view.section(_TEMP_SECTIONS, keep=_temp_or_power)
              + view.section(_POWER_SECTIONS, keep=_temp_or_power))
        busy = " while busy" if view.busy else ""
        cool = st.headroom is not None and st.basis != "generic" and st.headroom > 10
        temp_note = (f" - yet it reads {st.temp} C, {st.headroom} C below the limit, so "
                     "suspect the sensor or the thermal path" if cool else
                     (f" ({st.temp} C)" if st.temp is not None else ""))
        specific = [r for r in _HW_REASONS if r in active]
        for reason in specific:
            fid, what, why = _HW_REASONS[reason]
            yield finding(fid, Severity.CRITICAL, f"{view.label}: {what}{busy}",
                          why.format(temp_note=temp_note), Action.DRAIN_AND_REPAIR, Blame.NODE,
                          view.scope, ev)
        if "hw_slowdown" in active and not specific:
            cause = ("Its temperature is normal, so the cause is most likely power: the "
                     "power brake from a failing or missing PSU, or over-current. Check the "
                     "PSUs and the BMC's event log." if cool else
                     "It is raised by over-temperature, the external power brake (PSU "
                     "trouble) or over-current. Check cooling and the PSUs.")
            severity = Severity.CRITICAL if view.busy else Severity.WARNING
            then = ("Drain the node for repair." if view.busy else
                    "The GPU was not seen busy: check it under load, drain it if the slowdown "
                    "stays, else repair at the next maintenance window.")
            yield finding(
                "clocks.hw-slowdown", severity,
                f"{view.label}: hardware slowdown active{busy}"
                + (f" at {st.temp} C" if st.temp is not None else ""),
                "Hardware slowdown cuts the GPU's clocks by half or more, so jobs on it crawl "
                f"and stall their peers. {cause} {then}",
                action_for(severity, Action.DRAIN_AND_REPAIR), Blame.NODE, view.scope, ev)
        if "sw_thermal_slowdown" in active:
            yield finding(
                "clocks.sw-thermal-slowdown", Severity.WARNING,
                f"{view.label}: software thermal slowdown active{busy}"
                + (f" at {st.temp} C" if st.temp is not None else ""),
                "The driver lowers the clocks to keep the GPU under its maximum operating "
                "temperature: it runs slower than its peers. Improve cooling for this slot "
                "(fans, airflow, inlet temperature).", Action.FIX_CONFIG, Blame.NODE,
                view.scope, ev)


@rule("power.limit", produces=("power.at-limit",))
def power_at_limit(smi_views: list[SmiView]) -> Iterator[Finding]:
    """Power draw pinned at the enforced limit while the driver caps the clocks:
    normal under heavy load, worth knowing when the limit was lowered."""
    for view in smi_views:
        draw, limit = view.value("power_draw_w"), view.value("power_limit_w")
        if draw is None or not limit or draw < AT_LIMIT_SHARE * limit:
            continue
        reasons = view.value("clock_event_reasons") or {}
        if reasons and not reasons.get("sw_power_cap"):
            continue
        default = parse_float(view.raw("gpu power readings/default power limit",
                                       "power readings/default power limit"))
        profile = knowledge.gpu_profile(view.name)
        reference = default or (profile.tdp_w if profile is not None else None)
        capped = reference is not None and limit < CAPPED_SHARE * reference
        title = f"{view.label}: power draw {draw:.0f} W at its {limit:.0f} W limit"
        if capped:
            title += f" (lowered from {reference:.0f} W)"
        why = ("The GPU uses all the power it is allowed and the driver holds its clocks "
               "there: expected under heavy load.")
        if capped:
            why += (" The limit is set below the default, which costs throughput; restore it "
                    "(nvidia-smi -pl) unless the cap is deliberate.")
        ev = view.section(_POWER_SECTIONS, keep=_temp_or_power) + view.section(
            _CLOCK_SECTIONS, keep=_active)
        yield finding("power.at-limit", Severity.INFO, title, why,
                      Action.FIX_CONFIG if capped else Action.NONE,
                      Blame.CONFIG if capped else Blame.UNKNOWN, view.scope,
                      ev or view.table_rows())

"""Rules on GPU memory health: ECC mode and counters, page retirement, row remapping,
read from the per-GPU nvidia-smi views (:mod:`gputriage.facts.smi_views`)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from gputriage import knowledge
from gputriage.facts.smi_views import SmiView
from gputriage.model import Action, Blame, Finding, Severity, evidence
from gputriage.rules.base import finding, rule
from gputriage.text.fields import strict_int

#: aggregate (lifetime) corrected ECC errors from which we mention them
CORRECTED_AGGREGATE_HIGH = 1000
#: volatile (since the last reset) corrected ECC errors that make a warning
CORRECTED_VOLATILE_HIGH = 1000
#: pages a pre-Ampere GPU can retire (NVIDIA: at most 64 retirements of its frame buffer)
RETIRED_PAGES_LIMIT = 64
#: retired pages from which the table counts as nearly full (our threshold, ~90 %)
RETIRED_PAGES_NEAR = 58
#: rows remapped for uncorrectable errors from which the GPU is a repair case (our
#: threshold: a whole bank's worth of spares; A100/H100 banks have 8, 512 remaps per GPU)
REMAP_UNCORRECTABLE_RMA = 8


def _nonzero(line: str) -> bool:
    """A counter line whose value is a non-zero number."""
    m = re.search(r"(?::|>)\s*([0-9]+)\s*(?:<|$)", line)
    return bool(m and strict_int(m.group(1)))


def _yes(line: str) -> bool:
    return bool(re.search(r"(?::\s*|>)Yes\b", line))


# -- rules ------------------------------------------------------------------------------------

@rule("memory.ecc-mode", produces=("memory.ecc-disabled",))
def ecc_mode(smi_views: list[SmiView]) -> Iterator[Finding]:
    """ECC off on a datacenter GPU: memory errors go undetected and silently
    corrupt results; datacenter parts are meant to run with ECC on."""
    for view in smi_views:
        if view.value("ecc_mode") is not False or not knowledge.is_datacenter(view.name):
            continue
        pending = view.raw("ecc mode/pending ecc", "ecc mode/pending")
        will_enable = pending is not None and pending.lower() == "enabled"
        how = ("ECC is already set to turn on: reset the GPU when it is idle (nvidia-smi -r) "
               "or reboot to apply it." if will_enable else
               "Unless it was turned off on purpose, enable it (nvidia-smi -e 1) and reset "
               "the GPU or reboot.")
        yield finding(
            "memory.ecc-disabled", Severity.WARNING,
            f"{view.label}: ECC is disabled"
            + (" (enabled after the next reset)" if will_enable else ""),
            "Without ECC, memory bit flips go undetected and silently corrupt training or "
            f"inference results instead of raising an error. {how}",
            Action.FIX_CONFIG, Blame.CONFIG, view.scope,
            view.section(("ecc mode",), fallback=["ECC mode: disabled"]))


@rule("memory.ecc-errors",
      produces=("memory.uncorrectable", "memory.correctable-high"))
def ecc_errors(smi_views: list[SmiView]) -> Iterator[Finding]:
    """ECC counters: uncorrectable errors since the last reset corrupted a job's
    memory; a high or still climbing corrected count is a memory wearing out."""
    for view in smi_views:
        vol_unc, part = view.where("ecc_volatile_uncorrected")
        agg_unc = view.value("ecc_aggregate_uncorrected")
        vol_cor = view.value("ecc_volatile_corrected")
        agg_cor = view.value("ecc_aggregate_corrected")
        ev = view.section(("ecc errors",), keep=_nonzero) if part is None or \
            part.format != "table" else view.table_rows()
        if vol_unc:
            yield finding(
                "memory.uncorrectable", Severity.CRITICAL,
                f"{view.label}: {vol_unc} uncorrectable ECC error(s) since the last reset",
                "An uncorrectable memory error corrupted data of the job that was running; "
                "that job must be restarted. Drain the GPU and reset it so the bad row is "
                "remapped or the page retired; repair the GPU if errors come back.",
                Action.RESET_GPU, Blame.NODE, view.scope,
                ev or [evidence(part.source if part else "nvidia_smi",
                                [f"{view.label}: volatile uncorrectable {vol_unc}"])])
        elif agg_unc:
            yield finding(
                "memory.uncorrectable", Severity.INFO,
                f"{view.label}: {agg_unc} uncorrectable ECC error(s) in its lifetime, none "
                "since the last reset",
                "Past uncorrectable errors were handled by a reset (row remap or page "
                "retirement). Nothing to do now; a GPU that keeps collecting them should be "
                "repaired.", Action.NONE, Blame.NODE, view.scope, ev)
        high_vol = vol_cor is not None and vol_cor >= CORRECTED_VOLATILE_HIGH
        high_agg = agg_cor is not None and agg_cor >= CORRECTED_AGGREGATE_HIGH
        if high_vol or high_agg:
            rising = high_vol or bool(vol_cor)
            yield finding(
                "memory.correctable-high", Severity.WARNING if rising else Severity.INFO,
                f"{view.label}: {agg_cor if agg_cor is not None else '?'} corrected ECC "
                f"errors in its lifetime, {vol_cor if vol_cor is not None else '?'} since "
                "the last reset",
                "ECC fixed these errors, so no job was harmed, but many corrected errors "
                + ("that are still climbing " if rising else "")
                + "mean a memory wearing out. Watch the trend; run the DCGM memory "
                "diagnostic at the next drain and repair the GPU if uncorrectable errors or "
                "remaps follow.", Action.NONE, Blame.NODE, view.scope,
                view.section(("ecc errors",), keep=_nonzero,
                             fallback=[f"aggregate corrected {agg_cor}, "
                                       f"volatile corrected {vol_cor}"]))


@rule("memory.page-retirement",
      produces=("memory.retired-pages-pending", "memory.retired-pages-limit"))
def page_retirement(smi_views: list[SmiView]) -> Iterator[Finding]:
    """Pages marked for retirement (pre-Ampere GPUs) are only retired when the
    driver reloads: until then the bad memory stays in use. A retirement table
    full or nearly full leaves no room for the next bad page: a repair case."""
    for view in smi_views:
        sbe, dbe = view.value("retired_pages_sbe"), view.value("retired_pages_dbe")
        counts = ", ".join(f"{n} {k}" for n, k in ((sbe, "single-bit"), (dbe, "double-bit"))
                           if n is not None)
        pending = view.value("retired_pages_pending")
        if (sbe or 0) + (dbe or 0) >= RETIRED_PAGES_NEAR:
            yield _retirement_full(view, (sbe or 0) + (dbe or 0), counts, bool(pending))
            continue
        if not pending:
            continue
        yield finding(
            "memory.retired-pages-pending", Severity.WARNING,
            f"{view.label}: memory page retirement pending"
            + (f" ({counts} pages retired so far)" if counts else ""),
            "The GPU marked failing memory pages for retirement; they are taken out of use "
            "only when the GPU is reset. Reset it when it is idle (nvidia-smi -r) or at the "
            "next maintenance window (or reboot the node).",
            Action.PLAN_REPAIR, Blame.NODE, view.scope,
            view.section(("retired pages",), keep=lambda ln: _yes(ln) or _nonzero(ln),
                         fallback=["retired pages: pending yes"]))


def _retirement_full(view: SmiView, total: int, counts: str, pending: bool) -> Finding:
    full = total >= RETIRED_PAGES_LIMIT
    stuck = (" Retirements still pending cannot be applied: there is no room left for "
             "them." if pending and full else "")
    return finding(
        "memory.retired-pages-limit", Severity.CRITICAL,
        f"{view.label}: page retirement table {'full' if full else 'nearly full'} "
        f"({total} of {RETIRED_PAGES_LIMIT} pages: {counts})"
        + (", retirement pending" if pending else ""),
        f"A GPU of this generation can retire at most {RETIRED_PAGES_LIMIT} memory pages; "
        "with the table (nearly) used up, the next failing page stays in use and keeps "
        f"corrupting jobs.{stuck} A reset does not help: drain the node and have the GPU "
        "replaced (RMA).", Action.DRAIN_AND_REPAIR, Blame.NODE, view.scope,
        view.section(("retired pages",), keep=lambda ln: _yes(ln) or _nonzero(ln),
                     fallback=[f"retired pages: {counts}, pending {pending}"]))


def _remap_worn(view: SmiView) -> str | None:
    """Why the row remapper is close to its limit, or None."""
    unc = view.value("remapped_uncorrectable") or 0
    hist = view.value("remap_histogram") or {}
    short = {k: hist[k] for k in ("low", "none") if hist.get(k)}
    why = []
    if unc >= REMAP_UNCORRECTABLE_RMA:
        why.append(f"{unc} rows remapped for uncorrectable errors")
    if short:
        why.append(", ".join(f"{n} bank(s) at {k.capitalize()} spare-row availability"
                             for k, n in short.items()))
    return "; ".join(why) or None


@rule("memory.row-remapping",
      produces=("memory.remap-pending", "memory.remap-failed", "memory.remap-exhausting"))
def row_remapping(smi_views: list[SmiView]) -> Iterator[Finding]:
    """Row remapping (Ampere and later): a pending remap needs a GPU reset to take
    effect; a failed remap means no spare row was left and the GPU needs repair; many
    uncorrectable remaps, or banks with few or no spare rows left, make it a repair
    case before the spares run out."""
    for view in smi_views:
        failed, pending = view.value("remapping_failure"), view.value("remapping_pending")
        worn = None if failed else _remap_worn(view)
        if not (failed or pending or worn):
            continue
        unc, cor = view.value("remapped_uncorrectable"), view.value("remapped_correctable")
        counts = ", ".join(f"{n} {k}" for n, k in ((unc, "uncorrectable"), (cor, "correctable"))
                           if n)
        rows = f" ({counts}-error row(s) remapped)" if counts else ""
        ev = view.section(("remapped rows",),
                          fallback=[f"remapping pending: {bool(pending)}, "
                                    f"remapping failure: {bool(failed)}"])
        if failed:
            yield finding(
                "memory.remap-failed", Severity.CRITICAL,
                f"{view.label}: row remapping failed{rows}",
                "The GPU could not remap a failing memory row (its bank had no spare rows "
                "left), so the error will keep coming back. Drain the node and have the GPU "
                "repaired or replaced (RMA).", Action.DRAIN_AND_REPAIR, Blame.NODE,
                view.scope, ev)
        elif worn:
            yield finding(
                "memory.remap-exhausting", Severity.CRITICAL,
                f"{view.label}: row remapper near its limit ({worn})"
                + (", remap pending" if pending else ""),
                "Each memory bank holds only a few spare rows (8 per bank on A100/H100, at "
                "most 512 remaps per GPU); the histogram counts banks by the spares they "
                "have left (Max, High, Partial, Low, None). This many uncorrectable remaps, "
                "or banks at Low/None, mean memory that keeps failing: the next error may "
                "find no spare. A reset does not cure it: drain the node and have the GPU "
                "replaced (RMA).", Action.DRAIN_AND_REPAIR, Blame.NODE, view.scope, ev)
        else:
            yield finding(
                "memory.remap-pending", Severity.WARNING,
                f"{view.label}: row remap pending{rows}",
                "A memory row with errors was marked for remapping; the spare row is used "
                "only after a GPU reset. Reset the GPU when it is idle (nvidia-smi -r) or at "
                "the next maintenance window to activate the remap; with spare rows left "
                "this is routine maintenance, not a repair case.",
                Action.PLAN_REPAIR, Blame.NODE, view.scope, ev)

"""``gputriage expect --from SNAPSHOT``: write what a known-good node has as an
expectations file (``gputriage.parsers.expect``), for ``check`` to hold its peers to."""

from __future__ import annotations

from typing import Any

import click

from gputriage.commands.common import current_env
from gputriage.text.safe import printable


@click.command()
@click.option("--from", "source", required=True, metavar="SNAPSHOT",
              help="A known-good node's snapshot (directory or .tar.gz from collect), a "
                   "bug report, or anything analyze reads.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Write the file here (default: standard output).")
@click.option("--force", is_flag=True, help="Replace an existing FILE (refused otherwise).")
def expect(source: str, output: str | None, force: bool) -> None:
    """Write the expectations of a known-good node as TOML: GPU count and model, driver
    and CUDA versions, MIG and persistence mode, NVSwitches, PCIe links, InfiniBand
    ports and hugepages, each as the snapshot shows them. Install it as
    /etc/gputriage/expect.toml (or pass it with check --expect) on nodes of that kind;
    a node short of it is critical. See docs/expectations.md.

    \b
    gputriage expect --from good-node.tar.gz -o expect.toml"""
    from gputriage.engine.analysis import analyze
    from gputriage.facts.store import Facts
    from gputriage.ingest import load_inputs

    env = current_env()
    if output is not None:
        _check_output(output, force)
    snapshot = load_inputs([source])
    found, notes = generate(Facts(snapshot))
    result = analyze(snapshot)
    if result.host.verdict in ("warning", "critical"):
        worst = next((f for f in result.sorted_findings() if f.current), None)
        notes.insert(0, f"{source} is not healthy ({result.host.verdict}"
                        f"{': ' + worst.title if worst else ''}): the file states what it "
                        "has; check it before use")
    host = (snapshot.manifest or {}).get("host") or result.host.hostname or "the node"
    when = (snapshot.manifest or {}).get("created")
    # escaped: a control character in a TOML comment makes the whole file invalid
    header = (f"What {printable(host)} had{' at ' + printable(when) if when else ''}: "
              "gputriage expect --from.\nInstall as /etc/gputriage/expect.toml; see "
              "docs/expectations.md.")
    text = found.to_toml(header)
    for note in notes:
        env.stderr.write(f"gputriage: {printable(note)}\n")
    if output is None:
        env.stdout.write(text)
        return
    from gputriage.snapshot.writer import write_file

    # a private temporary renamed into place: never through a link, never over a file
    # without --force, and a file readable by the checks that run as other users
    write_file(output, text.encode("utf-8"), force=force, mode=0o644)
    env.stderr.write(f"expectations written to {printable(output)}\n")


def _check_output(output: str, force: bool) -> None:
    """A usage error for a name that says archive (the file is TOML) and for an
    existing file, unless ``force``."""
    from gputriage.snapshot.writer import ARCHIVE_SUFFIXES, OutputError, check_folder, occupied

    if output.lower().endswith(ARCHIVE_SUFFIXES):
        raise click.UsageError(f"{output}: expectations are a TOML file, not an archive "
                               "(name it e.g. expect.toml)")
    check_folder(output)
    if not force and occupied(output):
        raise OutputError(f"{output} already exists (use --force to replace it)")


def generate(facts: Any) -> tuple[Any, list[str]]:
    """The expectations a snapshot's facts show, and notes on what was left out."""
    from gputriage.parsers.expect import (
        Expectations,
        GpuExpect,
        HugepagesExpect,
        InfinibandExpect,
        NvSwitchExpect,
        PcieExpect,
    )

    notes: list[str] = []
    exp = Expectations(gpu=_gpu(facts, notes), nvswitch=NvSwitchExpect(_switches(facts)),
                       pcie=PcieExpect(**_pcie(facts, notes)),
                       infiniband=InfinibandExpect(**_infiniband(facts)),
                       hugepages=HugepagesExpect(**_hugepages(facts)))
    if exp.gpu == GpuExpect():
        notes.append("no GPU seen: the file states no [gpu] table")
    return exp, notes


def _gpu(facts: Any, notes: list[str]) -> Any:
    from gputriage.parsers.expect import GpuExpect
    from gputriage.rules.expectations import mig_modes, usable_gpus

    visible = facts.maybe("visible_gpus")
    usable = usable_gpus(visible, facts.maybe("lost_gpus", {}))
    pci_gpus = facts.maybe("pci_gpus")
    count = len(usable) if usable is not None else (len(pci_gpus) if pci_gpus else None)
    names = {g.name for g in usable or () if g.name}
    persist = {g.persistence_mode for g in usable or ()}
    modes = {m.strip().casefold() for _, m in mig_modes(facts.maybe("smi"))[1]}
    versions = facts.maybe("driver_versions")
    drv = (versions.kernel_module or versions.userspace) if versions is not None else None
    if versions is not None and versions.kernel_module and versions.userspace and \
            versions.kernel_module != versions.userspace:
        notes.append(f"driver versions disagree (kernel module {versions.kernel_module}, "
                     f"userspace {versions.userspace}): the file states the kernel module's")
    if len(names) > 1:
        notes.append(f"GPUs of several models ({', '.join(sorted(names))}): no gpu.model")
    return GpuExpect(
        count=count or None, model=names.pop() if len(names) == 1 else None, driver=drv,
        cuda=versions.cuda if versions is not None else None,
        mig=(modes == {"enabled"}) if modes and modes <= {"enabled", "disabled"} else None,
        persistence=persist.pop() if len(persist) == 1 and None not in persist else None)


def _switches(facts: Any) -> int | None:
    from gputriage.rules.expectations import nvswitch_count

    seen = facts.maybe("nvswitches")
    count = nvswitch_count(seen)[0] if seen is not None else 0
    return count or None


def _pcie(facts: Any, notes: list[str]) -> dict[str, int | None]:
    from gputriage.facts.pcie import IDLE_GTS
    from gputriage.rules.expectations import gen_of

    links = [x for x in facts.maybe("pcie_links", []) if x.kind == "gpu"]
    widths = [x.cur_width for x in links if x.cur_width is not None]
    speeds = [x.cur_gts for x in links if x.cur_gts is not None]
    width = min(widths) if links and len(widths) == len(links) else None
    gen = None
    if links and len(speeds) == len(links):
        if all(x.load == "busy" or (x.cur_gts or 0) > IDLE_GTS for x in links):
            gen = gen_of(min(speeds))
        else:
            notes.append("GPU links idle at the idle speed: no pcie.gen (generate from a "
                         "snapshot taken under load, or write it by hand)")
    return {"gen": gen, "width": width}


def _infiniband(facts: Any) -> dict[str, Any]:
    from gputriage.rules.expectations import DEFAULT_IB_STATE, active_ports

    ports = facts.maybe("ib_ports") or []
    up = active_ports(ports, DEFAULT_IB_STATE, None)
    if not up:
        return {}
    rates = [p.rate_gbps for p in up if p.rate_gbps is not None]
    return {"ports": len(up), "rate_gbps": min(rates) if rates else None,
            "state": DEFAULT_IB_STATE}


def _hugepages(facts: Any) -> dict[str, int]:
    from gputriage.facts.host import DEFAULT_HUGEPAGE_KB

    pools = [p for p in facts.maybe("host_hugepages", []) if p.nr]
    if not pools:
        return {}
    pool = next((p for p in pools if p.size_kb == DEFAULT_HUGEPAGE_KB), pools[0])
    return {"size_kb": pool.size_kb, "count": pool.nr}

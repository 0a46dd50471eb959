"""``gputriage nccl PATH...``: a job's NCCL logs and nccl-tests results, judged
together with the host's own facts when host outputs are among the inputs.

Job logs of any size stream through the NCCL log reader (1 MiB at a time,
plain or compressed); host inputs load as ``analyze`` loads them. The facts
of the one combined host get the job's log and runs pre-filled, every rule
whose inputs are there runs (with no host output, those of the areas a job's inputs
can feed: ``rules.NCCL_AREAS``), and the report shows what NCCL said per host,
each nccl-tests run against the bandwidth the hardware should give, then the
findings. Exit status as for ``analyze``; 66 when no input holds anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from gputriage.commands.common import html_option, no_pager_option, quiet_option

if TYPE_CHECKING:
    from gputriage.model import Result
    from gputriage.nccl.summary import NcclSummary


@click.command("nccl")
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON (schema gputriage/result/v1 plus an \"nccl\" "
                   "object).")
@html_option
@click.option("-v", "--verbose", is_flag=True,
              help="Every host, every size row, every finding in full and the skipped rules.")
@quiet_option
@no_pager_option
def nccl(paths: tuple[str, ...], as_json: bool, html: str | None, verbose: bool, quiet: bool,
         no_pager: bool) -> None:
    """Read NCCL_DEBUG=INFO logs (one file per rank or all ranks in one; .gz/.xz; -
    reads stdin) and nccl-tests outputs, with host outputs (snapshot, bug report,
    pasted nvidia-smi / ibstat / lsmod...) if you have them, and say what NCCL chose
    (network, HCAs, GPUDirect RDMA, transports per channel), how fast the tests ran
    against what the hardware should give, and what is wrong."""
    from gputriage.commands.common import CommandExit, current_env, quiet_line, show
    from gputriage.commands.progress import progress_for
    from gputriage.status import exit_status

    env = current_env()
    with progress_for(env, quiet) as progress:
        result, summary, host_given = judge(list(paths), progress.update)
    from gputriage.commands.common import save_html
    from gputriage.views.html import nccl_html

    save_html(html, lambda: nccl_html(result, summary), quiet=quiet)
    if as_json:
        from gputriage.results.document import to_json
        from gputriage.views.ncclview import nccl_document

        doc = to_json(result)
        doc["nccl"] = nccl_document(summary)
        env.write_json(doc, ensure_ascii=False, allow_nan=False)
    elif quiet:
        quiet_line(result, who=result.host.hostname or "the job",
                   who_is_job=not result.host.hostname)
    else:
        from gputriage.views.ncclview import render_nccl

        show(lambda console: render_nccl(result, summary, host_given, console,
                                         verbose=verbose), no_pager=no_pager)
    raise CommandExit(int(exit_status(result)))


def _load_engine() -> None:
    """Import the engine and the rules a job's inputs can feed now (what judging needs
    next): done while worker processes read a large log, it costs them little."""
    import gputriage.engine.acks
    import gputriage.engine.causes
    import gputriage.facts.nccl_bandwidth
    import gputriage.nccl.summary
    import gputriage.next_steps  # noqa: F401
    from gputriage.rules import NCCL_AREAS, rules_of

    rules_of(NCCL_AREAS)


def judge(paths: list[str], progress: Any = None) -> tuple[Result, NcclSummary, bool]:
    """Read the inputs (``progress`` told the bytes read of each), run the engine over the
    combined facts, judge each nccl-tests run against its expectation, and summarise the
    job; also whether host outputs were among the inputs."""
    from gputriage.nccl.inputs import read_inputs

    # (what judging needs is imported once the reading started: _load_engine)
    found = read_inputs(paths, progress, meanwhile=_load_engine)
    from gputriage.facts.nccl_bandwidth import expect_busbw_why
    from gputriage.facts.store import Facts, Missing
    from gputriage.nccl.summary import summarize
    from gputriage.snapshot.bundle import Snapshot

    host_given = found.snapshot is not None and bool(found.snapshot.captures)
    snap = found.snapshot or Snapshot({}, None, ", ".join(found.job_origins))
    snap.problems.extend(found.problems)
    facts = Facts(snap)
    facts.prefill("nccl_log", found.log if found.has_log
                  else Missing("nccl_log: no NCCL record in the inputs"))
    facts.prefill("nccl_tests", found.runs if found.runs
                  else Missing("nccl_tests: no nccl-tests run in the inputs"))
    from gputriage.engine.analysis import analyze_facts
    from gputriage.rules import NCCL_AREAS, rules_of

    # with no host output, only the job's areas have rules its facts can feed
    result = analyze_facts(facts, None if host_given else rules_of(NCCL_AREAS))
    known = {item.get("origin"): item for item in result.inputs}
    for origin, names in found.job_origins.items():
        if origin in known:  # an input that held host outputs and the job's lines
            known[origin]["sources"] = sorted({*known[origin]["sources"], *names})
        else:
            result.inputs.append({"origin": origin, "sources": names})
    judged = [(run, *expect_busbw_why(run, facts)) for run in found.runs]
    return result, summarize(found.log, judged), host_given


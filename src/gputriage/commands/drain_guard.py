"""``gputriage drain-guard``: the one place every recipe asks before it drains a Slurm
node or cordons a Kubernetes Node (docs/unattended.md): kill switch, observe-only,
allow-list, and a budget of nodes per hour and at once, counted on the scheduler."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from gputriage.commands.common import (
    CommandExit,
    StrictFloatRange,
    StrictIntRange,
    current_env,
)
from gputriage.text.safe import printable

EXIT_REFUSED = 1
EXIT_UNAVAILABLE = 69  # the scheduler could not be read or written (sysexits' EX_UNAVAILABLE)
UNAVAILABLE = ("fleet-unknown", "backend")
BUDGET = ("fleet-fraction", "rate")
REASON_MAX = 200


def _findings(path: str | None) -> list[dict[str, Any]] | None:
    """The findings of a JSON result; None without a file (the caller's own policy)."""
    if not path:
        return None
    from gputriage.io import safejson

    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            doc = safejson.loads(fh.read(64 * 1024 * 1024))
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--result") from None
    found = doc.get("findings") if isinstance(doc, dict) else None
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


def _reason(findings: list[dict[str, Any]] | None, allowed: list[str]) -> str:
    named = allowed or sorted({str(f.get("id")) for f in findings or []
                               if f.get("severity") == "critical"})
    return "gputriage CRITICAL: " + (", ".join(named) or "check exit 2")


def _blame(findings: list[dict[str, Any]] | None, named: list[str]) -> str:
    """`` (blame node)``: the blames of the findings a cordon names, for its annotation
    (what the uncordon reads back)."""
    blames = sorted({str(f.get("blame")) for f in findings or []
                     if f.get("blame") and str(f.get("id")) in named})
    return f" (blame {', '.join(blames)})" if blames else ""


def _last_check(results: Path, node: str, max_age_s: float,
                now_s: float) -> tuple[int | None, float | None]:
    """The exit status in ``<node>.rc`` and its time (Unix), when fresh and readable."""
    rc_file = results / f"{node}.rc"
    try:
        mtime = rc_file.stat().st_mtime
        text = rc_file.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None, None
    if now_s - mtime > max_age_s or not text.isdigit():
        return None, None
    return int(text), mtime


def _fresh_criticals(results: Path, max_age_s: float, now_s: float) -> list[str]:
    """The nodes whose ``<node>.rc`` in ``results`` says 2 and is fresh."""
    nodes = []
    for rc_file in sorted(results.glob("*.rc")):
        try:
            if now_s - rc_file.stat().st_mtime > max_age_s:
                continue
            if rc_file.read_text(encoding="utf-8", errors="replace").strip() == "2":
                nodes.append(rc_file.name[:-3])
        except OSError:
            continue
    return nodes


@click.command("drain-guard")
@click.argument("node", required=False)
@click.option("--reason", help="The drain reason (default: gputriage CRITICAL: the "
              "findings that may drain).")
@click.option("--result", "result_file", type=click.Path(dir_okay=False),
              help="The node's JSON result: the allow-list is judged on its findings "
              "(without it: the caller's own policy asks, only the budget applies).")
@click.option("--results", "results_dir", type=click.Path(file_okay=False, exists=True),
              help="A results directory (<node>.rc, <node>.json): every node whose fresh "
              "check exited 2, one after the other (the Kubernetes cordon job).")
@click.option("--max-age", type=StrictFloatRange(min=1), default=30.0, show_default=True,
              help="With --results: minutes a <node>.rc stays fresh.")
@click.option("--backend", type=click.Choice(["slurm", "k8s"]), default="slurm",
              show_default=True, help="Drain through Slurm or cordon through Kubernetes.")
@click.option("--enforce/--observe-only", default=None,
              help="Drain, or only say what would be drained (default: "
              "$GPUTRIAGE_DRAIN, observe-only when unset).")
@click.option("--per-hour", help="Nodes per hour: N or P% (default 2%, at least --min).")
@click.option("--max-out", help="Nodes out at once: N or P% (default 10%, at least --min).")
@click.option("--min", "floor", help="The floor of a percentage limit (default 2).")
@click.option("--allow", help="What may drain: finding ids, families (xid), globs, "
              "blame:node (the default), space or comma separated.")
@click.option("--kill-switch", type=click.Path(), help="The file that makes every recipe "
              "observe-only (default /etc/gputriage/observe-only).")
@click.option("--partition", help="Slurm: count the GPU nodes of this partition only.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Kubernetes: the "
              "kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster).")
@click.option("--settle", type=StrictFloatRange(min=0, max=60), default=None,
              help="Seconds between a drain and its confirmation (default 2).")
@click.option("--undrain", is_flag=True, help="Instead: return NODE to service when it "
              "was drained for a job's reason (Kill task failed, Prolog error) and "
              "--check-exit says its own check is clean (0 or 1).")
@click.option("--check-exit", type=StrictIntRange(min=0, max=255), default=None,
              help="With --undrain: the exit status of the node's check just run.")
@click.option("--resume-clean", is_flag=True, help="With --results and the k8s backend: "
              "first uncordon the Nodes cordoned by gputriage whose fresh check, run after "
              "the cordon, exited 0 or 1, or whose cordon blamed the job.")
@click.option("--dry-run", is_flag=True, help="Decide, drain nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per node.")
def drain_guard(node: str | None, reason: str | None, result_file: str | None,
                results_dir: str | None, max_age: float, backend: str,
                enforce: bool | None, per_hour: str | None, max_out: str | None,
                floor: str | None, allow: str | None, kill_switch: str | None,
                partition: str | None, kubeconfig: str | None, settle: float | None,
                undrain: bool, check_exit: int | None, resume_clean: bool,
                dry_run: bool, as_json: bool) -> None:
    """Drain NODE (Slurm) or cordon it (Kubernetes) only within the envelope: exit 0
    drained (or already out of service), 1 not drained (the line names the breaker:
    kill-switch, observe-only, allow-list, fleet-fraction, rate), 69 the scheduler
    could not be read or written (fleet-unknown, backend): nothing drained. With
    --results a refusal is a normal round (exit 0): each line names its breaker.

    \b
    gputriage drain-guard gpu042 --result /var/log/gputriage/gpu042.json
    gputriage drain-guard --backend k8s --results /results --enforce
    GPUTRIAGE_DRAIN=enforce   one line in /etc/default/gputriage-healthcheck"""
    import time
    from datetime import datetime, timezone

    from gputriage.drain.guard import SETTLE_S, guard
    from gputriage.drain.policy import Decision, allowed, settings_from

    env = current_env()
    if bool(node) == bool(results_dir):
        raise click.UsageError("name a NODE or a --results directory")
    try:
        settings = settings_from(os.environ, enforce=enforce, per_hour=per_hour,
                                 max_out=max_out, floor=floor, allow=allow,
                                 kill_switch=kill_switch)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if settle is None:
        try:
            settle = float(os.environ.get("GPUTRIAGE_DRAIN_SETTLE") or SETTLE_S)
        except ValueError:
            raise click.UsageError("GPUTRIAGE_DRAIN_SETTLE: not a number") from None
    kill_on = settings.kill_switch.exists()
    fleet: Any
    if backend == "slurm":
        from gputriage.drain.slurm import SlurmFleet

        fleet = SlurmFleet(partition=partition)

        def now() -> datetime:
            return datetime.now()  # sinfo's times: the controller's local time
    else:
        fleet = None if kill_on or not settings.enforce else _k8s(kubeconfig)

        def now() -> datetime:
            return datetime.now(timezone.utc)

    if undrain:
        if not node or backend != "slurm" or check_exit is None:
            raise click.UsageError("--undrain takes a NODE, --check-exit and the slurm "
                                   "backend")
        return _undrain(fleet, node, check_exit, settings, kill_on, dry_run, as_json)
    if resume_clean and (backend != "k8s" or not results_dir):
        raise click.UsageError("--resume-clean takes --results and the k8s backend")
    if resume_clean and results_dir:
        _uncordon_clean(fleet, Path(results_dir), max_age * 60, settings, kill_on,
                        dry_run, as_json)
    todo: list[tuple[str, str | None]]
    if results_dir:
        todo = [(n, str(Path(results_dir) / f"{n}.json"))
                for n in _fresh_criticals(Path(results_dir), max_age * 60, time.time())]
    else:
        todo = [(str(node), result_file)]
    code = 0
    spent: Decision | None = None  # a budget breaker met in this round
    for name, result in todo:
        findings = _findings(result) if result and (results_dir is None
                                                   or Path(result).exists()) else None
        may = allowed(findings or [], settings.allow)
        why = reason or _reason(findings, may)
        if reason is None and backend == "k8s":  # the annotation names the blame too
            why += _blame(findings, may)
        why = " ".join(why.split())[:REASON_MAX]
        if spent is not None and findings is not None \
                and not allowed(findings, settings.allow):
            decision = Decision(False, "allow-list", "no current critical finding may "
                                f"drain (allowed: {' '.join(settings.allow)})")
        elif spent is not None:  # the budget does not loosen within one round
            decision = spent
        else:
            decision = guard(fleet, name, why, settings, now=now, findings=findings,
                             kill_switch_on=kill_on, dry_run=dry_run, settle_s=settle)
            if decision.breaker in BUDGET:
                spent = decision
        ok = decision.drain or decision.breaker == "already-out"
        if decision.breaker in UNAVAILABLE:
            code = EXIT_UNAVAILABLE
        elif not ok and not results_dir:  # a round over many nodes: refusals are normal
            code = max(code, EXIT_REFUSED)
        if as_json:
            env.write_json({"node": name, "drain": decision.drain and not dry_run,
                            "breaker": decision.breaker, "why": decision.why,
                            "reason": why, "dry_run": dry_run})
        elif decision.drain:
            verb = "would drain" if dry_run else ("drained" if backend == "slurm"
                                                  else "cordoned")
            env.stdout.write(f"{verb} {printable(name)}: {printable(why)} "
                             f"({printable(decision.why)})\n")
        else:
            env.stdout.write(f"not drained {printable(name)}: breaker {decision.breaker}: "
                             f"{printable(decision.why)}\n")
    if code:
        raise CommandExit(code)


def _undrain(fleet: Any, node: str, check_exit: int, settings: Any, kill_on: bool,
             dry_run: bool, as_json: bool) -> None:
    """Return ``node`` to service when a job drained it and its check is clean."""
    from gputriage.drain.policy import Decision, decide_undrain

    env = current_env()
    try:
        decision = decide_undrain(node, fleet.read(), check_exit, settings,
                                  kill_switch_on=kill_on)
        if decision.drain and not dry_run:
            fleet.give_back(node)
    except Exception as exc:  # SlurmError: one line
        decision = Decision(False, "fleet-unknown", f"cannot ask the scheduler: {exc}")
    if as_json:
        env.write_json({"node": node, "resume": decision.drain and not dry_run,
                        "breaker": decision.breaker, "why": decision.why})
    elif decision.drain:
        verb = "would resume" if dry_run else "resumed"
        env.stdout.write(f"{verb} {printable(node)}: {printable(decision.why)}\n")
    else:
        env.stdout.write(f"not resumed {printable(node)}: {decision.breaker}: "
                         f"{printable(decision.why)}\n")
    if not decision.drain:
        raise CommandExit(EXIT_UNAVAILABLE if decision.breaker in UNAVAILABLE
                          else EXIT_REFUSED)


def _uncordon_clean(fleet: Any, results: Path, max_age_s: float, settings: Any,
                    kill_on: bool, dry_run: bool, as_json: bool) -> None:
    """The cordon job's first pass: uncordon gputriage's cordons that a clean check
    since, or the job's blame, says were not the node (the ledger keeps them in the
    rate). One line per cordon of ours; an API that cannot be read is one line too."""
    import time
    from datetime import datetime, timezone

    from gputriage.drain.policy import Decision, decide_uncordon

    env = current_env()
    if fleet is None:  # kill switch or observe-only: the API is not asked
        why = (f"{settings.kill_switch} exists: observe-only" if kill_on
               else "drains are not enforced")
        env.stdout.write(f"not uncordoning: breaker {'kill-switch' if kill_on else 'observe-only'}"
                         f": {why}\n")
        return
    try:
        ours = fleet.read().ours()
    except Exception as exc:  # K8sError: one line, the cordon pass says it again
        env.stdout.write(f"not uncordoning: breaker fleet-unknown: {printable(str(exc))}\n")
        return
    for out in ours:
        rc, mtime = _last_check(results, out.name, max_age_s, time.time())
        checked = datetime.fromtimestamp(mtime, timezone.utc) if mtime is not None else None
        decision = decide_uncordon(out, rc, checked, settings, kill_switch_on=kill_on)
        if decision.drain and not dry_run:
            try:
                fleet.resume(out.name)
            except Exception as exc:
                decision = Decision(False, "backend", f"uncordon failed: {exc}")
        if as_json:
            env.write_json({"node": out.name, "uncordon": decision.drain and not dry_run,
                            "breaker": decision.breaker, "why": decision.why})
        elif decision.drain:
            verb = "would uncordon" if dry_run else "uncordoned"
            env.stdout.write(f"{verb} {printable(out.name)}: {printable(decision.why)}\n")
        else:
            env.stdout.write(f"not uncordoned {printable(out.name)}: breaker "
                             f"{decision.breaker}: {printable(decision.why)}\n")


def _k8s(kubeconfig: str | None) -> Any:
    from gputriage.collect.k8s_api import (
        ClusterUnavailable,
        ReadOptions,
        api_client,
        has_kubeconfig,
    )
    from gputriage.drain.k8s import K8sFleet

    # $KUBECONFIG as the client would read it, but read now, not at its import
    where = kubeconfig or (os.environ.get("KUBECONFIG") if has_kubeconfig() else None)
    try:
        api, _, _ = api_client(ReadOptions(kubeconfig=where, timeout_s=20.0))
    except ClusterUnavailable as exc:
        raise click.UsageError(f"--backend k8s: {exc}") from None
    from kubernetes import client

    return K8sFleet(client.CoreV1Api(api))

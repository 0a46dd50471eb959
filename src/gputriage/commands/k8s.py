"""``gputriage k8s status|lint``: a live cluster's GPU nodes, device plugin, pending pods
and policies (read-only, through the official client), or manifests before they are
applied. Both judge with the same rules as ``analyze`` of pasted kubectl outputs."""

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
    no_pager_option,
    quiet_option,
    verbose_option,
)
from gputriage.text.safe import printable

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_MANIFEST_FILES = 5_000
MAX_MANIFEST_BYTES = 256 * 2 ** 20  # all files of one lint together

_json_opt = click.option("--json", "as_json", is_flag=True,
                         help="Print the report as JSON (schema gputriage/k8s/v1).")


@click.group()
def k8s() -> None:
    """Kubernetes: a cluster's GPU nodes, device plugin, pending GPU pods and policies
    (status, read-only), or GPU workload manifests (lint).

    \b
    gputriage k8s status [NODE_RESULT]...   the cluster of the kubeconfig
    gputriage k8s lint FILE|DIR|-           manifests, helm template or kustomize output

    Pasted kubectl outputs (get -o json|yaml|wide, describe, device plugin and GPU
    operator logs) go to gputriage analyze. Exit status as elsewhere: 0 OK, 1 WARNING,
    2 CRITICAL, 3 UNKNOWN (the cluster could not be read); 64 usage, 66 unreadable input.
    """


@k8s.command("status")
@click.argument("node_results", nargs=-1, metavar="[NODE_RESULT]...")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the "
                   "in-cluster service account).")
@click.option("--context", default=None, help="Kubeconfig context (default: the current).")
@_json_opt
@verbose_option
@quiet_option
@no_pager_option
@click.option("--timeout", type=StrictFloatRange(min=1), default=60.0, show_default=True,
              help="Seconds for the whole read; no answer in time exits 3.")
@click.option("--page-size", type=StrictIntRange(min=1, max=10_000), default=500,
              show_default=True, help="Objects per list request (limit/continue).")
@click.option("--save", type=click.Path(), default=None, metavar="FILE",
              help="Also write what was read as a snapshot (FILE.tar.gz or a directory) "
                   "for gputriage analyze later.")
@click.option("--force", is_flag=True, help="Replace an existing --save output.")
def status(node_results: tuple[str, ...], kubeconfig: str | None, context: str | None,
           as_json: bool, verbose: bool, quiet: bool, no_pager: bool, timeout: float,
           page_size: int, save: str | None, force: bool) -> None:
    """Read the cluster (list calls only: nodes, pods, events, DaemonSets, workloads,
    quotas, priority classes, PDBs, HPAs, the NVIDIA ConfigMaps, and the GPU
    operator's, Kueue, Volcano and JobSet objects when installed) and judge it: GPUs
    advertised vs present, the device plugin and the GPU operator, why GPU pods are
    pending, and the GPU workloads' settings.

    NODE_RESULT: snapshots or outputs of GPU nodes (anything analyze reads), judged with
    the cluster, so that a node's driver or CDI fault meets the pods it strands. A kind
    the credentials may not list is reported under "not read" and the rest is judged;
    no answer from the API server exits 3 with one line."""
    from gputriage.collect.k8s_api import ClusterUnavailable, ReadOptions, read_cluster

    env = current_env()
    _check_kubeconfigs(kubeconfig)
    if save is not None:
        from gputriage.snapshot.writer import check_output

        check_output(save, force)  # a bad --save fails now, not after reading
    extra = None
    if node_results:
        from gputriage.ingest import load_inputs

        extra = load_inputs(list(node_results))
    try:
        read = read_cluster(ReadOptions(kubeconfig=kubeconfig, context=context,
                                        timeout_s=timeout, page_size=page_size,
                                        keep_items=save is not None))
    except ClusterUnavailable as exc:
        env.stderr.write(f"gputriage: cannot read the cluster: {printable(str(exc))}\n")
        raise CommandExit(3) from None
    who = f"cluster {read.context or read.server}"
    if save is not None:
        _save(read, save, force)
        env.stderr.write(f"snapshot written to {printable(save)}\n")
    snapshot, cluster = _snapshot(read, extra, who)
    result = _judge(snapshot, cluster, who)
    from gputriage.views.k8sview import summarize

    summary = summarize(cluster, "status")
    summary.cluster = {"server": read.server, "context": read.context,
                       "read": dict(read.read), "seconds": round(read.seconds, 3)}
    _report(result, summary, as_json, verbose, quiet, no_pager, who)


MAX_KUBECONFIG_BYTES = 16 << 20  # a kubeconfig is a few KiB, with certificates


def _check_kubeconfigs(named: str | None) -> None:
    """The kubeconfig files the client would read (``--kubeconfig``, else $KUBECONFIG's,
    else ~/.kube/config), classified before the client opens them: a FIFO would block it
    for ever and a device is no file; either, or a file past MAX_KUBECONFIG_BYTES, is an
    input error (exit 66)."""
    import stat

    from gputriage.errors import InputError
    from gputriage.io.inputs import file_kind, human

    listed = os.environ.get("KUBECONFIG", "")
    paths = [named] if named else [p for p in listed.split(os.pathsep) if p] if listed \
        else [os.path.expanduser("~/.kube/config")]
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # absent: the client says so, or uses the others
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: {file_kind(st.st_mode)}, not a kubeconfig file")
        if st.st_size > MAX_KUBECONFIG_BYTES:
            raise InputError(f"{path}: over {human(MAX_KUBECONFIG_BYTES)}: not a kubeconfig "
                             "file")


def _snapshot(read: Any, extra: Any, who: str) -> tuple[Any, Any]:
    """The snapshot the engine reads: the node inputs, with the cluster as the
    ``k8s_objects`` source (a pasted one among the inputs merged into it)."""
    from gputriage.snapshot.bundle import Captured, Snapshot

    cluster = read.cluster
    snapshot = extra if extra is not None else Snapshot(origin=who)
    pasted = snapshot.get("k8s_objects")
    if pasted is not None and pasted.text:
        from gputriage.errors import ParseError
        from gputriage.parsers.k8s_objects import parse_k8s_objects

        try:
            _merge_new(cluster, parse_k8s_objects(pasted.text))
        except ParseError as exc:
            snapshot.problems.append(f"{pasted.origin}: {exc}")
    snapshot.captures["k8s_objects"] = Captured("k8s_objects", "", {"error": None},
                                                f"{who} ({read.server})")
    return snapshot, cluster


def _merge_new(cluster: Any, other: Any) -> None:
    """Add the objects of ``other`` that the live read does not hold (the same object
    pasted or saved with a node's snapshot counts once: the live one)."""
    from gputriage.parsers.k8s_model import Cluster

    seen = {(o.kind, o.namespace, o.name) for o in cluster.objects}
    new = Cluster(origin=other.origin, errors=other.errors)
    new.nodes = {n: node for n, node in other.nodes.items() if n not in cluster.nodes}
    new.pods = [p for p in other.pods if ("Pod", p.namespace, p.name) not in seen]
    new.daemonsets = [d for d in other.daemonsets
                      if ("DaemonSet", d.namespace, d.name) not in seen]
    new.objects = [o for o in other.objects if (o.kind, o.namespace, o.name) not in seen]
    lines = {e.line for e in cluster.events}
    new.events = [e for e in other.events if e.line not in lines]
    cluster.merge(new)


def _judge(snapshot: Any, cluster: Any, who: str, link_gbits: float | None = None) -> Any:
    """The engine's result over ``snapshot`` with ``cluster`` as the parsed objects (and
    the shared link's rate, when given, for the herd estimates)."""
    import gc
    from dataclasses import replace

    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.context import CheckContext
    from gputriage.facts.store import Facts

    # the cluster's objects live until the command ends: keep the collector from walking
    # them again and again while the rules run (a 50,000-pod cluster: ~2 s a collection)
    gc.freeze()
    facts = Facts(snapshot, context=CheckContext(link_gbits=link_gbits))
    facts.prefill("k8s_objects", cluster)
    facts.problems += [f"{who}: {p}" for p in cluster.unreadable_fields()]
    result = analyze_facts(facts)
    if not result.host.hostname:
        result.host = replace(result.host, hostname=who)
    return result


def _save(read: Any, out: str, force: bool) -> None:
    """The read as a snapshot: one ``k8s_objects`` source (the List with its errors)."""
    import json
    from datetime import datetime, timezone

    from gputriage import __version__
    from gputriage.snapshot.writer import new_manifest, source_record, write_snapshot

    data = json.dumps(read.document(), separators=(",", ":")).encode()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest = new_manifest(f"cluster {read.context or read.server}", now, None, __version__)
    manifest["sources"]["k8s_objects"] = source_record(
        "k8s_objects", duration_s=read.seconds, nbytes=len(data),
        argv=["gputriage", "k8s", "status", "--save", os.path.basename(out)])
    write_snapshot(out, manifest, {"k8s_objects": data}, force=force)


@k8s.command("lint")
@click.argument("paths", nargs=-1, required=True, metavar="FILE|DIR|-...")
@_json_opt
@verbose_option
@quiet_option
@no_pager_option
@click.option("--link", "link_gbits", type=StrictFloatRange(min=0.001, max=100_000),
              default=None, metavar="RATE",
              help="Gb/s of the link the replicas share to fetch weights and images "
                   "(storage or registry egress) for the herd estimates; without it an "
                   "assumed 25 Gb/s, which the findings say.")
def lint(paths: tuple[str, ...], as_json: bool, verbose: bool, quiet: bool,
         no_pager: bool, link_gbits: float | None) -> None:
    """Lint GPU workload manifests: YAML or JSON, multi-document, kubectl get -o yaml
    Lists, helm template or kustomize build output (- reads stdin); a directory is read
    recursively (*.yaml, *.yml, *.json). Each finding names the object and where it was
    read (FILE #DOCUMENT). Findings are the workloads' settings: exit 1 at most."""
    from gputriage.parsers.k8s_model import Cluster

    cluster = Cluster(origin="manifest")
    files = _manifest_files(paths)
    for name, text in files:
        cluster.merge(_objects_of(name, text))
    if not cluster:
        from gputriage.errors import InputError

        raise InputError(f"{', '.join(paths)}: no Kubernetes object (apiVersion, kind, "
                         "metadata) in the manifests")
    from gputriage.snapshot.bundle import Captured, Snapshot

    names = [n for n, _ in files]
    origin = names[0] if len(names) == 1 else f"{len(names)} manifests"
    snapshot = Snapshot({"k8s_objects": Captured("k8s_objects", "", {"error": None}, origin)},
                        None, origin)
    result = _judge(snapshot, cluster, origin, link_gbits)
    from gputriage.views.k8sview import summarize

    summary = summarize(cluster, "lint")
    summary.files = names
    _report(result, summary, as_json, verbose, quiet, no_pager, origin)


def _objects_of(name: str, text: str) -> Any:
    """The objects of one manifest file; bad YAML is an input error naming the file
    and line."""
    from gputriage.errors import InputError, ParseError
    from gputriage.parsers.k8s_objects import cluster_from_api, load_documents

    try:
        docs = load_documents(text)
    except ParseError as exc:
        raise InputError(f"{name}: {exc}") from None
    return cluster_from_api(docs, origin=name)


def _manifest_files(paths: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, text) of every manifest named: files, directories walked (sorted, bounded),
    ``-`` for stdin."""
    from gputriage.errors import InputError
    from gputriage.io.inputs import read_bytes

    found: list[Path | str] = []
    for path in paths:
        if path == "-":
            found.append("-")
        elif os.path.isdir(path):
            found.extend(sorted(p for p in Path(path).rglob("*")
                                if p.name.endswith(MANIFEST_SUFFIXES) and p.is_file()))
        else:
            found.append(Path(path))
        if len(found) > MAX_MANIFEST_FILES:
            raise InputError(f"{path}: more than {MAX_MANIFEST_FILES} manifest files")
    if not found:
        raise InputError(f"{', '.join(paths)}: no *.yaml, *.yml or *.json file")
    out: list[tuple[str, str]] = []
    total = 0
    for item in found:  # each under the input policy: a FIFO or stdin waits a bounded time
        data = read_bytes(str(item), MAX_MANIFEST_BYTES, what="Kubernetes manifests")
        out.append(("<stdin>" if item == "-" else str(item),
                    data.decode("utf-8", errors="replace")))
        total += len(data)
        if total > MAX_MANIFEST_BYTES:
            raise InputError(f"manifests larger than {MAX_MANIFEST_BYTES // 2 ** 20} MiB "
                             "in all")
    return out


def _report(result: Any, summary: Any, as_json: bool, verbose: bool, quiet: bool,
            no_pager: bool, who: str) -> None:
    from gputriage.commands.common import quiet_line, show
    from gputriage.status import exit_status

    env = current_env()
    if as_json:
        from gputriage.views.k8sview import k8s_json

        env.write_json(k8s_json(result, summary), ensure_ascii=False)
    elif quiet:
        quiet_line(result, who)
    else:
        from gputriage.views.k8sview import render_k8s

        show(lambda console: render_k8s(result, summary, console, verbose=verbose),
             no_pager=no_pager)
    raise CommandExit(int(exit_status(result)))

"""``kubectl get`` tables (pods, nodes, daemonsets, events; ``-A``, ``-o wide``) and
custom-columns tables of GPUs per node, into a :class:`Cluster`.

A table is known by its header: the columns kubectl prints for the kind (``NAME READY
STATUS RESTARTS AGE`` pods, ``NAME STATUS ROLES AGE VERSION`` nodes, ``DESIRED CURRENT
READY`` daemonsets, ``LAST SEEN TYPE REASON OBJECT MESSAGE`` events), or a first column
``NODE``/``NAME`` and columns that name GPUs (``Available(GPUs)``, ``Used(GPUs)``,
``GPU``, ``nvidia.com/gpu``). Only the columns known for the kind are read; a table of
another kind gives nothing. Rows are cut at the header's column starts (kubectl aligns
them), else at runs of two spaces, else at single spaces when the count matches.
Pod rows without their header (``name  1/1  Running  0  3d``) are read as pods.
"""

from __future__ import annotations

import re

from gputriage.parsers.k8s_model import GPU, Cluster, KDaemonSet, KEvent, KNode, KPod, quantity
from gputriage.text.fields import ParseError, split_lines, strict_int

__all__ = ["POD_ROW", "parse_k8s_table", "table_kind"]

POD_ROW = re.compile(r"^\s*(?P<name>[a-z0-9][\w.-]*)\s+(?P<ready>[0-9]+/[0-9]+)\s+"
                     r"(?P<status>[A-Za-z][\w:/-]*)"
                     r"\s+(?P<restarts>[0-9]+(?: \([^)]*\))?)\s+(?P<age>[0-9]+[smhdy]\w*)\s*$")
_GPU_COLUMN = re.compile(r"gpu", re.I)
_KINDS = {"pod": "Pod", "pods": "Pod", "po": "Pod", "node": "Node", "no": "Node",
          "daemonset": "DaemonSet", "ds": "DaemonSet", "deployment": "Deployment",
          "replicaset": "ReplicaSet", "statefulset": "StatefulSet", "job": "Job",
          "cronjob": "CronJob", "workload": "Workload", "podgroup": "PodGroup",
          "service": "Service", "persistentvolumeclaim": "PersistentVolumeClaim",
          "clusterpolicy": "ClusterPolicy", "jobset": "JobSet"}


def _columns(header: str) -> list[tuple[int, str]]:
    """Each column of a header: where it starts and its name (words one space apart)."""
    return [(m.start(), m.group()) for m in re.finditer(r"\S+(?: (?!\s)\S+)*", header)
            if m.group()]


def table_kind(names: list[str]) -> str | None:
    """The kind a header's columns stand for; None for a table gputriage does not read."""
    upper = [n.upper() for n in names]
    have = set(upper)
    if {"NAME", "DESIRED", "CURRENT", "READY"} <= have:
        return "DaemonSet"
    if "REASON" in have and "MESSAGE" in have and ("TYPE" in have or "LAST SEEN" in have
                                                    or "LASTSEEN" in have):
        return "Event"
    if {"NAME", "READY", "STATUS", "RESTARTS"} <= have:
        return "Pod"
    if {"NAME", "STATUS", "ROLES"} <= have or {"NAME", "STATUS", "VERSION", "AGE"} <= have:
        return "Node"
    if upper and upper[0] in ("NODE", "NAME", "NODENAME", "NODE NAME") and len(names) > 1 \
            and all(_GPU_COLUMN.search(n) for n in names[1:]):
        return "GpuTable"
    return None


def _cells(row: str, cols: list[tuple[int, str]]) -> list[str] | None:
    """The cells of a row under ``cols``, or None when it does not fit them."""
    starts = [s for s, _ in cols]
    if len(row) > starts[-1] and all(
            (s == 0 or (s <= len(row) and row[s - 1] == " ")) and s < len(row) and row[s] != " "
            for s in starts):
        return [row[a:b].strip() for a, b in zip(starts, [*starts[1:], len(row)], strict=True)]
    parts = re.split(r"\s{2,}", row.strip())
    if len(parts) == len(cols):
        return parts
    words = row.split()
    if len(words) == len(cols):
        return words
    if len(words) > len(cols) and cols[-1][1].upper() in ("MESSAGE", "IMAGES", "NODE SELECTOR"):
        return [*words[:len(cols) - 1], " ".join(words[len(cols) - 1:])]
    return None


def _int(raw: str | None) -> int | None:
    return strict_int(raw, signed=False)


def _add(cluster: Cluster, kind: str, row: dict[str, str], line: str) -> None:
    get = row.get
    if kind == "Pod":
        restarts = (get("RESTARTS") or "").split(" ")[0]
        pod = KPod(name=row["NAME"], namespace=get("NAMESPACE"), status=get("STATUS"),
                   restarts=_int(restarts), lines=[line], ready=get("READY"))
        node = get("NODE")
        pod.node = node if node and node != "<none>" else None
        status = pod.status or ""
        pod.phase = status if status in ("Pending", "Running", "Succeeded", "Failed",
                                         "Unknown") else None
        cluster.pods.append(pod)
    elif kind == "Node":
        states = (get("STATUS") or "").split(",")
        knode = KNode(name=row["NAME"], ready=states[0] == "Ready" if states[0] else None,
                      unschedulable="SchedulingDisabled" in states,
                      kubelet_version=get("VERSION"), os_image=get("OS-IMAGE"),
                      kernel=get("KERNEL-VERSION"), runtime_version=get("CONTAINER-RUNTIME"),
                      lines=[line])
        # --show-labels: one comma-separated column of key=value
        knode.labels = dict(p.partition("=")[::2] for p in (get("LABELS") or "").split(",")
                            if "=" in p)
        cluster.merge(Cluster(nodes={knode.name: knode}))
    elif kind == "DaemonSet":
        selector = get("NODE SELECTOR") or "<none>"
        ds = KDaemonSet(name=row["NAME"], namespace=get("NAMESPACE"), desired=_int(get("DESIRED")),
                        current=_int(get("CURRENT")), ready=_int(get("READY")),
                        available=_int(get("AVAILABLE")), lines=[line])
        ds.node_selector = {} if selector == "<none>" else dict(
            p.partition("=")[::2] for p in selector.split(","))
        ds.images = [i for i in (get("IMAGES") or "").split(",") if i]
        cluster.daemonsets.append(ds)
    elif kind == "Event":
        _event(cluster, row, line)
    elif kind == "GpuTable":
        _gpu_row(cluster, row, line)


def _event(cluster: Cluster, row: dict[str, str], line: str) -> None:
    get = row.get
    about = get("OBJECT") or ""
    kind, _, name = about.partition("/")
    if not name and get("KIND"):  # the old columns: NAME KIND
        kind, name = get("KIND") or "", get("NAME") or ""
    count = _int(get("COUNT"))
    event = KEvent(reason=get("REASON") or "", message=get("MESSAGE") or "", type=get("TYPE"),
                   kind=_KINDS.get(kind.lower(), kind[:1].upper() + kind[1:]) if kind else None,
                   name=name or None, namespace=get("NAMESPACE"), count=count,
                   source=get("SOURCE") or get("FROM"),
                   age=get("LAST SEEN") or get("LASTSEEN"), line=line.strip())
    cluster.events.append(event)


def _gpu_row(cluster: Cluster, row: dict[str, str], line: str) -> None:
    names = list(row)
    node = KNode(name=row[names[0]], lines=[line])
    for col in names[1:]:
        value = row[col]
        if quantity(value) is None:
            continue
        low = col.lower()
        if re.search(r"used|alloc(?:ated)?\b|request", low):
            node.allocated = {GPU: (value, value)}
        elif "capacity" in low:
            node.capacity = {GPU: value}
        else:
            node.allocatable = {GPU: value}
    cluster.merge(Cluster(nodes={node.name: node}))


def parse_k8s_table(text: str) -> Cluster:
    """Pods, nodes, DaemonSets, events and GPUs per node of ``kubectl get`` tables;
    ParseError when no known table (or pod row) is in the text."""
    cluster = Cluster(origin="paste")
    cols: list[tuple[int, str]] | None = None
    kind: str | None = None
    for raw in split_lines(text.replace("\t", "    ")):
        line = raw.rstrip()
        if not line.strip():
            continue
        names = [n for _, n in _columns(line)]
        new_kind = table_kind(names) if line == line.upper() or "GPU" in line.upper() else None
        if new_kind is not None and not POD_ROW.match(line):
            indent = len(line) - len(line.lstrip())
            cols = [(s - indent, n.upper()) for s, n in _columns(line)]
            cols[0] = (0, cols[0][1])
            kind = new_kind
            continue
        if cols is not None and kind is not None:
            body = line[len(line) - len(line.lstrip()):] if cols[0][0] == 0 else line
            cells = _cells(body, cols)
            if cells is not None:
                _add(cluster, kind, dict(zip([n for _, n in cols], cells, strict=True)), line)
                continue
        m = POD_ROW.match(line)
        if m is not None:
            _add(cluster, "Pod", {"NAME": m["name"], "READY": m["ready"], "STATUS": m["status"],
                                  "RESTARTS": m["restarts"], "AGE": m["age"]}, line)
    if not cluster:
        raise ParseError("no kubectl get table (pods, nodes, daemonsets, events, GPUs per "
                         "node) in the text")
    return cluster

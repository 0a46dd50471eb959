"""``kubectl describe`` (and ``oc describe``) of nodes, pods and other objects, whole or
cut by ``| grep``, into a :class:`Cluster`.

Each object starts at a ``Name:`` line; its fields are read from the indentation tree
kubectl prints (``Key:  value`` lines, deeper lines belonging to the key above). An
object with node sections (Roles, Taints, Capacity, Allocatable, System Info, Allocated
resources, Non-terminated Pods) is a node, one with pod sections (Containers, Controlled
By, QoS Class, Node-Selectors, Tolerations) a pod; any other object keeps its kind (from
``Kind:``, else ``Object``) and its events.

An excerpt without a ``Name:`` (``describe node | grep gpu``, Capacity/Allocatable only)
is one node named from the prompt's command (``kubectl describe node NAME``), else
``?``. Its loose lines are read in kubectl's order: ``key=value`` lines are labels,
a ``resource: quantity`` line fills Capacity, the same resource seen again Allocatable,
a ``resource  requests  limits`` row the Allocated resources, ``key: value`` lines with a
``/`` in the key annotations. Event rows (``Warning  FailedScheduling  3s (x5 over 9s)
default-scheduler  ...``), condition rows and a scheduler's bare ``0/6 nodes are
available: ...`` message are read wherever they stand.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

from gputriage.parsers.k8s_model import (
    Cluster,
    KContainer,
    KEvent,
    KNode,
    KObject,
    KPod,
    Taint,
    Toleration,
    quantity,
)
from gputriage.text.fields import ParseError, split_lines, strict_int

__all__ = ["EVENT_ROW", "GET_EVENT_ROW", "KUBELET_MESSAGE", "QUOTA_MESSAGE", "SCHEDULER_MESSAGE",
           "condition_row", "event_from_row", "message_end", "parse_k8s_describe"]

# --- rows read wherever they stand ------------------------------------------------------
AGE = r"(?:<unknown>|<invalid>|[0-9]+(?:\.[0-9]+)?[smhdy](?:[0-9]+[smhdy])*)"
EVENT_ROW = re.compile(
    rf"^\s*(?P<type>Normal|Warning)\s+(?P<reason>[A-Za-z][\w-]*)\s+"
    rf"(?P<age>{AGE}(?:\s*\(x(?P<count>[0-9]+) over {AGE}\))?)\s+"
    r"(?P<source>[\w./-]+(?:, [\w./-]+)?)\s+(?P<message>\S.*)$")
_EVENT_HEAD = re.compile(r"^\s*(?:Type\s+Reason\s+Age\s+From\s+Message|[-\s]+)\s*$")
SCHEDULER_MESSAGE = re.compile(r"^\s*(?P<message>[0-9]+/[0-9]+ nodes are available: .*)$")
# a row of ``kubectl get events`` without its header: [LAST SEEN] TYPE REASON KIND/NAME MESSAGE
GET_EVENT_ROW = re.compile(
    rf"^\s*(?:{AGE}\s+)?(?P<type>Normal|Warning)\s+(?P<reason>[A-Z][\w-]*)\s+"
    r"(?P<kind>[a-z][\w.-]{0,62})/(?P<name>[\w.-]{1,253})\s+(?P<message>\S.*)$")
# the kubelet's refusal of a pod's devices when only its message is pasted (the pod's
# status, the kubelet's journal): "Pod was rejected: Allocate failed due to ..."
KUBELET_MESSAGE = re.compile(r"(?P<message>(?:Pod was rejected: )?Allocate failed due to \S.*)$")
# KAI Scheduler's (Run:ai's) quota refusal, alone or as an event's message
QUOTA_MESSAGE = re.compile(r"(?P<message>(?:NonPreemptibleOverQuota:?\s*)?Non-preemptible "
                           r"workload is over quota\..*)$")
_ADMISSION = "UnexpectedAdmissionError"  # the reason the kubelet gives such a refusal
_WRAP_MAX = 8  # lines one event message may be wrapped onto
_TS = r"\w{3}, [0-9]{1,2} \w{3} [0-9]{4} [0-9][0-9]:[0-9][0-9]:[0-9][0-9] [+-][0-9]{4}"
_CONDITION = re.compile(rf"^\s*(?P<type>[A-Z][\w-]*)\s+(?P<status>True|False|Unknown)"
                        rf"(?:\s+(?:{_TS}|<unknown>)\s+(?:{_TS}|<unknown>))?"
                        r"(?:\s+(?P<reason>\S+)(?:\s+(?P<message>\S.*?))?)?\s*$")
_CONDITION_TS = re.compile(_TS)
_PROMPT_NAME = re.compile(r"\b(?:kubectl|oc|k)\s+describe\s+(?:no|nodes?)\s+"
                          r"(?P<name>[^\s|-][^\s|]*)")
_FIELD = re.compile(r"^(?P<key>[^\s:][^:]*?):(?:\s+(?P<value>\S.*?))?\s*$")
_LABEL = re.compile(r"^\s*(?P<key>[\w.-]+(?:/[\w.-]+)?)=(?P<value>\S*)\s*$")
_ALLOCATED = re.compile(r"^\s*(?P<res>[\w.-]+(?:/[\w.-]+)?)\s+(?P<req>[0-9.]+\w*)(?:\s+\([^)]*\))?"
                        r"\s+(?P<lim>[0-9.]+\w*)(?:\s+\([^)]*\))?\s*$")
_NONE = ("<none>", "<unset>", "")

_NODE_KEYS = {"Roles", "Taints", "Capacity", "Allocatable", "System Info", "Unschedulable",
              "Allocated resources", "Non-terminated Pods", "Addresses", "PodCIDR",
              "PodCIDRs", "ProviderID", "Lease"}
_POD_KEYS = {"Containers", "Init Containers", "Controlled By", "QoS Class", "Node-Selectors",
             "Tolerations", "Service Account", "Start Time", "IPs", "Priority Class Name"}


def condition_row(line: str) -> tuple[str, tuple[str, str, str]] | None:
    """A row of describe's Conditions table: type -> (status, reason, message)."""
    m = _CONDITION.match(line)
    if m is None:
        return None
    return m["type"], (m["status"], m["reason"] or "", (m["message"] or "").strip())


def event_from_row(line: str, kind: str | None = None, name: str | None = None,
                   namespace: str | None = None) -> KEvent | None:
    """An event of describe's Events table (``Type Reason Age From Message``)."""
    m = EVENT_ROW.match(line)
    if m is None:
        return None
    count = strict_int(m["count"], signed=False)
    return KEvent(reason=m["reason"], message=m["message"].strip(), type=m["type"], kind=kind,
                  name=name, namespace=namespace, count=count, source=m["source"],
                  age=m["age"], line=line.strip())


def _wraps(previous: str, line: str) -> bool:
    """Whether ``line`` goes on with the message of ``previous`` (a paste wrapped it): the
    message did not end a sentence and the line goes on in lower case."""
    text = line.strip()
    if not text or EVENT_ROW.match(line) or GET_EVENT_ROW.match(line) \
            or SCHEDULER_MESSAGE.match(line):
        return False
    return not previous.rstrip().endswith((".", "!", "?")) and text[:1].islower()


def message_end(lines: list[str], i: int) -> int:
    """The index after the lines an event's message at line ``i`` is wrapped onto."""
    end = i + 1
    while end < len(lines) and end - i <= _WRAP_MAX and _wraps(lines[end - 1], lines[end]):
        end += 1
    return end


def _event_at(line: str) -> KEvent | None:
    """The event a line starts: a describe row, a ``get events`` row, a scheduler's or the
    kubelet's bare message."""
    event = event_from_row(line)
    if event is not None:
        return event
    if m := GET_EVENT_ROW.match(line):
        return KEvent(reason=m["reason"], message=m["message"].strip(), type=m["type"],
                      kind=m["kind"].capitalize(), name=m["name"], line=line.strip())
    if m := SCHEDULER_MESSAGE.match(line):
        return KEvent("FailedScheduling", m["message"].strip(), "Warning", line=line.strip())
    if m := KUBELET_MESSAGE.search(line):
        return KEvent(_ADMISSION, m["message"].strip(), "Warning", source="kubelet",
                      line=line.strip())
    if m := QUOTA_MESSAGE.search(line):
        return KEvent("NonPreemptibleOverQuota", m["message"].strip(), "Warning",
                      source="kai-scheduler", line=line.strip())
    return None


# --- the indentation tree ---------------------------------------------------------------
@dataclass
class _Node:
    indent: int
    line: str
    key: str | None = None
    value: str = ""
    children: list[_Node] = field(default_factory=list)

    def all_lines(self) -> list[str]:
        return [c.line for c in self.walk()]

    def walk(self) -> list[_Node]:
        out = []
        for c in self.children:
            out.append(c)
            out.extend(c.walk())
        return out

    def items(self) -> list[str]:
        """The value and the deeper lines without a key (labels, taints...)."""
        first = [] if self.value in _NONE else [self.value]
        return first + [c.line.strip() for c in self.walk() if c.line.strip()]


def _tree(lines: list[str]) -> list[_Node]:
    root = _Node(-1, "")
    stack = [root]
    for ln in lines:
        if not ln.strip():
            continue
        indent = len(ln) - len(ln.lstrip())
        body = ln.strip()
        m = _FIELD.match(body)
        key = m["key"] if m and "  " not in m["key"] else None
        node = _Node(indent, ln, key, (m["value"] or "") if key and m else "")
        while stack[-1].indent >= indent:
            stack.pop()
        stack[-1].children.append(node)
        stack.append(node)
    return root.children


def _fields(nodes: list[_Node]) -> dict[str, _Node]:
    return {n.key: n for n in nodes if n.key}


def _mapping(node: _Node | None, sep: str = ":") -> dict[str, str]:
    """``key: value`` (or ``key=value``) entries of a block, its own value included."""
    if node is None:
        return {}
    out: dict[str, str] = {}
    entries: list[tuple[str, _Node | None]] = [] if node.value in _NONE else [(node.value, None)]
    entries += [(c.line.strip(), c) for c in node.children]
    for text, child in entries:
        if sep == "=":
            key, eq, value = text.partition("=")
            if eq and key.strip() and " " not in key.strip():
                out[key.strip()] = value.strip()
            continue
        m = _FIELD.match(text)
        if m is None or "  " in m["key"]:
            continue
        value = m["value"] or ""
        if not value and child is not None and child.children:
            value = " ".join(c.line.strip() for c in child.walk())
        out[m["key"]] = value
    return out


def _taints(node: _Node | None) -> list[Taint] | None:
    if node is None:
        return None
    out = []
    for item in node.items():
        key, _, effect = item.rpartition(":")
        if not key:
            continue
        k, eq, v = key.partition("=")
        out.append(Taint(k, v if eq else None, effect))
    return out


_TOLERATION = re.compile(r"^(?P<key>[^=:\s]+)?(?:=(?P<value>[^:\s]*))?(?::(?P<effect>\w+))?"
                         r"(?:\s+op=(?P<op>\w+))?")


def _tolerations(node: _Node | None) -> list[Toleration] | None:
    if node is None:
        return None
    out = []
    for item in node.items():
        if item.startswith("op="):  # no key: tolerates every taint
            out.append(Toleration(None, item[3:].split()[0]))
            continue
        m = _TOLERATION.match(item)
        if m is None or not m["key"]:
            continue
        out.append(Toleration(m["key"], m["op"] or "Equal", m["value"], m["effect"]))
    return out


def _resources(node: _Node | None) -> dict[str, str]:
    return {k: v for k, v in _mapping(node).items() if v}


# --- objects ----------------------------------------------------------------------------
def _chunks(lines: list[str]) -> list[list[str]]:
    """The lines of each object: a new one at every ``Name:`` at the left margin."""
    chunks: list[list[str]] = [[]]
    for ln in lines:
        if ln.startswith("Name:") and any(x.strip() for x in chunks[-1]) \
                and any(x.startswith("Name:") for x in chunks[-1]):
            chunks.append([])
        chunks[-1].append(ln)
    return [c for c in chunks if any(x.strip() for x in c)]


def _events(lines: list[str]) -> tuple[list[KEvent], list[str]]:
    """The event rows (and scheduler's and kubelet's messages) of an object, each with
    the lines its message was wrapped onto, and its other lines."""
    events, rest = [], []
    i = 0
    while i < len(lines):
        ln = lines[i]
        event = _event_at(ln)
        if event is not None:
            end = message_end(lines, i)
            event.continued = [x.strip() for x in lines[i + 1:end]]
            if event.continued:
                event.message = " ".join([event.message, *event.continued])
            events.append(event)
            i = end
            continue
        if ln.strip() == "Events:" or not _EVENT_HEAD.match(ln):
            rest.append(ln)
        i += 1
    return events, rest


_KNOWN = _NODE_KEYS | _POD_KEYS | {
    "Name", "Namespace", "Labels", "Annotations", "Conditions", "Events", "Status", "Node",
    "Priority", "IP", "CreationTimestamp", "Kind", "API Version", "Reason", "Message",
    "Runtime Class Name", "Volumes", "Nominated Node Name", "Finalizers", "Spec", "Metadata"}


def _kind(top: dict[str, _Node]) -> str:
    keys = set(top)
    if keys & _NODE_KEYS:
        return "Node"
    if keys & _POD_KEYS or ("Namespace" in keys and "Node" in keys):
        return "Pod"
    kind = top.get("Kind")
    return kind.value if kind is not None and kind.value else "Object"


def _object(lines: list[str], prompt_name: str | None, cluster: Cluster) -> None:
    events, rest = _events(lines)
    nodes = _tree(rest)
    top = {n.key: n for n in nodes if n.key in _KNOWN}
    loose = [n for n in nodes if n.key not in _KNOWN]
    name = top["Name"].value if "Name" in top and top["Name"].value else None
    namespace = top["Namespace"].value if "Namespace" in top else None
    namespace = None if namespace in _NONE else namespace
    kind = _kind(top)
    if name is None and kind == "Object" and _looks_like_node(loose):
        kind = "Node"
    for event in events:
        if name is not None:
            event.kind, event.name, event.namespace = kind, name, namespace
    cluster.events.extend(events)
    body = [ln for ln in lines if ln.strip()]
    if kind == "Node":
        node = _node(top, loose, name or prompt_name or "?")
        node.lines = body
        _add_node(cluster, node)
        cluster.pods.extend(_node_pods(top.get("Non-terminated Pods"), node.name))
    elif kind == "Pod":
        pod = _pod(top, name or "?")
        pod.lines = body
        cluster.pods.append(pod)
    elif name is not None:
        cluster.objects.append(KObject(kind, name, namespace, lines=body))


def _node_pods(section: _Node | None, node: str) -> list[KPod]:
    """The pods of a node's Non-terminated Pods table (namespace, name, where they run)."""
    pods = []
    for c in section.children if section is not None else []:
        words = c.line.split()
        if len(words) >= 2 and words[0] != "Namespace" and not words[0].startswith("-"):
            pods.append(KPod(name=words[1], namespace=words[0], node=node, lines=[c.line]))
    return pods


def _looks_like_node(nodes: list[_Node]) -> bool:
    for n in nodes:
        text = n.line.strip()
        if _LABEL.match(text) or _ALLOCATED.match(text) or condition_row(text):
            return True
        if n.key and (quantity(n.value) is not None or "/" in n.key):
            return True
    return False


def _add_node(cluster: Cluster, node: KNode) -> None:
    mine = cluster.nodes.get(node.name)
    if mine is None:
        cluster.nodes[node.name] = node
    else:
        other = Cluster(nodes={node.name: node})
        cluster.merge(other)


def _node(top: dict[str, _Node], loose: list[_Node], name: str) -> KNode:
    node = KNode(name=name)
    node.labels = _mapping(top.get("Labels"), "=")
    node.annotations = _mapping(top.get("Annotations"))
    node.taints = _taints(top.get("Taints"))
    if "Capacity" in top:
        node.capacity = _resources(top["Capacity"])
    if "Allocatable" in top:
        node.allocatable = _resources(top["Allocatable"])
    if "Unschedulable" in top:
        node.unschedulable = top["Unschedulable"].value.lower() == "true"
    conditions = top.get("Conditions")
    for ln in conditions.all_lines() if conditions is not None else []:
        row = condition_row(ln)
        if row is not None:
            node.conditions[row[0]] = row[1]
    info = _mapping(top.get("System Info"))
    node.kernel = info.get("Kernel Version") or None
    node.os_image = info.get("OS Image") or None
    node.runtime_version = info.get("Container Runtime Version") or None
    node.kubelet_version = info.get("Kubelet Version") or None
    allocated = top.get("Allocated resources")
    if allocated is not None:
        node.allocated = {}
        for ln in allocated.all_lines():
            m = _ALLOCATED.match(ln)
            if m and m["res"] not in ("Resource",):
                node.allocated[m["res"]] = (m["req"], m["lim"])
    for n in loose:
        _loose(node, n)
    ready = node.conditions.get("Ready")
    node.ready = None if ready is None else ready[0] == "True"
    return node


def _loose(node: KNode, n: _Node) -> None:
    """A line of a grep excerpt, outside the section that would say what it is."""
    for item in [n, *n.walk()]:
        text = item.line.strip()
        label = _LABEL.match(text)
        row = condition_row(text) if _CONDITION_TS.search(text) else None
        alloc = _ALLOCATED.match(text)
        if label:
            node.labels.setdefault(label["key"], label["value"])
        elif row is not None:
            node.conditions[row[0]] = row[1]
        elif alloc and ("/" in alloc["res"] or alloc["res"] in ("cpu", "memory")):
            node.allocated = {**(node.allocated or {}), alloc["res"]: (alloc["req"], alloc["lim"])}
        elif item.key and item.value and quantity(item.value) is not None:
            _resource_line(node, item.key, item.value)
        elif item.key and "/" in item.key and item.value:
            node.annotations.setdefault(item.key, item.value)


def _resource_line(node: KNode, key: str, value: str) -> None:
    """``resource: quantity`` without its section: Capacity first, Allocatable when the
    resource was seen already (kubectl prints Capacity, then Allocatable)."""
    if node.capacity is None:
        node.capacity = {key: value}
    elif node.allocatable is None:
        if key in node.capacity:
            node.allocatable = {key: value}
        else:
            node.capacity[key] = value
    else:
        node.allocatable.setdefault(key, value)


def _pod(top: dict[str, _Node], name: str) -> KPod:
    def val(key: str) -> str | None:
        n = top.get(key)
        return None if n is None or n.value in _NONE else n.value

    node_name = val("Node")
    pod = KPod(name=name, namespace=val("Namespace"), phase=val("Status"), status=val("Status"),
               node=node_name.split("/")[0] if node_name else None,
               priority_class=val("Priority Class Name"), owner=val("Controlled By"),
               runtime_class=val("Runtime Class Name"))
    priority = val("Priority")
    pod.priority = strict_int(priority)
    pod.labels = _mapping(top.get("Labels"), "=")
    pod.annotations = _mapping(top.get("Annotations"))
    if "Node-Selectors" in top:
        pod.node_selector = _mapping(top["Node-Selectors"], "=")
    pod.tolerations = _tolerations(top.get("Tolerations"))
    conditions = top.get("Conditions")
    for ln in conditions.all_lines() if conditions is not None else []:
        row = condition_row(ln)
        if row is not None:
            pod.conditions[row[0]] = row[1]
    for key, init in (("Init Containers", True), ("Containers", False)):
        for c in top[key].children if key in top else []:
            if c.key:
                pod.containers.append(_container(c, init))
    restarts = [c.restarts for c in pod.containers if c.restarts is not None]
    pod.restarts = sum(restarts) if restarts else None
    waiting = [c.reason for c in pod.containers if c.state == "waiting" and c.reason]
    if waiting:
        pod.status = waiting[0]
    return pod


def _container(node: _Node, init: bool) -> KContainer:
    f = _fields(node.children)
    c = KContainer(name=node.key or "?", init=init)
    image = f.get("Image")
    c.image = image.value if image is not None and image.value else None
    c.limits = _resources(f.get("Limits"))
    c.requests = _resources(f.get("Requests"))
    c.env = _mapping(f.get("Environment"))
    state = f.get("State")
    if state is not None and state.value:
        c.state = state.value.lower()
        sf = _fields(state.children)
        for key, attr in (("Reason", "reason"), ("Message", "message")):
            if key in sf and sf[key].value:
                setattr(c, attr, sf[key].value)
        code = sf.get("Exit Code")
        if code is not None:
            c.exit_code = strict_int(code.value)
    ready = f.get("Ready")
    c.ready = None if ready is None else ready.value == "True"
    restarts = f.get("Restart Count")
    c.restarts = strict_int(restarts.value, signed=False) if restarts is not None else None
    return c


def parse_k8s_describe(text: str) -> Cluster:
    """Nodes, pods, other objects and events of ``kubectl describe`` output (whole or a
    ``| grep`` excerpt); ParseError when the text holds none."""
    lines = [ln.rstrip() for ln in split_lines(text.replace("\t", "    "))]
    prompt_name = None
    kept = []
    for ln in lines:
        m = _PROMPT_NAME.search(ln)
        if m and re.match(r"^\S*[$#%>]|^\s*(?:sudo\s+)?(?:kubectl|oc|k)\s", ln):
            prompt_name = m["name"] if "[" not in m["name"] or "]" in m["name"] else None
            continue
        if re.match(r"^\s*(?:\S+@\S+\s*)?[$#%]\s|^\s*(?:sudo\s+)?(?:kubectl|oc|k)\s+\w", ln):
            continue  # another prompt line
        kept.append(ln)
    kept = split_lines(textwrap.dedent("\n".join(kept)))
    cluster = Cluster(origin="paste")
    for chunk in _chunks(kept):
        _object(chunk, prompt_name, cluster)
    if not cluster:
        raise ParseError("no object, section or event of kubectl describe in the text")
    return cluster

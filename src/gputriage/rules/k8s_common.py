"""What the Kubernetes rules share: the scope of a finding about a cluster object."""

from __future__ import annotations

from gputriage.model import Scope

__all__ = ["object_scope"]


def object_scope(kind: str, name: str, namespace: str | None = None) -> Scope:
    """The scope of a finding about one object: its kind in lower case (``node``
    becomes ``k8s-node``, not to be read as this host) and ``namespace/name``."""
    lowered = "k8s-node" if kind == "Node" else kind.lower()
    return Scope(lowered, name=f"{namespace}/{name}" if namespace else name)

"""The terminal view of ``gputriage weights``, from its ``gputriage/weights/v1``
document: the model and its memory, then the fit, load-time and herd tables (rich
tables on a terminal, plain aligned columns piped: :mod:`gputriage.views.tables`), then
the host check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputriage.text.units import format_bytes, format_duration, format_params
from gputriage.weights import plan
from gputriage.weights.text import fit_verdict, measured, rate

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

__all__ = ["print_weights", "weights_line"]


def weights_line(doc: dict[str, Any], status: int = 0) -> str:
    """The weights report in one line (``-q``): the model, its GPU memory, the fit on
    one node of the first GPU model that holds it on one node, the load time from the
    replicas' source, and the herd's slowest and best ready times; the host check's
    verdict heads it with ``--model-dir``."""
    from gputriage.text.safe import printable

    model, mem = doc["model"], doc["memory"]
    params = model["parameters"]
    what = f"{format_params(params)} parameters" if params else "parameters unknown"
    parts = [f"{what}, {format_bytes(mem['total_bytes'])} in GPU memory ({mem['dtype']})"]
    one_node = [f for f in doc["fit"] if f["tp"] is not None and f["nodes"] == 1]
    if one_node:
        parts.append(f"fits {one_node[0]['sku']} at TP {one_node[0]['tp']}")
    else:
        parts.append("fits no listed GPU model on one node")
    herd = doc["herd"]
    source = herd["source"] if herd else "local_nvme"
    tier = doc["load"]["tiers"].get(source)
    if tier is not None:
        parts.append(f"one reader loads it in {format_duration(tier['seconds'])} from "
                     f"{plan.TIER_LABEL[source]}")
    if herd and herd["rows"]:
        ready = [r["ready_s"] for r in herd["rows"]]
        parts.append(f"{herd['replicas']} replicas ready in {format_duration(max(ready))} "
                     f"(best plan: {format_duration(min(ready))})")
    word = {0: "OK", 1: "WARNING", 2: "CRITICAL"}.get(status, "UNKNOWN")
    return printable(f"{word} weights: " + "; ".join(parts))


def _model_lines(doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    model, mem = doc["model"], doc["memory"]
    params = model["parameters"]
    what = f"{format_params(params)} parameters" if params else "parameters unknown"
    if model["parameters_from"]:
        what += f" (from {model['parameters_from']})"
    out.append(f"Model: {what}")
    if model["file_bytes"] is not None:
        out.append(f"  on disk: {format_bytes(model['file_bytes'])} in "
                   f"{len(model['paths'])} file(s) ({', '.join(model['formats']) or '-'})")
    if model["config"]:
        c = model["config"]
        out.append(f"  config: {c['layers']} layers, hidden {c['hidden']}, {c['heads']} heads "
                   f"({c['kv_heads']} KV, head dim {c['head_dim']}), vocab {c['vocab']}")
    out += [f"  note: {n}" for n in model["notes"]]
    out.append(f"GPU memory: weights {format_bytes(mem['weights_bytes'])} ({mem['dtype']})")
    if mem["per_dtype"]:
        out.append("  per dtype: " + ", ".join(f"{d.upper()} {format_bytes(b)}"
                                               for d, b in mem["per_dtype"].items()))
    if mem["kv_bytes_per_token"]:
        out.append(f"  KV cache: {mem['kv_bytes_per_token']:,.0f} B/token ({mem['kv_dtype']}) "
                   f"\u00d7 {mem['context']} tokens \u00d7 batch {mem['batch']} = "
                   f"{format_bytes(mem['kv_cache_bytes'])}")
    else:
        out.append("  KV cache: not counted (no config.json: give --config)")
    out.append(f"  total {format_bytes(mem['total_bytes'])}, with {mem['overhead']:.0%} of each "
               "GPU kept for context, activations and fragmentation")
    return out


def _fit_rows(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    heads = (doc["model"]["config"] or {}).get("heads")
    return [(f["sku"], f"{f['memory_gb']:.0f} GB", fit_verdict(f, heads)[0])
            for f in doc["fit"]]


def _load_rows(doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(plan.TIER_LABEL[tier], rate(t["bytes_per_s"]), format_duration(t["seconds"]),
             t["origin"]) for tier, t in doc["load"]["tiers"].items()]


def _herd_rows(h: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(r["strategy"], format_duration(r["ready_s"]),
             f"{format_bytes(r['link_bytes'])} over the link"
             + (f", {format_duration(r['ahead_s'])} ahead" if r["ahead_s"] else ""), r["note"])
            for r in h["rows"]]


def herd_line(h: dict[str, Any]) -> str:
    """The herd's verdict: a warning past the threshold, with the plans that cut it."""
    now = h["rows"][0]["ready_s"] if h["rows"] else 0.0
    limit = format_duration(h["warn_after_s"])
    if h["severity"] == "warning":
        return (f"WARNING herd: the last replica waits {format_duration(now)} for its weights, "
                f"over {limit} (a scale-up, drain or rollout leaves the service short that "
                "long and saturates the shared link): pull once into the cluster and fan out, "
                "serve a shared read-only volume or node cache, or roll out in stages")
    return f"OK herd: the last replica has its weights in {format_duration(now)}, within {limit}"


def _host_lines(host: dict[str, Any]) -> list[str]:
    out = [f"Host: {host['model_dir']} on {host['fs_type'] or '?'} "
           f"({host['tier'] or 'unknown'})"]
    out += [f"  [{f['severity']}] {f['title']}" for f in host["findings"]]
    if not host["findings"]:
        out.append("  nothing to say")
    return out


def print_weights(console: Console, doc: dict[str, Any]) -> None:
    """Print the weights report onto ``console``. Paths, file and shard names, notes and
    titles come from the model's files and the host: every line and cell is shown
    through :func:`gputriage.text.safe.printable`, never raw."""
    from rich.text import Text as RichText

    from gputriage.text.safe import printable
    from gputriage.views.tables import new_table, print_table, say

    def Text(value: str) -> Any:  # stands in for rich's Text, escaped
        return RichText(printable(value))

    figures = ("memory", "bandwidth", "time", "ready in")  # never wrapped, right-aligned

    def table(title: str, head: tuple[str, ...], rows: list[Any]) -> None:
        say(console, Text(title))
        grid = new_table(console)
        for i, name in enumerate(head):
            widest = max([len(name), *(len(printable(row[i])) for row in rows)])
            if name in figures:
                grid.add_column(name, no_wrap=True, min_width=widest, justify="right")
            else:
                grid.add_column(name, overflow="fold", min_width=min(widest, 12))
        for row in rows:
            grid.add_row(*(Text(cell) for cell in row))
        print_table(console, grid, indent=2)

    for line in _model_lines(doc):
        say(console, Text(line))
    table("Fit (smallest tensor-parallel degree):", ("GPU", "memory", "fits"), _fit_rows(doc))
    table(f"Load time of {format_bytes(doc['load']['bytes'])} by one reader:",
          ("tier", "bandwidth", "time", "from"), _load_rows(doc))
    if doc["measure"]:
        say(console, Text(measured(doc["measure"])))
    h = doc["herd"]
    if h:
        table(f"Herd: {h['replicas']} replicas ({h['per_node']} per node) from "
              f"{plan.TIER_LABEL[h['source']]} over a shared {rate(h['link_bytes_per_s'])} "
              f"link: {format_bytes(h['total_bytes'])} in all",
              ("strategy", "ready in", "link", "how"), _herd_rows(h))
        say(console, Text(herd_line(h)))
    if doc["host"]:
        for line in _host_lines(doc["host"]):
            say(console, Text(line))
    assumed = [plan.TIER_LABEL[t] for t, v in doc["load"]["tiers"].items()
               if v["origin"] == "assumed"]
    if assumed:
        say(console, Text("Assumed bandwidths (--measure PATH or --bandwidth TIER=RATE to "
                          "state): " + ", ".join(assumed)))

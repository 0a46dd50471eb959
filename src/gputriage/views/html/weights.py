"""The ``gputriage weights`` report in HTML, from its ``gputriage/weights/v1`` document:
the model and its GPU memory per dtype, the fit per GPU model, the load time per tier,
the herd, and the host check of ``--model-dir``. Figures only: the document computed them."""

from __future__ import annotations

from typing import Any

from gputriage.text.units import format_bytes, format_duration, format_params
from gputriage.views.html.markup import (
    badge,
    banner_box,
    definitions,
    esc,
    lines_block,
    para,
    section,
    table,
    tag,
)
from gputriage.views.html.page import document
from gputriage.views.weightsview import herd_line
from gputriage.weights import plan
from gputriage.weights.text import fit_verdict, measured, rate


def _model(doc: dict[str, Any]) -> str:
    model, mem = doc["model"], doc["memory"]
    params = model["parameters"]
    pairs = [("parameters", esc(f"{format_params(params)}" if params else "unknown")
              + (" " + tag("span", esc(f"(from {model['parameters_from']})"), class_="muted")
                 if model["parameters_from"] else ""))]
    if model["file_bytes"] is not None:
        pairs.append(("on disk", esc(f"{format_bytes(model['file_bytes'])} in "
                                     f"{len(model['paths'])} file(s) "
                                     f"({', '.join(model['formats']) or '-'})")))
    if model["config"]:
        c = model["config"]
        pairs.append(("config", esc(f"{c['layers']} layers, hidden {c['hidden']}, "
                                    f"{c['heads']} heads ({c['kv_heads']} KV, head dim "
                                    f"{c['head_dim']}), vocab {c['vocab']}")))
    pairs.append(("weights in GPU memory", esc(f"{format_bytes(mem['weights_bytes'])} "
                                               f"({mem['dtype']})")))
    if mem["kv_bytes_per_token"]:
        kv = (f"{format_bytes(mem['kv_cache_bytes'])}: {mem['kv_bytes_per_token']:,.0f} B per "
              f"token ({mem['kv_dtype']}) \u00d7 {mem['context']} tokens \u00d7 batch "
              f"{mem['batch']}")
    else:
        kv = "not counted (no config.json: give --config)"
    pairs.append(("KV cache", esc(kv)))
    pairs.append(("total", esc(f"{format_bytes(mem['total_bytes'])}, with "
                               f"{mem['overhead']:.0%} of each GPU kept for the CUDA context, "
                               "activations and fragmentation")))
    body = definitions(pairs)
    if mem["per_dtype"]:
        body += table(("dtype", "weights"), [(esc(d.upper()), esc(format_bytes(b)))
                                             for d, b in mem["per_dtype"].items()],
                      caption="The weights in GPU memory per dtype")
    body += "".join(para(f"Note: {n}", "muted") for n in model["notes"])
    return section("Model and GPU memory", body, ident="model")


def _fit(doc: dict[str, Any]) -> str:
    heads = (doc["model"]["config"] or {}).get("heads")
    rows = []
    for f in doc["fit"]:
        verdict, bad = fit_verdict(f, heads)
        rows.append((esc(f["sku"]), esc(f"{f['memory_gb']:.0f} GB"),
                     (esc(verdict), "bad" if bad else None)))
    return section("Fit", table(("GPU", "memory", "smallest tensor-parallel degree"), rows,
                                caption="The smallest tensor-parallel degree per GPU model "
                                        "that holds the weights and the KV cache"),
                   ident="fit")


def _load(doc: dict[str, Any]) -> str:
    load = doc["load"]
    rows = [(esc(plan.TIER_LABEL[tier]), esc(rate(t["bytes_per_s"])),
             esc(format_duration(t["seconds"])), esc(t["origin"]))
            for tier, t in load["tiers"].items()]
    body = table(("tier", "bandwidth", "time", "bandwidth from"), rows,
                 caption=f"Load time of {format_bytes(load['bytes'])} by one reader")
    m = doc["measure"]
    if m:
        body += para(measured(m))
    return section("Load time per tier", body, ident="load")


def _herd(h: dict[str, Any]) -> str:
    rows = [(esc(r["strategy"]), esc(format_duration(r["ready_s"])),
             esc(format_duration(r["ahead_s"]) if r["ahead_s"] else "-"),
             esc(format_bytes(r["link_bytes"])), esc(r["note"])) for r in h["rows"]]
    intro = para(f"{h['replicas']} replicas ({h['per_node']} per node) start together and "
                 f"pull from {plan.TIER_LABEL[h['source']]} over a shared "
                 f"{rate(h['link_bytes_per_s'])} link: {format_bytes(h['total_bytes'])} "
                 "in all.")
    word, _, line = herd_line(h).partition(" ")  # the badge says the word
    intro += tag("p", badge(h.get("severity", "ok")) + " " + esc(line or word))
    return section("The herd", intro + table(
        ("strategy", "last replica ready", "done ahead", "over the link", "how"), rows,
        caption="Time until the last replica is ready, by strategy"), ident="herd")


def _host(host: dict[str, Any]) -> str:
    intro = para(f"{host['model_dir']} on {host['fs_type'] or '?'} "
                 f"({host['tier'] or 'unknown'})")
    items = "".join(tag("li", badge(f["severity"]) + " " + esc(f["title"]) + tag(
        "p", esc(f.get("explanation") or ""), class_="muted")) for f in host["findings"])
    body = intro + (tag("ul", items) if items else para("Nothing to say."))
    body += tag("details", tag("summary", "The host report")
                + lines_block(host["report"].splitlines()))
    return section("This host", body, ident="host")


def weights_html(doc: dict[str, Any]) -> str:
    """The whole document of a weights report."""
    worst = {f["severity"] for f in (doc["host"] or {}).get("findings", [])}
    if doc["herd"]:
        worst.add(doc["herd"].get("severity", "ok"))  # the herd's verdict, as the terminal's
    word = next((w for w in ("critical", "warning") if w in worst), "ok")
    total = format_bytes(doc["memory"]["total_bytes"])
    summary = f"weights: {total} in GPU memory"
    if doc["herd"]:
        first = doc["herd"]["rows"][0]
        summary += (f"; {doc['herd']['replicas']} replicas at once: the last ready after "
                    f"{format_duration(first['ready_s'])}")
    parts = [banner_box(word, esc(summary)), _model(doc), _fit(doc), _load(doc)]
    if doc["herd"]:
        parts.append(_herd(doc["herd"]))
    if doc["host"]:
        parts.append(_host(doc["host"]))
    assumed = [plan.TIER_LABEL[t] for t, v in doc["load"]["tiers"].items()
               if v["origin"] == "assumed"]
    meta = ["Assumed bandwidths (state them with --measure PATH or --bandwidth TIER=RATE): "
            + ", ".join(assumed)] if assumed else []
    who = ", ".join(doc["model"]["paths"][:3]) or doc["model"]["parameters_from"] or "model"
    return document(f"gputriage weights: {total} \u2014 {who}", "Weights report", meta, parts)

"""The report's one inline style sheet: light and dark colours (``prefers-color-scheme``),
a phone-first layout (only wide tables scroll, in their own box), and a print layout
(light, evidence expanded). Text colours meet WCAG AA contrast on their backgrounds
(4.5:1 and more; the pairs are listed in :data:`CONTRAST_PAIRS` and tested)."""

from __future__ import annotations

# (foreground, background) of every text colour on the backgrounds it is used on:
# light page, dark page, and the severity badges / marked topology cells.
CONTRAST_PAIRS = (
    ("#1b1b1b", "#ffffff"), ("#4a4a4a", "#ffffff"), ("#0b57d0", "#ffffff"),
    ("#1b1b1b", "#f3f4f6"), ("#4a4a4a", "#f3f4f6"),
    ("#e8e8e8", "#121417"), ("#b8bcc2", "#121417"), ("#8ab4f8", "#121417"),
    ("#e8e8e8", "#1d2126"), ("#b8bcc2", "#1d2126"),
    ("#ffffff", "#b3261e"), ("#1b1b1b", "#ffd54a"), ("#ffffff", "#1a5fb4"),
    ("#ffffff", "#1e7a34"), ("#ffffff", "#5b3f99"),
    ("#1b1b1b", "#dff3e3"), ("#1b1b1b", "#e3eefb"), ("#1b1b1b", "#fbf0d0"),
    ("#1b1b1b", "#fde2e0"), ("#e8e8e8", "#1f3a26"), ("#e8e8e8", "#1d3047"),
    ("#e8e8e8", "#3d3416"), ("#e8e8e8", "#4a2320"),
    ("#000000", "#ffffff"), ("#333333", "#ffffff"),  # print
)

CSS = """
:root{color-scheme:light dark;--bg:#ffffff;--fg:#1b1b1b;--muted:#4a4a4a;--panel:#f3f4f6;
--border:#c4c7cc;--link:#0b57d0;--c-nv:#dff3e3;--c-pix:#e3eefb;--c-node:#fbf0d0;
--c-sys:#fde2e0;--crit:#b3261e;--warn:#ffd54a;--info:#1a5fb4;--ok:#1e7a34;--unk:#5b3f99;
--mark-warn:#9a6b00}
@media (prefers-color-scheme:dark){:root{--bg:#121417;--fg:#e8e8e8;--muted:#b8bcc2;
--panel:#1d2126;--border:#3d434b;--link:#8ab4f8;--c-nv:#1f3a26;--c-pix:#1d3047;
--c-node:#3d3416;--c-sys:#4a2320;--mark-warn:#ffd54a}}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0 auto;max-width:72rem;padding:1rem;background:var(--bg);color:var(--fg);
font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;
overflow-wrap:break-word}
h1{font-size:1.45rem;margin:.2rem 0 .4rem}
h2{font-size:1.2rem;margin:1.6rem 0 .6rem;padding-bottom:.2rem;
border-bottom:1px solid var(--border)}
h3{font-size:1.02rem;margin:0 0 .4rem}
a{color:var(--link)}
.meta,.muted,caption,figcaption{color:var(--muted)}
.meta{margin:.1rem 0;font-size:.92rem}
code,pre,.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace;
font-size:.86rem}
pre{margin:.3rem 0;padding:.5rem;background:var(--panel);border:1px solid var(--border);
border-radius:4px;white-space:pre-wrap;overflow-wrap:anywhere}
.badge{display:inline-block;min-width:5.6em;padding:.05rem .4rem;border-radius:3px;
font-weight:700;font-size:.82rem;text-align:center;letter-spacing:.02em;
-webkit-print-color-adjust:exact;print-color-adjust:exact}
.sev-critical.badge{background:var(--crit);color:#ffffff}
.sev-warning.badge{background:var(--warn);color:#1b1b1b}
.sev-info.badge{background:var(--info);color:#ffffff}
.sev-ok.badge{background:var(--ok);color:#ffffff}
.sev-unknown.badge{background:var(--unk);color:#ffffff}
.banner{margin:1rem 0;padding:.8rem 1rem;background:var(--panel);border:1px solid var(--border);
border-left:.5rem solid var(--unk);border-radius:4px}
.banner.sev-critical{border-left-color:var(--crit)}
.banner.sev-warning{border-left-color:var(--warn)}
.banner.sev-ok{border-left-color:var(--ok)}
.banner p{margin:.25rem 0}
.banner .verdict{font-size:1.08rem;font-weight:600}
.finding{margin:.8rem 0;padding:.7rem .9rem;border:1px solid var(--border);
border-left:.35rem solid var(--border);border-radius:4px;break-inside:avoid-page}
.finding.sev-critical{border-left-color:var(--crit)}
.finding.sev-warning{border-left-color:var(--warn)}
.finding.sev-info{border-left-color:var(--info)}
.finding.sev-ok{border-left-color:var(--ok)}
.finding h3 .badge{margin-right:.4rem;vertical-align:.08em}
.finding .fid{font-weight:400;color:var(--muted);font-size:.85rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.15rem .8rem;margin:.4rem 0}
dl>div{display:contents}
dt{color:var(--muted)}
dd{margin:0}
details{margin:.35rem 0}
summary{cursor:pointer;color:var(--link)}
.consequences{margin:.5rem 0 0 .4rem;padding-left:.8rem;border-left:2px solid var(--border)}
.scroll{overflow-x:auto;max-width:100%;margin:.4rem 0;position:relative}
table{border-collapse:collapse;font-size:.9rem}
th,td{border:1px solid var(--border);padding:.25rem .45rem;text-align:left;vertical-align:top}
thead th{background:var(--panel)}
caption{text-align:left;padding:.2rem 0;font-size:.88rem}
.topo td,.topo th{text-align:center;white-space:nowrap;font-family:ui-monospace,Menlo,
Consolas,monospace;font-size:.82rem}
.topo td.l-nv{background:var(--c-nv)}.topo td.l-pix{background:var(--c-pix)}
.topo td.l-node{background:var(--c-node)}.topo td.l-sys{background:var(--c-sys)}
.topo td.bad{background:var(--crit);color:#ffffff;font-weight:700;
outline:2px solid var(--fg);-webkit-print-color-adjust:exact;print-color-adjust:exact}
.sw.l-nv{background:var(--c-nv)}.sw.l-pix{background:var(--c-pix)}
.sw.l-node{background:var(--c-node)}.sw.l-sys{background:var(--c-sys)}
.topo th.bad{background:var(--crit);color:#ffffff}
.legend span{display:inline-block;margin-right:.8rem}
.sw{display:inline-block;width:.9em;height:.9em;border:1px solid var(--border);
vertical-align:-.1em;margin-right:.25em}
figure{margin:.4rem 0}
.plot{overflow-x:auto;max-width:100%}
svg.timeline{width:100%;min-width:56rem;height:auto;display:block}
svg.bar{width:100%;max-width:40rem;height:auto;display:block}
td .mono{white-space:nowrap}
svg .lane-label,svg .tick{fill:var(--fg);font:12px system-ui,sans-serif}
svg .tick{fill:var(--muted);font-size:11px}
svg .axis,svg .grid{stroke:var(--border)}
svg .boot{stroke:var(--muted);stroke-dasharray:4 3}
svg .boot-label{fill:var(--muted);font:11px system-ui,sans-serif}
svg .m-critical{fill:var(--crit);stroke:var(--crit)}
svg .m-warning{fill:var(--mark-warn);stroke:var(--mark-warn)}
svg .m-info{fill:var(--info);stroke:var(--info)}
svg .span{stroke-width:3}
.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);
white-space:nowrap}
footer{margin-top:2rem;font-size:.88rem;color:var(--muted)}
@media (max-width:40rem){body{padding:.6rem}h1{font-size:1.25rem}
dl{grid-template-columns:1fr}dt{margin-top:.2rem}}
@media print{:root{--bg:#ffffff;--fg:#000000;--muted:#333333;--panel:#ffffff;
--border:#999999;--link:#000000;--c-nv:#ffffff;--c-pix:#ffffff;--c-node:#ffffff;
--c-sys:#ffffff}
body{max-width:none;padding:0;font-size:11pt}
details::details-content{content-visibility:visible;display:contents}
summary{color:#000000;list-style:none}
.scroll,.plot{overflow:visible}
svg.timeline{min-width:0}
.finding,.banner{break-inside:avoid}}
"""

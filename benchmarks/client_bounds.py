"""``npd --from`` and ``k8s status`` against hostile servers on 127.0.0.1, at the sizes of
issue 29: peak memory (the child's own rusage), wall time, and what was printed.

  * npd --from, a 57 MiB answer, its length announced and not (the issue: 1.5 GB);
  * k8s status, one page of 151 MiB that ignores the limit asked for, announced and
    not (the issue: 593 MiB), and a 600 MB page (the issue: 2.2 GB);
  * k8s status, a 403 whose message is 5 MB: the size of the report (the issue: 30 MB);
  * k8s status --timeout 10 against a server that sends a header line every 5 s (the
    issue: reads for ever; cut here at 60 s).

Usage: python benchmarks/client_bounds.py [--src PATH] [--big-page-mb N] (another
checkout's src measures its version; without the bounds, a page costs 4-20 times its
size: lower --big-page-mb there)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "security")]

from hostile import Hostile, streamed, trickled  # noqa: E402 - tests/ on the path first
from test_clients import (  # noqa: E402
    RESULT_HEAD,
    api_server,
    forbidden,
    kubeconfig,
    pod_list,
    run_measured,
)


def _show(what: str, result: tuple[int, str, str, float, float]) -> None:
    code, out, err, peak, took = result
    said = (out.strip().splitlines() or err.strip().splitlines() or [""])[0][:70]
    print(f"{what:34} exit {code:>3}  peak {peak:6.0f} MiB  {took:6.1f} s  "
          f"stdout {len(out):>9} B  {said}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    parser.add_argument("--big-page-mb", type=int, default=600)
    args = parser.parse_args()
    print(f"gputriage of {args.src}")
    for length in (True, False):
        server = Hostile(streamed(57 * 2**20, b"[],", RESULT_HEAD, length))
        _show(f"npd --from, 57 MiB{'' if length else ' unannounced'}",
              run_measured(["npd", "--from", server.url], 300, args.src))
        server.stop()
    with tempfile.TemporaryDirectory(prefix="gputriage-clients-") as tmp:
        cases = [("k8s status, 151 MiB page", api_server(pod_list(151 * 2**20, True))),
                 ("k8s status, 151 MiB unannounced", api_server(pod_list(151 * 2**20,
                                                                         False))),
                 (f"k8s status, {args.big_page_mb} MB page",
                  api_server(pod_list(args.big_page_mb * 10**6, True))),
                 ("k8s status, 5 MB error message", api_server(forbidden(5 * 2**20)))]
        for what, routes in cases:
            server = Hostile(routes, routed=True)
            config = kubeconfig(server, Path(tmp) / "kubeconfig")
            _show(what, run_measured(["k8s", "status", "--kubeconfig", str(config),
                                      "--no-pager", "--timeout", "120"], 300, args.src))
            server.stop()
        server = Hostile(trickled(b"HTTP/1.1 200 OK\r\n", 5.0, b"X-Slow: a\r\n"))
        config = kubeconfig(server, Path(tmp) / "kubeconfig")
        _show("k8s status --timeout 10, trickle", run_measured(
            ["k8s", "status", "--kubeconfig", str(config), "--timeout", "10"], 60, args.src))
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

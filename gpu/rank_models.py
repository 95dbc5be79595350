#!/usr/bin/env python3
"""gpu/rank_models.py TRACE [--models M1,M2,...] [--flashbits PATH] [--jobs N] [--json]

Which flashbits kernel model reproduces a capture? Replays TRACE under every candidate model
(`flashbits replay TRACE --model M --json`) and ranks them by what they reproduce bit for bit:
first the models that match every compared element, then by the count of matching elements
over all tensors (O, LSE and, where captured, delta, dQ, dK, dV), then by O's count.

This is the first step of fitting a kernel that flashbits does not model yet (cuDNN's SDPA,
FlexAttention, issue 38): the nearest model names the arithmetic to start from, and its
per-tensor counts say which stage differs (O exact but LSE not: the log/sum path; O and LSE
exact but dQ not: the backward's order). The candidates default to every base model that
`flashbits models --json` lists; variants and recipes are given with --models (e.g.
`fa2-sm90,fa2-sm90+splitkv:4,pytorch-fa2-sm90`).

A model the replay refuses (another input format, no backward where the trace holds one) is
listed with flashbits' own reason and not ranked. The replays read the trace's metadata as
`flashbits replay` does (a hardware capture from compute capability 9.0 gets `--sfu auto`).

Output: one line per model, best first: `bit-exact` or `differs`, then matching/compared for
every tensor; --json prints the same as a JSON list. Exit 0 when at least one model replayed;
2 when none could (an unreadable trace: the first refusal is printed), or on bad usage.
Needs python3 (no numpy, no torch).
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

TENSORS = ("o", "lse", "delta", "dq", "dk", "dv")


def default_flashbits():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "build", "tools", "flashbits")


def base_models(flashbits):
    p = subprocess.run([flashbits, "models", "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"error: {flashbits} models --json exited {p.returncode}: {p.stderr.strip()}")
    return [m["name"] for m in json.loads(p.stdout)["kernel_models"] if not m["name"].startswith("+")]


def replay(flashbits, trace, model):
    """One candidate: its per-tensor counts, or the replay's refusal."""
    p = subprocess.run([flashbits, "replay", trace, "--model", model, "--json", "--jobs", "1"],
                       capture_output=True, text=True)
    if p.returncode not in (0, 1):
        lines = p.stderr.strip().splitlines()
        reason = lines[-1] if lines else f"exit {p.returncode}"
        return {"model": model, "refused": reason[len("error: "):] if reason.startswith("error: ") else reason}
    result = json.loads(p.stdout)
    counts = {t["name"]: (t["matching"], t["compared"]) for t in result["tensors"]}
    return {"model": model, "counts": counts, "bit_exact": all(m == c for m, c in counts.values()),
            "matching": sum(m for m, _ in counts.values()), "compared": sum(c for _, c in counts.values())}


def rank_key(r):
    return (not r["bit_exact"], -r["matching"], -r["counts"].get("o", (0, 0))[0], r["model"])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[2])
    ap.add_argument("trace")
    ap.add_argument("--models", help="comma-separated candidates (default: every base model)")
    ap.add_argument("--flashbits", default=os.environ.get("FLASHBITS", default_flashbits()))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not os.access(a.flashbits, os.X_OK):
        print(f"error: --flashbits {a.flashbits}: not an executable (cmake --build build --target flashbits)",
              file=sys.stderr)
        return 2
    if a.jobs < 1:
        print(f"error: --jobs {a.jobs}: expected 1 or more", file=sys.stderr)
        return 2
    models = [m for m in a.models.split(",") if m] if a.models is not None else base_models(a.flashbits)
    if not models:
        print("error: --models: no model named", file=sys.stderr)
        return 2
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        results = list(pool.map(lambda m: replay(a.flashbits, a.trace, m), models))
    ranked = sorted((r for r in results if "refused" not in r), key=rank_key)
    refused = [r for r in results if "refused" in r]
    if a.json:
        print(json.dumps(ranked + refused, indent=1))
    else:
        width = max(len(m) for m in models)
        for r in ranked:
            cells = "  ".join(f"{t} {r['counts'][t][0]}/{r['counts'][t][1]}" for t in TENSORS if t in r["counts"])
            print(f"{r['model']:<{width}}  {'bit-exact' if r['bit_exact'] else 'differs  '}  {cells}")
        for r in refused:
            print(f"{r['model']:<{width}}  refused    {r['refused']}")
    if not ranked:
        print(f"error: no candidate model could replay {a.trace}; {refused[0]['model']}: {refused[0]['refused']}",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""tests/check_replay_residual.py BOUNDS CAPTURE REPLAY_JSON: whether `flashbits replay --json` of
CAPTURE (its file name without .safetensors) stays within BOUNDS, a TSV of capture, tensor,
mismatches, max_ulps ('#' lines are comments; the first other line is the header): for each
tensor replay compared, the elements that differ must be at most `mismatches` and their |ulps| at
most `max_ulps`; a tensor without a row must match bit for bit. Prints one line per tensor over
its bound and exits 1 if there is one, 0 otherwise; 2 on unreadable input. For models known not to
be bit-exact (cudnn-sdpa-sm90): the test fails when the fit gets worse."""
import json
import sys


def main():
    if len(sys.argv) != 4:
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    bounds_path, capture, replay_path = sys.argv[1:]
    bounds = {}
    try:
        with open(bounds_path) as f:
            rows = [line.rstrip("\n").split("\t") for line in f if line.strip() and not line.startswith("#")]
        for row in rows[1:]:
            bounds[(row[0], row[1])] = (int(row[2]), float(row[3]))
        with open(replay_path) as f:
            report = json.load(f)
    except (OSError, ValueError, IndexError) as e:
        print(f"{capture}: cannot read the bounds or the replay report: {e}", file=sys.stderr)
        return 2
    over = []
    for tensor in report["tensors"]:
        differ = tensor["compared"] - tensor["matching"]
        worst = max((abs(m["ulps"]) for m in tensor["mismatches"]), default=0.0)
        # replay lists every mismatch unless it caps the list; a capped list hides ulps.
        if len(tensor["mismatches"]) < differ:
            over.append(f"{tensor['name']}: {differ} differ but only {len(tensor['mismatches'])} are listed")
            continue
        allowed, allowed_ulps = bounds.get((capture, tensor["name"]), (0, 0.0))
        if differ > allowed or worst > allowed_ulps:
            over.append(f"{tensor['name']}: {differ} differ (bound {allowed}), max |ulps| {worst:g} "
                        f"(bound {allowed_ulps:g})")
    for line in over:
        print(f"{capture}: beyond the measured residual: {line}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

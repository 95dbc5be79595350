#!/usr/bin/env python3
"""gpu/check_paths.py DIR [--strict]: check gpu/capture_paths.py's captures against float64.

(`gpu/check_paths.py --replay-model FILE` prints the model a capture is replayed under: its
metadata's, else flashbits' model of the path (math pytorch-math-sm90, flex flex-attention-sm90,
split-KV pytorch-fa2-sm90+splitkv, the tutorial triton-tutorial-sm90, flex with a query under
128 rows flex-decoding-sm90, cudnn the black-box fit
cudnn-sdpa-sm90), else the nearest model, marked so;
used by gpu/import_session.sh.)

Written independently of capture_paths.py and of torch (json, struct and numpy only): it
reads each DIR/**/*.safetensors byte by byte, decodes bf16/fp16/fp32, and checks
- provenance: source is "cuda:<gpu>" or "emulated"; an emulated capture carries stand_in
  saying it is NOT a hardware capture and names no kernel; a hardware capture's path_taken
  begins with "yes" (the profiler showed the path's kernels);
- metadata against the tensors: path, seqlen_q = q's rows, seqlen_k = k's rows, batch, heads,
  head_dim, dtype = q's dtype, causal (true exactly when causal_alignment is not none),
  backward captured exactly when do, dq, dk, dv are present (split-KV: never);
- values against a float64 recomputation with the mask the metadata names (none; top-left:
  key j <= row i; bottom-right: j <= i + seqlen_k - seqlen_q): O within 8 units of the dtype's
  rounding (2^-8 bf16, 2^-11 fp16) of max |O|; lse (natural log), lse_flex (natural log) or
  m_log2_tutorial (log2) within 1e-3 relative; dQ, dK, dV (the exact gradients of O with dO)
  within 16 units of max |dX|.
One line per capture; with --strict any failed check exits 1 (the rehearsal's use: the CPU
stand-ins must pass all of them). Without --strict (a hardware capture: the kernels may differ
from exact attention, e.g. the tutorial's always-masked backward) differences are reported
and the exit is 0 unless a file is unreadable or a provenance check fails. Exit 2: no capture
found, an unreadable file, or numpy missing (77 with --skip-without-numpy).
"""
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    np = None

EPS = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors, dtypes = {}, {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        raw = body[begin:end]
        if t["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view("<f4")
        elif t["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif t["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        else:
            raise ValueError(f"{name}: dtype {t['dtype']}")
        tensors[name] = a.astype(np.float64).reshape(t["shape"])
        dtypes[name] = t["dtype"]
    return meta, tensors, dtypes


def reference(meta, t):
    q, k, v = t["q"], t["k"], t["v"]
    scale = float(meta["softmax_scale"])
    nq, nk = q.shape[2], k.shape[2]
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    align = meta.get("causal_alignment", "none")
    allowed = np.ones((nq, nk), bool) if align == "none" else (j <= i) if align == "top-left" else (j <= i + nk - nq)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    s = np.where(allowed, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    e = np.exp(s - mx)
    lsum = e.sum(axis=-1, keepdims=True)
    p = e / lsum
    o = np.einsum("bhij,bhjd->bhid", p, v)
    ref = {"o": o, "lse": (mx + np.log(lsum))[..., 0]}
    if "do" in t:
        do = t["do"]
        dv = np.einsum("bhij,bhid->bhjd", p, do)
        dp = np.einsum("bhid,bhjd->bhij", do, v)
        delta = (do * o).sum(axis=-1, keepdims=True)
        ds = p * (dp - delta)
        ref.update({"dq": np.einsum("bhij,bhjd->bhid", ds, k) * scale,
                    "dk": np.einsum("bhij,bhid->bhjd", ds, q) * scale, "dv": dv})
    return ref


def check(path, strict):
    meta, t, dtypes = read(path)
    problems, provenance = [], []
    src = meta.get("source", "")
    if src == "emulated":
        if "NOT a hardware capture" not in meta.get("stand_in", ""):
            provenance.append("emulated without a stand_in note")
        if not meta.get("kernel", "").startswith("none"):
            provenance.append(f"emulated but names kernels: {meta.get('kernel')[:80]}")
    elif src.startswith("cuda:"):
        if "stand_in" in meta:
            provenance.append("a hardware source with a stand_in note")
        if not meta.get("path_taken", "").startswith("yes"):
            problems.append(f"path not proven taken: {meta.get('path_taken', '')[:120]}")
    else:
        provenance.append(f"source {src!r}")
    for name in ("q", "k", "v", "o"):
        if name not in t:
            provenance.append(f"no tensor {name}")
    if provenance:
        return provenance, True
    q, k = t["q"], t["k"]
    dtype = meta.get("dtype", "")
    want = {"batch": q.shape[0], "heads": q.shape[1], "seqlen_q": q.shape[2], "seqlen_k": k.shape[2],
            "head_dim": q.shape[3]}
    for key, value in want.items():
        if meta.get(key) != str(value):
            problems.append(f"metadata {key}={meta.get(key)} but the tensors say {value}")
    if {"bf16": "BF16", "fp16": "F16"}.get(dtype) != dtypes["q"]:
        problems.append(f"dtype {dtype} but q is {dtypes['q']}")
    causal = meta.get("causal") == "true"
    if causal != (meta.get("causal_alignment", "none") != "none"):
        problems.append(f"causal {meta.get('causal')} with causal_alignment {meta.get('causal_alignment')}")
    grads = [n for n in ("do", "dq", "dk", "dv") if n in t]
    if meta.get("backward") == "captured":
        if len(grads) != 4:
            problems.append(f"backward captured but only {grads}")
    elif grads:
        problems.append(f"backward not captured but {grads} present")
    if meta.get("path") == "splitkv" and grads:
        problems.append("split-KV is forward-only")
    if problems and strict:
        return problems, False
    eps = EPS.get(dtype, 2.0 ** -8)
    ref = reference(meta, t)
    worst = []
    for name, units in (("o", 8), ("dq", 16), ("dk", 16), ("dv", 16)):
        if name in t and name in ref:
            err = np.abs(t[name] - ref[name]).max()
            bound = units * eps * max(np.abs(ref[name]).max(), 1e-30)
            worst.append(f"{name} {err / (eps * max(np.abs(ref[name]).max(), 1e-30)):.2f}u")
            if not err <= bound:
                problems.append(f"{name}: max |error| {err:.3g} over {bound:.3g} ({units} units of max |{name}|)")
    for name, factor in (("lse", 1.0), ("lse_flex", 1.0), ("m_log2_tutorial", 1.0 / np.log(2.0))):
        if name in t:
            r = ref["lse"] * factor
            got = t[name].reshape(r.shape) if t[name].size == r.size else None
            if got is None:
                problems.append(f"{name}: shape {list(t[name].shape)}, expected {list(r.shape)}")
                continue
            err = np.abs(got - r).max()
            worst.append(f"{name} {err:.2g}")
            if not err <= 1e-3 * max(1.0, np.abs(r).max()):
                problems.append(f"{name}: max |error| {err:.3g}")
    return problems + [("ok: " + ", ".join(worst))], False


# The model a capture is replayed under: its metadata's, else flashbits' model of its path, else
# the nearest flashbits model.
MODELLED = {"splitkv": "pytorch-fa2-sm90+splitkv", "tutorial": "triton-tutorial-sm90", "flex": "flex-attention-sm90",
            "math": "pytorch-math-sm90", "cudnn": "cudnn-sdpa-sm90"}


def replay_model(path):
    data = open(path, "rb").read(1 << 20)
    meta = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]]).get("__metadata__", {})
    if meta.get("model"):
        return meta["model"] + " (metadata)"
    path_name = meta.get("path", "")
    if path_name == "flex" and int(meta.get("seqlen_q", 128)) < 128:
        return "flex-decoding-sm90 (flashbits' model of the flex path's decoding kernel, queries under 128 rows)"
    if path_name == "cudnn":
        return MODELLED[path_name] + " (flashbits' black-box fit of the cudnn path, not bit-exact)"
    if path_name in MODELLED:
        return MODELLED[path_name] + " (flashbits' model of the " + path_name + " path)"
    return "standard-" + meta.get("dtype", "bf16") + " (nearest: flashbits has no model of this kernel)"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    strict = "--strict" in sys.argv
    if "--replay-model" in sys.argv and len(args) == 1:
        print(replay_model(args[0]))
        return 0
    if np is None:
        print("numpy is not installed: skipping", file=sys.stderr)
        return 77 if "--skip-without-numpy" in sys.argv else 2
    if len(args) != 1:
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(args[0]) for f in fs if f.endswith(".safetensors"))
    if not files:
        print(f"error: no .safetensors under {args[0]}", file=sys.stderr)
        return 2
    bad = provenance_bad = 0
    for path in files:
        try:
            lines, provenance = check(path, strict)
        except Exception as exc:  # noqa: BLE001
            print(f"{os.path.relpath(path, args[0])}: UNREADABLE: {type(exc).__name__}: {exc}")
            return 2
        failed = [line for line in lines if not line.startswith("ok: ")]
        status = "PROVENANCE" if provenance else ("FAIL" if failed else "ok")
        note = lines[-1][4:] if lines and lines[-1].startswith("ok: ") else ""
        print(f"{os.path.relpath(path, args[0])}: {status} {note}")
        for line in failed:
            print(f"    {line}")
        bad += 1 if failed else 0
        provenance_bad += 1 if provenance else 0
    print(f"{len(files)} captures, {len(files) - bad} pass every check")
    if provenance_bad or (strict and bad):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

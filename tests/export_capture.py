#!/usr/bin/env python3
"""tests/export_capture.py TRACE OUTDIR: re-save a flashbits trace the ways users save captures.

Used by tests/import_captures.sh. Written independently of flashbits' readers and writers
(only json, struct and numpy), so that an import that agrees with the original trace bit
for bit shows that names, layouts and containers were understood, not merely round-tripped.

Writes into OUTDIR:
  bare.safetensors        no __metadata__, tensors renamed query/key/value/out/dout/
                          softmax_lse, laid out as safetensors.torch.save_file does: tensors
                          sorted by dtype alignment (largest first) then name, header padded
                          with spaces to a multiple of 8
  bshd.safetensors        the same, with q k v o do dq dk dv as [batch, seq, heads, dim]
                          (flash_attn's layout) and plain names
  capture.npz             np.savez; bf16 tensors as uint16 bit patterns
  compressed.npz          np.savez_compressed, bshd layout
  npy/NAME.npy            np.save per tensor
  scale.txt, causal.txt   the trace's softmax_scale and causal, for the command line
Exits 77 (skip) when numpy is missing.
"""
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is not installed (apt-get install python3-numpy): skipping", file=sys.stderr)
    sys.exit(77)

DTYPES = {"BF16": ("<u2", 2), "F16": ("<f2", 2), "F32": ("<f4", 4), "F64": ("<f8", 8)}
ALIASES = {"q": "query", "k": "key", "v": "value", "o": "out", "do": "dout", "lse": "softmax_lse"}
SEQUENCE_MAJOR = {"q", "k", "v", "o", "do", "dq", "dk", "dv"}


def read_trace(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {}
    for name, t in header.items():
        descr, _ = DTYPES[t["dtype"]]
        begin, end = t["data_offsets"]
        tensors[name] = (t["dtype"], np.frombuffer(body[begin:end], dtype=descr).reshape(t["shape"]))
    return meta, tensors


def write_safetensors(path, tensors):
    # save_file's order: by alignment (dtype size) descending, then by name.
    order = sorted(tensors, key=lambda name: (-DTYPES[tensors[name][0]][1], name))
    header, chunks, offset = {}, [], 0
    for name in order:
        dtype, array = tensors[name]
        raw = np.ascontiguousarray(array).astype(DTYPES[dtype][0]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def bshd(tensors):
    return {name: (dt, a.transpose(0, 2, 1, 3) if name in SEQUENCE_MAJOR else a) for name, (dt, a) in tensors.items()}


def main():
    trace, out = sys.argv[1], sys.argv[2]
    meta, tensors = read_trace(trace)
    os.makedirs(os.path.join(out, "npy"), exist_ok=True)
    write_safetensors(os.path.join(out, "bare.safetensors"), {ALIASES.get(n, n): t for n, t in tensors.items()})
    write_safetensors(os.path.join(out, "bshd.safetensors"), bshd(tensors))
    np.savez(os.path.join(out, "capture.npz"), **{n: a for n, (_, a) in tensors.items()})
    np.savez_compressed(os.path.join(out, "compressed.npz"), **{n: a for n, (_, a) in bshd(tensors).items()})
    for name, (_, array) in tensors.items():
        np.save(os.path.join(out, "npy", name + ".npy"), array)
    with open(os.path.join(out, "scale.txt"), "w") as f:
        f.write(meta["softmax_scale"])
    with open(os.path.join(out, "causal.txt"), "w") as f:
        f.write(meta["causal"])


if __name__ == "__main__":
    main()

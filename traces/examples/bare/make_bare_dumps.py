"""Writes the two bare dumps shipped beside this script (traces/examples/bare/), from the H200 capture
traces/hw/h200/torch/torch_bf16_random_d64.safetensors (PyTorch's SDPA flash backend, bf16,
one head, seqlen 256, head dim 64, scale 0.125, not causal): its q, k, v, o, do, dq, dk, dv bit
patterns, copied byte for byte and stripped of every piece of metadata, as a user's own dump
would be.

- dump.npz: numpy's np.savez, [batch, seq, heads, dim] (flash_attn's bshd layout), bf16 bit
  patterns as uint16 (numpy has no bfloat16);
- dump.safetensors: safetensors without __metadata__, [batch, heads, seq, dim] (SDPA's bhsd),
  dtype BF16.

They are what the README's and docs/PYTHON.md's `import` and bare `replay` examples read.
Reads the capture with the standard library and numpy only (not flashbits, whose readers the
examples test). Run from the repository root: python3 traces/examples/bare/make_bare_dumps.py
"""
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = os.path.join(HERE, "..", "..", "hw", "h200", "torch", "torch_bf16_random_d64.safetensors")
NAMES = ("q", "k", "v", "o", "do", "dq", "dk", "dv")


def read_bf16_tensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + header_len])
    data = raw[8 + header_len:]
    out = {}
    for name in NAMES:
        entry = header[name]
        assert entry["dtype"] == "BF16", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype="<u2").reshape(entry["shape"])
    return out


def write_bare_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, bits in tensors.items():
        blob = np.ascontiguousarray(bits, dtype="<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(bits.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    bhsd = read_bf16_tensors(CAPTURE)
    np.savez(os.path.join(HERE, "dump.npz"), **{n: np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for n, t in bhsd.items()})
    write_bare_safetensors(os.path.join(HERE, "dump.safetensors"), bhsd)


if __name__ == "__main__":
    main()

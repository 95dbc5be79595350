#!/usr/bin/env python3
"""gpu/split_heads.py: split a [B,H,...] safetensors trace into files of at most N heads each.

Contract: every tensor whose dim 1 equals the trace's head count (q's shape[1]) is sliced
along dim 1; other tensors are copied whole; __metadata__ is copied and gains
`heads_of_original` ("first..last of H"). Bytes are sliced, never converted, so each
output holds exactly the captured bits. Only the standard library is needed.
Usage: split_heads.py IN.safetensors OUT_PREFIX HEADS_PER_FILE  -> OUT_PREFIX_hAA-BB.safetensors
"""
import json
import struct
import sys

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "U8": 1, "I8": 1, "BOOL": 1,
         "F8_E4M3": 1, "F8_E5M2": 1}


def main():
    src, prefix, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = open(src, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    heads = header["q"]["shape"][1]
    for first in range(0, heads, per):
        last = min(first + per, heads) - 1
        out_header, chunks, offset = {}, [], 0
        for name, t in header.items():
            shape, (b0, b1) = t["shape"], t["data_offsets"]
            raw = body[b0:b1]
            if len(shape) >= 2 and shape[1] == heads:
                inner = SIZES[t["dtype"]]
                for d in shape[2:]:
                    inner *= d
                parts = [raw[(b * heads + h) * inner:(b * heads + h + 1) * inner]
                         for b in range(shape[0]) for h in range(first, last + 1)]
                raw = b"".join(parts)
                shape = [shape[0], last - first + 1] + shape[2:]
            out_header[name] = {"dtype": t["dtype"], "shape": shape, "data_offsets": [offset, offset + len(raw)]}
            chunks.append(raw)
            offset += len(raw)
        m = dict(meta)
        m["heads_of_original"] = f"{first}..{last} of {heads} ({src.split('/')[-1]})"
        out_header["__metadata__"] = m
        text = json.dumps(out_header, separators=(",", ":")).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        path = f"{prefix}_h{first:02d}-{last:02d}.safetensors"
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
        print(path)


if __name__ == "__main__":
    main()

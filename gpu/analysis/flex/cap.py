"""Loads a flex capture (safetensors) from traces/hw/h200/paths/flex as fp32 numpy arrays."""
import json, os, struct
import numpy as np
from common import REPO

DIR = os.path.join(REPO, "traces", "hw", "h200", "paths", "flex")

def load(name):
    """Returns ({tensor: fp32 values, tensor_dtype: 'BF16'|'F32'}, metadata) for capture `name`."""
    with open(os.path.join(DIR, name + ".safetensors"), "rb") as f:
        buf = f.read()
    n = struct.unpack_from("<Q", buf, 0)[0]
    hdr = json.loads(buf[8:8 + n]); base = 8 + n
    meta = hdr.pop("__metadata__", {})
    out = {}
    for k, v in hdr.items():
        s, e = v["data_offsets"]; raw = buf[base + s: base + e]
        dt = v["dtype"]
        if dt == "BF16":   # bf16 bits are the top half of the fp32 bits
            a = np.frombuffer(raw, dtype=np.uint16).reshape(v["shape"])
            out[k] = (a.astype(np.uint32) << 16).view(np.float32)
        elif dt == "F32":
            out[k] = np.frombuffer(raw, dtype=np.float32).reshape(v["shape"]).copy()
        else:
            raise ValueError(dt)
        out[k + "_dtype"] = dt
    return out, meta

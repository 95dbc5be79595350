"""gpu/capture_common.py: what gpu/capture_torch.py and gpu/capture_paths.py share.

Kept free of safetensors (and importing torch only inside kernel_names), so that
capture_paths.py's CPU stand-ins, which need neither, can import it: the kernel names the
profiler records, and FA2's split-KV heuristic (for the record only; a capture's own kernel
names and outputs decide what ran).
"""
import math


def kernel_names(fn):
    """Names of the CUDA kernels fn launches (profiler, in launch order, each once), or an
    error string: ([names], None) or ([], "Error: ..."). The capture itself does not need
    the profiler, so a failure here is recorded rather than raised."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = []
        for e in prof.events():
            dt = getattr(e, "device_type", None)
            if dt is not None and "CUDA" in str(dt) and e.name not in names:
                names.append(e.name)
        return names, None
    except Exception as exc:  # noqa: BLE001 - see the docstring
        return [], f"{type(exc).__name__}: {exc}"


def num_splits_heuristic(batch_nheads_mblocks, num_sms, num_n_blocks, max_splits):
    """FA2's heuristic as PyTorch's flash_api.cpp states it (for the record only)."""
    if batch_nheads_mblocks >= 0.8 * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def ceildiv(a, b):
        return (a + b - 1) // b

    def eligible(s):
        return s == 1 or ceildiv(num_n_blocks, s) != ceildiv(num_n_blocks, s - 1)

    eff = []
    for s in range(1, max_splits + 1):
        if not eligible(s):
            eff.append(0.0)
        else:
            waves = batch_nheads_mblocks * s / num_sms
            eff.append(waves / math.ceil(waves))
    best = max(eff) if eff else 0.0
    for s in range(1, max_splits + 1):
        if eligible(s) and eff[s - 1] >= 0.85 * best:
            return s
    return 1


def predicted_splits(batch, heads, seq_q, seq_k, hdim, sms):
    """The splits FA2's forward would choose for this problem on `sms` multiprocessors."""
    block_n = 256 if hdim <= 64 else (128 if hdim <= 128 else 64)
    return num_splits_heuristic(batch * heads * ((seq_q + 63) // 64), 2 * sms, (seq_k + block_n - 1) // block_n, 128)

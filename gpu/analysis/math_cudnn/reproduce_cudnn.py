"""Replays the seven cuDNN captures in traces/hw/h200/paths/cudnn with cudnn_emu.py (O), lse_best.py (LSE)
and cudnn_bwd.py (dq, dk, dv), and prints, for each capture and tensor, how many elements match the
capture bit for bit. cuDNN is a black box: the counts are near-exact, not full (FINDINGS.md, part B
lists the residue and its likely causes). The backward starts from the captured LSE; the bottom-right
causal capture has none, so it uses the emulated LSE.

Run from the repo root:  PYTHONPATH=build/python python3 gpu/analysis/math_cudnn/reproduce_cudnn.py"""
import glob, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
from common import PATHS, load, cmp, to_fmt_bits
import cudnn_emu, cudnn_bwd, lse_best

def main():
    for path in sorted(glob.glob(os.path.join(PATHS, 'cudnn', '*.safetensors'))):
        T, meta = load(path); fmt = T['q'][0]
        counts = []
        # O with l = fl(l*alpha) + tile sum, quad xor 2 then 1 (the LSE's best l form loses O elements)
        O, _, _ = cudnn_emu.forward(T, meta)
        counts.append(cmp('o', T['o'][1], to_fmt_bits(O, fmt))[1:] + ('o',))
        if 'lse' in T:
            L = lse_best.lse_best(T, meta)
            counts.append(cmp('lse', T['lse'][1], L.view(np.uint32), 32)[1:] + ('lse',))
            lse = T['lse'][2]
        else:
            lse = cudnn_bwd.emulated_lse(T, meta)
        r = cudnn_bwd.backward(T, meta, lse)
        for n in ('dq', 'dk', 'dv'):
            counts.append(cmp(n, T[n][1], r[n])[1:] + (n,))
        print(os.path.basename(path)[:-len('.safetensors')], '|',
              ' | '.join(f'{n}: {m}/{t}' for m, t, n in counts), flush=True)
    return 0

if __name__ == '__main__':
    sys.exit(main())

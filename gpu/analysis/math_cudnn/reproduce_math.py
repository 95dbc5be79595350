"""Replays the four SDPA MATH captures in traces/hw/h200/paths/math with math_emu.py and prints, for each
capture and tensor (o, dq, dk, dv), how many elements match the capture bit for bit. Every count is full.

Run from the repo root:  PYTHONPATH=build/python python3 gpu/analysis/math_cudnn/reproduce_math.py"""
import glob, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PATHS
import math_emu

def main():
    for path in sorted(glob.glob(os.path.join(PATHS, 'math', '*.safetensors'))):
        counts, _ = math_emu.run(path, verbose=False)   # the arithmetic as found: CUDA expf, division, FFMA
        print(os.path.basename(path)[:-len('.safetensors')], '|',
              ' | '.join(f'{n}: {m}/{t}' for n, (m, t) in counts.items()), flush=True)
    return 0

if __name__ == '__main__':
    sys.exit(main())

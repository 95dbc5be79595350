#!/usr/bin/env python3
"""gpu/sass_flash.py: the SASS of the FlashAttention kernels PyTorch ran, and what it settles.

Contract:
- Reads `cuobjdump -sass [-arch sm_XX] LIB` from stdin (streaming; the listing of all of
  libtorch_cuda.so is large) and the kernel names the profiler recorded (capture_torch.py's
  capture_log.jsonl, --kernels-from).
- A kernel of the listing (mangled name) is matched to a profiler name (demangled) by its
  signature: the kernel's base name, its element type (bfloat16_t / half_t) and the ordered
  integer and bool template arguments (mangled Li<n>E / Lb<0|1>E; demangled literals). No
  demangler is needed.
- Writes to --out-dir:
  * sass_kernels.txt: the full listing of every matched kernel;
  * sass_summary.tsv: one line per FlashAttention kernel of the listing (matched or not):
    signature, matched, and counts that settle the numerics questions:
    MUFU.EX2 and the opcode that produced each MUFU.EX2's operand (FFMA: the exponent
    argument s*scale_log2 - max_scaled is one fused multiply-add; FADD after FMUL: unfused),
    MUFU.RCP, FCHK and CALL (IEEE division's checked slow path vs a bare rcp.approx),
    MUFU.LG2, and the number of instructions.
- Exit 0 when at least one FlashAttention kernel was listed, 1 otherwise.
"""
import argparse
import json
import os
import re
import sys
from collections import Counter

INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
MANGLED_LIT = re.compile(r"L([ib])(\d+)E")
DEMANGLED_LIT = re.compile(r"(?<![\w.])(true|false|\d+)(?![\w.])")
BASE = re.compile(r"(flash_[a-z0-9_]*kernel[a-z0-9_]*)")


def elem_type(name):
    return "bf16" if "bfloat16" in name else "fp16" if "half" in name else "?"


def signature_mangled(name):
    m = BASE.search(name)
    lits = []
    for kind, value in MANGLED_LIT.findall(name):
        lits.append(("true" if value == "1" else "false") if kind == "b" else value)
    return (m.group(1) if m else "?", elem_type(name), tuple(lits))


def signature_demangled(name):
    m = BASE.search(name)
    head = name.split("(")[0]
    return (m.group(1) if m else "?", elem_type(name), tuple(DEMANGLED_LIT.findall(head)))


def register(op):
    op = op.strip().lstrip("-|!~").split()[0] if op.strip() else ""
    op = op.rstrip("|")
    return op.split(".")[0]


class Function:
    def __init__(self, name):
        self.name = name
        self.lines = []
        self.counts = Counter()
        self.ex2_producers = Counter()
        self.writer = {}

    def add(self, line, keep):
        if keep:
            self.lines.append(line)
        m = INSN.search(line)
        if not m:
            return
        opcode, operands = m.group(2), m.group(3)
        ops = [o.strip() for o in operands.split(",")]
        self.counts["instructions"] += 1
        base = opcode.split(".")[0]
        if opcode.startswith("MUFU."):
            self.counts[opcode.split(".")[0] + "." + opcode.split(".")[1]] += 1
            if opcode.startswith("MUFU.EX2") and len(ops) >= 2:
                self.ex2_producers[self.writer.get(register(ops[1]), "unknown")] += 1
        elif base in ("FCHK", "CALL", "FFMA", "FMUL", "FADD"):
            self.counts[base] += 1
        if ops and ops[0]:
            self.writer[register(ops[0])] = opcode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels-from", help="capture_log.jsonl (capture_torch.py --plan)")
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    wanted = {}
    if args.kernels_from and os.path.exists(args.kernels_from):
        for line in open(args.kernels_from):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            for k in rec.get("kernels", []) or []:
                if "flash" in k:
                    wanted[signature_demangled(k)] = k
    os.makedirs(args.out_dir, exist_ok=True)
    listing = open(os.path.join(args.out_dir, "sass_kernels.txt"), "w")
    summary = open(os.path.join(args.out_dir, "sass_summary.tsv"), "w")
    summary.write("matched\tbase\ttype\ttemplate_literals\tinstructions\tMUFU.EX2\tex2_operand_producers\t"
                  "MUFU.RCP\tFCHK\tCALL\tMUFU.LG2\tFFMA\tFMUL\tFADD\tmangled\n")
    listed = matched = 0
    current = None
    keep = False

    def finish(fn):
        nonlocal listed, matched
        if fn is None:
            return
        sig = signature_mangled(fn.name)
        is_match = sig in wanted
        listed += 1
        matched += is_match
        c = fn.counts
        summary.write("\t".join([
            "yes" if is_match else "no", sig[0], sig[1], ",".join(sig[2]), str(c["instructions"]),
            str(c["MUFU.EX2"]), ",".join(f"{k}:{v}" for k, v in fn.ex2_producers.most_common()),
            str(c["MUFU.RCP"]), str(c["FCHK"]), str(c["CALL"]), str(c["MUFU.LG2"]), str(c["FFMA"]),
            str(c["FMUL"]), str(c["FADD"]), fn.name]) + "\n")
        if is_match:
            listing.write(f"\n==== {wanted[sig]}\n==== {fn.name}\n")
            listing.writelines(fn.lines)

    for line in sys.stdin:
        if "Function :" in line:
            finish(current)
            name = line.split("Function :", 1)[1].strip()
            current = Function(name) if "flash" in name else None
            keep = current is not None and signature_mangled(name) in wanted
            continue
        if current is not None:
            current.add(line, keep)
    finish(current)
    summary.close()
    listing.close()
    with open(os.path.join(args.out_dir, "sass_status.txt"), "w") as f:
        f.write(f"flash kernels listed: {listed}\nmatched to profiler names: {matched} of {len(wanted)} wanted\n")
        for sig, name in wanted.items():
            f.write(f"wanted: {name}\n  signature: {sig}\n")
    print(f"flash kernels listed: {listed}, matched: {matched} of {len(wanted)}")
    return 0 if listed else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""gpu/zero_floor_decide.py: which exponent a zero term takes in a fused step (issue 38 item 7),
decided from fb-mma-probe's `zero_floor` batch (gpu/zero_floor_device.sh).

Usage: python3 gpu/zero_floor_decide.py FILE.fbp [FILE.fbp ...] [--batch NAME] [--predict RULE --out OUT.fbp]

Every case of the batch (C, a, b and the hardware's D) is replayed in exact integer arithmetic
under each candidate rule for the alignment of a fused step (the sm_90 presets' step: every
product exact, aligned at the step's largest exponent E, truncated to the grid 2^(E - F), F = 25,
summed, the sum rounded toward zero to fp32):
  today   zero terms (a zero C, a zero product) take no part: E = the largest non-zero term's
  R1(X)   a zero C takes part at exponent X (in this batch C is always zero, so: E >= X; the
          step exponent is never below X), X = -140..-126
  R2(X)   a zero product takes part at X whatever its partner (0 x 0 too), X = -140..-126
  R3(d)   a zero product takes part at its non-zero partner's exponent + d (0 x 0: no part),
          d = -267..-253 (d = -260: the 2^127 partner at -133)
For each form it prints how many cases each rule matches, the rules and parameters that match
every case, and a rule-free bound: per kind of partner column, the interval of step exponents E
that the negative term T = -2^g being kept (E <= g + 25) or lost (E >= g + 26) allows.
Exit 0 when the file was read (whatever the verdict), 2 on a bad file or no zero_floor case.
--self-test FILE: D filled with each rule's predictions in turn must be decided as that rule
(exit 1 otherwise); FILE: a dry run's zero_floor file (OUT=DIR bash gpu/zero_floor_device.sh
--dry-run).

--predict RULE --out OUT.fbp: writes FILE's cases with D replaced by RULE's prediction (RULE:
today, R1:X, R2:X, R3:d), for testing this script (the decision on OUT must name RULE).
"""
import argparse
import struct
import sys
from collections import defaultdict

# (exponent bits, mantissa bits, bias, container shift) of the formats the batch uses
FMT = {"bf16": (8, 7, 127, 0), "tf32": (8, 10, 127, 13), "fp16": (5, 10, 15, 0), "fp32": (8, 23, 127, 0)}
F_BITS = 25  # the sm_90 presets' aligned width for bf16/tf32 (emu/dot/tensor_core_presets.cpp)


def read_fbp(path):
    """-> list of (header dict, header text, list of case tuples (batch, c, a[], b[], d))."""
    data = open(path, "rb").read()
    if data[:8] != b"FBPROBE1":
        raise ValueError(f"{path}: not an FBPROBE1 file")
    (n,) = struct.unpack_from("<I", data, 8)
    off, sections = 12, []
    for _ in range(n):
        (hl,) = struct.unpack_from("<I", data, off)
        off += 4
        text = data[off : off + hl].decode()
        off += hl
        h = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        k, count = int(h["k"]), int(h["cases"])
        w = 3 + 2 * k
        words = struct.unpack_from("<%dI" % (w * count), data, off)
        off += 4 * w * count
        cases = [(words[i * w], words[i * w + 1], words[i * w + 2 : i * w + 2 + k],
                  words[i * w + 2 + k : i * w + 2 + 2 * k], words[i * w + w - 1]) for i in range(count)]
        sections.append((h, text, cases))
    if off != len(data):
        raise ValueError(f"{path}: {len(data) - off} trailing bytes")
    return sections


def write_fbp(path, sections):
    out = [b"FBPROBE1", struct.pack("<I", len(sections))]
    for text, cases in sections:
        t = text.encode()
        out.append(struct.pack("<I", len(t)))
        out.append(t)
        for batch, c, a, b, d in cases:
            out.append(struct.pack("<%dI" % (3 + 2 * len(a)), batch, c, *a, *b, d))
    open(path, "wb").write(b"".join(out))


def dec(fmt, u):
    """('nan',) | ('inf', s) | ('num', sign, significand, lsb exponent, alignment exponent or
    None for a zero, field exponent)."""
    E, M, B, sh = FMT[fmt]
    u >>= sh
    s, e, m, emin = (u >> (E + M)) & 1, (u >> M) & ((1 << E) - 1), u & ((1 << M) - 1), 1 - B
    if e == (1 << E) - 1:
        return ("nan",) if m else ("inf", s)
    if e == 0:
        return ("num", s, m, emin - M, emin if m else None, emin)
    return ("num", s, m | (1 << M), e - B - M, e - B, e - B)


def fp32_rz(neg, mag, unit):
    """mag * 2^unit rounded toward zero to fp32 bits (overflow: inf; zero: +0)."""
    if mag == 0:
        return 0
    lead = mag.bit_length() - 1 + unit
    q = max(lead, -126) - 23
    n = mag >> (q - unit) if q > unit else mag << (unit - q)
    if n == 0:
        return 0
    if n.bit_length() - 1 + q >= 128:
        return (neg << 31) | 0x7F800000
    if n < (1 << 23):  # subnormal (q = -149)
        return (neg << 31) | n
    return (neg << 31) | ((n.bit_length() - 1 + q + 127) << 23) | (n & 0x7FFFFF)


def step(inp, c, A, B, zero_c=None, zero_prod=None):
    """D of one fused step: zero_c, the exponent a zero C takes (None: no part); zero_prod(da,
    db) -> the exponent a zero product takes (None: no part). 'special' for NaN/inf inputs."""
    dc = dec("fp32", c)
    if dc[0] != "num":
        return "special"
    terms, exps = [(dc[1], dc[2], dc[3])], []
    if dc[4] is not None:
        exps.append(dc[4])
    elif zero_c is not None:
        exps.append(zero_c)
    for a, b in zip(A, B):
        da, db = dec(inp, a), dec(inp, b)
        if da[0] != "num" or db[0] != "num":
            return "special"
        terms.append((da[1] ^ db[1], da[2] * db[2], da[3] + db[3]))
        if da[4] is not None and db[4] is not None:
            exps.append(da[4] + db[4])
        elif zero_prod is not None:
            z = zero_prod(da, db)
            if z is not None:
                exps.append(z)
    E = max(exps) if exps else -126
    unit, S = E - F_BITS, 0
    for s, m, lsb in terms:
        if m:
            v = m << (lsb - unit) if lsb >= unit else m >> (unit - lsb)  # truncation toward zero
            S += -v if s else v
    return fp32_rz(1 if S < 0 else 0, abs(S), unit)


def r3_exponent(d):
    def z(da, db):
        if da[4] is None and db[4] is None:
            return None
        return (db[5] if da[4] is None else da[5]) + d
    return z


XS = list(range(-140, -125))
DS = list(range(-267, -252))


def rules():
    """(family, parameter, kwargs for step)"""
    out = [("today", None, {})]
    out += [("R1", x, {"zero_c": x}) for x in XS]
    out += [("R2", x, {"zero_prod": (lambda x: lambda da, db: x)(x)}) for x in XS]
    out += [("R3", d, {"zero_prod": r3_exponent(d)}) for d in DS]
    return out


def rule_by_name(name):
    fam, _, p = name.partition(":")
    for r in rules():
        if r[0] == fam and (r[1] is None if not p else r[1] == int(p)):
            return r
    raise SystemExit(f"error: unknown rule '{name}' (today, R1:X or R2:X with X in -140..-126, R3:d with d in -267..-253)")


def exact_rz(inp, c, A, B, drop=None):
    """fp32 RZ of the exact C + sum a_i b_i, without product `drop`."""
    dc = dec("fp32", c)
    S = 0
    unit = -600
    terms = [(dc[1], dc[2], dc[3])]
    for i, (a, b) in enumerate(zip(A, B)):
        if i == drop:
            continue
        da, db = dec(inp, a), dec(inp, b)
        terms.append((da[1] ^ db[1], da[2] * db[2], da[3] + db[3]))
    for s, m, lsb in terms:
        if m:
            S += -(m << (lsb - unit)) if s else m << (lsb - unit)
    return fp32_rz(1 if S < 0 else 0, abs(S), unit)


def bits_value(fmt, u):
    d = dec(fmt, u)
    if d[0] != "num" or d[4] is None:
        return None
    return (-1 if d[1] else 1, d[3] + (d[2].bit_length() - 1))  # (sign, exponent) of a power of two


def classify(inp, A, B):
    """(kind of the partner column, g, index of T) of one zero_floor case."""
    t = next((i for i, a in enumerate(A) if dec(inp, a)[0] == "num" and dec(inp, a)[1] == 1 and dec(inp, a)[4] is not None),
             None)
    if t is None:
        return None
    g = dec(inp, B[t])[4] + dec(inp, A[t])[4]
    zero_a = [i for i, a in enumerate(A) if dec(inp, a)[4] is None]
    if zero_a:
        i = zero_a[0]
        pb = dec(inp, B[i])
        if pb[4] is None:
            return ("0 x 0", g, t)
        return ("0 x %s2^%d" % ("-" if pb[1] else "+", pb[4]), g, t)
    zero_b = [i for i, b in enumerate(B) if dec(inp, b)[4] is None]
    if zero_b:
        return ("a x 0 (a != 0)", g, t)
    other = [i for i, b in enumerate(B) if i != t and dec(inp, b)[4] != -21]
    if not other:
        return ("no zero product", g, t)
    i = other[0]
    if dec(inp, A[i])[4] + dec(inp, B[i])[4] > -139:  # a product above the others sets E itself
        return None
    return ("a x 2^%d (far below)" % dec(inp, B[i])[4], g, t)


KIND_ORDER = ["no zero product", "0 x +2^-21", "0 x +2^127", "0 x -2^127", "0 x +2^64", "0 x +2^0", "0 x +2^-64",
              "0 x +2^-126", "0 x 0", "a x 0 (a != 0)", "a x 2^-64 (far below)", "a x 2^-126 (far below)"]


def decide(path_list, batch_name, quiet=False):
    """Prints the decision per form; -> {form: [(family, parameter) fitting every case]}."""
    found = {}
    say = (lambda *a, **k: None) if quiet else print
    for path in path_list:
        for h, _, cases in read_fbp(path):
            names = h["batches"].split(",")
            if batch_name not in names:
                say(f"{h['form']}: no {batch_name} batch in the header, skipped")
                continue
            bi = names.index(batch_name)
            cs = [c for c in cases if c[0] == bi]
            inp = h["input"]
            if not cs or inp not in ("bf16", "tf32") or h["d_format"] != "fp32":
                say(f"{h['form']}: {len(cs)} {batch_name} cases, not a bf16/tf32 -> fp32 section: skipped")
                continue
            say(f"== {h['form']} ({h.get('source', '?')}): {len(cs)} {batch_name} cases")
            rs = rules()
            ok = defaultdict(int)
            first_miss = {}
            bounds = defaultdict(lambda: [-10**9, 10**9, 0, 0, 0])  # kind -> [lo, hi, kept, lost, other]
            for c, A, B, d in ((x[1], x[2], x[3], x[4]) for x in cs):
                for fam, p, kw in rs:
                    pred = step(inp, c, A, B, **kw)
                    if pred == d or (pred == "special" and (d & 0x7F800000) == 0x7F800000 and d & 0x7FFFFF):
                        ok[(fam, p)] += 1
                    elif (fam, p) not in first_miss:
                        first_miss[(fam, p)] = (c, A, B, d, pred)
                cl = classify(inp, A, B)
                if cl is None:
                    continue
                kind, g, t = cl
                kind += "  C=-0" if c >> 31 else "  C=+0"
                kept, lost = exact_rz(inp, c, A, B), exact_rz(inp, c, A, B, drop=t)
                bd = bounds[kind]
                if kept == lost:
                    continue
                if d == kept:  # T kept: E - 25 <= g
                    bd[1] = min(bd[1], g + F_BITS)
                    bd[2] += 1
                elif d == lost:  # T lost: E - 25 > g
                    bd[0] = max(bd[0], g + F_BITS + 1)
                    bd[3] += 1
                else:
                    bd[4] += 1
            n = len(cs)
            say(f"  today (zero terms take no part): {ok[('today', None)]}/{n}")
            for fam, label in (("R1", "X"), ("R2", "X"), ("R3", "d")):
                params = XS if fam != "R3" else DS
                row = " ".join(f"{p}:{ok[(fam, p)]}" for p in params)
                say(f"  {fam}({label}) matches per {label}: {row}")
            say(f"  R1(-133): {ok[('R1', -133)]}/{n}  R2(-133): {ok[('R2', -133)]}/{n}  R3(-260): {ok[('R3', -260)]}/{n}")
            say("  step exponent E allowed by T kept (E <= g+25) / lost (E >= g+26), per partner column:")
            order = [k + z for k in KIND_ORDER for z in ("  C=+0", "  C=-0")]
            for kind in order + sorted(k for k in bounds if k not in order):
                if kind not in bounds:
                    continue
                lo, hi, kept, lost, other = bounds[kind]
                lo_s = "-inf" if lo == -10**9 else str(lo)
                hi_s = "+inf" if hi == 10**9 else str(hi)
                flag = "" if lo <= hi else "  (CONTRADICTORY: no single E)"
                say(f"    {kind:<30} E in [{lo_s}, {hi_s}]  (kept {kept}, lost {lost}, neither {other}){flag}")
            fits = [(fam, p) for fam, p, _ in rs if ok[(fam, p)] == n]
            found[h["form"]] = fits
            if fits:
                desc = ", ".join(fam if p is None else f"{fam}({p})" for fam, p in fits)
                say(f"  CONCLUSION: fit every case: {desc}")
            else:
                best = max(ok.items(), key=lambda kv: kv[1])
                say(f"  CONCLUSION: no candidate fits every case; best {best[0][0]}"
                      f"{'' if best[0][1] is None else '(%d)' % best[0][1]} with {best[1]}/{n}")
                c, A, B, d, pred = first_miss[best[0]]
                say(f"    its first miss: C={c:#010x} a={[hex(x) for x in A]} b={[hex(x) for x in B]} "
                      f"hardware {d:#010x} predicted {pred if pred == 'special' else hex(pred)}")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--batch", default="zero_floor")
    ap.add_argument("--predict", help="write FILE with D = this rule's prediction (today, R1:X, R2:X, R3:d)")
    ap.add_argument("--out", help="with --predict: the file to write")
    ap.add_argument("--self-test", action="store_true",
                    help="FILE (a dry run's zero_floor file): D filled with each of today, R1:-133, R2:-133, "
                         "R3:-260, R1:-131 in turn must be decided as that rule alone (today: with R1/R2 at X <= -139)")
    args = ap.parse_args()
    try:
        if args.self_test:
            import os
            import tempfile
            bad = 0
            with tempfile.TemporaryDirectory() as tmp:
                for rule in ("today", "R1:-133", "R2:-133", "R3:-260", "R1:-131"):
                    fam, p, kw = rule_by_name(rule)
                    path = os.path.join(tmp, "pred.fbp")
                    secs = []
                    for h, text, cases in read_fbp(args.files[0]):
                        secs.append((text, [(bt, c, A, B, step(h["input"], c, A, B, **kw)) for bt, c, A, B, _ in cases]))
                    write_fbp(path, secs)
                    fits = decide([path], args.batch, quiet=True)
                    for form, f in fits.items():
                        want_alone = fam != "today"
                        good = (fam, p) in f and (not want_alone or f == [(fam, p)])
                        bad += not good
                        print(f"self-test {rule:<8} {form[:52]:<52} {'ok' if good else 'FAILED'}: fits {f}")
                    if not fits:
                        bad += 1
                        print(f"self-test {rule}: no zero_floor section in {args.files[0]}")
            return 1 if bad else 0
        if args.predict:
            if not args.out or len(args.files) != 1:
                print("error: --predict needs one FILE and --out", file=sys.stderr)
                return 2
            _, _, kw = rule_by_name(args.predict)
            secs = []
            for h, text, cases in read_fbp(args.files[0]):
                inp = h["input"]
                if inp in ("bf16", "tf32") and h["d_format"] == "fp32":
                    new = []
                    for batch, c, A, B, d in cases:
                        p = step(inp, c, A, B, **kw)
                        new.append((batch, c, A, B, 0x7FC00000 if p == "special" else p))
                    cases = new
                text = "\n".join(("source=model-prediction:" + args.predict) if line.startswith("source=") else line
                                 for line in text.split("\n"))
                secs.append((text, cases))
            write_fbp(args.out, secs)
            print(f"wrote {args.out} (D = {args.predict}'s predictions)")
            return 0
        if not decide(args.files, args.batch):
            print(f"error: no {args.batch} case in a bf16/tf32 -> fp32 section", file=sys.stderr)
            return 2
    except (OSError, ValueError, KeyError, struct.error) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

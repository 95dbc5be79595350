# correctly-rounded on rows whose scores span thousands of nats (a logit blow-up: keys scaled
# x1000): the gradients of a key that dominates its rows cancel to about e^-gap, and sums of
# bf16 values land on bf16 midpoints missed by e^-gap, beyond 512-bit intervals. They used to
# raise "too near a rounding boundary" (an audit of training loops, 2026-12-06).
#
# Independent reference: attention's definitions in mpmath at 9000 and 9500 bits (a value is
# only compared where both precisions round alike: far more bits than the e^-3000 offsets
# these inputs need), rounded once to bf16 by exact_reference.round_exact (Fractions).
from fractions import Fraction

import numpy as np
import pytest

import flashbits as fb
from exact_reference import FORMATS, round_exact

mpmath = pytest.importorskip("mpmath")

N, D = 8, 8


def _exact_gradients(q, k, v, do, prec):
    """O, dQ, dK, dV of one head from the definitions, as mpmath values at prec bits."""
    with mpmath.workprec(prec):
        mq, mk, mv, mdo = ([[mpmath.mpf(float(x)) for x in row] for row in t] for t in (q, k, v, do))
        scale = 1 / mpmath.sqrt(D)
        o = [[mpmath.mpf(0)] * D for _ in range(N)]
        dq = [[mpmath.mpf(0)] * D for _ in range(N)]
        dk = [[mpmath.mpf(0)] * D for _ in range(N)]
        dv = [[mpmath.mpf(0)] * D for _ in range(N)]
        for i in range(N):
            s = [scale * mpmath.fsum(mq[i][c] * mk[j][c] for c in range(D)) for j in range(N)]
            top = max(s)
            e = [mpmath.exp(x - top) for x in s]
            total = mpmath.fsum(e)
            p = [x / total for x in e]
            dp = [mpmath.fsum(mdo[i][c] * mv[j][c] for c in range(D)) for j in range(N)]
            # delta - dP_j as sum_l P_l (dP_l - dP_j): no cancellation against delta's rounding
            ds = [p[j] * -mpmath.fsum(p[m] * (dp[m] - dp[j]) for m in range(N)) for j in range(N)]
            for c in range(D):
                o[i][c] = mpmath.fsum(p[j] * mv[j][c] for j in range(N))
                dq[i][c] = scale * mpmath.fsum(ds[j] * mk[j][c] for j in range(N))
                for j in range(N):
                    dk[j][c] += scale * ds[j] * mq[i][c]
                    dv[j][c] += p[j] * mdo[i][c]
        return o, dq, dk, dv


def _bf16(x: mpmath.mpf):
    """The bf16 rounding (to nearest even) of an mpmath value, as a float64 (signed zeros kept)."""
    sign, man, exp, _ = x._mpf_  # mpmath's raw (sign, mantissa, exponent, bits): man_exp drops the sign
    exact = (-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp)
    value, _ = round_exact(exact, FORMATS["bf16"], "rne")
    if isinstance(value, tuple):
        return -0.0 if value[1] else 0.0
    return float(value)


@pytest.mark.parametrize("seed", range(4))
def test_gradients_of_rows_thousands_of_nats_apart_are_correctly_rounded(seed):
    rng = np.random.default_rng(seed)
    q, k, v, do = (fb.round(rng.standard_normal((2, N, D)) * (1000 if i == 1 else 1), "bf16").values
                   for i in range(4))
    got = fb.attention(q, k, v, "correctly-rounded", do=do)
    compared = 0
    for h in range(2):
        low = _exact_gradients(q[h], k[h], v[h], do[h], 9000)
        high = _exact_gradients(q[h], k[h], v[h], do[h], 9500)
        for name, tensor, a, b in zip(("O", "dQ", "dK", "dV"), (got.o, got.dq, got.dk, got.dv), low, high):
            for r in range(N):
                for c in range(D):
                    want = np.float64(_bf16(a[r][c])).view(np.uint64)
                    assert want == np.float64(_bf16(b[r][c])).view(np.uint64)  # the reference's bits are settled
                    assert np.float64(tensor[h, r, c]).view(np.uint64) == want, (name, h, r, c)
                    compared += 1
    assert compared == 2 * 4 * N * D

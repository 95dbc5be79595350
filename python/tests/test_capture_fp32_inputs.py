"""A capture whose bf16 inputs were saved as float32 values (PyTorch's ``t.float().numpy()``;
numpy has no bf16) imports with ``--dtype bf16`` as the bf16 capture it is.

Found by the workflow audit: with --dtype bf16 such a capture was refused as a contradiction
("drop --dtype"), and without it as fp32 inputs no bf16 model reads: no way forward but
re-encoding the arrays by hand. The reference here is that hand re-encoding: the same capture
saved as uint16 bit patterns, whose import the float32 one must equal.
"""
import json

import numpy as np
import pytest

import flashbits as fb

N, D, SCALE = 12, 16, 0.25


def _bf16_bits(rng, shape):
    return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _as_float32(bits):
    # A bf16 pattern is the top half of the float32 encoding of the same value.
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    rng = np.random.default_rng(77)
    q, k, v = (_bf16_bits(rng, (1, 2, N, D)) for _ in range(3))
    o = fb.attention(q, k, v, "fa2-sm80", scale=SCALE).o  # float64 values of bf16
    d = tmp_path_factory.mktemp("f32inputs")
    as_bits, as_float = d / "bits.npz", d / "float.npz"
    o_bits = (o.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    np.savez(as_bits, q=q, k=k, v=v, o=o_bits)
    np.savez(as_float, q=_as_float32(q), k=_as_float32(k), v=_as_float32(v), o=o.astype(np.float32))
    return d, as_bits, as_float, (q, k, v)


STATEMENT = ("--source", "emulated", "--model", "fa2-sm80", "--scale", str(SCALE), "--causal", "false",
             "--layout", "bhsd", "--dtype", "bf16")


def test_float32_inputs_holding_bf16_values_import_as_bf16(cli, captures):
    d, as_bits, as_float, _ = captures
    from_bits, from_float = d / "bits.safetensors", d / "float.safetensors"
    rc, _, err = cli("import", str(as_bits), *STATEMENT, "--out", str(from_bits))
    assert rc == 0, err
    rc, _, err = cli("import", str(as_float), *STATEMENT, "--out", str(from_float))
    assert rc == 0, err
    assert err.count("are fp32 arrays whose every value is a bf16 value: read as bf16") == 1, err
    a, b = fb.load_trace(from_bits), fb.load_trace(from_float)
    for name in ("q", "k", "v", "o"):
        assert np.array_equal(a[name], b[name]), name
    assert b.formats["q"] == b.formats["k"] == b.formats["v"] == "bf16"
    assert b.formats["o"] == "fp32"  # outputs keep their dtype: replay compares them by value
    # replay reads the capture directly, with the same statement.
    rc, out, err = cli("replay", str(as_float), *STATEMENT, "--json")
    assert rc == 0 and json.loads(out)["match"] is True, out + err


def test_a_float32_input_that_is_no_bf16_value_is_named(cli, captures, tmp_path):
    _, _, _, (q, k, v) = captures
    k_values = _as_float32(k).copy()
    k_values[0, 1, 3, 5] = np.nextafter(k_values[0, 1, 3, 5], np.float32(np.inf))  # one fp32 ulp off bf16
    path = tmp_path / "off.npz"
    np.savez(path, q=_as_float32(q), k=k_values, v=_as_float32(v))
    rc, _, err = cli("import", str(path), *STATEMENT, "--out", str(tmp_path / "t.safetensors"), check=False)
    assert rc == 2 and err.count("\n") == 1, err
    flat = 1 * N * D + 3 * D + 5
    assert f"tensor 'k' is F32, and its element {flat} (" in err and "is not a bf16 value" in err, err
    assert not (tmp_path / "t.safetensors").exists()


def test_load_trace_reads_them_too(captures):
    _, as_bits, as_float, _ = captures
    kw = dict(source="emulated", model="fa2-sm80", scale=SCALE, causal=False, layout="bhsd", dtype="bf16")
    with pytest.warns(UserWarning, match="read as bf16"):
        t = fb.load_trace(as_float, **kw)
    assert np.array_equal(t["q"], fb.load_trace(as_bits, **kw)["q"])


def _next_bf16_up(x: np.float32) -> np.float32:
    # The next bf16 value above x (x > 0, a bf16 value): its pattern plus one, read back.
    bits = np.array([x], dtype=np.float32).view(np.uint32)[0] >> 16
    return (np.array([bits + 1], dtype=np.uint32) << 16).view(np.float32)[0]


def test_replay_counts_ulps_of_the_format_the_values_are_in(cli, captures, tmp_path):
    # O saved as float32 holds bf16 values: a mismatch of one bf16 step is +-1 ulp there, not
    # the 65536 of fp32's ulps it spans. Two elements moved by one and by three bf16 steps.
    _, _, as_float, (q, k, v) = captures
    with np.load(as_float) as z:
        o = z["o"].copy()
    moved = {(0, 0, 2, 3): 1, (0, 1, 7, 0): 3}
    for index, steps in moved.items():
        x = o[index]
        sign = np.float32(1.0) if x > 0 else np.float32(-1.0)
        y = abs(x)
        for _ in range(steps):
            y = _next_bf16_up(y)
        o[index] = sign * y
    path = tmp_path / "moved.npz"
    np.savez(path, q=_as_float32(q), k=_as_float32(k), v=_as_float32(v), o=o)
    rc, out, err = cli("replay", str(path), *STATEMENT, "--json", check=False)
    assert rc == 1, out + err
    (o_report,) = [t for t in json.loads(out)["tensors"] if t["name"] == "o"]
    assert o_report["ulps_of"] == "bf16"
    got = {tuple(m["index"]): m["ulps"] for m in o_report["mismatches"]}
    # The capture moved away from zero: the recomputed value lies that many steps toward it.
    assert got == {index: -steps if o[index] > 0 else steps for index, steps in moved.items()}
    rc, text, _ = cli("replay", str(path), *STATEMENT, check=False)
    assert "max |ulps| 3 of bf16: stored as fp32, every value a bf16 value" in text, text
    # One value off bf16's grid and the ulps are fp32's again, as the capture's own format.
    o[0, 0, 0, 0] = np.nextafter(o[0, 0, 0, 0], np.float32(np.inf))
    np.savez(path, q=_as_float32(q), k=_as_float32(k), v=_as_float32(v), o=o)
    rc, out, _ = cli("replay", str(path), *STATEMENT, "--json", check=False)
    (o_report,) = [t for t in json.loads(out)["tensors"] if t["name"] == "o"]
    assert o_report["ulps_of"] == "fp32"
    assert {tuple(m["index"]): m["ulps"] for m in o_report["mismatches"]}[(0, 0, 0, 0)] == -1


def test_replay_says_when_a_capture_stored_a_tensor_narrower_than_the_kernel_writes(cli, captures, tmp_path):
    # An LSE saved as fp16 was rounded again on its way to the file: its mismatches are the
    # file's, which the comparison names (the fuzz audit: it read as a kernel mismatch).
    _, _, as_float, (q, k, v) = captures
    lse = fb.attention(q, k, v, "fa2-sm80", scale=SCALE).lse
    with np.load(as_float) as z:
        arrays = dict(z)
    path = tmp_path / "lse16.npz"
    np.savez(path, **arrays, lse=lse.astype(np.float16))
    rc, out, err = cli("replay", str(path), *STATEMENT, "--json", check=False)
    tensors = {t["name"]: t for t in json.loads(out)["tensors"]}
    assert tensors["lse"]["rounded_again_from"] == "fp32" and tensors["o"]["rounded_again_from"] is None, out + err
    # fp32 LSEs of random rows are fp16 values with odds of about 2^-13 each: some differ.
    assert rc == 1 and tensors["lse"]["mismatches"], out
    rc, text, _ = cli("replay", str(path), *STATEMENT, check=False)
    assert "narrower than the fp32 the kernel writes: the capture rounded it again" in text, text

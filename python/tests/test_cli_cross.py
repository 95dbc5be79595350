# Round trips between the Python module and the flashbits CLI of the same build, on the same
# inputs: op --batch, dot --batch, traces written by one and read by the other (replay,
# make-trace), bias-test --json field by field, and the error messages of bad input.
import json
import os

import numpy as np
import pytest

import flashbits as fb
from conftest import ROOT


def hexbits(bits, fmt):
    digits = fb.format_info(fmt)["container_bits"] // 4
    return f"{int(bits):0{digits}x}"


def random_patterns(fmt, n, rng):
    info = fb.format_info(fmt)
    # Bit patterns in the format's container (uint8/16/32), as the module takes them.
    return rng.integers(0, 1 << info["width"], n, dtype=np.uint64).astype(f"uint{info['container_bits']}")


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e4m3", "e5m2", "e2m1", "e3m4"])
def test_ops_match_cli_batch(cli, fmt):
    rng = np.random.default_rng(5)
    n = 400
    a, b, c = (random_patterns(fmt, n, rng) for _ in range(3))
    for mode, extra in [("rne", []), ("rtz", []), ("rup", []), ("rna", []), ("sr", ["--seed", "7", "--sr-bits", "5"])]:
        for op in ["add", "sub", "mul", "div", "fma", "sqrt"]:
            operands = {"fma": (a, b, c), "sqrt": (a,)}.get(op, (a, b))
            lines = "".join(f"{op} {fmt} {mode} " + " ".join("0x" + hexbits(o[i], fmt) for o in operands) + "\n"
                            for i in range(n))
            rc, out, err = cli("op", "--batch", "-", *extra, stdin=lines)
            assert rc == 0, err
            stream = {"seed": 7, "sr_bits": 5} if mode == "sr" else {}  # refused with another mode
            r = getattr(fb, op)(*operands, fmt, mode, flags=True, **stream)
            got = [f"{hexbits(r.bits[i], fmt)} {fb.flags_string(r.flags[i])}" for i in range(n)]
            assert got == out.splitlines(), (op, mode)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e4m3", "e5m2", "e2m1", "tf32"])
def test_round_matches_cli_cvt(cli, fmt):
    rng = np.random.default_rng(9)
    x = np.concatenate([
        (rng.standard_normal(500) * 10.0 ** rng.integers(-12, 12, 500)).astype(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, 1e-45], dtype=np.float32),
    ])
    words = x.view(np.uint32)
    for mode in ["rne", "rna", "rtz", "rup", "rdn", "rto", "sr"]:
        for overflow in ["ieee", "satfinite"]:
            suffix = " satfinite" if overflow == "satfinite" else ""
            lines = "".join(f"cvt {fmt} {mode} fp32:0x{int(w):08x}{suffix}\n" for w in words)
            rc, out, err = cli("op", "--batch", "-", "--seed", "11", stdin=lines)
            assert rc == 0, err
            stream = {"seed": 11} if mode == "sr" else {}  # refused with another mode
            r = fb.round(x, fmt, mode, overflow, flags=True, **stream)
            fast = fb.round(x, fmt, mode, overflow, **stream)
            assert np.array_equal(fast.bits, r.bits)
            got = [f"{hexbits(r.bits[i], fmt)} {fb.flags_string(r.flags[i])}" for i in range(len(x))]
            assert got == out.splitlines(), (mode, overflow)


def test_dot_matches_cli_batch(cli):
    rng = np.random.default_rng(2)
    for model, fmt, k in [("sm80", "bf16", 16), ("sm90-mma", "fp16", 16), ("sm70", "fp16", 8),
                          ("sm90-wgmma", "e4m3", 32), ("sm89", "e5m2", 32), ("sm80", "tf32", 8)]:
        n = 200
        vals = rng.standard_normal((2, n, k)) * 4
        a = fb.round(vals[0], fmt).values
        b = fb.round(vals[1], fmt).values
        acc = fb.dot(model, a[:1], b[:1], fmt=fmt).format
        c = fb.round(rng.standard_normal(n) * 100, acc).values
        d = fb.dot(model, a, b, c, fmt=fmt)
        ab = fb.round(a, fmt).bits
        bb = fb.round(b, fmt).bits
        cb = fb.round(c, acc).bits
        lines = "".join(f"{model} {fmt} 0x{hexbits(cb[i], acc)} " + ",".join("0x" + hexbits(x, fmt) for x in ab[i]) +
                        " " + ",".join("0x" + hexbits(x, fmt) for x in bb[i]) + "\n" for i in range(n))
        rc, out, err = cli("dot", "--batch", "-", stdin=lines)
        assert rc == 0, err
        assert [hexbits(x, acc) for x in d.bits] == out.splitlines(), model


def test_python_trace_replays_in_cli(cli, tmp_path):
    rng = np.random.default_rng(4)
    q, k, v, do = (fb.round(rng.standard_normal((2, 2, 80, 64)), "bf16").values for _ in range(4))
    r = fb.attention(q, k, v, "fa2-sm80", do=do, scale=0.125)
    path = tmp_path / "py.safetensors"
    fb.save_trace(path, q=q, k=k, v=v, o=r.o, lse=r.lse, do=do, delta=r.delta, dq=r.dq, dk=r.dk, dv=r.dv,
                  metadata={"source": "emulated", "model": "fa2-sm80", "softmax_scale": 0.125, "causal": False,
                            "dtype": "bf16", "kernel": "flashbits python"})
    rc, out, err = cli("replay", str(path), "--json")
    assert rc == 0, out + err
    report = json.loads(out)
    assert report["match"] is True
    assert {t["name"] for t in report["tensors"]} >= {"o", "lse", "delta", "dq", "dk", "dv"}
    assert all(t["compared"] == t["matching"] > 0 for t in report["tensors"])
    # A changed O is caught by the CLI.
    o_bad = r.o.copy()
    o_bad[0, 1, 5, 7] = fb.round(np.array([o_bad[0, 1, 5, 7] * 1.5]), "bf16").values[0] or 1.0
    fb.save_trace(path, q=q, k=k, v=v, o=o_bad,
                  metadata={"source": "emulated", "model": "fa2-sm80", "softmax_scale": 0.125})
    rc, out, err = cli("replay", str(path), "--json")
    assert rc == 1 and json.loads(out)["match"] is False


def test_cli_trace_loads_and_replays_in_python(cli, tmp_path):
    path = tmp_path / "cli.safetensors"
    rc, out, err = cli("make-trace", "--model", "fa2-sm90", "--scenario", "sink", "--seqlen", "96", "--headdim", "64",
                       "--backward", "--out", str(path))
    assert rc == 0, err
    t = fb.load_trace(path)
    assert t.metadata["source"] == "emulated" and t.model == "fa2-sm90" and not t.hardware
    assert t.formats["q"] == "bf16" and t.formats["lse"] == "fp32"
    assert t["q"].shape == (1, 1, 96, 64) and t["lse"].shape == (1, 1, 96)
    r = fb.attention(t["q"], t["k"], t["v"], t.model, do=t["do"], scale=t.scale, causal=t.causal)
    for name in ["o", "lse", "delta", "dq", "dk", "dv"]:
        assert np.array_equal(getattr(r, name), t[name]), name
    # Written back by Python, the file reads the same.
    again = tmp_path / "again.safetensors"
    fb.save_trace(again, {n: t[n] for n in t.tensors}, metadata=t.metadata, formats=t.formats)
    t2 = fb.load_trace(again)
    assert t2.metadata == t.metadata and t2.formats == t.formats
    assert all(np.array_equal(t2[n], t[n]) for n in t.tensors)


def test_replay_explain_tiles_match_the_module_row_trace(cli, tmp_path):
    path = tmp_path / "sink.safetensors"
    rc, out, err = cli("make-trace", "--model", "fa2-sm80", "--scenario", "sink", "--seqlen", "300", "--headdim", "64",
                       "--out", str(path))
    assert rc == 0, err
    rc, out, err = cli("replay", str(path), "--row", "37", "--explain", "--json")
    assert rc == 0, out + err
    explained = json.loads(out)["explain"]
    t = fb.load_trace(path)
    r = fb.attention(t["q"], t["k"], t["v"], t.model, scale=t.scale, causal=t.causal, trace=[(0, 0, 37)])
    tiles = r.traces[0]["tiles"]
    # The CLI's tile records are the module's, field for field and in the same order, less
    # what only the module adds: the tied-max count and the per-tile arrays.
    module_only = {"repeated_max", "thread_sums", "p", "acc"}
    assert explained == [{key: value for key, value in tile.items() if key not in module_only} for tile in tiles]
    # FA2 visits the 128-key tiles last to first (the last one ragged), each key once.
    assert [(e["kv_begin"], e["kv_end"]) for e in explained] == [(256, 300), (128, 256), (0, 128)]
    # p_equal_one counts P̄ == 1 after its cast to bf16 (the sink's P̄ is 1 − 2^−23 before).
    for tile in tiles:
        assert tile["p_equal_one"] == int(np.count_nonzero(fb.round(tile["p"], "bf16").values == 1.0))
    assert explained[-1]["p_equal_one"] > 0


def test_shipped_hardware_trace_replays_in_python():
    path = os.path.join(ROOT, "traces", "hw", "h200", "torch", "torch_bf16_sink_d64.safetensors")
    t = fb.load_trace(path)
    assert t.hardware and t.metadata["source"].startswith("cuda:")
    # Captured on compute capability 9.0: with the SFU set measured there (what `replay --sfu
    # auto` picks) every O and LSE value replays bit for bit.
    r = fb.attention(t["q"], t["k"], t["v"], "pytorch-fa2-sm90", scale=t.scale, causal=t.causal, sfu="hw-sm90")
    assert np.array_equal(r.o, t["o"]) and np.array_equal(r.lse, t["lse"])


def test_bias_test_matches_cli_json(cli):
    args = dict(model="fa-bf16acc", scenario="sink", trials=4, seqlen=64, headdim=32, seed=3, by_max=True)
    rc, out, err = cli("bias-test", "--model", "fa-bf16acc", "--scenario", "sink", "--trials", "4", "--seqlen", "64",
                       "--headdim", "32", "--seed", "3", "--by-max", "--json")
    assert json.loads(out) == fb.bias_test(**args)
    rc, out, err = cli("bias-test", "--model", "fa3-fp8-sm90", "--against", "fa3-fp8-sm90+promote:32", "--trials", "3",
                       "--seqlen", "64", "--headdim", "64", "--json")
    assert json.loads(out) == fb.bias_test("fa3-fp8-sm90", against="fa3-fp8-sm90+promote:32", trials=3, seqlen=64,
                                           headdim=64)


def test_bias_test_traces_matches_cli_json(cli, tmp_path):
    for i in range(2):  # traces of one kernel: a folder of two kernels is refused
        cli("make-trace", "--model", "fa-bf16acc", "--scenario", "sink", "--seqlen", "64", "--headdim", "32",
            "--backward", "--seed", str(i), "--out", str(tmp_path / f"t{i}.safetensors"))
    rc, out, err = cli("bias-test", "--traces", str(tmp_path), "--json", "--by-max")
    want = json.loads(out)
    got = fb.bias_test(traces=str(tmp_path), by_max=True)
    assert got == want
    # Two one-head traces: one sample each (the rows of a head share its keys), too few for a verdict.
    assert got.excess.o.n == 2 and got.verdict == "inconclusive"
    assert got.o_spread.elements == 2 * 64 * 32


def test_bias_test_reads_a_folder_and_a_dtype_as_the_cli_does(cli, tmp_path):
    # A folder's .npz captures are the CLI's too: Python skipped them and gave a verdict on the
    # rest, where the CLI refuses a folder of two kernels (one trace names a model, the .npz none).
    cli("make-trace", "--model", "fa-bf16acc", "--scenario", "sink", "--seqlen", "64", "--headdim", "32",
        "--out", str(tmp_path / "t.safetensors"))
    t = fb.load_trace(str(tmp_path / "t.safetensors"))
    np.savez(tmp_path / "zz.npz", **{name: fb.round(t[name], "bf16").bits for name in ("q", "k", "v", "o")})
    rc, _, err = cli("bias-test", "--traces", str(tmp_path), check=False)
    assert rc == 2 and "zz.npz" in err
    with pytest.raises(ValueError, match="zz.npz"):
        fb.bias_test(traces=str(tmp_path))
    # A dtype that contradicts the model's own format is refused, as bias-test --dtype is.
    with pytest.raises(ValueError, match="dtype fp16 contradicts it"):
        fb.bias_test("fa-bf16acc", "sink", trials=2, seqlen=16, headdim=16, dtype="fp16")
    with pytest.raises(ValueError, match="dtype bf16 contradicts it"):
        fb.bias_test("standard-fp16", "sink", trials=2, seqlen=16, headdim=16, dtype="bf16")
    assert fb.bias_test("standard-fp16", "sink", trials=2, seqlen=16, headdim=16).samples  # its own format


def test_bias_test_traces_leaves_out_rows_that_see_no_key(cli, tmp_path):
    # A causal trace with more queries than keys: its first Nq - Nk rows see no key (O = 0 by
    # every kernel's guard, no rounding error). The same trace cut to the rows that see keys
    # (Nq = Nk: the bottom-right diagonal then starts at key 0, so every kept row sees the keys
    # it saw) must give the same statistics; counted in, the empty rows would pull each mean
    # toward 0 by the visible fraction.
    rng = np.random.default_rng(11)
    nq, nk = 48, 16
    q = fb.round(rng.standard_normal((1, 4, nq, 32)), "bf16").values
    k, v = (fb.round(rng.standard_normal((1, 2, nk, 32)) + 1.5, "bf16").values for _ in range(2))
    do = fb.round(rng.standard_normal((1, 4, nq, 32)), "bf16").values
    meta = {"source": "emulated", "model": "fa2-sm80", "causal": True, "dtype": "bf16", "kernel": "flashbits python"}
    for name, rows in (("whole", slice(0, nq)), ("visible", slice(nq - nk, nq))):
        r = fb.attention(q[:, :, rows], k, v, "fa2-sm80", do=do[:, :, rows], causal=True)
        (tmp_path / name).mkdir()
        fb.save_trace(tmp_path / name / "t.safetensors", q=q[:, :, rows], k=k, v=v, o=r.o, lse=r.lse,
                      do=do[:, :, rows], delta=r.delta, metadata=meta)
    runs = {}
    for name in ("whole", "visible"):
        rc, out, err = cli("bias-test", "--traces", str(tmp_path / name), "--json")
        assert rc in (0, 1, 4), err
        runs[name] = json.loads(out)
    assert runs["whole"]["rows_without_keys"] == 4 * (nq - nk)
    assert "rows_without_keys" not in runs["visible"]
    for tensor in ("o", "delta"):
        assert runs["whole"][tensor] == runs["visible"][tensor], tensor
    assert runs["whole"]["o_spread"] == runs["visible"]["o_spread"]
    rc, out, err = cli("bias-test", "--traces", str(tmp_path / "whole"))
    assert f"{4 * (nq - nk)} row(s) see no key" in out


@pytest.mark.parametrize("call, cli_args", [
    (lambda: fb.round(np.ones(3), "bf17"), ["op", "cvt", "bf17", "rne", "fp32:3f800000"]),
    (lambda: fb.round(np.ones(3), "bf16", "rnx"), ["op", "cvt", "bf16", "rnx", "fp32:3f800000"]),
    (lambda: fb.add(np.array([0.1]), np.array([1.0]), "bf16"), ["op", "add", "bf16", "rne", "0.1", "1.0"]),
    (lambda: fb.add(np.array([0x1f], dtype=np.uint8), np.array([0], dtype=np.uint8), "e2m1"),
     ["op", "add", "e2m1", "rne", "0x1f", "0x0"]),
    (lambda: fb.add(np.array([0x1fff], dtype=np.uint32), np.array([0], dtype=np.uint32), "tf32"),
     ["op", "add", "tf32", "rne", "0x1fff", "0x0"]),
    (lambda: fb.round(np.ones(3), "bf16", "sr", sr_bits=40), ["op", "cvt", "bf16", "sr", "fp32:3f800000",
                                                              "--sr-bits", "40"]),
    (lambda: fb.dot("sm99", np.ones((1, 2)), np.ones((1, 2))), None),
    (lambda: fb.bias_test("no-such-model", trials=2), ["bias-test", "--model", "no-such-model", "--trials", "2"]),
    (lambda: fb.bias_test("fa2-sm80", scenario="nope", trials=2), ["bias-test", "--model", "fa2-sm80", "--scenario",
                                                                   "nope"]),
    (lambda: fb.load_trace(os.path.join(ROOT, "README.md")), ["replay", os.path.join(ROOT, "README.md")]),
])
def test_bad_input_raises_value_error_with_the_cli_message(cli, call, cli_args):
    with pytest.raises(ValueError) as e:
        call()
    message = str(e.value)
    if cli_args is None:
        return
    rc, out, err = cli(*cli_args, check=False)
    assert rc == 2
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: ")
    # The same message after the name of the argument (the CLI names its option or word,
    # Python its parameter: "--sr-bits: ..." and "sr_bits: ...").
    tail = lambda s: s.split(": ", 1)[1] if ": " in s else s  # noqa: E731
    if "is not exactly representable" in message:
        # The same finding; the way out differs: the CLI's is a hex word, Python's is to round
        # first or pass bit patterns as an unsigned array (a hex literal means nothing there).
        advice = message[message.index(" (round first: "):]
        assert "0x" not in advice and "uint" in advice, message
        message = message[:-len(advice)]
        line = line[:line.index(" (give a hex bit pattern")]
    assert tail(message) == tail(line[len("error: "):]), (message, line)


def test_wrong_kinds_raise_type_error():
    with pytest.raises(TypeError):
        fb.round("not an array", "bf16")
    with pytest.raises(TypeError):
        fb.decode(np.ones(3), "bf16")
    with pytest.raises(TypeError):
        fb.round(np.array([object()]), "bf16")


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_bare_gqa_capture_loads_and_replays(cli, tmp_path, layout):
    # A grouped-query trace from the CLI (4 q heads over 2 kv heads), re-saved the ways users
    # save captures by tests/export_capture.py (numpy's own writers), loads with the missing
    # metadata given as keywords, equals the original tensor for tensor, and the module's own
    # attention on its inputs reproduces its outputs bit for bit.
    import subprocess
    import sys
    original = tmp_path / "original.safetensors"
    rc, out, err = cli("make-trace", "--model", "fa2-sm80", "--scenario", "random", "--seqlen", "40", "--headdim",
                       "16", "--batch", "2", "--heads", "4", "--kv-heads", "2", "--backward", "--out", str(original))
    assert rc == 0, err
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "export_capture.py"), str(original), str(tmp_path)],
                   check=True)
    want = fb.load_trace(original)
    scale = float(want.metadata["softmax_scale"])
    name = "compressed.npz" if layout == "bshd" else "capture.npz"
    got = fb.load_trace(tmp_path / name, source="unknown", scale=scale, causal=False, dtype="bf16", layout=layout)
    assert got.metadata["source"] == "unknown" and not got.hardware
    for key, array in want.tensors.items():
        np.testing.assert_array_equal(got.tensors[key], array, err_msg=key)
    assert got.tensors["k"].shape == (2, 2, 40, 16)
    r = fb.attention(got.tensors["q"], got.tensors["k"], got.tensors["v"], "fa2-sm80", do=got.tensors["do"],
                     scale=scale)
    for key in ("o", "dq", "dk", "dv"):
        np.testing.assert_array_equal(getattr(r, key), want.tensors[key], err_msg=key)
    with pytest.raises(ValueError, match="--source|source"):
        fb.load_trace(tmp_path / name, dtype="bf16", layout=layout)


def test_an_npz_member_without_an_array_name_is_refused(cli, tmp_path):
    # A member named ".npy" became a tensor named "" in the trace import wrote (the fuzz audit
    # of 2026-12-07); numpy's own writer names each member NAME.npy.
    import io
    import zipfile
    path = tmp_path / "unnamed.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name in (".npy", "q.npy"):
            buf = io.BytesIO()
            np.save(buf, np.zeros((1, 1, 2, 4), dtype=np.float32))
            z.writestr(name, buf.getvalue())
    for command in (("replay", str(path)), ("import", str(path), "--source", "unknown", "--out", str(tmp_path / "t"))):
        rc, _, err = cli(*command, check=False)
        assert rc == 2 and err.count("\n") == 1, err
        assert f"{path}: member '.npy' names no array" in err, err
    with pytest.raises(ValueError, match="names no array"):
        fb.load_trace(path)


def test_replay_notes_tiles_a_trace_records_that_are_not_the_models(cli, tmp_path):
    # fa2-sm80 runs head dim 64 in 128 x 128 tiles (flash_fwd_launch_template.h); a trace that
    # records other tiles was made by another run, whose sums may differ: replay says so
    # rather than leave its mismatches to read as the kernel's (the fuzz audit of 2026-12-07).
    import struct
    made = tmp_path / "made.safetensors"
    cli("make-trace", "--model", "fa2-sm80", "--seqlen", "32", "--out", str(made))
    raw = made.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"]["block_m"] == "128" and header["__metadata__"]["block_n"] == "128"
    rc, out, _ = cli("replay", str(made))
    assert rc == 0 and "records tiles" not in out
    header["__metadata__"]["block_m"] = "64"
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    moved = tmp_path / "other_tiles.safetensors"
    moved.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    rc, out, _ = cli("replay", str(moved))
    assert rc == 0, out
    assert f"note: {moved} records tiles block_m 64, block_n 128; fa2-sm80 runs 128 x 128 here" in out, out


def test_gradients_without_do_are_refused_alike_everywhere(cli, tmp_path):
    # dQ, dK, dV are recomputed from dO: a trace holding them without it was refused by replay
    # yet accepted by import and load_trace (the fuzz audit of 2026-12-07), whose contract is
    # replay's check. Each now refuses it with the same line.
    made = tmp_path / "made.safetensors"
    cli("make-trace", "--model", "fa2-sm80", "--seqlen", "16", "--headdim", "16", "--out", str(made))
    t = fb.load_trace(made)
    bare = tmp_path / "no_do.npz"
    rng = np.random.default_rng(3)
    arrays = {name: fb.round(t[name], "bf16").bits for name in ("q", "k", "v", "o")}
    arrays["dq"] = fb.round(rng.standard_normal(t["q"].shape), "bf16").bits
    np.savez(bare, **arrays)
    statement = ("--source", "unknown", "--dtype", "bf16", "--model", "fa2-sm80", "--scale", "0.25",
                 "--causal", "false", "--layout", "bhsd")
    want = "tensor dq is captured but the trace has no do to recompute it from"
    for command in (("replay", str(bare), *statement), ("import", str(bare), *statement, "--out", str(tmp_path / "t"))):
        rc, _, err = cli(*command, check=False)
        assert rc == 2 and err.count("\n") == 1 and want in err, err
    with pytest.raises(ValueError, match=want):
        fb.load_trace(bare, source="unknown", dtype="bf16", model="fa2-sm80", scale=0.25, causal=False,
                      layout="bhsd")

# Audit F4: a bare capture of a causal kernel with query length N != key length Nk states its
# mask's alignment (--causal top-left|bottom-right, load_trace(causal="top-left")); a plain
# true is bottom-right and says so; the alignment is written to causal_alignment; an option
# contradicting the file's own metadata is one error.
#
# Independent reference: the capture's O is PyTorch's is_causal attention (top-left: row i
# sees keys j <= i) computed here in mpmath at 300 bits from the exact bf16 inputs, rounded
# once to bf16 by exact_reference.round_exact (Fractions). `correctly-rounded` must replay it
# bit for bit under top-left, and must not under bottom-right (another mask).
import json
import warnings
from fractions import Fraction

import numpy as np
import pytest

import flashbits as fb
from exact_reference import FORMATS, decode, round_exact

mpmath = pytest.importorskip("mpmath")

N, NK, D, SCALE = 6, 20, 8, 0.25
BF16 = FORMATS["bf16"]


def _bf16_bits(rng, shape):
    # Random normal values truncated to bf16 bit patterns: exact bf16 inputs, not all simple.
    return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _bits_of(value: Fraction) -> int:
    # A bf16 value is a float32 value exactly: its float32 encoding's top half.
    return int(np.array([float(value)], dtype=np.float32).view(np.uint32)[0] >> 16)


def _top_left_o(q, k, v):
    mpmath.mp.prec = 300
    qv = [[decode(BF16, int(b)) for b in row] for row in q[0, 0]]
    kv = [[decode(BF16, int(b)) for b in row] for row in k[0, 0]]
    vv = [[decode(BF16, int(b)) for b in row] for row in v[0, 0]]
    o = np.zeros((1, 1, N, D), dtype=np.uint16)
    for i in range(N):
        visible = i + 1  # top-left: j <= i
        s = [Fraction(SCALE) * sum(a * b for a, b in zip(qv[i], kv[j])) for j in range(visible)]
        m = max(s)
        w = [mpmath.exp(mpmath.mpf(x.numerator) / x.denominator - mpmath.mpf(m.numerator) / m.denominator)
             for x in s]
        total = mpmath.fsum(w)
        for c in range(D):
            exact = mpmath.fsum(w[j] * mpmath.mpf(vv[j][c].numerator) / vv[j][c].denominator
                                for j in range(visible)) / total
            sign, man, exp, _ = exact._mpf_  # man_exp drops the sign
            value, _ = round_exact((-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp), BF16, "rne")
            assert isinstance(value, Fraction) and value != 0
            o[0, 0, i, c] = _bits_of(value)
    return o


@pytest.fixture(scope="module")
def bare_capture(tmp_path_factory):
    rng = np.random.default_rng(2026)
    q, k, v = _bf16_bits(rng, (1, 1, N, D)), _bf16_bits(rng, (1, 1, NK, D)), _bf16_bits(rng, (1, 1, NK, D))
    path = tmp_path_factory.mktemp("f4") / "bare.npz"
    np.savez(path, query=q, key=k, value=v, out=_top_left_o(q, k, v))
    return path


STATEMENT = ("--source", "unknown", "--scale", str(SCALE), "--dtype", "bf16", "--layout", "bhsd")


def test_cli_top_left_replays_bit_for_bit_and_plain_true_notes_bottom_right(cli, bare_capture, tmp_path):
    tl = tmp_path / "tl.safetensors"
    rc, out, err = cli("import", str(bare_capture), *STATEMENT, "--causal", "top-left", "--model", "correctly-rounded",
                       "--out", str(tl))
    assert rc == 0 and err == "", err
    assert "causal, aligned top-left" in out
    assert fb.load_trace(tl).metadata["causal_alignment"] == "top-left"
    rc, out, err = cli("replay", str(tl), "--json")
    assert rc == 0 and json.loads(out)["match"] is True, out + err

    br = tmp_path / "br.safetensors"
    rc, out, err = cli("import", str(bare_capture), *STATEMENT, "--causal", "true", "--model", "correctly-rounded",
                       "--out", str(br))
    assert rc == 0, err
    assert "causal, aligned bottom-right" in out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("note: "), err
    assert "bottom-right" in lines[0] and "--causal top-left" in lines[0]
    assert fb.load_trace(br).metadata["causal_alignment"] == "bottom-right"
    rc, out, err = cli("replay", str(br), "--json")
    assert rc == 1 and json.loads(out)["match"] is False, out + err

    # The file states top-left: a contradicting --causal is exit 2, one error line.
    rc, out, err = cli("replay", str(tl), "--causal", "bottom-right", check=False)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert "--causal bottom-right conflicts" in err and "causal_alignment='top-left'" in err


def test_load_trace_takes_the_alignment_and_warns_for_a_plain_true(bare_capture, tmp_path):
    kw = dict(source="unknown", scale=SCALE, dtype="bf16", layout="bhsd")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = fb.load_trace(bare_capture, causal="top-left", **kw)
    assert t.metadata["causal_alignment"] == "top-left" and t.causal
    with pytest.warns(UserWarning, match=r"bottom-right.*causal='top-left'"):
        t = fb.load_trace(bare_capture, causal=True, **kw)
    assert t.metadata["causal_alignment"] == "bottom-right" and t.causal
    t = fb.load_trace(bare_capture, causal=False, **kw)
    assert t.metadata["causal_alignment"] == "none" and not t.causal
    # "none", the word Trace.causal_alignment gives back, is False (as import's --causal none).
    t = fb.load_trace(bare_capture, causal=t.causal_alignment, **kw)
    assert t.metadata["causal_alignment"] == "none" and not t.causal
    with pytest.raises(ValueError, match="top-left"):
        fb.load_trace(bare_capture, causal="top_left", **kw)

    # The written trace's own metadata wins; a contradiction is a ValueError naming causal=.
    path = tmp_path / "tl.safetensors"
    t = fb.load_trace(bare_capture, causal="top-left", **kw)
    fb.save_trace(path, {n: t[n] for n in t.tensors}, metadata=t.metadata, formats=t.formats)
    with pytest.raises(ValueError, match="causal=bottom-right conflicts.*causal_alignment='top-left'"):
        fb.load_trace(path, causal="bottom-right")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file names its alignment: nothing is assumed
        assert fb.load_trace(path, causal=True).metadata["causal_alignment"] == "top-left"


# ---- audit: the alignment reaches flashbits.attention ----------------------------------------
CAPTURES = "traces/hw/h200/paths/math/math_bf16_cross_q64_k256_d64_causal_{}.safetensors"


@pytest.mark.parametrize("corner, alignment", [("tl", "top-left"), ("br", "bottom-right")])
def test_a_traces_causal_alignment_replays_the_capture_from_python_bit_for_bit(corner, alignment):
    # fb.attention(..., causal=t.causal) ran a top-left capture bottom-right (8187 of 8192 O
    # elements wrong) while `flashbits replay` matched it; causal="top-left" was a TypeError.
    # The reference is the capture's own O and gradients, measured on an H200 (compute
    # capability 9.0: sfu="hw-sm90", the set `replay --sfu auto` picks for it).
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    t = fb.load_trace(os.path.join(root, CAPTURES.format(corner)))
    assert t.causal and t.causal_alignment == alignment
    assert t.metadata["compute_capability"] == "9.0"
    run = dict(scale=t.scale, sfu="hw-sm90", threads=2)
    r = fb.attention(t["q"], t["k"], t["v"], t.model, do=t["do"], causal=t.causal_alignment, **run)
    for name, got in (("o", r.o), ("dq", r.dq), ("dk", r.dk), ("dv", r.dv)):
        assert np.array_equal(got, t[name]), name
    r = fb.attention(t["q"], t["k"], t["v"], t.model, causal=alignment, **run)
    assert np.array_equal(r.o, t["o"])
    # The other corner is another mask: most of O differs.
    other = "bottom-right" if alignment == "top-left" else "top-left"
    r = fb.attention(t["q"], t["k"], t["v"], t.model, causal=other, **run)
    assert np.count_nonzero(r.o != t["o"]) > t["o"].size // 2


def test_an_alignment_without_a_causal_key_is_causal_in_python_as_in_replay(cli, bare_capture, tmp_path):
    # causal_alignment alone states causality (the schema; replay ran such a trace top-left),
    # but Trace.causal read only the causal key: False, "none", and causal=t.causal_alignment
    # ran the trace unmasked. The reference is the mpmath top-left O in the capture.
    data = np.load(bare_capture)
    path = tmp_path / "alignment_only.safetensors"
    meta = dict(source="unknown", softmax_scale=SCALE, dtype="bf16", model="correctly-rounded",
                causal_alignment="top-left")
    fb.save_trace(path, q=data["query"], k=data["key"], v=data["value"], o=data["out"], metadata=meta)
    t = fb.load_trace(path)
    assert "causal" not in t.metadata
    assert t.causal is True and t.causal_alignment == "top-left"
    r = fb.attention(t["q"], t["k"], t["v"], t.model, causal=t.causal_alignment, scale=t.scale, dtype="bf16")
    np.testing.assert_array_equal(r.o, decode_bf16(data["out"]))
    rc, out, err = cli("replay", str(path), "--json")
    assert rc == 0 and json.loads(out)["match"] is True, out + err
    # "none" alone states no mask.
    meta["causal_alignment"] = "none"
    fb.save_trace(path, q=data["query"], k=data["key"], v=data["value"], o=data["out"], metadata=meta)
    t = fb.load_trace(path)
    assert t.causal is False and t.causal_alignment == "none"


def test_causal_takes_true_false_and_the_two_corners(bare_capture):
    # True is bottom-right, as the CLI's --causal true; "none" is the metadata's word for False.
    data = np.load(bare_capture)
    q, k, v = (data[n] for n in ("query", "key", "value"))
    kw = dict(scale=SCALE, dtype="bf16", threads=1)
    tl = fb.attention(q, k, v, "correctly-rounded", causal="top-left", **kw)
    np.testing.assert_array_equal(tl.o, np.asarray(decode_bf16(data["out"])))  # the mpmath top-left reference
    br = fb.attention(q, k, v, "correctly-rounded", causal="bottom-right", **kw)
    assert np.array_equal(fb.attention(q, k, v, "correctly-rounded", causal=True, **kw).o, br.o)
    assert not np.array_equal(br.o, tl.o)
    assert np.array_equal(fb.attention(q, k, v, "correctly-rounded", causal="none", **kw).o,
                          fb.attention(q, k, v, "correctly-rounded", causal=False, **kw).o)
    exact = fb.exact_attention(q, k, v, causal="top-left", scale=SCALE, dtype="bf16").o
    np.testing.assert_array_equal(fb.round(exact, "bf16").bits, data["out"])
    # A misspelt word is a wrong value (ValueError), a number the wrong kind (TypeError); both
    # name the words, in attention, exact_attention and load_trace alike.
    accepted = "causal: expected True, False, 'top-left', 'bottom-right' or 'none'"
    for call in (lambda c: fb.attention(q, k, v, "correctly-rounded", causal=c, **kw),
                 lambda c: fb.exact_attention(q, k, v, causal=c, scale=SCALE, dtype="bf16"),
                 lambda c: fb.load_trace(bare_capture, causal=c)):
        for word in ("top_left", "true", "bottom_right"):
            with pytest.raises(ValueError, match=accepted):
                call(word)
        with pytest.raises(TypeError, match=accepted):
            call(1)


def decode_bf16(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("n, nk", [(6, 20), (20, 6)])
def test_a_note_about_where_a_source_places_its_mask_is_for_causal_runs_only(n, nk):
    # fa-bf16acc's note says Qiu & Yao place their causal mask by q_start; a call without the
    # mask (cross-attention, decoding) took it too, as an UnmeasuredShapeWarning per call.
    rng = np.random.default_rng(n + nk)
    q, k, v = (fb.round(rng.standard_normal((1, m, D)), "bf16").values for m in (n, nk, nk))
    plain = fb.attention(q, k, v, "fa-bf16acc", threads=1).notes
    causal = fb.attention(q, k, v, "fa-bf16acc", causal="bottom-right", threads=1).notes
    assert not [note for note in plain if "causal mask" in note]
    assert [note for note in causal if "Qiu & Yao's causal mask is placed by q_start" in note]
    # The tutorial's note is about its one N_CTX, whatever the mask: it stays.
    tutorial = fb.attention(q, k, v, "triton-tutorial", dtype="fp16", threads=1).notes
    assert [note for note in tutorial if "one N_CTX" in note]


# ---- audit: notes that were dropped, and bias_test on bare captures ---------------------------
def test_a_layout_read_and_an_assumed_alignment_are_both_noted(cli, tmp_path):
    # Found by the lengths audit: the CLI printed one note per run, so with --layout auto a GQA
    # decoding capture's layout note (always first) hid the note that bottom-right was assumed.
    rng = np.random.default_rng(11)
    path = tmp_path / "gqa.npz"
    np.savez(path, q=_bf16_bits(rng, (1, 4, 6, 8)), k=_bf16_bits(rng, (1, 2, 20, 8)),
             v=_bf16_bits(rng, (1, 2, 20, 8)), o=_bf16_bits(rng, (1, 4, 6, 8)))
    rc, out, err = cli("import", str(path), "--source", "unknown", "--dtype", "bf16", "--scale", "0.25", "--causal",
                       "true", "--out", str(tmp_path / "gqa.safetensors"))
    assert rc == 0, err
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith("note: ") for line in lines), err
    assert "--layout auto read q [1,4,6,8]" in err and "assumed the causal mask aligned bottom-right" in err, err
    # Python: the same two, as UserWarnings naming keywords, not options.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fb.load_trace(path, source="unknown", dtype="bf16", scale=0.25, causal=True)
    texts = [str(w.message) for w in caught]
    assert len(texts) == 2, texts
    assert any("layout=auto read q" in t and "pass layout=bhsd" in t for t in texts), texts
    assert any("aligned bottom-right" in t and "causal='top-left'" in t for t in texts), texts
    assert not any("--" in t for t in texts), texts


def test_load_trace_says_what_it_assumed_of_a_traces_mask(tmp_path):
    # Found by the lengths audit: replay notes that a causal trace without causal_alignment (and
    # N != Nk) is read bottom-right; load_trace gave Trace.causal_alignment == "bottom-right"
    # without a word, so a top-left run replayed from Python with the wrong mask, silently.
    rng = np.random.default_rng(12)
    q, k = fb.decode(_bf16_bits(rng, (1, 1, 6, 8)), "bf16"), fb.decode(_bf16_bits(rng, (1, 1, 20, 8)), "bf16")
    path = tmp_path / "t.safetensors"
    fb.save_trace(path, q=q, k=k, v=k, o=q, metadata={"source": "unknown", "softmax_scale": 0.25, "causal": True})
    with pytest.warns(UserWarning, match=r"records no causal_alignment for 6 queries and 20 keys: bottom-right "
                                         r"assumed \(causal='top-left' or causal='bottom-right' states it"):
        t = fb.load_trace(path)
    assert t.causal_alignment == "bottom-right"
    # No causal key: non-causal is assumed, and said.
    fb.save_trace(path, q=q, k=k, v=k, o=q, metadata={"source": "unknown", "softmax_scale": 0.25})
    with pytest.warns(UserWarning, match=r"records no causal flag: non-causal assumed \(causal= states it"):
        assert not fb.load_trace(path).causal
    # Stated, nothing is said.
    fb.save_trace(path, q=q, k=k, v=k, o=q, metadata={"source": "unknown", "softmax_scale": 0.25, "causal": True,
                                                      "causal_alignment": "top-left"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fb.load_trace(path).causal_alignment == "top-left"
    # No softmax_scale: Trace.scale is None, which attention() reads as 1/sqrt(D), as replay
    # does; replay notes it, and load_trace said nothing.
    fb.save_trace(path, q=q, k=k, v=k, o=q, metadata={"source": "unknown", "causal": False})
    with pytest.warns(UserWarning, match=r"records no softmax_scale: 1/sqrt\(8\) assumed \(scale=X states it"):
        assert fb.load_trace(path).scale is None


def test_bias_test_warns_what_a_traces_metadata_leaves_unsaid(cli, bare_capture, tmp_path):
    # Found by the Python audit: bias_test(traces=[T]) on a trace recording no scale and no
    # causal flag warned nothing (the docstring promised UserWarnings; the CLI prints notes),
    # so a capture missing its causal flag was measured as non-causal attention without a word.
    unsaid = tmp_path / "unsaid.safetensors"
    rc, _, err = cli("import", str(bare_capture), "--source", "unknown", "--dtype", "bf16", "--layout", "bhsd",
                     "--out", str(unsaid))
    assert rc == 0, err
    with pytest.warns(UserWarning) as caught:
        r = fb.bias_test(traces=[unsaid])
    said = [str(w.message) for w in caught]
    assert any("no softmax_scale: 1/sqrt(8) assumed" in m and "scale=" in m for m in said), said
    assert any("no causal flag: non-causal assumed" in m and "causal=" in m for m in said), said
    assert not any("--" in m for m in said), said
    assert len(r["notes"]) == 2
    # A trace that states both: no warning.
    stated = tmp_path / "stated.safetensors"
    rc, _, err = cli("import", str(bare_capture), *STATEMENT, "--causal", "top-left", "--out", str(stated))
    assert rc == 0, err
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fb.bias_test(traces=[stated])


def test_bias_test_reads_bare_captures_with_what_they_lack(cli, bare_capture, tmp_path):
    # Found by the lengths audit: bias_test(traces=[bare.npz]) could only fail ("pass --source"),
    # having no keyword for what the capture lacks; the CLI's bias-test --traces takes options.
    # Now the keywords load_trace takes, and the CLI's report for the same statement.
    statement = {"source": "unknown", "scale": SCALE, "dtype": "bf16", "layout": "bhsd", "causal": "top-left"}
    r = fb.bias_test(traces=[bare_capture], **statement)
    rc, out, err = cli("bias-test", "--traces", str(bare_capture), "--source", "unknown", "--scale", str(SCALE),
                       "--dtype", "bf16", "--layout", "bhsd", "--causal", "top-left", "--json")
    assert rc in (0, 1, 4), err
    assert dict(r) == json.loads(out)
    # A plain True with N != Nk: the assumed alignment is a UserWarning naming keywords.
    with pytest.warns(UserWarning, match=r"aligned bottom-right.*causal='top-left'"):
        fb.bias_test(traces=[bare_capture], **{**statement, "causal": True})
    # What is missing is named as a keyword; the keywords without traces are refused.
    with pytest.raises(ValueError, match=r"source=") as e:
        fb.bias_test(traces=[bare_capture], scale=SCALE, dtype="bf16", causal=False)
    assert "--" not in str(e.value)
    with pytest.raises(ValueError, match=r"dtype='bf16'"):
        fb.bias_test(traces=[bare_capture], source="unknown", scale=SCALE, causal=False)
    with pytest.raises(ValueError, match=r"source, causal: they state what a bare capture"):
        fb.bias_test("fa2-sm80", source="unknown", causal=True)


def test_a_refused_run_warns_of_nothing_about_itself(cli, tmp_path):
    # Found by the semantics audit: attention(causal=True) with N != Nk under a model that
    # refuses the shape warned "takes the mask aligned bottom-right" and then raised; the CLI
    # printed the tutorial backward's causal warning before refusing a grouped-query run.
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, 128, 64)).astype(np.float16)
    k = rng.standard_normal((1, 2, 256, 64)).astype(np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        with pytest.raises(ValueError, match="takes one N_CTX"):
            fb.attention(q, k, k, "triton-tutorial-sm90", causal=True, dtype="fp16")
    # The same lengths under a model that runs them: the warning, after the run.
    with pytest.warns(UserWarning, match="aligned bottom-right"):
        fb.attention(q.astype(np.float32), k.astype(np.float32), k.astype(np.float32), "fa2-sm80", causal=True,
                     dtype="fp16")
    rc, out, err = cli("make-trace", "--model", "triton-tutorial-sm90", "--out", str(tmp_path / "e.safetensors"),
                       "--seqlen", "256", "--headdim", "64", "--dtype", "fp16", "--heads", "4", "--kv-heads", "2",
                       "--backward", check=False)
    assert rc == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "warning" not in err, err


def test_with_equal_lengths_either_alignment_is_the_one_mask_stated(cli, tmp_path):
    # N = Nk: top-left and bottom-right are the same mask, so a trace stating one replays under
    # --causal naming the other (an error before: a "conflict" between two names of one mask),
    # and a different statement (false) is still refused.
    rng = np.random.default_rng(5)
    q, k, v = (_bf16_bits(rng, (1, 1, 9, D)) for _ in range(3))
    path = tmp_path / "square.npz"
    o = fb.attention(q, k, v, "correctly-rounded", scale=SCALE, causal=True).o
    np.savez(path, q=q, k=k, v=v, o=(o.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
    st = tmp_path / "square.safetensors"
    rc, _, err = cli("import", str(path), *STATEMENT, "--causal", "bottom-right", "--model", "correctly-rounded",
                     "--out", str(st))
    assert rc == 0, err
    rc, out, err = cli("replay", str(st), "--causal", "top-left", "--json", check=False)
    assert rc == 0, out + err
    rc, _, err = cli("replay", str(st), "--causal", "false", check=False)
    assert rc == 2 and "conflicts" in err, err


def test_bias_test_reads_a_folder_by_one_rule_in_the_cli_and_python(cli, bare_capture, tmp_path):
    # Found in review: the CLI's --traces DIR read a folder's trace files and refused a folder of
    # .npy arrays; Python's traces=[DIR] read any folder as one .npy capture and traces=DIR
    # listed it in Python, case-sensitively. One rule now (traces/capture_import.hpp
    # list_captures): a folder of trace files is its files, a folder of .npy arrays one capture,
    # wherever it is given. The reference is the same capture given as its .npz file.
    statement = {"source": "unknown", "scale": SCALE, "dtype": "bf16", "layout": "bhsd", "causal": "top-left"}
    flags = ["--source", "unknown", "--scale", str(SCALE), "--dtype", "bf16", "--layout", "bhsd",
             "--causal", "top-left", "--json"]
    arrays = tmp_path / "arrays"
    arrays.mkdir()
    with np.load(bare_capture) as z:
        for name in z.files:
            np.save(arrays / f"{name}.npy", z[name])
    from_npz = dict(fb.bias_test(traces=[bare_capture], **statement))
    for given in ([arrays], arrays):
        from_arrays = dict(fb.bias_test(traces=given, **statement))
        assert from_arrays["subject"].endswith(f"in {arrays} (one sample per set of keys and values)")
        assert {k: v for k, v in from_arrays.items() if k != "subject"} == \
            {k: v for k, v in from_npz.items() if k != "subject"}
    rc, out, err = cli("bias-test", "--traces", str(arrays), *flags)
    assert rc in (0, 1, 4), err
    assert json.loads(out) == dict(fb.bias_test(traces=[arrays], **statement))
    # A folder of trace files, its names in any case, read as its files in both.
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "one.NPZ").write_bytes(bare_capture.read_bytes())
    (folder / "notes.txt").write_text("not a trace")
    as_list = dict(fb.bias_test(traces=[folder], **statement))
    assert as_list == dict(fb.bias_test(traces=folder, **statement))
    assert as_list["subject"].startswith(f"1 trace in {folder} (")
    rc, out, err = cli("bias-test", "--traces", str(folder), *flags)
    assert rc in (0, 1, 4), err
    assert json.loads(out) == as_list
    assert {k: v for k, v in as_list.items() if k != "subject"} == \
        {k: v for k, v in from_npz.items() if k != "subject"}
    # A folder holding both kinds, or neither, is one error naming it, exit 2 in the CLI.
    (arrays / "stray.safetensors").write_bytes(b"")
    empty = tmp_path / "empty"
    empty.mkdir()
    for bad, why in ((arrays, "holds both trace files"), (empty, "holds no trace file")):
        with pytest.raises(ValueError, match=why) as e:
            fb.bias_test(traces=[bad], **statement)
        assert str(bad) in str(e.value)
        rc, out, err = cli("bias-test", "--traces", str(bad), *flags, check=False)
        assert rc == 2 and out == "" and err.count("\n") == 1 and why in err and str(bad) in err

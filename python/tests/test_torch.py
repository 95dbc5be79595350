# flashbits.torch: the kernel models as a PyTorch autograd op (python/flashbits/torch.py).
#
# References: flashbits.attention with do= (the op must be that model, bit for bit: the
# wiring), PyTorch's own float64 math attention and autograd (independent of flashbits: the
# correctly rounded model must lie within half an ulp of it, the bound its one rounding
# allows), and central finite differences of the exact model (its gradients are the
# derivative of its forward).
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import flashbits as fb  # noqa: E402
import flashbits.torch as fbt  # noqa: E402

MODELS = ["fa2-sm80", "pytorch-fa2-sm90", "fa3-sm90", "fa-bf16acc", "fa-bf16acc+dynmax", "triton-tutorial",
          "standard-bf16", "fa4-sm100", "correctly-rounded", "fa-bf16acc+delta-dpp"]


def _inputs(shape_q, heads_kv, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    b, h, n, d = shape_q
    q = torch.randn(b, h, n, d, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(b, heads_kv, n, d, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(b, heads_kv, n, d, generator=g, dtype=torch.float64).to(dtype)
    do = torch.randn(b, h, n, d, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v, do


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_gradients_are_the_model_bit_for_bit(model, causal):
    # Batch 2, 4 query heads over 2 kv heads (GQA), fp32 tensors rounded to bf16 inside.
    q, k, v, do = _inputs((2, 4, 24, 16), 2, seed=len(model) + causal)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*leaves, is_causal=causal, model=model)
    o.backward(do)
    rounded = [fb.round(t.numpy(), "bf16").values for t in (q, k, v, do)]
    ref = fb.attention(*rounded[:3], model, do=rounded[3], causal=causal, threads=1)
    assert o.dtype == torch.float32
    for got, want in ((o, ref.o), (leaves[0].grad, ref.dq), (leaves[1].grad, ref.dk), (leaves[2].grad, ref.dv)):
        assert got.shape == want.shape
        np.testing.assert_array_equal(_bits(got.detach().double().numpy()), _bits(want))


def test_inputs_are_rounded_once_from_float64_not_through_float32():
    # 1 + 2^-8 + 2^-30: once to bf16 (RNE) it is above the halfway point and rounds up to
    # 1 + 2^-7; through float32 first it would become the tie 1 + 2^-8 and round to even, 1.
    x = 1 + 2.0 ** -8 + 2.0 ** -30
    assert float(torch.tensor(x, dtype=torch.float32)) == 1 + 2.0 ** -8  # the double rounding a cast would do
    operand = fbt._as_operand(torch.full((1, 1, 2, 2), x, dtype=torch.float64), "bf16")
    assert operand.dtype == np.uint16
    assert fb.decode(operand, "bf16").flat[0] == 1 + 2.0 ** -7
    # and the op computes with exactly that operand: every q, k, v equal to x gives O = x rounded
    t = torch.full((1, 1, 4, 8), x, dtype=torch.float64)
    o = fbt.scaled_dot_product_attention(t, t, t, model="correctly-rounded")
    assert o.dtype == torch.float64
    assert torch.all(o == 1 + 2.0 ** -7)


def test_bf16_input_is_read_in_place_and_outputs_keep_the_callers_dtype():
    q, k, v, do = _inputs((1, 2, 16, 8), 2, seed=3, dtype=torch.bfloat16)
    operand = fbt._as_operand(q, "bf16")
    assert np.shares_memory(operand, q.view(torch.int16).numpy())  # no copy
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*leaves, model="fa2-sm80")
    o.backward(do)
    assert o.dtype == torch.bfloat16 and leaves[0].grad.dtype == torch.bfloat16
    ref = fb.attention(*(t.float().numpy() for t in (q, k, v)), "fa2-sm80", do=do.float().numpy(), threads=1)
    np.testing.assert_array_equal(o.detach().float().numpy(), ref.o)
    np.testing.assert_array_equal(leaves[1].grad.float().numpy(), ref.dk)


def test_float16_tensors_run_an_fp16_model():
    q, k, v, do = _inputs((1, 2, 16, 8), 1, seed=4, dtype=torch.float16)
    o = fbt.scaled_dot_product_attention(q, k, v, model="fa2-sm80")
    ref = fb.attention(q.numpy(), k.numpy(), v.numpy(), "fa2-sm80", threads=1)
    assert ref.dtype == "fp16" and o.dtype == torch.float16
    np.testing.assert_array_equal(o.numpy().astype(np.float64), ref.o)


@pytest.mark.parametrize("dtype, model, fmt", [(torch.float16, "fa-bf16acc", "bf16"),
                                                (torch.float16, "standard-bf16", "bf16"),
                                                (torch.bfloat16, "standard-fp16", "fp16")])
def test_narrow_tensors_are_not_rounded_silently_into_another_narrow_format(dtype, model, fmt):
    # float16 tensors into a bf16-only model were rounded to bf16 and returned as float16,
    # precision lost without a word; flashbits.attention refuses the same values.
    q, k, v, do = _inputs((1, 2, 16, 8), 1, seed=5, dtype=dtype)
    held = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    with pytest.raises(ValueError, match=rf"^query, key, value: dtype {dtype} holds {held}, but model {model} reads "
                                         rf"{fmt} inputs; they are not rounded silently \(pass dtype=\"{fmt}\""):
        fbt.scaled_dot_product_attention(q, k, v, model=model)
    # flashbits.attention refuses such values too: 1 + 2^-10 (fp16, not bf16) and 2^20 (bf16,
    # beyond fp16's largest 65504) in the tensors' own dtype.
    lossy = q.clone()
    lossy[0, 0, 0, 0] = 1 + 2.0 ** -10 if dtype == torch.float16 else 2.0 ** 20
    assert float(lossy[0, 0, 0, 0]) in (1 + 2.0 ** -10, 2.0 ** 20)  # held exactly by the tensor
    with pytest.raises(ValueError, match=rf"^q\[0,0,0,0\]: .* is not exactly representable in {fmt}"):
        fb.attention(lossy.float().numpy(), k.float().numpy(), v.float().numpy(), model)
    with pytest.raises(ValueError, match="they are not rounded silently"):
        fbt.scaled_dot_product_attention(lossy, k, v, model=model)
    # Asked for with dtype=, the rounding happens once, to nearest even (reference: numpy's
    # values rounded by flashbits.round, the op's inputs being exactly those).
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*leaves, model=model, dtype=fmt)
    o.backward(do)
    rounded = [fb.round(t.float().numpy(), fmt).values for t in (q, k, v, do)]
    ref = fb.attention(*rounded[:3], model, do=rounded[3], threads=1)
    assert o.dtype == dtype and leaves[1].grad.dtype == dtype
    np.testing.assert_array_equal(o.detach().double().numpy(), fb.round(ref.o, held).values)
    np.testing.assert_array_equal(leaves[1].grad.double().numpy(), fb.round(ref.dk, held).values)
    # Into fp32 nothing is lost: float16 tensors run an fp32 model as they are.
    assert fbt.scaled_dot_product_attention(q, k, v, model="standard-fp32").dtype == dtype


def _math_attention_f64(q, k, v, causal, scale):
    group = q.shape[-3] // k.shape[-3]
    k = k.repeat_interleave(group, dim=-3)
    v = v.repeat_interleave(group, dim=-3)
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _half_ulp_bf16(x):
    # half an ulp of bf16 at |x| (normal range): 2^(floor(log2|x|) - 8)
    e = np.floor(np.log2(np.maximum(np.abs(x), 2.0 ** -126)))
    return 2.0 ** (e - 8)


@pytest.mark.parametrize("causal", [False, True])
def test_correctly_rounded_is_within_half_an_ulp_of_torch_float64_math_attention(causal):
    q, k, v, do = _inputs((2, 4, 20, 16), 2, seed=11)
    rq, rk, rv, rdo = (torch.from_numpy(fb.round(t.numpy(), "bf16").values) for t in (q, k, v, do))
    leaves = [t.clone().requires_grad_(True) for t in (rq, rk, rv)]
    ref = _math_attention_f64(*leaves, causal, 1 / 4)
    ref.backward(rdo)
    mine = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*mine, is_causal=causal, scale=0.25, model="correctly-rounded")
    o.backward(do)
    # One RNE rounding of the exact value: |error| <= half an ulp at the exact value; float64
    # math attention is within ~1e-15 relative of exact, so the bound holds with that slack.
    for got, want in ((o, ref), (mine[0].grad, leaves[0].grad), (mine[1].grad, leaves[1].grad),
                      (mine[2].grad, leaves[2].grad)):
        g, w = got.detach().double().numpy(), want.detach().numpy()
        err = np.abs(g - w)
        bound = _half_ulp_bf16(w) * (1 + 1e-9) + 1e-12 * np.abs(w).max()
        assert np.all(err <= bound), float((err / bound).max())
        assert np.any(g != w)  # the model really rounds: not float64 passed through


def test_exact_model_gradients_match_central_finite_differences():
    # Inputs on a 2^-10 grid and steps of 2^-10 keep every perturbed input exactly an fp32
    # value, so the exact model sees exactly the perturbation (gradcheck's own step would be
    # rounded away by the op's rounding to fp32).
    g = torch.Generator().manual_seed(5)
    shape = (1, 2, 6, 4)
    q, k, v = ((torch.randint(-1024, 1024, shape, generator=g).double() / 1024).requires_grad_(True)
               for _ in range(3))

    def fn(q, k, v):
        return fbt.scaled_dot_product_attention(q, k, v, is_causal=True, model="exact")

    assert torch.autograd.gradcheck(fn, (q, k, v), eps=2.0 ** -10, atol=2e-5, rtol=1e-3)


def test_fp32_control_is_torch_math_attention():
    q, k, v, _ = _inputs((1, 4, 12, 8), 2, seed=6)
    o = fbt.scaled_dot_product_attention(q, k, v, is_causal=True, model="fp32")
    ref = _math_attention_f64(q.double(), k.double(), v.double(), True, 1 / math.sqrt(8))
    assert o.dtype == torch.float32
    assert float((o.double() - ref).abs().max()) < 1e-5


def test_model_without_backward_is_refused_when_a_gradient_is_asked_for():
    q, k, v, _ = _inputs((1, 1, 16, 16), 1, seed=7)
    with pytest.raises(ValueError, match="model: .*no backward"):
        fbt.scaled_dot_product_attention(q.clone().requires_grad_(True), k, v, model="fa3-fp8-sm90")
    with torch.no_grad():
        o = fbt.scaled_dot_product_attention(q, k, v, model="fa3-fp8-sm90")
    np.testing.assert_array_equal(o.numpy(), fb.attention(fb.round(q.numpy(), "bf16").values,
                                                          fb.round(k.numpy(), "bf16").values,
                                                          fb.round(v.numpy(), "bf16").values, "fa3-fp8-sm90",
                                                          threads=1).o)


@pytest.mark.parametrize("kwargs, message", [
    ({"attn_mask": torch.zeros(8, 8)}, "attn_mask: a general mask"),
    ({"dropout_p": 0.1}, "dropout_p: 0.1"),
    ({"scale": -1.0}, "scale: -1.0"),
    ({"model": "no-such-model"}, "model no-such-model"),
])
def test_unsupported_arguments_are_clear_value_errors(kwargs, message):
    q, k, v, _ = _inputs((1, 1, 8, 8), 1)
    args = {"model": "fa2-sm80", **kwargs}
    with pytest.raises(ValueError, match=message):
        fbt.scaled_dot_product_attention(q, k, v, **args)


def test_shape_device_and_dtype_errors_name_the_argument():
    q, k, v, _ = _inputs((1, 2, 8, 8), 2)
    # is_causal with another key length runs top-left (test_is_causal_with_unequal_lengths_is_top_left).
    # Without is_causal another key length runs (cross-attention), gradients of k's shape,
    # close to PyTorch's own fp64 math attention.
    kk, vv = k[:, :, :6].detach().clone().requires_grad_(), v[:, :, :6].detach().clone().requires_grad_()
    out = fbt.scaled_dot_product_attention(q, kk, vv, model="fa2-sm80")
    out.sum().backward()
    assert out.shape == q.shape and kk.grad.shape == kk.shape
    want = fbt.scaled_dot_product_attention(q.detach(), kk.detach(), vv.detach(), model="fp64")
    assert torch.allclose(out.detach().double(), want.double(), atol=0.05)
    # A key head dim other than the query's is the key's fault (it was reported as "value: head
    # dim 32 (key 32)"); a value head dim of its own, which PyTorch takes, is refused as such.
    with pytest.raises(ValueError, match=r"^key: head dim 16 differs from query's 8; "):
        fbt.scaled_dot_product_attention(q, torch.zeros(1, 2, 8, 16), torch.zeros(1, 2, 8, 16), model="fa2-sm80")
    with pytest.raises(ValueError, match=r"^value: head dim 16 differs from query's 8; PyTorch allows a value head "
                                         r"dim of its own, but the kernel models have one head dim .* not supported"):
        fbt.scaled_dot_product_attention(q, k, torch.zeros(1, 2, 8, 16), model="fa2-sm80")
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):  # PyTorch 2.x: it does take it
        assert torch.nn.functional.scaled_dot_product_attention(q, k, torch.zeros(1, 2, 8, 16)).shape == (1, 2, 8, 16)
    with pytest.raises(ValueError, match="key: 2 heads do not divide query's 3"):
        fbt.scaled_dot_product_attention(torch.zeros(1, 3, 8, 8), k, v, model="fa2-sm80")
    with pytest.raises(ValueError, match="query: a tensor on device 'meta'"):
        fbt.scaled_dot_product_attention(torch.empty(1, 2, 8, 8, device="meta"), k, v, model="fa2-sm80")
    with pytest.raises(ValueError, match="value: dtype torch.int64"):
        fbt.scaled_dot_product_attention(q, k, torch.zeros(1, 2, 8, 8, dtype=torch.int64), model="fa2-sm80")
    with pytest.raises(TypeError, match="model: expected a model name"):
        fbt.scaled_dot_product_attention(q, k, v, model=None)
    with pytest.raises(ValueError, match="^sfu: the control 'fp32' is PyTorch's math attention"):
        fbt.scaled_dot_product_attention(q, k, v, model="fp32", sfu="correct")


def test_enable_gqa_is_taken_where_pytorch_takes_it():
    # A Llama-style call: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    # (PyTorch 2.5+). The keyword and the eighth positional argument are both accepted, and the
    # op is still the model bit for bit (flashbits.attention, as in the first test).
    q, k, v, do = _inputs((1, 4, 12, 8), 2, seed=21)
    rounded = [fb.round(t.numpy(), "bf16").values for t in (q, k, v, do)]
    ref = fb.attention(*rounded[:3], "pytorch-fa2-sm90", do=rounded[3], causal=True, threads=1)
    for call in (lambda *t: fbt.scaled_dot_product_attention(*t, is_causal=True, enable_gqa=True,
                                                              model="pytorch-fa2-sm90"),
                 lambda *t: fbt.scaled_dot_product_attention(*t, None, 0.0, True, None, True,
                                                              model="pytorch-fa2-sm90")):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        o = call(*leaves)
        o.backward(do)
        np.testing.assert_array_equal(_bits(o.detach().double().numpy()), _bits(ref.o))
        np.testing.assert_array_equal(_bits(leaves[1].grad.double().numpy()), _bits(ref.dk))
    with pytest.raises(TypeError, match="enable_gqa: expected True or False, got str"):
        fbt.scaled_dot_product_attention(q, k, v, enable_gqa="yes", model="pytorch-fa2-sm90")


def test_numpy_scalars_are_numbers_for_dropout_and_scale():
    # A config read into numpy gives np.float32(0.0) for dropout and np.float64 for the scale:
    # numbers, taken as such (np.float32(0.0) was refused as "dropout_p: 0.0 ... give 0.0").
    q, k, v, _ = _inputs((1, 2, 8, 8), 2, seed=22)
    o = fbt.scaled_dot_product_attention(q, k, v, dropout_p=np.float32(0.0), scale=np.float64(0.3),
                                         model="fa2-sm80")
    rounded = [fb.round(t.numpy(), "bf16").values for t in (q, k, v)]
    np.testing.assert_array_equal(_bits(o.double().numpy()),
                                  _bits(fb.attention(*rounded, "fa2-sm80", scale=0.3, threads=1).o))
    with pytest.raises(ValueError, match="dropout_p: 0.1"):
        fbt.scaled_dot_product_attention(q, k, v, dropout_p=np.float32(0.1), model="fa2-sm80")


def test_observer_sees_the_backward_and_the_traced_rows():
    q, k, v, do = _inputs((1, 2, 16, 8), 2, seed=8)
    seen = []
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*leaves, is_causal=True, model="fa-bf16acc", observe=seen.append,
                                         trace=[(0, 1, 5)])
    o.backward(do)
    assert len(seen) == 1
    s = seen[0]
    assert s["format"] == "bf16" and s["causal"] and s["scale"] == 1 / math.sqrt(8)
    np.testing.assert_array_equal(s["result"].o, o.detach().double().numpy())
    assert s["result"].delta.shape == (1, 2, 16)
    assert [(t["batch"], t["head"], t["row"]) for t in s["traces"]] == [(0, 1, 5)]


def test_trace_without_an_observer_is_refused():
    # The traces reach the caller only through observe=: without it they were dropped silently
    # (rows outside the problem included).
    q = torch.zeros(1, 2, 8, 8)
    with pytest.raises(ValueError, match="^trace: the traced rows are handed to observe=, which is not given"):
        fbt.scaled_dot_product_attention(q, q, q, model="fa-bf16acc", trace=[(9, 9, 99)])


def test_backward_runs_from_the_kept_forward_without_a_second_forward(monkeypatch):
    # A training step's backward must not pay for the forward twice: the op runs the model once
    # (keeping its state) and the backward from that state, with the gradients of the one-call run.
    calls = []
    real = fbt._attention

    def counting(*args, **kwargs):
        calls.append((kwargs.get("do") is not None, kwargs.get("keep_forward")))
        return real(*args, **kwargs)

    monkeypatch.setattr(fbt, "_attention", counting)
    q, k, v, do = _inputs((1, 2, 20, 16), 2, seed=9)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    fbt.scaled_dot_product_attention(*leaves, is_causal=True, model="fa2-sm80").backward(do)
    assert calls == [(False, True)]
    rounded = [fb.round(t.numpy(), "bf16").values for t in (q, k, v, do)]
    ref = real(*rounded[:3], "fa2-sm80", do=rounded[3], causal=True, threads=1)
    for got, want in ((leaves[0].grad, ref.dq), (leaves[1].grad, ref.dk), (leaves[2].grad, ref.dv)):
        np.testing.assert_array_equal(_bits(got.double().numpy()), _bits(want))
    # Under no_grad nothing is kept (no backward can follow).
    calls.clear()
    with torch.no_grad():
        fbt.scaled_dot_product_attention(q, k, v, model="fa2-sm80")
    assert calls == [(False, False)]


def test_mixed_dtypes_empty_axes_and_contradicted_dtype_are_refused():
    # PyTorch's SDPA refuses mixed dtypes; taken here, bf16 keys were rounded to the query's
    # fp16 and a value of 1e5 became inf.
    q = torch.ones(1, 4, dtype=torch.float16)
    k = torch.ones(2, 4, dtype=torch.bfloat16)
    v = torch.tensor([[1e5] * 4, [0.0] * 4], dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="query, key, value: dtypes torch.float16, torch.bfloat16, torch.bfloat16"):
        fbt.scaled_dot_product_attention(q, k, v, model="pytorch-fa2-sm90")
    # A head dim of 0 was a ZeroDivisionError in the default scale.
    empty = torch.zeros(1, 1, 3, 0)
    with pytest.raises(ValueError, match=r"query: shape \(1, 1, 3, 0\) has an empty axis"):
        fbt.scaled_dot_product_attention(empty, empty, empty, model="fa2-sm80")
    # fa-bf16acc reads bf16: dtype="fp16" was ignored, in the op and in flashbits.attention.
    x = torch.ones(1, 2)
    with pytest.raises(ValueError, match="model fa-bf16acc reads bf16 inputs; dtype fp16 contradicts it"):
        fbt.scaled_dot_product_attention(x, x, x, model="fa-bf16acc", dtype="fp16")
    ones = np.ones((1, 2))
    with pytest.raises(ValueError, match="model standard-bf16 reads bf16 inputs; dtype fp16 contradicts it"):
        fb.attention(ones, ones, ones, "standard-bf16", dtype="fp16")
    # The fp32-input models ran on fp32 inputs whatever dtype asked for (bit for bit the run
    # without it); the dtype is refused there too.
    with pytest.raises(ValueError, match="model standard-fp32 reads fp32 inputs; dtype bf16 contradicts it"):
        fbt.scaled_dot_product_attention(x, x, x, model="standard-fp32", dtype="bf16")
    with pytest.raises(ValueError, match="model golden-fp64-flash reads fp32 inputs; dtype fp16 contradicts it"):
        fb.attention(ones, ones, ones, "golden-fp64-flash", dtype="fp16")
    # golden-fp64-* never round O: its output format is fp64 (it said fp32), as its O values show.
    assert fbt.model_formats("golden-fp64-flash")["output"] == "fp64"
    assert fbt.model_formats("fa2-sm80")["output"] == "bf16"
    rng = np.random.default_rng(5)
    q3, k3, v3 = (rng.standard_normal((1, 8, 16)).astype(np.float32) for _ in range(3))
    o64 = np.asarray(fb.attention(q3, k3, v3, "golden-fp64-flash").o, dtype=np.float64)
    assert np.any(o64.astype(np.float32).astype(np.float64) != o64)
    # exact_attention's dtype is the inputs' format, as a capture's: an fp32-input model's floor
    # is taken on bf16 inputs (it was refused as a contradiction of the model's dtype).
    b16 = fb.round(rng.standard_normal((1, 8, 16)), "bf16").values
    floor = fb.exact_attention(b16, b16, b16, rounded_as="standard-fp32")
    o_floor = np.asarray(floor.o, dtype=np.float64)
    assert np.array_equal(o_floor.astype(np.float32).astype(np.float64), o_floor)  # on fp32's grid
    assert not np.array_equal(fb.round(o_floor, "bf16").values, o_floor)  # not rounded to bf16
    # triton-tutorial-sm90 runs fp16 only: its formats say so, and with no dtype it runs in fp16.
    assert fbt.model_formats("triton-tutorial-sm90")["input"] == "fp16"
    with pytest.raises(ValueError, match="model triton-tutorial-sm90 runs fp16 inputs only; dtype bf16 contradicts"):
        fbt.model_formats("triton-tutorial-sm90", dtype="bf16")
    with pytest.raises(TypeError, match="observe: expected a callable or None, got int"):
        fbt.scaled_dot_product_attention(x, x, x, model="fa2-sm80", observe=5)
    # Left out, dtype is no contradiction: the model's own format is used.
    assert fb.attention(ones, ones, ones, "standard-fp16").dtype == "fp16"
    assert fb.attention(ones, ones, ones, "fa-bf16acc", dtype="bf16").dtype == "bf16"


@pytest.mark.parametrize("model", ["exact", "fa2-sm80"])
def test_a_second_derivative_through_the_op_is_refused_not_silently_partial(model):
    # A gradient penalty through a residual block: the op's gradients are values, not a graph,
    # so the penalty's gradient silently left attention's part out (4782 against fp64's 4484).
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, 6, 8, generator=g, dtype=torch.float64)
    w = (torch.randn(8, 8, generator=g, dtype=torch.float64) / 4).requires_grad_()
    k, v = (torch.randn(1, 1, 6, 8, generator=g, dtype=torch.float64) for _ in range(2))
    q = x @ w
    y = fbt.scaled_dot_product_attention(q, k, v, model=model) + q
    (grad_w,) = torch.autograd.grad((y ** 2).sum(), w, create_graph=True)
    # The first derivative itself is the model's, with or without create_graph.
    q2 = x @ w
    y2 = fbt.scaled_dot_product_attention(q2, k, v, model=model) + q2
    (plain,) = torch.autograd.grad((y2 ** 2).sum(), w)
    assert torch.equal(grad_w.detach(), plain)
    with pytest.raises(RuntimeError, match="a second derivative through the emulated attention is not modelled"):
        torch.autograd.grad((grad_w ** 2).sum(), w)


@pytest.mark.parametrize("model", ["exact", "fa2-sm80"])
def test_a_second_derivative_is_refused_when_the_loss_is_linear_in_o(model):
    # (o * w).sum() with w a constant: the incoming gradient dO = w needs no grad, and the
    # refusal hung off dO alone, so a gradient penalty silently left attention's part out
    # (q.grad was exactly 2q below, where fp64's math attention adds its own part).
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 4, 4, generator=g, dtype=torch.float64).requires_grad_() for _ in range(3))
    w = torch.randn(1, 1, 4, 4, generator=g, dtype=torch.float64)
    (grad_q,) = torch.autograd.grad((fbt.scaled_dot_product_attention(q, k, v, model=model) * w).sum(), q,
                                    create_graph=True)
    # The first derivative is the model's, bit for bit, with create_graph or without.
    (plain,) = torch.autograd.grad((fbt.scaled_dot_product_attention(q, k, v, model=model) * w).sum(), q)
    assert torch.equal(grad_q.detach(), plain)
    with pytest.raises(RuntimeError, match="a second derivative through the emulated attention is not modelled"):
        torch.autograd.grad((grad_q ** 2).sum(), q)
    with pytest.raises(RuntimeError, match="a second derivative through the emulated attention is not modelled"):
        ((grad_q ** 2).sum() + (q ** 2).sum()).backward()
    # A plain backward (no graph of it built) still runs, and gives the same gradient.
    q.grad = None
    (fbt.scaled_dot_product_attention(q, k, v, model=model) * w).sum().backward()
    assert torch.equal(q.grad, plain)


@pytest.mark.parametrize("model", ["fp32", "fp64"])
@pytest.mark.parametrize("name, value", [("observe", lambda seen: None), ("trace", [0]), ("dtype", "bf16"),
                                         ("seed", 1), ("threads", 2), ("recipe", "x.json"), ("sfu", "correct")])
def test_the_controls_refuse_the_arguments_they_do_not_use(model, name, value):
    # They were ignored: an observer never called, a dtype or seed without effect.
    q, k, v, _ = _inputs((1, 2, 8, 4), 2)
    with pytest.raises(ValueError, match=rf"^{name}: the control '{model}' is PyTorch's math attention; it takes "
                                         r"none of recipe, sfu, dtype, seed, threads, observe, trace$"):
        fbt.scaled_dot_product_attention(q, k, v, model=model, **{name: value})


@pytest.mark.parametrize("name, value", [("seed", 3), ("threads", 2), ("trace", [0]), ("recipe", "x.json"),
                                         ("sfu", "correct")])
def test_the_exact_model_refuses_the_arguments_it_does_not_use(name, value):
    q, k, v, _ = _inputs((1, 1, 4, 4), 1)
    with pytest.raises(ValueError, match=rf"^{name}: the exact reference is no kernel model"):
        fbt.scaled_dot_product_attention(q, k, v, model="exact", **{name: value})
    # What it takes it uses: observe sees its backward, dtype is its input format.
    seen = []
    leaf = q.clone().requires_grad_()
    fbt.scaled_dot_product_attention(leaf, k, v, model="exact", dtype="bf16", observe=seen.append).sum().backward()
    assert len(seen) == 1 and seen[0]["format"] == "bf16"


@pytest.mark.parametrize("name, call", [
    ("dtype", lambda q: fbt.scaled_dot_product_attention(q, q, q, model="fa2-sm80", dtype=16)),
    ("sfu", lambda q: fbt.scaled_dot_product_attention(q, q, q, model="fa2-sm80", sfu=3)),
    ("recipe", lambda q: fbt.scaled_dot_product_attention(q, q, q, model="fa2-sm80", recipe=3)),
    ("seed", lambda q: fbt.scaled_dot_product_attention(q, q, q, model="fa2-sm80", seed=1.5)),
    ("threads", lambda q: fbt.scaled_dot_product_attention(q, q, q, model="fa2-sm80", threads="2")),
    ("dtype", lambda q: fbt.scaled_dot_product_attention(q, q, q, model="exact", dtype=16)),
    ("model", lambda q: fbt.model_formats(3)),
    ("dtype", lambda q: fbt.model_formats("fa2-sm80", dtype=16)),
    ("recipe", lambda q: fbt.model_formats("fa2-sm80", recipe=3)),
    ("sfu", lambda q: fbt.model_formats("fa2-sm80", sfu=None)),
])
def test_a_wrong_kind_of_argument_is_a_type_error_naming_it(name, call):
    with pytest.raises(TypeError) as e:
        call(torch.ones(1, 1, 4, 4))
    assert str(e.value).startswith(name + ":"), str(e.value)
    assert "incompatible function arguments" not in str(e.value)


def test_the_exact_models_bad_dtype_is_named_dtype():
    q = torch.ones(1, 1, 4, 4)
    with pytest.raises(ValueError, match="^dtype: unknown format 'bogus'"):  # was "fmt: ..."
        fbt.scaled_dot_product_attention(q, q, q, model="exact", dtype="bogus")



# ---- audit: stochastic rounding draws a fresh seed per call (seed=None) ----------------------
SR_MODEL = "fa2-sm80+o-sr"


def _top_left_attention_f64(q, k, v, scale, offset=0):
    """softmax(q kᵀ·scale) v in float64 (numpy), each query row i seeing keys j <= i + offset
    (0: PyTorch's is_causal, top-left; Nk - N: bottom-right), a row without keys 0: the
    reference written here, not flashbits'."""
    s = np.einsum("...id,...jd->...ij", q, k) * scale
    n, nk = s.shape[-2:]
    hidden = np.arange(nk)[None, :] > np.arange(n)[:, None] + offset
    s = np.where(hidden, -np.inf, s)
    has_key = ~hidden.all(axis=-1)[:, None]
    w = np.where(has_key, np.exp(s - np.where(has_key, s.max(axis=-1, keepdims=True), 0)), 0.0)
    p = w / np.where(has_key, w.sum(axis=-1, keepdims=True), 1.0)
    return np.einsum("...ij,...jd->...id", p, v)


def _binomial_two_sided_p(k, n):
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1))
    return min(1.0, 2 * tail / 2 ** n)


def test_model_formats_says_which_models_draw_from_a_seed():
    assert fbt.model_formats(SR_MODEL)["seeded"] is True
    assert fbt.model_formats("correctly-rounded+o-sr")["seeded"] is True
    assert fbt.model_formats("fa2-sm80")["seeded"] is False


def test_a_stochastic_rounding_model_rounds_each_call_with_fresh_bits():
    # With seed=None every call used seed 0: identical calls gave identical outputs, and the
    # per-call mean O error had one sign on every call (33 of 40 in the audit, on perturbed
    # inputs). `correctly-rounded+o-sr` rounds the exact O stochastically, so its error
    # against a float64 reference is the rounding's alone, of either sign with probability 1/2
    # per call when the calls draw independent bits.
    torch.manual_seed(20261205)
    q, k, v, _ = _inputs((1, 2, 32, 16), 2, seed=31)
    rounded = [fb.round(t.numpy(), "bf16").values for t in (q, k, v)]
    ref = _top_left_attention_f64(*rounded, 0.25)
    calls = 40
    positive = 0
    outputs = []
    for _ in range(calls):
        o = fbt.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25, model="correctly-rounded+o-sr")
        outputs.append(o)
        error = float(np.mean(o.double().numpy() - ref))
        assert error != 0
        positive += error > 0
    # Two-sided exact binomial test against p = 1/2, at a generous level (one-sided on every
    # call would be p = 2^-39).
    assert _binomial_two_sided_p(positive, calls) > 1e-3, f"{positive} of {calls} calls had a positive mean error"
    assert not torch.equal(outputs[0], outputs[1])


def test_torch_manual_seed_makes_stochastic_rounding_reproducible_and_the_backward_uses_its_forwards_seed():
    q, k, v, do = _inputs((1, 2, 16, 8), 2, seed=5)

    def run():
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        o = fbt.scaled_dot_product_attention(*leaves, is_causal=True, model=SR_MODEL)
        o.backward(do)
        return [o.detach()] + [t.grad for t in leaves]

    torch.manual_seed(7)
    first = run()
    torch.manual_seed(7)
    again = run()
    other = run()  # the generator has moved on: other bits
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    assert not torch.equal(first[0], other[0])
    # The documented draw: one torch.randint(0, 2**63 - 1, (1,)) per call. The gradients are
    # those of flashbits.attention with that seed: the backward used its forward's seed.
    torch.manual_seed(7)
    seed = int(torch.randint(0, 2 ** 63 - 1, (1,)).item())
    rounded = [fb.round(t.numpy(), "bf16").values for t in (q, k, v, do)]
    want = fb.attention(*rounded[:3], SR_MODEL, do=rounded[3], causal=True, seed=seed, threads=1)
    for got, w in zip(first, (want.o, want.dq, want.dk, want.dv)):
        np.testing.assert_array_equal(_bits(got.double().numpy()), _bits(w))
    # An explicit seed is that seed on every call.
    a = fbt.scaled_dot_product_attention(q, k, v, model=SR_MODEL, seed=3)
    b = fbt.scaled_dot_product_attention(q, k, v, model=SR_MODEL, seed=3)
    assert torch.equal(a, b)


def test_models_that_draw_no_randomness_leave_torchs_generator_alone():
    q, _, _, _ = _inputs((1, 1, 8, 8), 1)
    torch.manual_seed(11)
    want = torch.rand(4)
    torch.manual_seed(11)
    fbt.scaled_dot_product_attention(q, q, q, model="fa2-sm80")
    assert torch.equal(torch.rand(4), want)


def _assert_within_the_models_error(model, got, want):
    """O against a float64 reference of the same mask: one rounding for the references (bf16:
    half an ulp; exact, fp64: float64's own), a bf16 kernel's error for the kernel models (far
    below what another mask moves)."""
    if model in ("correctly-rounded", "exact", "fp64"):
        bound = _half_ulp_bf16(want) if model == "correctly-rounded" else 1e-12
        assert np.all(np.abs(got - want) <= bound)
    else:
        assert np.max(np.abs(got - want)) < 0.03


# ---- audit: is_causal is PyTorch's top-left mask, whatever the lengths ------------------------
@pytest.mark.parametrize("model", ["fa2-sm80", "fa-bf16acc", "correctly-rounded", "exact", "fp64"])
@pytest.mark.parametrize("n, nk", [(6, 20), (20, 6)])
def test_is_causal_with_unequal_lengths_is_top_left(model, n, nk):
    # It was refused for every model ("the kernel models use bottom-right"). PyTorch's
    # is_causal is top-left (key j <= row i).
    g = torch.Generator().manual_seed(n * 100 + nk)
    q = torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, nk, 8, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, nk, 8, generator=g, dtype=torch.float64)
    fmt = "fp32" if model == "exact" else "bf16"
    rounded = [fb.round(t.numpy(), fmt).values for t in (q, k, v)] if model != "fp64" else [t.numpy() for t in (q, k, v)]
    want = _top_left_attention_f64(*rounded, 1 / math.sqrt(8))
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*leaves, is_causal=True, model=model)
    o.sum().backward()
    assert leaves[1].grad.shape == k.shape
    got = o.detach().numpy()
    _assert_within_the_models_error(model, got, want)
    # ...and not the bottom-right mask, which differs in these shapes.
    if model != "fp64":
        bottom_right = fb.exact_attention(*rounded, causal="bottom-right", dtype=fmt).o
        assert np.max(np.abs(np.nan_to_num(bottom_right) - want)) > 0.05


# ---- audit: a run's notes are warnings --------------------------------------------------------
def test_notes_of_unmeasured_shapes_are_unmeasured_shape_warnings():
    # model flex-attention-sm90 with fewer than 128 query rows: flashbits.attention's notes say
    # Inductor would run another kernel; the op ran silently.
    assert issubclass(fb.UnmeasuredShapeWarning, UserWarning)
    q = torch.randn(1, 1, 16, 64, generator=torch.Generator().manual_seed(3))
    rounded = fb.round(q.numpy(), "bf16").values
    notes = fb.attention(rounded, rounded, rounded, "flex-attention-sm90", threads=1).notes
    assert notes and all(n.startswith("note: ") for n in notes)
    with pytest.warns(fb.UnmeasuredShapeWarning) as caught:
        fbt.scaled_dot_product_attention(q, q, q, model="flex-attention-sm90")
    texts = [str(w.message) for w in caught if issubclass(w.category, fb.UnmeasuredShapeWarning)]
    assert sorted(set(texts)) == sorted(set(notes)) and len(texts) == len(set(texts))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a measured shape says nothing
        fbt.scaled_dot_product_attention(q, q, q, model="fa2-sm80")


# ---- audit: observe= without a backward -------------------------------------------------------
def test_a_call_without_a_backward_is_observed_after_its_forward():
    # Under no_grad observe= was never called: the traced rows were dropped silently.
    q, k, v, _ = _inputs((1, 2, 16, 8), 2, seed=9)
    seen = []
    with torch.no_grad():
        o = fbt.scaled_dot_product_attention(q, k, v, is_causal=True, model="fa-bf16acc", observe=seen.append,
                                             trace=[(0, 1, 5)])
    assert len(seen) == 1
    s = seen[0]
    assert s["backward"] is False and s["do"] is None and s["causal"] == "top-left"
    np.testing.assert_array_equal(s["result"].o, o.double().numpy())
    assert s["result"].dq is None
    assert [(t["batch"], t["head"], t["row"]) for t in s["traces"]] == [(0, 1, 5)]
    # Inputs that need no gradient: no backward can follow either.
    seen.clear()
    fbt.scaled_dot_product_attention(q, k, v, model="fa-bf16acc", observe=seen.append)
    assert len(seen) == 1 and seen[0]["backward"] is False
    # With a backward, one observation, after it.
    seen.clear()
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = fbt.scaled_dot_product_attention(*leaves, model="fa-bf16acc", observe=seen.append)
    assert seen == []
    out.sum().backward()
    assert len(seen) == 1 and seen[0]["backward"] is True and seen[0]["result"].dq is not None


def test_the_exact_models_dtype_says_its_rule():
    q = torch.ones(1, 1, 4, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^dtype: 'fp64': the exact reference rounds its inputs once to a format of "
                                         r"at most 32 bits .* model=\"fp64\""):
        fbt.scaled_dot_product_attention(q, q, q, model="exact", dtype="fp64")


# ---- audit 2: gradients that are not the forward's are refused --------------------------------
def _fp16_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, 128, 64, generator=g, dtype=torch.float64).half() for _ in range(4)]


def test_a_backward_that_always_masks_causally_is_refused_without_the_causal_mask():
    # triton-tutorial-sm90's backward (the tutorial's _attn_bwd) always masks causally: with
    # is_causal=False its dQ, dK, dV were 36-89% off the gradients of its O, behind one warning.
    assert fbt.model_formats("triton-tutorial-sm90", dtype="fp16")["backward_always_causal"] is True
    assert fbt.model_formats("fa2-sm80")["backward_always_causal"] is False
    q, k, v, do = _fp16_inputs(41)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with pytest.raises(ValueError, match=r"^model: triton-tutorial-sm90's backward always masks causally.*"
                                         r"is_causal=False its dQ, dK, dV are not the gradients of its O"):
        fbt.scaled_dot_product_attention(*leaves, model="triton-tutorial-sm90")
    # Its forward alone runs (no gradient asked for), and O is attention's (float64 reference).
    want = _math_attention_f64(*(t.double() for t in (q, k, v)), False, 1 / 8)
    with torch.no_grad():
        o = fbt.scaled_dot_product_attention(*leaves, model="triton-tutorial-sm90")
    assert (o.double() - want).abs().max() < 2e-3
    o = fbt.scaled_dot_product_attention(q, k, v, model="triton-tutorial-sm90")  # nothing requires grad
    assert (o.double() - want).abs().max() < 2e-3
    # With the causal mask its gradients are those of O: PyTorch's float64 autograd, to fp16's precision.
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    n = q.shape[-2]
    s = (ref[0] @ ref[1].transpose(-2, -1) / 8).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    (torch.softmax(s, -1) @ ref[2]).backward(do.double())
    fbt.scaled_dot_product_attention(*leaves, is_causal=True, model="triton-tutorial-sm90").backward(do)
    for got, want in zip(leaves, ref):
        assert ((got.grad.double() - want.grad).abs().max() / want.grad.abs().max()) < 1e-2


def test_the_ops_warnings_point_at_the_callers_line(monkeypatch):
    # They pointed at torch.py's and torch/autograd/function.py's lines, so the default filter
    # showed each once per process, wherever the calls were.
    import inspect
    import warnings
    q = _fp16_inputs(42)[0].requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        here = inspect.currentframe().f_lineno + 1
        o = fbt.scaled_dot_product_attention(q, q, q, is_causal=True, model="cudnn-sdpa-sm90")
    kinds = {w.category for w in caught}
    assert fb.ApproximateModelWarning in kinds, [str(w.message) for w in caught]
    for w in caught:
        assert (w.filename, w.lineno) == (__file__, here), (w.category, w.filename, w.lineno)
    # A note of the backward points at the loss.backward() line.
    original = fb.AttentionResult.backward

    def backward_with_a_note(self, *args, **kwargs):
        r = original(self, *args, **kwargs)
        r.notes = list(r.notes or []) + ["note: from the backward"]
        return r
    monkeypatch.setattr(fb.AttentionResult, "backward", backward_with_a_note)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        here = inspect.currentframe().f_lineno + 1
        o.sum().backward()
    texts = [(str(w.message), w.filename, w.lineno) for w in caught]
    assert ("note: from the backward", __file__, here) in texts, texts


def test_the_default_filter_shows_a_warning_once_per_place_in_a_loop():
    # The op must not reset the warnings registry (warnings.catch_warnings does, on exit): a
    # training loop would then repeat every warning of the program on every step.
    import warnings
    q = _fp16_inputs(44)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            fbt.scaled_dot_product_attention(q, q, q, is_causal=True, model="cudnn-sdpa-sm90")
            warnings.warn("the caller's own warning", UserWarning)
    kinds = [w.category for w in caught]
    assert kinds.count(fb.ApproximateModelWarning) == 1 and kinds.count(UserWarning) == 1, \
        [(w.category.__name__, str(w.message)[:60]) for w in caught]


# ---- audit 2: an in-place change between forward and backward ---------------------------------
@pytest.mark.parametrize("model, dtype", [("exact", torch.float32), ("standard-fp32", torch.float32),
                                          ("fa-bf16acc", torch.bfloat16), ("standard-fp16", torch.float16),
                                          ("correctly-rounded", torch.float32)])
@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_an_input_changed_in_place_after_the_forward_is_pytorchs_error(model, dtype, which):
    # exact read float32 k and v in place and recomputed from them: dQ of other inputs, silently
    # when O and LSE stayed the same (v's rows 0 and 1 changed by +-0.5 with equal scores).
    torch.manual_seed(0)
    q = torch.zeros(1, 8, 8, dtype=dtype, requires_grad=True)  # every score 0: P = 1/8 exactly
    k, v = torch.randn(1, 8, 8).to(dtype), torch.randn(1, 8, 8).to(dtype)
    o = fbt.scaled_dot_product_attention(q, k, v, model=model)
    changed = {"query": q, "key": k, "value": v}[which]
    with torch.no_grad():
        changed[0, 0] += 0.5
        changed[0, 1] -= 0.5
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        o.backward(torch.ones_like(o))


# ---- audit 2: arguments a model does not use --------------------------------------------------
@pytest.mark.parametrize("model", ["fa-bf16acc", "correctly-rounded", "fa2-sm80"])
def test_a_seed_for_a_model_that_draws_no_random_bits_is_refused(model):
    assert fbt.model_formats(model)["seeded"] is False
    q, k, v, _ = _inputs((1, 2, 8, 8), 2)
    with pytest.raises(ValueError, match=rf"^seed: model {model}'s arithmetic draws no random bits"):
        fbt.scaled_dot_product_attention(q, k, v, model=model, seed=7)
    with pytest.raises(ValueError, match="^seed: "):
        fbt.scaled_dot_product_attention(q, k, v, model=model, seed=0)
    # A seeded model takes it, and it changes the rounding.
    outs = [fbt.scaled_dot_product_attention(q, k, v, model=SR_MODEL, seed=s) for s in (7, 7, 8)]
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])


@pytest.mark.parametrize("model", ["correctly-rounded", "standard-fp32"])
def test_an_sfu_set_for_a_model_that_evaluates_no_special_function_is_refused(model):
    q, k, v, _ = _inputs((1, 2, 8, 8), 2)
    with pytest.raises(ValueError, match="evaluates no special function"):
        fbt.scaled_dot_product_attention(q, k, v, model=model, sfu="hw-sm90")
    fbt.scaled_dot_product_attention(q, k, v, model="fa2-sm80", sfu="hw-sm90")  # one that does: taken


def test_threads_change_no_result_of_correctly_rounded():
    # Documented as accepted and inert (its exact computation splits heads over the machine's
    # threads): the outputs and gradients are the same bits, and within half an ulp of float64.
    q, k, v, do = _inputs((1, 4, 12, 8), 2, seed=43)
    got = []
    for threads in (1, 4):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        o = fbt.scaled_dot_product_attention(*leaves, model="correctly-rounded", threads=threads)
        o.backward(do)
        got.append([o.detach()] + [t.grad for t in leaves])
    for a, b in zip(*got):
        assert torch.equal(a, b)


# ---- audit 2: docs/PYTHON.md's signatures are the functions' ---------------------------------
def _signature_text(function):
    import inspect
    parts, star = [], False
    for p in inspect.signature(function).parameters.values():
        if p.kind == p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if p.default is p.empty:
            parts.append(p.name)
        else:
            shown = f'"{p.default}"' if isinstance(p.default, str) else repr(p.default)
            parts.append(f"{p.name}={shown}")
    return f"`{function.__name__}({', '.join(parts)})`"


@pytest.mark.parametrize("function", [fb.attention, fb.dot, fb.matmul])
def test_python_md_lists_every_parameter_with_its_default(function):
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "PYTHON.md")
    with open(path, encoding="utf-8") as f:
        rows = [line for line in f if line.startswith(f"| `{function.__name__}(")]
    assert any(row.startswith("| " + _signature_text(function) + " |") for row in rows), \
        (_signature_text(function), [r[:200] for r in rows])


# ---- PyTorch's CausalBias (torch.nn.attention.bias, PyTorch >= 2.2) as attn_mask ----------------
class _CausalVariant(__import__("enum").IntEnum):
    """A stand-in for torch.nn.attention.bias.CausalVariant (this machine's PyTorch predates it):
    the names and attributes PyTorch gives them."""
    UPPER_LEFT = 1
    LOWER_RIGHT = 2


class CausalBias:  # the class name PyTorch's is
    def __init__(self, variant, seq_len_q, seq_len_kv):
        self.variant, self.seq_len_q, self.seq_len_kv = variant, seq_len_q, seq_len_kv


@pytest.mark.parametrize("model", ["fa2-sm80", "fa-bf16acc", "correctly-rounded", "exact", "fp64"])
@pytest.mark.parametrize("n, nk", [(6, 20), (20, 6)])
def test_causal_lower_right_is_the_bottom_right_mask(model, n, nk):
    # causal_lower_right(L, S) is the mask a KV-cache decode step runs (PyTorch dispatches it to
    # FlashAttention's causal kernel, aligned bottom-right); it was refused as a general mask.
    g = torch.Generator().manual_seed(n * 100 + nk + 7)
    q, k, v = (torch.randn(1, 2, m, 8, generator=g, dtype=torch.float64) for m in (n, nk, nk))
    do = torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64)
    fmt = "fp32" if model == "exact" else "bf16"
    rounded = [fb.round(t.numpy(), fmt).values for t in (q, k, v)] if model != "fp64" else [t.numpy() for t in (q, k, v)]
    want = _top_left_attention_f64(*rounded, 1 / math.sqrt(8), offset=nk - n)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*leaves, attn_mask=CausalBias(_CausalVariant.LOWER_RIGHT, n, nk),
                                         model=model)
    o.backward(do)
    got = o.detach().numpy()
    _assert_within_the_models_error(model, got, want)
    if model not in ("correctly-rounded", "exact", "fp64"):
        # ...and the op is the model run with that mask, gradients included, bit for bit.
        ref = fb.attention(*rounded, model, do=fb.round(do.numpy(), "bf16").values, causal="bottom-right")
        for got_t, want_t in ((o, ref.o), (leaves[0].grad, ref.dq), (leaves[1].grad, ref.dk), (leaves[2].grad, ref.dv)):
            np.testing.assert_array_equal(_bits(got_t.detach().numpy()), _bits(want_t))
    assert np.max(np.abs(want - _top_left_attention_f64(*rounded, 1 / math.sqrt(8)))) > 0.05  # the masks differ here
    if n > nk:  # rows 0..n-nk-1 see no key: 0, and no gradient flows from them
        keyless = n - nk
        assert np.all(got[..., :keyless, :] == 0)
        assert torch.all(leaves[0].grad[..., :keyless, :] == 0)
    if model == "fp64":  # the control's gradients are float64 autograd of the reference's mask
        ref_leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        hidden = torch.ones(n, nk, dtype=torch.bool).triu(nk - n + 1)
        s = (ref_leaves[0] @ ref_leaves[1].transpose(-2, -1) / math.sqrt(8)).masked_fill(hidden, -math.inf)
        p = torch.nan_to_num(torch.softmax(s, dim=-1))  # keyless rows: NaN -> 0
        (p @ ref_leaves[2]).backward(do)
        for a, b in zip(leaves, ref_leaves):
            torch.testing.assert_close(torch.nan_to_num(a.grad), torch.nan_to_num(b.grad), rtol=1e-12, atol=1e-12)


def test_causal_upper_left_is_is_causal():
    q, k, v, _ = _inputs((1, 2, 12, 8), 2, seed=3)
    k, v = k[..., :7, :].contiguous(), v[..., :7, :].contiguous()
    upper_left = fbt.scaled_dot_product_attention(q, k, v, attn_mask=CausalBias(_CausalVariant.UPPER_LEFT, 12, 7),
                                                  model="fa2-sm80")
    is_causal = fbt.scaled_dot_product_attention(q, k, v, is_causal=True, model="fa2-sm80")
    assert torch.equal(upper_left, is_causal)


@pytest.mark.parametrize("kwargs, message", [
    ({"attn_mask": CausalBias(_CausalVariant.LOWER_RIGHT, 8, 8), "is_causal": True}, "CausalBias with is_causal=True"),
    ({"attn_mask": CausalBias(_CausalVariant.LOWER_RIGHT, 8, 9)}, "for 8 queries and 9 keys, but query has 8 rows and key 8"),
    ({"attn_mask": CausalBias(3, 8, 8)}, "variant 3 is neither UPPER_LEFT nor LOWER_RIGHT"),
    ({"attn_mask": torch.ones(8, 8, dtype=torch.bool)}, "causal_lower_right"),
])
def test_a_causal_bias_that_does_not_fit_the_call_is_refused(kwargs, message):
    q = torch.randn(1, 1, 8, 8)
    with pytest.raises(ValueError, match=message):
        fbt.scaled_dot_product_attention(q, q, q, model="fa2-sm80", **kwargs)


# ---- audit: what the op hands out and what its graph keeps ----------------------------------------
@pytest.mark.parametrize("model", ["fa-bf16acc", "exact"])
def test_a_float64_output_is_the_callers_own_tensor(model):
    # A float64 O was a view of the engine's result: editing it in place (autograd allows it:
    # the op saves q, k and v, not O) made the backward report a recomputed O differing from
    # its forward's; and q.grad was the result handed to observe=.
    q, k, v, do = _inputs((1, 2, 12, 8), 2, seed=21, dtype=torch.float64)
    seen = []
    kwargs = {} if model == "exact" else {"observe": seen.append}
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*leaves, model=model, **kwargs)
    o.mul_(2)
    o.backward(do)
    fresh = [t.clone().requires_grad_(True) for t in (q, k, v)]
    fbt.scaled_dot_product_attention(*fresh, model=model).backward(2 * do)  # d(2·O) = 2·dO
    for a, b in zip(leaves, fresh):
        np.testing.assert_array_equal(_bits(a.grad.numpy()), _bits(b.grad.numpy()))
    if seen:
        handed = seen[-1]["result"].dq.copy()
        leaves[0].grad.zero_()
        np.testing.assert_array_equal(_bits(seen[-1]["result"].dq), _bits(handed))


def test_a_graph_kept_after_its_backward_holds_no_forward_state(monkeypatch):
    # Logging loss tensors keeps their graphs: each node held its call's rounded operands, O,
    # LSE and the engine's state after the backward (+422 MiB over 50 steps in the audit).
    import gc
    import weakref
    results = []
    real = fbt._attention

    def recording(*args, **kwargs):
        r = real(*args, **kwargs)
        results.append(weakref.ref(r))
        return r

    monkeypatch.setattr(fbt, "_attention", recording)
    q, k, v, do = _inputs((1, 2, 16, 8), 2, seed=22)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*leaves, model="fa2-sm80")
    gc.collect()
    assert results[0]() is not None  # kept for the backward...
    o.backward(do)
    gc.collect()
    assert o.grad_fn is not None and all(ref() is None for ref in results)  # ...and no longer


@pytest.mark.parametrize("model", ["fa2-sm80", "exact"])
def test_a_retained_graphs_second_backward_gives_the_first_ones_gradients(model):
    # The first backward releases the forward's state; the second runs that forward again.
    q, k, v, do = _inputs((1, 2, 16, 8), 2, seed=23)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = fbt.scaled_dot_product_attention(*leaves, is_causal=True, model=model)
    o.backward(do, retain_graph=True)
    first = [t.grad.clone() for t in leaves]
    o.backward(do)
    for t, g in zip(leaves, first):
        np.testing.assert_array_equal(_bits(t.grad.double().numpy()), _bits((2 * g).double().numpy()))
    with pytest.raises(RuntimeError, match="second time"):  # PyTorch's own error, graph freed
        o.backward(do)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_fp32_and_fp64_controls_keep_their_precision_under_autocast(dtype):
    # CPU autocast ran the fp32 control's matmuls in bf16 (error 3e-3 against float64, silently).
    q, k, v, _ = _inputs((1, 2, 16, 8), 2, seed=24, dtype=dtype)
    model = "fp32" if dtype == torch.float32 else "fp64"
    outside = fbt.scaled_dot_product_attention(q, k, v, model=model)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        inside = fbt.scaled_dot_product_attention(q, k, v, model=model)
    assert inside.dtype == dtype and torch.equal(inside, outside)
    want = _top_left_attention_f64(*(t.double().numpy() for t in (q, k, v)), 1 / math.sqrt(8), offset=10 ** 6)
    assert np.max(np.abs(inside.double().numpy() - want)) < (1e-6 if dtype == torch.float32 else 1e-13)


def test_model_formats_knows_the_controls_and_the_exact_reference():
    # Found by the Python audit: model_formats("fp32") (and "fp64", "exact") was an unknown
    # kernel model, though scaled_dot_product_attention takes all three, so a loop over the
    # training study's arms broke on its controls. Their facts are checked against what the
    # models compute: the fp32 control's O lies on fp32's grid, the fp64 control's and the exact
    # reference's do not.
    rng = np.random.default_rng(11)
    x = torch.tensor(rng.standard_normal((1, 6, 8)), dtype=torch.float64)
    for control, dtype in (("fp32", torch.float32), ("fp64", torch.float64)):
        facts = fbt.model_formats(control)
        assert facts["input"] == facts["output"] == control and facts["backward"] and not facts["seeded"]
        o = fbt.scaled_dot_product_attention(x, x, x, model=control)
        on_fp32_grid = torch.equal(o.to(torch.float32).to(torch.float64), o)
        assert on_fp32_grid == (dtype == torch.float32)  # computed in the output format it names
        with pytest.raises(ValueError, match=f"dtype: the control '{control}' is PyTorch's math attention"):
            fbt.model_formats(control, dtype="bf16")
    exact = fbt.model_formats("exact")
    assert (exact["input"], exact["output"], exact["backward"]) == ("fp32", "fp64", True)
    assert fbt.model_formats("exact", dtype="bf16")["input"] == "bf16"
    o = fbt.scaled_dot_product_attention(x, x, x, model="exact").detach().numpy()
    assert np.any(o.astype(np.float32).astype(np.float64) != o)  # outputs not rounded to fp32
    with pytest.raises(ValueError, match="sfu: the exact reference is no kernel model"):
        fbt.model_formats("exact", sfu="correct")
    with pytest.raises(ValueError, match="dtype: 'fp64'"):
        fbt.model_formats("exact", dtype="fp64")
    # An unknown name lists the controls beside the kernel models.
    with pytest.raises(ValueError, match=r"unknown kernel model 'fa2-sm81' .*; and the controls fp32, fp64, exact\)"):
        fbt.model_formats("fa2-sm81")
    with pytest.raises(ValueError, match=r"and the controls fp32, fp64, exact\)"):
        fbt.scaled_dot_product_attention(x, x, x, model="fa2-sm81")


def test_numpy_flags_and_a_zero_dimensional_dropout_are_taken_as_their_values():
    # Found by the Python audit: is_causal=np.bool_(True) was a TypeError here while
    # flashbits.attention takes it, and dropout_p=torch.tensor(0.0) was refused as "tensor(0.)".
    # The reference is flashbits.attention on the same inputs (bf16 values, top-left mask).
    q = torch.randn(1, 2, 8, 16).to(torch.bfloat16).to(torch.float32)
    got = fbt.scaled_dot_product_attention(q, q, q, is_causal=np.bool_(True), dropout_p=torch.tensor(0.0),
                                           enable_gqa=np.bool_(False), model="fa2-sm80")
    want = fb.attention(q.numpy().astype(np.float64), q.numpy().astype(np.float64), q.numpy().astype(np.float64),
                        "fa2-sm80", causal="top-left").o
    assert np.array_equal(got.numpy().astype(np.float64), want)
    with pytest.raises(ValueError, match=r"^dropout_p: 0\.10000000149011612; the kernel models have no dropout"):
        fbt.scaled_dot_product_attention(q, q, q, dropout_p=torch.tensor(0.1), model="fa2-sm80")
    with pytest.raises(TypeError, match=r"^is_causal: expected True or False, got int$"):
        fbt.scaled_dot_product_attention(q, q, q, is_causal=1, model="fa2-sm80")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_negated_view_is_read_as_the_values_it_denotes(dtype):
    # Found by the Python audit: a ._neg_view() tensor (what torch's autograd and some ops hand
    # on lazily) raised torch's "Can't call numpy() on Tensor that has negative bit set". Its
    # values are the negation, exact in any format; the reference is flashbits.attention on them.
    y = torch.randn(1, 2, 8, 16, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16).to(dtype)
    x = y._neg_view()
    assert x.is_neg()
    negated = -y.to(torch.float64).numpy()
    got = fbt.scaled_dot_product_attention(x, x, x, model="fa2-sm90")
    want = fb.attention(negated, negated, negated, "fa2-sm90").o
    assert np.array_equal(got.to(torch.float64).numpy(), want)
    assert fb.round(torch.tensor([1.5, -2.25], dtype=dtype)._neg_view(), "bf16").values.tolist() == [-1.5, 2.25]


def test_a_meta_tensor_is_refused_naming_the_argument_and_its_device():
    # Found by the Python audit: fb.round(meta) raised torch's NotImplementedError.
    with pytest.raises(ValueError, match=r"^x: a tensor on device 'meta' has a shape and a dtype but no values"):
        fb.round(torch.empty(3, device="meta"), "bf16")
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match=r"^k: a tensor on device 'meta'"):
        fb.attention(q, torch.empty(1, 1, 4, 8, device="meta"), q, "fa2-sm80")


def test_decode_refuses_torchs_int16_view_of_bf16_whatever_its_signs():
    # Found by the Python audit: [1, 2] decoded, [1, -2] failed with "-16384 is not a bit
    # pattern (negative)" and no advice; both are the same kind of array (bf16 bits as int16).
    for values in ([1.0, 2.0], [1.0, -2.0]):
        bits = torch.tensor(values).bfloat16().view(torch.int16)
        with pytest.raises(ValueError, match=r"^bits: an int16 array is ambiguous.*\.view\(numpy\.uint16\)"):
            fb.decode(bits, "bf16")
        # The advice, followed: bf16 1.0, 2.0 and -2.0 (exact in bf16) come back.
        assert fb.decode(bits.numpy().view(np.uint16), "bf16").tolist() == values


def test_the_modules_namespace_holds_no_future_import():
    # Found by the Python audit: `from __future__ import annotations` left `annotations` public.
    public = {n for n in dir(fbt) if not n.startswith("_")}
    assert "annotations" not in public
    # Beyond __all__ only the package's warnings, re-exported where the module docstring names them.
    assert public - set(fbt.__all__) == {"ApproximateModelWarning", "UnmeasuredShapeWarning"}

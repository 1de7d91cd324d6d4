"""A rollout's linear layers on weights laid out once for the CPU's bf16 matrix kernels.

Under bf16 autocast on a CPU, `F.linear` hands each product to oneDNN with the weight in its plain layout, and
oneDNN rearranges the weight into its blocked layout on every call: at a decoding pass's few rows that
rearranging costs about as much as the product itself. `packed_linears` rearranges each weight once per
rollout (`torch.ops.mkldnn._reorder_linear_weight`, what inductor does for a frozen CPU model) and runs the
products on it (`_linear_pointwise`).

The values stay `F.linear`'s bit for bit, or the packed product is not used: the first product of each
weight shape at each row count runs both ways, and that (shape, rows) takes the packed product from then on
only if the two were equal (`_VERDICTS`, for the process). A kernel choice is made from the shapes alone,
so one comparison settles every later product of that shape and row count. Rows beyond `MAX_ROWS` (a
prefill, a scoring pass) keep `F.linear`: there the packed product is no faster and less often equal.
"""
from __future__ import annotations

import contextlib

import torch

MAX_ROWS = 64
"""Products of at most this many rows (tokens of a pass) run packed; more go through `F.linear`."""

_VERDICTS: dict[tuple, bool] = {}
"""(out, in, has bias, rows) -> whether the packed product equals `F.linear`'s, measured once a process."""


def packing_works() -> bool:
    """Whether this torch and CPU have oneDNN's bf16 products (the AVX2-only kinds have no native bf16,
    where a run's bf16 is off anyway)."""
    mkldnn = getattr(torch.ops, "mkldnn", None)
    return (torch.backends.mkldnn.is_available() and mkldnn is not None
            and hasattr(mkldnn, "_linear_pointwise") and bool(mkldnn._is_mkldnn_bf16_supported()))


def _product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] (bf16) times a packed weight, plus bias: oneDNN's product on the packed layout."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _packed_forward(layer: torch.nn.Linear, original):
    """`layer`'s forward for the rollout: bf16 products on a weight packed once, `original` wherever
    autocast is off, the input is not float32/bf16, or the product's rows are many or not yet proved
    equal."""
    weight = layer.weight.detach().to(torch.bfloat16)  # autocast's own cast of the weight
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 32)
    bias = None if layer.bias is None else layer.bias.detach().to(torch.bfloat16)

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if (rows == 0 or rows > MAX_ROWS or x.dtype not in (torch.float32, torch.bfloat16)
                or not torch.is_autocast_enabled("cpu") or torch.get_autocast_dtype("cpu") != torch.bfloat16):
            return original(x)
        key = (*weight.shape, bias is not None, rows)
        verdict = _VERDICTS.get(key)
        if verdict is False:
            return original(x)
        out = _product(x.to(torch.bfloat16), packed, bias)
        if verdict is None:
            plain = original(x)
            _VERDICTS[key] = verdict = bool(plain.dtype == out.dtype and torch.equal(plain, out))
            return plain
        return out
    return forward


def _packable(layer: torch.nn.Module) -> bool:
    w = getattr(layer, "weight", None)
    return (type(layer) is torch.nn.Linear and type(w) is torch.nn.Parameter and w.device.type == "cpu"
            and w.dtype in (torch.float32, torch.bfloat16))


@contextlib.contextmanager
def packed_linears(model: torch.nn.Module, enabled: bool):
    """For the duration of a rollout under bf16 autocast on a CPU (`enabled`), every plain `nn.Linear` of
    `model` runs its few-row products on its weight packed once (the module's docstring); the layers are
    restored on exit. Only under `torch.no_grad`: the packed product records no graph. The weights must
    not change inside."""
    layers = [m for m in model.modules() if _packable(m)] if enabled and packing_works() else []
    assert not layers or not torch.is_grad_enabled(), "packed_linears runs under torch.no_grad"
    own = [layer.__dict__.get("forward") for layer in layers]  # a forward set on the instance (hooks) is put back
    for layer in layers:
        layer.forward = _packed_forward(layer, layer.forward)
    try:
        yield
    finally:
        for layer, forward in zip(layers, own):
            if forward is None:
                del layer.forward
            else:
                layer.forward = forward

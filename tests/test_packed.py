"""A rollout's products on weights packed once (`cotrain.models.packed`), and the allocator's settings
(`cotrain.allocator`): the samples stay those of the plain layers bit for bit, a product that would differ is
never used, and the settings leave alone a process told to keep its own."""
import dataclasses

import pytest
import torch

from cotrain import allocator
from cotrain.config import ModelConfig
from cotrain.models import packed
from cotrain.models.build import build_model
from cotrain.models.generate import _generate

needs_packing = pytest.mark.skipif(not packed.packing_works(), reason="this CPU has no oneDNN bf16 products")


@pytest.fixture(scope="module")
def nano():
    return build_model(ModelConfig(preset="nano"), seed=0)


def _rollout(model, tok, **extra):
    prompts = [tok(q)["input_ids"] for q in ["1+2\n", "12+34-5\n", "7\n", "9-9\n"]]
    kw = dict(max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=1.3, top_p=1.0,
              greedy=False, seed=5, bf16=True, group_size=3, **extra)
    return _generate(model, prompts, 0, **kw)


def _assert_same(a, b):
    for f in dataclasses.fields(a):
        assert torch.equal(getattr(a, f.name), getattr(b, f.name)), f.name


@needs_packing
def test_packed_products_give_the_plain_layers_rollout_bit_for_bit(nano, monkeypatch):
    """Under bf16 autocast the rollout on packed weights is the plain layers' rollout, rows leaving the batch
    included; the packed products did run (a verdict of equal is recorded), and every layer is itself again
    after."""
    model, tok = nano
    monkeypatch.setattr(packed, "_VERDICTS", {})
    calls = []
    product = packed._product
    monkeypatch.setattr(packed, "_product", lambda *a: calls.append(1) or product(*a))
    with_packing = _rollout(model, tok)
    assert 0 < with_packing.truncated.sum() < len(with_packing.truncated)  # a row ends while others go on
    assert calls and any(packed._VERDICTS.values()), packed._VERDICTS
    assert not any("forward" in m.__dict__ for m in model.modules())
    monkeypatch.setattr(packed, "packing_works", lambda: False)
    _assert_same(with_packing, _rollout(model, tok))


@needs_packing
def test_a_packed_product_that_differs_is_never_used(nano, monkeypatch):
    """A product that is not `F.linear`'s bit for bit (here: off by one everywhere) is caught by its first
    comparison: that (shape, rows) goes through `F.linear` from then on, so the rollout is the plain one."""
    model, tok = nano
    monkeypatch.setattr(packed, "_VERDICTS", {})
    product = packed._product
    monkeypatch.setattr(packed, "_product", lambda *a: product(*a) + 1)
    wrong = _rollout(model, tok)
    assert packed._VERDICTS and not any(packed._VERDICTS.values())
    monkeypatch.setattr(packed, "packing_works", lambda: False)
    _assert_same(wrong, _rollout(model, tok))


@needs_packing
def test_packing_keeps_a_forward_set_on_the_layer_and_stays_out_of_fp32_and_graphs(nano):
    """A forward already set on a layer instance (a hook library's) is put back on exit; outside bf16
    autocast the packed layer is the plain one; with gradients on, packing refuses."""
    model, _ = nano
    layer = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    own = layer.forward
    layer.forward = lambda x: own(x)
    mine = layer.forward
    x = torch.randn(3, layer.in_features)
    try:
        with torch.no_grad(), packed.packed_linears(model, True):
            assert layer.forward is not mine
            assert torch.equal(layer(x), own(x))  # no autocast: the plain float32 product
        assert layer.forward is mine
    finally:
        del layer.forward
    with pytest.raises(AssertionError, match="no_grad"), packed.packed_linears(model, True):
        pass


def test_allocator_settings_keep_out_of_a_process_told_otherwise(monkeypatch):
    """`COTRAIN_MALLOC=system` or any `MALLOC_*` setting in the environment leaves the allocator alone (glibc
    is not even asked); the choice is made once a process."""
    def no_glibc():
        raise AssertionError("the allocator was touched")
    monkeypatch.setattr(allocator, "_glibc", no_glibc)
    for environ, said in (({"COTRAIN_MALLOC": "system"}, "COTRAIN_MALLOC=system"),
                          ({"MALLOC_ARENA_MAX": "2"}, "MALLOC_*")):
        monkeypatch.setattr(allocator, "TUNED", None)
        assert said in allocator.tune(environ)
        assert allocator.tune({}) == allocator.TUNED  # once a process: not asked again


def test_allocator_settings_are_set_in_order_and_a_refusal_is_said(monkeypatch):
    """mallopt is asked the mmap threshold first (the trim threshold without it maps more afresh, not less);
    a refused setting stops there and is said."""
    asked = []

    class Libc:
        def __init__(self, refuse):
            self.refuse = refuse

        def mallopt(self, key, value):
            asked.append(key)
            return 0 if key == self.refuse else 1
    for refuse, said in ((None, allocator.DESCRIPTION), (allocator.M_MMAP_THRESHOLD, "refused")):
        asked.clear()
        monkeypatch.setattr(allocator, "TUNED", None)
        monkeypatch.setattr(allocator, "_glibc", lambda refuse=refuse: Libc(refuse))
        assert said in allocator.tune({})
        assert asked == ([allocator.M_MMAP_THRESHOLD, allocator.M_TRIM_THRESHOLD, allocator.M_TOP_PAD]
                         if refuse is None else [allocator.M_MMAP_THRESHOLD])

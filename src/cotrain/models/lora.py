"""LoRA through peft: adapters trained on a frozen base, that base as the frozen reference, and
saving as a plain merged model plus the adapter.

peft is an optional dependency (`pip install 'cotrain[lora]'`), imported only when a run asks for
adapters (`model.lora_r > 0`) or a peft model is saved or restored.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch import nn

from cotrain.config import ModelConfig
from cotrain.errors import UserError

ADAPTER_DIR = "adapter"
"""Subdirectory of a saved LoRA model holding its adapter, as peft's `save_pretrained` writes it."""


def _peft():
    try:
        import peft
    except ImportError:
        raise UserError("model.lora_r > 0 needs peft: pip install 'cotrain[lora]'") from None
    return peft


def is_lora(model) -> bool:
    """Whether `model` is a peft model (never, while peft was not imported)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def apply_lora(model, cfg: ModelConfig):
    """`model` wrapped with fresh LoRA adapters of rank `cfg.lora_r` on `cfg.lora_target`. B starts at
    zero, so the outputs are unchanged; the base is frozen and only the adapters train. peft keeps the
    adapters in float32 when the base is in bfloat16 or float16."""
    peft = _peft()
    config = peft.LoraConfig(task_type="CAUSAL_LM", r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                             lora_dropout=cfg.lora_dropout, target_modules=cfg.lora_target)
    try:
        with warnings.catch_warnings():  # peft reads transformers' deprecated `is_gradient_checkpointing`
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
            return peft.get_peft_model(model, config)
    except ValueError as err:  # e.g. a target module the model does not have
        raise UserError(f"model.lora_target {cfg.lora_target!r}: {str(err).strip().splitlines()[0]}") from None


class AdapterOff(nn.Module):
    """The frozen base of a peft model, read through the model itself with its adapters switched off:
    a reference model that costs no memory.

    A forward pass runs without gradients and in eval mode (as a copied reference in eval mode would:
    no dropout, and a KV cache even under gradient checkpointing), then restores the model's mode.
    `parameters()` yields the wrapped model's, so its device is found as any model's. The model is not
    a submodule: `.eval()`, `.to()` or `.requires_grad_()` of the reference never reach the trained model.
    """

    def __init__(self, model):
        super().__init__()
        self.__dict__["peft_model"] = model
        self.eval()

    def forward(self, *args, **kwargs):
        model = self.peft_model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad(), model.disable_adapter():
                return model(*args, **kwargs)
        finally:
            model.train(was_training)

    def parameters(self, recurse: bool = True):
        return self.peft_model.parameters(recurse)


def merged_weights(model):
    """(name, tensor) of each weight of the plain model a peft model computes, W + (alpha / r) B A in
    each adapted layer, named as the base architecture's checkpoint and on the model's device.

    Computed one layer at a time rather than by merging in place (unmerging after would round the
    frozen base away from the reference) or by merging a copy (a second model in memory).
    """
    lora_layer = _peft().tuners.lora.LoraLayer
    base = model.get_base_model()
    adapted = {f"{name}.base_layer.weight": module for name, module in base.named_modules()
               if isinstance(module, lora_layer)}
    for name, t in base.state_dict().items():
        if "lora_" in name:
            continue
        t = t.detach()
        module = adapted.get(name)
        if module is not None:
            merged = t.float()
            for adapter in module.active_adapters:
                merged = merged + module.get_delta_weight(adapter).detach().float()
            t = merged.to(t.dtype)
        yield name.replace(".base_layer.", "."), t


def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """`merged_weights` as a state dict on the CPU (what `save_lora` writes)."""
    return {name: t.cpu() for name, t in merged_weights(model)}


def save_lora(model, path: Path) -> None:
    """Write a peft model as the plain merged model (loadable by any tool, `init:` and `cotrain eval`)
    plus its adapter in `adapter/` (what a resumed run restores)."""
    model.get_base_model().save_pretrained(path, state_dict=merged_state_dict(model))
    model.save_pretrained(path / ADAPTER_DIR)


def load_adapter(model, path: Path) -> None:
    """Restore in place the adapter `save_lora` wrote to `path`.

    The frozen base is the one the run rebuilt from its own start, so it must be the base the adapter
    was trained on: the weights outside the adapted layers are compared with the saved ones first.
    """
    from safetensors import safe_open
    from safetensors.torch import load_file

    peft = _peft()
    adapter = path / ADAPTER_DIR / "adapter_model.safetensors"
    if not adapter.is_file():
        raise UserError(f"{path} holds no LoRA adapter ({ADAPTER_DIR}/): it was not saved by a run with model.lora_r > 0")
    base = model.get_base_model().state_dict()
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            for key in f.keys():
                if key in base and not torch.equal(f.get_tensor(key), base[key].detach().cpu()):
                    raise UserError(f"cannot restore the adapter of {path}: the model's frozen base differs from the one "
                                    f"it was trained on (at {key}); resume with the run's own init and model config")
    try:
        result = peft.set_peft_model_state_dict(model, load_file(str(adapter)))
    except RuntimeError as err:  # shapes differ: another lora_r or lora_target
        raise UserError(f"cannot restore the adapter of {path}: {str(err).strip().splitlines()[-1].strip()} "
                        "(resume with the run's own model.lora_r and model.lora_target)") from None
    if result.unexpected_keys:
        raise UserError(f"cannot restore the adapter of {path}: {result.unexpected_keys[0]} is not in the model "
                        "(resume with the run's own model.lora_target)")

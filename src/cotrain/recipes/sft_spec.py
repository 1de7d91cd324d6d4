"""What `sft` is beside its loop (recipes/sft.py), free of torch: its flags."""
from __future__ import annotations

from cotrain.declare import Recipe

RECIPES = {"sft": Recipe("sft", labels="reference solutions", control=True, groups=False)}

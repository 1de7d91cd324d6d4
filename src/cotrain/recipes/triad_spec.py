"""What `triad` is beside its loop (recipes/triad.py), free of torch: its flags."""
from __future__ import annotations

from cotrain.declare import SELF_PLAY, Recipe

RECIPES = {"triad": Recipe("triad", roles=SELF_PLAY, label_free=True, fsdp=False, labels="none", guarded=True)}

"""cotrain: RL co-training of language models that check each other.

    import cotrain
    cotrain.run("configs/smoke.yaml", out="runs/smoke")   # what `cotrain run` does (cotrain/api.py, docs/api.md)
    cotrain.load_run("runs/smoke").eval

Importing the package loads neither torch nor transformers; each function loads what it needs.
"""
from cotrain.errors import UserError

__all__ = ["UserError", "check", "evaluate", "load_run", "register_recipe", "register_task", "run", "RunRecord"]


def __getattr__(name: str):
    if name in ("check", "evaluate", "load_run", "register_recipe", "register_task", "run", "RunRecord"):
        from cotrain import api

        return getattr(api, name)
    raise AttributeError(f"module 'cotrain' has no attribute {name!r}")

"""Data parallelism over `torchrun` processes (gloo on CPU, NCCL on GPU), by torch.distributed alone.

The scheme keeps every recipe's code the same in one process and in many:

  * every rank runs the same control flow on the same data: the step's prompts, rewards, advantages,
    schedules and metrics are computed identically everywhere (they are cheap and deterministic);
  * the two costly parts are split: a rollout's prompt groups are sharded by rank (a group's G samples
    stay on one rank) and the results all-gathered, so every rank then holds the whole rollout; the
    training forward and backward passes are sharded by group, and gradients are averaged over ranks
    before clipping, so the optimizer sees exactly the gradient of the whole batch;
  * AdamW then steps identically on every rank, and the replicas stay equal without a broadcast;
  * rank 0 alone writes logs, checkpoints and plots (`on_main`); a write's failure reaches every rank.

With one process (no `torchrun`), every function here is a no-op.
"""
from __future__ import annotations

import datetime
import os
import time

import torch
import torch.distributed as td

from cotrain.errors import UserError

_sync_seconds = 0.0  # cumulative wall time spent in collectives (the `time/sync` metric)


def device() -> torch.device:
    """This process's default device: its GPU when there is one (`init` has chosen it under torchrun), else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def init() -> None:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); nothing otherwise."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or td.is_initialized():
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "nccl"
    else:
        backend = "gloo"
    td.init_process_group(backend, timeout=datetime.timedelta(minutes=int(os.environ.get("COTRAIN_DIST_TIMEOUT_MIN", "30"))))


def close(wait: bool = True) -> None:
    """Leave the process group; with `wait`, once every rank is done (rank 0 may still be writing plots:
    a rank that tears its group down while another still uses it can abort the run). After an error,
    leave at once: the other ranks may never reach the barrier."""
    if td.is_initialized():
        if wait:
            td.barrier()
        td.destroy_process_group()


def world() -> int:
    return td.get_world_size() if td.is_initialized() else 1


def rank() -> int:
    return td.get_rank() if td.is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def sync_seconds() -> float:
    """Cumulative seconds spent in collectives by this process."""
    return _sync_seconds


def _timed(fn, *args, **kwargs):
    global _sync_seconds
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    _sync_seconds += time.perf_counter() - t0
    return out


def shard(n: int, r: int | None = None, w: int | None = None) -> range:
    """The contiguous block of `range(n)` of rank r among w: sizes differ by at most one, lower ranks first."""
    r, w = rank() if r is None else r, world() if w is None else w
    base, extra = divmod(n, w)
    start = r * base + min(r, extra)
    return range(start, start + base + (1 if r < extra else 0))


def gather_objects(obj) -> list:
    """[obj of rank 0, obj of rank 1, ...] on every rank (picklable objects; tensors on the CPU)."""
    if world() == 1:
        return [obj]
    out = [None] * world()
    _timed(td.all_gather_object, out, obj)
    return out


def map_shards(fn, items: list) -> list:
    """[fn(x) for x in items], each item computed by one process (its shard) and the results gathered:
    every process gets the same list even where `fn` is not deterministic (a grader with a time limit),
    and the work is split."""
    if world() == 1:
        return [fn(x) for x in items]
    mine = shard(len(items))
    return [y for part in gather_objects([fn(items[i]) for i in mine]) for y in part]


def barrier() -> None:
    if world() > 1:
        _timed(td.barrier)


def all_reduce_grads(model: torch.nn.Module) -> None:
    """Average the gradients of `model`'s trainable parameters over ranks, in one flat buffer."""
    if world() == 1:
        return
    grads = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    _timed(td.all_reduce, flat)
    flat /= world()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def all_reduce_sum(values: list[float]) -> list[float]:
    """Elementwise sum over ranks of a list of floats."""
    if world() == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    if td.get_backend() == "nccl":
        t = t.cuda()
    _timed(td.all_reduce, t)
    return t.cpu().tolist()


def on_main(fn, *args, **kwargs):
    """Run `fn` on rank 0 only; every rank returns after it finished. A UserError or OSError raised
    on rank 0 is raised on every rank (so no rank waits forever for one that failed)."""
    if world() == 1:
        return fn(*args, **kwargs)
    result, error = None, None
    if is_main():
        try:
            result = fn(*args, **kwargs)
        except (UserError, OSError) as err:
            error = str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
    [error] = _broadcast_object(error)
    if error is not None:
        raise UserError(error)
    return result


def _broadcast_object(obj) -> list:
    box = [obj]
    _timed(td.broadcast_object_list, box, 0)
    return box


# ---------------------------------------------------------------- FSDP2: weights, gradients and optimizer states sharded


def is_sharded(model) -> bool:
    """Whether `model` is wrapped by FSDP2 (`shard_model`)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def fsdp_on_cpu() -> bool:
    """FSDP2 runs on CPU tensors from torch 2.7 on (its CPU streams gained the event calls it makes)."""
    return torch.__version__ >= "2.7"  # a TorchVersion: compared as a version, local tags (+cpu) aside


def shard_model(model):
    """Shard `model` over the processes with FSDP2 (`fully_shard`): each decoder layer is one unit, and
    the root holds the rest (embeddings, head, final norm). Parameters become DTensors; every forward
    and backward pass of the model is then a collective that all processes run together."""
    from torch.distributed.fsdp import fully_shard

    device = next(model.parameters()).device
    if device.type == "cpu" and not fsdp_on_cpu():
        raise UserError(f"train.fsdp on the CPU needs torch >= 2.7 (its CPU streams; this is torch "
                        f"{torch.__version__}); on GPUs FSDP2 works from torch 2.6, or set train.fsdp: false")
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise UserError(f"train.fsdp: {type(model).__name__} has no model.layers to shard; set train.fsdp: false")
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    model._cotrain_version = 0  # bumped by every optimizer step: the rollout replica's staleness
    total = sum(p.numel() for p in model.parameters())
    shares = gather_objects(sum(p.to_local().numel() for p in model.parameters()) / total)  # a collective
    if is_main():
        print(f"fsdp      {type(model).__name__} sharded over {len(shares)} processes: each holds "
              + ", ".join(f"{s:.1%}" for s in shares) + f" of its {total:,} parameters (and of their gradients "
              "and optimizer states)", flush=True)
    return model


def full_state_dict(model) -> dict:
    """The whole state dict of a sharded model, on every process (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return _timed(get_model_state_dict, model, options=StateDictOptions(full_state_dict=True))


def load_full_state_dict(model, state: dict) -> None:
    """Load a whole (unsharded) state dict into a sharded model; each process keeps its shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    _timed(set_model_state_dict, model, state, options=StateDictOptions(full_state_dict=True, strict=False))
    model._cotrain_version += 1


def full_optimizer_state(model, opt) -> dict:
    """The whole optimizer state of a sharded model, keyed by parameter name, on rank 0 (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return _timed(get_optimizer_state_dict, model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_full_optimizer_state(model, opt, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    _timed(set_optimizer_state_dict, model, opt, state, options=StateDictOptions(full_state_dict=True))


def plain_copy(model):
    """A plain (unsharded) model holding the current weights of sharded `model`, on its device, frozen:
    what rollouts, evaluation and saving use. Kept on the model and refreshed after optimizer steps;
    every process calls it at the same points (a collective when stale)."""
    if not is_sharded(model):
        return model
    replica = getattr(model, "_cotrain_replica", None)
    if replica is not None and model._cotrain_replica_version == model._cotrain_version:
        return replica
    state = full_state_dict(model)
    if replica is None:
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            replica = AutoModelForCausalLM.from_config(model.config)
        replica.to_empty(device=_local_device(model))
        dtype = next(model.parameters()).dtype
        for p in replica.parameters():  # the weights' dtype; buffers (rotary frequencies) stay as they are
            p.data = p.data.to(dtype)
        for name, buf in model.named_buffers():  # rotary frequencies: not in the state dict
            replica.get_buffer(name).copy_(buf)
        replica.eval().requires_grad_(False)
        object.__setattr__(model, "_cotrain_replica", replica)  # not a submodule: FSDP must not see it
    replica.load_state_dict(state, strict=False)
    replica.tie_weights()
    model._cotrain_replica_version = model._cotrain_version
    return replica


def _local_device(model) -> torch.device:
    p = next(model.parameters())
    return p.to_local().device if hasattr(p, "to_local") else p.device


def lockstep(n: int) -> int:
    """The most micro-batches any process runs (a sharded model's passes are collectives, so every
    process runs as many; those with fewer run empty ones)."""
    if world() == 1:
        return n
    t = torch.tensor([n], dtype=torch.long)
    if td.get_backend() == "nccl":
        t = t.cuda()
    _timed(td.all_reduce, t, td.ReduceOp.MAX)
    return int(t.item())

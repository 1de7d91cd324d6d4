"""Rollouts with vLLM, colocated with the trainer on the same GPU (`rollout.engine: vllm`).

An optional replacement of `cotrain.models.generate.generate` for real-world runs: the same
`Rollout`, sampled by a `vllm.LLM` that lives in the trainer's process and shares its GPU (what
TRL's GRPOTrainer calls `vllm_mode="colocate"`). vLLM is imported only when an engine is built, so
nothing else in cotrain needs it. After each optimizer update the trainer pushes its weights into the
engine with `sync_weights`; between updates the engine can free its GPU memory with `sleep`.

The loop around it:

    engine = VllmEngine(model_path, seed=rank_seed)
    for step in ...:
        rollout = engine.generate(prompts, group_size=G, ..., seed=step_seed)   # Rollout.logp = sampler logp
        engine.sleep()                                                          # no-op without sleep mode
        ... recompute logp with the trainer, weight the loss by truncated_importance_weights, step ...
        engine.wake_up()
        engine.sync_weights(model)

Differences from the HF path: `Rollout.entropy` is zeros (vLLM reports log-probs of sampled tokens,
not whole distributions), and `Rollout.logp` comes from other kernels in another dtype, so it differs
slightly from the trainer's log-probs even with equal weights; `cotrain.rl.losses.truncated_importance_weights`
corrects for that.
"""
from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterator

import torch
from torch import nn

from cotrain.errors import UserError
from cotrain.models.generate import Rollout, _empty_rollout, left_pad


def _is_peft(model: nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_adapter")


def vllm_weight_items(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of each weight of a trainer model, named as vLLM's `model.load_weights` expects.

    A plain `transformers` model already uses the checkpoint names vLLM loads; its tied weights come
    once, as `named_parameters` yields them, and vLLM re-ties them itself. A peft model yields the
    weights of the plain model it computes, W + BA (`cotrain.models.lora.merged_weights`, one layer at a
    time, the trainer's base untouched), named as the base checkpoint: vLLM holds no adapters.

    Tensors of a plain model are detached views of its parameters, not copies.
    """
    if _is_peft(model):
        from cotrain.models.lora import merged_weights

        params = {n.replace(".base_layer", "") for n, _ in model.get_base_model().named_parameters()}
        yield from ((n, t) for n, t in merged_weights(model) if n in params)  # tied weights once
        return
    for name, param in model.named_parameters():
        yield name, param.detach()


def _request_seed(seed: int, prompt_index: int) -> int:
    """A 31-bit seed for the request of one prompt, a stable function of (seed, prompt index).

    vLLM gives sample j of a request the seed (request seed + j), so each (seed, prompt, sample)
    draws its own stream.
    """
    return int.from_bytes(hashlib.sha256(repr((seed, "vllm", prompt_index)).encode()).digest()[:4], "big") >> 1


def _set_launcher_env() -> None:
    """vLLM's `external_launcher` backend joins the torch.distributed world described by these
    variables: torchrun sets them; a single-process run gets a world of one on a free port."""
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "localhost")):
        os.environ.setdefault(key, value)
    if not os.environ.get("MASTER_PORT"):
        with socket.socket() as s:
            s.bind(("", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])


def _completion(output, eos_id: int) -> tuple[list[int], list[float], bool]:
    """Token ids, sampler log-probs and whether eos ended it, of one vLLM `CompletionOutput`.

    The engine stops only at `eos_id` (see `generate`), with finish_reason "stop", or at max_tokens
    with "length". vLLM versions differ on whether the stop token is kept in `token_ids`; it is put
    back when missing so that a finished completion ends with eos as on the HF path. vLLM reports
    no log-prob for a token it left out: it gets 0.
    """
    ids = list(output.token_ids)
    assert output.logprobs is not None and len(output.logprobs) >= len(ids), "request logprobs=0 from vLLM"
    # with logprobs=0 each step's dict holds the sampled token (with logprobs=k, also the top k)
    logp = [step[token].logprob for step, token in zip(output.logprobs, ids)]
    if output.finish_reason == "stop" and ids[-1:] != [eos_id]:
        ids.append(eos_id)
        logp.append(0.0)
    if eos_id in ids:  # cut after the first eos, as the HF path stops there
        end = ids.index(eos_id) + 1
        return ids[:end], logp[:end], True
    return ids, logp, False


class VllmEngine:
    """A `vllm.LLM` colocated with the trainer, for rollouts.

    It runs in the trainer's process (vLLM's `external_launcher` backend, one engine per rank, as TRL's
    colocate mode does), takes prompts as token ids and returns token ids (no text is decoded),
    and samples with the temperature and top-p applied to the log-probs it reports
    (`logprobs_mode="processed_logprobs"`), so that `Rollout.logp` is the log-prob under the sampling
    distribution, as on the HF path.

    Args:
        model_path: the directory (written by `save_model`) or hub id the trainer's model was loaded
            from; it fixes the architecture and the initial weights.
        gpu_memory_utilization: share of the GPU's memory vLLM may take for its weights and KV cache;
            the rest is the trainer's.
        max_model_len: longest prompt + completion; None takes the model's maximum.
        dtype: dtype of vLLM's weights; the trainer's weights are cast to it on each sync.
        seed: seed of the engine's sampler, which draws the requests that carry no seed of their own.
        enable_sleep_mode: allow `sleep`/`wake_up` to free the engine's GPU memory during the update.
        tensor_parallel_size: GPUs per engine; with more than 1, the ranks of a group must pass the
            same prompts and seeds.
        max_num_batched_tokens: tokens per forward pass; kept small, as TRL does, because vLLM's memory
            profiler reserves room for a pass of this size.
    """

    def __init__(
        self,
        model_path: str,
        *,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        dtype: str = "bfloat16",
        seed: int = 0,
        enable_sleep_mode: bool = False,
        tensor_parallel_size: int = 1,
        max_num_batched_tokens: int = 4096,
    ):
        try:
            import vllm
        except ImportError:
            raise UserError("rollout.engine: vllm needs vLLM: `pip install vllm` on a GPU machine, "
                            "or set rollout.engine: hf") from None
        _set_launcher_env()
        self.llm = vllm.LLM(
            model=str(model_path),
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            tensor_parallel_size=tensor_parallel_size,
            enable_sleep_mode=enable_sleep_mode,
            distributed_executor_backend="external_launcher",  # in this process: its model is reachable for syncs
            logprobs_mode="processed_logprobs",                 # log-probs after temperature and top-p
        )
        self._sampling_params = vllm.SamplingParams
        self.enable_sleep_mode = enable_sleep_mode
        self._asleep = False
        self._weights_discarded = False  # after a level-2 sleep, until the next sync

    def generate(
        self,
        prompts: list[list[int]],
        *,
        group_size: int,
        max_new_tokens: int,
        eos_id: int,
        pad_id: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        greedy: bool = False,
        seed: int | None = None,
    ) -> Rollout:
        """Sample `group_size` completions of each prompt; rows of a group are contiguous, groups in prompt order
        (`top_k` 0: every token, as on the HF path; the config refuses top-k or top-p with this engine).

        Returns the `Rollout` of `cotrain.models.generate.generate`: prompts left-padded and repeated per
        row, completions right-padded with `pad_id` to the longest one, masks 1 up to and including eos,
        `logp` the sampler's log-prob of each token, `entropy` zeros (not reported by vLLM), `truncated`
        True where no eos came within `max_new_tokens`.

        Generation stops at `eos_id` only (the model's own eos tokens are ignored), as on the HF path.
        With a `seed`, each prompt's request gets a seed derived from (seed, prompt index), so a rollout
        is reproducible whatever else the engine runs; without one, the engine's seed governs. Under
        torchrun each rank generates all the `prompts` it is given (`train.rollout.Sampler` gives each
        rank its share of a step's prompts and gathers the rollouts). Greedy
        decoding asks vLLM for one completion per prompt (it refuses n > 1 without sampling) and
        repeats it `group_size` times.
        """
        if not prompts:  # a process given no prompts of this step
            return _empty_rollout()
        assert not self._asleep, "the vLLM engine is asleep: call wake_up() before generate()"
        assert not self._weights_discarded, "a level-2 sleep discarded the vLLM weights: call sync_weights() first"
        n = 1 if greedy else group_size
        params = [
            self._sampling_params(
                n=n,
                temperature=0.0 if greedy else temperature,
                top_p=1.0 if greedy else top_p,
                top_k=-1 if greedy or top_k <= 0 else top_k,  # -1: every token (vLLM's "off")
                max_tokens=max_new_tokens,
                logprobs=0,                # the sampled token's log-prob
                stop_token_ids=[eos_id],
                ignore_eos=True,           # stop at eos_id only, not at the model's own eos tokens
                detokenize=False,
                seed=None if seed is None else _request_seed(seed, i),
            )
            for i in range(len(prompts))
        ]
        requests = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sampling_params=params,
                                     use_tqdm=False)
        assert len(requests) == len(prompts), "vLLM returned one output per prompt"
        rows = []
        for request in requests:
            assert len(request.outputs) == n, f"vLLM returned {len(request.outputs)} completions, asked for {n}"
            rows += [_completion(out, eos_id) for out in request.outputs for _ in range(group_size // n)]

        width = max((len(ids) for ids, _, _ in rows), default=0)
        completion_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)   # [N, T]
        completion_mask = torch.zeros((len(rows), width), dtype=torch.long)         # [N, T]
        logp = torch.zeros((len(rows), width))                                      # [N, T]
        truncated = torch.zeros(len(rows), dtype=torch.bool)                         # [N]
        for r, (ids, lps, ended) in enumerate(rows):
            completion_ids[r, :len(ids)] = torch.tensor(ids, dtype=torch.long)
            completion_mask[r, :len(ids)] = 1
            logp[r, :len(ids)] = torch.tensor(lps)
            truncated[r] = not ended
        prompt_ids, prompt_mask = left_pad(prompts, pad_id)                          # [B, P]
        prompt_ids, prompt_mask = (x.repeat_interleave(group_size, dim=0) for x in (prompt_ids, prompt_mask))
        return Rollout(prompt_ids, prompt_mask, completion_ids, completion_mask, logp, torch.zeros_like(logp), truncated)

    @torch.no_grad()
    def sync_weights(self, model: nn.Module) -> None:
        """Copy the trainer's current weights into the engine; call after each optimizer update.

        The engine's in-process model is loaded through its own `load_weights` (names mapped by
        `vllm_weight_items`), as TRL's colocate mode does; a peft model's weights are sent merged
        (W + BA, one layer at a time; the trainer's base is never modified). The prefix cache is then
        reset: its KV entries were computed with the old weights.

        Args:
            model: the trainer's model, unwrapped from DistributedDataParallel or not.
        """
        assert not self._asleep, "the vLLM engine is asleep: call wake_up() before sync_weights()"
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        self._vllm_model().load_weights(vllm_weight_items(model))
        self.llm.reset_prefix_cache()
        self._weights_discarded = False

    def sleep(self, level: int = 1) -> None:
        """Free the engine's GPU memory while the trainer updates; a no-op without `enable_sleep_mode`.

        Level 1 discards the KV cache and moves the weights to CPU memory; level 2 discards both, which
        is cheaper when `sync_weights` follows `wake_up` anyway (`generate` refuses to run before it).
        """
        if not self.enable_sleep_mode or self._asleep:
            return
        self.llm.sleep(level=level)
        self._asleep = True
        self._weights_discarded = level == 2

    def wake_up(self) -> None:
        """Reallocate what `sleep` freed; a no-op when the engine is awake."""
        if not self._asleep:
            return
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # hand the trainer's cached blocks back before vLLM allocates
        self.llm.wake_up()
        self._asleep = False

    def _vllm_model(self) -> nn.Module:
        """The engine's `nn.Module`, reachable because the engine runs in this process."""
        return self.llm.llm_engine.model_executor.driver_worker.model_runner.model

"""The memory plan: the estimated peak of each phase of a run (rollout, verification, each model's update,
evaluation) on one device, component by component, and which option brings a phase that does not fit
under the device's memory.

Every figure is bytes. The components of a decoder of L layers, hidden size d, MLP width f, key/value
width kv = kv_heads x head_dim and vocabulary V:

- weights: parameters x their dtype's bytes; a frozen reference copy when the KL term needs one and the
  model trains in full (LoRA's reference is its base model, no copy), held in bf16 under bf16 autocast
  (`models.build.in_compute_dtype`);
- autocast's copies: bf16 autocast on float32 weights keeps a bf16 copy of each weight it multiplies
  for the length of the region (a rollout, one micro-batch's forward and backward): parameters x 2;
- gradients: trainable parameters x their bytes, held from the first backward pass of an update to its
  optimizer step (`optimizer_step` frees them, so no other phase holds them);
- optimizer: AdamW's two moments, trainable parameters x 2 x their bytes, from the first step on; with
  `train.offload_optimizer` they wait in host memory and are on the device only during their model's
  optimizer step (a phase `step/<model>` of its own: weights, that model's gradients and moments, and
  the one temporary of AdamW's multi-tensor step, the size of its gradients: the square root of the
  second moment; on one H200 the plan's step phase was 34.5 GiB against 34.6 measured at 1.5B, 28.8
  without the temporary);
- the KV cache of a rollout: 2 x L x kv x rows x (prompt + new tokens) x the activations' bytes;
- a decode step's distribution work: rows x V x `DECODE_LOGIT_BYTES` (float32 logits, tempered,
  log-softmax, the float64 cumulative sum that samples), or the prefill's widest layer (prompts x
  tokens x (2 f + 2 d) activations) where that is larger;
- a micro-batch's saved activations: tokens x L x (`ACT_PER_D` d + `ACT_PER_F` f + `ACT_PER_KV` kv)
  (the float32 residual stream and norms, the MLP's four f-wide tensors and the keys and values, in
  the activations' bytes), plus completion tokens x V x `LOGIT_BYTES` (the logits, their gradient and
  the copy a slice or a concatenation of them makes; `token_logprobs` works in float32 chunks of
  16 MiB and keeps no float32 copy of the whole), plus the logits of the prompt
  positions where each row runs whole; with gradient checkpointing only each layer's input (4 d bytes a
  token) is kept, one layer's activations at a time are recomputed, and every row runs with its prompt;
- a vLLM engine: its `gpu_memory_utilization` share of the device while awake (with `rollout.sleep`
  awake in the rollout alone).

The coefficients were measured on a CPU (bench/memory_plan.py: the process's peak resident memory
above its start with glibc's allocation cache off, Llama shapes from 1M parameters to SmolLM2-135M's,
float32 and bf16 autocast); the same benchmark checks the whole plan against measured peaks.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

GiB = 2**30

ACT_PER_D = 40.0
"""Saved bytes per token, layer and unit of hidden size (float32 whatever the autocast: the residual
stream and the RMSNorms run in float32)."""
ACT_PER_F = {4: 16.0, 2: 8.3}
"""Saved bytes per token, layer and unit of MLP width, by activation bytes (float32 4, bf16 2)."""
ACT_PER_KV = {4: 8.0, 2: 4.0}
"""Saved bytes per token, layer and unit of key/value width, by activation bytes."""
LOGIT_BYTES = {4: 11.0, 2: 7.0}
"""Bytes per completion token and vocabulary entry of a training forward and backward, by activation
bytes: the logits, their gradient and the copy a slice or concatenation makes of it (`token_logprobs`
keeps no float32 copy of its own)."""
DECODE_LOGIT_BYTES = 30.0
"""Bytes per row and vocabulary entry of one decode step's sampling."""
LORA_RANK_FOR_FIX = 16
"""The LoRA rank the plan tries when it looks for what makes a phase fit."""


@dataclass(frozen=True)
class Shapes:
    """What the plan needs of a decoder-only transformer."""

    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def linear_in_out(self) -> int:
        """Sum of in + out features over the linear layers LoRA adapts ('all-linear': q, k, v, o, gate,
        up, down of every layer): a rank-r adapter has r x this many parameters."""
        d, q = self.hidden, self.heads * self.head_dim
        return self.layers * ((d + q) + 2 * (d + self.kv) + (q + d) + 2 * (d + self.intermediate)
                              + (self.intermediate + d))

    @classmethod
    def of(cls, config, params: int | None = None) -> Shapes:
        """The shapes of a transformers config (Llama, Qwen2, Mistral... style); `params` counted from it
        when not given (embeddings tied or not, biases of Qwen2's q, k, v)."""
        d, layers = config.hidden_size, config.num_hidden_layers
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or d // heads
        f, vocab = config.intermediate_size, config.vocab_size
        if params is None:
            q, kv = heads * head_dim, kv_heads * head_dim
            bias = (q + 2 * kv) if getattr(config, "model_type", "") == "qwen2" or getattr(config, "attention_bias", False) else 0
            per_layer = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d + bias
            tied = getattr(config, "tie_word_embeddings", True)
            params = vocab * d * (1 if tied else 2) + layers * per_layer + d
        return cls(params, layers, d, heads, kv_heads, head_dim, f, vocab)


KNOWN_SHAPES = {
    # config.json of the published checkpoints (tied embeddings)
    "Qwen/Qwen2.5-0.5B-Instruct": Shapes(494_032_768, 24, 896, 14, 2, 64, 4864, 151_936),
    "Qwen/Qwen2.5-1.5B-Instruct": Shapes(1_543_714_304, 28, 1536, 12, 2, 128, 8960, 151_936),
    "smollm2": Shapes(134_515_008, 30, 576, 9, 3, 64, 1536, 49_152),
}


@dataclass(frozen=True)
class Role:
    """One model of a run, as the plan sees it."""

    name: str
    shapes: Shapes
    weight_bytes: int = 4          # float32 4, bfloat16 2
    trains: bool = True
    lora_r: int = 0
    checkpointing: bool = False
    reference: bool = False        # a frozen copy for the KL term

    @property
    def trainable(self) -> int:
        if not self.trains:
            return 0
        return self.lora_r * self.shapes.linear_in_out if self.lora_r else self.shapes.params


@dataclass(frozen=True)
class Work:
    """The sizes of a run's phases: rows are sequences processed together."""

    rollout_rows: int              # a step's samples (prompts x G)
    prompt_tokens: int
    new_tokens: int
    micro_batch: int               # sequences per forward and backward of an update
    group_size: int = 1            # an update runs each group's prompt once
    eval_rows: int = 0             # sequences per evaluation batch (0: no evaluation)
    eval_new_tokens: int = 0
    verify_rows: int = 0           # verifications per batch (0: no verifier model)
    verify_prompt_tokens: int = 0  # a verification's prompt (the problem and the solution)
    verify_new_tokens: int = 0
    verify_group: int = 1          # verifications per solution in the verifier's update (its prompt run once)
    autocast: bool = False         # bf16 autocast on the compute
    vllm_share: float = 0.0        # the vLLM engine's share of the device (0: no engine)
    vllm_sleep: bool = False       # the engine sleeps outside rollouts
    grads_held: bool = False       # gradients kept between updates (zeroed, never freed)
    offload_optimizer: bool = False  # AdamW's moments in host memory outside their optimizer step


def _act_bytes(role: Role, w: Work) -> int:
    return 2 if w.autocast or role.weight_bytes == 2 else 4


def weights(role: Role, w: Work | None = None) -> float:
    own = role.shapes.params * role.weight_bytes
    if not role.reference or role.lora_r:
        return own
    return own + role.shapes.params * (2 if w is not None and w.autocast else role.weight_bytes)


def autocast_copy(role: Role, w: Work) -> float:
    return role.shapes.params * 2.0 if w.autocast and role.weight_bytes == 4 else 0.0


def gradients(role: Role) -> float:
    return role.trainable * (4 if role.lora_r else role.weight_bytes)


def optimizer(role: Role) -> float:
    return 2.0 * gradients(role)


def kv_cache(role: Role, w: Work, rows: int, length: int) -> float:
    return 2.0 * role.shapes.layers * role.shapes.kv * rows * length * _act_bytes(role, w)


def decode_work(role: Role, rows: int, prompts: int, prompt_tokens: int, w: Work) -> float:
    """One decode step's sampling, or the prefill's widest layer if larger (its prompts only)."""
    s = role.shapes
    prefill = prompts * prompt_tokens * (2 * s.intermediate + 2 * s.hidden) * _act_bytes(role, w)
    return max(rows * s.vocab * DECODE_LOGIT_BYTES, prefill)


def activations(role: Role, w: Work, rows: int, prompt_tokens: int, new_tokens: int, group_size: int = 1) -> float:
    """A micro-batch's forward and backward: `rows` sequences of `new_tokens`, their prompts run once per
    group of `group_size` (the prompt's keys and values repeated to the group's rows); rows run whole
    (group size 1, or under checkpointing) also hold their prompt positions' logits."""
    s, a = role.shapes, _act_bytes(role, w)
    if role.checkpointing:
        group_size = 1  # checkpointed layers keep no KV cache: each row runs with its own prompt
    groups = max(rows // max(group_size, 1), 1)
    tokens = rows * new_tokens + groups * prompt_tokens
    prompt_logits = rows * prompt_tokens * s.vocab * a if group_size == 1 else 0.0  # one pass over each whole row
    per_layer = ACT_PER_D * s.hidden + ACT_PER_F[a] * s.intermediate + ACT_PER_KV[a] * s.kv
    layers = (s.layers * 4 * s.hidden + per_layer) if role.checkpointing else s.layers * per_layer
    repeated = (rows - groups) * prompt_tokens * 2 * s.kv * a * s.layers if group_size > 1 else 0.0
    return tokens * layers + repeated + prompt_logits + rows * new_tokens * s.vocab * LOGIT_BYTES[a]


def plan(roles: list[Role], w: Work) -> dict[str, dict[str, float]]:
    """{phase: {component: bytes}} of a run whose first role is the generator (it samples the rollouts and
    is evaluated) and whose role named "verifier", if any, verifies the rollouts."""
    gen = roles[0]
    ver = next((r for r in roles if r.name == "verifier"), None)
    resident = {f"weights/{r.name}": weights(r, w) for r in roles}
    if not w.offload_optimizer:
        resident.update({f"optimizer/{r.name}": optimizer(r) for r in roles if r.trains})
    if w.grads_held:
        resident.update({f"gradients/{r.name}": gradients(r) for r in roles if r.trains})
    engine = {"vllm engine": w.vllm_share} if w.vllm_share else {}
    phases: dict[str, dict[str, float]] = {}
    prompts = max(w.rollout_rows // max(w.group_size, 1), 1)
    phases["rollout"] = {**resident, **engine, f"autocast copy/{gen.name}": autocast_copy(gen, w),
                         "kv cache": kv_cache(gen, w, w.rollout_rows, w.prompt_tokens + w.new_tokens),
                         "decode step": decode_work(gen, w.rollout_rows, prompts, w.prompt_tokens, w)}
    awake = {} if w.vllm_sleep else engine  # outside the rollout
    if ver is not None and w.verify_rows:
        phases["verification"] = {**resident, **awake, f"autocast copy/{ver.name}": autocast_copy(ver, w),
                                  "kv cache": kv_cache(ver, w, w.verify_rows, w.verify_prompt_tokens + w.verify_new_tokens),
                                  "decode step": decode_work(ver, w.verify_rows, w.verify_rows, w.verify_prompt_tokens, w)}
    for r in roles:
        if not r.trains:
            continue
        if r is ver:
            act = activations(r, w, w.micro_batch, w.verify_prompt_tokens, w.verify_new_tokens, w.verify_group)
        else:
            act = activations(r, w, w.micro_batch, w.prompt_tokens, w.new_tokens, w.group_size)
        phases[f"update/{r.name}"] = {**resident, **awake, f"gradients/{r.name}": gradients(r),
                                      f"autocast copy/{r.name}": autocast_copy(r, w), "activations": act}
        if w.offload_optimizer:
            phases[f"step/{r.name}"] = {**resident, **awake, f"gradients/{r.name}": gradients(r),
                                        f"optimizer/{r.name}": optimizer(r), f"adamw work/{r.name}": gradients(r)}
    if w.eval_rows:
        phases["evaluation"] = {**resident, **awake, f"autocast copy/{gen.name}": autocast_copy(gen, w),
                                "kv cache": kv_cache(gen, w, w.eval_rows, w.prompt_tokens + w.eval_new_tokens),
                                "decode step": decode_work(gen, w.eval_rows, w.eval_rows, w.prompt_tokens, w)}
    return phases


def with_engine_bytes(phases: dict[str, dict[str, float]], capacity: float) -> dict[str, dict[str, float]]:
    """The plan with the vLLM engine's share of the device turned into bytes."""
    return {p: {k: (v * capacity if k == "vllm engine" else v) for k, v in c.items()} for p, c in phases.items()}


def peaks(phases: dict[str, dict[str, float]]) -> dict[str, float]:
    return {p: sum(c.values()) for p, c in phases.items()}


def fixes(roles: list[Role], w: Work, capacity: float) -> dict[str, list[str]]:
    """{phase over `capacity`: the single options that bring it under (each tried alone)}."""
    over = [p for p, b in peaks(with_engine_bytes(plan(roles, w), capacity)).items() if b > capacity]
    if not over:
        return {}
    tries: dict[str, tuple[list[Role], Work]] = {
        f"LoRA (model.lora_r={LORA_RANK_FOR_FIX})": ([dataclasses.replace(r, lora_r=r.lora_r or LORA_RANK_FOR_FIX)
                                                      for r in roles], w),
        "gradient checkpointing (model.gradient_checkpointing=true)": (
            [dataclasses.replace(r, checkpointing=True) for r in roles], w),
        "bf16 autocast (train.bf16=true)": (roles, dataclasses.replace(w, autocast=True)),
    }
    if w.micro_batch > 1:
        tries[f"micro-batch {max(w.micro_batch // 4, 1)} (train.micro_batch_size)"] = (
            roles, dataclasses.replace(w, micro_batch=max(w.micro_batch // 4, 1)))
    if w.eval_rows > 1:
        tries[f"evaluation batch {max(w.eval_rows // 4, 1)} (eval.batch_size)"] = (
            roles, dataclasses.replace(w, eval_rows=max(w.eval_rows // 4, 1)))
    if not w.offload_optimizer and any(r.trains for r in roles):
        tries["optimizer states in host memory (train.offload_optimizer=true)"] = (
            roles, dataclasses.replace(w, offload_optimizer=True))
    if w.vllm_share and not w.vllm_sleep:
        tries["the engine asleep outside rollouts (rollout.sleep=true)"] = (roles, dataclasses.replace(w, vllm_sleep=True))
    before = plan(roles, w)
    after = {name: peaks(with_engine_bytes(plan(rs, ww), capacity)) for name, (rs, ww) in tries.items()}
    # an option fixes a phase when it brings it under and adds no phase of its own that is over
    return {p: [name for name, new in after.items()
                if new.get(p, 0.0) <= capacity and all(b <= capacity for q, b in new.items() if q not in before)]
            for p in over}


def size(n: float) -> str:
    """Bytes as GiB, or MiB under a tenth of a GiB."""
    return f"{n / GiB:.2f} GiB" if n >= GiB / 10 else f"{n / 2**20:.1f} MiB"


def table(phases: dict[str, dict[str, float]], capacity: float | None = None) -> list[str]:
    """Lines of a plan: each phase's peak, whether it fits `capacity`, and its components, largest first."""
    lines = []
    for p, comps in phases.items():
        total = sum(comps.values())
        flag = "" if capacity is None else (" fits" if total <= capacity else f" OVER by {size(total - capacity)}")
        parts = ", ".join(f"{k} {size(v)}" for k, v in sorted(comps.items(), key=lambda kv: -kv[1]) if v > 0)
        lines.append(f"{p:<16} {size(total):>10}{flag}: {parts}")
    return lines

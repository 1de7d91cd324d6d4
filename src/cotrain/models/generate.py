"""Rollouts: batched sampling with a KV cache, and the training-time log-probs of completions.

Shapes: N = number of sequences (B prompts x G samples), P = padded prompt length,
T = completion length, V = vocabulary.
"""
from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel, StaticCache
from transformers.cache_utils import DynamicLayer

from cotrain import dist
from cotrain.models.packed import packed_linears


@functools.cache
def _cache_keyword(cls: type) -> str:
    """The name a model class's forward takes its KV cache by: `cache` from transformers 5.24 on (which
    warns on every call given `past_key_values`), `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def with_cache(model, cache) -> dict:
    """{keyword: cache} for `model`'s forward (a PEFT model is asked through its base model)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {_cache_keyword(type(base)): cache}


@dataclass
class Rollout:
    prompt_ids: torch.Tensor       # [N, P] left-padded
    prompt_mask: torch.Tensor      # [N, P] 1 on real prompt tokens
    completion_ids: torch.Tensor   # [N, T] right-padded with pad_id
    completion_mask: torch.Tensor  # [N, T] 1 on generated tokens up to and including eos
    logp: torch.Tensor             # [N, T] log-prob of each sampled token under the sampling distribution
    entropy: torch.Tensor          # [N, T] entropy of the sampling distribution at each step
    truncated: torch.Tensor        # [N] True when no eos was produced within max_new_tokens

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(-1)  # [N]


def autocast(enabled: bool, device: torch.device | str = "cpu"):
    """bf16 autocast on CPU or GPU, or nothing."""
    assert isinstance(enabled, bool), f"bf16 must be settled to true or false before use (got {enabled!r})"
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


@contextlib.contextmanager
def casts_kept(model, enabled: bool):
    """For the duration of a rollout under bf16 autocast (`enabled`), the model's frozen float32 parameters
    marked as requiring grad, and unmarked on exit. Autocast keeps its bf16 copy of a weight for the whole
    region only for leaves that require grad; a frozen weight (a LoRA model's base, a frozen verifier, the
    head tied to a frozen embedding) was re-cast on every forward pass instead: on SmolLM2 with LoRA, 90 of
    a decoding pass's 330 ms went to casting its 49,152 x 576 head alone. The products are bit for bit the
    same; the rollout holds one bf16 copy of those weights, as it does of a trained model's. Only under
    `torch.no_grad` (nothing records a graph)."""
    frozen = [p for p in model.parameters() if not p.requires_grad and p.dtype == torch.float32] if enabled else []
    assert not frozen or not torch.is_grad_enabled(), "casts_kept runs under torch.no_grad"
    for p in frozen:
        p.requires_grad_(True)
    try:
        yield
    finally:
        for p in frozen:
            p.requires_grad_(False)


def upcast(x: torch.Tensor) -> torch.Tensor:
    """Logits in at least float32 (bf16/fp16 logits are upcast; float64 ones stay float64)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ids [N, P] and mask [N, P]."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids, mask


def right_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists into ids [N, T] and mask [N, T]."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids, mask


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask logits [N, V] outside the smallest set of tokens whose probability reaches top_p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = cum - sorted_logits.softmax(-1) > top_p  # keep the token that crosses top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def _empty_rollout() -> Rollout:
    z = torch.zeros((0, 0), dtype=torch.long)
    return Rollout(z, z, z, z, torch.zeros((0, 0)), torch.zeros((0, 0)), torch.zeros(0, dtype=torch.bool))


def group_noise(seed: int, group: int, group_size: int, steps: int) -> torch.Tensor:
    """The uniforms [G, steps] that sample group `group` of a rollout seeded `seed`: one per row and
    step, a function of (seed, group) alone, so a group's samples do not depend on which other groups
    share its batch or its process."""
    gen = torch.Generator().manual_seed((seed * 1_000_003 + group) % (1 << 63))
    return torch.rand((group_size, steps), generator=gen, dtype=torch.float64)


def sample_token(logp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: for each row of logp [N, V], the first token whose cumulative probability
    exceeds u [N] in [0, 1) times the row's total (so rounding cannot run past the last token).
    Tokens of probability zero are never drawn."""
    cdf = logp.exp().cumsum(-1, dtype=torch.float64)  # [N, V]; the sum of each float32 term made exact in float64
    target = (u.to(cdf.device) * cdf[:, -1])[:, None]                                  # [N, 1]
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=logp.shape[-1] - 1)


def generate(
    model: PreTrainedModel,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    greedy: bool = False,
    seed: int | None = None,
    bf16: bool = False,
    group_size: int = 1,
    draft_tokens: int = 0,
    compiled: bool = False,
) -> Rollout:
    """Sample `group_size` completions of each prompt; rows of a group are contiguous in the result.

    Each prompt is run through the model once and its KV cache copied to its G rows. Finished rows
    are dropped from the batch and the cache as they end (seen at the loop's next look on the host:
    every token on a CPU, every 8 on a GPU, `decode_check_every`), so a batch whose completions differ
    in length costs about what its live rows cost. Under torchrun the prompts are split by rank (whole groups)
    and the rollouts gathered, so every rank returns the whole rollout.

    Args:
        seed: sampling seed; group i is sampled with `group_noise(seed, i, ...)`, so the result is the
            same whatever the number of processes. None draws from torch's global generator.
        draft_tokens: with k > 0, drafted decoding (`NgramDrafter`, prompt lookup): each forward pass also
            runs up to k tokens guessed by finding the row's last tokens in its prompt, and keeps those
            the sampler would have chosen anyway. Each token is still chosen from its own logits with
            its own uniform (`group_noise`), so the samples are those of plain decoding up to float
            rounding (the logits come from a wider forward pass), greedy or sampled; only the number of
            forward passes changes. Pays where outputs copy their prompt (a verifier quoting the steps
            it checks) and a pass costs about the same for a few more tokens (weights read once).
        compiled: decode with a static KV cache (HF `StaticCache`, preallocated for the prompt and
            `max_new_tokens`) through `torch.compile(model, dynamic=True)`: the shape-stable loop that
            compilation and CUDA graphs need. Finished rows stay in the batch (their tokens are not
            kept), so every pass runs all rows; the samples are those of the plain loop up to float
            rounding. The first call per model compiles (tens of seconds on a CPU). Not with drafting.
    """
    model = dist.plain_copy(model)  # a model sharded with FSDP2 samples from its plain copy

    def sample(mine, first):
        return _generate(model, mine, first, max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                         temperature=temperature, top_p=top_p, top_k=top_k, greedy=greedy, seed=seed, bf16=bf16,
                         group_size=group_size, draft_tokens=draft_tokens, compiled=compiled)
    return split_by_rank(prompts, pad_id, sample)


def split_by_rank(prompts: list[list[int]], pad_id: int, sample) -> Rollout:
    """`sample(my_prompts, index_of_my_first_prompt)` on this process's block of the prompts, the rollouts
    of all processes gathered in prompt order (with one process: `sample(prompts, 0)`)."""
    if dist.world() == 1:
        return sample(prompts, 0)
    mine = dist.shard(len(prompts))
    return concat_rollouts(dist.gather_objects(sample([prompts[i] for i in mine], mine.start)), pad_id)


def select_rows(ro: Rollout, rows: list[int]) -> Rollout:
    """The rollouts of `rows`, in that order."""
    index = torch.tensor(rows, dtype=torch.long)
    return Rollout(*(getattr(ro, f.name)[index] for f in dataclasses.fields(Rollout)))


def concat_rollouts(parts: list[Rollout], pad_id: int) -> Rollout:
    """One rollout of the rows of `parts` in order: prompts re-left-padded, completions re-right-padded."""
    parts = [r for r in parts if r.prompt_ids.shape[0]]
    if not parts:
        return _empty_rollout()
    p = max(r.prompt_ids.shape[1] for r in parts)
    t = max(r.completion_ids.shape[1] for r in parts)

    def left(x, width, value):
        return F.pad(x, (width - x.shape[1], 0), value=value)

    def right(x, width, value):
        return F.pad(x, (0, width - x.shape[1]), value=value)

    return Rollout(
        torch.cat([left(r.prompt_ids, p, pad_id) for r in parts]),
        torch.cat([left(r.prompt_mask, p, 0) for r in parts]),
        torch.cat([right(r.completion_ids, t, pad_id) for r in parts]),
        torch.cat([right(r.completion_mask, t, 0) for r in parts]),
        torch.cat([right(r.logp, t, 0.0) for r in parts]),
        torch.cat([right(r.entropy, t, 0.0) for r in parts]),
        torch.cat([r.truncated for r in parts]))


@torch.no_grad()
def _generate(model, prompts: list[list[int]], first_group: int, *, max_new_tokens: int, eos_id: int, pad_id: int,
              temperature: float, top_p: float, greedy: bool, seed: int | None, bf16: bool, group_size: int, top_k: int = 0,
              draft_tokens: int = 0, drafter=None, compiled: bool = False, check_every: int | None = None) -> Rollout:
    """`generate` of this process's prompts, the first of which is group `first_group` of the rollout;
    `drafter` (anything with `NgramDrafter.draft`) replaces the prompt lookup of drafted decoding, and
    `check_every` the device's `decode_check_every`."""
    if not prompts:
        return _empty_rollout()
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)                         # [B, P]
    n = len(prompts) * group_size
    out_ids = torch.full((n, max_new_tokens), pad_id, dtype=torch.long)
    logit_dtype = torch.promote_types(next(model.parameters()).dtype, torch.float32)  # float64 models keep float64
    out_logp = torch.zeros((n, max_new_tokens), dtype=logit_dtype)
    out_entropy = torch.zeros((n, max_new_tokens), dtype=logit_dtype)
    out_mask = torch.zeros((n, max_new_tokens), dtype=torch.long)
    truncated = torch.ones(n, dtype=torch.bool)
    noise = None
    if not greedy:                                                              # [N, max_new_tokens]
        noise = (torch.cat([group_noise(seed, first_group + i, group_size, max_new_tokens) for i in range(len(prompts))])
                 if seed is not None else torch.rand((n, max_new_tokens), dtype=torch.float64))

    attn = prompt_mask.to(device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    # One autocast region for the whole rollout: autocast keeps its bf16 copies of the weights until the
    # outermost region ends, so they are made once per rollout instead of once per forward pass (on
    # SmolLM2, re-casting the 49,152 x 576 embedding alone cost more than a pass's matmuls). The
    # sampling inside runs on float32/float64 logits, which autocast leaves alone. Frozen weights too
    # (`casts_kept`). On a CPU the few-row products run on weights packed once (`packed_linears`).
    packed = bf16 and torch.device(device).type == "cpu" and not compiled
    with casts_kept(model, bf16), packed_linears(model, packed), autocast(bf16, device):
        logits = model(input_ids=prompt_ids.to(device), attention_mask=attn, position_ids=positions,
                       **with_cache(model, cache), use_cache=True, logits_to_keep=1).logits[:, -1]
        next_pos = positions[:, -1] + 1
        if group_size > 1:  # copy each prompt's state to its G rows
            cache.batch_repeat_interleave(group_size)
            logits, attn, next_pos = (x.repeat_interleave(group_size, dim=0) for x in (logits, attn, next_pos))
            prompt_ids, prompt_mask = (x.repeat_interleave(group_size, dim=0) for x in (prompt_ids, prompt_mask))
        out = (out_ids, out_logp, out_entropy, out_mask, truncated)
        options = dict(eos_id=eos_id, temperature=temperature, top_p=top_p, top_k=top_k, greedy=greedy, out=out)
        if draft_tokens > 0:
            drafter = drafter or NgramDrafter([list(p) for p in prompts for _ in range(group_size)])
            _drafted_decode(model, logits, attn, next_pos, cache, noise, bf16, device, drafter, draft_tokens,
                            pad_id=pad_id, **options)
        elif compiled:
            _static_decode(model, logits, attn, next_pos, cache, noise, bf16, device, check_every=check_every, **options)
        else:
            _plain_decode(model, logits, attn, next_pos, cache, noise, bf16, device, check_every=check_every, **options)
    width = int(out_mask.sum(-1).max().item()) if n else 0
    model.train(was_training)
    return Rollout(prompt_ids, prompt_mask, out_ids[:, :width], out_mask[:, :width],
                   out_logp[:, :width], out_entropy[:, :width], truncated)


def entropy_of(logp_all: torch.Tensor) -> torch.Tensor:
    """Entropy of each distribution given as log-probs [..., V] (0 * -inf counted as 0)."""
    # a token at -inf gives 0 * -inf, a NaN, which nansum counts as 0 (as it does a broken model's NaN); the same
    # summation as sum's (ATen's cascade sum), a fifth of the time of selecting the finite terms first
    return -(logp_all.exp() * logp_all).nansum(-1)


def decode_check_every(device) -> int:
    """How many tokens the plain and compiled decode loops run between two looks at their tokens on the
    host (recording, stops, compaction): 1 on a CPU, where a look costs nothing; 8 on an accelerator,
    where each look is a host sync that drains the launch queue. A row that ends inside a block runs on
    to the block's end (at most 7 wasted tokens); its tokens after its eos are dropped."""
    return 1 if torch.device(device).type == "cpu" else 8


def _step_record(tokens: torch.Tensor, logp_all: torch.Tensor) -> torch.Tensor:
    """[3, m] on the device: each row's chosen token id, its log-prob and the distribution's entropy (the
    ids in the log-probs' float dtype, exact for any vocabulary under 2^24 tokens)."""
    chosen = logp_all.gather(-1, tokens[:, None]).squeeze(-1)
    return torch.stack([tokens.to(logp_all.dtype), chosen, entropy_of(logp_all)])


def _record_block(block: list[torch.Tensor], rows: torch.Tensor, start: int, eos_id: int, out: tuple,
                  alive: torch.Tensor | None = None) -> torch.Tensor:
    """Write a block of decode steps into `out` (ids, logp, entropy, mask [N, max_new_tokens] each,
    truncated [N]) with one transfer to the host. `block` holds one `_step_record` [3, m] per step, the
    first at token index `start`, of the m rows `rows` of the full batch (host indices); a row keeps its
    tokens up to and including its first eos, and rows not `alive` (host bool [m]; default all) keep none.
    Returns the rows whose eos came in this block (host bool [m])."""
    out_ids, out_logp, out_entropy, out_mask, truncated = out
    host = torch.stack(block, -1).cpu()                                          # [3, m, c]
    ids = host[0].long()
    is_eos = ids == eos_id
    kept = (is_eos.long().cumsum(1) - is_eos.long()) == 0                        # up to the first eos
    ended = is_eos.any(1)
    if alive is not None:
        kept, ended = kept & alive[:, None], ended & alive
    r, j = kept.nonzero(as_tuple=True)
    at = (rows[r], start + j)
    out_ids[at] = ids[r, j]
    out_logp[at] = host[1][r, j].to(out_logp.dtype)
    out_entropy[at] = host[2][r, j].to(out_entropy.dtype)
    out_mask[at] = 1
    truncated[rows[ended]] = False
    return ended


def _decode_mask(model, attn: torch.Tensor):
    """The attention mask of a one-token decode step over the cache and the new token (attn [m, L], 1 on
    positions to attend to): for SDPA models the 4-D boolean mask [m, 1, 1, L] that transformers would
    build from it, so it skips building one (which reads the mask on the host: a sync per token); the
    2-D mask otherwise."""
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        return attn[:, None, None, :].bool()
    return attn


class _RoomyLayer(DynamicLayer):
    """A `DynamicLayer` with room for `room` more positions: a decoding pass writes its keys and values in place,
    where `DynamicLayer` concatenates the whole cache anew (on SmolLM2, 12% of a pass). Under autocast the keys
    and values are held in `dtype`, the attention's own: the keys come out of the rotary embedding in float32,
    and autocast re-cast the whole key cache to bf16 at every pass and layer (another 15%). The attention reads
    the same values either way (a float32 key cast to bf16 when written is the key autocast would have cast)."""

    def __init__(self, layer: DynamicLayer, room: int, dtype: torch.dtype | None):
        super().__init__()
        self.length = layer.get_seq_length()
        self._keys, self._values = (self._with_room(x, self.length, room, dtype) for x in (layer.keys, layer.values))
        self.device, self.is_initialized = layer.keys.device, True
        self._views()

    @staticmethod
    def _with_room(x: torch.Tensor, length: int, room: int, dtype) -> torch.Tensor:
        """x [n, heads, positions, d] in a buffer of `room` more positions, in `dtype` if x is float32 (the
        dtype autocast casts from; a float64 model's keys stay float64, as autocast leaves them)."""
        held = dtype if dtype is not None and x.dtype == torch.float32 else x.dtype
        buffer = x.new_empty((*x.shape[:2], length + room, x.shape[-1]), dtype=held)
        buffer[:, :, :length] = x[:, :, :length]
        return buffer

    def _views(self) -> None:
        self.keys, self.values = self._keys[:, :, :self.length], self._values[:, :, :self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        self._keys[:, :, self.length:end] = key_states
        self._values[:, :, self.length:end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        room = self._keys.shape[2] - self.length
        self._keys, self._values = (self._with_room(x[indices], self.length, room, None)
                                    for x in (self.keys, self.values))
        self._views()


def roomy(cache: DynamicCache, room: int, model, bf16: bool, device) -> DynamicCache:
    """`cache` (after the prefill) with room for `room` more positions in every full-attention layer (`_RoomyLayer`;
    a sliding-window layer, which drops its oldest positions, stays as it is); under bf16 autocast, its keys and
    values held in bf16 where the model's attention (SDPA or eager) casts them so."""
    held = torch.bfloat16 if bf16 and torch.device(device).type == "cpu" and \
        getattr(model.config, "_attn_implementation", None) in ("sdpa", "eager") else None
    cache.layers = [_RoomyLayer(layer, room, held) if type(layer) is DynamicLayer and layer.is_initialized else layer
                    for layer in cache.layers]
    return cache


def _plain_decode(model, logits, attn, next_pos, cache, noise, bf16: bool, device, *, eos_id: int,
                  temperature: float, top_p: float, greedy: bool, out: tuple, top_k: int = 0,
                  check_every: int | None = None) -> None:
    """The decode loop of `generate`: one token per row and forward pass, writing into `out` (ids, logp,
    entropy, mask [N, max_new_tokens] each, truncated [N]). Every `check_every` tokens
    (`decode_check_every`) the block's tokens come to the host in one transfer, are recorded, and the
    rows that ended leave the batch and the cache; in between, nothing waits on the device."""
    n, max_new_tokens = out[0].shape
    every = check_every or decode_check_every(device)
    live = torch.arange(n)  # rows of the full batch still generating, in cache order (host)
    live_dev = live.to(device)
    noise = None if greedy else noise.to(device)
    width = attn.shape[1]
    attn = torch.cat([attn, attn.new_zeros((n, max_new_tokens))], dim=-1)       # [N, P + max_new_tokens]
    cache = roomy(cache, max_new_tokens, model, bf16, device)
    block, start = [], 0
    for t in range(max_new_tokens):
        tokens, logp_all = choose_tokens(logits, None if greedy else noise[live_dev, t], temperature=temperature,
                                         top_p=top_p, top_k=top_k, greedy=greedy)
        block.append(_step_record(tokens, logp_all))
        if len(block) == every or t == max_new_tokens - 1:
            ended = _record_block(block, live, start, eos_id, out)
            block, start = [], t + 1
            done = ended.tolist()
            if all(done) or t == max_new_tokens - 1:
                return
            if any(done):  # compact: keep only live rows in the batch and the cache
                keep = (~ended).nonzero().squeeze(-1)
                keep_dev = keep.to(device)
                live, live_dev = live[keep], live_dev[keep_dev]
                tokens, attn, next_pos = tokens[keep_dev], attn[keep_dev], next_pos[keep_dev]
                cache.batch_select_indices(keep_dev)
        attn[:, width + t] = 1
        with autocast(bf16, device):
            logits = model(input_ids=tokens[:, None], attention_mask=_decode_mask(model, attn[:, :width + t + 1]),
                           position_ids=next_pos[:, None], **with_cache(model, cache), use_cache=True).logits[:, -1]
        next_pos = next_pos + 1


COMPILE_BACKEND = "inductor"
"""The `torch.compile` backend of compiled decoding (tests use "eager": the same loop, no code generation)."""


def _static_decode(model, logits, attn, next_pos, cache, noise, bf16: bool, device, *, eos_id: int,
                   temperature: float, top_p: float, greedy: bool, out: tuple, top_k: int = 0,
                   check_every: int | None = None) -> None:
    """The decode loop of `generate(compiled=True)`: the prompt's cache (`cache`, dynamic) is copied into
    a `StaticCache` as long as prompt + max_new_tokens, and every pass runs all N rows through the
    compiled model at the next cache position; a row's tokens are kept until its eos. As in
    `_plain_decode`, the tokens come to the host every `check_every` tokens, so a pass never waits on one."""
    n, max_new_tokens = out[0].shape
    every = check_every or decode_check_every(device)
    p = attn.shape[1]
    static = StaticCache(config=model.config, max_cache_len=p + max_new_tokens)
    for layer, prompt_layer in zip(static.layers, cache.layers):
        layer.update(prompt_layer.keys, prompt_layer.values)
    attn = torch.cat([attn, attn.new_zeros((n, max_new_tokens))], dim=-1)       # [N, P + max_new_tokens]
    positions = torch.arange(p, p + max_new_tokens, device=device)              # the cache position of each step
    noise = None if greedy else noise.to(device)
    # A new wrapper per rollout is cheap: dynamo keeps the compiled code, guarded on shapes and dtypes.
    forward = torch.compile(model, dynamic=True, backend=COMPILE_BACKEND)
    rows, live = torch.arange(n), torch.ones(n, dtype=torch.bool)               # host
    block, start = [], 0
    for t in range(max_new_tokens):
        tokens, logp_all = choose_tokens(logits, None if greedy else noise[:, t], temperature=temperature,
                                         top_p=top_p, top_k=top_k, greedy=greedy)
        block.append(_step_record(tokens, logp_all))
        if len(block) == every or t == max_new_tokens - 1:
            live &= ~_record_block(block, rows, start, eos_id, out, alive=live)
            block, start = [], t + 1
            if not any(live.tolist()) or t == max_new_tokens - 1:
                return
        attn[:, p + t] = 1
        with autocast(bf16, device):
            logits = forward(input_ids=tokens[:, None], attention_mask=attn, position_ids=next_pos[:, None],
                             **with_cache(model, static), use_cache=True,
                             cache_position=positions[t:t + 1]).logits[:, -1]
        next_pos = next_pos + 1


class NgramDrafter:
    """Guesses each row's next tokens by prompt lookup: the row's last n generated tokens (n = 3, 2, 1,
    longest first) are looked up in its source text (its prompt), and the tokens that follow the
    occurrence nearest to the row's own length are the draft. A guess only saves forward passes; it
    never changes a sample.

    Args:
        sources: one token list per row.
        max_n: the longest n-gram looked up.
    """

    def __init__(self, sources: list[list[int]], max_n: int = 3):
        self.sources = sources
        self.max_n = max_n
        self._index: list[dict | None] = [None] * len(sources)

    def _positions(self, row: int) -> dict[tuple[int, ...], list[int]]:
        # n-gram -> end positions in the row's source (ascending), built on first use
        if self._index[row] is None:
            src, index = self.sources[row], {}
            for n in range(1, self.max_n + 1):
                for end in range(n, len(src)):  # an n-gram ending at the last token has nothing after it
                    index.setdefault(tuple(src[end - n:end]), []).append(end)
            self._index[row] = index
        return self._index[row]

    def draft(self, row: int, generated: list[int], k: int) -> list[int]:
        """Up to k tokens guessed to follow `generated` in row `row` (none when nothing matches)."""
        if k <= 0 or not generated:
            return []
        index = self._positions(row)
        for n in range(min(self.max_n, len(generated)), 0, -1):
            ends = index.get(tuple(generated[-n:]))
            if ends:
                i = bisect.bisect_left(ends, len(generated))
                near = min(ends[max(i - 1, 0):i + 1], key=lambda e: (abs(e - len(generated)), -e))
                return self.sources[row][near:near + k]
        return []


def choose_tokens(logits: torch.Tensor, u: torch.Tensor | None, *, temperature: float, top_p: float,
                  greedy: bool, top_k: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The token each row of logits [N, V] gives: its argmax (greedy) or the inverse-CDF draw with
    uniform u [N] at `temperature`, among the `top_k` most likely tokens (0: all) and within `top_p`;
    and the distribution it was drawn from (log-probs [N, V]; greedy: the logits' log-softmax)."""
    wide = upcast(logits)
    if greedy:
        return wide.argmax(-1), wide.log_softmax(-1)
    scaled = wide.div_(temperature) if wide is not logits else wide / temperature  # an upcast is our own copy
    if 0 < top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]                                    # [N, 1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        scaled = _top_p_filter(scaled, top_p)
    logp_all = scaled.log_softmax(-1)
    return sample_token(logp_all, u), logp_all


def _drafted_decode(model, logits, attn, next_pos, cache, noise, bf16: bool, device, drafter: NgramDrafter, k: int,
                    *, eos_id: int, pad_id: int, temperature: float, top_p: float, greedy: bool, out: tuple, top_k: int = 0) -> None:
    """The decode loop of `generate(draft_tokens=k)`, writing into `out` (ids, logp, entropy, mask,
    truncated [N, max_new_tokens] each, truncated [N]).

    Each pass feeds every live row its pending token (drawn, not yet in the cache) and its draft
    d_1..d_m (m <= k), padded to a common width w; position j's logits choose the row's token number
    t + j with the row's uniform for that index. Draft d_j is kept while it equals the token chosen
    before it, so a row advances by a + 1 tokens (a drafts kept, then the first chosen token that
    differs, or one more). All w positions enter the cache; those of rejected drafts and of padding
    are masked out of the attention mask, so later tokens attend to exactly what plain decoding shows
    them.
    """
    out_ids, out_logp, out_entropy, out_mask, truncated = out
    n, max_new = out_ids.shape
    live = torch.arange(n)                     # rows still generating, in cache order
    produced = torch.zeros(n, dtype=torch.long)  # tokens chosen so far per row (the pending one included)
    generated: list[list[int]] = [[] for _ in range(n)]
    width = 1
    logits = logits[:, None]                   # [n, 1, V]: the prefill's last position
    drafts = torch.empty((n, 0), dtype=torch.long)
    ran_pass = False                           # the first logits are the prefill's
    while True:
        # ---------------------------------------------------------- choose a token at every position
        m = live.shape[0]
        pos = produced[:, None] + torch.arange(width)                                       # [m, w] token index
        u = None if greedy else noise[live[:, None], pos.clamp(max=max_new - 1)].reshape(-1).to(logits.device)
        tokens, logp_all = choose_tokens(logits.reshape(m * width, -1), u, temperature=temperature, top_p=top_p,
                                         top_k=top_k, greedy=greedy)
        tokens, logp_all = tokens.view(m, width).cpu(), logp_all.view(m, width, -1)
        # ---------------------------------------------------------- keep the drafts the sampler agrees with
        agree = (tokens[:, :-1] == drafts).long()                                           # [m, w-1]
        kept = agree.cumprod(1).sum(1)                                                      # [m] drafts kept
        count = torch.minimum(kept + 1, max_new - produced)                                # [m] new tokens
        is_eos = (tokens == eos_id) & (torch.arange(width) < count[:, None])
        first_eos = torch.where(is_eos.any(1), is_eos.long().argmax(1), width)
        count = torch.minimum(count, first_eos + 1)
        ended = is_eos.any(1) | (produced + count >= max_new)
        # ---------------------------------------------------------- record them
        r, j = (torch.arange(width) < count[:, None]).nonzero(as_tuple=True)
        rows, cols = live[r], produced[r] + j
        chosen = tokens[r, j]
        out_ids[rows, cols] = chosen
        lp = logp_all[r.to(logp_all.device), j.to(logp_all.device)]                        # [R, V]
        out_logp[rows, cols] = lp.gather(-1, chosen.to(lp.device)[:, None]).squeeze(-1).cpu().to(out_logp.dtype)
        out_entropy[rows, cols] = entropy_of(lp).cpu().to(out_entropy.dtype)
        out_mask[rows, cols] = 1
        truncated[live[is_eos.any(1)]] = False
        for row, tok in zip(r.tolist(), chosen.tolist()):
            generated[live[row]].append(tok)
        if ran_pass:  # the positions just run stay in the attention: the pending token and the kept drafts
            attn = torch.cat([attn, (torch.arange(width) <= kept[:, None]).to(attn.device, attn.dtype)], dim=-1)
            next_pos = next_pos + count.to(next_pos.device)  # where the new pending token goes
        produced = produced + count
        pending = tokens.gather(1, (count - 1)[:, None]).squeeze(1)                        # [m] not yet in the cache
        if ended.all():
            return
        if ended.any():  # compact: keep only live rows in the batch and the cache
            keep = (~ended).nonzero().squeeze(-1)
            keep_dev = keep.to(device)
            live, produced, pending = live[keep], produced[keep], pending[keep]
            attn, next_pos = attn[keep_dev], next_pos[keep_dev]
            cache.batch_select_indices(keep_dev)
        # ---------------------------------------------------------- the next pass: pending token + drafts
        room = (max_new - produced - 1).tolist()  # a draft may fill the row up to its length limit
        guesses = [drafter.draft(row, generated[row], min(k, left)) for row, left in zip(live.tolist(), room)]
        width = 1 + max(len(x) for x in guesses)
        drafts = torch.full((live.shape[0], width - 1), -1, dtype=torch.long)
        for i, x in enumerate(guesses):
            drafts[i, :len(x)] = torch.tensor(x, dtype=torch.long)
        ids = torch.cat([pending[:, None], drafts.masked_fill(drafts < 0, pad_id)], dim=1)             # [m, w]
        step_attn = torch.cat([attn, torch.cat([torch.ones_like(pending[:, None]), (drafts >= 0).long()], 1)
                               .to(attn.device, attn.dtype)], dim=-1)
        with autocast(bf16, device):
            logits = model(input_ids=ids.to(device), attention_mask=step_attn,
                           position_ids=next_pos[:, None] + torch.arange(width, device=next_pos.device),
                           **with_cache(model, cache), use_cache=True).logits                   # [m, w, V]
        ran_pass = True


LOGPROB_CHUNK_BYTES = 16 * 2**20
"""`token_logprobs` works on as many positions at once as fit this many bytes of float32 logits (at
Qwen2.5's 151,936 tokens 27 positions; a few such tensors are its whole transient)."""


def _chunk_rows(vocab: int) -> int:
    return max(1, LOGPROB_CHUNK_BYTES // (4 * vocab))


class _TokenLogprobs(torch.autograd.Function):
    """log softmax(logits / temperature)[target] per position, without the float32 copies of the whole
    logits tensor that the plain expression keeps for its backward pass (upcast, tempered copy, the
    log-sum-exp's saved input): the forward and the backward run over chunks of positions, and the
    backward recomputes each chunk's softmax from the logits themselves (which the model's output holds
    anyway) and the saved log-sum-exp. The gradient is the plain expression's, (one-hot(target) -
    softmax) x grad / temperature, computed by the same operations in at least float32 and returned
    in the logits' dtype."""

    @staticmethod
    def forward(ctx, logits, targets, temperature: float):
        v = logits.shape[-1]
        dtype = torch.promote_types(logits.dtype, torch.float32)
        flat, tgt = logits.reshape(-1, v), targets.reshape(-1, 1)
        out = torch.empty(flat.shape[0], dtype=dtype, device=logits.device)
        lse = torch.empty_like(out)
        step = _chunk_rows(v)
        for i in range(0, flat.shape[0], step):
            x = flat[i:i + step].to(dtype, copy=True).div_(temperature)
            lse[i:i + step] = x.logsumexp(-1)
            out[i:i + step] = x.gather(-1, tgt[i:i + step]).squeeze(-1) - lse[i:i + step]
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature = temperature
        return out.view(targets.shape)

    @staticmethod
    def backward(ctx, grad):
        logits, targets, lse = ctx.saved_tensors
        v, t = logits.shape[-1], ctx.temperature
        dtype = torch.promote_types(logits.dtype, torch.float32)
        flat, tgt, g = logits.reshape(-1, v), targets.reshape(-1, 1), grad.reshape(-1, 1).to(dtype)
        out = torch.empty_like(flat)
        step = _chunk_rows(v)
        for i in range(0, flat.shape[0], step):
            rows = slice(i, i + step)
            # as autograd differentiates the plain expression, operation for operation: the log-sum-exp's
            # share -g exp(x - lse), the gather's g at the target, then the temperature's division (in place, on
            # one copy of the chunk: the same values, a third less time than a new tensor for each operation)
            d = flat[rows].to(dtype, copy=True).div_(t).sub_(lse[rows, None]).exp_().mul_(-g[rows])
            d.scatter_add_(-1, tgt[rows], g[rows])
            out[rows] = d.div_(t)
        return out.view_as(logits), None, None


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature) at each target [...] of logits [..., V], in at least float32,
    differentiable; memory beyond the logits and their gradient: chunks of `LOGPROB_CHUNK_BYTES`
    (`_TokenLogprobs`)."""
    return _TokenLogprobs.apply(logits, targets, float(temperature))


def completion_logprobs(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    bf16: bool = False,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [N, T] of the completion tokens under `model` (differentiable), and optionally
    the per-token entropy [N, T] of the model's distribution (not differentiated)."""
    device = next(model.parameters()).device
    ids = torch.cat([prompt_ids, completion_ids], dim=1).to(device)           # [N, P+T]
    mask = torch.cat([prompt_mask, completion_mask], dim=1).to(device)        # [N, P+T]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    p = prompt_ids.shape[1]
    with autocast(bf16, device):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    logits = logits[:, p - 1:-1]                                              # [N, T, V]
    logp = token_logprobs(logits, completion_ids.to(device), temperature)    # [N, T]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_of(F.log_softmax(upcast(logits) / temperature, -1))
    return logp, entropy


@torch.no_grad()
def completion_log_softmax(model: PreTrainedModel, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                           completion_ids: torch.Tensor, completion_mask: torch.Tensor, *,
                           bf16: bool = False) -> torch.Tensor:
    """The model's whole next-token distribution (log-probs [N, T, V], temperature 1, no gradient) at
    each completion position: what a KL or an entropy over the vocabulary needs."""
    device = next(model.parameters()).device
    ids = torch.cat([prompt_ids, completion_ids], dim=1).to(device)           # [N, P+T]
    mask = torch.cat([prompt_mask, completion_mask], dim=1).to(device)        # [N, P+T]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with autocast(bf16, device):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    return F.log_softmax(upcast(logits[:, prompt_ids.shape[1] - 1:-1]), dim=-1)


def group_logprobs(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    group_size: int,
    *,
    temperature: float = 1.0,
    bf16: bool = False,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`completion_logprobs` for groups that share a prompt, computing each prompt once.

    The B prompts are run once with a KV cache, the cache is repeated to the B*G rows (gradients
    flow back through the copy), and the completions attend to it. Equal to `completion_logprobs`
    on the repeated prompts up to float rounding; saves the prompt's share of the compute x (G-1)/G.

    Args:
        prompt_ids, prompt_mask: [B, P], one row per group.
        completion_ids, completion_mask: [B*G, T], the G rows of a group contiguous.
    """
    device = next(model.parameters()).device
    assert completion_ids.shape[0] == prompt_ids.shape[0] * group_size, "completions must be [B*G, T]"
    if model.training and any(getattr(m, "gradient_checkpointing", False) for m in model.modules()):
        # checkpointed layers drop the KV cache in training mode (transformers): run each row whole
        return completion_logprobs(model, prompt_ids.repeat_interleave(group_size, 0),
                                   prompt_mask.repeat_interleave(group_size, 0), completion_ids, completion_mask,
                                   temperature=temperature, bf16=bf16, with_entropy=with_entropy)
    p_mask = prompt_mask.to(device)
    p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)                                    # [B, P]
    cache = DynamicCache()
    with autocast(bf16, device):
        first = model(input_ids=prompt_ids.to(device), attention_mask=p_mask, position_ids=p_pos,
                      **with_cache(model, cache), use_cache=True, logits_to_keep=1).logits[:, -1]  # [B, V]
        cache.batch_repeat_interleave(group_size)
        attn = torch.cat([p_mask.repeat_interleave(group_size, 0), completion_mask.to(device)], dim=1)  # [N, P+T]
        t = completion_ids.shape[1]
        c_pos = p_pos[:, -1:].repeat_interleave(group_size, 0) + 1 + torch.arange(t, device=device)    # [N, T]
        parts = [first.repeat_interleave(group_size, 0)[:, None]]                                 # [N, 1, V]
        if t > 1:
            parts.append(model(input_ids=completion_ids[:, :-1].to(device), attention_mask=attn[:, :-1],
                               position_ids=c_pos[:, :-1], **with_cache(model, cache), use_cache=True).logits)  # [N, T-1, V]
    # each part's log-probs on its own, then joined: the same values as over the logits joined, without copying
    # the [N, T, V] logits and their gradient (on SmolLM2 a tenth of a scoring pass without gradients)
    ids = completion_ids.to(device)
    logp = torch.cat([token_logprobs(x, ids[:, j:j + x.shape[1]], temperature) for j, x in zip((0, 1), parts)], 1)  # [N, T]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = torch.cat([entropy_of(F.log_softmax(upcast(x) / temperature, -1)) for x in parts], 1)
    return logp, entropy

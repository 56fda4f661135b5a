"""The memory plan of a run: what each GPU holds at the run's peak, counted before any model loads, for either
generation backend; refused with the figures and the keys to change when it does not fit (`check_memory`), and
printed for a GPU of a given size by `train_*.py --memory-plan GIB` (`print_memory_plan`), offline and without weights.

Per GPU it counts, for each model there (agents, separate critics, MARLHF's reward model; the byte counts are
cooprl.rollout.vllm_memory's), its weights and optimizer states (`agent_model.bf16_optimizer`; under fsdp 1/N of the
states, the weights whole because sampling gathers them), frozen references and each vLLM engine (weights + KV cache
+ `ENGINE_OVERHEAD_BYTES`). On top comes the update of the largest forward the run makes (`largest_forward`): the
model's gradients (freed after each optimizer step, so one model's at a time, all of a GPU's models' under
`parallel_training: mp`), the activations that forward keeps for the backward (`activation_bytes`) and its float32
log-softmax (`logits_bytes`). Those two are bounds, every completion at max_new_tokens and prompts at max_length or,
in a single-turn run, at the dataset's longest first prompt (`prompt_bound`); a GPU over its memory only by them
"may not fit" and is warned about, one over it whatever the lengths is refused (`verdicts`).

The activation term was measured, not guessed: tests/cooprl/rollout/test_memory_plan.py walks the tensors autograd
saves in `completion_logprobs` for 1- and 2-layer Qwen2 models (bf16, trie layout) and finds per token and layer
`activation_bytes_per_token_layer` plus the trie's masks; for Qwen2.5-Coder-3B's shapes that is 131 KiB (gpu-review-3
measured 133 KiB the same way). It is CPU accounting: CUDA's fused attention kernels save the same q/k/v/output and
log-sum-exp, and the math kernel would save more.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from cooprl.errors import UserError
from cooprl.config import (ActorCriticSection, ConfigError, MADPOSection, MAGRPOSection, MARLHFSection, Run,
                           SFTSection, TrainerSection, agent_names, agent_settings, model_devices, trainer_device,
                           vllm_lora_slot)
from cooprl.models.loading import pick_dtype
from cooprl.rollout import vllm_memory
from cooprl.rollout.vllm_memory import ENGINE_OVERHEAD_BYTES, GIB, ModelShape, gpu_name, on_gpu

log = logging.getLogger(__name__)

RESERVED_BYTES = 1 * GIB        # of every GPU outside torch's allocator: the CUDA context, cuBLAS/cuDNN workspaces
PLAN_MARGIN = 0.10              # a plan above (1 - this) of what is usable is warned about: the estimate's own error
CHARS_PER_TOKEN_FLOOR = 2.0     # characters per token assumed for prompts whose tokenizer is not on this machine: the
                                # densest first prompt of the shipped datasets: 2.20 under SmolLM2's tokenizer (tested)
REFUSED_AT_FRACTION = 0.5       # a plan over the GPU is refused when even an update of this fraction of the bound's
                                # activations and log-softmax would not fit, else warned about ("may not fit")
LOGSOFTMAX_COPIES = 3           # [positions x vocab] float32 tensors at the backward's peak: the saved log-softmax,
                                # its incoming gradient and the logits' gradient


@dataclass(frozen=True)
class Forward:
    """The largest forward with gradients the run makes: `tokens` through every layer, `kept` positions whose logits
    are taken, `sequences` in it, and whether they share prefixes (`trie`: cooprl.models.logprobs' token trie)."""

    tokens: int
    kept: int
    sequences: int
    trie: bool


def _forward(sequences: int, prompts: int, prompt_tokens: int, new_tokens: int) -> Forward:
    """Return the Forward of `sequences` completions of `new_tokens` after `prompts` distinct prompts of
    `prompt_tokens`: a trie when prompts are shared, else the padded layout. A trie above MAX_TRIE_TOKENS is scored
    by completion_logprobs in parts, but the parts' graphs all wait for the one backward, so every token counts."""
    length = prompt_tokens + new_tokens
    if prompts < sequences:
        tokens = min(prompts * prompt_tokens + sequences * new_tokens, sequences * length)
        return Forward(tokens, min(sequences * new_tokens, tokens), sequences, True)
    return Forward(sequences * length, sequences * new_tokens, sequences, False)


@dataclass(frozen=True)
class PromptBound:
    """The longest first prompt of the run's dataset in tokens, and how it was counted (said in the plan)."""

    tokens: int
    how: str


def prompt_bound(prompts: Sequence[str], tokenizer: Any | None, model_name: str) -> PromptBound:
    """Return the longest of `prompts` in tokens: counted by `tokenizer` (model `model_name`'s, None when it is not on
    this machine), else bounded by its characters / CHARS_PER_TOKEN_FLOOR."""
    if tokenizer is not None:
        tokens = max(len(ids) for ids in tokenizer(list(prompts))["input_ids"])
        return PromptBound(tokens, f"counted by {model_name}'s tokenizer")
    chars = max(map(len, prompts))
    return PromptBound(math.ceil(chars / CHARS_PER_TOKEN_FLOOR),
                       f"{chars} characters / {CHARS_PER_TOKEN_FLOOR:g} per token: {model_name}'s tokenizer is not "
                       "on this machine")


def local_tokenizer(name: str) -> Any | None:
    """Return model `name`'s tokenizer from this machine's files (never the network), None when they are absent."""
    from transformers import AutoTokenizer
    from cooprl.models.loading import resolve_model_path
    try:
        return AutoTokenizer.from_pretrained(resolve_model_path(name), local_files_only=True)
    except (OSError, ValueError, UserError):
        return None


def _tree_nodes(section: MAGRPOSection) -> int:
    """Return the nodes of one item's rollout tree (every node expanded: aligned G children, cross G^N)."""
    children = section.num_generations ** (section.num_agents if section.joint_mode == "cross" else 1)
    return sum(children ** turn for turn in range(section.num_turns))


def largest_forward(section: TrainerSection, max_length: int, first_prompt: int | None = None) -> Forward:
    """Return the largest forward with gradients a trainer `section` makes, completions of max_new_tokens after prompts
    of `first_prompt` tokens (the dataset's longest, `prompt_bound`) in a single-turn run, else (a later turn's prompt
    holds earlier turns and the environment's feedback; None: the dataset was not read) at their longest,
    `max_length` - max_new_tokens: MAGRPO/GRPO/MARLHF one optimizer step's nodes (`nodes`) or one item's tree
    (`items`), the actor-critics a buffer's turn samples, MADPO a step's pairs (winner and loser share a prompt), SFT
    a batch of demonstrations."""
    new = section.max_new_tokens
    prompt = max(max_length - new, 8)
    if first_prompt is not None and section.num_turns == 1:
        prompt = min(prompt, first_prompt)
    if isinstance(section, MAGRPOSection):
        g = section.num_generations
        if section.update_schedule == "nodes":
            nodes = section.train_batch_size or section.rollout_buffer_size
            return _forward(nodes * g, nodes, prompt, new)
        sequences = section.train_batch_size or g * _tree_nodes(section)
        return _forward(sequences, math.ceil(sequences / g), prompt, new)
    if isinstance(section, ActorCriticSection):
        sequences = section.rollout_buffer_size * (section.num_turns if section.update_schedule == "episodes" else 1)
        return _forward(sequences, math.ceil(sequences / section.num_generations), prompt, new)
    if isinstance(section, MADPOSection):
        pairs = (section.train_batch_size or section.rollout_buffer_size or section.preference_pairs_per_sample
                 or section.preference_num_candidates)
        return _forward(2 * pairs, pairs, prompt, new)
    batch = section.batch_size if isinstance(section, SFTSection) else 1
    return _forward(batch, batch, prompt, new)


def activation_bytes_per_token_layer(shape: ModelShape, dtype: torch.dtype) -> int:
    """Return the bytes one decoder layer of a Llama/Qwen2-style model keeps for the backward per token (`b` the
    weights' dtype size; h hidden, i intermediate, kv = KV heads x head size):

    - two RMSNorms: each its float32 input (4h), rsqrt (4), normalized output (h b) and its product with the gain,
      which the next projections keep (h b): 8h + 8 + 4h b;
    - attention: rotated q (h b), k and v (2 kv b), SDPA's output (h b) and its float32 log-sum-exp (4 x heads),
      o_proj's input (h b): 3h b + 2 kv b + 4 heads;
    - MLP: gate and up outputs, SiLU's output and the product down_proj keeps: 4i b.

    For Qwen2.5-Coder-3B in bf16 (h 2,048, i 11,008, kv 256, 16 heads): 134,216 B = 131 KiB."""
    b = torch.empty((), dtype=dtype).element_size()
    h, i, kv = shape.hidden, shape.intermediate, shape.kv_dim
    return 8 * h + 8 + (7 * h + 2 * kv + 4 * i) * b + 4 * shape.heads


def trie_mask_bytes(shape: ModelShape, dtype: torch.dtype, forward: Forward, path: int, new_tokens: int) -> int:
    """Return what a trie forward's masked segments add per layer: each completion's mask row over its path (`path`
    tokens at most) and its gathered keys and values (2 kv x path per segment of `new_tokens`)."""
    if not forward.trie:
        return 0
    b = torch.empty((), dtype=dtype).element_size()
    return forward.kept * path * b + math.ceil(forward.kept / new_tokens) * path * 2 * shape.kv_dim * b


def activation_bytes(shape: ModelShape, dtype: torch.dtype, forward: Forward, model_cfg: Any, new_tokens: int) -> int:
    """Return the activations `forward` keeps for its backward: every layer's (`activation_bytes_per_token_layer`
    and the trie's masks) or, with agent_model.gradient_checkpointing, each layer's input plus one layer recomputed."""
    per_layer = forward.tokens * activation_bytes_per_token_layer(shape, dtype)
    per_layer += trie_mask_bytes(shape, dtype, forward, model_cfg.max_length, new_tokens)
    if model_cfg.gradient_checkpointing:
        b = torch.empty((), dtype=dtype).element_size()
        return shape.layers * forward.tokens * shape.hidden * b + per_layer
    return shape.layers * per_layer


def logits_bytes(shape: ModelShape, dtype: torch.dtype, forward: Forward, chunk: int | None) -> int:
    """Return the update's log-softmax at its backward's peak: LOGSOFTMAX_COPIES float32 [positions x vocab]
    tensors for the kept positions, or with agent_model.logprob_chunk_size for one chunk of them plus the kept
    positions' hidden states."""
    if chunk is None:
        return forward.kept * shape.vocab * 4 * LOGSOFTMAX_COPIES
    b = torch.empty((), dtype=dtype).element_size()
    return min(chunk, forward.kept) * shape.vocab * 4 * LOGSOFTMAX_COPIES + forward.kept * shape.hidden * b


@dataclass
class DeviceAccount:
    """What one GPU holds at the run's peak, by what holds it (the plan's lines and the refusal's figures)."""

    items: list[tuple[str, int]] = field(default_factory=list)
    bounded: int = 0   # of which the update's activations and log-softmax: bounds (every completion at its longest)

    def total(self) -> int:
        """Return the bytes of every item."""
        return sum(size for _, size in self.items)

    def held(self) -> int:
        """Return the bytes the GPU holds whatever the completions' lengths: all but the update's bounded terms."""
        return self.total() - self.bounded

    def describe(self) -> str:
        """Return the items as 'what X.X GiB' joined by ' + '."""
        return " + ".join(f"{what} {size / GIB:.1f} GiB" for what, size in self.items)


@dataclass(frozen=True)
class Trained:
    """A model trained on a GPU (`label`: "agent 0", "critic 1"): its update's gradients, activations and
    log-softmax in bytes, and its largest forward."""

    label: str
    gradients: int
    activations: int
    logits: int
    forward: Forward


@dataclass
class Planner:
    """Builds a run's plan (`accounts`): `gpu_bytes` the memory of each GPU (None: what torch reports), `processes`
    the data-parallel world size (fsdp shares the states), `offline`: model shapes from local files only,
    `first_prompt`: the dataset's longest first prompt (`largest_forward`)."""

    config: Any
    run: Run | None
    gpu_bytes: int | None = None
    processes: int = 1
    offline: bool = False
    first_prompt: int | None = None   # the dataset's longest first prompt in tokens (None: not read)
    accounts: dict[str, DeviceAccount] = field(default_factory=dict)
    updates: dict[str, list[Trained]] = field(default_factory=dict)

    def total_bytes(self, device: str) -> int:
        """Return the memory of GPU `device`."""
        return self.gpu_bytes if self.gpu_bytes is not None else vllm_memory.gpu_total_bytes(device)

    def add(self, device: str, what: str, size: int) -> None:
        """Count `size` bytes of `what` on `device` (nothing off the GPU)."""
        if on_gpu(device):
            self.accounts.setdefault(gpu_name(device), DeviceAccount()).items.append((what, size))

    def model(self, label: str, name: str, device: str, model_cfg: Any, lora: Any, *,
              max_new_tokens: int | None = None, weights: str | None = "weights") -> tuple[ModelShape, torch.dtype]:
        """Count a trained model's weights (the line `label weights`; None: counted with another model, the base
        agents share) and optimizer states on `device` and note its update (completions of `max_new_tokens`, None:
        the section's); return its shape and dtype."""
        section = self.run.section
        if max_new_tokens is not None:   # an agent's own (its `agents:` entry)
            section = dataclasses.replace(section, max_new_tokens=max_new_tokens)
        dtype = pick_dtype(model_cfg.torch_dtype, torch.device(gpu_name(device)))
        shape = vllm_memory.model_shape(name, lora, offline=self.offline)
        bf16_optimizer = self.config.agent_model.bf16_optimizer
        sharded = self.processes if section.parallel_training == "fsdp" else 1
        fsdp_note = f" (1/{sharded}: fsdp)" if sharded > 1 else ""
        if weights is not None:
            self.add(device, f"{label} {weights}", vllm_memory.weight_bytes(shape, dtype))
        self.add(device, f"{label} optimizer states{fsdp_note}",
                 vllm_memory.optimizer_bytes(shape, dtype, lora is not None, bf16_optimizer) // sharded)
        if not on_gpu(device):
            return shape, dtype
        forward = largest_forward(section, self.config.agent_model.max_length, self.first_prompt)
        agent_cfg = self.config.agent_model
        self.updates.setdefault(gpu_name(device), []).append(Trained(
            label, vllm_memory.trained_bytes(shape, dtype, lora is not None) // sharded,
            activation_bytes(shape, dtype, forward, agent_cfg, section.max_new_tokens),
            logits_bytes(shape, dtype, forward, agent_cfg.logprob_chunk_size), forward))
        return shape, dtype

    def engine(self, i: int, name: str, dtype: torch.dtype, shards: Sequence[str], max_new_tokens: int,
               agents: int = 1) -> None:
        """Count agent `i`'s vLLM engine of model `name` on its `shards`: weights (1/T each) + KV cache + (LoRA sync)
        the LoRA slots of `agents` adapters + ENGINE_OVERHEAD_BYTES, or with `vllm_kv_cache_bytes: 0`
        vllm_gpu_memory_utilization x the GPU. `agents` > 1: the one engine of a team sharing a base."""
        model_cfg = self.config.agent_model
        section = self.run.section if self.run is not None else None
        shape = vllm_memory.model_shape(name, offline=self.offline)
        kv = vllm_memory.engine_kv_cache_bytes(model_cfg, section, max_new_tokens, shape.kv_elements_per_token, dtype)
        label = f"engine {i}" if agents == 1 else f"engine of the {agents} agents"
        slots = (vllm_memory.lora_slots_bytes(name, vllm_lora_slot(model_cfg.lora.r), agents, dtype, self.offline)
                 if model_cfg.vllm_weight_sync == "lora" else 0)
        slots_note = f" + {agents} LoRA slot{'s' if agents > 1 else ''} {slots / GIB:.2f} GiB" if slots else ""
        for shard in filter(on_gpu, shards):
            if kv is None:
                utilization = model_cfg.vllm_gpu_memory_utilization
                self.add(shard, f"{label} (vllm_gpu_memory_utilization {utilization})",
                         int(utilization * self.total_bytes(gpu_name(shard))))
            else:
                self.add(shard, f"{label} (weights + KV cache {kv / GIB:.2f} GiB{slots_note} + overhead)",
                         vllm_memory.weight_bytes(shape, dtype) // len(shards) + kv + slots // len(shards)
                         + ENGINE_OVERHEAD_BYTES)

    def update_peak(self) -> None:
        """Add each GPU's update: the model whose gradients and activations are largest (under mp every model on
        the GPU, whose updates run concurrently)."""
        concurrent = self.run is not None and self.run.section.parallel_training == "mp"
        for device, models in self.updates.items():
            chosen = models if concurrent else [max(models, key=lambda m: m.gradients + m.activations + m.logits)]
            for m in chosen:
                f = m.forward
                account = self.accounts[device]
                account.items.append((f"{m.label} gradients (its update)", m.gradients))
                account.items.append((f"{m.label} activations ({f.tokens} tokens of {f.sequences} sequences, "
                                      f"{'trie' if f.trie else 'padded'})", m.activations))
                account.items.append((f"{m.label} log-softmax ({f.kept} positions, float32)", m.logits))
                account.bounded += m.activations + m.logits


def plan_accounts(planner: Planner, agent_devices: Sequence[str], engine_devices: Sequence[Sequence[str]],
                  critic_devices: Sequence[str] = (), max_new_tokens: int | None = None,
                  reward_device: str | None = None) -> dict[str, DeviceAccount]:
    """Return, per GPU, what the run of `planner` holds at its peak: each agent on `agent_devices[i]` (trained by the
    run's section, or its weights only, as in evaluation, when the planner has no run), its engine on
    `engine_devices[i]` (empty without vLLM), its frozen reference, the separate critics on `critic_devices`, MARLHF's
    reward model on `reward_device`, and the update (`Planner.update_peak`)."""
    devices = [*agent_devices, *(d for shards in engine_devices for d in shards), *critic_devices]
    if not any(map(on_gpu, devices + ([reward_device] if reward_device is not None else []))):
        return {}   # CPU runs: nothing to count
    config, run = planner.config, planner.run
    model_cfg = config.agent_model
    names = (agent_names(config) if config.agents is not None else [model_cfg.name] * len(agent_devices)
             )[:len(agent_devices)]   # an evaluation may sample with the first of them only
    if len(names) != len(agent_devices):
        raise ConfigError(f"agents: {len(names)} model names given for {len(agent_devices)} agents; give one per "
                          f"agent, or agents=null for agent_model.name in every agent")
    # each agent's own max_new_tokens (its `agents:` entry's, else the section's); an evaluation's `max_new_tokens`
    budgets = ([own.max_new_tokens for own in agent_settings(config, run.section, len(names))]
               if max_new_tokens is None else [max_new_tokens] * len(names))
    # agent_model.share_base in training (build_team): the first agent's count holds the base and the one engine every
    # agent samples from (an evaluation's agents, strategies/llm.py, are still built apart)
    shared = len(agent_devices) if run is not None and model_cfg.share_base and model_cfg.lora is not None else 1
    for i, (name, device) in enumerate(zip(names, agent_devices, strict=True)):
        weights = ("weights" if shared == 1 else
                   f"weights (the one base of the {shared} agents: agent_model.share_base)" if i == 0 else None)
        if run is None:
            dtype = pick_dtype(model_cfg.torch_dtype, torch.device(gpu_name(device)))
            shape = vllm_memory.model_shape(name, model_cfg.lora, offline=planner.offline)
            if weights is not None:
                planner.add(device, f"agent {i} {weights}", vllm_memory.weight_bytes(shape, dtype))
        else:
            shape, dtype = planner.model(f"agent {i}", name, device, model_cfg, model_cfg.lora,
                                         max_new_tokens=budgets[i], weights=weights)
            section = run.section
            reference_model = isinstance(section, MADPOSection) and section.reference_model
            if model_cfg.lora is None and (section.reference_kl_coef > 0 or reference_model):
                planner.add(device, f"agent {i} reference", vllm_memory.weight_bytes(shape, dtype))
        if engine_devices and weights is not None:
            # the one engine of a shared base serves every agent: its KV cache is sized for the longest budget
            engine_budget = budgets[i] if shared == 1 else max(budgets)
            planner.engine(i, name, dtype, engine_devices[i], engine_budget, agents=shared)
    for c, device in enumerate(critic_devices):
        name = (config.critics[c] if config.critics is not None else config.critic_model.name) or names[c]
        planner.model(f"critic {c}", name, device, config.critic_model, config.critic_model.lora)
    if reward_device is not None:
        name = run.section.reward_model_name or model_cfg.name
        if run.section.reward_freeze_backbone:   # only its linear head learns
            shape = vllm_memory.model_shape(name, offline=planner.offline)
            dtype = pick_dtype(model_cfg.torch_dtype, torch.device(gpu_name(reward_device)))
            planner.add(reward_device, "reward model weights (frozen backbone)", vllm_memory.weight_bytes(shape, dtype))
        else:
            planner.model("reward model", name, reward_device, model_cfg, None)
    planner.update_peak()
    return planner.accounts


def usable_bytes(total: int) -> int:
    """Return what a GPU of `total` bytes offers torch's allocator: all but RESERVED_BYTES."""
    return total - RESERVED_BYTES


def _fixes(config: Any, run: Run | None, vllm: bool) -> str:
    """Return the keys that lower a plan and are not already set so, for the refusal."""
    model_cfg = config.agent_model
    fixes = []
    if run is not None:
        if not model_cfg.gradient_checkpointing:
            fixes.append("agent_model.gradient_checkpointing=true (activations: each layer's input only)")
        if model_cfg.logprob_chunk_size is None:
            fixes.append("agent_model.logprob_chunk_size=256 (the log-softmax a chunk at a time)")
        if model_cfg.lora is None:
            fixes.append("agent_model.lora.r=16 (train adapters only)")
        if model_cfg.bf16_optimizer == "kahan":
            fixes.append("agent_model.bf16_optimizer=pure (4 bytes per weight less, updates below a bf16 ulp lost)")
        fixes += ["agent_model.max_length (the longest prompt + completion)",
                  f"more GPUs ({run.trainer}.parallel_training mp with one GPU per agent, or fsdp)"]
    if vllm:
        fixes.append("agent_model.vllm_kv_cache_bytes (each engine's KV cache; 0 sizes it by "
                     "agent_model.vllm_gpu_memory_utilization instead)")
    if model_cfg.memory_plan == "refuse":
        fixes.append("agent_model.memory_plan=warn (start anyway)")
    return "; ".join(fixes)


def verdicts(planner: Planner) -> dict[str, str]:
    """Return, per GPU of the plan, "fits", "tight" (above 1 - PLAN_MARGIN of the usable memory), "may not fit"
    (above it only by the update's activations and log-softmax, bounded with every completion at max_new_tokens and
    prompts at their bound: an update that long would not fit, a shorter one does) or "too big" (what it holds
    whatever the lengths does not fit, or not even REFUSED_AT_FRACTION of the update's bounded terms would)."""
    result = {}
    for device, account in planner.accounts.items():
        usable = usable_bytes(planner.total_bytes(device))
        total = account.total()
        if total <= usable:
            result[device] = "tight" if total > (1 - PLAN_MARGIN) * usable else "fits"
        else:
            shorter = account.held() + REFUSED_AT_FRACTION * account.bounded
            result[device] = "may not fit" if shorter <= usable else "too big"
    return result


def check_plan(planner: Planner, vllm: bool) -> None:
    """ConfigError, with the figures and the keys to change, when a GPU of the plan would not hold it (a warning
    instead with agent_model.memory_plan: warn); a warning when only its update's bound would not fit, or when it is
    within PLAN_MARGIN of the usable memory."""
    for device, verdict in verdicts(planner).items():
        account, total = planner.accounts[device], planner.total_bytes(device)
        figures = (f"{device} would hold {account.total() / GIB:.1f} GiB at the update's peak, of the "
                   f"{usable_bytes(total) / GIB:.1f} GiB usable of its {total / GIB:.1f} GiB: {account.describe()}")
        if verdict == "too big":
            message = f"GPU memory plan: {figures}; change {_fixes(planner.config, planner.run, vllm)}"
            if planner.config.agent_model.memory_plan == "refuse":
                raise ConfigError(message)
            log.warning("%s", message)
        elif verdict == "may not fit":
            log.warning("GPU memory plan: %s: %s (an update whose completions all run to max_new_tokens may run out "
                        "of memory); to be sure, change %s", figures, _may_not_fit(account, usable_bytes(total)),
                        _fixes(planner.config, planner.run, vllm))
        elif verdict == "tight":
            log.warning("GPU memory plan: %s: within %.0f%% of what it can hold, the estimate's margin (an OOM is "
                        "possible at the first update)", figures, PLAN_MARGIN * 100)


def _may_not_fit(account: DeviceAccount, usable: int) -> str:
    """Return what a "may not fit" verdict rests on: the bytes held whatever the lengths, and the update's room."""
    return (f"{account.held() / GIB:.1f} GiB held whatever the lengths, {(usable - account.held()) / GIB:.1f} GiB "
            f"left for the update's activations and log-softmax, bounded at {account.bounded / GIB:.1f} GiB")


def reward_model_device(run: Run | None, config: Any) -> str | None:
    """Return where MARLHF's reward model sits (None for other runs)."""
    if run is None or not isinstance(run.section, MARLHFSection):
        return None
    return trainer_device(run.section.reward_model_device, "reward_model_device", config.agent_model.device)


def critic_devices(run: Run | None, config: Any, agents: int) -> list[str]:
    """Return where the run's separate critics sit (one per agent, MAAC's one; none without)."""
    section = run.section if run is not None else None
    if not (isinstance(section, ActorCriticSection) and section.use_separate_critic):
        return []
    count = 1 if run.trainer == "maac" else agents
    return model_devices(section.critic_devices, "critic_devices", count, config.agent_model.device)


def check_memory(config: Any, agent_devices: Sequence[str], run: Run | None = None,
                 max_new_tokens: int | None = None, prompts: Callable[[], Sequence[str]] | None = None) -> None:
    """Make the plan of a run (`run`; None: an evaluation's untrained agents sampling `max_new_tokens`) whose agents
    sit on `agent_devices`, either backend, and refuse or warn (`check_plan`); called before any model loads.
    `prompts()`: the task's first prompts, read for a single-turn GPU run (`prompt_bound`; None: at max_length)."""
    from cooprl.parallel.context import Parallel
    from cooprl.rollout import vllm_platform
    model_cfg = config.agent_model
    vllm = model_cfg.generation_backend == "vllm"
    engines = ([vllm_platform.engine_devices(d, model_cfg.vllm_tensor_parallel_size) for d in agent_devices]
               if vllm else [])
    critics = Parallel.devices(critic_devices(run, config, len(agent_devices)))
    reward = reward_model_device(run, config)
    name = agent_names(config)[0]
    # only a single-turn GPU run's plan is bounded by its prompts
    counted = prompts is not None and run is not None and run.section.num_turns == 1 and any(map(on_gpu, agent_devices))
    texts = prompts() if counted else []
    bound = prompt_bound(texts, local_tokenizer(name), name) if texts else None
    planner = Planner(config, run, processes=Parallel.launched_world_size(),
                      first_prompt=bound.tokens if bound is not None else None)
    plan_accounts(planner, agent_devices, engines, critics, max_new_tokens,
                  Parallel.devices([reward])[0] if reward is not None else None)
    check_plan(planner, vllm)


def _planned_gpu(device: str, rank_gpu: bool) -> str:
    """Return the GPU a configured `device` means in a plan made without GPUs: auto and cuda are cuda:0, and so is
    every CUDA device of a data-parallel rank (`rank_gpu`: each rank on its own GPU, all alike)."""
    if device in ("auto", "cuda") or (rank_gpu and device.startswith("cuda")):
        return "cuda:0"
    return device


def print_memory_plan(run: Run, gib: float, processes: int = 1, prompts: Sequence[str] | str = "") -> None:
    """Print the plan of `run` per GPU of `gib` GiB (`processes`: the data-parallel world size), made offline; return
    when every GPU holds it, ConfigError (after printing) when one does not. `prompts`: the dataset's first prompts,
    which bound a single-turn run's (`prompt_bound`), or why they could not be read offline."""
    if not gib > 0:
        raise ConfigError(f"--memory-plan {gib:g}: expected the GPU's memory in GiB, e.g. 80")
    config, section = run.config, run.section
    model_cfg = config.agent_model
    rank_gpu = section.parallel_training in ("ddp", "fsdp")
    models = 1 if model_cfg.shared_policy else section.num_agents   # a shared policy: one model plays them all
    agents = [_planned_gpu(d, rank_gpu) for d in model_devices(section.agent_devices, "agent_devices", models,
                                                               model_cfg.device)]
    vllm = model_cfg.generation_backend == "vllm"
    shards = model_cfg.vllm_tensor_parallel_size
    engines = [[d] if shards == 1 else [f"cuda:{s}" for s in range(shards)] for d in agents] if vllm else []
    critics = [_planned_gpu(d, rank_gpu) for d in critic_devices(run, config, len(agents))]
    reward = reward_model_device(run, config)
    name = agent_names(config)[0]
    bound = prompt_bound(prompts, local_tokenizer(name), name) if not isinstance(prompts, str) and prompts else None
    planner = Planner(config, run, gpu_bytes=int(gib * GIB), processes=processes, offline=True,
                      first_prompt=bound.tokens if bound is not None else None)
    plan_accounts(planner, agents, engines, critics, reward_device=reward and _planned_gpu(reward, rank_gpu))
    world = f", {processes} processes ({section.parallel_training})" if rank_gpu else ""
    if section.parallel_training == "fsdp" and processes == 1:
        world += ", WORLD_SIZE unset: say WORLD_SIZE=N for N processes' shards"
    print(f"memory plan of {run.trainer} ({model_cfg.generation_backend} sampler{world}), per GPU of {gib:g} GiB "
          f"({usable_bytes(planner.total_bytes('cuda:0')) / GIB:.1f} GiB usable):")
    if not planner.accounts:
        print("  nothing on a GPU (every model on the CPU)")
        return
    longest = max(model_cfg.max_length - section.max_new_tokens, 8)
    forward = largest_forward(section, model_cfg.max_length, planner.first_prompt)
    dataset = (f"the dataset's longest first prompt: {bound.tokens} tokens ({bound.how})" if bound is not None
               else f"the dataset was not read offline ({prompts or 'no prompts'})")
    used = (f"prompts of {min(bound.tokens, longest)} tokens" if bound is not None and section.num_turns == 1 else
            f"prompts at agent_model.max_length - max_new_tokens = {longest} tokens"
            + (f" ({section.num_turns} turns: later prompts hold earlier turns and feedback)"
               if bound is not None else ""))
    print(f"  largest update forward: {forward.sequences} sequences, {forward.tokens} tokens, {forward.kept} scored "
          f"positions ({used}; {dataset})")
    results = verdicts(planner)
    for device, account in planner.accounts.items():
        print(f"  {device}: {account.total() / GIB:.1f} GiB, {results[device]}")
        for what, size in account.items:
            print(f"    {size / GIB:7.2f} GiB  {what}")
        if results[device] == "may not fit":
            print(f"  {device}: {_may_not_fit(account, usable_bytes(planner.total_bytes(device)))}: an update "
                  "whose completions all run to max_new_tokens may run out of memory (a run starts with a warning)")
    too_big = [d for d, v in results.items() if v == "too big"]
    if too_big:
        account = planner.accounts[too_big[0]]
        raise ConfigError(f"memory plan: {too_big[0]} would hold {account.total() / GIB:.1f} GiB, more than the "
                          f"{usable_bytes(planner.total_bytes(too_big[0])) / GIB:.1f} GiB usable of {gib:g} GiB; "
                          f"change {_fixes(config, run, vllm)}")


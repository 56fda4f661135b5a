"""Typed configuration: dataclass sections, YAML loading, `--override key.path=value`, validation.

A config file is YAML whose top-level keys are the sections below. `load_config(path, overrides)` merges
the file with the overrides (each value parsed as YAML), checks every key and value against the typed
fields, and returns a `Config`. Errors are `ConfigError`s whose message names the key, what was expected
and what was given (shortened: a value is never printed in full), with a did-you-mean suggestion for unknown keys.

Hostile input is refused with a ConfigError too: a file that is not UTF-8 text (binary, UTF-16), YAML whose
aliases expand past MAX_YAML_NODES nodes (a "billion laughs" file) or nest deeper than MAX_YAML_DEPTH, a recursive
alias, and a non-finite float (nan, inf) in any float field.

The package, one concern a module (`from cooprl.config import X` works for every public name):
- `fields.py`: `option()`, coercion, bounds, did-you-mean errors, `build_section` (the typed-field machinery);
- `schema.py`: the library's sections and `Config`; `trainer_sections.py`: the trainers' sections;
- `yaml_io.py`: the bounded YAML loader and `read_yaml`; `overrides.py`: `--override key.path=value`;
- `rules.py`: the rules between keys (devices, parallel_training, vLLM); `upstream.py`: upstream's files as they are;
- `load.py`: `load_config`, `config_from_data` and the task sections an environment registers;
- `run.py`: `Run`, what one training run reads: the config, the trainer's name and its own typed section;
- `agents.py`: `AgentSettings`, each agent's own model and settings (its `agents:` entry, else the shared values).
"""

# every public name of the package, from the module that holds it
from cooprl.config.agents import agent_entries, agent_names, agent_settings, AgentSettings
from cooprl.config.fields import (build_section, ConfigError, field_aliases, field_doc, option, resolve_aliases, show,
                                  unknown_key_error)
from cooprl.config.load import config_from_data, load_config, register_task_config, registered_task_config
from cooprl.config.overrides import apply_overrides, check_override_sections, parse_override
from cooprl.config.rules import (check_consistency, check_parallel_training, check_training_samples_differ,
                                 check_vllm_temperature, vllm_lora_slot,
                                 VLLM_LORA_RANKS, VLLM_MIN_TEMPERATURE, DATA_PARALLEL_MODES, DEVICE_KEYS, device_list,
                                 FSDP_TRAINERS, is_data_parallel, model_devices, MP_TRAINERS, section_devices,
                                 trainer_device)
from cooprl.config.run import (MAGRPO_ADVANTAGE_MODES, RL_TRAINERS, Run, check_sections_read, check_trainer,
                               helper_sections)
from cooprl.config.schema import (AgentEntry, AgentModelSection, CheckpointSection, Config, CriticModelSection,
                                  LoraSection, OutputSection, RewardProcessorSection, RewardSection, WandbSection)
from cooprl.config.trainer_sections import (ACSection, ActorCriticSection, GRPOSection, IterativeFields,
                                            MADPOIterSection, MADPOSection, MAGRPOSection, MARLHFIterSection,
                                            MARLHFSection, PolicyObjectiveFields, PreferenceFields, SFTSection,
                                            TRAINER_SECTIONS, TrainerSection)
from cooprl.config.upstream import (lift_reward_shift, OLD_MADPO_COMPARATOR_NULLS, read_old_madpo_preference,
                                    trainer_of_data, trainer_of_file)
from cooprl.config.yaml_io import (load_yaml_text, MAX_CONFIG_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES, read_yaml,
                                   yaml_problem)

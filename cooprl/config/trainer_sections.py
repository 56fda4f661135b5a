"""The trainers' config sections: the keys every trainer shares (`TrainerSection`), each trainer's own, and
`TRAINER_SECTIONS`, the table of trainer names the loader and `cooprl.trainers` read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from cooprl.config.fields import option


@dataclass
class TrainerSection:
    """Keys every trainer shares."""
    num_agents: int = option(2, "number of agents (the task's roles)", min=1)
    num_turns: int = option(2, "turns per episode", min=1)
    num_train_epochs: int = option(1, "passes over the training split", min=1)
    max_steps: Optional[int] = option(None, "stop after this many training steps (dataset items); null = epochs. "
                                      "The _iter trainers (madpo_iter, marlhf_iter) count it per iteration: a run "
                                      "takes num_iterations x max_steps steps", min=1)
    learning_rate: float = option(2e-5, "actor learning rate (AdamW)", min=0.0,
                                  aliases=("agent_learning_rate", "actor_learning_rate"))
    weight_decay: float = option(0.01, "AdamW weight decay (0.01: torch's default)", min=0.0)
    max_grad_norm: Optional[float] = option(None, "gradient clipping norm (null = off)", min=0.0)
    reference_kl_coef: float = option(0.0, "weight of a k3 KL penalty to the frozen start model (0 = off, no "
                                      "reference model kept); how it acts: reference_kl_form", min=0.0)
    reference_kl_form: str = option(
        "reward", "reward: coef x the k3 KL of each sampled completion (summed over its tokens, no gradient) "
        "is subtracted from its reward (MAGRPO: its return; IAC/MAAC: its TD target) before advantages; loss: coef x "
        "the k3 KL is added to the policy loss, with gradient", choices=("reward", "loss"))
    max_new_tokens: int = option(256, "tokens generated per completion (joint budget in centralized mode)", min=1)
    temperature: Optional[float] = option(None, "overrides agent_model.temperature", min=0.0)
    top_p: Optional[float] = option(None, "overrides agent_model.top_p", min=0.0, max=1.0)
    top_k: Optional[int] = option(None, "overrides agent_model.top_k (null = agent_model.top_k)", min=0)
    logging_steps: int = option(1, "log training metrics every N steps", min=1)
    eval_interval: int = option(16, "evaluate every N steps (0 = only at the end)", min=0)
    eval_at_start: bool = option(True, "also evaluate before the first step of a fresh run (step 0: the curves' "
                                 "starting point and the summary's before/after; a resumed run does not repeat it)")
    eval_num_samples: int = option(16, "eval problems used per evaluation", min=1)
    eval_num_generations: int = option(1, "samples per eval problem (for pass@k)", min=1)
    eval_pass_k: list[int] = option([1], "k values of pass@k reported at evaluation")
    eval_batch_size: Optional[int] = option(None, "eval problems rolled out together (one sampling batch); "
                                            "null = all of an evaluation at once", min=1)
    parallel_training: str = option(
        "none", "none (or auto): one process, the agents one after the other; mp: one process, each agent's "
        "generation and update concurrent on its own device (agent_devices; magrpo, grpo); ddp: one process per "
        "device started by torchrun or accelerate launch, a step takes one item per process, gradients averaged "
        "(every trainer: iac, maac, ac with update_schedule episodes; madpo, madpo_iter with one DPO step per "
        "training step; marlhf, marlhf_iter with a MAGRPO-family rl_algorithm; see README Scaling out); fsdp: ddp "
        "with each agent's parameters, gradients and optimizer states sharded over the processes (torch FSDP2, the "
        "ZeRO-3 layout; every trainer, the actor-critics with use_separate_critic)",
        choices=("none", "auto", "mp", "ddp", "fsdp"))
    agent_devices: Union[str, list[str], None] = option(
        None, "the agents' devices: one device (cpu, cuda, cuda:N, mps) for every agent, or a list with one device "
        "per agent (null = agent_model.device)")
    discount: float = option(0.9, "discount of future turns' returns", min=0.0, max=1.0)
    early_termination_threshold: Optional[float] = option(
        -0.2, "do not expand a node whose mean processed reward exceeds this (null = never)")
    collaboration_mode: str = option("decentralized", "one model per agent, or one model for both roles",
                                     choices=("decentralized", "centralized"))
    centralized_prompt: str = option("concat", "centralized prompt: every agent's prompt (concat), the problem "
                                     "once (native), or the problem once with a worked example of the answer "
                                     "(example: best for small models)", choices=("concat", "native", "example"))
    centralized_answer: str = option("open", "bounded: the prompt opens the first role's section of the answer and "
                                     "generation stops at the end of the last one's; open: free form",
                                     choices=("open", "bounded"))


@dataclass
class PolicyObjectiveFields:
    """The policy-gradient objective's keys, TRL's names and meanings (docs/algorithms.md, "The policy-gradient
    objective"): MAGRPO's, GRPO's and the actor-critics' actors."""
    num_iterations: int = option(1, "passes over each update's samples; above 1 every pass takes the PPO ratio to the "
                                 "sampling policy, clipped to [1 - epsilon, 1 + epsilon_high]", min=1)
    epsilon: float = option(0.2, "the PPO clip's lower bound 1 - epsilon (num_iterations above 1)", min=0.0)
    epsilon_high: Optional[float] = option(None, "the PPO clip's upper bound 1 + epsilon_high (null = epsilon)",
                                           min=0.0)
    loss_type: str = option(
        "sequence_sum", "how a step's token terms add up: sequence_sum (each completion's sum, averaged over the "
        "step's samples), grpo (each completion's mean token), dapo (the mean token of the step), dr_grpo (each "
        "completion's sum over max_new_tokens)", choices=("sequence_sum", "grpo", "dapo", "dr_grpo"))
    mask_truncated_completions: bool = option(False, "leave completions that hit max_new_tokens before their end "
                                              "out of the loss")


@dataclass
class MAGRPOSection(PolicyObjectiveFields, TrainerSection):
    num_generations: int = option(4, "samples per agent per node (G)", min=1)
    joint_mode: str = option("aligned", "aligned pairs g-th samples (G joint actions); cross takes G^N",
                             choices=("aligned", "cross"))
    advantage_mode: str = option("mean", "baseline for advantages within a sibling group",
                                 choices=("mean", "raw", "max", "rloo"))
    advantage_normalization: bool = option(True, "standardize each sibling group's advantages (center, divide by std)")
    cross_return: str = option("sum", "cross mode: a sample's return is the sum or the mean of the returns "
                               "of the joint actions it is in", choices=("sum", "mean"))
    update_schedule: str = option(
        "nodes", "nodes: rollout_buffer_size counts tree nodes per agent; a full buffer is trained turn by "
        "turn, shuffled, one optimizer step per train_batch_size nodes. items: rollout_buffer_size counts dataset "
        "items; one optimizer step per agent on all their samples (train_batch_size = sequences per forward)",
        choices=("nodes", "items"))
    rollout_buffer_size: int = option(2, "nodes (update_schedule nodes) or dataset items (items) collected before "
                                      "an update", min=1)
    train_batch_size: Optional[int] = option(
        None, "nodes: nodes per optimizer step (null = rollout_buffer_size); items: sequences per forward, a cap "
        "(null = all of an agent's samples of one item)", min=1)
    tied_groups: str = option(
        "train", "a node group whose G returns are all equal: train (as any group: zero advantages), drop (counted), "
        "or resample (roll the item out again, at most max_resamples times, while a turn-1 group is tied; a tied "
        "later group is dropped)", choices=("train", "drop", "resample"))
    max_resamples: int = option(2, "tied_groups resample: new rollouts of an item before its tied groups drop", min=0)


@dataclass
class GRPOSection(MAGRPOSection):
    num_agents: int = option(1, "GRPO is MAGRPO with one agent", min=1, max=1)


@dataclass
class ActorCriticSection(PolicyObjectiveFields, TrainerSection):
    num_generations: int = option(1, "samples per agent per turn", min=1)
    critic_type: str = option("v", "v: value of the prompt; q: value of prompt + response", choices=("v", "q"))
    use_separate_critic: bool = option(True, "separate value model; false = value head on the actor")
    critic_learning_rate: float = option(1e-5, "critic learning rate", min=0.0)
    value_loss_coef: float = option(0.5, "weight of the critic's squared TD error", min=0.0)
    value_clip_range: Optional[float] = option(0.2, "value clipping in the shared-head mode (null = off)", min=0.0)
    advantage_normalization: bool = option(True, "normalize advantages (within each turn's group with "
                                           "update_schedule turns, over the whole buffer with episodes)")
    update_schedule: str = option(
        "turns", "turns: rollout_buffer_size counts one agent's turn samples (one per turn of each "
        "episode); a full buffer is trained turn by turn (turn 1 first), advantages normalized within the turn, its "
        "samples shuffled, one optimizer step per train_batch_size samples. episodes: rollout_buffer_size counts "
        "episodes; advantages normalized over the whole buffer; steps over it in buffer order",
        choices=("turns", "episodes"))
    rollout_buffer_size: int = option(4, "turn samples per agent (update_schedule turns) or episodes (episodes) "
                                      "collected before each update", min=1)
    train_batch_size: Optional[int] = option(None, "turn samples per optimizer step within an update (null: "
                                             "rollout_buffer_size with update_schedule turns; the whole "
                                             "buffer in one step with episodes)", min=1)
    critic_devices: Union[str, list[str], None] = option(
        None, "the separate critics' devices: one device for every critic, or a list with one per critic (IAC: one "
        "per agent; MAAC: one) (null = agent_model.device)")


@dataclass
class ACSection(ActorCriticSection):
    num_agents: int = option(1, "AC is IAC with one agent", min=1, max=1)


@dataclass
class PreferenceFields:
    preference_num_candidates: int = option(20, "joint candidates sampled per problem", min=2)
    pair_selection: str = option("reward_gap", "how pairs are picked: reward_gap, random, all (among all candidates); "
                                 "comparator_reward: the policy's candidate i against the comparator's candidate i "
                                 "(without a "
                                 "comparator the policy writes both sets), best comparator reward first",
                                 choices=("reward_gap", "random", "all", "comparator_reward"))
    preference_pairs_per_sample: Optional[int] = option(4, "pairs kept per problem (null = every qualifying pair)",
                                                        min=1,
                                                        aliases=("preference_pairs_per_item",))
    min_reward_gap: float = option(0.0, "pairs need winner reward - loser reward > this", min=0.0)
    use_environment_step: bool = option(True, "env_step (W&B's x axis) advances "
                                        "environment_steps_per_pair per trained pair (MADPO); false = by the joint "
                                        "answers sampled")
    environment_steps_per_pair: int = option(2, "environment steps one trained pair counts for (a pair = 2 joint "
                                             "answers)", min=1)


@dataclass
class MADPOSection(PreferenceFields, TrainerSection):
    num_turns: int = option(1, "preference methods are single-turn", min=1, max=1)
    # the aliases of three of these keys: the names of upstream's older MADPO schema (docs/upstream.md)
    num_train_epochs: int = option(1, "passes over the training split (offline pairs: each problem's pairs are "
                                   "trained on once per pass)", min=1, aliases=("dpo_epochs_per_iteration",))
    num_iterations: int = option(1, "plain MADPO is one iteration (madpo_iter "
                                 "iterates)", min=1, max=1)
    dpo_beta: float = option(0.1, "DPO inverse temperature beta", min=0.0, aliases=("beta",))
    joint_mode: str = option("aligned", "candidates are aligned joint answers (the g-th sample of each agent); "
                             "the only mode preference pairs support", choices=("aligned",))
    rollout_buffer_size: Optional[int] = option(None, "the fallback for train_batch_size: pairs per DPO "
                                                "optimizer step when train_batch_size is null", min=1)
    train_batch_size: Optional[int] = option(None, "pairs per DPO optimizer step: a step's pairs (new and replayed) "
                                             "are trained in chunks of this many, one optimizer step each "
                                             "(null = rollout_buffer_size; both null = all in one step)", min=1)
    advantage_normalization: bool = option(True, "no effect: DPO has no advantages")
    num_generations: int = option(1, "no effect: candidates per problem are "
                                  "preference_num_candidates", min=1)
    reference_model: bool = option(False, "add the usual DPO reference-model terms (default: reference-free)",
                                   aliases=("use_reference_model",))
    reference_kl_form: str = option("loss", "MADPO: reference_kl_coef x the k3 KL is a term of the DPO loss (a DPO "
                                    "step has no reward to penalize)", choices=("loss",))
    pair_collection: str = option(
        "offline", "offline: each iteration's pairs are collected once, at its first step, from the policy "
        "as it is then (MADPO: the start policy) on every problem of the step plan, then trained on; online: every "
        "step samples new pairs for its problem from the current policy", choices=("offline", "online"))


@dataclass
class IterativeFields:
    num_iterations: int = option(4, "preference refresh iterations", min=1)
    pair_selection: str = option("comparator_reward", "how pairs are picked (as in madpo)",
                                 choices=("reward_gap", "random", "all", "comparator_reward"))
    comparator_policy: str = option("current", "who generates the comparison candidates: current (the live "
                                    "policies), current_copy (a frozen copy of the policies, refreshed at the start of "
                                    "every iteration), copy (frozen start policies), history (the policies "
                                    "comparator_history_k iterations ago), model, api",
                                    choices=("current", "current_copy", "copy", "history", "model", "api"))
    comparator_model: Optional[str] = option(None, "model name for comparator_policy model/api",
                                             aliases=("comparator_model_name",))
    comparator_agents: Optional[list[str]] = option(None, "comparator_policy model: one model name per role "
                                                    "(instead of comparator_model for every role)")
    comparator_devices: Union[str, list[str], None] = option(
        None, "the comparator models' devices: one device, or a list with one per comparator role (a model two roles "
        "share goes to its first role's) (null = the first agent's device)")
    comparator_num_candidates: Optional[int] = option(
        None, "comparator candidates per problem (null: preference_num_candidates with comparator_candidate_budget "
        "separate; up to half of preference_num_candidates with shared)", min=1)
    comparator_candidate_budget: str = option(
        "separate", "separate: the policies write preference_num_candidates and the comparator "
        "comparator_num_candidates of its own (comparator_policy current: the live policies write that second set); "
        "shared: without comparator_num_candidates the comparator's candidates come out of preference_num_candidates "
        "(up to half; current: the policies' first half plays the comparator)", choices=("separate", "shared"))
    comparator_history_k: Optional[int] = option(None, "comparator_policy history: at iteration i, the policies as "
                                                 "iteration i - k ended them (the start of iteration i - k + 1; the "
                                                 "start policies before that; null = 1)",
                                                 min=1)
    comparator_generation_mode: str = option("decentralized", "comparator writes each role's answer "
                                             "separately or all in one answer",
                                             choices=("decentralized", "centralized"))
    comparator_centralized_agent_index: int = option(
        0, "centralized comparator of comparator_policy current/copy/history: which agent's model writes the joint "
        "answer", min=0)
    comparator_centralized_max_new_tokens: Optional[int] = option(
        None, "joint budget of a centralized comparator (null = max_new_tokens)", min=1)
    comparator_api_url: Optional[str] = option(None, "comparator_policy api: the endpoint (null = "
                                               "COOPRL_EXPERT_BASE_URL / OPENAI_BASE_URL)")
    comparator_api_format: str = option("generic", "comparator_policy api: generic = POST {prompt, n, max_tokens, "
                                        "model} to comparator_api_url, answer {completions: [...]}; openai = chat "
                                        "completions under comparator_api_url", choices=("generic", "openai"))
    comparator_api_model: Optional[str] = option(None, "comparator_policy api: the model name sent to the API "
                                                 "(null = comparator_model)")
    comparator_api_max_n_per_request: Optional[int] = option(
        None, "comparator_policy api: at most this many completions per request (null = all of a problem's in one)",
        min=1)
    comparator_api_key_env: Optional[str] = option(None, "comparator_policy api: environment variable holding the key "
                                                   "(null = COOPRL_EXPERT_API_KEY / OPENAI_API_KEY)")
    preference_replay_mode: str = option("current", "which earlier pairs are replayed: current (none), nearest_k "
                                         "(the preference_replay_k newest iterations), all_history, lambda_decay",
                                         choices=("current", "nearest_k", "all_history", "lambda_decay"))
    preference_replay_k: Optional[int] = option(None, "nearest_k: replay the pairs of this many newest iterations, "
                                                "the current one included (null = 1)", min=1)
    preference_replay_sample_size: Optional[int] = option(
        None, "replayed earlier pairs per iteration, drawn by their replay weights and spread evenly over the "
        "iteration's steps (null = every earlier pair of the step's problem)", min=1)
    log_reward_distribution: bool = option(False, "log each iteration's reward distribution of the policies' and the "
                                           "comparator's candidates (RUN_DIR/reward_distributions/iteration_<k>.json, "
                                           "and reward_dist/* metrics)")
    policy_checkpoint_dir: Optional[str] = option(None, "save the policies' weights at the start (initial/) and after "
                                                  "each iteration (iteration_<k>/) in this folder (null = do not)")
    replay_lambda: float = option(0.8, "lambda_decay: iteration k's pairs share (1 - lambda) * lambda^age of the "
                                  "replayed weight, normalized over the iterations present", min=0.0, max=1.0,
                                  aliases=("preference_replay_lambda",))


@dataclass
class MADPOIterSection(IterativeFields, MADPOSection):
    pass


@dataclass
class MARLHFSection(PreferenceFields, MAGRPOSection):
    num_turns: int = option(1, "turns of the online RL phase", min=1)
    rl_algorithm: str = option("magrpo", "online RL algorithm on the learned reward: magrpo; mareinforce, maremax, "
                               "marloo (MAGRPO with advantage_mode raw, max, rloo); iac; maac",
                               choices=("magrpo", "mareinforce", "maremax", "marloo", "iac", "maac"))
    reward_model_name: Optional[str] = option(None, "reward model backbone (null = agent_model.name)")
    reward_model_device: Optional[str] = option(None, "the reward model's device (null = agent_model.device); "
                                                "one device")
    reward_model_learning_rate: float = option(1e-5, "reward model learning rate", min=0.0,
                                               aliases=("reward_learning_rate",))
    reward_model_epochs: int = option(1, "epochs over the preference pairs", min=1, aliases=("reward_num_train_epochs",
                                                                                             ))
    reward_train_batch_size: Optional[int] = option(None, "pairs per reward-model optimizer step (null = "
                                                    "cooprl.preferences.reward_model's default batch)", min=1)
    reward_freeze_backbone: bool = option(False, "train only the reward model's linear head, the backbone frozen")
    dpo_beta: float = option(0.1, "no effect: MARLHF trains no DPO loss", min=0.0)
    reward_max_length: int = option(2048, "longest joint prompt + both outputs scored by the reward model", min=16)
    reward_eval_fraction: float = option(0.2, "held-out share of pairs for reward-model accuracy", min=0.0, max=0.9)
    normalize_reward: bool = option(True, "learned reward = (score - mean) / std of its scores on the pairs' answers")


@dataclass
class MARLHFIterSection(IterativeFields, MARLHFSection):
    preference_scoring_reward: str = option("task", "what scores the candidates of a refresh: the task reward, or "
                                            "the learned reward model (from the second iteration on)",
                                            choices=("task", "reward_model"))


@dataclass
class SFTSection(TrainerSection):
    """Supervised fine-tuning of every agent on demonstrations (train_sft.py)."""
    num_turns: int = option(1, "turns of the evaluation rollouts (the demonstrations are first-turn answers)", min=1)
    learning_rate: float = option(1e-4, "AdamW learning rate", min=0.0)
    demonstrations: str = option(
        "reference", "what each agent imitates: reference (the task's own demonstrations, built from the reference "
        "solutions of its training split only; each environment's demonstrations.py) or a .jsonl file of "
        "{\"prompts\": [one per agent], \"completions\": [one per agent]} records (none may be an eval problem's)")
    batch_size: int = option(4, "demonstrations per training step (each agent takes one optimizer step on its own "
                             "completions of them)", min=1)


TRAINER_SECTIONS: dict[str, type] = {
    "magrpo": MAGRPOSection, "grpo": GRPOSection, "iac": ActorCriticSection, "maac": ActorCriticSection,
    "ac": ACSection, "madpo": MADPOSection, "madpo_iter": MADPOIterSection, "marlhf": MARLHFSection,
    "marlhf_iter": MARLHFIterSection, "sft": SFTSection,
}

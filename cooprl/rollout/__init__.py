"""Floor 6, the rollout: the tree of turns that samples and scores a team (tree), its samplers (generation: HF;
vllm_generation, vllm_engines, vllm_memory, vllm_platform: vLLM) and the evaluation over held-out items (evaluation)."""

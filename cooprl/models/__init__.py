"""Floor 3, the models: loading agents and tokenizers (loading), log-probabilities of completions (logprobs) through
the token-trie attention (trie_attention), and value models for the critics and the reward model (value_model)."""

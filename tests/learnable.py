"""A tiny learnable task for the learning tests: a character-level model and a reward on its characters.

- `build_char_model(folder, seed)` writes a 2-layer Llama (hidden 64) with a character tokenizer (every
  printable ASCII character, newline, <eos> and <unk>) into `folder`; `agent_model.name=<folder>` loads it
  like any local model. The random model samples nearly uniformly over its ~100 tokens.
- `lowercase_task()`: the reward of an answer is the share of lowercase letters among its first
  `HEAD` characters (an answer that ends early scores its missing characters as 0), the joint reward is
  the agents' mean. A random model scores about 0.25, a model that writes only lowercase letters 1.0,
  and every sample's reward differs a little: a dense, smooth signal that a few updates move.
No sandbox, no code: the reward is a pure function of the text.
"""

from __future__ import annotations

import string
from pathlib import Path

from cooprl.task import Score, Task

HEAD = 6   # characters of an answer that are scored (the tests sample at most this many tokens)
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]   # 95 printable characters and newline


def build_char_model(folder: Path, seed: int = 0) -> Path:
    """Write a seeded random 2-layer Llama with a character-level tokenizer into `folder`; return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    # no pad token of its own: padding is EOS (as load_tokenizer does for models without one), so that every token the
    # model can sample is either text or the end of the answer, never a pad that ends it with nothing to learn from
    specials = ["<eos>", "<unk>"]
    vocab = {token: i for i, token in enumerate(specials + CHARS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")   # one token per character
    core.decoder = decoders.Fuse()                                        # and back, without separators
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<eos>", eos_token="<eos>",
                                        unk_token="<unk>")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def lowercase_reward(text: str) -> float:
    """Return the share of lowercase ASCII letters among the first HEAD characters of `text` (missing ones: 0)."""
    return sum(c in string.ascii_lowercase for c in text[:HEAD]) / HEAD


def lowercase_task(num_agents: int = 2, items: int = 4) -> Task:
    """Return a Task whose joint reward is the agents' mean lowercase share (max 1.0)."""
    def score(batch_items, joints):
        return [Score(sum(lowercase_reward(t) for t in joint) / len(joint),
                      {"length": float(sum(len(t) for t in joint)) / len(joint)}, success=False)
                for joint in joints]

    def next_prompts(item, histories, joint, score_):
        return [f"{h[-1][0]}{h[-1][1]}\nAGAIN:" for h in histories]

    return Task(name="lowercase", num_agents=num_agents, train_items=[f"Q{i}" for i in range(items)],
                eval_items=["E0", "E1"], first_prompts=lambda item: [f"{item} AGENT {a}:" for a in range(num_agents)],
                score=score, next_prompts=next_prompts, max_reward=1.0)

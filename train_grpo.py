"""Train with GRPO: python train_grpo.py [--config configs/grpo_he_config.yaml] [--override key.path=value ...]"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("grpo", default="configs/grpo_he_config.yaml"))

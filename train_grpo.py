"""Train with GRPO: python train_grpo.py --config configs/grpo_he_config.yaml [--override key.path=value ...]"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("grpo", "configs/grpo_he_config.yaml"))

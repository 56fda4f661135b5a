"""Supervised fine-tuning of every agent on demonstrations: python train_sft.py --config configs/sft_che_cpu.yaml
[--override key.path=value ...]; then start any trainer from it: --override agent_model.init_from=RUN_DIR"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("sft", "configs/sft_che_config.yaml"))

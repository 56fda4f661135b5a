"""Supervised fine-tuning of every agent on demonstrations: python train_sft.py [--config configs/sft_che_config.yaml]
[--override key.path=value ...]; then start any trainer from it: --override agent_model.init_from=RUN_DIR"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("sft", default="configs/sft_che_config.yaml"))

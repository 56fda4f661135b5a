"""Train with MADPO: python train_madpo.py [--config configs/madpo_che_config.yaml] [--override key.path=value ...]"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("madpo", default="configs/madpo_che_config.yaml"))

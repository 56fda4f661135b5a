"""Train with MADPO_ITER: python train_madpo_iter.py [--config configs/madpo_iter_che_config.yaml] [--override
key.path=value ...]"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("madpo_iter", default="configs/madpo_iter_che_config.yaml"))

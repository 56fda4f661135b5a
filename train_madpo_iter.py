"""Train with MADPO_ITER: python train_madpo_iter.py --config configs/madpo_iter_che_config.yaml [--override key.path=value ...]"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("madpo_iter", "configs/madpo_iter_che_config.yaml"))

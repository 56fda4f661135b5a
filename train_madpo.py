"""Train with MADPO: python train_madpo.py --config configs/madpo_che_config.yaml [--override key.path=value ...]"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("madpo", "configs/madpo_che_config.yaml"))

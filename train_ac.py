"""Train with AC: python train_ac.py --config configs/ac_che_config.yaml [--override key.path=value ...]"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("ac", "configs/ac_che_config.yaml"))

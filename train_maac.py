"""Train with MAAC: python train_maac.py --config configs/maac_che_config.yaml [--override key.path=value ...]"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("maac", "configs/maac_che_config.yaml"))

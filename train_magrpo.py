"""Train with MAGRPO: python train_magrpo.py --config configs/magrpo_che_config.yaml [--override key.path=value ...]"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("magrpo", "configs/magrpo_che_config.yaml"))

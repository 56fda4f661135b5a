"""Train with MAAC: python train_maac.py [--config configs/maac_che_config.yaml] [--override key.path=value ...]"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("maac", default="configs/maac_che_config.yaml"))

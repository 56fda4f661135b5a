"""Train with AC: python train_ac.py [--config configs/ac_che_config.yaml] [--override key.path=value ...]"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("ac", default="configs/ac_che_config.yaml"))

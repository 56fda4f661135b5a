"""Train with MAGRPO: python train_magrpo.py [--config configs/magrpo_che_config.yaml] [--override key.path=value
...]"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("magrpo", default="configs/magrpo_che_config.yaml"))

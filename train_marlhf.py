"""Train with MARLHF: python train_marlhf.py [--config configs/marlhf_che_config.yaml] [--override key.path=value
...]"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("marlhf", default="configs/marlhf_che_config.yaml"))

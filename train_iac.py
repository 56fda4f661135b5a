"""Train with IAC: python train_iac.py [--config configs/iac_che_config.yaml] [--override key.path=value ...]"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("iac", default="configs/iac_che_config.yaml"))

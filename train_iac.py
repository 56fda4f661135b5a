"""Train with IAC: python train_iac.py --config configs/iac_che_config.yaml [--override key.path=value ...]"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("iac", "configs/iac_che_config.yaml"))

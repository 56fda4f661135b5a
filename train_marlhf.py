"""Train with MARLHF: python train_marlhf.py --config configs/marlhf_che_config.yaml [--override key.path=value ...]"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("marlhf", "configs/marlhf_che_config.yaml"))

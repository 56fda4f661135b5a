"""Train with MARLHF_ITER: python train_marlhf_iter.py [--config configs/marlhf_iter_che_config.yaml] [--override
key.path=value ...]"""
import sys

from envs.launch import train_main

if __name__ == "__main__":
    sys.exit(train_main("marlhf_iter", default="configs/marlhf_iter_che_config.yaml"))

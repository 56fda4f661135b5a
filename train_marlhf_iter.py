"""Train with MARLHF_ITER: python train_marlhf_iter.py --config configs/marlhf_iter_che_config.yaml [--override key.path=value ...]"""
import sys

from envs.train import main

if __name__ == "__main__":
    sys.exit(main("marlhf_iter", "configs/marlhf_iter_che_config.yaml"))

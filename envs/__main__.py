"""`python -m envs TRAINER [--config FILE] [--override KEY=VALUE ...] [--print-config] [--resume RUN]`: what
train_<TRAINER>.py runs (the environment is the one the config's sections name, e.g. configs/arithmetic_cpu.yaml)."""

import sys

from envs.launch import train_main

if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
    sys.exit("usage: python -m envs TRAINER [--config FILE] [--override KEY=VALUE ...]")
sys.exit(train_main(sys.argv[1], sys.argv[2:]))

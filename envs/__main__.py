"""`python -m envs TRAINER [--config FILE] [--override KEY=VALUE ...] [--print-config] [--resume RUN]`: what
train_<TRAINER>.py runs (the environment is the one the config's sections name, e.g. configs/arithmetic_cpu.yaml)."""

import sys

from envs.launch import train_main

if len(sys.argv) < 2 or sys.argv[1].startswith("-"):   # a usage error: 2, as every other command line's
    print("usage: python -m envs TRAINER [--config FILE] [--override KEY=VALUE ...]", file=sys.stderr)
    sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
sys.exit(train_main(sys.argv[1], sys.argv[2:]))

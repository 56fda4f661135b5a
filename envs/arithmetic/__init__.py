"""A toy second environment: two agents each say a number, the team is rewarded when they add up to a target.

It exists to show (and test) what a new environment takes: this folder and a config file, nothing in `cooprl/`.
- `config.py`: its config section (`arithmetic:`), read next to the library's sections;
- `task.py`: the items, the prompts, the shared reward and the next turn's prompts, as a `cooprl.task.Task`;
- `train.py`: the command line, `python -m envs.arithmetic.train TRAINER --config configs/arithmetic_cpu.yaml`.
"""

"""A toy second environment: two agents each say a number, the team is rewarded when they add up to a target.

It exists to show (and test) what a new environment takes: this folder, a config file and its entry in
`envs.ENVIRONMENTS`, nothing in `cooprl/`.
- `config.py`: its config section (`arithmetic:`), read next to the library's sections;
- `task.py`: the items, the prompts, the shared reward and the next turn's prompts, as a `cooprl.task.Task`.
Every train_*.py trains on it when the config has an `arithmetic:` section:
`python train_magrpo.py --config configs/arithmetic_cpu.yaml`, or `python -m envs magrpo --config ...`.
"""

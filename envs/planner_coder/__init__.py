"""The planner+coder team: agent 1 writes a short plan in natural language, agent 2 writes the function from the
problem and that plan (a sequential team: `Task.follow_prompt`); the shared reward is the single-agent code reward of
agent 2's code. `config.py` (its sections), `task.py` (the Task); its entry in `envs.ENVIRONMENTS`.
"""

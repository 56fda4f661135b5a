"""The coder+tester team: agent 1 writes the function, agent 2 writes unit tests (asserts on the function), with
a shared reward or one per agent (`coder_tester.reward_sharing`). `config.py`, `task.py`; its entry in
`envs.ENVIRONMENTS`. """

"""The test suite, laid out like seed_rl/: a unit test sits at the path of
its subject (tests/agents/ppo/test_loss.py tests seed_rl/agents/ppo/loss.py);
whole runs live in end_to_end/, injected faults in faults/, checks on
several devices in multi_device/, the deployment files in deploy/, the
benchmark scripts in benchmarks/ and repository rules in project/. What
tests share is in support/; plugins/ holds the plugin domain and agent that
docs/extending.md's recipes build."""

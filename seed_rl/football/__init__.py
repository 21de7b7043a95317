"""Google Research Football (optional domain: scripts/install_football.sh).

env.py builds the envs for actors (TensorFlow-free); networks.py holds the
learner's torsos; gin/ the agents' settings.
"""

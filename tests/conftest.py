"""Shared test setup: every test starts from the same random state.

Learning checks (bandits, chain MDPs) must not depend on which tests ran
before them in the same process, so weights are seeded per test. TensorFlow
is seeded only if the test module already imported it: tests of the actor
side must stay TensorFlow-free.
"""

import os
import random
import sys

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(autouse=True)
def _seed_everything():
  random.seed(0)
  np.random.seed(0)
  if "keras" in sys.modules:
    sys.modules["keras"].utils.set_random_seed(0)
  elif "tensorflow" in sys.modules:
    sys.modules["tensorflow"].random.set_seed(0)
  yield

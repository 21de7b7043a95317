"""The one compiled part of seed_rl: an optional C extension for the
learner's frame push (seed_rl/common/_frame_push.c). Everything else is in
pyproject.toml. `optional=True`: where no C compiler or Python headers are
found the install goes on without it and the learner uses NumPy, which
gives the same bytes."""

from setuptools import Extension, setup

setup(
  ext_modules=[
    Extension(
      "seed_rl.common._frame_push",
      ["seed_rl/common/_frame_push.c"],
      extra_compile_args=["-O3"],
      optional=True,
    )
  ]
)

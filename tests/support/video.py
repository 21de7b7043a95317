"""Reads a recorded video back in a fresh Python process.

imageio decodes with an ffmpeg child that it starts through fork() (it
passes a preexec_fn). The test process has usually run gRPC servers and
channels by then, and a fork() while gRPC's threads are busy can leave
that child without the header imageio waits for ("Could not load meta
information"; gRPC logs "skipping fork() handlers" and an epoll error in
the child). A process that never imported gRPC forks cleanly, so the
frames are decoded there and handed back as a .npy file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Tuple

import numpy as np

_READ = """
import json, sys
import imageio.v2 as imageio
import numpy as np
reader = imageio.get_reader(sys.argv[1])
fps = reader.get_meta_data()["fps"]
frames = np.stack([frame for frame in reader])
reader.close()
np.save(sys.argv[2], frames)
print(json.dumps({"fps": fps}))
"""


def read_video(path: str, timeout: float = 120) -> Tuple[np.ndarray, float]:
  """Returns (frames [N, H, W, 3] uint8, frames per second) of `path`."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "frames.npy")
    proc = subprocess.run(
      [sys.executable, "-c", _READ, path, out],
      capture_output=True,
      text=True,
      timeout=timeout,
    )
    if proc.returncode != 0:
      raise AssertionError(f"reading {path} failed:\n{proc.stderr[-3000:]}")
    fps = json.loads(proc.stdout.strip().splitlines()[-1])["fps"]
    return np.load(out), fps

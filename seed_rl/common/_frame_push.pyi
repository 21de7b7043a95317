# Types of the optional C extension built from _frame_push.c.
from typing import Optional

from typing_extensions import Buffer

def push_runs(
  words: Buffer,
  frames: Buffer,
  out: Optional[Buffer],
  runs: Buffer,
  hw: int,
) -> None: ...

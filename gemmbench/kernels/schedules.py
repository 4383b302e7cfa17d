"""Tile schedules: which output tile a program computes, as a function of its program id.

The order in which consecutive program ids walk the output grid decides which operand tiles are
shared in L2 by programs running at the same time:
  row     - consecutive pids walk along N inside one row of tiles (A tile reused, B streamed);
  col     - consecutive pids walk along M inside one column of tiles (B tile reused: the seeds'
            "column-major", docs/SEEDS.md MoE §4; good for skinny A where B dominates the bytes);
  grouped - GROUP_M rows of tiles are swept column by column (Triton tutorial 03's L2 swizzle).
Each is a bijection from [0, grid_m * grid_n) onto the tiles; tests/test_kernels.py
(test_every_schedule_covers_each_tile_exactly_once) runs the jitted code and checks that every tile is produced
exactly once (the seed's MoE "column-major" mapping was not a bijection and skipped tiles: docs/GPU-FACTS.md §5).
"""

import triton
import triton.language as tl

SCHEDULES = ("row", "col", "grouped")


@triton.jit
def tile_of(pid, grid_m, grid_n, SCHEDULE: tl.constexpr, GROUP_M: tl.constexpr):
    """Map a program id to (pid_m, pid_n) under SCHEDULE."""
    if SCHEDULE == "row":
        pid_m = pid // grid_n
        pid_n = pid % grid_n
    elif SCHEDULE == "col":
        pid_m = pid % grid_m
        pid_n = pid // grid_m
    else:
        tiles_per_group = GROUP_M * grid_n
        first_m = (pid // tiles_per_group) * GROUP_M
        # the last group may have fewer than GROUP_M rows of tiles
        rows_in_group = tl.minimum(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % tiles_per_group) % rows_in_group
        pid_n = (pid % tiles_per_group) // rows_in_group
    return pid_m, pid_n

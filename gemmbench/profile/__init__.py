"""`gemmbench profile`: cells run in workers of the engine under Nsight Compute or Nsight Systems, their reports read
back as ncu_* / nsys_* columns of a profile table."""

"""Built-in kernel variants, installed as gemmbench.kernels.  Importing this package registers them."""

from gemmbench.kernels import cublas, dense_dp, moe_loop, splitk  # noqa: F401  (registration side effects)

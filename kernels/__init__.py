"""Built-in kernel variants, installed as gemmbench.kernels.  Importing this package registers them."""

# registration side effects; the order is the listing order
from gemmbench.kernels import cublas, dense_dp, moe_loop, splitk  # noqa: F401
from gemmbench.kernels import grouped_mm, moe_align, fused_moe  # noqa: F401

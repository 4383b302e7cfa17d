"""Built-in kernel variants, installed as gemmbench.kernels.  Importing this package registers them."""

# isort: off
# registration side effects, one module at a time: the import order is the listing order (and the colour order)
from gemmbench.kernels import cublas  # noqa: F401
from gemmbench.kernels import dense_dp  # noqa: F401
from gemmbench.kernels import moe_loop  # noqa: F401
from gemmbench.kernels import splitk  # noqa: F401
from gemmbench.kernels import grouped_mm  # noqa: F401
from gemmbench.kernels import moe_align  # noqa: F401
from gemmbench.kernels import fused_moe  # noqa: F401
from gemmbench.kernels import cublas_block  # noqa: F401
from gemmbench.kernels import inductor  # noqa: F401
from gemmbench.kernels import persistent  # noqa: F401  (the newest last: the built-ins before keep their colours)
from gemmbench.kernels import streamk  # noqa: F401  (after persistent: the built-ins before keep their colours)
from gemmbench.kernels import gluon_ws  # noqa: F401  (after streamk: the built-ins before keep their colours)
from gemmbench.kernels import fused_moe_persistent  # noqa: F401  (after gluon_ws: the earlier keep their colours)
from gemmbench.kernels import fused_moe_permuted  # noqa: F401  (after fused_moe_persistent: the same)

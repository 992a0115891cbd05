"""The operator library, written in alcop_triton's DSL (installed as ``alcop_triton.kernels``)."""

"""The GPU validation kit (``relaxbench bench gpu``, ``make gpu-check``): one command that, on a lent GPU, checks
losslessness under CUDA numerics, the CUDA clock and placement, and the cost-profile proxy against the device,
and prints PASS/MISS per target. ``--device cpu`` runs every step on tiny shapes (the CI dry run); ``--plan``
prints what would run and how long each step should take. docs/gpu-kit.md is the guide."""

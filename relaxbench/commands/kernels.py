"""``relaxbench kernels``: which greedy-reduction backend the policies run on, building the native one if needed."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    k = sub.add_parser("kernels", help="the policies' greedy-reduction backend: build the native kernels, show "
                                       "which is in use (RELAXBENCH_KERNELS=auto|native|torch)")
    k.add_argument("--require-native", action="store_true",
                   help="exit 1 unless the native kernels are in use (e.g. in a setup script)")
    k.set_defaults(handler=run_kernels)


def run_kernels(args: argparse.Namespace) -> int:
    from relaxbench.decoding import kernels
    from relaxbench.models.zoo import cache_root

    print(f"requested: {kernels.backend()} (RELAXBENCH_KERNELS; auto = native when it builds, else torch)")
    print(f"compiler: {kernels.compiler() or 'none found ($CC, cc, gcc, clang)'}")
    print(f"cache: {cache_root() / 'kernels'}")
    print(f"in use: {kernels.describe()}")
    if args.require_native and kernels.active_backend() != "native":
        return 1
    return 0

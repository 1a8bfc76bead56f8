"""Which runtime package gives a well-known shared library: the hint of a linkage refusal.

Pure data: each soname maps to the packages that install it (Debian and Ubuntu keep these
names across their current releases; a renamed ``libcurl4t64`` provides the old name). A
soname the host's driver provides belongs under ``runtime.host_libraries``, never in the image.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SonameHint", "hint_for"]

DEBIAN = "Debian/Ubuntu"


@dataclass(frozen=True, kw_only=True)
class SonameHint:
    """``packages``: (package, where it is the name) pairs; ``host``: the library is a driver's,
    which the host's container runtime injects at run time (with why)."""

    packages: tuple[tuple[str, str], ...] = ()
    host: str = ""


def _deb(*packages: str) -> SonameHint:
    return SonameHint(packages=tuple((p, DEBIAN) for p in packages))


def _mkl(component: str) -> SonameHint:
    package = f"libmkl-{component.replace('_', '-')}"
    return SonameHint(
        packages=(
            (
                package,
                f"Ubuntu multiverse, Debian non-free, with a runtime.library_links link from "
                f"libmkl_{component}.so.2 to its libmkl_{component}.so",
            ),
        )
    )


HINTS: dict[str, SonameHint] = {
    # C and C++ runtimes
    "libc.so.6": _deb("libc6"),
    "libm.so.6": _deb("libc6"),
    "libdl.so.2": _deb("libc6"),
    "libpthread.so.0": _deb("libc6"),
    "librt.so.1": _deb("libc6"),
    "libstdc++.so.6": _deb("libstdc++6"),
    "libgcc_s.so.1": _deb("libgcc-s1"),
    "libatomic.so.1": _deb("libatomic1"),
    "libgomp.so.1": _deb("libgomp1"),
    "libquadmath.so.0": _deb("libquadmath0"),
    "libgfortran.so.5": _deb("libgfortran5"),
    "libomp.so.5": SonameHint(
        packages=(("libomp-dev", "Debian/Ubuntu; it brings the versioned libomp5-N"),)
    ),
    # compression, crypto, network
    "libz.so.1": _deb("zlib1g"),
    "libzstd.so.1": _deb("libzstd1"),
    "liblzma.so.5": _deb("liblzma5"),
    "libbz2.so.1.0": _deb("libbz2-1.0"),
    "libssl.so.3": _deb("libssl3"),
    "libcrypto.so.3": _deb("libssl3"),
    "libcurl.so.4": _deb("libcurl4"),
    "libffi.so.8": _deb("libffi8"),
    "libyaml-0.so.2": _deb("libyaml-0-2"),
    # NUMA, RDMA, MPI (Mooncake's transfer engine, DeepEP, MCCL)
    "libnuma.so.1": _deb("libnuma1"),
    "libibverbs.so.1": _deb("libibverbs1"),
    "libmlx5.so.1": _deb("ibverbs-providers"),
    "librdmacm.so.1": _deb("librdmacm1"),
    "libmpi.so.40": _deb("libopenmpi3"),
    "libdrm.so.2": _deb("libdrm2"),
    # BLAS (the MUSA torch wheel links MKL with .so.2 sonames)
    "libopenblas.so.0": _deb("libopenblas0"),
    "libmkl_core.so.2": _mkl("core"),
    "libmkl_intel_lp64.so.2": _mkl("intel_lp64"),
    "libmkl_gnu_thread.so.2": _mkl("gnu_thread"),
    # MUSA: the runtime is the SDK's; the driver's library is the host's
    "libmusart.so.5": SonameHint(
        packages=(
            (
                "musa-musart-5-2",
                "the MUSA SDK's apt repository, in one transaction with the rest of the SDK; "
                "the musa-sdk base image has it under /usr/local/musa/lib",
            ),
        )
    ),
    "libmusa.so.1": SonameHint(
        host="the MUSA driver's library: the mthreads container runtime injects it from the host"
    ),
}


def hint_for(soname: str) -> SonameHint | None:
    """What gives ``soname``; None when the table does not know."""
    return HINTS.get(soname)

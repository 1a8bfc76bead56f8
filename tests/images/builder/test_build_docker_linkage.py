"""Docker test (marked ``docker``): the linkage gate fails an image whose installed wheel has a
native library needing a library the image lacks.

The stand-in mooncake-transfer-engine-musa wheel carries ``mooncake/libtransfer_engine.so``,
which needs libcurl.so.4 as the real ``mooncake/engine.so`` does. The session's components
image (conftest.py: stack/demo-components.yaml, Mooncake on, libcurl4 under
``runtime.apt_packages``) passes every gate; here its gates run again in a throwaway container
of it with libcurl gone, as an image built without that package has it (bookworm-slim has no
libcurl4). The gate must name the file, its distribution, the library and the package, and
that need alone; that a failing gate stops the build and tags nothing is test_build_docker.py's
(test_a_failing_gate_leaves_no_tag).
"""

from __future__ import annotations

import pytest

from images.builder.gates import evaluate_gates, probe_facts
from manifest import load_manifest
from resolver.lockfile import load_lock
from tests.support.demo_build import COMPONENTS_REPOSITORY, COMPONENTS_STACK, Demo
from tests.support.prepared_probes import PreparedProbes

pytestmark = pytest.mark.docker

SITE = "/usr/local/lib/python3.11/dist-packages"  # where pip installs on Debian's python3.11
WITHOUT_LIBCURL = "rm -f /usr/lib/x86_64-linux-gnu/libcurl.so.4* && ldconfig"


def test_a_wheels_library_needing_a_missing_library_fails_the_gate(components: Demo) -> None:
    m = load_manifest(COMPONENTS_STACK)
    facts = probe_facts(PreparedProbes(WITHOUT_LIBCURL), f"{COMPONENTS_REPOSITORY}:final", m)
    failed = [r for r in evaluate_gates(facts, m, load_lock(components.lock_dir)) if not r.ok]
    assert [(r.name, r.output) for r in failed] == [
        (
            "linkage",
            "mooncake/libtransfer_engine.so (mooncake-transfer-engine-musa 0.3.12.post1): needs "
            "libcurl.so.4, which the image does not have (searched: LD_LIBRARY_PATH "
            f"/usr/local/musa/lib, RUNPATH $ORIGIN ({SITE}/mooncake), the ld.so cache, "
            "/lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib, /usr/lib); runtime packages "
            "that give it: libcurl4 (Debian/Ubuntu); add one to runtime.apt_packages, or declare "
            "it under runtime.host_libraries if the host provides it at run time",
        )
    ]  # that need alone, and no other gate

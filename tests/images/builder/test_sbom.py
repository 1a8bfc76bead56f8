"""The image's SBOM (images/builder/in_image/sbom.py, fed by images/builder/sbom_facts.py): a
CycloneDX 1.5 document that validates, with purls a scanner reads right (a vendor index's
package names its index, a local label is percent-encoded), the Debian packages, the lock's
dependency graph, and the same bytes for the same inputs.

The writer runs inside the image with the standard library only; here it runs on a fake
site-packages and a fake dpkg status in ``tmp_path``."""

from __future__ import annotations

import argparse
import dataclasses
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL
from packaging.utils import canonicalize_name

from images.builder.in_image import sbom
from images.builder.sbom_facts import render_sbom_facts
from manifest import Manifest
from resolver.lockfile import Lock, LockedPackage
from tests.support.images import manifest

VENDOR = "https://vendor.example/simple/"
STACK = f"""\
schema: 1
name: sbom-demo
release: "0.28.0"
target: {{python: "3.11", arch: x86_64, glibc: "2.36"}}
indexes:
  mthreads: {{url: "{VENDOR}"}}
  pypi: {{url: "https://pypi.org/simple/"}}
default_index: pypi
packages:
  torch: {{version: "2.11.0.post2+musa5.2.0", index: mthreads, wheel: native}}
  triton: {{version: "3.2.0", index: mthreads, wheel: native}}
requirements: [pip, "numpy==1.26.4"]
base_image: "debian:bookworm-slim"
sources:
  vllm: {{path: demo/vllm, build_requirements_files: [requirements/build/cuda.txt]}}
image:
  repository: registry.example/inference/vllm
  licenses: "Apache-2.0 AND BSD-3-Clause"
"""
TORCH = "pkg:pypi/torch@2.11.0.post2%2Bmusa5.2.0?repository_url=https://vendor.example/simple/"
TRITON = "pkg:pypi/triton@3.2.0?repository_url=https://vendor.example/simple/"
NUMPY = "pkg:pypi/numpy@1.26.4"
PIP = "pkg:pypi/pip@24.0"
NINJA = "pkg:pypi/ninja@1.11.1"
VLLM = "pkg:pypi/vllm@0.28.0%2Bmusa"
EXTRA = "pkg:pypi/vllm-extra@0.1"
LIBC = "pkg:deb/debian/libc6@2.36-9%2Bdeb12u9?arch=amd64&distro=debian-12"
LIBSSL = "pkg:deb/debian/libssl3@3.0.15-1~deb12u1?arch=amd64&distro=debian-12&upstream=openssl"
BASE_FILES = "pkg:deb/debian/base-files@12.4%2Bdeb12u9?arch=amd64&distro=debian-12"
TZDATA = "pkg:deb/debian/tzdata@2024a-0%2Bdeb12u1?arch=all&distro=debian-12"
IMAGE = "image:sbom-demo@0.28.0"
CREATED = "2026-01-02T03:04:05Z"

DPKG_STATUS = """\
Package: base-files
Essential: yes
Status: install ok installed
Priority: required
Architecture: amd64
Version: 12.4+deb12u9
Description: Debian base system miscellaneous files
 This package contains the basic filesystem hierarchy.

Package: libc6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 2.36-9+deb12u9
Depends: libgcc-s1
Description: GNU C Library: Shared libraries

Package: libssl3
Status: install ok installed
Architecture: amd64
Source: openssl
Version: 3.0.15-1~deb12u1
Depends: libc6 (>= 2.34)
Description: Secure Sockets Layer toolkit - shared libraries

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2024a-0+deb12u1
Pre-Depends: debconf (>= 0.5) | debconf-2.0
Depends: libc6:any | libc-bin

Package: oldpkg
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0-1
"""
OS_RELEASE = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'


def _pkg(
    name: str, version: str, *, index: str = "pypi", required_by: tuple[str, ...] = ()
) -> LockedPackage:
    url = {"pypi": "https://pypi.org/simple/", "mthreads": VENDOR}[index]
    filename = f"{name}-{version}-py3-none-any.whl"
    return LockedPackage(
        name=canonicalize_name(name),
        version=version,
        index=index,
        index_url=url,
        filename=filename,
        url=f"https://files.example/{filename}",
        sha256=f"{len(name):x}" * 64,
        size=10,
        kind="pure",
        origin="requirement",
        required_by=required_by,
    )


def _lock(m: Manifest) -> Lock:
    packages = (
        _pkg(
            "ninja",
            "1.11.1",
            required_by=("(requirements)", "(sources.vllm:requirements/build/cuda.txt)"),
        ),
        _pkg(
            "numpy",
            "1.26.4",
            required_by=("(requirements)", "(sources.vllm:requirements/common.txt)", "torch"),
        ),
        _pkg("pip", "24.0", required_by=("(requirements)",)),
        _pkg("torch", "2.11.0.post2+musa5.2.0", index="mthreads", required_by=("(packages)",)),
        _pkg("triton", "3.2.0", index="mthreads", required_by=("(packages)", "torch")),
    )
    return Lock(
        stack=m.name, target=m.target, lock_inputs_sha256=m.lock_inputs_sha256, packages=packages
    )


def _dist(site: Path, name: str, version: str, *requires: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n", encoding="utf-8")


class Image:
    """A fake image: its site-packages, dpkg status, os-release, built wheels and lock."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.manifest = manifest(tmp, STACK)
        self.lock = _lock(self.manifest)
        self.site = tmp / "site-packages"
        _dist(self.site, "numpy", "1.26.4")
        _dist(self.site, "pip", "24.0")
        _dist(self.site, "ninja", "1.11.1")
        _dist(self.site, "torch", "2.11.0.post2+musa5.2.0", "numpy", "triton==3.2.0")
        _dist(self.site, "triton", "3.2.0")
        # a source-built distribution the lock knows only as a root of requirements
        _dist(self.site, "vllm", "0.28.0+musa", "numpy", "pytest; extra == 'test'")
        # one the lock does not know at all: its Requires-Dist make its edges
        _dist(
            self.site,
            "vllm_extra",
            "0.1",
            "torch (>=2)",
            "numpy ; python_version >= '3.9'",
            "pytest ; extra == 'test'",
        )
        self.built = tmp / "wheels"
        (self.built / "vllm").mkdir(parents=True)
        (self.built / "vllm" / "vllm-0.28.0+musa-cp311-cp311-linux_x86_64.whl").write_bytes(b"w")
        self.status = tmp / "status"
        self.status.write_text(DPKG_STATUS, encoding="utf-8")
        self.os_release = tmp / "os-release"
        self.os_release.write_text(OS_RELEASE, encoding="utf-8")
        self.requirements = tmp / "requirements.txt"
        self.requirements.write_text(
            "".join(
                f"{p.name}=={p.version} \\\n    --hash=sha256:{p.sha256}\n"
                for p in self.lock.packages
            ),
            encoding="utf-8",
        )
        self.facts = tmp / "sbom-facts.json"
        self.facts.write_text(render_sbom_facts(self.manifest, self.lock), encoding="utf-8")

    def args(self, *extra: str) -> argparse.Namespace:
        return sbom.parser().parse_args(
            [
                "--lock",
                str(self.requirements),
                "--facts",
                str(self.facts),
                "--built",
                str(self.built),
                "--out",
                str(self.tmp / "out" / "sbom.json"),
                "--name",
                "sbom-demo",
                "--version",
                "0.28.0",
                "--licenses",
                "Apache-2.0 AND BSD-3-Clause",
                "--description",
                "vLLM for MUSA",
                "--lock-sha256",
                "ab" * 32,
                "--tooling-revision",
                "c0ffee" * 6 + "abcd",
                "--dpkg-status",
                str(self.status),
                "--os-release",
                str(self.os_release),
                "--source",
                "vllm=path:demo/vllm",
                *extra,
            ]
        )

    def text(self, *extra: str) -> str:
        return sbom.generate(self.args(*extra), metadata.distributions(path=[str(self.site)]))

    def doc(self, *extra: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.text(*extra))
        return result


@pytest.fixture
def image(tmp_path: Path) -> Image:
    return Image(tmp_path)


def _validate(text: str) -> None:
    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(text)
    assert error is None, str(error)


# ------------------------------------------------------------------------------ the document


def test_the_sbom_validates_as_cyclonedx_1_5(image: Image) -> None:
    text = image.text("--created", CREATED)
    _validate(text)
    doc = json.loads(text)
    assert (doc["bomFormat"], doc["specVersion"], doc["version"]) == ("CycloneDX", "1.5", 1)


def test_purls_name_the_vendor_index_and_encode_the_local_label(image: Image) -> None:
    purls = sorted(c["purl"] for c in image.doc()["components"])
    assert purls == sorted(
        [BASE_FILES, LIBC, LIBSSL, TZDATA, NINJA, NUMPY, PIP, TORCH, TRITON, VLLM, EXTRA]
    )
    for purl in purls:  # each is the canonical form packageurl-python writes
        assert PackageURL.from_string(purl).to_string() == purl
    torch = PackageURL.from_string(TORCH)
    assert (torch.version, torch.qualifiers) == (
        "2.11.0.post2+musa5.2.0",
        {"repository_url": VENDOR},
    )


def test_components_keep_hashes_and_the_source_a_built_one_came_from(image: Image) -> None:
    by_purl = {c["purl"]: c for c in image.doc()["components"]}
    assert by_purl[TORCH]["hashes"] == [{"alg": "SHA-256", "content": "5" * 64}]
    assert by_purl[TORCH]["bom-ref"] == TORCH
    assert by_purl[VLLM]["properties"] == [
        {"name": "vllm-musa:built-from", "value": "path:demo/vllm"},
        {"name": "vllm-musa:wheel", "value": "vllm-0.28.0+musa-cp311-cp311-linux_x86_64.whl"},
    ]
    assert by_purl[LIBSSL] == {
        "type": "library",
        "bom-ref": LIBSSL,
        "name": "libssl3",
        "version": "3.0.15-1~deb12u1",
        "purl": LIBSSL,
    }
    assert "oldpkg" not in {c["name"] for c in by_purl.values()}  # config files only


def test_the_dependency_graph_is_the_locks_then_requires_dist_then_depends(image: Image) -> None:
    graph = {d["ref"]: d["dependsOn"] for d in image.doc()["dependencies"]}
    assert graph == {
        # the manifest's own roots, the built source, and what nothing else needs
        IMAGE: sorted([NINJA, NUMPY, PIP, TORCH, TRITON, VLLM, EXTRA, BASE_FILES, LIBSSL, TZDATA]),
        NINJA: [],
        NUMPY: [],
        PIP: [],
        TORCH: sorted([NUMPY, TRITON]),  # the lock's edges (required_by), not its METADATA
        TRITON: [],
        # the lock's edge from its requirements file; ninja was a build requirement only
        VLLM: [NUMPY],
        EXTRA: sorted([NUMPY, TORCH]),  # not in the lock: Requires-Dist without extras
        BASE_FILES: [],
        LIBC: [],  # libgcc-s1 is not installed
        LIBSSL: [LIBC],
        TZDATA: [LIBC],  # debconf is not installed; libc6:any is libc6
    }


def test_metadata_names_the_image_its_time_and_the_tool(image: Image) -> None:
    meta = image.doc("--created", CREATED)["metadata"]
    assert meta == {
        "timestamp": CREATED,
        "tools": {
            "components": [
                {"type": "application", "name": "vllm-musa-image", "version": "c0ffee" * 6 + "abcd"}
            ]
        },
        "component": {
            "type": "container",
            "bom-ref": IMAGE,
            "name": "sbom-demo",
            "version": "0.28.0",
            "description": "vLLM for MUSA",
            "licenses": [{"expression": "Apache-2.0 AND BSD-3-Clause"}],
            "properties": [{"name": "vllm-musa:lock-sha256", "value": "ab" * 32}],
        },
    }


def test_without_a_known_creation_time_there_is_no_timestamp(image: Image) -> None:
    doc = image.doc("--created", "")
    assert "timestamp" not in doc["metadata"]
    _validate(json.dumps(doc))


def test_same_inputs_give_the_same_bytes_and_other_inputs_another_serial(image: Image) -> None:
    first = image.text("--created", CREATED)
    assert image.text("--created", CREATED) == first
    serial = json.loads(first)["serialNumber"]
    assert serial.startswith("urn:uuid:")
    assert json.loads(image.text("--created", "2026-01-02T03:04:06Z"))["serialNumber"] != serial
    image.status.write_text(DPKG_STATUS.replace("12.4+deb12u9", "12.4+deb12u10"), encoding="utf-8")
    assert json.loads(image.text("--created", CREATED))["serialNumber"] != serial


def test_a_package_the_lock_binds_to_the_default_index_has_a_plain_purl(image: Image) -> None:
    facts = json.loads(image.facts.read_text(encoding="utf-8"))["packages"]
    assert {p["name"]: p["repository_url"] for p in facts} == {
        "ninja": "",
        "numpy": "",
        "pip": "",
        "torch": VENDOR,
        "triton": VENDOR,
    }
    assert {p["name"]: (p["required_by"], p["root"]) for p in facts} == {
        "ninja": ([], True),  # the vllm edge was a build requirement
        "numpy": (["torch", "vllm"], True),
        "pip": ([], True),
        "torch": ([], True),
        "triton": (["torch"], True),
    }


def test_a_vendor_index_url_in_the_facts_never_carries_credentials(image: Image) -> None:
    secret = "https://user:s3cret@vendor.example/simple/"
    packages = tuple(
        dataclasses.replace(p, index_url=secret) if p.index == "mthreads" else p
        for p in image.lock.packages
    )
    lock = dataclasses.replace(image.lock, packages=packages)
    text = render_sbom_facts(image.manifest, lock)
    assert "s3cret" not in text
    assert "user" not in text
    assert json.loads(text)["packages"][3]["repository_url"] == VENDOR


def test_an_installed_version_other_than_the_locked_one_is_not_labelled_vendor(
    image: Image,
) -> None:
    (image.site / "triton-3.2.0.dist-info").rename(image.site / "triton-3.3.0.dist-info")
    meta = image.site / "triton-3.3.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text(encoding="utf-8").replace("3.2.0", "3.3.0"), encoding="utf-8")
    purls = {c["name"]: c["purl"] for c in image.doc()["components"]}
    assert purls["triton"] == "pkg:pypi/triton@3.3.0"
    assert "hashes" not in {c["name"]: c for c in image.doc()["components"]}["triton"]


def test_an_ubuntu_image_names_ubuntu_in_its_deb_purls(image: Image) -> None:
    image.os_release.write_text('ID=ubuntu\nVERSION_ID="22.04"\n', encoding="utf-8")
    purls = {c["name"]: c["purl"] for c in image.doc()["components"]}
    assert purls["libc6"] == "pkg:deb/ubuntu/libc6@2.36-9%2Bdeb12u9?arch=amd64&distro=ubuntu-22.04"


def test_an_image_without_dpkg_lists_its_python_distributions_only(image: Image) -> None:
    image.status.unlink()
    doc = image.doc()
    assert all(c["purl"].startswith("pkg:pypi/") for c in doc["components"])
    _validate(json.dumps(doc))


# ------------------------------------------------------------------------------ refusals


def test_a_dpkg_status_past_its_bound_is_refused(
    image: Image, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sbom, "MAX_DPKG_STATUS_BYTES", 1024 * 1024)
    image.status.write_bytes(DPKG_STATUS.encode() + b" " * (1024 * 1024))
    argv = [str(a) for a in _argv(image)]
    assert sbom.main(argv) == 1
    assert capsys.readouterr().err == (
        f"error[sbom]: the dpkg status {image.status} is larger than 1 MB; refusing to read it\n"
    )
    assert not (image.tmp / "out" / "sbom.json").exists()


def test_a_package_name_that_is_no_debian_name_is_refused(
    image: Image, capsys: pytest.CaptureFixture[str]
) -> None:
    image.status.write_text(
        DPKG_STATUS + "\nPackage: ../../etc\nStatus: install ok installed\n"
        "Architecture: amd64\nVersion: 1\n",
        encoding="utf-8",
    )
    assert sbom.main(_argv(image)) == 1
    assert capsys.readouterr().err == (
        f"error[sbom]: {image.status}: package '../../etc' is not a Debian package name\n"
    )


def _argv(image: Image) -> list[str]:
    args = image.args()
    return [
        "--lock",
        str(args.lock),
        "--facts",
        str(args.facts),
        "--built",
        str(args.built),
        "--out",
        str(args.out),
        "--name",
        "x",
        "--version",
        "1",
        "--dpkg-status",
        str(image.status),
        "--os-release",
        str(image.os_release),
    ]


def test_facts_that_are_not_the_tools_are_refused(
    image: Image, capsys: pytest.CaptureFixture[str]
) -> None:
    image.facts.write_text('{"packages": [{"name": "torch"}]}', encoding="utf-8")
    assert sbom.main(_argv(image)) == 1
    assert capsys.readouterr().err == (
        f"error[sbom]: {image.facts} is not a facts file of vllm-musa-image: KeyError('version')\n"
    )


def test_a_distribution_without_a_name_is_refused(
    image: Image, capsys: pytest.CaptureFixture[str]
) -> None:
    info = image.site / "broken-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 1.0\n", encoding="utf-8")
    with pytest.raises(sbom.SbomError) as exc:
        image.text()
    assert str(exc.value) == f"{info}: its METADATA has no Name"


def test_a_source_root_and_an_override_map_to_the_source_and_the_image(image: Image) -> None:
    lock = dataclasses.replace(
        image.lock,
        packages=(
            _pkg("numpy", "1.26.4", required_by=("(overrides)",)),
            _pkg("pip", "24.0", required_by=("(sources.vllm)", "(build.requirements)")),
        ),
    )
    facts = json.loads(render_sbom_facts(image.manifest, lock))["packages"]
    assert [(p["name"], p["required_by"], p["root"]) for p in facts] == [
        ("numpy", [], True),
        ("pip", ["vllm"], False),
    ]


def test_the_base_images_own_distributions_say_so(image: Image) -> None:
    """--base (installed.py base's record): a distribution the base image had is marked with
    where it came from and where it lies; a locked one keeps its lock hash, not the mark."""
    base = image.tmp / "base-distributions.json"
    base.write_text(
        json.dumps(
            [
                {
                    "name": "vllm_extra",
                    "version": "0.1",
                    "location": "/usr/lib/python3/dist-packages",
                },
                {
                    "name": "numpy",
                    "version": "1.26.4",
                    "location": "/usr/lib/python3/dist-packages",
                },
            ]
        ),
        encoding="utf-8",
    )
    text = image.text("--base", str(base))
    _validate(text)
    by_purl = {c["purl"]: c for c in json.loads(text)["components"]}
    assert by_purl[EXTRA]["properties"] == [
        {"name": "vllm-musa:origin", "value": "base image"},
        {"name": "vllm-musa:location", "value": "/usr/lib/python3/dist-packages"},
    ]
    assert "properties" not in by_purl[NUMPY]  # the lock's: hashed as locked
    assert "vllm-musa:origin" not in image.text()  # without --base, nothing is marked
    base.write_text("[{}]", encoding="utf-8")
    with pytest.raises(sbom.SbomError, match=r"is not a record of installed\.py base"):
        image.text("--base", str(base))

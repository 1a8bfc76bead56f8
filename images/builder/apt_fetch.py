"""``build_image.py fetch``'s apt part: the .deb files of every apt step, into the cache.

``fetch_debs`` runs ``in_image/apt-fetch.sh`` in a container of the base image: apt downloads
each step's closure with its own signature checks (signed-by keys fetched on the host and
checked against the manifest's fingerprints); each file is checked against the signed index
(``--print-uris``) and cached by sha256, the fetch's index written last. ``offline_debs``
names the first thing not fetched; ``stage_debs`` places a fetch into a build context.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from core.errors import FetchError, HashMismatchError, KeyFingerprintError, OfflineMissingError
from core.file_store import FileStore
from core.fsutil import atomic_write_text
from core.network import NetworkOptions
from images.builder.apt_plan import (
    AptSource,
    DebFile,
    index_data,
    index_path,
    key_file_name,
    parse_index,
    parse_print_uris,
    plan_key,
    render_fetch_plan,
    sha256sum_lines,
)
from images.builder.context import place_file
from images.builder.inputs import FETCH_HINT, ensure_by_url
from images.builder.openpgp import KeyFormatError, primary_fingerprints
from images.builder.plan import InputPlan
from images.builder.render import LAYOUT
from images.engine.port import BuildEngine, ContainerSpec, Mount

BUILD_TOOLS = Path(__file__).with_name("in_image")
# where the fetch container sees its inputs (paths inside the container, not on the host)
TOOLS_IN_CONTAINER = "/tmp/tools"  # noqa: S108
PLAN_IN_CONTAINER = "/tmp/plan"  # noqa: S108
_TAIL = 40


def check_key(data: bytes, source: AptSource) -> None:
    """The key file must hold exactly the pinned primary key (apt trusts every key in it)."""
    try:
        found = primary_fingerprints(data)
    except KeyFormatError as exc:
        raise KeyFingerprintError(
            f"the key at {source.key.url} cannot be read: {exc}",
            hint="key_url must serve the OpenPGP public key (armored or binary)",
        ) from None
    if found != [source.key.fingerprint]:
        raise KeyFingerprintError(
            f"the key at {source.key.url} has fingerprint(s) {' '.join(found) or '(none)'} "
            f"but {source.key.keypath} is {source.key.fingerprint}",
            hint="fix the manifest or the key_url",
        )


def _hash_file(path: Path, algo: str) -> tuple[str, str]:
    """(the ``algo`` digest, the sha256) of a file, in one pass."""
    want = hashlib.new(algo)
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            want.update(chunk)
            sha.update(chunk)
    return want.hexdigest(), sha.hexdigest()


def _read_index(index: Path) -> dict[str, list[DebFile]] | None:
    """The steps of a fetch's index; None when it is missing or unreadable."""
    try:
        return parse_index(json.loads(index.read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def fetch_debs(
    inputs: InputPlan,
    *,
    engine: BuildEngine,
    cache: FileStore,
    options: NetworkOptions,
    stack: str,
    base_image: str,
    base_image_id: str,
    network: str | None,
) -> tuple[dict[str, list[DebFile]], bool]:
    """Every apt step's files in the cache: (the steps, whether anything was downloaded)."""
    plan = inputs.apt
    sources = inputs.apt_sources
    index = index_path(cache.root, plan_key(plan, sources, base_image_id))
    done = _read_index(index)
    if done is not None and all(cache.has_file(d.sha256) for f in done.values() for d in f):
        return done, False
    cache.staging_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=cache.staging_dir(), prefix="apt-fetch-"))
    try:
        (work / "plan" / "keys").mkdir(parents=True)
        (work / "out").mkdir()
        for source in sources:
            label = f"the key of {source.key.keypath.removesuffix('.key_fingerprint')}"
            key = ensure_by_url(cache, label, source.key.url, options, stack=stack)
            data = key.read_bytes()
            check_key(data, source)
            (work / "plan" / "keys" / key_file_name(source)).write_bytes(data)
        (work / "plan" / "plan").write_text(render_fetch_plan(plan, sources), encoding="utf-8")
        mirrors = inputs.mirrors
        command = ["sh", f"{TOOLS_IN_CONTAINER}/apt-fetch.sh", str(options.attempts)]
        command += [mirrors.apt or "", mirrors.proxy or ""]
        run = ContainerSpec(
            image=base_image,
            command=tuple(command),
            mounts=(
                Mount(source=BUILD_TOOLS, target=TOOLS_IN_CONTAINER),
                Mount(source=work / "plan", target=PLAN_IN_CONTAINER),
                Mount(source=work / "out", target="/out", read_only=False),
            ),
            network=network,
        )
        code, output = engine.run_container(run)
        if code != 0:
            lines = output.rstrip().splitlines()
            marker = next((x for x in reversed(lines) if "error[" in x), None)
            raise FetchError(
                f"apt could not download the packages of {stack} in {base_image} "
                f"(exit {code}); last lines:\n" + "\n".join(lines[-_TAIL:]),
                hint=marker.split("]", 1)[1].strip(": ") if marker else "see the lines above",
            )
        steps: dict[str, list[DebFile]] = {}
        for step in plan.steps():
            try:
                uris = parse_print_uris(
                    (work / "out" / f"{step.name}.uris").read_text(encoding="utf-8"),
                    step=step.name,
                )
            except (OSError, ValueError) as exc:
                raise FetchError(f"apt step {step.name} of {base_image}: {exc}") from None
            files: list[DebFile] = []
            for uri, name, size, hashspec in uris:
                algo, _, digest = hashspec.partition(":")
                path = work / "out" / "debs" / name
                if not path.is_file():
                    raise FetchError(f"apt step {step.name}: {uri} was not downloaded")
                got, sha = _hash_file(path, algo or "sha256")
                if path.stat().st_size != size or (digest and got != digest):
                    raise HashMismatchError(
                        f"{uri}: {name} is not the file of the signed index (size "
                        f"{path.stat().st_size}, {algo or 'sha256'} {got}; the index has size "
                        f"{size}{f', {algo} {digest}' if digest else ''})",
                        hint="the mirror serves other bytes than its signed index lists",
                    )
                if not cache.has_file(sha):
                    tmp = cache.staging_dir() / f".{sha}.part"
                    shutil.copyfile(path, tmp)
                    cache.adopt_file(tmp, sha)
                files.append(DebFile(file=name, sha256=sha, uri=uri))
            steps[step.name] = files
        record = index_data(base_image, base_image_id, steps)
        atomic_write_text(index, json.dumps(record, indent=1, sort_keys=True) + "\n")
        return steps, True
    finally:
        shutil.rmtree(work, ignore_errors=True)


def offline_debs(
    inputs: InputPlan,
    *,
    cache: FileStore,
    stack: str,
    base_image: str,
    base_image_id: str,
) -> dict[str, list[DebFile]]:
    """The fetched files of every apt step, or an error naming the first one not fetched."""
    plan = inputs.apt
    index = index_path(cache.root, plan_key(plan, inputs.apt_sources, base_image_id))
    hint = FETCH_HINT.format(stack=stack) + " (with the same --base-image)"
    steps = _read_index(index)
    if steps is None:
        names = ", ".join(s.name for s in plan.steps())
        raise OfflineMissingError(
            f"offline build: the .deb files of the apt steps ({names}) on the base image "
            f"{base_image} ({base_image_id[:19]}) are not fetched",
            hint=hint,
        )
    for step in plan.steps():
        for d in steps.get(step.name, []):
            if not cache.has_file(d.sha256):
                raise OfflineMissingError(
                    f"offline build: the .deb file {d.file} for {step.what} (apt step "
                    f"{step.name}) is not fetched",
                    hint=hint,
                )
    return steps


def stage_debs(steps: dict[str, list[DebFile]], cache: FileStore, out_dir: Path) -> None:
    """``apt/debs/<file>`` and ``apt/<step>.sha256`` in a build context."""
    apt = out_dir / LAYOUT.apt
    (apt / "debs").mkdir(parents=True, exist_ok=True)
    for name, files in sorted(steps.items()):
        for d in files:
            if not (apt / "debs" / d.file).exists():
                place_file(cache.file_path(d.sha256), apt / "debs" / d.file)
        (apt / f"{name}.sha256").write_text(sha256sum_lines(files), encoding="utf-8")

"""One error hierarchy: every error class of the tool lives in core/errors.py, each code names
one kind of error (a subclass that declares no code reports its parent's, as
``NoImageSettingsError`` reports ``manifest``), and every error exits 1 (refused) or 2 (usage)."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import core.errors
from core.errors import BuildImageError, ExitCode

PACKAGES = ("core", "manifest", "resolver", "images")


def _modules() -> list[ModuleType]:
    found = [importlib.import_module("build_image")]
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{name}."):
            found.append(importlib.import_module(info.name))
    return found


def _subclasses(cls: type[BuildImageError]) -> set[type[BuildImageError]]:
    out: set[type[BuildImageError]] = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_subclasses(sub)}
    return out


@pytest.fixture(scope="module")
def errors() -> list[type[BuildImageError]]:
    modules = _modules()
    assert {m.__name__ for m in modules} >= {
        "images.engine.docker_build",
        "images.engine.skopeo",
    }
    return sorted({BuildImageError, *_subclasses(BuildImageError)}, key=lambda c: c.__name__)


def test_every_error_class_is_defined_in_core_errors(errors: list[type[BuildImageError]]) -> None:
    elsewhere = [
        f"{c.__module__}.{c.__qualname__}" for c in errors if c.__module__ != "core.errors"
    ]
    assert elsewhere == []


def test_codes_are_unique(errors: list[type[BuildImageError]]) -> None:
    owners: dict[str, list[str]] = {}
    for cls in errors:
        if "code" in cls.__dict__:
            owners.setdefault(cls.__dict__["code"], []).append(cls.__name__)
    assert {code: names for code, names in owners.items() if len(names) > 1} == {}


def test_exit_codes_are_refused_or_usage(errors: list[type[BuildImageError]]) -> None:
    assert {c.__name__: c.exit_code for c in errors if c.exit_code not in (1, 2)} == {}
    assert {ExitCode.REFUSED, ExitCode.USAGE} == {c.exit_code for c in errors}


def test_the_module_names_every_class_it_defines(errors: list[type[BuildImageError]]) -> None:
    defined = {
        v
        for v in vars(core.errors).values()
        if isinstance(v, type) and issubclass(v, BuildImageError)
    }
    assert defined == set(errors)

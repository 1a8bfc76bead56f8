"""Wheel metadata the resolver refuses: an invalid Requires-Python, a direct-URL dependency."""

from __future__ import annotations

from tests.support.lockcase import Case


def test_invalid_requires_python_in_metadata_is_a_refusal(case: Case) -> None:
    case.publish(case.pypi, case.wheel("oldpkg", "1.0", requires_python=">=3.6.*"))
    result = case.run("lock", case.stack("", ["oldpkg"]), "--retries", "0")
    assert result.code == 1
    assert result.err == (
        "error[metadata]: oldpkg-1.0-py3-none-any.whl on index pypi: METADATA Requires-Python "
        "'>=3.6.*' is not a valid specifier\nhint: an invalid Requires-Python cannot be checked, "
        "so the file is refused\n"
    )


def test_direct_url_dependency_is_refused(case: Case) -> None:
    case.publish(
        case.pypi,
        case.wheel(
            "app", "1.0", requires_dist=("dep @ https://example.invalid/dep-9.9-py3-none-any.whl",)
        ),
        case.wheel("dep", "1.0"),
    )
    result = case.run("lock", case.stack("", ["app==1.0"]), "--retries", "0")
    assert result.code == 1, "dep was locked from the index in place of the direct URL"
    assert result.err.startswith(
        "error[metadata]: app-1.0-py3-none-any.whl on index pypi: METADATA Requires-Dist "
        "'dep @ https://example.invalid/dep-9.9-py3-none-any.whl' is a direct URL; only packages "
        "from an index are locked\n"
    )

"""What the A/B says makes its comparison weaker: the two locks' wheels, the lifetimes' order."""

from __future__ import annotations

from images.engine.port import LocalImage
from images.serve.ab import AbImage, Preflight, caveats, locked_versions, prompts

LOCK_A = """# lock
torch==2.11.0.post2+musa5.2.0s5000 \\
    --hash=sha256:aa
numpy==1.26.4 \\
    --hash=sha256:bb
transformers==5.5.2 \\
    --hash=sha256:cc
"""
LOCK_B = """torch==2.11.0.post2+musa5.2.0 \\
    --hash=sha256:dd
numpy==1.26.4 \\
    --hash=sha256:bb
transformers==5.5.3 \\
    --hash=sha256:ee
mthreads-ml-py==2.4.1 \\
    --hash=sha256:ff
"""


def _checked(a: str = "sha256:" + "a" * 64, b: str = "sha256:" + "b" * 64) -> Preflight:
    return Preflight(
        control=AbImage(role="control", ref="A", facts=LocalImage(id=a)),
        candidate=AbImage(role="candidate", ref="B", facts=LocalImage(id=b)),
        probe_output=None,
    )


def test_locked_versions_reads_a_hash_locked_requirements_file() -> None:
    assert locked_versions(LOCK_A) == {
        "torch": "2.11.0.post2+musa5.2.0s5000",
        "numpy": "1.26.4",
        "transformers": "5.5.2",
    }


def test_different_wheel_labels_make_it_a_whole_image_comparison() -> None:
    notes = caveats(_checked(), ["A1", "B1", "B2", "A2"], {"control": LOCK_A, "candidate": LOCK_B})
    assert notes == [
        "whole-image comparison: the locks differ in wheel labels: torch "
        "2.11.0.post2+musa5.2.0s5000 (control) vs 2.11.0.post2+musa5.2.0 (candidate)",
        "whole-image comparison: the locks differ in versions: transformers 5.5.2 (control) "
        "vs 5.5.3 (candidate)",
        "whole-image comparison: only one lock has mthreads-ml-py",
    ]


def test_a_missing_lock_the_same_image_and_one_pair_are_said() -> None:
    same = "sha256:" + "c" * 64
    notes = caveats(_checked(same, same), ["A1", "B1"], {"control": None, "candidate": LOCK_B})
    assert notes == [
        "the control has no lock at /opt/vllm-musa/lock/requirements.txt: its wheels are unknown",
        "the control and the candidate are the same image",
        "one lifetime per image, the control first (order A1 B1): no reversed pair",
    ]


def test_the_prompts_are_reproducible_token_ids() -> None:
    one = prompts(3, 8, seed=0)
    assert one == prompts(3, 8, seed=0)
    assert one != prompts(3, 8, seed=1)
    assert [len(p) for p in one] == [8, 8, 8]
    assert all(100 <= t < 20000 for p in one for t in p)

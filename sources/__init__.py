"""Source trees and what is read from them, below the resolver and the image side.

trees.py               git commits, repository paths and sdists, at their pinned revisions
requirements_files.py  requirements files read from a tree (pure parsing)
sdist.py               which index file is an sdist, and reading files out of a verified one
read.py                files of a source at its pinned revision, and its requirements files
contradictions.py      the manifest's exact versions against its sources' requirements files
third_party_pins.py    third_party/PINS of a driving source, checked against the manifest
patches.py             the files a patch series touches (pure parsing)
"""

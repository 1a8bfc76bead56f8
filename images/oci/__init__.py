"""OCI images on disk: a ``docker save`` archive normalized into a reproducible OCI image
layout (``normalize``), reading and writing such layouts with every blob checked against its
digest (``layout``), and a file-level comparison of two images (``diff``)."""

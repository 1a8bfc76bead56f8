"""What vouches for a published image: its SLSA provenance (``provenance``), the keys that sign
(``keys``), signatures and attestations in cosign's format (``cosign``) and the OCI artifacts
that attach them to the image's digest (``artifacts``)."""

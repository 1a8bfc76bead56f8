"""The fail-closed resolver: a stack manifest in, a hash-locked lock out."""

__version__ = "0.1.0"

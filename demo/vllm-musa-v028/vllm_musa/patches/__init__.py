"""The vLLM patch series (``series/*.patch``) and its strict applier (``build_apply.py``)."""

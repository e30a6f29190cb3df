"""CUDA graph trees (mode="reduce-overhead"): record once, replay while the guards hold.

Not built yet; see the CUDA graph trees issue. Nothing in framejit imports this package today.
"""

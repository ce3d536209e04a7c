"""Runnable examples; see the README's quick start."""

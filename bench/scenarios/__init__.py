"""The scenarios of `make bench`, one module each (bench/README.md)."""

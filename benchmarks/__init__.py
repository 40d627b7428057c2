"""Scripts that print numbers, run from the repository root as `python -m benchmarks.NAME`
(README.md here lists them); the helpers they share are in `benchmarks.common`."""

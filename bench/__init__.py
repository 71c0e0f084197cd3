"""Side-by-side benchmarks of embedding-search (``python -m bench``, ``make bench``); results go to BENCHMARKS.md."""

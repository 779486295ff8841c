"""Throughput and quality benchmarks behind `neoembed bench`."""

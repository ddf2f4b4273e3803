"""Evaluation and benchmarks (the top floor): BEIR suites, question sets, evaluation runs with
their admin, the fusion grid, speed benchmarks and the load test."""

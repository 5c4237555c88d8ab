"""Side-by-side benchmarks of our savers against LangGraph's reference savers.

Run `python -m benchmarks --help`. Performance is reported as ratios ours/reference of
medians measured in the same run (machines are shared and noisy, so absolute times say
little), with the targets of the benchmark issue marked PASS/MISS. Results go to
`benchmarks/results/latest.md` and `latest.json`.
"""

"""Conformance runner: LangGraph's own test suites against our savers (`python -m conformance`).

Not part of the installed package; see run.py for usage and README.md ("LangGraph drop-in").
"""

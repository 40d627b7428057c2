"""Evaluation suites (`launch.py --eval_suite NAME`): an encoder fine-tuned on every task of a
suite over several seeds, one table. catalog.py names the tasks, their recipes and the suites;
arms.py what is evaluated (a run, its checkpoints, a sweep's arms, the scratch baseline);
data_slices.py the held-out dev slices; plan.py the runs; execute.py runs them (resumable, in
parallel); results.py, suite_report.py and plots.py the table and figures."""

from encoder.suite.runner import run_suite

__all__ = ['run_suite']

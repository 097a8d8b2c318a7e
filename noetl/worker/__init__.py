"""Workers: lease tasks, run tools, report outcomes.

Kept free of imports: the python tool's child processes import this package.
"""

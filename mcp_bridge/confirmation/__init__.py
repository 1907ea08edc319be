"""The confirmation rules: the executor, the one gate that decides whether a call needs a yes, and what a
question leaves between turns."""

"""Reading the person's answer: what counts as yes, no, an edit or a choice among several calls."""

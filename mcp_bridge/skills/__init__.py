"""Skills: the skill files, their constraints and steps, and which tool each name means."""

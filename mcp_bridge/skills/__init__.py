"""Skills: the skill files (the plugin's YAML, and Rasa Pro Mantle's ``skills/<id>/skill.md`` with its
``mcp-bridge.yml``, translated into the same model), their constraints and steps, and which tool each
name means."""

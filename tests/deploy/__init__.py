"""deploy/: the Helm chart rendered with Helm itself, and the compose file read as compose reads it."""

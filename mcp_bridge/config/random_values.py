"""Whether a secret from the environment was drawn at random: a value copied from an example (a long
``replace-me-...`` too) is refused at start like a short one. Standard library only: the channels, in
Rasa's process, check their key with it too."""

from __future__ import annotations

__all__ = ["looks_like_a_placeholder"]

# Words of a value copied from an example or a template instead of drawn at random.
PLACEHOLDER_WORDS = (
    "change",
    "placeholder",
    "example",
    "replace",
    "your-secret",
    "your_secret",
    "secret-here",
)


def looks_like_a_placeholder(value: str) -> bool:
    """``value`` holds a placeholder's words, or too few different characters to be random."""
    lowered = value.lower()
    return any(word in lowered for word in PLACEHOLDER_WORDS) or len(set(value)) < 8

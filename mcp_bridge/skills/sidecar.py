"""``skills/<id>/mcp-bridge.yml``: the plugin's own keys for a Mantle skill, beside its ``skill.md``.

```yaml
action: action_log_interaction          # default: action_<the folder's name>
tool_constraints:                       # by tool: what the plugin adds to the front matter's
  add_timeline_note:
    requires_confirmation: {describe: 'Note on {contact_name}''s record: "{arg_text}"'}
    requires_approval_from: {role: supervisor}
    allows_remembering: {same_arguments: [contact_id], expires_after: 8h}
steps:                                  # by the id of an execute_tool step of the ordered block
  lookup:
    for_each: {slot: contact_emails, as: contact_email}
    fills: {contact_id: contact_id, contact_name: name}
    not_found_when_false: found
    on_not_found: utter_contact_not_found
  follow_up:
    when: {slot: follow_up_date}
reset_slots: [contact_email, note_text]
edits: {text: note_text, email: contact_email}
```

Every key means what it means in a skill file of the plugin (:mod:`mcp_bridge.skills.files`). Only
keys Mantle has no word for are here; what Mantle says (the question, the denial, ``on_success``,
``on_failure``, ``requires``, a ``collect``'s ``utterance``) stays in ``skill.md``. Mantle reads
``skill.md``, ``memory.yml``, ``responses.yml`` and a skill's tools' Python in the folder, and ignores
this file, so the folder stays a Mantle skill (its front matter would refuse these keys).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_bridge.config.yamlfile import load_yaml, schema_error
from mcp_bridge.skills.files import (
    ACTION_NAME,
    UNION_MEMBER_NAMES,
    AllowsRemembering,
    ForEach,
    RequiresApproval,
    ResultArgument,
    SlotArgument,
)

SIDECAR = "mcp-bridge.yml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SidecarConfirmation(_Strict):
    # The call's line in a question about several calls; the question itself is skill.md's.
    describe: str = Field(max_length=500)


class SidecarConstraint(_Strict):
    """A tool's constraint keys that Mantle does not have, added to its ``tool_constraints`` entry."""

    requires_confirmation: SidecarConfirmation | None = None
    requires_approval_from: RequiresApproval | None = None
    allows_remembering: AllowsRemembering | None = None


class SidecarStep(_Strict):
    """An ``execute_tool`` step's keys that Mantle does not have."""

    for_each: ForEach | None = None
    when: SlotArgument | ResultArgument | None = None
    fills: dict[str, str] = Field(default_factory=dict)
    on_not_found: str | None = None
    not_found_when_empty: str | None = None
    not_found_when_false: str | None = None
    list_format: str | None = None


class Sidecar(_Strict):
    action: str | None = Field(default=None, pattern=rf"^{ACTION_NAME.pattern}$")
    tool_constraints: dict[str, SidecarConstraint] = Field(default_factory=dict)
    steps: dict[str, SidecarStep] = Field(default_factory=dict)
    reset_slots: list[str] = Field(default_factory=list)
    edits: dict[Literal["text", "email"], str] = Field(default_factory=dict)


def read_sidecar(folder: Path) -> Sidecar:
    """The sidecar of the skill in ``folder`` (none: no keys); ConfigError with the file, the place and
    the reason."""
    path = folder / SIDECAR
    if not path.exists():
        return Sidecar()
    try:
        return Sidecar.model_validate(load_yaml(path) or {})
    except ValidationError as exc:
        raise schema_error(path, exc, skip=UNION_MEMBER_NAMES) from None
